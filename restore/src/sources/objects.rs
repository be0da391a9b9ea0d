//! Backups kept as objects (one object, or one base-backup directory, per backup):
//! fetch, detect what it is by content (magic bytes, never the name), pick the server
//! binaries its version needs, and restore it by the method the format calls for —
//! logical dumps here, base backups in [`crate::sources::physical`].

use crate::error::{RestoreError, Stage};
use crate::request::{Consistency, RESTORED_DB, RestoreEvent, RestoreJob, Restored, read_small};
use crate::server::sandbox::Sandbox;
use crate::server::tools;
use crate::source::Archive;
use crate::sources::physical;
use crate::sources::plain;
use crate::store::{BackupObject, BackupReader};
use crate::transfer::fetch::{self, Sha256Verify};
use crate::transfer::format::{self, BackupFormat};
use crate::transfer::peel;
use crate::transfer::stream::{self, Counting};
use drcheck_config::FormatSetting;
use std::path::{Path, PathBuf};
use std::time::Instant;

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

/// Restores a backup of objects (a dump, or a base backup) into `sandbox`.
pub(crate) async fn restore(
    job: &RestoreJob<'_>,
    mut sandbox: Sandbox,
    started: Instant,
) -> Result<Restored, RestoreError> {
    let store_name = job.store.describe();
    if job.backup.is_physical() {
        check_expected(job.format, "physical")?;
        job.events.send(RestoreEvent::Format("physical".into()));
        return physical::restore(job, sandbox, started).await;
    }

    let object = &job.backup.parts[0];
    let mut raw = fetch::parallel(job.store.clone(), object, job.fetch);
    if let Some(sidecar) = &job.backup.sha256_key {
        let text = read_small(job.store.as_ref(), sidecar).await?;
        let digest = fetch::parse_sidecar(&text).ok_or_else(|| {
            RestoreError::bad(Stage::Fetch, format!("{sidecar} holds no sha256 digest (expected 64 hex digits)"))
        })?;
        raw = Box::pin(Sha256Verify::new(raw, &digest).telling(job.events.clone(), &object.key));
    } else {
        // Hashed as it streams (one core does ~0.8 GiB/s here: a dump restores slower), for
        // the proof's pin.
        raw = Box::pin(Sha256Verify::tap(raw, job.events.clone(), &object.key));
    }
    let (counted, fetch_end) = Counting::telling(raw, job.events.clone());
    let mut reader: BackupReader = Box::pin(counted);
    let head = stream::read_head(&mut reader, &store_name).await?;
    let outer = format::detect(&head);
    if outer.is_layer() && !outer.is_encryption() {
        check_declared_size(job, object, &head).await?;
    }
    let (reader, head, layers) = peel::peel(&job.into(), &sandbox, head, reader, &store_name).await?;
    let compressed = !layers.is_empty();
    let suffix = peel::layer_suffix(&layers);
    let reader: BackupReader = Box::pin(stream::Bounded::with_room(reader, job.expansion_ceiling, job.max_write_bytes));
    let inner = format::detect(&head);
    let kind = match inner {
        BackupFormat::Custom => Kind::Custom,
        BackupFormat::Tar if format::first_tar_member(&head).as_deref() == Some("toc.dat") => Kind::DumpTar,
        BackupFormat::Tar => Kind::TarArchive,
        BackupFormat::PlainSql => Kind::Plain,
        other => {
            let what = if compressed { format!("{other}{suffix}") } else { other.to_string() };
            job.events.send(RestoreEvent::Format(what.clone()));
            return Err(RestoreError::bad(
                Stage::Restore,
                format!(
                    "not a PostgreSQL backup: found {what} data (expected a pg_dump custom, tar, directory or plain SQL dump, or a base backup)"
                ),
            ));
        }
    };
    let shown = |k: &str| format!("{k}{suffix}");
    if kind != Kind::TarArchive {
        job.events.send(RestoreEvent::Format(shown(kind_name(kind))));
        let name = if kind == Kind::DumpTar { "tar" } else { kind_name(kind) };
        check_expected(job.format, name)?;
    }

    let major = match kind {
        Kind::Custom => Some(header_major(&head)?),
        Kind::DumpTar => Some(header_major(head.get(512..).unwrap_or_default())?),
        Kind::Plain => format::plain_dump_server_major(&head),
        Kind::TarArchive => None,
    };
    // When the data is from: pg_dump's own record of when it started.
    let mut consistent_at = match kind {
        Kind::Custom => dump_time(&head),
        Kind::DumpTar => dump_time(head.get(512..).unwrap_or_default()),
        Kind::Plain => {
            format::plain_dump_started(&head).map(|at| Consistency { at, source: "plain dump header (-- Started on)" })
        }
        Kind::TarArchive => None,
    };
    let restore_started = Instant::now();
    let skipped_privileges = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let done = |sandbox: Sandbox, database: String, format: String, consistent_at: Option<Consistency>| {
        let fetch = fetch_end.lock().unwrap().map(|t| t - started).unwrap_or_else(|| started.elapsed());
        Ok(Restored {
            sandbox,
            database,
            format,
            physical: false,
            fetch,
            restore: restore_started.elapsed(),
            recovered_to: None,
            manifest: None,
            consistent_at,
            skipped_privileges: match skipped_privileges.load(std::sync::atomic::Ordering::Relaxed) {
                0 => None,
                n => Some(n),
            },
            horizon: None,
            bytes_fetched: None,
            archive: None,
            combine: None,
            replay: None,
        })
    };

    if kind == Kind::TarArchive {
        let dest = sandbox.root().join("unpacked");
        stream::extract_tar(head, reader, &dest, &store_name).await?;
        // The contained tools run as the sandbox user: the unpacked files are theirs.
        sandbox.give_to_server(&dest)?;
        if let Some(toc_dir) = find_toc(&dest) {
            job.events.send(RestoreEvent::Format(shown("directory")));
            check_expected(job.format, "directory")?;
            let toc = std::fs::read(toc_dir.join("toc.dat")).unwrap_or_default();
            let major = header_major(&toc)?;
            consistent_at = dump_time(&toc);
            start_empty(&mut sandbox, job, Some(major)).await?;
            let keep_owners = apply_globals(&sandbox, job).await?;
            let mut cmd = tools::pg_restore(&sandbox, RESTORED_DB, keep_owners, job.jobs)?;
            cmd.arg("-Fd").arg(&toc_dir);
            tools::run_tool(&sandbox, cmd, "pg_restore").await?;
            return done(sandbox, RESTORED_DB.into(), shown("directory"), consistent_at);
        }
        if std::fs::symlink_metadata(dest.join("PG_VERSION")).is_ok_and(|m| m.file_type().is_file()) {
            job.events.send(RestoreEvent::Format(shown("physical")));
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
            stream::stage_to_file(head, reader, &path, &store_name).await?;
            sandbox.give_to_server(&path)?;
            let mut cmd = tools::pg_restore(&sandbox, RESTORED_DB, keep_owners, job.jobs)?;
            cmd.arg(&path);
            tools::run_tool(&sandbox, cmd, "pg_restore").await?;
        }
        Kind::Custom => {
            let cmd = tools::pg_restore(&sandbox, RESTORED_DB, keep_owners, 1)?;
            stream::stream_into(&sandbox, cmd, "pg_restore", head, reader, &store_name).await?;
        }
        Kind::DumpTar => {
            let path = sandbox.root().join("backup.tar");
            stream::stage_to_file(head, reader, &path, &store_name).await?;
            sandbox.give_to_server(&path)?;
            let mut cmd = tools::pg_restore(&sandbox, RESTORED_DB, keep_owners, 1)?;
            cmd.arg("-Ft").arg(&path);
            tools::run_tool(&sandbox, cmd, "pg_restore").await?;
        }
        Kind::Plain => {
            let cmd = tools::psql_script(&sandbox, RESTORED_DB)?;
            // Without the source's roles, ownership and privileges are left out (as
            // `pg_restore --no-owner --no-privileges` leaves them out of archives), counted.
            let privileges =
                if keep_owners { plain::Privileges::Keep } else { plain::Privileges::Skip(skipped_privileges.clone()) };
            let (head, reader) = plain::restricted(head, reader, privileges);
            stream::stream_into(&sandbox, cmd, "psql", head, reader, &store_name).await?;
        }
        Kind::TarArchive => unreachable!("handled above"),
    }
    done(sandbox, RESTORED_DB.into(), shown(kind_name(kind)), consistent_at)
}

