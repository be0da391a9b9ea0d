//! Physical restores of `pg_basebackup -Ft` backups: `base.tar[.gz|.zst|.lz4]` is
//! unpacked into the sandbox's data directory and `pg_wal.tar[…]` into its `pg_wal`;
//! `pg_verifybackup` checks it against `backup_manifest` when there is one; the sandbox
//! writes its own `pg_hba.conf` and overrides settings that travel with the primary
//! (archiving, preloaded libraries); then the server runs recovery to consistency —
//! or, with a WAL archive configured, replays archived WAL (drcheck fetches it into a
//! spool and serves it through `restore_command`) to the recovery target.

use crate::error::{RestoreError, Stage};
use crate::fetch;
use crate::format::{self, BackupFormat};
use crate::job::{FetchEnd, RestoreJob, Restored, read_small};
use crate::logical::{self, Counting};
use crate::pgbin;
use crate::sandbox::{Sandbox, tail};
use crate::store::{BackupObject, BackupReader, is_base_tar};
use drcheck_config::RecoveryTarget;
use futures::stream::{self, StreamExt, TryStreamExt};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

/// Archived WAL to replay after a base backup.
#[cfg(test)]
mod tests {
    #[test]
    fn recovery_target_time_is_in_postgres_form() {
        assert_eq!(super::pg_timestamp("2026-11-30T08:36:06.268191Z"), "2026-11-30 08:36:06.268191+00");
    }
}

#[derive(Debug, Clone)]
pub struct WalReplay {
    pub prefix: String,
    pub target: RecoveryTarget,
}

/// Recovery can take long; the pipeline's RTO deadline is what bounds it.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

fn name_of(o: &BackupObject) -> &str {
    o.key.rsplit('/').next().unwrap_or(&o.key)
}

/// Fetches and unpacks one tar part (compressed or not) into `dest`.
async fn unpack_part(job: &RestoreJob<'_>, part: &BackupObject, dest: &Path, done: u64) -> Result<(), RestoreError> {
    let store = job.store.describe();
    let raw = fetch::parallel(job.store.clone(), &part.key, part.size, job.fetch);
    let progress = job.progress.clone();
    let (counted, _) = Counting::new(raw, Arc::new(move |n| progress(done + n)));
    let mut reader: BackupReader = Box::pin(counted);
    let head = logical::read_head(&mut reader, &store).await?;
    let outer = format::detect(&head);
    let (reader, head) = match outer {
        BackupFormat::Gzip | BackupFormat::Zstd | BackupFormat::Lz4 => {
            let mut d = logical::decompress(outer, head, reader);
            let h = logical::read_head(&mut d, &store).await?;
            (d, h)
        }
        _ => (reader, head),
    };
    if format::detect(&head) != BackupFormat::Tar {
        return Err(RestoreError::bad(
            Stage::Restore,
            format!("{} should be a tar archive, but holds {} data", part.key, format::detect(&head)),
        ));
    }
    logical::extract_tar(head, reader, dest, &store).await
}

pub async fn restore(job: &RestoreJob<'_>, sandbox: Sandbox, started: Instant) -> Result<Restored, RestoreError> {
    let parts = &job.backup.parts;
    let base = parts.iter().find(|p| is_base_tar(name_of(p)));
    let base = base.ok_or_else(|| RestoreError::bad(Stage::Select, format!("{} has no base.tar", job.backup.key)))?;
    let wal = parts.iter().find(|p| name_of(p).starts_with("pg_wal.tar"));
    if let Some(extra) = parts.iter().find(|p| {
        let n = name_of(p);
        n.contains(".tar") && !is_base_tar(n) && !n.starts_with("pg_wal.tar") && !n.ends_with(".sha256")
    }) {
        return Err(RestoreError::bad(
            Stage::Restore,
            format!("{}: backups with tablespaces (extra tar files) are not supported yet", extra.key),
        ));
    }
    let restore_started = Instant::now();
    let data = sandbox.data_dir().to_path_buf();
    unpack_part(job, base, &data, 0).await?;
    if let Some(wal) = wal {
        unpack_part(job, wal, &data.join("pg_wal"), base.size).await?;
    }
    let fetch_end: FetchEnd = Arc::new(Mutex::new(Some(Instant::now())));
    if let Some(manifest) = parts.iter().find(|p| name_of(p) == "backup_manifest") {
        let text = read_small(job.store.as_ref(), &manifest.key).await?;
        verify_backup(&sandbox, &data, &text).await?;
    }
    restore_unpacked(job, sandbox, &data, started, fetch_end, restore_started).await
}

