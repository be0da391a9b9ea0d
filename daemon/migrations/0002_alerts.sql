-- The alert outbox: written in the same transaction as the run that raised the alert,
-- delivered at least once by the dispatcher, moved to dead_letters after max_attempts.
create table alert_outbox (
    id text primary key,
    sink text not null,
    target text not null,
    alertname text not null,
    state text not null,
    dedup_key text not null,
    run_id text,
    payload text not null,
    attempts integer not null default 0,
    next_attempt_at text not null,
    created_at text not null,
    last_error text
);
create index alert_outbox_due on alert_outbox (next_attempt_at);

create table alert_dead_letters (
    id text primary key,
    sink text not null,
    target text not null,
    alertname text not null,
    state text not null,
    dedup_key text not null,
    run_id text,
    payload text not null,
    attempts integer not null,
    created_at text not null,
    dead_at text not null,
    last_error text
);

create table alerts_delivered (
    id text primary key,
    sink text not null,
    dedup_key text not null,
    delivered_at text not null
);

-- Which alerts fire for each target now, and since which run (the episode).
create table alert_state (
    target text not null,
    alertname text not null,
    episode text not null,
    since text not null,
    primary key (target, alertname)
);

-- At most one verification per target at a time, across processes.
create table leases (
    target text primary key,
    holder text not null,
    expires_at text not null
);
