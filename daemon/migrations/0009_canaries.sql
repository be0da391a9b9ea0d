-- Issue 38: each canary of a target (`drcheck canary`): the defective copies made of its
-- newest proven backup, whether each was caught, and whether each sink accepted the
-- canary alert (the report, JSON). Never a run: runs, proofs, coverage and freshness do
-- not read this table.
create table canaries (
    canary_id text primary key,
    target text not null,
    result text not null,
    started_at text not null,
    finished_at text not null,
    report_json text not null
);
create index canaries_by_target on canaries (target, finished_at);