/// Checks the unpacked files against the backup's manifest with `pg_verifybackup`.
async fn verify_backup(sandbox: &Sandbox, data: &Path, manifest: &str) -> Result<(), RestoreError> {
    let major = read_major(data)?;
    let Ok(bin) = pgbin::for_major(None, Some(major), true) else { return Ok(()) };
    let tool = bin.tool("pg_verifybackup");
    if !tool.is_file() {
        return Ok(());
    }
    let path = sandbox.root().join("backup_manifest");
    std::fs::write(&path, manifest)
        .map_err(|e| RestoreError::infra(Stage::Restore, format!("{}: {e}", path.display())))?;
    let out = tokio::process::Command::new(&tool)
        .arg("-q")
        .arg("-m")
        .arg(&path)
        .arg(data)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.dir.display()))
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| RestoreError::infra(Stage::Restore, format!("cannot run {}: {e}", tool.display())))?;
    if !out.status.success() {
        return Err(RestoreError::bad(
            Stage::Restore,
            format!("pg_verifybackup found the backup does not match its manifest: {}", tail(&out.stderr, 4000)),
        ));
    }
    Ok(())
}

fn read_major(dir: &Path) -> Result<u32, RestoreError> {
    let v = std::fs::read_to_string(dir.join("PG_VERSION"))
        .map_err(|e| RestoreError::bad(Stage::Restore, format!("the base backup has no readable PG_VERSION: {e}")))?;
    format::major_of(v.trim())
        .ok_or_else(|| RestoreError::bad(Stage::Restore, format!("PG_VERSION holds {:?}, not a version", v.trim())))
}

/// Starts a sandbox server on an unpacked base backup in `dir` and waits for recovery.
pub async fn restore_unpacked(
    job: &RestoreJob<'_>,
    mut sandbox: Sandbox,
    dir: &Path,
    started: Instant,
    fetch_end: FetchEnd,
    restore_started: Instant,
) -> Result<Restored, RestoreError> {
    let infra = |m: String| RestoreError::infra(Stage::Restore, m);
    let data = sandbox.data_dir().to_path_buf();
    if dir != data {
        std::fs::rename(dir, &data).map_err(|e| infra(format!("moving the unpacked backup into place: {e}")))?;
    }
    let major = read_major(&data)?;
    let bin = pgbin::for_major(job.pg_bindir.as_deref(), Some(major), true)
        .map_err(|m| RestoreError::infra(Stage::Sandbox, m))?;
    for stale in ["postmaster.pid", "postmaster.opts"] {
        let _ = std::fs::remove_file(data.join(stale));
    }
    // A Debian-packaged primary keeps its config outside the data directory.
    if !data.join("postgresql.conf").exists() {
        std::fs::write(data.join("postgresql.conf"), "# written by drcheck: the backup had none\n")
            .map_err(|e| infra(e.to_string()))?;
    }
    let hba = sandbox.root().join("pg_hba.conf");
    let ident = sandbox.root().join("pg_ident.conf");
    std::fs::write(&hba, "local all all trust\n").map_err(|e| infra(e.to_string()))?;
    std::fs::write(&ident, "").map_err(|e| infra(e.to_string()))?;
    let mut settings: Vec<(String, String)> = vec![
        ("hba_file".into(), hba.display().to_string()),
        ("ident_file".into(), ident.display().to_string()),
        ("archive_mode".into(), "off".into()),
        ("archive_command".into(), String::new()),
        ("shared_preload_libraries".into(), String::new()),
        ("hot_standby".into(), "off".into()),
        // The WAL being replayed was written at the primary's level.
        ("wal_level".into(), "replica".into()),
        ("max_wal_senders".into(), "0".into()),
        ("primary_conninfo".into(), String::new()),
    ];
    if let Some(wal) = &job.wal {
        let spool = sandbox.root().join("wal-spool");
        let n = spool_wal(job, wal, &data, &spool).await?;
        tracing::info!(segments = n, "archived WAL fetched for replay");
        settings.push(("restore_command".into(), format!("cp '{}/%f' '%p'", spool.display())));
        match &wal.target {
            RecoveryTarget::Latest => {}
            RecoveryTarget::Immediate => settings.push(("recovery_target".into(), "immediate".into())),
            RecoveryTarget::Time(t) => settings.push(("recovery_target_time".into(), pg_timestamp(t))),
        }
        settings.push(("recovery_target_action".into(), "promote".into()));
        std::fs::write(data.join("recovery.signal"), "").map_err(|e| infra(e.to_string()))?;
        sandbox.give_to_server(&spool)?;
    }
    *fetch_end.lock().unwrap() = Some(Instant::now());
    sandbox.give_to_server(&data)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).map_err(|e| infra(e.to_string()))?;
    sandbox.start_existing(bin, &settings, RECOVERY_TIMEOUT).await.map_err(|e| match e {
        // The server giving up on a restored data directory is the backup's failure.
        RestoreError::Infrastructure { stage: Stage::Restore, message } => RestoreError::bad(Stage::Restore, message),
        other => other,
    })?;
    let database = job.database_hint.clone().unwrap_or_else(|| "postgres".into());
    let recovered_to = recovered_to(&sandbox).await;
    let fetch = fetch_end.lock().unwrap().map(|t| t - started).unwrap_or_default();
    Ok(Restored {
        sandbox,
        database,
        format: "physical".into(),
        fetch,
        restore: restore_started.elapsed(),
        recovered_to,
    })
}

