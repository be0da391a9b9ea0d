//! The sources: where backups come from and how each becomes a restored server —
//! objects in a store ([`objects`]: logical dumps through [`crate::transfer::stream`] and
//! [`crate::server::tools`], base backups through [`physical`]) and backup tools' repositories restored by their own CLIs
//! ([`pgbackrest`], [`barman`], sharing [`delegate`]). Every source answers the same
//! questions through [`crate::source::Source`]: its catalog, how far its archive
//! replays, a restore to a target, its integrity.

pub(crate) mod barman;
pub(crate) mod chain;
pub(crate) mod delegate;
pub(crate) mod objects;
pub(crate) mod pgbackrest;
pub(crate) mod physical;
pub(crate) mod plain;
pub(crate) mod settled;
