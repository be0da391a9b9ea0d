//! One restore, start to finish: fetch the backup, detect what it is, pick the server
//! binaries its version needs, and restore it into a fresh sandbox by the method the
//! format calls for. Detection is by content (magic bytes), never by name.

use crate::error::{RestoreError, Stage};
use crate::fetch::{self, FetchOptions, Sha256Verify};
use crate::format::{self, BackupFormat};
use crate::logical::{self, Counting};
use crate::pgbin;
use crate::physical::{self, WalReplay};
use crate::sandbox::{Sandbox, SandboxOptions};
use crate::store::{Backup, BackupObject, BackupReader, BackupStore};
use drcheck_config::FormatSetting;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Everything a restore needs to know.
pub struct RestoreJob<'a> {
    pub store: Arc<dyn BackupStore>,
    pub backup: &'a Backup,
    pub fetch: FetchOptions,
    pub sandbox: SandboxOptions,
    pub pg_bindir: Option<PathBuf>,
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
    /// Told the detected format as soon as it is known (so a failed run still reports it).
    pub on_format: &'a (dyn Fn(&str) + Send + Sync),
    pub progress: Arc<dyn Fn(u64) + Send + Sync>,
    /// Set to how long `initdb` and the server start took, for logical restores.
    pub sandbox_ready_in: Mutex<Option<Duration>>,
    /// The most the restore may write into its directory (the backup's size ×
    /// `max_expansion`, at most the free space less a reserve); beyond, it fails.
    pub max_write_bytes: u64,
    /// The part of that limit that comes from the backup's size (× `max_expansion`, plus
    /// what any cluster needs): beyond it the backup is to blame, below it the disk.
    pub expansion_ceiling: u64,
}

/// A backup tool that restores a backup of its own catalog.
#[derive(Clone)]
pub enum Delegated {
    /// The repository, and the catalog the backup was chosen from (WAL range, archive id).
    Pgbackrest(crate::pgbackrest::Repo, crate::pgbackrest::Catalog),
    Barman(crate::barman::Catalog),
}

impl Delegated {
    pub fn tool(&self) -> &'static str {
        match self {
            Delegated::Pgbackrest(..) => "pgbackrest",
            Delegated::Barman(_) => "barman-cloud",
        }
    }
}

/// A restored database, running in its sandbox.
pub struct Restored {
    pub sandbox: Sandbox,
    pub database: String,
    pub format: String,
    /// From the first request to the last byte received from the store.
    pub fetch: Duration,
    /// From the start of the restore method to a database that accepts connections.
    pub restore: Duration,
    /// Physical backups replayed from a WAL archive: the last replayed commit's time.
    pub recovered_to: Option<String>,
    /// Base backups: what checking the files against `backup_manifest` found — said
    /// even when it could not be done.
    pub manifest: Option<String>,
}

/// The database logical dumps are restored into, inside the sandbox.
pub const RESTORED_DB: &str = "restored";

/// What a single-object backup turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Custom,
    DumpTar,
    /// A tar holding a directory-format dump or a base backup; known after unpacking.
    TarArchive,
    Plain,
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Custom => "custom",
        Kind::DumpTar => "tar",
        Kind::TarArchive => "tar archive",
        Kind::Plain => "plain",
    }
}

