//! Helpers for the drill tests: clusters managed with `pg_ctl` (as the examples'
//! runbooks manage them), stopped by a guard even when a test fails; runbook files;
//! journals; processes of a process group.

use crate::{PG_BIN, TempRoot, as_pg, drcheck_bin};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The `run_as` variable for the example runbooks: `postgres` when the tests run as root.
pub fn run_as() -> String {
    if nix::unistd::Uid::effective().is_root() { "postgres".into() } else { String::new() }
}

/// Every data directory started here, stopped (immediate) when the guard drops.
#[derive(Default)]
pub struct PgCtlGuard {
    dirs: Mutex<Vec<PathBuf>>,
}

impl PgCtlGuard {
    /// Also stop `data` at the end (a cluster a runbook starts).
    pub fn watch(&self, data: &Path) {
        self.dirs.lock().unwrap().push(data.to_path_buf());
    }

    /// `initdb` (trust auth, also for replication) and `pg_ctl start` on a unix socket
    /// in `sock` and `port`; returns the connection URL.
    pub fn init_and_start(&self, data: &Path, sock: &Path, port: u16, log: &Path) -> String {
        let out = as_pg(&mut Command::new(format!("{PG_BIN}/initdb")))
            .arg("-D")
            .arg(data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"])
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        self.start(data, sock, port, log)
    }

    /// `pg_ctl start` of an existing data directory.
    pub fn start(&self, data: &Path, sock: &Path, port: u16, log: &Path) -> String {
        self.watch(data);
        let out = as_pg(&mut Command::new(format!("{PG_BIN}/pg_ctl")))
            .arg("-D")
            .arg(data)
            .arg("-l")
            .arg(log)
            .arg("-o")
            .arg(format!("-p {port} -k {} -c listen_addresses='' -c fsync=off", sock.display()))
            .args(["-w", "start"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl start: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        socket_url(sock, port, "postgres")
    }
}

impl Drop for PgCtlGuard {
    fn drop(&mut self) {
        for d in self.dirs.lock().map(|d| d.clone()).unwrap_or_default() {
            if d.join("postmaster.pid").exists() {
                let _ = as_pg(&mut Command::new(format!("{PG_BIN}/pg_ctl")))
                    .arg("-D")
                    .arg(&d)
                    .args(["-m", "immediate", "-w", "stop"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

/// A URL for the superuser over the unix socket in `sock`.
pub fn socket_url(sock: &Path, port: u16, db: &str) -> String {
    format!("postgresql://postgres@localhost:{port}/{db}?host={}", sock.display())
}

/// Runs SQL through psql; returns the trimmed, unaligned output (panics on failure).
pub fn psql(url: &str, sql: &str) -> String {
    let (ok, out) = try_psql(url, sql);
    assert!(ok, "psql {sql:?}: {out}");
    out
}

pub fn try_psql(url: &str, sql: &str) -> (bool, String) {
    let out = Command::new("psql").args([url, "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql]).output().unwrap();
    let text = if out.status.success() { &out.stdout } else { &out.stderr };
    (out.status.success(), String::from_utf8_lossy(text).trim().to_string())
}

/// Polls `sql` until it prints `want`, for up to `limit`.
pub fn wait_for(url: &str, sql: &str, want: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let (_, got) = try_psql(url, sql);
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{sql:?} never returned {want:?} (last: {got:?})");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes a runbook into the test's directory.
pub fn runbook(root: &TempRoot, name: &str, yaml: &str) -> PathBuf {
    let p = root.path().join(name);
    std::fs::write(&p, yaml).unwrap();
    p
}

/// Reads the JSON journal written next to a report.
pub fn journal(report: &Path) -> serde_json::Value {
    let p = report.with_extension("json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

/// The journal's record of the step named `name`, in any phase.
pub fn step<'a>(j: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    for k in ["steps", "rollbacks"] {
        if let Some(s) = j[k].as_array().and_then(|a| a.iter().find(|s| s["name"] == name)) {
            return s;
        }
    }
    j["steady_state"]["before"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no step {name:?} in the journal: {j}"))
}

/// Starts `drcheck drill run` in the background (for signal tests).
pub fn spawn_drill(args: &[&str]) -> Child {
    Command::new(drcheck_bin())
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("DRCHECK_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Live processes in process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        // Fields after the command (which may hold spaces) start after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // state ppid pgrp …; zombies are already gone as far as the test cares.
        if fields.len() > 2 && fields[0] != "Z" && fields[2].parse::<i32>().ok() == Some(pgid) {
            found.push(pid);
        }
    }
    found
}

/// Waits until `path` exists, for up to `limit`.
pub fn wait_for_file(path: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        assert!(Instant::now() < deadline, "{} did not appear within {limit:?}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}
