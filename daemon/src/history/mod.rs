//! The history store: every run, its phases and validator results, through sqlx in
//! SQLite (WAL mode, so a crash at any moment leaves it consistent). A run and its
//! parts are written in one transaction.
//!
//! By concern: [`runs`] (runs, proofs, freshness), [`outbox`] (alerts to deliver),
//! [`leases`] (one verification of a target at a time), [`drills`]; the schema's
//! migrations are `daemon/migrations/`, applied by [`History::open`].

mod acks;
mod canaries;
mod drills;
mod journal;
mod leases;
mod outbox;
mod runs;
mod starts;

pub(crate) use acks::{Ack, FORGOTTEN_BACKUP, WAL_GAP, gap_bounds, who_here};
pub(crate) use leases::{Leased, holder_alive_here, lease_holder_name};
pub(crate) use outbox::OutboxRow;
pub(crate) use runs::Proven;
#[cfg(test)]
pub(crate) use runs::{Freshness, Pin, Proof};
pub(crate) use starts::RUNNING;

use anyhow::Context as _;
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Executor};
use std::os::unix::fs::OpenOptionsExt as _;
use std::time::{Duration, SystemTime};

pub(crate) struct History {
    pool: AnyPool,
    /// PostgreSQL (else SQLite): claims skip rows another dispatcher has locked.
    postgres: bool,
    /// A canary's own history only: the table its runs compare whole under a
    /// `primary_read_budget` (the changed row's), never set on a target's history.
    focus: Option<String>,
}

/// How long a dispatcher's claim on an outbox row lasts: past it (the dispatcher died
/// mid-delivery), another one delivers the row again — at least once.
pub(crate) const CLAIM_TTL: Duration = Duration::from_secs(300);

/// Creates the SQLite file 0600 if it does not exist (SQLite gives its `-wal` and
/// `-shm` files the database file's mode), and takes group and other access from one
/// that does: the history holds what the API token guards.
fn private_file(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            for p in [path.to_path_buf(), with_suffix(path, "-wal"), with_suffix(path, "-shm")] {
                if let Ok(m) = std::fs::symlink_metadata(&p)
                    && m.is_file()
                    && m.permissions().mode() & 0o077 != 0
                {
                    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m.permissions().mode() & 0o700))?;
                }
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

fn with_suffix(path: &std::path::Path, suffix: &str) -> std::path::PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    std::path::PathBuf::from(s)
}

async fn migrate(pool: &AnyPool, postgres: bool, raw: &str) -> anyhow::Result<()> {
    let file = raw.strip_prefix("sqlite:").map(|r| r.trim_start_matches("//").split('?').next().unwrap_or_default());
    let _lock = match file {
        Some(f) if !postgres && !f.is_empty() && f != ":memory:" => {
            let path = with_suffix(std::path::Path::new(f), ".migrate-lock");
            let lock = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(&path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            let lock = tokio::task::spawn_blocking(move || {
                nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| e)
            })
            .await?
            .with_context(|| format!("cannot lock {}", path.display()))?;
            Some(lock)
        }
        _ => None,
    };
    sqlx::migrate!("./migrations").run(pool).await?;
    Ok(())
}

impl History {
    /// Marks this (a canary's own) history so that its runs under a
    /// `primary_read_budget` compare `table` (`schema.name`) whole.
    pub(crate) fn focus_on(&mut self, table: String) {
        self.focus = Some(table);
    }

    /// The table a canary's runs compare whole ([`History::focus_on`]).
    pub(crate) fn focus(&self) -> Option<&str> {
        self.focus.as_deref()
    }

