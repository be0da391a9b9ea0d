//! The seam between the pipeline and where backups come from. Two questions every source
//! with a WAL archive answers the same way — so choosing a point in the recovery window
//! is written once (`drcheck::pipeline::draw_point`) — and what a backup tool's
//! repository answers besides:
//!
//! - [`Archive`]: how far its archived WAL replays ([`Archive::reach`]). Objects under a
//!   `wal_prefix` ([`crate::sources::objects::WalArchive`]), a pgBackRest stanza
//!   ([`crate::sources::pgbackrest::Stanza`]) and a barman-cloud catalog
//!   ([`crate::sources::barman::Catalog`]).
//! - [`Repository`]: an archive whose tool restores a backup of its own catalog to a
//!   target and checks itself without a restore. The restorable backups with their stop
//!   times are the catalog the pipeline reads before it holds a `Repository`.

use crate::error::RestoreError;
use crate::server::reach::Reach;
use crate::server::sandbox::{Host, Sandbox};
use crate::sources::delegate::Integrity;
use crate::store::{Backup, BackupStore};
use async_trait::async_trait;
use drcheck_config::RecoveryTarget;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

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
        pg_bindir: Option<&Path>,
    ) -> Result<Option<Reach>, RestoreError>;
}

/// A backup tool's repository: restored and checked by the tool's own CLI.
#[async_trait]
pub trait Repository: Archive {
    /// `pgbackrest`, `barman-cloud`.
    fn tool(&self) -> &'static str;

    /// Restores `backup` of its catalog into the sandbox, fetches the WAL recovery needs
    /// while replaying it to `target`, and starts the server.
    async fn restore(
        &self,
        sandbox: &mut Sandbox,
        store: &Arc<dyn BackupStore>,
        pg_bindir: Option<&Path>,
        backup: &Backup,
        target: &RecoveryTarget,
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

/// The outcome of a restore by a backup tool.
pub struct ToolRestored {
    pub recovered_to: Option<String>,
    /// The copy's transaction horizon (read right after recovery).
    pub horizon: Option<crate::request::Horizon>,
    pub wal_files: usize,
    /// The first WAL file missing after the backup's own (recovery stopped before it).
    pub wal_gap: Option<String>,
    /// How long the tool's restore took (WAL is fetched while recovery replays it).
    pub fetched_in: Duration,
}
