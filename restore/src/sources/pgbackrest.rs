//! pgBackRest repositories, read and restored through pgBackRest's own CLI (2.45+).
//!
//! drcheck never parses the repository's files: the catalog comes from `pgbackrest info
//! --output=json` (never from object timestamps), the data directory from `pgbackrest
//! restore` and archived WAL from `pgbackrest archive-get`. Every call runs contained
//! like the sandbox's own tools — as the sandbox user, Landlock-confined to the run's
//! directory — with one more right: a TCP connection to the repository's port. The
//! credentials reach it through its environment (`PGBACKREST_REPO1_*`), never its
//! command line; its configuration file is `/dev/null`, so nothing of the host's
//! `/etc/pgbackrest` applies. The restored server itself never reaches the repository:
//! drcheck spools the WAL first and recovery reads the spool (see [`crate::server::recovery`]).
//!
//! pgBackRest's exit code is not trusted where it is known to lie (`info` exits 0 on
//! a repository it reports as broken): the JSON's status is read.

use crate::error::{Blame, RestoreError, Stage, StoreError};
use crate::server::recovery;
use crate::server::sandbox::{Contained, Host, Sandbox};
use crate::source::{Archive, Repository, ToolRestored};
use crate::sources::delegate::{self, Archived, Integrity, Output, Tool, plan_segments};
use crate::store::{Backup, CatalogEntry};
use drcheck_config::RecoveryTarget;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The `pgbackrest` binary.
const PGBACKREST: &str = "/usr/bin/pgbackrest";

/// A pgBackRest repository: on S3-compatible storage, or a directory of this machine
/// (`posix`: an NFS mount, a volume) when `posix` is set.
#[derive(Clone)]
pub(crate) struct Repo {
    pub stanza: String,
    pub repo_path: String,
    /// A `posix` repository: its directory (`repo1-path`). The tool reads it (and only
    /// it, read-only) and gets no network at all.
    pub posix: Option<PathBuf>,
    pub bucket: String,
    /// `https://host:port`; `None` is AWS's regional endpoint.
    pub endpoint: Option<String>,
    pub region: String,
    pub path_style: bool,
    pub ca_file: Option<PathBuf>,
    pub verify_tls: bool,
    pub cipher_pass: Option<String>,
}

impl std::fmt::Debug for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.posix {
            Some(dir) => write!(f, "pgbackrest stanza {} in {} (posix)", self.stanza, dir.display()),
            None => write!(f, "pgbackrest stanza {} in s3://{}{}", self.stanza, self.bucket, self.repo_path),
        }
    }
}

/// Where the repository keeps a stanza's backups' files (`<repo>/backup/<stanza>/`,
/// each backup a directory there named by its label).
pub(crate) fn files_root(stanza: &str, repo_path: &str) -> String {
    let repo = repo_path.trim_matches('/');
    if repo.is_empty() { format!("backup/{stanza}/") } else { format!("{repo}/backup/{stanza}/") }
}

/// What `pgbackrest info` says about a stanza.
#[derive(Debug, Clone)]
pub(crate) struct Catalog {
    /// Oldest first, as pgBackRest lists them.
    pub backups: Vec<Backup>,
    /// The archive id (`15-1`) and the newest archived WAL file.
    pub archive_id: Option<String>,
    pub archive_max: Option<String>,
}

impl Repo {
    pub(crate) fn describe(&self) -> String {
        format!("{self:?}")
    }

    /// Host and port of the endpoint: pgBackRest 2.45 speaks only HTTPS to S3.
    fn host_port(&self) -> Result<(String, u16), RestoreError> {
        let unsupported = |message| RestoreError::Unsupported { stage: Stage::Fetch, message };
        let Some(url) = &self.endpoint else { return Ok((format!("s3.{}.amazonaws.com", self.region), 443)) };
        if !url.starts_with("https://") {
            return Err(unsupported(format!(
                "pgBackRest 2.45 reaches S3 only over https; the storage endpoint is {}",
                drcheck_config::redact_userinfo(url)
            )));
        }
        delegate::endpoint_host_port(url).ok_or_else(|| {
            unsupported(format!("bad host or port in endpoint {}", drcheck_config::redact_userinfo(url)))
        })
    }