/// An RFC 3339 timestamp the way PostgreSQL's `recovery_target_time` accepts it
/// (`2026-11-30 03:00:00.000000+00`: no `T`, no `Z`).
fn pg_timestamp(rfc3339: &str) -> String {
    match humantime::parse_rfc3339_weak(rfc3339) {
        Ok(t) => humantime::format_rfc3339_micros(t).to_string().replace('T', " ").replace('Z', "+00"),
        Err(_) => rfc3339.to_string(),
    }
}

async fn recovered_to(sandbox: &Sandbox) -> Option<String> {
    use sqlx::Connection;
    let mut conn = sqlx::postgres::PgConnection::connect_with(&sandbox.connect_options("postgres")).await.ok()?;
    sqlx::query_scalar::<_, Option<String>>(
        "select to_char(pg_last_xact_replay_timestamp() at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')",
    )
    .fetch_one(&mut conn)
    .await
    .ok()
    .flatten()
}

/// The WAL segment a base backup starts at, from its `backup_label`.
fn start_segment(data: &Path) -> Result<String, RestoreError> {
    let label = std::fs::read_to_string(data.join("backup_label"))
        .map_err(|e| RestoreError::bad(Stage::Restore, format!("the base backup has no backup_label: {e}")))?;
    label
        .lines()
        .find_map(|l| l.strip_prefix("START WAL LOCATION: "))
        .and_then(|l| l.split("(file ").nth(1))
        .map(|s| s.trim_end_matches(')').trim().to_string())
        .ok_or_else(|| RestoreError::bad(Stage::Restore, "backup_label names no START WAL LOCATION"))
}

/// Downloads archived WAL from the backup's start on into `spool` (decompressing
/// `.gz`/`.zst`/`.lz4`); returns how many files.
async fn spool_wal(job: &RestoreJob<'_>, wal: &WalReplay, data: &Path, spool: &Path) -> Result<usize, RestoreError> {
    let start = start_segment(data)?;
    std::fs::create_dir_all(spool)
        .map_err(|e| RestoreError::infra(Stage::Fetch, format!("{}: {e}", spool.display())))?;
    let listed = job.store.list(&wal.prefix).await?;
    let wanted: Vec<(BackupObject, String)> = listed
        .into_iter()
        .filter_map(|o| {
            let name = name_of(&o).to_string();
            let plain = ["", ".gz", ".zst", ".lz4"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|_| !s.is_empty()))
                .unwrap_or(&name)
                .to_string();
            let segment = plain.len() == 24 && plain.chars().all(|c| c.is_ascii_hexdigit());
            let keep = (segment && plain[8..] >= start[8..] && plain[..8] >= start[..8]) || plain.ends_with(".history");
            keep.then_some((o, plain))
        })
        .collect();
    let n = wanted.len();
    stream::iter(wanted)
        .map(|(obj, plain)| async move {
            let bytes =
                if obj.size == 0 { Default::default() } else { job.store.read_range(&obj.key, 0, obj.size).await? };
            let head = bytes.to_vec();
            let fmt = format::detect(&head);
            let content = match fmt {
                BackupFormat::Gzip | BackupFormat::Zstd | BackupFormat::Lz4 => {
                    let mut d = logical::decompress(fmt, head, Box::pin(std::io::Cursor::new(Vec::new())));
                    let mut out = Vec::new();
                    d.read_to_end(&mut out).await.map_err(|e| {
                        RestoreError::bad(Stage::Fetch, format!("{}: corrupt {fmt} data: {e}", obj.key))
                    })?;
                    out
                }
                _ => head,
            };
            tokio::fs::write(spool.join(&plain), content)
                .await
                .map_err(|e| RestoreError::infra(Stage::Fetch, format!("spooling {plain}: {e}")))
        })
        .buffer_unordered(job.fetch.concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(n)
}