/// The creation time a pg_dump archive header records.
fn dump_time(header: &[u8]) -> Option<Consistency> {
    let at = format::parse_dump_header(header).ok()?.created?;
    Some(Consistency { at, source: "dump header" })
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
                stream::EXPANSION_EXCEEDED,
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
    let bin = job.bins.for_major(major, false).map_err(|m| RestoreError::infra(Stage::Sandbox, m))?;
    let t = Instant::now();
    sandbox.init_and_start(bin).await?;
    sandbox.create_database(RESTORED_DB).await?;
    job.events.send(RestoreEvent::SandboxReady(t.elapsed()));
    Ok(())
}

/// Applies the configured globals script (roles, tablespaces); returns whether the
/// restore may then keep owners and privileges.
async fn apply_globals(sandbox: &Sandbox, job: &RestoreJob<'_>) -> Result<bool, RestoreError> {
    let Some(key) = &job.globals_key else { return Ok(false) };
    let script = read_small(job.store.as_ref(), key).await?;
    // Without ON_ERROR_STOP: the script recreates roles that exist (postgres) and fails
    // harmlessly on those.
    let mut cmd = tools::client_command(sandbox, "psql", "postgres")?;
    cmd.args(["-X", "-q", "-f", "-"]);
    let reader: BackupReader = Box::pin(std::io::Cursor::new(Vec::new()));
    let (head, reader) = plain::restricted(script.into_bytes(), reader, plain::Privileges::Keep);
    stream::stream_into(sandbox, cmd, "psql (globals)", head, reader, &job.store.describe()).await?;
    Ok(true)
}