    /// The tool's environment: the repository, its credentials (from drcheck's own
    /// environment), and work paths inside the run's directory.
    fn env(&self, work: &Path) -> Result<Vec<(String, String)>, RestoreError> {
        let common = |env: &mut Vec<(String, String)>| {
            for (k, v) in [
                ("PGBACKREST_LOG_PATH", work.display().to_string()),
                ("PGBACKREST_LOCK_PATH", work.display().to_string()),
                ("PGBACKREST_SPOOL_PATH", work.display().to_string()),
                ("PGBACKREST_LOG_LEVEL_CONSOLE", "warn".into()),
                ("PGBACKREST_LOG_LEVEL_STDERR", "error".into()),
                ("PGBACKREST_LOG_LEVEL_FILE", "off".into()),
                ("PGBACKREST_IO_TIMEOUT", "30".into()),
            ] {
                env.push((k.into(), v));
            }
        };
        if let Some(dir) = &self.posix {
            let mut env: Vec<(String, String)> = vec![
                ("PGBACKREST_STANZA".into(), self.stanza.clone()),
                ("PGBACKREST_REPO1_TYPE".into(), "posix".into()),
                ("PGBACKREST_REPO1_PATH".into(), dir.display().to_string()),
            ];
            common(&mut env);
            if let Some(pass) = &self.cipher_pass {
                env.push(("PGBACKREST_REPO1_CIPHER_TYPE".into(), "aes-256-cbc".into()));
                env.push(("PGBACKREST_REPO1_CIPHER_PASS".into(), pass.clone()));
            }
            return Ok(env);
        }
        let (host, port) = self.host_port()?;
        let mut env: Vec<(String, String)> = vec![
            ("PGBACKREST_STANZA".into(), self.stanza.clone()),
            ("PGBACKREST_REPO1_TYPE".into(), "s3".into()),
            ("PGBACKREST_REPO1_PATH".into(), self.repo_path.clone()),
            ("PGBACKREST_REPO1_S3_BUCKET".into(), self.bucket.clone()),
            ("PGBACKREST_REPO1_S3_ENDPOINT".into(), host),
            ("PGBACKREST_REPO1_STORAGE_PORT".into(), port.to_string()),
            ("PGBACKREST_REPO1_S3_REGION".into(), self.region.clone()),
            ("PGBACKREST_REPO1_S3_URI_STYLE".into(), if self.path_style { "path" } else { "host" }.into()),
            ("PGBACKREST_REPO1_STORAGE_VERIFY_TLS".into(), if self.verify_tls { "y" } else { "n" }.into()),
        ];
        common(&mut env);
        if let Some(ca) = &self.ca_file {
            env.push(("PGBACKREST_REPO1_STORAGE_CA_FILE".into(), ca.display().to_string()));
        }
        match (std::env::var("AWS_ACCESS_KEY_ID"), std::env::var("AWS_SECRET_ACCESS_KEY")) {
            (Ok(k), Ok(s)) => {
                env.push(("PGBACKREST_REPO1_S3_KEY".into(), k));
                env.push(("PGBACKREST_REPO1_S3_KEY_SECRET".into(), s));
                if let Ok(t) = std::env::var("AWS_SESSION_TOKEN") {
                    env.push(("PGBACKREST_REPO1_S3_TOKEN".into(), t));
                }
            }
            // No static keys: the instance's or pod's role.
            _ => env.push(("PGBACKREST_REPO1_S3_KEY_TYPE".into(), "auto".into())),
        }
        if let Some(pass) = &self.cipher_pass {
            env.push(("PGBACKREST_REPO1_CIPHER_TYPE".into(), "aes-256-cbc".into()));
            env.push(("PGBACKREST_REPO1_CIPHER_PASS".into(), pass.clone()));
        }
        Ok(env)
    }

    /// `pgbackrest ARGS`, contained in `sandbox`'s directory with a connection to the
    /// repository's port only.
    async fn run(&self, sandbox: &impl Contained, args: &[String]) -> Result<Output, RestoreError> {
        self.run_to(sandbox, args, None).await
    }

    /// [`Self::run`], its standard output written to `stdout_file` when given.
    async fn run_to(
        &self,
        sandbox: &impl Contained,
        args: &[String],
        stdout_file: Option<&Path>,
    ) -> Result<Output, RestoreError> {
        let work = delegate::work_dir(&sandbox.host())?;
        // A posix repository: read there, no network; the repository's group lets the
        // sandbox user read what pgBackRest wrote group-readable (drcheck as root).
        let (port, read, group) = match &self.posix {
            Some(dir) => (None, vec![dir.clone()], Some(delegate::reading_group(dir)?)),
            None => (Some(self.host_port()?.1), self.ca_file.iter().cloned().collect(), None),
        };
        let tool = Tool {
            program: Path::new(PGBACKREST),
            exec: vec![],
            read,
            port,
            group: group.flatten(),
            env: self.env(&work)?,
        };
        let mut all = vec!["--config=/dev/null".to_string()];
        all.extend(args.iter().cloned());
        delegate::run_to(sandbox, &tool, &all, stdout_file).await
    }

    /// The stanza's catalog. Backups pgBackRest marks in error are kept, with their
    /// status, so `backups list` can show them; [`select`] skips them.
    pub(crate) async fn catalog(&self, sandbox: &Sandbox) -> Result<Catalog, StoreError> {
        let out = self.run(sandbox, &["info".into(), "--output=json".into()]).await.map_err(|e| StoreError {
            store: self.describe(),
            message: e.to_string(),
            unreachable: true,
            changed: false,
        })?;
        if !out.ok() {
            return Err(StoreError {
                store: self.describe(),
                message: format!("pgbackrest info failed ({}): {}", out.how(), out.text_with_hint()),
                unreachable: true,
                changed: false,
            });
        }
        parse_info(&out.stdout, &self.stanza).map_err(|m| StoreError {
            store: self.describe(),
            message: m.0,
            unreachable: false,
            changed: false,
        })
    }