    /// Opens (creating if needed) the store at `url` and applies migrations.
    /// `url` is shown in errors only redacted.
    pub(crate) async fn open(url: &drcheck_config::Secret) -> anyhow::Result<History> {
        let shown = url.redacted();
        let raw = url.expose();
        sqlx::any::install_default_drivers();
        let url = if let Some(rest) = raw.strip_prefix("sqlite:") {
            let path = rest.trim_start_matches("//");
            let file = path.split('?').next().unwrap_or_default();
            if let Some(parent) = std::path::Path::new(file).parent()
                && !parent.as_os_str().is_empty()
            {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("history store {shown}: cannot create {}", parent.display()))?;
            }
            if !file.is_empty() && file != ":memory:" {
                private_file(std::path::Path::new(file))
                    .with_context(|| format!("history store {shown}: cannot create {file} private"))?;
            }
            if raw.contains('?') { raw.to_string() } else { format!("{raw}?mode=rwc") }
        } else {
            raw.to_string()
        };
        let pool = AnyPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .after_connect(|conn, _| {
                Box::pin(async move {
                    if conn.backend_name() == "SQLite" {
                        // WAL: a crash at any moment leaves the store consistent.
                        conn.execute(
                            "PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 10000; PRAGMA foreign_keys = ON",
                        )
                        .await?;
                    } else {
                        conn.execute("SET statement_timeout = '60s'").await?;
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot open history store {shown}: {}",
                    drcheck_validators::primary::scrub(&e.to_string(), raw)
                )
            })?;
        let postgres = !raw.starts_with("sqlite:");
        migrate(&pool, postgres, raw).await.with_context(|| format!("history store {shown}: migrations failed"))?;
        Ok(History { pool, postgres, focus: None })
    }

    pub(crate) async fn close(self) {
        self.pool.close().await;
    }
}

fn ts(t: SystemTime) -> String {
    crate::run_report::timestamp(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_report::RunReport;
    use leases::holder_name;

    async fn store(dir: &tempfile::TempDir) -> History {
        let url = format!("sqlite://{}", dir.path().join("h.db").display());
        History::open(&drcheck_config::Secret::new(url)).await.unwrap()
    }

    /// A pid that no longer runs: a child that has exited and been reaped.
    fn dead_pid() -> i32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        pid
    }

    fn passing_run(id: &str, key: &str, at: &str, point: bool) -> RunReport {
        let mut v = serde_json::json!({
            "run_id": id, "target": "orders", "result": "passed",
            "started_at": at, "finished_at": at,
            "backup": {"key": key, "size_bytes": 1, "created_at": "2026-12-01T00:00:00.000Z", "format": "custom"},
            "phases": [], "validators": [],
            "rto": {"target_seconds": 60.0, "measured_seconds": 1.0, "met": true},
            "rpo": {"target_seconds": 60.0, "backup_age_seconds": null, "met": null}
        });
        if point {
            v["restore"] = serde_json::json!({"profile": "production", "jobs": 1, "server_major": 15,
                "recovered_to": at, "recovery_target": {"kind": "time", "value": at, "random": true}});
        }
        serde_json::from_value(v).unwrap()
    }

    /// Issue 32: `least-proven` with `keep_runs = 2` and 4 backups never proved backup 1
    /// (its proof lived in pruned runs). Proofs outlive the runs, and leave with the backup.
    #[tokio::test]
    async fn proofs_outlive_pruned_runs_and_leave_with_their_backup() {
        let dir = tempfile::tempdir().unwrap();
        let h = store(&dir).await;
        for (i, key) in ["b1", "b2", "b3", "b4"].iter().enumerate() {
            h.record(&passing_run(&format!("r{i}"), key, &format!("2026-12-0{}T00:00:00.000Z", i + 1), i == 0))
                .await
                .unwrap();
        }
        h.record(&passing_run("r9", "b1", "2026-12-09T00:00:00.000Z", true)).await.unwrap();
        assert!(h.prune(2).await.unwrap() >= 3);
        let proofs = h.proofs("orders").await.unwrap();
        assert_eq!(proofs.len(), 4, "{proofs:?}");
        let b1 = &proofs["b1"];
        assert_eq!(b1.last_run_id, "r9");
        assert_eq!(b1.points_proven, 2, "two points in time proven from b1");
        assert_eq!(b1.consistent_at.as_deref(), Some("2026-12-01T00:00:00.000Z"));
        assert_eq!(proofs["b2"].last_passed, humantime::parse_rfc3339("2026-12-02T00:00:00Z").unwrap());
        // A failed run proves nothing.
        let mut failed = passing_run("r10", "b5", "2026-12-10T00:00:00.000Z", false);
        failed.result = crate::run_report::RunResult::Failed;
        h.record(&failed).await.unwrap();
        assert!(!h.proofs("orders").await.unwrap().contains_key("b5"));
        // b2 left the store: its proof goes; the others stay.
        let listed: Vec<String> = ["b1", "b3", "b4"].iter().map(|s| s.to_string()).collect();
        assert_eq!(h.keep_proofs_of("orders", &listed).await.unwrap(), 1);
        let keys: std::collections::BTreeSet<String> = h.proofs("orders").await.unwrap().into_keys().collect();
        assert_eq!(keys.into_iter().collect::<Vec<_>>(), ["b1", "b3", "b4"]);
    }

    /// Issue 32: proving an older backup moved drcheck_backup_timestamp_seconds back (and
    /// fired the RPO alert). What the runs saw only moves forward.
    #[tokio::test]
    async fn freshness_only_moves_forward() {
        let dir = tempfile::tempdir().unwrap();
        let h = store(&dir).await;
        let mut newer = passing_run("r1", "b2", "2026-12-02T00:00:00.000Z", false);
        newer.backup.as_mut().unwrap().created_at = Some("2026-12-02T00:00:00.000Z".into());
        newer.rpo.recoverable_point = Some("2026-12-02T00:05:00.000Z".into());
        newer.rpo.measured_at = Some("2026-12-02T00:06:00.000Z".into());
        h.record(&newer).await.unwrap();
        let mut older = passing_run("r2", "b1", "2026-12-03T00:00:00.000Z", true);
        older.backup.as_mut().unwrap().created_at = Some("2026-12-01T00:00:00.000Z".into());
        older.rpo.measured_at = Some("2026-12-03T00:01:00.000Z".into());
        h.record(&older).await.unwrap();
        let f = h.freshness("orders").await.unwrap();
        assert_eq!(f.backup_at.as_deref(), Some("2026-12-02T00:00:00.000Z"), "never back to the older backup");
        assert_eq!(f.recoverable_point.as_deref(), Some("2026-12-02T00:05:00.000Z"));
        assert_eq!(f.measured_at.as_deref(), Some("2026-12-03T00:01:00.000Z"), "the later listing");
        assert_eq!(h.freshness("other").await.unwrap(), Freshness::default());
    }

    #[tokio::test]
    async fn a_lease_held_by_a_crashed_drcheck_on_this_machine_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let h = store(&dir).await;
        let ttl = Duration::from_secs(3600);
        let here = drcheck_restore::machine_id().expect("this machine has /proc");
        let me = drcheck_restore::Owner::current(None);
        let live = lease_holder_name("verify");
        let next = lease_holder_name("daemon");

        // A running holder (this test) keeps its lease.
        assert!(h.acquire_lease("a", &live, ttl).await.unwrap());
        assert!(!h.acquire_lease("a", &next, ttl).await.unwrap(), "taken from a running holder");

        // Crashed here: its pid is gone, or reused by a process started at another time.
        for (target, crashed) in [
            ("b", holder_name("verify", dead_pid(), 1, Some(&here))),
            ("c", holder_name("verify", me.pid, me.start + 1, Some(&here))),
        ] {
            assert!(h.acquire_lease(target, &crashed, ttl).await.unwrap());
            assert!(h.acquire_lease(target, &next, ttl).await.unwrap(), "not taken over from {crashed}");
            assert_eq!(h.lease_holder(target).await.unwrap().as_deref(), Some(next.as_str()));
        }

        // Elsewhere (another machine or container), or saying nothing: waited out.
        for (target, other) in [
            ("d", holder_name("verify", dead_pid(), 1, Some("00000000-1"))),
            ("e", holder_name("verify", dead_pid(), 1, None)),
            ("f", "drcheck verify pid 1 (abcdef12)".to_string()),
        ] {
            assert!(h.acquire_lease(target, &other, ttl).await.unwrap());
            assert!(!h.acquire_lease(target, &next, ttl).await.unwrap(), "taken over from {other}");
        }
    }
}
