//! The seam between the pipeline and where backups come from. Two questions every source
//! with a WAL archive answers the same way — so choosing a point in the recovery window
//! is written once (`draw_point` in the binary's `verify::select`) — and what a backup tool's
//! repository answers besides:
//!
//! - [`Archive`]: how far its archived WAL replays ([`Archive::reach`]). Objects under a
//!   `wal_prefix` ([`crate::sources::objects::WalArchive`]), a pgBackRest stanza
//!   ([`crate::sources::pgbackrest::Stanza`]) and a barman-cloud catalog
//!   ([`crate::sources::barman::Catalog`]).
//! - [`Repository`]: an archive whose tool restores a backup of its own catalog to a
//!   target and checks itself without a restore. The restorable backups with their stop
//!   times are the catalog the pipeline reads before it holds a `Repository`.

use crate::error::{RestoreError, StoreError};
use crate::server::reach::Reach;
use crate::server::sandbox::{Host, Sandbox};
use crate::store::{Backup, BackupStore};
use async_trait::async_trait;
use drcheck_config::RecoveryTarget;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Where a target's backups come from ([`crate::open::open_source`]): a store's objects,
/// or a backup tool's repository. The binary holds one of these and never names a tool.
#[async_trait]
pub trait Source: Send + Sync {
    /// What to call it in messages (never a secret).
    fn describe(&self) -> String;

    /// Whether reading its catalog runs a tool (then in `host`, a sandbox directory of
    /// its own, contained as for a restore); a store's objects are listed directly and
    /// [`Source::catalog`] is not asked.
    fn reads_with_a_tool(&self) -> bool;

    /// The backup tool's catalog: its restorable backups, oldest first, and the
    /// repository that restores them. `None` for a store's objects, which the pipeline
    /// lists and chooses from itself (by key, skipping uploads still in progress).
    async fn catalog(&self, host: &Sandbox, store: &Arc<dyn BackupStore>) -> Result<Option<Catalog>, StoreError>;

    /// Where its WAL is archived, when it has an archive: the repository's own, or the
    /// objects under `wal_prefix`.
    fn archive<'a>(&'a self, catalog: Option<&'a Catalog>) -> Option<&'a dyn Archive>;
}

/// What a backup tool's catalog holds.
pub struct Catalog {
    /// The repository, for messages.
    pub described: String,
    /// Its backups, oldest first (each with the tool's own record: status, kind, stop).
    pub restorable: Vec<Backup>,
    /// The repository that restores a backup of its catalog and checks itself.
    pub repository: Arc<dyn Repository>,
}

/// Where archived WAL lives, and how far it replays.
#[async_trait]
pub trait Archive: Send + Sync {
    /// What to call it in messages.
    fn describe(&self) -> String;

    /// The newest transaction end its WAL holds, read from the WAL itself; `None` when
    /// its newest segments hold none. Tools run contained beside `host`.
    async fn reach(
        &self,
        host: &Sandbox,
        store: &Arc<dyn BackupStore>,
        bins: &crate::server::pgbin::Binaries,
    ) -> Result<Option<Reach>, RestoreError>;

    /// Every archived WAL file — segments and timeline histories — with what identifies
    /// its stored version, for a follower ([`crate::Follower::step`]). With `after` (a
    /// segment), an archive whose files lie flat under its prefix lists only the keys
    /// that sort after that segment's — later segments and later timelines' histories: a
    /// cost that grows with what is new, not with the archive; others list everything.
    /// Tools run contained beside `host`.
    async fn files(
        &self,
        host: &Sandbox,
        store: &Arc<dyn BackupStore>,
        after: Option<&str>,
    ) -> Result<Vec<ArchivedFile>, RestoreError>;

    /// One archived file, as the server reads it (decompressed, decrypted), into `dest`
    /// (a file drcheck then hands to the server). Tools run contained beside `host`.
    async fn fetch_file(
        &self,
        host: &Sandbox,
        store: &Arc<dyn BackupStore>,
        file: &ArchivedFile,
        dest: &Path,
    ) -> Result<(), RestoreError>;
}

/// One file of a WAL archive, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedFile {
    /// What the server asks for: a segment (24 hex digits) or `XXXXXXXX.history`.
    pub name: String,
    /// Where it is stored (an object key, a path in a tool's repository), for messages.
    pub key: String,
    /// Its stored size.
    pub size: u64,
    /// What changes when the stored copy is replaced (an ETag; pgBackRest's file name,
    /// which carries the segment's SHA-1).
    pub version: Option<String>,
}

/// A backup tool's repository: restored and checked by the tool's own CLI.
#[async_trait]
pub trait Repository: Archive {
    /// `pgbackrest`, `barman-cloud`.
    fn tool(&self) -> &'static str;

    /// Restores `backup` of its catalog into the sandbox, fetches the WAL recovery needs
    /// while replaying it to `target`, and starts the server — a hot standby that goes
    /// on replaying what arrives in its spool when `standby` (a follower's seed).
    async fn restore(
        &self,
        sandbox: &mut Sandbox,
        store: &Arc<dyn BackupStore>,
        bins: &crate::server::pgbin::Binaries,
        backup: &Backup,
        how: Recover<'_>,
    ) -> Result<ToolRestored, RestoreError>;

    /// The repository checked without a restore (the tool's own verification where it
    /// has one, unless `reuse` says why a recent one stands; WAL continuity over `backups`).
    async fn integrity(
        &self,
        host: &Host,
        store: &Arc<dyn BackupStore>,
        backups: &[Backup],
        reuse: Option<&str>,
    ) -> Result<Integrity, RestoreError>;
}

/// How a tool's restore recovers.
#[derive(Debug, Clone, Copy)]
pub struct Recover<'a> {
    /// Where recovery stops.
    pub target: &'a RecoveryTarget,
    /// Onto the copy the last restore left, fetching only what differs (pgBackRest).
    pub delta: bool,
    /// A hot standby that goes on replaying what arrives (a follower's seed).
    pub standby: bool,
}

/// The outcome of a restore by a backup tool.
pub struct ToolRestored {
    pub recovered_to: Option<String>,
    /// The copy's transaction horizon (read right after recovery).
    pub horizon: Option<crate::server::recovery::Horizon>,
    pub wal_files: usize,
    /// The first WAL file missing after the backup's own (recovery stopped before it).
    pub wal_gap: Option<String>,
    /// How long the tool's restore took (WAL is fetched while recovery replays it).
    pub fetched_in: Duration,
    /// A delta restore: the bytes of the files it fetched (those that differed).
    pub bytes_fetched: Option<u64>,
    /// How replay and the WAL's fetch kept pace.
    pub(crate) pace: Option<crate::server::recovery::Pace>,
}

/// What a repository check found, without restoring anything.
#[derive(Debug, Clone, Default)]
pub struct Integrity {
    /// Problems, each naming what is wrong (a WAL file, a backup).
    pub problems: Vec<String>,
    /// What was looked at, for the finding's coverage.
    pub backups: u64,
    pub wal_files: u64,
    /// What the tool itself said, summarised.
    pub notes: Vec<String>,
    /// How long the tool's own verification took, when it ran (barman-cloud has none).
    pub tool_seconds: Option<f64>,
}
