//! One restore, start to finish: a fresh sandbox, then the method the backup's source
//! calls for — objects ([`crate::objects`], [`crate::physical`]), or delegation to a
//! backup tool ([`crate::pgbackrest`], [`crate::barman`]) — all sharing recovery
//! ([`crate::recovery`]). The whole restore is watched: it fails as soon as its
//! directory grows beyond what the backup's size explains.

use crate::error::{RestoreError, Stage};
use crate::logical;
use crate::sandbox::Sandbox;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use crate::request::{Delegated, RESTORED_DB, RestoreJob, Restored};

/// Restores `job`'s backup; fails it as soon as the run's directory grows beyond
/// `max_write_bytes` (whatever writes there: unpacking, staging, the server itself).
pub async fn run(job: &RestoreJob<'_>) -> Result<Restored, RestoreError> {
    let root = crate::leftovers::private_dir(&job.sandbox.scratch_dir).join(format!(
        "{}{}",
        crate::sandbox::SANDBOX_PREFIX,
        job.sandbox.run_id
    ));
    tokio::select! {
        r = run_inner(job) => r,
        e = watch_usage(root, job.max_write_bytes) => Err(e),
    }
}

/// Polls the disk usage of `root` and returns once it exceeds `limit`.
async fn watch_usage(root: PathBuf, limit: u64) -> RestoreError {
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let dir = root.clone();
        let used = tokio::task::spawn_blocking(move || disk_usage(&dir)).await.unwrap_or(0);
        if used > limit {
            return RestoreError::bad(
                Stage::Restore,
                format!(
                    "{} {limit} bytes: the restore wrote {used} bytes (its size × sandbox.max_expansion, or the free space in scratch_dir less a reserve)",
                    logical::EXPANSION_EXCEEDED
                ),
            );
        }
    }
}

/// Bytes allocated beneath `dir`, never following links.
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let Ok(m) = e.path().symlink_metadata() else { continue };
            total += m.blocks() * 512;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}

async fn run_inner(job: &RestoreJob<'_>) -> Result<Restored, RestoreError> {
    let started = Instant::now();
    let mut sandbox = Sandbox::create(&job.sandbox)?;
    let Some(d) = &job.delegated else { return crate::objects::restore(job, sandbox, started).await };
    let kind = job.backup.catalog.as_ref().map_or("", |c| c.kind.as_str());
    let format = format!("physical ({} {kind})", d.tool());
    (job.on_format)(&format);
    let (recovered_to, wal_files, wal_gap, fetched_in) = match d {
        Delegated::Pgbackrest(repo, catalog) => {
            let r =
                repo.restore(&mut sandbox, job.pg_bindir.as_deref(), job.backup, catalog, &job.recovery_target).await?;
            (r.recovered_to, r.wal_files, r.wal_gap, r.fetched_in)
        }
        Delegated::Barman(catalog) => {
            let r = catalog
                .restore(&mut sandbox, &job.store, job.pg_bindir.as_deref(), job.backup, &job.recovery_target)
                .await?;
            (r.recovered_to, r.wal_files, r.wal_gap, r.fetched_in)
        }
    };
    let database = job.database_hint.clone().unwrap_or_else(|| "postgres".into());
    Ok(Restored {
        sandbox,
        database,
        format,
        fetch: fetched_in,
        restore: started.elapsed().saturating_sub(fetched_in),
        recovered_to,
        manifest: Some(format!(
            "restored by {}; {wal_files} WAL files replayed{}",
            d.tool(),
            wal_gap.map(|g| format!(" (the archive has a gap at {g}: recovery stopped before it)")).unwrap_or_default()
        )),
    })
}