    /// Restores `backup` into the sandbox's data directory, spools the WAL recovery
    /// needs (up to `target`), and starts the server. Returns the recovered point and
    /// how many WAL files were spooled.
    pub(crate) async fn restore(
        &self,
        sandbox: &mut Sandbox,
        bins: &crate::server::pgbin::Binaries,
        backup: &Backup,
        catalog: &Catalog,
        how: crate::source::Recover<'_>,
    ) -> Result<ToolRestored, RestoreError> {
        let (target, delta, standby) = (how.target, how.delta, how.standby);
        let began = std::time::Instant::now();
        let data = sandbox.data_dir().to_path_buf();
        let tablespaces = sandbox.root().join("tablespaces");
        // Onto the copy the last restore left (a kept sandbox): only the files that differ
        // are fetched. What the last run left beside the data goes first.
        let kept = data.join("PG_VERSION").is_file();
        let delta = delta && kept;
        if kept && !delta {
            // A full restore this time (the caller measured it faster): the kept copy goes
            // first — pgBackRest restores only into an empty directory.
            empty_dir(&data)?;
            let _ = std::fs::remove_dir_all(&tablespaces);
            let _ = std::fs::remove_dir_all(sandbox.root().join("wal-spool"));
            tracing::info!(backup = %backup.key, "restoring in full over the previous copy");
        }
        let mut extra: Vec<String> = Vec::new();
        let log = sandbox.root().join("pgbackrest-restore.log");
        if delta {
            // The last server stopped (a dropped sandbox stops it): a pid file left by a
            // crash would make pgBackRest refuse.
            let _ = std::fs::remove_file(data.join("postmaster.pid"));
            let _ = std::fs::remove_dir_all(sandbox.root().join("wal-spool"));
            extra.extend(["--delta".to_string(), "--log-level-console=detail".to_string()]);
            tracing::info!(backup = %backup.key, "restoring onto the previous copy with --delta");
        }
        let mut args: Vec<String> = vec![
            "restore".into(),
            format!("--set={}", backup.key),
            format!("--pg1-path={}", data.display()),
            // Tablespaces go inside the run's directory, never their original paths.
            format!("--tablespace-map-all={}", tablespaces.display()),
            // The restored cluster must never push WAL into the repository.
            "--archive-mode=off".into(),
            "--type=immediate".into(),
            // pgBackRest restores with one process unless told: give it the
            // machine's cores, as an operator restoring by hand would.
            format!("--process-max={}", process_max()),
        ];
        args.extend(extra);
        let wal_start = backup.catalog.as_ref().and_then(|c| c.wal_start.clone());
        let wal_stop = backup.catalog.as_ref().and_then(|c| c.wal_stop.clone());
        let (Some(start), Some(stop)) = (wal_start, wal_stop) else {
            return Err(RestoreError::bad(
                Stage::Restore,
                format!("the catalog names no WAL range for {}", backup.key),
            ));
        };
        let last = match target {
            RecoveryTarget::Immediate => stop.clone(),
            _ => catalog.archive_max.clone().unwrap_or_else(|| stop.clone()),
        };
        let spool = recovery::spool_dir(sandbox)?;
        // The archive's listing (what replay will need) is read while the files restore,
        // and the first files replay will ask for are fetched then too (two windows: to a
        // point in time here, replay then never waited; one window left it waiting on 1–2
        // files): neither waits on the files, and the server does not wait on them.
        let restoring = async {
            if delta { self.run_to(&*sandbox, &args, Some(&log)).await } else { self.run(&*sandbox, &args).await }
        };
        let ahead = async {
            let (archived, paths) = self.archive_listing(&*sandbox, catalog).await?;
            let mut prefetched = std::collections::HashSet::new();
            if let (Ok(plan), Some(id)) = (plan_segments(&start, &stop, &last, &archived), &catalog.archive_id) {
                let first =
                    plan.segments.iter().take(2 * delegate::TOOL_WAL_AT_ONCE).filter_map(|n| Some((n, paths.get(n)?)));
                let fetched = futures::future::join_all(
                    first.map(|(name, path)| self.prefetch_segment(&*sandbox, id, &spool, name, path)),
                )
                .await;
                prefetched.extend(fetched.into_iter().flatten());
            }
            Ok::<_, RestoreError>((archived, prefetched))
        };
        let (out, ahead) = tokio::join!(restoring, ahead);
        let out = out?;
        let bytes_fetched = delta.then(|| fetched_by_delta(&std::fs::read_to_string(&log).unwrap_or_default()));
        if !out.ok() {
            return Err(classify(sandbox, &format!("pgbackrest restore of {}", backup.key), &out));
        }
        let (archived, prefetched) = ahead?;
        let plan = plan_segments(&start, &stop, &last, &archived).map_err(|missing| {
            RestoreError::bad(
                Stage::Fetch,
                format!(
                    "WAL file {missing} is missing from the repository: backup {} needs {start} to {stop} to become consistent",
                    backup.key
                ),
            )
        })?;
        if let Some(gap) = &plan.gap {
            tracing::warn!(backup = %backup.key, missing = %gap, "the WAL archive has a gap after the backup: recovery stops before it");
        }
        let n = plan.segments.len();
        let fetched_in = began.elapsed();
        let recovered = delegate::replay_plan(sandbox, bins, target, &archived, &plan, standby, |host, name, part| {
            let early = prefetched.contains(&name).then(|| spool.join(format!("{PREFETCHED}{name}")));
            async move {
                match early {
                    Some(early) => std::fs::rename(&early, &part)
                        .map_err(|e| RestoreError::infra(Stage::Fetch, format!("spooling {name}: {e}"))),
                    None => self.fetch_wal(&host, &part, &name).await,
                }
            }
        })
        .await?;
        tracing::info!(segments = n, backup = %backup.key, "archived WAL replayed as it was fetched");
        Ok(ToolRestored {
            recovered_to: recovered.recovered_to,
            horizon: recovered.horizon,
            wal_files: n,
            wal_gap: plan.gap,
            pace: recovered.pace,
            fetched_in,
            bytes_fetched,
        })
    }

    /// The repository checked without a restore: `pgbackrest verify`'s report read
    /// line by line (its exit code is 0 whatever it finds), and WAL continuity checked
    /// by drcheck (verify calls backups valid whose WAL is gone).
    pub(crate) async fn integrity(
        &self,
        sandbox: &impl Contained,
        catalog: &Catalog,
        reuse: Option<&str>,
    ) -> Result<Integrity, RestoreError> {
        let mut integrity = Integrity::default();
        if let Some(why) = reuse {
            integrity.notes.push(format!("pgbackrest verify not run again: {why}"));
        } else {
            let started = std::time::Instant::now();
            let out = self.run(sandbox, &["verify".into(), "--output=text".into(), "--verbose=y".into()]).await?;
            if !out.ok() {
                return Err(classify(sandbox, "pgbackrest verify", &out));
            }
            read_verify(&String::from_utf8_lossy(&out.stdout), &mut integrity);
            integrity.tool_seconds = Some(started.elapsed().as_secs_f64());
        }
        let archived = self.archived_segments(sandbox, catalog).await?;
        delegate::continuity(&catalog.backups, &archived, &mut integrity);
        Ok(integrity)
    }

    /// How far the stanza's archive replays: its newest segments read with `pg_waldump`.
    pub(crate) async fn reach(
        &self,
        sandbox: &Sandbox,
        catalog: &Catalog,
        bins: &crate::server::pgbin::Binaries,
    ) -> Result<Option<crate::server::reach::Reach>, RestoreError> {
        // `archive-get` needs the cluster's pg_control, which exists only after a
        // restore: `repo-get` reads the file itself (decrypted, still compressed).
        let Some(id) = &catalog.archive_id else { return Ok(None) };
        let files = self.archived_files(sandbox, id).await?;
        let names: Vec<String> = files.keys().cloned().collect();
        crate::server::reach::newest(sandbox, bins, names, |name, path| {
            let file = format!("archive/{}/{id}/{}", self.stanza, files[&name]);
            async move {
                self.repo_get_wal(sandbox, &file, &path).await?;
                sandbox.give_to_server(&path)
            }
        })
        .await
    }

