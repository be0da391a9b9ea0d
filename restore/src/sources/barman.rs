//! barman-cloud catalogs (what CloudNativePG writes), read and restored through
//! barman-cloud's own CLI (3.4+).
//!
//! The catalog comes from `barman-cloud-backup-list --format json` — never from object
//! timestamps: barman uploads `data.tar` before `backup.info`, so the newest object is not
//! the newest backup, and only backups whose status is `DONE` are restorable. Backups come
//! from `barman-cloud-restore`, archived WAL from `barman-cloud-wal-restore`, each
//! contained (see [`crate::sources::delegate`]). drcheck's own S3 client only lists names: the
//! archive's segment names (to know which files recovery needs and whether one is
//! missing) and the backup's objects (for its size); it reads `backup.info` for the
//! time zone the JSON listing drops.

use crate::error::{Blame, RestoreError, Stage, StoreError};
use crate::server::sandbox::{Contained, Host, Sandbox};
use crate::source::{Archive, Repository, ToolRestored};
use crate::sources::delegate::{self, Archived, Integrity, Output, Tool, plan_segments};
use crate::store::{Backup, BackupStore, CatalogEntry};
use drcheck_config::RecoveryTarget;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The interpreter barman-cloud's scripts run on (Debian's `barman-cli-cloud`).
const PYTHON: &str = "/usr/bin/python3";

/// A barman-cloud catalog: `s3://bucket/prefix` + server name.
#[derive(Clone)]
pub(crate) struct Catalog {
    pub bucket: String,
    /// The destination's path in the bucket (`clusters`), without slashes around it.
    pub prefix: String,
    pub server_name: String,
    pub endpoint: Option<String>,
    pub region: String,
    pub ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "barman-cloud server {} in {}", self.server_name, self.destination())
    }
}

impl Catalog {
    pub(crate) fn describe(&self) -> String {
        format!("{self:?}")
    }

