-- Issue 48: every run traceable. A run's row is written when it starts (under the id its
-- log prints and the trigger API answered), so a run killed outright (SIGKILL, the OOM
-- killer) leaves it: the next run that takes the target's lease records it `aborted`
-- under that same id. A triggered run that never started (the lease held by another
-- instance, shutdown) is kept `skipped`, with the reason. A run's row here is removed
-- when its report is recorded in `runs`.
create table run_starts (
    run_id text primary key,
    target text not null,
    holder text not null,
    state text not null,
    started_at text not null,
    reason text
);
create index run_starts_by_target on run_starts (target, started_at);
