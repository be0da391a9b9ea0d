//! One restore, start to finish: a fresh sandbox, then the method the backup's source
//! calls for — objects ([`crate::sources::objects`], [`crate::sources::physical`]), or delegation to a
//! backup tool ([`crate::sources::pgbackrest`], [`crate::sources::barman`]) — all sharing recovery
//! ([`crate::server::recovery`]). The whole restore is watched: it fails as soon as its
//! directory grows beyond what the backup's size explains.

use crate::error::{RestoreError, Stage};
use crate::server::sandbox::Sandbox;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub(crate) use crate::request::{RestoreJob, Restored};

/// Restores `job`'s backup; fails it as soon as the run's directory grows beyond
/// `max_write_bytes` (whatever writes there: unpacking, staging, the server itself).
pub async fn run(job: &RestoreJob<'_>) -> Result<Restored, RestoreError> {
    let root = crate::server::sandbox::sandbox_root(&job.sandbox)?;
    tokio::select! {
        r = run_inner(job) => r,
        e = watch_usage(root, job.max_write_bytes, job.expansion_ceiling) => Err(e),
    }
}

/// How often the file system's used space is read (one `statvfs`).
const POLL: Duration = Duration::from_millis(250);
/// A walk of the run's directory costs at most 1/WALK_SHARE of the time between walks
/// (1 %: the watcher's budget is 2 % of a core, statvfs polls included).
const WALK_SHARE: u32 = 100;
/// And there is at least this long between walks (the first one included: its cost is
/// not known before it ran).
const MIN_WALK_INTERVAL: Duration = Duration::from_secs(30);

/// The used bytes of the file system holding `dir`.
fn fs_used(dir: &Path) -> Option<u64> {
    let s = nix::sys::statvfs::statvfs(dir).ok()?;
    Some((s.blocks() as u64).saturating_sub(s.blocks_free() as u64).saturating_mul(s.fragment_size() as u64))
}

/// Watches what the restore writes and returns once it exceeds `limit`. Its cost does
/// not grow with the number of files: every [`POLL`] it reads the file system's used
/// space (`statvfs`), whose growth since the start bounds what the restore wrote from
/// above (others' writes only add to it); only when that bound passes the limit — and
/// as a backstop, rarely ([`MIN_WALK_INTERVAL`], or [`WALK_SHARE`] times the last walk's
/// duration) — does it walk the directory to count exactly.
async fn watch_usage(root: PathBuf, limit: u64, expansion_ceiling: u64) -> RestoreError {
    let mut stats = WatchStats::default();
    // The private directory exists before the sandbox does: same file system.
    let fs = root.parent().map(Path::to_path_buf).unwrap_or_else(|| root.clone());
    let mut baseline = fs_used(&fs).unwrap_or(0);
    let mut next_walk = Instant::now() + MIN_WALK_INTERVAL;
    loop {
        tokio::time::sleep(POLL).await;
        stats.polls += 1;
        let used_fs = fs_used(&fs);
        let bound = used_fs.map(|u| u.saturating_sub(baseline));
        let must_walk = bound.is_none_or(|b| b > limit) || Instant::now() >= next_walk;
        if !must_walk {
            continue;
        }
        let dir = root.clone();
        let started = Instant::now();
        let used = tokio::task::spawn_blocking(move || disk_usage(&dir)).await.unwrap_or(0);
        let took = started.elapsed();
        stats.walks += 1;
        stats.walking += took;
        if used > limit {
            // Past what the backup's size explains: the backup's (a bomb). Within it, but
            // past the free space: the disk is too small for this backup — the world's.
            return if used > expansion_ceiling {
                RestoreError::bad(
                    Stage::Restore,
                    format!(
                        "{} {expansion_ceiling} bytes: the restore wrote {used} bytes (its size × sandbox.max_expansion, plus 1 GiB)",
                        crate::transfer::stream::EXPANSION_EXCEEDED
                    ),
                )
            } else {
                RestoreError::infra(
                    Stage::Restore,
                    format!(
                        "scratch_dir has too little room for this backup: the restore wrote {used} bytes, {limit} were free (less a reserve)"
                    ),
                )
            };
        }
        // Others wrote the rest: from now on count from here.
        if let Some(u) = used_fs {
            baseline = u.saturating_sub(used);
        }
        next_walk = Instant::now() + MIN_WALK_INTERVAL.max(took * WALK_SHARE);
    }
}

/// What watching cost, logged when the restore ends (the benchmark reads it).
#[derive(Default)]
struct WatchStats {
    polls: u64,
    walks: u64,
    walking: Duration,
}

impl Drop for WatchStats {
    fn drop(&mut self) {
        tracing::debug!(
            polls = self.polls,
            walks = self.walks,
            walking_seconds = self.walking.as_secs_f64(),
            "restore watcher finished"
        );
    }
}

/// Bytes allocated beneath `dir`, never following links.
pub fn disk_usage(dir: &Path) -> u64 {
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
    let Some(d) = &job.delegated else { return crate::sources::objects::restore(job, sandbox, started).await };
    let kind = job.backup.catalog.as_ref().map_or("", |c| c.kind.as_str());
    let format = format!("physical ({} {kind})", d.tool());
    job.events.send(crate::events::RestoreEvent::Format(format.clone()));
    let r = d
        .restore(
            &mut sandbox,
            &job.store,
            &job.bins,
            job.backup,
            crate::source::Recover {
                target: &job.recovery_target,
                delta: job.delta,
                standby: job.wal.as_ref().is_some_and(|w| w.standby),
            },
        )
        .await?;
    let bytes_fetched = r.bytes_fetched;
    let (recovered_to, wal_files, wal_gap, fetched_in) = (r.recovered_to, r.wal_files, r.wal_gap, r.fetched_in);
    let horizon = r.horizon;
    let pace = r.pace;
    let database = job.database_hint.clone().unwrap_or_else(|| "postgres".into());
    Ok(Restored {
        sandbox,
        database,
        format,
        physical: true,
        fetch: fetched_in,
        restore: started.elapsed().saturating_sub(fetched_in),
        recovered_to,
        manifest: Some(format!(
            "restored by {}; {wal_files} WAL files replayed{}",
            d.tool(),
            wal_gap.map(|g| format!(" (the archive has a gap at {g}: recovery stopped before it)")).unwrap_or_default()
        )),
        // The tool's catalog says when the backup stopped.
        consistent_at: job
            .backup
            .catalog
            .as_ref()
            .map(|_| crate::request::Consistency { at: job.backup.last_modified, source: "catalog (backup stop)" }),
        skipped_privileges: None,
        horizon,
        bytes_fetched,
        archive: None,
        combine: None,
        replay: pace.map(|p| p.said()),
    })
}
