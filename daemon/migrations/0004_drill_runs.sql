-- Every DR drill run with a config, so drcheck_drill_runs_total counts them all (each
-- push to the Pushgateway replaces the group: the totals come from here).
create table drill_runs (
    drill_id text primary key,
    runbook text not null,
    result text not null,
    started_at text not null,
    finished_at text not null
);
create index drill_runs_by_runbook on drill_runs (runbook);
