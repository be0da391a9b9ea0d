-- Issue 46: drcheck's journal of each target's primary — its transaction horizon
-- (`pg_snapshot_xmin(pg_current_snapshot())`, read only) with the primary's clock, taken
-- by every run and by the daemon every journal_interval, with the primary's insert
-- counters (JSON) where read. A backup at T is judged by the newest sample at or before
-- T less as_of_grace: every primary row version below that horizon existed, unchanged,
-- at T. Decided from the primary and drcheck's own records, never from the backup.
create table primary_horizons (
    target text not null,
    sampled_at text not null,
    horizon_xmin bigint not null,
    horizon_xmax bigint not null,
    system_identifier text,
    counters text,
    primary key (target, sampled_at)
);

-- Each table a target's comparisons looked at: when first seen and when last decided in
-- full (proven, or changed on the primary since the copy's point). A table not decided
-- within prove_within is named in the run's `unproven_tables` finding.
create table table_proofs (
    target text not null,
    table_name text not null,
    first_seen_at text not null,
    last_proven_at text,
    primary key (target, table_name)
);

-- primary_read_budget: the seed that maps ranges to slices, drawn at random when a
-- rotation's cycle starts (every slice compared since is the cycle's), so a backup
-- cannot know which slice its rows fall into.
create table rotation_seeds (
    target text primary key,
    slices bigint not null,
    seed bigint not null,
    drawn_at text not null
);
