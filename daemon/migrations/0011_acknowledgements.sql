-- Issue 48: what an operator decided, recorded: a proven backup deleted on purpose
-- (`drcheck backups forget`: its proof and pins are dropped, so later runs no longer fail
-- `pinned` for it) and WAL segments known lost (`drcheck archive acknowledge-gap`: the
-- follower and the `archive` finding name the gap instead of failing on it). Each with who,
-- when and why; the evidence report lists them. Never removed.
create table acknowledgements (
    id text primary key,
    target text not null,
    kind text not null,
    subject text not null,
    subject_to text,
    reason text not null,
    acknowledged_by text not null,
    acknowledged_at text not null
);
create index acknowledgements_by_target on acknowledgements (target, acknowledged_at);