    /// Every segment of the archive `id`, with its path in the archive
    /// (`0000000100000000/000000010000000000000003-<sha1>.gz`).
    async fn archived_files(
        &self,
        sandbox: &impl Contained,
        id: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, RestoreError> {
        segment_paths(&self.list_archive(sandbox, id).await?)
    }

    /// `repo-ls --recurse --output=json` of the archive `id`: its JSON.
    async fn list_archive(&self, sandbox: &impl Contained, id: &str) -> Result<Vec<u8>, RestoreError> {
        let args =
            ["repo-ls".into(), format!("archive/{}/{id}", self.stanza), "--recurse".into(), "--output=json".into()];
        let out = self.run(sandbox, &args).await?;
        if !out.ok() {
            return Err(classify(sandbox, "pgbackrest repo-ls of the WAL archive", &out));
        }
        Ok(out.stdout)
    }

    /// The stanza's current archive, listed once: its WAL files, and each segment's path
    /// in the repository.
    async fn archive_listing(
        &self,
        sandbox: &impl Contained,
        catalog: &Catalog,
    ) -> Result<(Archived, std::collections::BTreeMap<String, String>), RestoreError> {
        let Some(id) = &catalog.archive_id else { return Ok(Default::default()) };
        let listing = self.list_archive(sandbox, id).await?;
        let archived = parse_repo_ls(&listing).map_err(|m| RestoreError::infra(Stage::Fetch, m))?;
        Ok((archived, segment_paths(&listing)?))
    }

    /// `repo-get` of the archived WAL file `file` (decrypted, still compressed: next to
    /// `dest`), decompressed into `dest` — for when there is no `pg_control` for
    /// `archive-get`.
    async fn repo_get_wal(&self, sandbox: &impl Contained, file: &str, dest: &Path) -> Result<(), RestoreError> {
        let raw = dest.with_extension("repo");
        let done = async {
            let out = self.run_to(sandbox, &["repo-get".into(), file.to_string()], Some(&raw)).await?;
            let empty = std::fs::metadata(&raw).map(|m| m.len() == 0).unwrap_or(true);
            if !out.ok() || empty {
                return Err(classify(sandbox, &format!("pgbackrest repo-get {file}"), &out));
            }
            crate::sources::physical::decompress_file(&raw, dest, file).await
        }
        .await;
        let _ = std::fs::remove_file(&raw);
        done
    }

    /// Fetches segment `name` (at `path` in the archive `id`) into the spool as
    /// `.prefetched-NAME` while the files restore, before there is a `pg_control` for
    /// `archive-get`: `repo-get` (decrypted, still compressed), decompressed by drcheck —
    /// what `archive-get` does, no more (replay checks every record's CRC and every page's
    /// address, as it does for what `archive-get` brings). Returns the name when it is
    /// there; anything else (bzip2, a failure) is left to `archive-get`, which says why.
    async fn prefetch_segment(
        &self,
        sandbox: &Sandbox,
        id: &str,
        spool: &Path,
        name: &str,
        path: &str,
    ) -> Option<String> {
        let file = format!("archive/{}/{id}/{path}", self.stanza);
        let base = path.rsplit('/').next().unwrap_or(path);
        let ext = base.get(65..)?;
        if !matches!(ext, "" | ".gz" | ".zst" | ".lz4") {
            return None;
        }
        let part = spool.join(format!(".prefetch-{name}"));
        let done = match self.repo_get_wal(sandbox, &file, &part).await {
            Ok(()) => std::fs::rename(&part, spool.join(format!("{PREFETCHED}{name}"))).ok(),
            Err(_) => None,
        };
        if done.is_none() {
            let _ = std::fs::remove_file(&part);
            tracing::debug!(segment = name, "not fetched ahead of the restore: left to archive-get");
        }
        done.map(|()| name.to_string())
    }

    /// `pgbackrest archive-get NAME` into `dest`.
    async fn fetch_wal(&self, sandbox: &impl Contained, dest: &Path, name: &str) -> Result<(), RestoreError> {
        let pg1 = format!("--pg1-path={}", sandbox.host().data_dir().display());
        let out = self.run(sandbox, &["archive-get".into(), pg1, name.to_string(), dest.display().to_string()]).await?;
        match out.code {
            Some(0) => Ok(()),
            _ => Err(classify(sandbox, &format!("pgbackrest archive-get {name}"), &out)),
        }
    }

    /// The WAL files (and timeline history files) in the stanza's current archive.
    async fn archived_segments(&self, sandbox: &impl Contained, catalog: &Catalog) -> Result<Archived, RestoreError> {
        let Some(id) = &catalog.archive_id else { return Ok(Archived::default()) };
        let listing = self.list_archive(sandbox, id).await?;
        parse_repo_ls(&listing).map_err(|m| RestoreError::infra(Stage::Fetch, m))
    }
}

/// `repo-ls --output=json` of the archive `id`, each WAL file with its path in the
/// repository as its version (a segment's name carries its SHA-1: a replaced segment
/// has another name).
fn parse_archive_files(json: &[u8], dir: &str) -> Result<Vec<crate::source::ArchivedFile>, crate::error::Malformed> {
    let v: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| format!("pgbackrest repo-ls printed no JSON: {e}"))?;
    let map = v.as_object().ok_or("pgbackrest repo-ls: expected a JSON object")?;
    let mut out = Vec::new();
    for (path, info) in map.iter().filter(|(_, i)| i["type"] == "file") {
        let Some(name) = delegate::archived_name(path.rsplit('/').next().unwrap_or(path)) else { continue };
        let size = info["size"].as_u64().unwrap_or(0);
        let version = format!("{path}@{size}@{}", info["time"].as_i64().unwrap_or(0));
        out.push(crate::source::ArchivedFile { name, key: format!("{dir}/{path}"), size, version: Some(version) });
    }
    Ok(out)
}

