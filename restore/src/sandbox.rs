//! The sandbox: a throwaway PostgreSQL cluster that a backup is restored into.
//!
//! It lives in its own directory under `scratch_dir` and listens only on a unix socket
//! in a private (0700) directory under `/tmp` — socket paths longer than 107 bytes fail
//! silently, so the socket never lives under a possibly long `scratch_dir`. When drcheck
//! runs as root, the server runs as the `postgres` system user (PostgreSQL refuses root).
//! The server runs in its own process group so a terminal's Ctrl-C reaches drcheck
//! first, and drcheck decides how to stop it. Dropping a [`Sandbox`] stops the server
//! and removes every file it made — on success, failure, panic or cancellation.
//! [`reap_leftovers`] removes what a crashed earlier run left behind.

use crate::error::{RestoreError, Stage};
use crate::pgbin::PgBin;
use drcheck_config::Profile;
use drcheck_config::quote_ident;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::{Gid, Pid, Uid, User};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Directory names under `scratch_dir` start with this, so leftovers can be found.
pub const SANDBOX_PREFIX: &str = "drcheck-sandbox-";
const OWNER_FILE: &str = "drcheck.pid";
const SOCKET_FILE: &str = "socket_dir";
/// The port only names the socket file; nothing listens on TCP.
const PORT: u16 = 5432;
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct SandboxOptions {
    pub scratch_dir: PathBuf,
    /// Unique per run; part of the directory name.
    pub run_id: String,
    pub profile: Profile,
}

#[derive(Debug)]
pub struct Sandbox {
    root: PathBuf,
    socket_dir: PathBuf,
    data_dir: PathBuf,
    bin: Option<PgBin>,
    profile: Profile,
    owner: Option<(Uid, Gid)>,
    server: Option<Child>,
}

fn infra(message: impl Into<String>) -> RestoreError {
    RestoreError::infra(Stage::Sandbox, message)
}

/// Server settings of a profile, passed as `-c name=value`.
pub fn profile_settings(profile: Profile) -> &'static [(&'static str, &'static str)] {
    match profile {
        Profile::Production => &[],
        Profile::Fast => &[
            ("fsync", "off"),
            ("full_page_writes", "off"),
            ("synchronous_commit", "off"),
            ("wal_level", "minimal"),
            ("max_wal_senders", "0"),
            ("maintenance_work_mem", "512MB"),
            ("max_wal_size", "8GB"),
            ("checkpoint_timeout", "30min"),
            ("autovacuum", "off"),
        ],
    }
}