fn check_expected(expected: FormatSetting, found: &str) -> Result<(), RestoreError> {
    if expected == FormatSetting::Auto || expected.as_str() == found {
        return Ok(());
    }
    Err(RestoreError::bad(
        Stage::Restore,
        format!("the target's format is {}, but the backup is a {found} backup", expected.as_str()),
    ))
}

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
    let store_name = job.store.describe();
    let mut sandbox = Sandbox::create(&job.sandbox)?;
    if let Some(d) = &job.delegated {
        let kind = job.backup.catalog.as_ref().map_or("", |c| c.kind.as_str());
        let format = format!("physical ({} {kind})", d.tool());
        (job.on_format)(&format);
        let (recovered_to, wal_files, wal_gap, fetched_in) = match d {
            Delegated::Pgbackrest(repo, catalog) => {
                let r = repo
                    .restore(&mut sandbox, job.pg_bindir.as_deref(), job.backup, catalog, &job.recovery_target)
                    .await?;
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
        return Ok(Restored {
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
        });
    }
    if job.backup.is_physical() {
        check_expected(job.format, "physical")?;
        (job.on_format)("physical");
        return physical::restore(job, sandbox, started).await;
    }

    let object = &job.backup.parts[0];
    let mut raw = fetch::parallel(job.store.clone(), &object.key, object.size, job.fetch);
    if let Some(sidecar) = &job.backup.sha256_key {
        let text = read_small(job.store.as_ref(), sidecar).await?;
        let digest = fetch::parse_sidecar(&text).ok_or_else(|| {
            RestoreError::bad(Stage::Fetch, format!("{sidecar} holds no sha256 digest (expected 64 hex digits)"))
        })?;
        raw = Box::pin(Sha256Verify::new(raw, &digest));
    }
    let (counted, fetch_end) = Counting::new(raw, job.progress.clone());
    let mut reader: BackupReader = Box::pin(counted);
    let head = logical::read_head(&mut reader, &store_name).await?;
    let outer = format::detect(&head);
    let compressed = matches!(outer, BackupFormat::Gzip | BackupFormat::Zstd | BackupFormat::Lz4);
    if compressed {
        check_declared_size(job, object, &head).await?;
    }
    let (reader, head) = if compressed {
        let mut d = logical::decompress(outer, head, reader);
        let inner_head = logical::read_head(&mut d, &store_name).await?;
        (d, inner_head)
    } else {
        (reader, head)
    };
    let reader: BackupReader = Box::pin(logical::Bounded::new(reader, job.max_write_bytes));
    let inner = format::detect(&head);
    let kind = match inner {
        BackupFormat::Custom => Kind::Custom,
        BackupFormat::Tar if format::first_tar_member(&head).as_deref() == Some("toc.dat") => Kind::DumpTar,
        BackupFormat::Tar => Kind::TarArchive,
        BackupFormat::PlainSql => Kind::Plain,
        other => {
            let what = if compressed { format!("{outer}-compressed {other}") } else { other.to_string() };
            (job.on_format)(&what);
            return Err(RestoreError::bad(
                Stage::Restore,
                format!(
                    "not a PostgreSQL backup: found {what} data (expected a pg_dump custom, tar, directory or plain SQL dump, or a base backup)"
                ),
            ));
        }
    };
    let shown = |k: &str| if compressed { format!("{k}+{outer}") } else { k.to_string() };
    if kind != Kind::TarArchive {
        (job.on_format)(&shown(kind_name(kind)));
        let name = if kind == Kind::DumpTar { "tar" } else { kind_name(kind) };
        check_expected(job.format, name)?;
    }

    let major = match kind {
        Kind::Custom => Some(header_major(&head)?),
        Kind::DumpTar => Some(header_major(head.get(512..).unwrap_or_default())?),
        Kind::Plain => format::plain_dump_server_major(&head),
        Kind::TarArchive => None,
    };
    let restore_started = Instant::now();
    let done = |sandbox: Sandbox, database: String, format: String| {
        let fetch = fetch_end.lock().unwrap().map(|t| t - started).unwrap_or_else(|| started.elapsed());
        Ok(Restored {
            sandbox,
            database,
            format,
            fetch,
            restore: restore_started.elapsed(),
            recovered_to: None,
            manifest: None,
        })
    };

    if kind == Kind::TarArchive {
        let dest = sandbox.root().join("unpacked");
        logical::extract_tar(head, reader, &dest, &store_name).await?;
        // The contained tools run as the sandbox user: the unpacked files are theirs.
        sandbox.give_to_server(&dest)?;
        if let Some(toc_dir) = find_toc(&dest) {
            (job.on_format)(&shown("directory"));
            check_expected(job.format, "directory")?;
            let toc = std::fs::read(toc_dir.join("toc.dat")).unwrap_or_default();
            let major = header_major(&toc)?;
            start_empty(&mut sandbox, job, Some(major)).await?;
            let keep_owners = apply_globals(&sandbox, job).await?;
            let mut cmd = logical::pg_restore(&sandbox, RESTORED_DB, keep_owners, job.jobs)?;
            cmd.arg("-Fd").arg(&toc_dir);
            logical::run_tool(cmd, "pg_restore").await?;
            return done(sandbox, RESTORED_DB.into(), shown("directory"));
        }
        if std::fs::symlink_metadata(dest.join("PG_VERSION")).is_ok_and(|m| m.file_type().is_file()) {
            (job.on_format)(&shown("physical"));
            check_expected(job.format, "physical")?;
            return physical::restore_unpacked(job, sandbox, &dest, started, fetch_end, restore_started).await;
        }
        return Err(RestoreError::bad(
            Stage::Restore,
            "the tar archive holds neither a pg_dump directory dump (toc.dat) nor a base backup (PG_VERSION)",
        ));
    }

    start_empty(&mut sandbox, job, major).await?;
    let keep_owners = apply_globals(&sandbox, job).await?;
    match kind {
        Kind::Custom if job.jobs > 1 => {
            // Parallel pg_restore needs a seekable file: stage it while downloading.
            let path = sandbox.root().join("backup.dump");
            logical::stage_to_file(head, reader, &path, &store_name).await?;
            sandbox.give_to_server(&path)?;
            let mut cmd = logical::pg_restore(&sandbox, RESTORED_DB, keep_owners, job.jobs)?;
            cmd.arg(&path);
            logical::run_tool(cmd, "pg_restore").await?;
        }
        Kind::Custom => {
            let cmd = logical::pg_restore(&sandbox, RESTORED_DB, keep_owners, 1)?;
            logical::stream_into(cmd, "pg_restore", head, reader, &store_name).await?;
        }
        Kind::DumpTar => {
            let path = sandbox.root().join("backup.tar");
            logical::stage_to_file(head, reader, &path, &store_name).await?;
            sandbox.give_to_server(&path)?;
            let mut cmd = logical::pg_restore(&sandbox, RESTORED_DB, keep_owners, 1)?;
            cmd.arg("-Ft").arg(&path);
            logical::run_tool(cmd, "pg_restore").await?;
        }
        Kind::Plain => {
            let cmd = logical::psql_script(&sandbox, RESTORED_DB)?;
            logical::stream_into(cmd, "psql", head, reader, &store_name).await?;
        }
        Kind::TarArchive => unreachable!("handled above"),
    }
    done(sandbox, RESTORED_DB.into(), shown(kind_name(kind)))
}

/// Where the compression format records the expanded size (a zstd frame header, a gzip
/// trailer), a backup that says it will not fit fails before anything is unpacked.
async fn check_declared_size(job: &RestoreJob<'_>, object: &BackupObject, head: &[u8]) -> Result<(), RestoreError> {
    // gzip keeps its size at the end: one small extra read (zstd's is in the head).
    let tail = if format::detect(head) == BackupFormat::Gzip && object.size >= 4 {
        job.store.read_range(&object.key, object.size - 4, 4).await.map(|b| b.to_vec()).unwrap_or_default()
    } else {
        Vec::new()
    };
    let Some(declared) = format::declared_expanded_size(head, &tail) else { return Ok(()) };
    if declared > job.expansion_ceiling {
        return Err(RestoreError::bad(
            Stage::Fetch,
            format!(
                "{} {} bytes: its {} header declares {declared} bytes (sandbox.max_expansion × its size, plus 1 GiB)",
                logical::EXPANSION_EXCEEDED,
                job.expansion_ceiling,
                format::detect(head)
            ),
        ));
    }
    if declared > job.max_write_bytes {
        return Err(RestoreError::infra(
            Stage::Sandbox,
            format!(
                "not enough space in scratch_dir: the backup declares it expands to {declared} bytes, {} may be written",
                job.max_write_bytes
            ),
        ));
    }
    Ok(())
}

fn header_major(header: &[u8]) -> Result<u32, RestoreError> {
    let h = format::parse_dump_header(header)
        .map_err(|e| RestoreError::bad(Stage::Restore, format!("unreadable pg_dump archive header: {e}")))?;
    h.server_major()
        .ok_or_else(|| RestoreError::bad(Stage::Restore, "the pg_dump archive header names no server version"))
}

/// A `toc.dat` at the top of the unpacked tree or one directory down — a real file in
/// a real directory: a dump reached through a symbolic link is not looked at.
fn find_toc(dir: &Path) -> Option<PathBuf> {
    let real_file = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file());
    if real_file(&dir.join("toc.dat")) {
        return Some(dir.to_path_buf());
    }
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .find(|p| real_file(&p.join("toc.dat")))
}

