-- One row per verification run; the full report is kept as JSON beside the columns
-- that queries and dashboards filter on.
create table runs (
    run_id text primary key,
    target text not null,
    result text not null,
    started_at text not null,
    finished_at text not null,
    backup_key text,
    backup_size_bytes bigint,
    backup_created_at text,
    backup_format text,
    rto_target_seconds double precision not null,
    rto_measured_seconds double precision,
    rto_met integer,
    rpo_target_seconds double precision not null,
    rpo_backup_age_seconds double precision,
    rpo_met integer,
    error_stage text,
    error_message text,
    report_json text not null
);
create index runs_by_target on runs (target, started_at);

create table run_phases (
    run_id text not null references runs (run_id) on delete cascade,
    name text not null,
    seconds double precision not null,
    primary key (run_id, name)
);

create table run_validators (
    run_id text not null references runs (run_id) on delete cascade,
    name text not null,
    status text not null,
    detail text not null,
    primary key (run_id, name)
);