    fn destination(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    /// Where the server's objects live in the bucket.
    fn server_prefix(&self) -> String {
        if self.prefix.is_empty() {
            format!("{}/", self.server_name)
        } else {
            format!("{}/{}/", self.prefix, self.server_name)
        }
    }

    fn tool<'a>(&self, program: &'a Path) -> Result<Tool<'a>, RestoreError> {
        let port = match &self.endpoint {
            Some(e) => delegate::endpoint_port(e)
                .ok_or_else(|| RestoreError::infra(Stage::Fetch, format!("no port in endpoint {e:?}")))?,
            None => 443,
        };
        let mut env: Vec<(String, String)> = vec![("AWS_DEFAULT_REGION".into(), self.region.clone())];
        for k in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"] {
            if let Ok(v) = std::env::var(k) {
                env.push((k.into(), v));
            }
        }
        if let Some(ca) = &self.ca_file {
            env.push(("AWS_CA_BUNDLE".into(), ca.display().to_string()));
        }
        // Python reads its own installation and packages; nothing is written there.
        let read: Vec<PathBuf> = ["/usr/local/lib", "/etc/python3", "/usr/lib/python3"]
            .iter()
            .map(PathBuf::from)
            .chain(self.ca_file.iter().cloned())
            .filter(|p| p.exists())
            .collect();
        let python = std::fs::canonicalize(PYTHON).unwrap_or_else(|_| PathBuf::from(PYTHON));
        Ok(Tool { program, exec: vec![PathBuf::from(PYTHON), python], read, port: Some(port), group: None, env })
    }

    async fn run(&self, sandbox: &impl Contained, script: &str, args: &[String]) -> Result<Output, RestoreError> {
        let program = PathBuf::from(format!("/usr/bin/{script}"));
        let tool = self.tool(&program)?;
        let mut all = Vec::new();
        if let Some(e) = &self.endpoint {
            all.push(format!("--endpoint-url={e}"));
        }
        all.extend(args.iter().cloned());
        delegate::run(sandbox, &tool, &all).await
    }

    /// The server's catalog, oldest first. Backups barman does not mark `DONE` are kept
    /// with their status (shown by `backups list`, never selected).
    pub(crate) async fn catalog(
        &self,
        sandbox: &Sandbox,
        store: &Arc<dyn BackupStore>,
    ) -> Result<Vec<Backup>, StoreError> {
        let store_err =
            |message: String, unreachable| StoreError { store: self.describe(), message, unreachable, changed: false };
        let out = self
            .run(
                sandbox,
                "barman-cloud-backup-list",
                &["--format=json".into(), self.destination(), self.server_name.clone()],
            )
            .await
            .map_err(|e| store_err(e.to_string(), true))?;
        if !out.ok() {
            return Err(store_err(
                format!("barman-cloud-backup-list failed ({}): {}", out.how(), out.text_with_hint()),
                true,
            ));
        }
        let mut backups = parse_list(&out.stdout).map_err(|m| store_err(m.0, false))?;
        // Sizes and time zones from the store: the listing has neither.
        let objects = store.list(&format!("{}base/", self.server_prefix())).await?;
        for b in &mut backups {
            let dir = format!("{}base/{}/", self.server_prefix(), b.key);
            b.size = objects
                .iter()
                .filter(|o| o.key.starts_with(&dir) && !o.key.ends_with("backup.info"))
                .map(|o| o.size)
                .sum();
            let info_key = format!("{dir}backup.info");
            let info_size = objects.iter().find(|o| o.key == info_key).map(|o| o.size.min(64 << 10));
            if let Some(size) = info_size.filter(|s| *s > 0)
                && let Ok(info) = store.read_range(&info_key, 0, size).await
            {
                let info = String::from_utf8_lossy(&info);
                if let Some(t) = info_time(&info, "end_time") {
                    b.last_modified = t;
                }
                if let (Some(t), Some(c)) = (info_time(&info, "begin_time"), b.catalog.as_mut()) {
                    c.started = t;
                }
            }
        }
        backups.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(backups)
    }

    /// The WAL files the server's archive (`wals/`) holds.
    async fn archived(&self, store: &Arc<dyn BackupStore>) -> Result<Archived, StoreError> {
        let mut archived = Archived::default();
        for o in store.list(&format!("{}wals/", self.server_prefix())).await? {
            archived.add(o.key.rsplit('/').next().unwrap_or(&o.key));
        }
        Ok(archived)
    }

    /// `barman-cloud-wal-restore NAME` into `dest`.
    async fn fetch_wal(&self, sandbox: &impl Contained, dest: &Path, name: &str) -> Result<(), RestoreError> {
        let args = [
            "-vv".to_string(),
            self.destination(),
            self.server_name.clone(),
            name.to_string(),
            dest.display().to_string(),
        ];
        let out = self.run(sandbox, "barman-cloud-wal-restore", &args).await?;
        if out.ok() { Ok(()) } else { Err(classify(sandbox, &format!("barman-cloud-wal-restore {name}"), &out)) }
    }
}

/// A barman-cloud catalog as a target's source: read by `barman-cloud-backup-list` and
/// each backup's `backup.info`.
#[async_trait::async_trait]
impl crate::source::Source for Catalog {
    fn describe(&self) -> String {
        Catalog::describe(self)
    }

    fn reads_with_a_tool(&self) -> bool {
        true
    }

    async fn catalog(
        &self,
        host: &Sandbox,
        store: &Arc<dyn BackupStore>,
    ) -> Result<Option<crate::source::Catalog>, StoreError> {
        let backups = Catalog::catalog(self, host, store).await?;
        Ok(Some(crate::source::Catalog {
            described: self.describe(),
            restorable: backups,
            repository: Arc::new(self.clone()),
        }))
    }

    fn archive<'a>(&'a self, catalog: Option<&'a crate::source::Catalog>) -> Option<&'a dyn Archive> {
        catalog.map(|c| c.repository.as_ref() as &dyn Archive)
    }
}

#[async_trait::async_trait]
impl Archive for Catalog {
    fn describe(&self) -> String {
        Catalog::describe(self)
    }

    async fn reach(
        &self,
        sandbox: &Sandbox,
        store: &Arc<dyn BackupStore>,
        bins: &crate::server::pgbin::Binaries,
    ) -> Result<Option<crate::server::reach::Reach>, RestoreError> {
        let archived = self.archived(store).await?;
        crate::server::reach::newest(sandbox, bins, archived.segments, |name, path| async move {
            self.fetch_wal(sandbox, &path, &name).await?;
            sandbox.give_to_server(&path)
        })
        .await
    }

