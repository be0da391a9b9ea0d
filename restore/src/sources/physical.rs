//! Physical restores of `pg_basebackup -Ft` backups: `base.tar[.gz|.zst|.lz4]` is
//! unpacked into the sandbox's data directory and `pg_wal.tar[…]` into its `pg_wal`;
//! `pg_verifybackup` checks it against `backup_manifest` when there is one; the sandbox
//! writes its own `pg_hba.conf` and overrides settings that travel with the primary
//! (archiving, preloaded libraries); then the server runs recovery to consistency —
//! or, with a WAL archive configured, replays archived WAL (drcheck fetches it into a
//! spool and serves it through `restore_command`) to the recovery target.

use crate::error::{RestoreError, Stage};
use crate::request::{FetchEnd, RestoreEvent, RestoreJob, Restored, read_small};
use crate::server::capture;
use crate::server::contain;
use crate::server::recovery::WalReplay;
use crate::server::recovery::{self, read_major, remove_entry, write_new};
use crate::server::sandbox::{Sandbox, tail};
use crate::store::{BackupObject, BackupReader, is_base_tar};
use crate::transfer::fetch;
use crate::transfer::format::{self, BackupFormat};
use crate::transfer::peel;
use crate::transfer::stream::{self, Counting};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// WAL files spooled at once (each itself in parallel parts).
const WAL_FILES_AT_ONCE: usize = 2;

fn name_of(o: &BackupObject) -> &str {
    o.key.rsplit('/').next().unwrap_or(&o.key)
}

/// Fetches and unpacks one tar part (compressed or not) into `dest`.
/// Bytes received so far over every part of a restore (parts download side by side).
type Received = Arc<std::sync::atomic::AtomicU64>;

async fn unpack_part(
    job: &RestoreJob<'_>,
    sandbox: &Sandbox,
    part: &BackupObject,
    dest: &Path,
    received: &Received,
    fetch: fetch::FetchOptions,
) -> Result<(), RestoreError> {
    use std::sync::atomic::Ordering;
    let store = job.store.describe();
    let raw = fetch::parallel(job.store.clone(), part, fetch);
    let events = job.events.clone();
    let (received, seen) = (received.clone(), Arc::new(std::sync::atomic::AtomicU64::new(0)));
    // `Counting` reports this part's running total: add what is new to the shared one.
    let (counted, _) = Counting::new(
        raw,
        job.events.clone(),
        Arc::new(move |n| {
            let new = n.saturating_sub(seen.swap(n, Ordering::Relaxed));
            events.send(RestoreEvent::Received(received.fetch_add(new, Ordering::Relaxed) + new))
        }),
    );
    let mut reader: BackupReader = Box::pin(counted);
    let head = stream::read_head(&mut reader, &store).await?;
    let (reader, head, _) = peel::peel(&job.into(), sandbox, head, reader, &store).await?;
    let reader: BackupReader = Box::pin(stream::Bounded::with_room(reader, job.expansion_ceiling, job.max_write_bytes));
    if format::detect(&head) != BackupFormat::Tar {
        return Err(RestoreError::bad(
            Stage::Restore,
            format!("{} should be a tar archive, but holds {} data", part.key, format::detect(&head)),
        ));
    }
    stream::extract_tar(head, reader, dest, &store).await
}