/// Archived WAL objects under a `wal_prefix`: the [`Archive`] of base backups kept as
/// objects.
pub(crate) struct WalArchive {
    pub prefix: String,
    pub fetch: crate::transfer::fetch::FetchOptions,
}

#[async_trait::async_trait]
impl Archive for WalArchive {
    fn describe(&self) -> String {
        format!("archived WAL under {:?}", self.prefix)
    }

    async fn reach(
        &self,
        sandbox: &Sandbox,
        store: &std::sync::Arc<dyn crate::store::BackupStore>,
        bins: &crate::server::pgbin::Binaries,
    ) -> Result<Option<crate::server::reach::Reach>, RestoreError> {
        let listed = crate::sources::physical::wal_objects(store.list(&self.prefix).await?);
        let by_name: std::collections::BTreeMap<String, crate::store::BackupObject> =
            listed.into_iter().filter(|(_, n)| crate::server::reach::is_segment(n)).map(|(o, n)| (n, o)).collect();
        let names: Vec<String> = by_name.keys().cloned().collect();
        let fetch = self.fetch;
        crate::server::reach::newest(sandbox, bins, names, |name, path| {
            let (store, obj) = (store.clone(), by_name[&name].clone());
            async move {
                crate::sources::physical::fetch_wal_object(store, &obj, fetch, &path).await?;
                sandbox.give_to_server(&path)
            }
        })
        .await
    }

    async fn files(
        &self,
        _host: &Sandbox,
        store: &std::sync::Arc<dyn crate::store::BackupStore>,
        after: Option<&str>,
    ) -> Result<Vec<crate::source::ArchivedFile>, RestoreError> {
        let listed = match after {
            // `~` sorts after every suffix of the segment's own keys (`.gz`, `.partial`).
            Some(segment) => store.list_after(&self.prefix, &format!("{}{segment}~", self.prefix)).await?,
            None => store.list(&self.prefix).await?,
        };
        let listed = crate::sources::physical::wal_objects(listed);
        Ok(listed
            .into_iter()
            .map(|(o, name)| crate::source::ArchivedFile { name, key: o.key, size: o.size, version: o.etag })
            .collect())
    }

    async fn fetch_file(
        &self,
        _host: &Sandbox,
        store: &std::sync::Arc<dyn crate::store::BackupStore>,
        file: &crate::source::ArchivedFile,
        dest: &std::path::Path,
    ) -> Result<(), RestoreError> {
        // Pinned to the version listed: a copy replaced since is a changed object, not
        // silently the other bytes.
        let obj = crate::store::BackupObject {
            key: file.key.clone(),
            size: file.size,
            last_modified: std::time::SystemTime::UNIX_EPOCH,
            etag: file.version.clone(),
        };
        crate::sources::physical::fetch_wal_object(store.clone(), &obj, self.fetch, dest).await
    }
}

/// A store's objects under the target's prefix as its source, with the archived WAL
/// under `wal_prefix` when there is one. The pipeline lists and chooses the objects
/// itself: no catalog.
pub(crate) struct Objects {
    pub described: String,
    pub wal: Option<WalArchive>,
}

#[async_trait::async_trait]
impl crate::source::Source for Objects {
    fn describe(&self) -> String {
        self.described.clone()
    }

    fn reads_with_a_tool(&self) -> bool {
        false
    }

    async fn catalog(
        &self,
        _host: &Sandbox,
        _store: &std::sync::Arc<dyn crate::store::BackupStore>,
    ) -> Result<Option<crate::source::Catalog>, crate::error::StoreError> {
        Ok(None)
    }

    fn archive<'a>(&'a self, _catalog: Option<&'a crate::source::Catalog>) -> Option<&'a dyn Archive> {
        self.wal.as_ref().map(|w| w as &dyn Archive)
    }
}
