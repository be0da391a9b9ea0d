//! drcheck's restore side: where backups live and how one becomes a running database.
//! This crate never compares data: that is `drcheck-validators`' job.
//!
//! Its face is the list below; the layers behind it are the crate's own (see
//! `layers.rs` for the rooms and the rule that imports point down):
//! - where backups are: [`open_store`] ([`BackupStore`], [`Backup`]) and
//!   [`open_source`] ([`Source`], [`Catalog`]: a store's objects or a backup tool's
//!   repository);
//! - one restore: [`RestoreJob`] in, [`run`], [`Restored`] out, [`RestoreEvent`]s on the
//!   way, [`RestoreError`] (with its [`Blame`]) when it fails;
//! - the [`Sandbox`] a backup becomes, and what the binary needs of containment
//!   ([`contain`]), stores' retries ([`retry`]) and circuit breakers ([`breaker`]).

#![warn(unreachable_pub)]

pub mod canary;
mod error;
mod events;
mod follow;
#[cfg(test)]
mod fuzz;
mod job;
mod layers;
mod open;
mod request;
mod server;
mod source;
mod sources;
mod store;
mod transfer;

pub use server::contain;
pub use store::{breaker, retry};

pub use error::{Blame, Malformed, RestoreError, Stage, StoreError, with_reason};
pub use events::{Decryption, Events, RestoreEvent};
pub use follow::{
    FollowState, Follower, NotReplayable, Paused, Step as FollowStep, format_lsn, parse_lsn,
    read_state as read_follow_state,
};
pub use job::{disk_usage, run};
pub use open::{open_source, tool_files_root};
pub use request::{ArchiveCheck, Consistency, Delegated, RestoreJob, Restored};
pub use server::leftovers::{
    DirError, Owner, ensure_cache_dir, ensure_cache_dir_at, ensure_follow_dir, machine_id, process_running,
};
pub use server::pgbin::{Binaries, BinariesError, PgBin};
pub use server::reach::Reach;
pub use server::recovery::{Horizon, WalReplay};
pub use server::sandbox::{Sandbox, SandboxOptions, ToolLimit, containment_name, finish_teardowns, reap_leftovers};
pub use source::{Archive, ArchivedFile, Catalog, Recover, Repository, Source};
pub use sources::chain::{Label as ChainLabel, links as chain_links, read_label};
pub use sources::physical::{GAP_GRACE, wal_objects};
pub use sources::settled::{one_tar_complete, whole_by_contents};
pub use store::{
    Backup, BackupObject, BackupStore, CatalogEntry, CatalogStatus, MemStore, ObjectLock, Protection, UPLOAD_GRACE,
    WriteProbe, backups_newest_first, group_backups, open_store, select_latest,
};
pub use transfer::fetch::{FetchOptions, WINDOW as FETCH_WINDOW, parallel as fetch_parallel};
pub use transfer::peel::{Peel, peel};
pub use transfer::stream::{Copy, copy_in_blocks, read_head, rejoin};