pub(crate) async fn restore(
    job: &RestoreJob<'_>,
    sandbox: Sandbox,
    started: Instant,
) -> Result<Restored, RestoreError> {
    if !job.chain.is_empty() {
        return restore_chain(job, sandbox, started).await;
    }
    let parts = &job.backup.parts;
    let base = parts.iter().find(|p| is_base_tar(name_of(p)));
    let base = base.ok_or_else(|| RestoreError::bad(Stage::Select, format!("{} has no base.tar", job.backup.key)))?;
    let wal = parts.iter().find(|p| name_of(p).starts_with("pg_wal.tar"));
    let mut tablespaces: Vec<(u32, &BackupObject)> = Vec::new();
    for p in parts {
        let n = name_of(p);
        if !n.contains(".tar") || is_base_tar(n) || n.starts_with("pg_wal.tar") || n.ends_with(".sha256") {
            continue;
        }
        // pg_basebackup -Ft writes one OID.tar[.gz|.zst|.lz4] per tablespace.
        match n.split('.').next().and_then(|oid| oid.parse::<u32>().ok()) {
            Some(oid) => tablespaces.push((oid, p)),
            None => {
                return Err(RestoreError::unsupported(
                    Stage::Restore,
                    format!("{}: a tar file drcheck does not know in a base backup", p.key),
                ));
            }
        }
    }
    let restore_started = Instant::now();
    let data = sandbox.data_dir().to_path_buf();
    // base.tar and pg_wal.tar download and unpack side by side (each decompresses on a
    // thread of its own); pg_wal exists first so neither waits for the other.
    let wal_dir = data.join("pg_wal");
    std::fs::create_dir_all(&wal_dir)
        .map_err(|e| RestoreError::infra(Stage::Restore, format!("{}: {e}", data.display())))?;
    let received = Received::default();
    match wal {
        Some(wal) => {
            // Two downloads at once share the memory bound of one: half the parts each.
            let half = job.fetch.shared_by(2);
            tokio::try_join!(
                unpack_part(job, &sandbox, base, &data, &received, half),
                unpack_part(job, &sandbox, wal, &wal_dir, &received, half)
            )?;
        }
        None => unpack_part(job, &sandbox, base, &data, &received, job.fetch).await?,
    }
    let new_map = if tablespaces.is_empty() {
        None
    } else {
        Some(remap_tablespaces(job, &sandbox, &data, &tablespaces, &received).await?)
    };
    let fetch_end: FetchEnd = Arc::new(Mutex::new(Some(Instant::now())));
    sandbox.give_to_server(&data)?;
    let manifest = match parts.iter().find(|p| name_of(p) == "backup_manifest") {
        Some(m) => {
            let text = read_small(job.store.as_ref(), &m.key).await?;
            verify_backup(&sandbox, &job.bins, &data, &text).await?
        }
        None => "not checked: the backup has no backup_manifest".to_string(),
    };
    // After the check against the manifest, which knows the original map.
    if let Some(map) = new_map {
        let path = data.join("tablespace_map");
        write_new(&path, &map)?;
        sandbox.give_to_server(&path)?;
    }
    let mut restored = restore_unpacked(job, sandbox, &data, started, fetch_end, restore_started).await?;
    restored.manifest = Some(manifest);
    Ok(restored)
}

/// Tablespaces go into the run's own directory (`tablespaces/OID`): each `OID.tar` is
/// unpacked there and `pg_tblspc/OID` links to it; returns the `tablespace_map` (which
/// PostgreSQL reads at start-up) naming it instead of the primary's location. A map and
/// tars that disagree are the backup's fault.
async fn remap_tablespaces(
    job: &RestoreJob<'_>,
    sandbox: &Sandbox,
    data: &Path,
    tablespaces: &[(u32, &BackupObject)],
    received: &Received,
) -> Result<String, RestoreError> {
    let bad = |m: String| RestoreError::bad(Stage::Restore, m);
    let map = std::fs::symlink_metadata(data.join("tablespace_map"))
        .ok()
        .filter(|m| m.file_type().is_file())
        .and_then(|_| std::fs::read_to_string(data.join("tablespace_map")).ok())
        .ok_or_else(|| bad("the base backup has tablespace tars but no tablespace_map".into()))?;
    let mapped: Vec<u32> = map.lines().filter_map(|l| l.split(' ').next()?.parse().ok()).collect();
    let have: Vec<u32> = tablespaces.iter().map(|(oid, _)| *oid).collect();
    if let Some(missing) = mapped.iter().find(|oid| !have.contains(oid)) {
        return Err(bad(format!("tablespace_map names tablespace {missing}, but the backup has no {missing}.tar")));
    }
    let root = sandbox.root().join("tablespaces");
    let mut new_map = String::new();
    for (oid, part) in tablespaces {
        if !mapped.contains(oid) {
            return Err(bad(format!("{}: tablespace {oid} is not in tablespace_map", part.key)));
        }
        let dest = root.join(oid.to_string());
        unpack_part(job, sandbox, part, &dest, received, job.fetch).await?;
        let link = data.join("pg_tblspc").join(oid.to_string());
        remove_entry(&link)?;
        std::fs::create_dir_all(data.join("pg_tblspc"))
            .map_err(|e| RestoreError::infra(Stage::Restore, e.to_string()))?;
        std::os::unix::fs::symlink(&dest, &link).map_err(|e| RestoreError::infra(Stage::Restore, e.to_string()))?;
        new_map.push_str(&format!("{oid} {}\n", dest.display()));
    }
    sandbox.give_to_server(&root)?;
    Ok(new_map)
}