async fn start_empty(sandbox: &mut Sandbox, job: &RestoreJob<'_>, major: Option<u32>) -> Result<(), RestoreError> {
    let bin =
        pgbin::for_major(job.pg_bindir.as_deref(), major, false).map_err(|m| RestoreError::infra(Stage::Sandbox, m))?;
    let t = Instant::now();
    sandbox.init_and_start(bin).await?;
    sandbox.create_database(RESTORED_DB).await?;
    *job.sandbox_ready_in.lock().unwrap() = Some(t.elapsed());
    Ok(())
}

/// Applies the configured globals script (roles, tablespaces); returns whether the
/// restore may then keep owners and privileges.
async fn apply_globals(sandbox: &Sandbox, job: &RestoreJob<'_>) -> Result<bool, RestoreError> {
    let Some(key) = &job.globals_key else { return Ok(false) };
    let script = read_small(job.store.as_ref(), key).await?;
    // Without ON_ERROR_STOP: the script recreates roles that exist (postgres) and fails
    // harmlessly on those.
    let mut cmd = logical::client_command(sandbox, "psql", "postgres")?;
    cmd.args(["-X", "-q", "-f", "-"]);
    let reader: BackupReader = Box::pin(std::io::Cursor::new(Vec::new()));
    logical::stream_into(cmd, "psql (globals)", script.into_bytes(), reader, &job.store.describe()).await?;
    Ok(true)
}

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
