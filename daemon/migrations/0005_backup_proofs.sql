-- Each backup's proof, kept while the backup is in the store whatever keep_runs prunes
-- from the runs: when it first and last passed a verification (and which run), the time
-- its data is consistent as of, and how many points in time were proven from it.
-- least-proven, coverage, `drcheck backups list` and the evidence all read it.
create table backup_proofs (
    target text not null,
    backup_key text not null,
    consistent_at text,
    first_passed_at text not null,
    last_passed_at text not null,
    last_run_id text not null,
    points_proven bigint not null default 0,
    primary key (target, backup_key)
);

-- The proofs the runs still hold.
insert into backup_proofs (target, backup_key, consistent_at, first_passed_at, last_passed_at, last_run_id, points_proven)
select r.target, r.backup_key, max(r.backup_created_at), min(r.finished_at), max(r.finished_at),
       (select r2.run_id from runs r2
         where r2.target = r.target and r2.backup_key = r.backup_key and r2.result = 'passed'
         order by r2.finished_at desc, r2.run_id desc limit 1),
       sum(case when r.report_json like '%"recovery_target":{%' then 1 else 0 end)
  from runs r
 where r.result = 'passed' and r.backup_key is not null
 group by r.target, r.backup_key;

-- The newest points a target's runs have seen, whichever backup each run proved: the
-- freshness gauges read them, so proving an older backup never moves them back, in the
-- daemon or in a one-shot run's push.
create table freshness (
    target text primary key,
    backup_at text,
    recoverable_point text,
    measured_at text
);