/// Checks the unpacked files against the backup's manifest with `pg_verifybackup`.
async fn verify_backup(
    sandbox: &Sandbox,
    bins: &crate::server::pgbin::Binaries,
    data: &Path,
    manifest: &str,
) -> Result<String, RestoreError> {
    verify_backup_as(sandbox, bins, data, manifest, "backup_manifest").await
}

/// [`verify_backup`] with the manifest written to `name` in the sandbox's directory.
async fn verify_backup_as(
    sandbox: &Sandbox,
    bins: &crate::server::pgbin::Binaries,
    data: &Path,
    manifest: &str,
    name: &str,
) -> Result<String, RestoreError> {
    let major = read_major(data)?;
    // The backup's own major's pg_verifybackup, wherever the config says it is.
    let Ok(bin) = bins.for_major(Some(major), true) else {
        return Ok(format!("not checked: no PostgreSQL {major} binaries for pg_verifybackup"));
    };
    let tool = bin.tool("pg_verifybackup");
    if !tool.is_file() {
        tracing::warn!(tool = %tool.display(), "pg_verifybackup not found: the backup is not checked against its manifest");
        return Ok(format!("not checked: {} not found", tool.display()));
    }
    let path = sandbox.root().join(name);
    crate::server::sandbox::write_private(&path, manifest.as_bytes())?;
    sandbox.give_to_server(&path)?;
    // pg_verifybackup runs pg_waldump through the shell: both may execute, confined.
    let mut exec = vec![bin.dir.clone()];
    exec.extend(["/bin/sh"].iter().filter_map(|p| std::fs::canonicalize(p).ok()));
    let mut policy = sandbox.policy(&exec);
    policy.read_only.extend(contain::system_read_paths(&bin.dir));
    let cmd = contain::command(&tool, &policy);
    let mut child = tokio::process::Command::from(cmd)
        .arg("-q")
        .arg("-m")
        .arg(&path)
        .arg(data)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.dir.display()))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| RestoreError::infra(Stage::Restore, format!("cannot run {}: {e}", tool.display())))?;
    // A forged manifest makes one complaint per file it lists: only the end is kept.
    let (status, stderr) = capture::wait_keeping_stderr(&mut child, 4000)
        .await
        .map_err(|e| RestoreError::infra(Stage::Restore, format!("running {}: {e}", tool.display())))?;
    if !status.success() {
        return Err(RestoreError::bad(
            Stage::Restore,
            format!("pg_verifybackup found the backup does not match its manifest: {}", tail(&stderr, 4000)),
        ));
    }
    Ok("verified with pg_verifybackup against backup_manifest".to_string())
}