/// A pgBackRest repository as a target's source: its catalog read by `pgbackrest info`.
#[async_trait::async_trait]
impl crate::source::Source for Repo {
    fn describe(&self) -> String {
        Repo::describe(self)
    }

    fn reads_with_a_tool(&self) -> bool {
        true
    }

    async fn catalog(
        &self,
        host: &Sandbox,
        _store: &std::sync::Arc<dyn crate::store::BackupStore>,
    ) -> Result<Option<crate::source::Catalog>, StoreError> {
        let catalog = Repo::catalog(self, host).await?;
        Ok(Some(crate::source::Catalog {
            described: self.describe(),
            restorable: catalog.backups.clone(),
            repository: std::sync::Arc::new(Stanza { repo: self.clone(), catalog }),
        }))
    }

    fn archive<'a>(&'a self, catalog: Option<&'a crate::source::Catalog>) -> Option<&'a dyn Archive> {
        catalog.map(|c| c.repository.as_ref() as &dyn Archive)
    }
}

/// A stanza with the catalog it was read as: the [`Repository`] a run restores from.
pub(crate) struct Stanza {
    pub repo: Repo,
    pub catalog: Catalog,
}

#[async_trait::async_trait]
impl Archive for Stanza {
    fn describe(&self) -> String {
        self.repo.describe()
    }

    async fn reach(
        &self,
        sandbox: &Sandbox,
        _store: &std::sync::Arc<dyn crate::store::BackupStore>,
        bins: &crate::server::pgbin::Binaries,
    ) -> Result<Option<crate::server::reach::Reach>, RestoreError> {
        self.repo.reach(sandbox, &self.catalog, bins).await
    }

    async fn files(
        &self,
        host: &Sandbox,
        _store: &std::sync::Arc<dyn crate::store::BackupStore>,
        _after: Option<&str>,
    ) -> Result<Vec<crate::source::ArchivedFile>, RestoreError> {
        let Some(id) = &self.catalog.archive_id else { return Ok(Vec::new()) };
        let listing = self.repo.list_archive(host, id).await?;
        parse_archive_files(&listing, &format!("archive/{}/{id}", self.repo.stanza))
            .map_err(|m| RestoreError::infra(Stage::Fetch, m))
    }

    async fn fetch_file(
        &self,
        host: &Sandbox,
        _store: &std::sync::Arc<dyn crate::store::BackupStore>,
        file: &crate::source::ArchivedFile,
        dest: &Path,
    ) -> Result<(), RestoreError> {
        self.repo.fetch_wal(host, dest, &file.name).await
    }
}

#[async_trait::async_trait]
impl Repository for Stanza {
    fn tool(&self) -> &'static str {
        "pgbackrest"
    }

    async fn restore(
        &self,
        sandbox: &mut Sandbox,
        _store: &std::sync::Arc<dyn crate::store::BackupStore>,
        bins: &crate::server::pgbin::Binaries,
        backup: &Backup,
        how: crate::source::Recover<'_>,
    ) -> Result<ToolRestored, RestoreError> {
        self.repo.restore(sandbox, bins, backup, &self.catalog, how).await
    }

    async fn integrity(
        &self,
        host: &Host,
        _store: &std::sync::Arc<dyn crate::store::BackupStore>,
        _backups: &[Backup],
        reuse: Option<&str>,
    ) -> Result<Integrity, RestoreError> {
        self.repo.integrity(host, &self.catalog, reuse).await
    }
}

/// The bytes a `restore --delta` fetched, from its detail log: each `restore file PATH
/// (…, SIZE, PCT%)` line but those that say `exists and matches backup` (kept, not
/// fetched). Sizes are pgBackRest's own rounding (`8KB`, `1.5MB`).
pub(crate) fn fetched_by_delta(log: &str) -> u64 {
    let size = |s: &str| -> Option<u64> {
        let s = s.trim();
        let digits = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (n, unit) = s.split_at(digits);
        let n: f64 = n.parse().ok()?;
        let scale = match unit {
            "B" => 1u64,
            "KB" => 1 << 10,
            "MB" => 1 << 20,
            "GB" => 1 << 30,
            "TB" => 1 << 40,
            _ => return None,
        };
        Some((n * scale as f64) as u64)
    };
    log.lines()
        .filter(|l| l.contains("restore file ") && !l.contains("exists and matches backup"))
        .filter_map(|l| {
            let inside = l.rsplit_once(')')?.0.rsplit_once('(')?.1;
            let parts: Vec<&str> = inside.split(", ").collect();
            size(parts.get(parts.len().checked_sub(2)?)?)
        })
        .sum()
}

/// pgBackRest's own verdict on a failure, from its exit code (its error code, see
/// pgBackRest's `error.yaml`): checksum, invalid or malformed files, mismatched or
/// invalid backups and archives, a repository file missing from a consistent catalog —
/// the backup's; everything else (connections, services, access, options, local files,
/// memory, the kernel, crypto — a wrong passphrase is the config's) the world's.
fn blame(out: &Output) -> Blame {
    const BACKUP: [i32; 9] = [
        26, // checksum
        28, // file-invalid
        29, // format
        44, // archive-mismatch
        45, // archive-duplicate
        51, // backup-mismatch
        55, // file-missing
        75, // backup-set-invalid
        99, // json-format
    ];
    if out.code.is_some_and(|c| BACKUP.contains(&c)) { Blame::Backup } else { Blame::World }
}

fn classify(sandbox: &impl Contained, what: &str, out: &Output) -> RestoreError {
    delegate::judged(sandbox, what, out, blame)
}

/// Where a segment fetched ahead of the restore waits in the spool.
const PREFETCHED: &str = ".prefetched-";

