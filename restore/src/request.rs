//! What a restore is asked ([`RestoreJob`]: inputs only) and what it gives back
//! ([`Restored`]; on the way, [`RestoreEvent`]s),
//! shared by every restore method; the dispatch ([`crate::job`]) depends on the
//! methods, and the methods only on this.

use crate::error::{RestoreError, Stage};
pub(crate) use crate::events::{Events, RestoreEvent};
use crate::server::recovery::WalReplay;
use crate::server::sandbox::{Sandbox, SandboxOptions};
use crate::store::{Backup, BackupStore};
use crate::transfer::fetch::FetchOptions;
use drcheck_config::FormatSetting;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Everything a restore needs to know.
pub struct RestoreJob<'a> {
    pub store: Arc<dyn BackupStore>,
    pub backup: &'a Backup,
    pub fetch: FetchOptions,
    pub sandbox: SandboxOptions,
    pub bins: crate::server::pgbin::Binaries,
    pub format: FormatSetting,
    pub jobs: u32,
    /// A `pg_dumpall --globals-only` script in the store, applied before the restore.
    pub globals_key: Option<String>,
    pub wal: Option<WalReplay>,
    /// A backup from a backup tool's catalog: restored by the tool's own CLI.
    pub delegated: Option<Delegated>,
    /// How far WAL is replayed (physical restores with an archive).
    pub recovery_target: drcheck_config::RecoveryTarget,
    /// For physical backups: the database validators will look at.
    pub database_hint: Option<String>,
    /// Where the restore tells what it learns as it goes ([`RestoreEvent`]): the format,
    /// the bytes received, the sandbox's start, the key that opened an encrypted backup.
    pub events: Events,
    /// The most the restore may write into its directory (the backup's size ×
    /// `max_expansion`, at most the free space less a reserve); beyond, it fails.
    pub max_write_bytes: u64,
    /// The part of that limit that comes from the backup's size (× `max_expansion`, plus
    /// what any cluster needs): beyond it the backup is to blame, below it the disk.
    pub expansion_ceiling: u64,
    /// The keys that open encrypted backups.
    pub decrypt: &'a drcheck_config::DecryptConfig,
    /// A backup tool's restore onto the copy already in the (kept) sandbox, fetching
    /// only what changed (`pgbackrest restore --delta`).
    pub delta: bool,
    /// A PostgreSQL 17+ incremental backup's earlier links, oldest (the full backup)
    /// first ([`crate::sources::chain::links`]); empty for a self-contained backup.
    pub chain: Vec<Backup>,
}

/// What undoing the backup's layers needs, from the job.
impl<'a> From<&'a RestoreJob<'a>> for crate::transfer::peel::Peel<'a> {
    fn from(job: &'a RestoreJob<'a>) -> Self {
        crate::transfer::peel::Peel {
            decrypt: job.decrypt,
            events: &job.events,
            expansion_ceiling: job.expansion_ceiling,
        }
    }
}

/// A backup tool's repository that restores a backup of its own catalog.
pub type Delegated = Arc<dyn crate::source::Repository>;

/// A restored database, running in its sandbox.
pub struct Restored {
    pub sandbox: Sandbox,
    pub database: String,
    pub format: String,
    /// A physical copy (a base backup, or a backup tool's): replayed, not loaded.
    pub physical: bool,
    /// From the first request to the last byte received from the store.
    pub fetch: Duration,
    /// From the start of the restore method to a database that accepts connections.
    pub restore: Duration,
    /// Physical backups replayed from a WAL archive: the last replayed commit's time.
    pub recovered_to: Option<String>,
    /// Base backups: what checking the files against `backup_manifest` found — said
    /// even when it could not be done.
    pub manifest: Option<String>,
    /// When the backup's data is from, as the backup itself (or its tool's catalog)
    /// says; `None` when nothing says so.
    pub consistent_at: Option<Consistency>,
    /// Plain dumps restored without the source's roles: how many ownership and
    /// privilege statements were left out (`None`: none, or not a plain dump).
    pub skipped_privileges: Option<u64>,
    /// Physical restores: the copy's transaction horizon, read before drcheck wrote
    /// anything to it.
    pub horizon: Option<Horizon>,
    /// What a delta restore fetched (the files that differed from the copy it went onto).
    pub bytes_fetched: Option<u64>,
    /// A base backup replayed to the latest point from a store's WAL archive: whether
    /// the archive runs without a gap from the backup's start to its newest segment.
    pub archive: Option<ArchiveCheck>,
    /// An incremental backup's chain: how long `pg_combinebackup` took to make one data
    /// directory of its links (part of the restore).
    pub combine: Option<Duration>,
    /// A streamed WAL replay: what set its pace — the store (recovery waited for files)
    /// or the replaying process on the CPU or waiting on the disk (its own usage, as the
    /// server logged it) — and how far ahead the fetch ran.
    pub replay: Option<String>,
}

/// The WAL archive from a base backup's start on, as a restore to the latest point found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveCheck {
    /// The backup's first segment.
    pub start: String,
    /// The archive's newest segment.
    pub newest: String,
    /// Segments continuous from `start` (up to the gap, or to `newest`).
    pub files: usize,
    /// The first segment missing while later ones are archived: recovery stops before it.
    pub gap: Option<String>,
    /// The gap may be an upload still in flight (the archiver has not moved on for
    /// `GAP_GRACE`, and fewer than `GAP_IN_FLIGHT` segments follow it).
    pub in_flight: bool,
}

pub(crate) use crate::server::recovery::Horizon;

/// The time a backup's data is consistent as of — never an object's upload time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Consistency {
    pub at: std::time::SystemTime,
    /// Where it was read: `dump header`, `plain dump header`, `backup_label`, or
    /// `catalog`.
    pub source: &'static str,
}

/// The database logical dumps are restored into, inside the sandbox.
pub(crate) const RESTORED_DB: &str = "restored";

/// Reads a small object (a sidecar, a globals script) whole.
pub(crate) async fn read_small(store: &dyn BackupStore, key: &str) -> Result<String, RestoreError> {
    let obj = store.stat(key).await?;
    if obj.size > 64 << 20 {
        return Err(RestoreError::bad(
            Stage::Fetch,
            format!("{key} is {} bytes; expected a small text file", obj.size),
        ));
    }
    let bytes = if obj.size == 0 { Default::default() } else { store.read_range(key, 0, obj.size).await? };
    String::from_utf8(bytes.to_vec()).map_err(|_| RestoreError::bad(Stage::Fetch, format!("{key} is not UTF-8 text")))
}

pub(crate) type FetchEnd = Arc<Mutex<Option<Instant>>>;