/// An incremental backup and its earlier links (`job.chain`, oldest first): each link
/// unpacked into a directory of its own and checked against its manifest, the chain
/// combined into the sandbox's data directory by the backup's own major's
/// `pg_combinebackup` (contained like every tool), then recovered like any base backup.
async fn restore_chain(job: &RestoreJob<'_>, sandbox: Sandbox, started: Instant) -> Result<Restored, RestoreError> {
    let links: Vec<&crate::store::Backup> = job.chain.iter().chain(std::iter::once(job.backup)).collect();
    let restore_started = Instant::now();
    let received = Received::default();
    let mut dirs = Vec::new();
    let mut checked = Vec::new();
    for (i, link) in links.iter().enumerate() {
        let base = link.parts.iter().find(|p| is_base_tar(name_of(p))).ok_or_else(|| {
            RestoreError::bad(Stage::Select, format!("{} (a link of {}) has no base.tar", link.key, job.backup.key))
        })?;
        if let Some(p) = link.parts.iter().find(|p| {
            let n = name_of(p);
            n.contains(".tar") && !is_base_tar(n) && !n.starts_with("pg_wal.tar") && !n.ends_with(".sha256")
        }) {
            return Err(RestoreError::unsupported(
                Stage::Restore,
                format!("{}: an incremental backup chain with tablespaces is not supported", p.key),
            ));
        }
        let dir = sandbox.root().join(format!("link{i}"));
        let wal_dir = dir.join("pg_wal");
        std::fs::create_dir_all(&wal_dir)
            .map_err(|e| RestoreError::infra(Stage::Restore, format!("{}: {e}", dir.display())))?;
        match link.parts.iter().find(|p| name_of(p).starts_with("pg_wal.tar")) {
            Some(wal) => {
                let half = job.fetch.shared_by(2);
                tokio::try_join!(
                    unpack_part(job, &sandbox, base, &dir, &received, half),
                    unpack_part(job, &sandbox, wal, &wal_dir, &received, half)
                )?;
            }
            None => unpack_part(job, &sandbox, base, &dir, &received, job.fetch).await?,
        }
        sandbox.give_to_server(&dir)?;
        let said = match link.parts.iter().find(|p| name_of(p) == "backup_manifest") {
            Some(m) => {
                let text = read_small(job.store.as_ref(), &m.key).await?;
                // pg_combinebackup reads each link's manifest beside its files.
                let copy = dir.join("backup_manifest");
                if !copy.exists() {
                    write_new(&copy, &text)?;
                    sandbox.give_to_server(&copy)?;
                }
                verify_backup_as(&sandbox, &job.bins, &dir, &text, &format!("manifest{i}")).await?
            }
            None => {
                return Err(RestoreError::bad(
                    Stage::Restore,
                    format!(
                        "{} has no backup_manifest: an incremental backup chain cannot be combined without each \
                         link's manifest",
                        link.key
                    ),
                ));
            }
        };
        checked.push(format!("{}: {said}", link.key));
        dirs.push(dir);
    }
    let fetch_end: FetchEnd = Arc::new(Mutex::new(Some(Instant::now())));
    let data = sandbox.data_dir().to_path_buf();
    let combining = Instant::now();
    combine(&sandbox, &job.bins, &dirs, &data).await?;
    let combine_took = combining.elapsed();
    for dir in &dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
    sandbox.give_to_server(&data)?;
    let mut restored = restore_unpacked(job, sandbox, &data, started, fetch_end, restore_started).await?;
    restored.manifest = Some(format!(
        "{} links combined with pg_combinebackup; each checked against its own manifest — {}",
        links.len(),
        checked.join("; ")
    ));
    restored.combine = Some(combine_took);
    Ok(restored)
}