/// Each segment of a `repo-ls --recurse --output=json` listing with its path in the
/// archive (`0000000100000000/000000010000000000000003-<sha1>.gz`).
fn segment_paths(json: &[u8]) -> Result<std::collections::BTreeMap<String, String>, RestoreError> {
    let v: serde_json::Value = serde_json::from_slice(json)
        .map_err(|e| RestoreError::infra(Stage::Fetch, format!("pgbackrest repo-ls printed no JSON: {e}")))?;
    let mut files = std::collections::BTreeMap::new();
    for (path, info) in v.as_object().into_iter().flatten() {
        let name = path.rsplit('/').next().unwrap_or(path);
        let segment = name.get(..24).filter(|s| s.chars().all(|c| c.is_ascii_hexdigit()));
        if let (Some(segment), true) = (segment, info["type"] == "file" && name[24..].starts_with('-')) {
            files.insert(segment.to_ascii_uppercase(), path.clone());
        }
    }
    Ok(files)
}

/// `repo-ls --output=json` of an archive: `0000000100000000/000000010000000000000003-<sha1>.gz`
/// entries give the segment names; `00000002.history` the timeline histories.
fn parse_repo_ls(json: &[u8]) -> Result<Archived, crate::error::Malformed> {
    let v: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| format!("pgbackrest repo-ls printed no JSON: {e}"))?;
    let map = v.as_object().ok_or("pgbackrest repo-ls: expected a JSON object")?;
    let mut out = Archived::default();
    for (path, _) in map.iter().filter(|(_, i)| i["type"] == "file") {
        out.add(path.rsplit('/').next().unwrap_or(path));
    }
    Ok(out)
}

/// `pgbackrest verify --output=text --verbose=y`: `status: error`, any non-zero count of
/// missing or invalid files, or a backup whose status is not `valid` is a problem.
fn read_verify(text: &str, integrity: &mut Integrity) {
    let mut context = String::new();
    for line in text.lines().map(str::trim) {
        if let Some(status) = line.strip_prefix("status: ") {
            integrity.notes.push(format!("pgbackrest verify: status {status}"));
            if status != "ok" {
                integrity.problems.push(format!("pgbackrest verify reports status {status}"));
            }
        } else if line.starts_with("archiveId:") || line.starts_with("backup:") {
            context = line.split(',').next().unwrap_or(line).to_string();
            if let Some(status) = line.split(", ").find_map(|p| p.strip_prefix("status: "))
                && status != "valid"
            {
                integrity.problems.push(format!("pgbackrest verify: {context} is {status}"));
            }
        } else if line.starts_with("missing:") {
            let bad: Vec<&str> = line
                .split(", ")
                .filter(|p| p.rsplit(' ').next().is_some_and(|n| n.parse::<u64>().is_ok_and(|n| n > 0)))
                .collect();
            if !bad.is_empty() {
                integrity.problems.push(format!("pgbackrest verify: {context}: {}", bad.join(", ")));
            }
        }
    }
}

/// `pgbackrest info --output=json` for `stanza` → the catalog. A stanza pgBackRest
/// reports in error (missing, no valid backups is fine) is an error, whatever its exit code.
fn parse_info(json: &[u8], stanza: &str) -> Result<Catalog, crate::error::Malformed> {
    let v = lenient_json(json).map_err(|e| format!("pgbackrest info printed no JSON: {e}"))?;
    let s = v
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == stanza))
        .ok_or_else(|| format!("pgbackrest info knows no stanza {stanza:?}"))?;
    let code = s["status"]["code"].as_i64().unwrap_or(-1);
    // 0 ok, 2 no valid backups (an empty catalog, said as such by the caller).
    if code != 0 && code != 2 {
        // The stanza says "other" (99); each repository says why, in pgBackRest's words.
        let said: Vec<String> = s["repo"]
            .as_array()
            .map(|a| a.as_slice())
            .unwrap_or_default()
            .iter()
            .filter(|r| r["status"]["code"].as_i64().is_some_and(|c| c != 0 && c != 2))
            .filter_map(|r| r["status"]["message"].as_str().map(tool_words))
            .collect();
        let status = s["status"]["message"].as_str().unwrap_or("broken");
        if said.is_empty() {
            return Err(crate::error::Malformed::from(format!(
                "pgbackrest reports stanza {stanza:?} as {status} (status {code})"
            )));
        }
        let said = said.join(" / ");
        let encrypted = s["cipher"].as_str().is_some_and(|c| c != "none");
        return Err(crate::error::Malformed::from(format!("pgBackRest: {said}{}", info_hint(&said, encrypted))));
    }
    let time = |t: &serde_json::Value| SystemTime::UNIX_EPOCH + Duration::from_secs(t.as_u64().unwrap_or(0));
    let text = |t: &serde_json::Value| t.as_str().map(str::to_string);
    let backups = s["backup"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|b| Backup {
            key: b["label"].as_str().unwrap_or_default().to_string(),
            size: b["info"]["size"].as_u64().unwrap_or(0),
            last_modified: time(&b["timestamp"]["stop"]),
            parts: Vec::new(),
            sha256_key: None,
            catalog: Some(CatalogEntry {
                tool: "pgbackrest",
                kind: b["type"].as_str().unwrap_or("unknown").to_string(),
                started: time(&b["timestamp"]["start"]),
                status: if b["error"].as_bool() == Some(true) {
                    crate::store::CatalogStatus::Unusable("error".into())
                } else {
                    crate::store::CatalogStatus::Ok
                },
                wal_start: text(&b["archive"]["start"]),
                wal_stop: text(&b["archive"]["stop"]),
                tablespaces: vec![],
            }),
        })
        .filter(|b| !b.key.is_empty())
        .collect();
    // The archive of the current database (the last `db` entry).
    let db_id = s["db"].as_array().and_then(|d| d.last()).and_then(|d| d["id"].as_u64());
    let archive = s["archive"]
        .as_array()
        .and_then(|a| a.iter().rev().find(|x| db_id.is_none() || x["database"]["id"].as_u64() == db_id));
    Ok(Catalog {
        backups,
        archive_id: archive.and_then(|a| text(&a["id"])),
        archive_max: archive.and_then(|a| text(&a["max"])),
    })
}

