-- The newest run of a backup tool's own verification of a target's repository
-- (`pgbackrest verify`): a verify run with an integrity_schedule reuses a passed one
-- younger than the schedule's period instead of re-reading the whole repository.
create table tool_checks (
    target text primary key,
    checked_at text not null,
    passed bigint not null,
    seconds double precision not null
);