/// `pg_combinebackup -o DATA LINK…` of the chain's major, contained.
async fn combine(
    sandbox: &Sandbox,
    bins: &crate::server::pgbin::Binaries,
    dirs: &[std::path::PathBuf],
    data: &Path,
) -> Result<(), RestoreError> {
    let last = dirs.last().expect("a chain has links");
    let major = read_major(last)?;
    if major < 17 {
        return Err(RestoreError::bad(
            Stage::Restore,
            format!("an incremental backup of PostgreSQL {major}: incremental backups exist from PostgreSQL 17 on"),
        ));
    }
    let bin = bins.for_major(Some(major), true).map_err(|m| RestoreError::infra(Stage::Restore, m))?;
    let tool = bin.tool("pg_combinebackup");
    if !tool.is_file() {
        return Err(RestoreError::infra(
            Stage::Restore,
            format!("{} not found: an incremental backup needs PostgreSQL {major}'s pg_combinebackup", tool.display()),
        ));
    }
    if data.exists() && std::fs::read_dir(data).map(|mut d| d.next().is_some()).unwrap_or(true) {
        return Err(RestoreError::infra(Stage::Restore, format!("{} is not empty", data.display())));
    }
    let _ = std::fs::remove_dir(data);
    let mut policy = sandbox.policy(std::slice::from_ref(&bin.dir));
    policy.read_only.extend(contain::system_read_paths(&bin.dir));
    let mut child = tokio::process::Command::from(contain::command(&tool, &policy))
        .arg("--no-sync")
        .arg("-o")
        .arg(data)
        .args(dirs)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.dir.display()))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| RestoreError::infra(Stage::Restore, format!("cannot run {}: {e}", tool.display())))?;
    let (status, stderr) = capture::wait_keeping_stderr(&mut child, 4000)
        .await
        .map_err(|e| RestoreError::infra(Stage::Restore, format!("running {}: {e}", tool.display())))?;
    if !status.success() {
        return Err(RestoreError::bad(
            Stage::Restore,
            format!("pg_combinebackup could not combine the backup's chain: {}", tail(&stderr, 4000)),
        ));
    }
    Ok(())
}

/// Starts a sandbox server on an unpacked base backup in `dir` and waits for recovery.
pub(crate) async fn restore_unpacked(
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
    recovery::read_major(&data)?;
    let consistent_at = std::fs::read(data.join("backup_label"))
        .ok()
        .and_then(|l| label_start_time(&String::from_utf8_lossy(&l)))
        .map(|at| crate::request::Consistency { at, source: "backup_label START TIME" });
    // The last byte received: a base backup's unpack set it already (its manifest check
    // and hand-over to the server are not the fetch); a streamed tar ends here.
    {
        let mut end = fetch_end.lock().unwrap();
        if end.is_none() {
            *end = Some(Instant::now());
        }
    }
    let mut archive_check = None;
    let recovered = match &job.wal {
        Some(wal) => {
            let spool = recovery::spool_dir(&sandbox)?;
            let (wanted, check) = archived_wal_from(job, wal, &data).await?;
            archive_check = check;
            let n = wanted.len();
            let objects: std::collections::HashMap<String, BackupObject> =
                wanted.iter().map(|(o, name)| (name.clone(), o.clone())).collect();
            let names: Vec<String> = wanted.into_iter().map(|(_, name)| name).collect();
            // Each file is itself fetched in parallel parts; the files that download at
            // once share one download's memory bound; recovery replays what has arrived.
            let fetch = job.fetch.shared_by(WAL_FILES_AT_ONCE);
            let recovered = recovery::start_while_fetching(
                &mut sandbox,
                &job.bins,
                recovery::Replay { spool: &spool, target: &wal.target, streamed: true, standby: wal.standby },
                names,
                WAL_FILES_AT_ONCE,
                // Each file's download holds a share of one download's memory: the window
                // stays what that bound was divided by.
                WAL_FILES_AT_ONCE,
                |name, part| {
                    let (store, obj) = (job.store.clone(), objects[&name].clone());
                    async move { fetch_wal_object(store, &obj, fetch, &part).await }
                },
            )
            .await?;
            tracing::info!(files = n, "archived WAL replayed as it was fetched");
            recovered
        }
        None => recovery::start_restored(&mut sandbox, &job.bins, None).await?,
    };
    let database = job.database_hint.clone().unwrap_or_else(|| "postgres".into());
    let fetch = fetch_end.lock().unwrap().map(|t| t - started).unwrap_or_default();
    Ok(Restored {
        sandbox,
        database,
        format: "physical".into(),
        physical: true,
        fetch,
        restore: restore_started.elapsed(),
        recovered_to: recovered.recovered_to,
        manifest: None,
        consistent_at,
        skipped_privileges: None,
        horizon: recovered.horizon,
        bytes_fetched: None,
        archive: archive_check,
        combine: None,
        replay: recovered.pace.map(|p| p.said()),
    })
}