/// pgBackRest's JSON as it prints it. A message may quote the raw bytes of a file it could
/// not read — an encrypted repository read with a wrong passphrase is garbage, control
/// characters and invalid UTF-8 included, which JSON does not allow in a string. Those
/// become spaces (or U+FFFD) and the text is read again; the first error is kept.
fn lenient_json(bytes: &[u8]) -> Result<serde_json::Value, serde_json::Error> {
    serde_json::from_slice(bytes).or_else(|first| {
        let text: String = String::from_utf8_lossy(bytes)
            .chars()
            .map(|c| match c {
                '\n' | '\r' | '\t' => ' ',
                c if c.is_control() => '\u{FFFD}',
                c => c,
            })
            .collect();
        serde_json::from_str(&text).map_err(|_| first)
    })
}

/// A tool's message as a person can read it: each line up to the first character that is
/// not printable ASCII (what a tool quotes of an unreadable file), lines said once, at most 600 bytes.
pub(crate) fn tool_words(message: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    for line in message.lines() {
        // pgBackRest speaks ASCII; what is not is quoted from a file.
        let cut = line.find(|c: char| !(c == ' ' || c == '\t' || c.is_ascii_graphic()));
        let line = match cut {
            Some(at) => format!("{} …", line[..at].trim_end()),
            None => line.trim().to_string(),
        };
        if !line.is_empty() && !lines.contains(&line) {
            lines.push(line);
        }
    }
    let mut text = lines.join(" ");
    if text.len() > 600 {
        let mut cut = 600;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// What to do about what `pgbackrest info` said of a repository.
fn info_hint(said: &str, encrypted: bool) -> &'static str {
    if said.contains("certificate") {
        " — TLS: the store's certificate is not trusted: set the storage's ca_file to its CA"
    } else if encrypted && (said.contains("FormatError") || said.contains("CryptoError")) {
        " — an encrypted repository read with a wrong passphrase looks like this: check the target's cipher_pass"
    } else if said.contains("HostConnectError") || said.contains("Connection refused") {
        " — pgBackRest cannot reach the store: check the storage's endpoint and that the store is up"
    } else {
        ""
    }
}

/// Processes for `pgbackrest restore`: the cores this process may use (1–16).
/// Removes everything inside `dir`, never following a link, keeping `dir` itself (its
/// owner and mode are the sandbox's).
fn empty_dir(dir: &Path) -> Result<(), RestoreError> {
    let fail = |e: std::io::Error| RestoreError::infra(Stage::Restore, format!("emptying {}: {e}", dir.display()));
    for entry in std::fs::read_dir(dir).map_err(fail)? {
        let path = entry.map_err(fail)?.path();
        match std::fs::symlink_metadata(&path).map_err(fail)?.is_dir() {
            true => std::fs::remove_dir_all(&path).map_err(fail)?,
            false => std::fs::remove_file(&path).map_err(fail)?,
        }
    }
    Ok(())
}

fn process_max() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 16)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_delta_restore_counts_what_it_fetched_not_what_it_kept() {
        let log = "P00   INFO: restore backup set 20261206-101010F
P01 DETAIL: restore file /d/base/1/113 - exists and matches backup (bundle 20261206-101010F/1/0, 8KB, 0.04%) checksum 9b
P01 DETAIL: restore file /d/base/1/114 (bundle 20261206-101010F/1/8192, 1.5MB, 10.00%) checksum 4b
P01 DETAIL: restore file /d/backup_label (260B, 10.01%) checksum 9f
P01 DETAIL: restore file /d/global/pg_control (8KB, 100.00%) checksum aa
P00 DETAIL: sync path '/d'";
        assert_eq!(super::fetched_by_delta(log), (1.5 * 1048576.0) as u64 + 260 + 8192);
        assert_eq!(super::fetched_by_delta(""), 0);
    }

    #[test]
    fn pgbackrests_exit_code_says_who_is_to_blame() {
        let out = |code: i32| delegate::Output { code: Some(code), signal: None, stdout: vec![], stderr: vec![] };
        for backup in [26, 28, 29, 44, 51, 55, 75] {
            assert_eq!(blame(&out(backup)), Blame::Backup, "{backup}");
        }
        // Host connect, service (5xx), access (403), crypto (a wrong passphrase), file
        // write (a full disk), the kernel, memory.
        for world in [49, 101, 105, 95, 64, 100, 94, 41, 42] {
            assert_eq!(blame(&out(world)), Blame::World, "{world}");
        }
    }

    use super::*;

    const INFO: &str = r#"[{"archive":[{"database":{"id":1,"repo-key":1},"id":"15-1","max":"000000010000000000000008","min":"000000010000000000000002"}],
      "backup":[{"archive":{"start":"000000010000000000000003","stop":"000000010000000000000003"},"error":false,"info":{"size":100},"label":"20261130-163959F","timestamp":{"start":1796056799,"stop":1796056802},"type":"full"},
                {"archive":{"start":"000000010000000000000006","stop":"000000010000000000000007"},"error":true,"info":{"size":200},"label":"20261130-163959F_20261130-164005I","timestamp":{"start":1796056805,"stop":1796056807},"type":"incr"}],
      "db":[{"id":1,"system-id":1,"version":"15"}],"name":"main","status":{"code":0,"message":"ok"}}]"#;

    #[test]
    fn info_gives_the_catalog_with_types_statuses_and_wal_ranges() {
        let c = parse_info(INFO.as_bytes(), "main").unwrap();
        assert_eq!(c.backups.len(), 2);
        let incr = c.backups[1].catalog.as_ref().unwrap();
        assert_eq!((incr.kind.as_str(), incr.status.as_str()), ("incr", "error"));
        assert_eq!(incr.wal_stop.as_deref(), Some("000000010000000000000007"));
        assert_eq!(c.archive_max.as_deref(), Some("000000010000000000000008"));
        assert_eq!(c.archive_id.as_deref(), Some("15-1"));
        assert!(parse_info(INFO.as_bytes(), "other").is_err());
        let broken = INFO.replace(r#""code":0,"message":"ok""#, r#""code":99,"message":"other""#);
        assert!(parse_info(broken.as_bytes(), "main").unwrap_err().0.contains("status 99"));
        assert!(parse_info(b"not json", "main").is_err());
    }

    /// What pgBackRest 2.45 prints for an encrypted repository read with a wrong
    /// passphrase (recorded by hand: the garbage it quotes is raw bytes, control characters
    /// and invalid UTF-8 inside a JSON string): its own words, without the garbage.
    #[test]
    fn a_repositorys_own_words_reach_the_user() {
        let mut raw = br#"[{"archive":[],"backup":[],"cipher":"aes-256-cbc","db":[],"name":"main","repo":[{"cipher":"aes-256-cbc","key":1,"status":{"code":99,"message":"[FormatError] unable to load info file '/r/backup/main/backup.info' or '/r/backup/main/backup.info.copy':\nFormatError: key/value found outside of section at line 1: "#.to_vec();
        raw.extend_from_slice(b"\xdf\x9a\x1cJ\xa5\xc9c\x01\x02garbage\x1f");
        raw.extend_from_slice(br#"\nFormatError: key/value found outside of section at line 1: "#);
        raw.extend_from_slice(b"\xdf\x9a\x1cJ\x00");
        raw.extend_from_slice(br#"\nHINT: backup.info cannot be opened and is required to perform a backup.\nHINT: has a stanza-create been performed?"}}],"status":{"code":99,"lock":{"backup":{"held":false}},"message":"other"}}]"#);
        assert!(serde_json::from_slice::<serde_json::Value>(&raw).is_err(), "not JSON as printed");
        let e = parse_info(&raw, "main").unwrap_err().0;
        assert!(
            e.starts_with("pgBackRest: [FormatError] unable to load info file '/r/backup/main/backup.info'"),
            "{e}"
        );
        assert_eq!(e.matches("key/value found outside of section at line 1: …").count(), 1, "said once: {e}");
        assert!(e.contains("HINT: has a stanza-create been performed?"), "{e}");
        assert!(e.ends_with("check the target's cipher_pass"), "{e}");
        assert!(!e.contains("garbage") && !e.chars().any(|c| c.is_control() || c == '\u{FFFD}'), "{e:?}");
        let down = INFO.replace(
            r#""code":0,"message":"ok""#,
            r#""code":99,"message":"other"},"repo":[{"key":1,"status":{"code":99,"message":"[HostConnectError] unable to get address for 'nowhere': [-2] Name or service not known"}}],"x":{"#,
        );
        let e = parse_info(down.as_bytes(), "main").unwrap_err().0;
        assert!(e.contains("[HostConnectError] unable to get address for 'nowhere'") && e.contains("endpoint"), "{e}");
    }

    #[test]
    fn verify_reports_are_read_not_their_exit_code() {
        let ok = "stanza: main\nstatus: ok\n  archiveId: 15-1, total WAL checked: 7, total valid WAL: 7\n    missing: 0, checksum invalid: 0, size invalid: 0, other: 0\n  backup: 20261130-163959F, status: valid, total files checked: 1265, total valid files: 1265\n    missing: 0, checksum invalid: 0, size invalid: 0, other: 0\n";
        let mut i = Integrity::default();
        read_verify(ok, &mut i);
        assert!(i.problems.is_empty(), "{:?}", i.problems);
        let bad = ok
            .replace("status: ok", "status: error")
            .replacen("missing: 0, checksum invalid: 0", "missing: 0, checksum invalid: 2", 2)
            .replace("status: valid", "status: invalid");
        let mut i = Integrity::default();
        read_verify(&bad, &mut i);
        assert_eq!(i.problems.len(), 4, "{:?}", i.problems);
        assert!(
            i.problems.iter().any(|p| p.contains("backup: 20261130-163959F: checksum invalid: 2")),
            "{:?}",
            i.problems
        );
    }

    #[test]
    fn repo_ls_lists_segments_and_histories() {
        let ls = r#"{".":{"type":"path"},"0000000100000000/000000010000000000000003-aa.gz":{"type":"file"},
            "0000000100000000":{"type":"path"},
            "0000000100000000/000000010000000000000003.00000028.backup":{"type":"file"},
            "00000002.history":{"type":"file"}}"#;
        let a = parse_repo_ls(ls.as_bytes()).unwrap();
        assert_eq!(a.segments.len(), 1);
        assert_eq!(a.history.len(), 1);
        assert!(parse_repo_ls(b"[]").is_err());
    }

    #[test]
    fn a_followers_listing_names_each_file_with_its_version() {
        let ls = r#"{".":{"type":"path"},
            "0000000100000000/000000010000000000000003-aa.gz":{"type":"file","size":100,"time":5},
            "0000000100000000/000000010000000000000003.00000028.backup":{"type":"file","size":3},
            "00000002.history":{"type":"file","size":42,"time":7}}"#;
        let mut files = parse_archive_files(ls.as_bytes(), "archive/main/15-1").unwrap();
        files.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].name, "000000010000000000000003");
        assert_eq!(files[0].key, "archive/main/15-1/0000000100000000/000000010000000000000003-aa.gz");
        assert_eq!(files[0].size, 100);
        assert_eq!(files[1].name, "00000002.history");
        // Another copy of the segment (another SHA-1 in its name) is another version.
        let other = r#"{"0000000100000000/000000010000000000000003-bb.gz":{"type":"file","size":100,"time":5}}"#;
        let again = parse_archive_files(other.as_bytes(), "archive/main/15-1").unwrap();
        assert_ne!(again[0].version, files[0].version);
    }
}