impl Sandbox {
    /// Makes the sandbox's directories (no server yet). Dropping the result removes them.
    pub fn create(opts: &SandboxOptions) -> Result<Sandbox, RestoreError> {
        let owner = server_owner()?;
        let root = opts.scratch_dir.join(format!("{SANDBOX_PREFIX}{}", opts.run_id));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&root)
            .map_err(|e| infra(format!("cannot create sandbox directory {}: {e}", root.display())))?;
        // From here on, dropping `sandbox` cleans up whatever exists.
        let mut sandbox = Sandbox {
            data_dir: root.join("data"),
            root,
            socket_dir: PathBuf::new(),
            bin: None,
            profile: opts.profile,
            owner,
            server: None,
        };
        std::fs::write(sandbox.root.join(OWNER_FILE), std::process::id().to_string())
            .map_err(|e| infra(format!("cannot write to {}: {e}", sandbox.root.display())))?;
        let socket_dir = tempfile::Builder::new()
            .prefix("drcheck-")
            .tempdir_in("/tmp")
            .map_err(|e| infra(format!("cannot create socket directory in /tmp: {e}")))?
            .keep();
        sandbox.socket_dir = socket_dir;
        std::fs::write(sandbox.root.join(SOCKET_FILE), sandbox.socket_dir.as_os_str().as_encoded_bytes())
            .map_err(|e| infra(format!("cannot write to {}: {e}", sandbox.root.display())))?;
        std::fs::set_permissions(&sandbox.socket_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| infra(format!("cannot restrict {}: {e}", sandbox.socket_dir.display())))?;
        for dir in [sandbox.root.clone(), sandbox.socket_dir.clone()] {
            sandbox.give_to_server(&dir)?;
        }
        Ok(sandbox)
    }

    /// `initdb` an empty cluster with `bin`, then start it.
    pub async fn init_and_start(&mut self, bin: PgBin) -> Result<(), RestoreError> {
        self.bin = Some(bin);
        self.initdb().await?;
        self.start(&[], READY_TIMEOUT).await
    }

    /// Starts the server on an existing data directory (a restored base backup),
    /// with extra settings, waiting up to `ready_timeout` for recovery to finish.
    pub async fn start_existing(
        &mut self,
        bin: PgBin,
        settings: &[(String, String)],
        ready_timeout: Duration,
    ) -> Result<(), RestoreError> {
        self.bin = Some(bin);
        self.start(settings, ready_timeout).await
    }

    /// Hands a path to the server's user (recursively), when drcheck runs as root.
    pub fn give_to_server(&self, path: &Path) -> Result<(), RestoreError> {
        let Some((uid, gid)) = self.owner else { return Ok(()) };
        let mut stack = vec![path.to_path_buf()];
        while let Some(p) = stack.pop() {
            std::os::unix::fs::lchown(&p, Some(uid.as_raw()), Some(gid.as_raw()))
                .map_err(|e| infra(format!("cannot hand {} to the postgres user: {e}", p.display())))?;
            if p.is_dir() && !p.is_symlink() && p != self.socket_dir && p != self.root {
                for e in std::fs::read_dir(&p).map_err(|e| infra(format!("{}: {e}", p.display())))? {
                    stack.push(e.map_err(|e| infra(e.to_string()))?.path());
                }
            }
        }
        Ok(())
    }

    fn bin_ref(&self) -> &PgBin {
        self.bin.as_ref().expect("the sandbox's binaries are chosen before it starts")
    }

    /// A command for a PostgreSQL server binary, run as the server's owner in a clean
    /// environment (so no secret of drcheck's reaches it).
    fn server_command(&self, tool: &str) -> Command {
        let mut cmd = Command::new(self.bin_ref().tool(tool));
        cmd.current_dir(&self.root)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("LC_ALL", "C.UTF-8")
            .stdin(Stdio::null());
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        cmd
    }

    async fn initdb(&self) -> Result<(), RestoreError> {
        let mut cmd = self.server_command("initdb");
        cmd.arg("-D").arg(&self.data_dir).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
            "--no-instructions",
        ]);
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        let out = cmd
            .output()
            .await
            .map_err(|e| infra(format!("cannot run {}: {e}", self.bin_ref().tool("initdb").display())))?;
        if !out.status.success() {
            let mut msg = format!("initdb failed ({}): {}", out.status, tail(&out.stderr, 2000));
            if msg.contains("Permission denied") && self.owner.is_some() {
                msg.push_str(" (hint: the postgres user must be able to enter sandbox.scratch_dir)");
            }
            return Err(infra(msg));
        }
        Ok(())
    }

    async fn start(&mut self, extra: &[(String, String)], ready_timeout: Duration) -> Result<(), RestoreError> {
        let log_path = self.root.join("postgres.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| infra(format!("cannot create {}: {e}", log_path.display())))?;
        let log2 = log.try_clone().map_err(|e| infra(e.to_string()))?;
        let mut cmd = self.server_command("postgres");
        cmd.arg("-D").arg(&self.data_dir).arg("-k").arg(&self.socket_dir).args(["-p", &PORT.to_string()]);
        let base = [("listen_addresses", ""), ("unix_socket_permissions", "0700")];
        let settings = base.iter().chain(profile_settings(self.profile)).map(|(k, v)| (k.to_string(), v.to_string()));
        for (k, v) in settings.chain(extra.iter().cloned()) {
            cmd.arg("-c").arg(format!("{k}={v}"));
        }
        cmd.stdout(log).stderr(log2).process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| infra(format!("cannot start {}: {e}", self.bin_ref().tool("postgres").display())))?;
        self.server = Some(child);
        self.wait_ready(ready_timeout).await
    }

    async fn wait_ready(&mut self, timeout: Duration) -> Result<(), RestoreError> {
        let deadline = Instant::now() + timeout;
        let socket = self.socket_dir.join(format!(".s.PGSQL.{PORT}"));
        loop {
            if let Some(child) = self.server.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.server = None;
                return Err(RestoreError::infra(
                    Stage::Restore,
                    format!("the sandbox server exited during start-up ({status}): {}", self.log_tail()),
                ));
            }
            if socket.exists()
                && let Ok(mut conn) = PgConnection::connect_with(&self.connect_options("postgres")).await
            {
                // A server still in recovery (archive replay) is not yet a restored database.
                let in_recovery: Result<bool, _> =
                    sqlx::query_scalar("select pg_is_in_recovery()").fetch_one(&mut conn).await;
                if matches!(in_recovery, Ok(false)) {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(infra(format!(
                    "the sandbox server did not accept connections within {timeout:?}: {}",
                    self.log_tail()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The last lines of the server's log, for error messages.
    pub fn log_tail(&self) -> String {
        let mut buf = Vec::new();
        let _ = std::fs::File::open(self.root.join("postgres.log")).and_then(|mut f| f.read_to_end(&mut buf));
        tail(&buf, 2000)
    }

    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    pub fn port(&self) -> u16 {
        PORT
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn bin(&self) -> &PgBin {
        self.bin_ref()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// How to connect to `database` in the sandbox, as its superuser.
    pub fn connect_options(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new()
            .socket(&self.socket_dir)
            .port(PORT)
            .username("postgres")
            .database(database)
            .application_name("drcheck")
    }

    pub async fn create_database(&self, name: &str) -> Result<(), RestoreError> {
        let mut conn = PgConnection::connect_with(&self.connect_options("postgres"))
            .await
            .map_err(|e| infra(format!("cannot connect to the sandbox: {e}")))?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {}", quote_ident(name))))
            .execute(&mut conn)
            .await
            .map_err(|e| infra(format!("cannot create database {name:?} in the sandbox: {e}")))?;
        Ok(())
    }

    /// Stops the server and removes the sandbox's files. Dropping does the same.
    pub fn teardown(mut self) {
        self.cleanup();
    }

    fn cleanup(&mut self) {
        if let Some(mut child) = self.server.take() {
            stop_server(&mut child);
        }
        if !self.root.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
        if !self.socket_dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.socket_dir);
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// Fast shutdown (SIGINT), then SIGKILL to the whole process group after a grace period.
fn stop_server(child: &mut Child) {
    let pid = Pid::from_raw(child.id() as i32);
    let _ = kill(pid, Signal::SIGINT);
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            // Backends may outlive the postmaster by a moment; make sure none stays.
            let _ = killpg(pid, Signal::SIGKILL);
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = killpg(pid, Signal::SIGKILL);
    let _ = child.wait();
}

/// Who the server must run as: `None` to run as ourselves, the `postgres` user when root.
fn server_owner() -> Result<Option<(Uid, Gid)>, RestoreError> {
    if !Uid::effective().is_root() {
        return Ok(None);
    }
    match User::from_name("postgres") {
        Ok(Some(u)) => Ok(Some((u.uid, u.gid))),
        _ => Err(infra(
            "drcheck runs as root, and PostgreSQL refuses root: create a `postgres` system user for the sandbox server",
        )),
    }
}

/// The last `max` bytes of `bytes` as trimmed text.
pub fn tail(bytes: &[u8], max: usize) -> String {
    let start = bytes.len().saturating_sub(max);
    String::from_utf8_lossy(&bytes[start..]).trim().to_string()
}

/// Removes sandboxes left by drcheck processes that no longer exist: stops their
/// servers and deletes their directories. Returns the directories removed.
pub fn reap_leftovers(scratch_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(scratch_dir) else {
        return Vec::new();
    };
    let mut reaped = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(SANDBOX_PREFIX) {
            continue;
        }
        let root = entry.path();
        let owner = read_pid(&root.join(OWNER_FILE));
        if owner.is_some_and(process_alive) {
            continue;
        }
        if let Some(postmaster) = read_pid(&root.join("data").join("postmaster.pid"))
            && process_alive(postmaster)
        {
            let _ = killpg(postmaster, Signal::SIGKILL);
            let _ = kill(postmaster, Signal::SIGKILL);
        }
        if let Ok(sock) = std::fs::read_to_string(root.join(SOCKET_FILE))
            && sock.starts_with("/tmp/drcheck-")
        {
            let _ = std::fs::remove_dir_all(sock.trim());
        }
        if std::fs::remove_dir_all(&root).is_ok() {
            reaped.push(root);
        }
    }
    reaped
}

fn read_pid(path: &Path) -> Option<Pid> {
    let text = std::fs::read_to_string(path).ok()?;
    let pid: i32 = text.lines().next()?.trim().parse().ok()?;
    (pid > 0).then(|| Pid::from_raw(pid))
}

fn process_alive(pid: Pid) -> bool {
    kill(pid, None).is_ok()
}