/// `START TIME: 2026-12-01 16:00:00 UTC` of a `backup_label`: when the base backup
/// began (its data is consistent as of its end, a little later; the start is the
/// conservative bound). Only UTC/GMT are understood.
pub(crate) fn label_start_time(label: &str) -> Option<std::time::SystemTime> {
    let line = label.lines().find_map(|l| l.strip_prefix("START TIME: "))?.trim();
    let (stamp, zone) = line.rsplit_once(' ')?;
    if zone != "UTC" && zone != "GMT" {
        return None;
    }
    let naive = chrono::NaiveDateTime::parse_from_str(stamp, "%Y-%m-%d %H:%M:%S").ok()?;
    let secs = naive.and_utc().timestamp();
    (secs > 0).then(|| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64))
}

/// The WAL segment a base backup starts at, from its `backup_label`.
fn start_segment(data: &Path) -> Result<String, RestoreError> {
    let label = std::fs::read(data.join("backup_label"))
        .map_err(|e| RestoreError::bad(Stage::Restore, format!("the base backup has no backup_label: {e}")))?;
    parse_start_segment(&String::from_utf8_lossy(&label))
}

/// The `(file …)` of `START WAL LOCATION:` — 24 hex digits, or the backup is bad.
pub(crate) fn parse_start_segment(label: &str) -> Result<String, RestoreError> {
    let line = label.lines().find_map(|l| l.strip_prefix("START WAL LOCATION: "));
    let segment = line.and_then(|l| l.split("(file ").nth(1)).map(|s| s.trim_end_matches(')').trim().to_string());
    match segment {
        Some(s) if s.len() == 24 && s.chars().all(|c| c.is_ascii_hexdigit()) => Ok(s.to_ascii_uppercase()),
        Some(s) => Err(RestoreError::bad(
            Stage::Restore,
            format!("backup_label: START WAL LOCATION names {s:?}, expected a WAL file name of 24 hex digits"),
        )),
        None => Err(RestoreError::bad(
            Stage::Restore,
            "backup_label names no START WAL LOCATION (expected `START WAL LOCATION: 0/2000028 (file 000000010000000000000002)`)",
        )),
    }
}

/// Most a single archived WAL file may expand to: PostgreSQL's largest segment size.
const MAX_WAL_FILE: u64 = 1 << 30;

/// Downloads one archived WAL file (decompressing `.gz`/`.zst`/`.lz4`) to `path`,
/// streamed to disk, at most [`MAX_WAL_FILE`] bytes.
pub(crate) async fn fetch_wal_object(
    store: Arc<dyn crate::store::BackupStore>,
    obj: &BackupObject,
    fetch: fetch::FetchOptions,
    path: &Path,
) -> Result<(), RestoreError> {
    if obj.size == 0 {
        return tokio::fs::write(path, b"")
            .await
            .map_err(|e| RestoreError::infra(Stage::Fetch, format!("spooling {}: {e}", path.display())));
    }
    let described = store.describe();
    stage_wal(fetch::parallel(store, obj, fetch), &described, &obj.key, path).await
}

/// A WAL file fetched by a backup tool into `raw` (`what` names it), decompressed into `path`.
pub(crate) async fn decompress_file(raw: &Path, path: &Path, what: &str) -> Result<(), RestoreError> {
    let file = tokio::fs::File::open(raw)
        .await
        .map_err(|e| RestoreError::infra(Stage::Fetch, format!("{}: {e}", raw.display())))?;
    stage_wal(Box::pin(file), what, what, path).await
}