    async fn files(
        &self,
        _host: &Sandbox,
        store: &Arc<dyn BackupStore>,
        _after: Option<&str>,
    ) -> Result<Vec<crate::source::ArchivedFile>, RestoreError> {
        let listed = store.list(&format!("{}wals/", self.server_prefix())).await?;
        Ok(listed
            .into_iter()
            .filter_map(|o| {
                let name = delegate::archived_name(o.key.rsplit('/').next().unwrap_or(&o.key))?;
                Some(crate::source::ArchivedFile { name, key: o.key, size: o.size, version: o.etag })
            })
            .collect())
    }

    async fn fetch_file(
        &self,
        host: &Sandbox,
        _store: &Arc<dyn BackupStore>,
        file: &crate::source::ArchivedFile,
        dest: &Path,
    ) -> Result<(), RestoreError> {
        self.fetch_wal(host, dest, &file.name).await
    }
}

#[async_trait::async_trait]
impl Repository for Catalog {
    fn tool(&self) -> &'static str {
        "barman-cloud"
    }

    async fn restore(
        &self,
        sandbox: &mut Sandbox,
        store: &Arc<dyn BackupStore>,
        bins: &crate::server::pgbin::Binaries,
        backup: &Backup,
        how: crate::source::Recover<'_>,
    ) -> Result<ToolRestored, RestoreError> {
        let (target, standby) = (how.target, how.standby);
        let began = std::time::Instant::now();
        let data = sandbox.data_dir().to_path_buf();
        // -vv: a failure ends in the exception's traceback, whose class says who is to blame.
        let mut args = vec![
            "-vv".to_string(),
            self.destination(),
            self.server_name.clone(),
            backup.key.clone(),
            data.display().to_string(),
        ];
        // Tablespaces go inside the run's directory, never their original paths.
        for name in backup.catalog.as_ref().map(|c| c.tablespaces.as_slice()).unwrap_or_default() {
            if name.contains(['/', ':']) || name.starts_with('.') {
                return Err(RestoreError::bad(Stage::Restore, format!("the catalog names a tablespace {name:?}")));
            }
            args.push(format!("--tablespace={name}:{}", sandbox.root().join("tablespaces").join(name).display()));
        }
        let out = self.run(sandbox, "barman-cloud-restore", &args).await?;
        if !out.ok() {
            return Err(classify(sandbox, &format!("barman-cloud-restore of {}", backup.key), &out));
        }
        let c = backup.catalog.as_ref();
        let (Some(start), Some(stop)) = (c.and_then(|c| c.wal_start.clone()), c.and_then(|c| c.wal_stop.clone()))
        else {
            return Err(RestoreError::bad(
                Stage::Restore,
                format!("the catalog names no WAL range for {}", backup.key),
            ));
        };
        let archived = self.archived(store).await?;
        let last = match target {
            RecoveryTarget::Immediate => stop.clone(),
            _ => archived.segments.iter().next_back().cloned().unwrap_or_else(|| stop.clone()),
        };
        let plan = plan_segments(&start, &stop, &last, &archived).map_err(|missing| {
            RestoreError::bad(
                Stage::Fetch,
                format!(
                    "WAL file {missing} is missing from the archive: backup {} needs {start} to {stop} to become consistent",
                    backup.key
                ),
            )
        })?;
        let fetched_in = began.elapsed();
        // Each fetch is a Python start (≈ 0.6 s).
        let recovered =
            delegate::replay_plan(sandbox, bins, target, &archived, &plan, standby, |host, name, part| async move {
                self.fetch_wal(&host, &part, &name).await
            })
            .await?;
        Ok(ToolRestored {
            recovered_to: recovered.recovered_to,
            horizon: recovered.horizon,
            wal_files: plan.segments.len(),
            wal_gap: plan.gap,
            pace: recovered.pace,
            fetched_in,
            bytes_fetched: None,
        })
    }

    /// The catalog checked without a restore: the newest backup's status, and WAL
    /// continuity from the oldest restorable backup to the newest archived file.
    async fn integrity(
        &self,
        _host: &Host,
        store: &Arc<dyn BackupStore>,
        backups: &[Backup],
        _reuse: Option<&str>,
    ) -> Result<Integrity, RestoreError> {
        let mut integrity = Integrity::default();
        if let Some(newest) = backups.last()
            && let Some(c) = newest.catalog.as_ref().filter(|c| !c.status.is_ok())
        {
            integrity.notes.push(format!("the newest backup {} is {}: not restorable", newest.key, c.status));
        }
        let archived = self.archived(store).await?;
        delegate::continuity(backups, &archived, &mut integrity);
        Ok(integrity)
    }
}