/// Writes one WAL file from `reader` to `path`: decompressed when it is `.gz`/`.zst`/
/// `.lz4` data (detected from content), streamed, at most [`MAX_WAL_FILE`] bytes.
async fn stage_wal(mut reader: BackupReader, source: &str, what: &str, path: &Path) -> Result<(), RestoreError> {
    let head = stream::read_head(&mut reader, source).await?;
    let fmt = format::detect(&head);
    let (reader, head) = match fmt {
        BackupFormat::Gzip | BackupFormat::Zstd | BackupFormat::Lz4 => {
            let mut d = peel::decompress(fmt, head, reader);
            let h = stream::read_head(&mut d, source)
                .await
                .map_err(|e| RestoreError::bad(Stage::Fetch, format!("{what}: corrupt {fmt} data: {e}")))?;
            (d, h)
        }
        _ => (reader, head),
    };
    let bounded: BackupReader = Box::pin(stream::Bounded::new(reader, MAX_WAL_FILE));
    stream::stage_to_file(head, bounded, path, source).await.map(|_| ()).map_err(|e| match e {
        RestoreError::BadBackup { stage, message } => {
            RestoreError::BadBackup { stage, message: format!("archived WAL {what}: {message}") }
        }
        other => other,
    })
}

/// The archived WAL files under `prefix` (segments and timeline histories, by their
/// plain names), each with its object.
pub fn wal_objects(listed: Vec<BackupObject>) -> Vec<(BackupObject, String)> {
    listed
        .into_iter()
        .filter_map(|o| {
            let name = name_of(&o).to_string();
            let plain = [".gz", ".zst", ".lz4"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(&name).to_string();
            let segment = plain.len() == 24 && plain.chars().all(|c| c.is_ascii_hexdigit());
            let history =
                plain.len() == 16 && plain.ends_with(".history") && plain[..8].chars().all(|c| c.is_ascii_hexdigit());
            (segment || history).then_some((o, plain))
        })
        .collect()
}

/// A segment missing while later ones are archived is a gap only when the archiver
/// has moved on: one after it archived this long before the listing, or more after it
/// than an archiver uploading in parallel keeps in flight ([`GAP_IN_FLIGHT`]).
pub const GAP_GRACE: std::time::Duration = std::time::Duration::from_secs(60);
/// Segments archived after a missing one that no parallel archiver leaves behind.
pub(crate) const GAP_IN_FLIGHT: usize = 4;

/// The archived WAL under the target's `wal_prefix` that recovery of the base backup in
/// `data` may need, in replay order: timeline histories, then segments from the backup's
/// start on. Replaying to the latest point, also whether the archive runs without a gap
/// from the backup's start to its newest segment: recovery stops silently at a gap, so a
/// copy "restored to the latest point" would quietly be older than the archive.
async fn archived_wal_from(
    job: &RestoreJob<'_>,
    wal: &WalReplay,
    data: &Path,
) -> Result<(Vec<(BackupObject, String)>, Option<crate::request::ArchiveCheck>), RestoreError> {
    let start = start_segment(data)?;
    let listed_at = std::time::SystemTime::now();
    let listed = job.store.list(&wal.prefix).await?;
    let mut wanted: Vec<(BackupObject, String)> = wal_objects(listed)
        .into_iter()
        .filter(|(_, plain)| plain.ends_with(".history") || (plain[8..] >= start[8..] && plain[..8] >= start[..8]))
        .collect();
    wanted.sort_by_key(|(_, name)| (!name.ends_with(".history"), name.clone()));
    // Segments the backup carries itself (`pg_wal.tar`) count as there: recovery reads them.
    let carried: Vec<String> = std::fs::read_dir(data.join("pg_wal"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().to_string()).collect())
        .unwrap_or_default();
    let check = matches!(wal.target, drcheck_config::RecoveryTarget::Latest)
        .then(|| archive_check(&start, &wanted, &carried, listed_at));
    Ok((wanted, check))
}

/// Whether the archive is continuous from `start` to its newest segment (timeline
/// switches followed through their histories).
pub(crate) fn archive_check(
    start: &str,
    wanted: &[(BackupObject, String)],
    carried: &[String],
    listed_at: std::time::SystemTime,
) -> crate::request::ArchiveCheck {
    let mut archived = crate::sources::delegate::Archived::default();
    for (_, name) in wanted {
        archived.add(name);
    }
    let newest_archived = archived.segments.iter().next_back().cloned();
    for name in carried.iter().filter(|n| n.len() == 24 && n.chars().all(|c| c.is_ascii_hexdigit())) {
        archived.segments.insert(name.clone());
    }
    let newest =
        newest_archived.or_else(|| archived.segments.iter().next_back().cloned()).unwrap_or_else(|| start.to_string());
    let plan = crate::sources::delegate::plan_segments(start, start, &newest, &archived);
    let (files, gap) = match plan {
        Ok(p) => (p.segments.len(), p.gap),
        Err(missing) => (0, Some(missing.0)),
    };
    let in_flight = gap.as_ref().is_some_and(|g| {
        let later: Vec<&BackupObject> =
            wanted.iter().filter(|(_, n)| n.len() == 24 && n.as_str() > g.as_str()).map(|(o, _)| o).collect();
        let settled = later.iter().any(|o| listed_at.duration_since(o.last_modified).is_ok_and(|age| age >= GAP_GRACE));
        !settled && later.len() < GAP_IN_FLIGHT
    });
    crate::request::ArchiveCheck { start: start.to_string(), newest, files, gap, in_flight }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(name: &str, age_secs: u64, now: std::time::SystemTime) -> (BackupObject, String) {
        let o = BackupObject {
            key: format!("wal/{name}.gz"),
            size: 1,
            last_modified: now - std::time::Duration::from_secs(age_secs),
            etag: None,
        };
        (o, name.to_string())
    }

    #[test]
    fn a_gap_after_the_backup_is_named_unless_it_may_be_in_flight() {
        let now = std::time::SystemTime::now();
        let s = |n: u8| format!("0000000100000000000000{n:02X}");
        // Continuous: no gap.
        let all: Vec<_> = (2..=6).map(|n| seg(&s(n), 600, now)).collect();
        let c = archive_check(&s(2), &all, &[], now);
        assert_eq!((c.gap, c.files, c.newest.as_str()), (None, 5, s(6).as_str()));
        // 4 missing, 5 and 6 archived long ago: a gap.
        let gap: Vec<_> = all.iter().filter(|(_, n)| *n != s(4)).cloned().collect();
        let c = archive_check(&s(2), &gap, &[], now);
        assert_eq!((c.gap.as_deref(), c.in_flight, c.files), (Some(s(4).as_str()), false, 2));
        // …archived seconds ago, two after it: maybe an upload in flight.
        let fresh: Vec<_> = gap.iter().map(|(_, n)| seg(n, if *n > s(4) { 5 } else { 600 }, now)).collect();
        let c = archive_check(&s(2), &fresh, &[], now);
        assert_eq!((c.gap.as_deref(), c.in_flight), (Some(s(4).as_str()), true));
        // The backup carries segment 4 itself (pg_wal.tar): no gap.
        let c = archive_check(&s(2), &gap, &[s(4)], now);
        assert_eq!(c.gap, None);
    }

    #[test]
    fn malformed_backup_labels_are_errors_not_panics() {
        let good = "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\nCHECKPOINT LOCATION: 0/2000060\n";
        assert_eq!(super::parse_start_segment(good).unwrap(), "000000010000000000000002");
        for bad in [
            "",
            "START WAL LOCATION: 0/2000028 (file abc)",
            "START WAL LOCATION: 0/2000028 (file é00000010000000000000002)",
            "START WAL LOCATION: 0/2000028",
            "START WAL LOCATION: (file 0000000100000000000000020000)",
        ] {
            assert!(super::parse_start_segment(bad).is_err(), "{bad:?}");
        }
    }
}