/// barman-cloud's own verdict on a failure, from its documented exit codes: 2 (the
/// cloud is unreachable) and 3 (drcheck's command line) are the world's; 1 (the bucket,
/// backup or WAL file drcheck just listed is not there any more) too — the store
/// changed under the run; 4 (any other exception) is the backup's only when the
/// exception it ends with is one of decoding the backup's bytes (a corrupt tar, gzip,
/// lz4 or zstd stream, data ending early), named by its class in the traceback the tool
/// prints at `-vv`.
fn blame(out: &Output) -> Blame {
    const DECODING: [&str; 8] = [
        "tarfile.ReadError",
        "tarfile.HeaderError",
        "tarfile.TarError",
        "tarfile.TruncatedHeaderError",
        "zlib.error",
        "gzip.BadGzipFile",
        "EOFError",
        "zstandard.ZstdError",
    ];
    if out.code != Some(4) {
        return Blame::World;
    }
    let text = String::from_utf8_lossy(&out.stderr);
    // A traceback's last line: `ExceptionClass: message`.
    let raised = text.lines().rev().find(|l| !l.starts_with(' ') && l.contains(':') && !l.contains("ERROR"));
    match raised.and_then(|l| l.split(':').next()) {
        Some(class) if DECODING.contains(&class.trim()) => Blame::Backup,
        _ => Blame::World,
    }
}

fn classify(sandbox: &impl Contained, what: &str, out: &Output) -> RestoreError {
    delegate::judged(sandbox, what, out, blame)
}

/// `end_time=2026-11-30 16:50:24.511235+00:00` from a `backup.info`.
fn info_time(info: &str, key: &str) -> Option<SystemTime> {
    let v = info.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('='))?.trim();
    chrono_free_parse(v)
}

/// `YYYY-MM-DD HH:MM:SS[.ffffff]+HH:MM` → a time (offsets honoured).
fn chrono_free_parse(v: &str) -> Option<SystemTime> {
    let (main, offset) = match v.rfind(['+', '-']) {
        Some(i) if i > 10 => (&v[..i], &v[i..]),
        _ => (v, "+00:00"),
    };
    let base = humantime::parse_rfc3339_weak(main.trim()).ok()?;
    let sign = if offset.starts_with('-') { -1 } else { 1 };
    let (h, m) = offset[1..].split_once(':').unwrap_or((&offset[1..], "0"));
    let secs = sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60);
    if secs >= 0 {
        base.checked_sub(Duration::from_secs(secs as u64))
    } else {
        base.checked_add(Duration::from_secs((-secs) as u64))
    }
}

/// `barman-cloud-backup-list --format json` → backups (times read as UTC; the caller
/// corrects them from `backup.info`).
fn parse_list(json: &[u8]) -> Result<Vec<Backup>, crate::error::Malformed> {
    let v: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| format!("barman-cloud-backup-list printed no JSON: {e}"))?;
    let list = v["backups_list"].as_array().ok_or("barman-cloud-backup-list: no backups_list")?;
    let time = |t: &serde_json::Value| t.as_str().and_then(parse_ctime).unwrap_or(SystemTime::UNIX_EPOCH);
    Ok(list
        .iter()
        .filter_map(|b| {
            let id = b["backup_id"].as_str()?.to_string();
            let status = b["status"].as_str().unwrap_or("UNKNOWN");
            Some(Backup {
                key: id,
                size: 0,
                last_modified: time(&b["end_time"]),
                parts: Vec::new(),
                sha256_key: None,
                catalog: Some(CatalogEntry {
                    tool: "barman-cloud",
                    kind: "full".into(),
                    started: time(&b["begin_time"]),
                    status: if status == "DONE" {
                        crate::store::CatalogStatus::Ok
                    } else {
                        crate::store::CatalogStatus::Unusable(status.to_ascii_lowercase())
                    },
                    wal_start: b["begin_wal"].as_str().map(str::to_string),
                    wal_stop: b["end_wal"].as_str().map(str::to_string),
                    tablespaces: tablespace_names(&b["tablespaces"]),
                }),
            })
        })
        .collect())
}

/// Tablespace names from the listing: `[["tbs", 16385, "/path"], …]` (or objects with
/// a `name`); `null` when there are none.
fn tablespace_names(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|t| t.get(0).or_else(|| t.get("name")).and_then(|n| n.as_str()).map(str::to_string))
        .collect()
}

/// `Mon Nov 30 16:50:24 2026` (ctime form, as the listing prints it).
fn parse_ctime(s: &str) -> Option<SystemTime> {
    let f: Vec<&str> = s.split_whitespace().collect();
    let [_, mon, day, time, year] = f.as_slice() else { return None };
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let m = MONTHS.iter().position(|x| x == mon)? + 1;
    humantime::parse_rfc3339_weak(&format!("{year}-{m:02}-{:02}T{time}Z", day.parse::<u32>().ok()?)).ok()
}

/// Where barman-cloud keeps a server's base backups' files (`<prefix>/<server>/base/`,
/// each backup a directory there named by its id).
pub(crate) fn files_root(prefix: &str, server_name: &str) -> String {
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() { format!("{server_name}/base/") } else { format!("{prefix}/{server_name}/base/") }
}

#[cfg(test)]
mod tests {
    #[test]
    fn barmans_exit_code_and_exception_say_who_is_to_blame() {
        let out = |code: i32, err: &str| delegate::Output {
            code: Some(code),
            signal: None,
            stdout: vec![],
            stderr: err.as_bytes().to_vec(),
        };
        let tb = |class: &str| {
            format!(
                "ERROR: Barman cloud restore exception: x\nTraceback (most recent call last):\n  File \"x\", line 1\n{class}: bad\n"
            )
        };
        assert_eq!(blame(&out(4, &tb("tarfile.ReadError"))), Blame::Backup);
        assert_eq!(blame(&out(4, &tb("zlib.error"))), Blame::Backup);
        assert_eq!(blame(&out(4, &tb("OSError"))), Blame::World, "a full disk, say");
        assert_eq!(blame(&out(4, &tb("botocore.exceptions.EndpointConnectionError"))), Blame::World);
        assert_eq!(blame(&out(2, "")), Blame::World, "the cloud is unreachable");
        assert_eq!(blame(&out(1, "")), Blame::World, "what was listed is gone");
    }

    use super::*;

    #[test]
    fn the_listing_gives_status_and_wal_range() {
        let json = r#"{"backups_list": [
            {"backup_id": "20261130T165021", "status": "DONE", "begin_wal": "00000001000000000000000A",
             "end_wal": "00000001000000000000000A", "begin_time": "Mon Nov 30 16:50:21 2026", "end_time": "Mon Nov 30 16:50:24 2026"},
            {"backup_id": "20261130T170000", "status": "FAILED", "begin_wal": null, "end_wal": null,
             "begin_time": "Mon Nov 30 17:00:00 2026", "end_time": null}]}"#;
        let b = parse_list(json.as_bytes()).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].catalog.as_ref().unwrap().status, crate::store::CatalogStatus::Ok);
        assert_eq!(b[1].catalog.as_ref().unwrap().status, crate::store::CatalogStatus::Unusable("failed".into()));
        assert_eq!(b[0].last_modified, humantime::parse_rfc3339("2026-11-30T16:50:24Z").unwrap());
        assert!(parse_list(b"{}").is_err());
        let with = serde_json::json!([["tbs1", 16385, "/srv/tbs1"], {"name": "tbs2", "oid": 16386}]);
        assert_eq!(tablespace_names(&with), ["tbs1", "tbs2"]);
        assert!(tablespace_names(&serde_json::Value::Null).is_empty());
    }

    #[test]
    fn backup_info_times_honour_their_offset() {
        let info = "begin_time=2026-11-30 17:50:21.1+01:00\nend_time=2026-11-30 16:50:24.511235+00:00\n";
        assert_eq!(info_time(info, "begin_time"), humantime::parse_rfc3339_weak("2026-11-30T16:50:21.1Z").ok());
        assert_eq!(info_time(info, "end_time"), humantime::parse_rfc3339_weak("2026-11-30T16:50:24.511235Z").ok());
        assert_eq!(info_time(info, "nope"), None);
    }
}
