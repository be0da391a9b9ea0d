//! The sandbox: a throwaway PostgreSQL cluster that a backup is restored into.
//!
//! It lives in its own directory under `scratch_dir` and listens only on a unix socket
//! in a private (0700) directory under `/tmp` — socket paths longer than 107 bytes fail
//! silently, so the socket never lives under a possibly long `scratch_dir`. When drcheck
//! runs as root, the server runs as the sandbox user (`[sandbox] user`, default
//! `drcheck-sandbox`): a user that owns nothing else — never `postgres`, whose peer
//! login every other cluster on the host trusts.
//! The server runs in its own process group so a terminal's Ctrl-C reaches drcheck
//! first, and drcheck decides how to stop it. Dropping a [`Sandbox`] stops the server
//! and removes every file it made — on success, failure, panic or cancellation.
//! [`reap_leftovers`] removes what a crashed earlier run left behind.
//!
//! Every process that touches the restored data runs through [`crate::server::contain`]:
//! confined to the run's directories, never as root. Each sandbox has a random
//! password of its own (SCRAM; no `trust`), kept in a 0600 file in its directory, so
//! a process of one run cannot enter another run's server over its socket.

use crate::error::{Blame, RestoreError, Stage};
use crate::server::contain::{self, Level, Policy, Syscalls};
use crate::server::leftovers;
use crate::server::pgbin::PgBin;
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

pub(crate) use crate::server::leftovers::SANDBOX_PREFIX;
/// libpq's password file for the clients of this sandbox (0600).
const PASS_FILE: &str = "pgpass";
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
    /// Refuse to restore when the kernel cannot confine the restore (no Landlock).
    pub require_containment: bool,
    /// The user sandbox processes run as when drcheck is root.
    pub user: String,
    /// The address space of each server process (`RLIMIT_AS`); `None`: unlimited.
    pub memory_limit: Option<u64>,
    /// A sandbox that outlives drcheck (a follower's): its directory, kept when the
    /// sandbox is dropped — only the server is stopped — until [`Sandbox::discard`].
    pub keep_at: Option<PathBuf>,
    /// The longest one delegated tool call (pgbackrest, barman-cloud) may take, and
    /// whose limit that is (`the select phase's …`): past it the call is ended and named.
    pub tool_limit: Option<ToolLimit>,
}

/// How long a delegated tool call may take, and why that long (said when it is ended).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolLimit {
    pub within: std::time::Duration,
    /// Whose limit: `the select phase's (rto × abort_factor, at most 5m)`.
    pub whose: String,
}

/// The containment a sandbox would run under (`restore.containment`), known before one
/// exists.
pub fn containment_name() -> String {
    contain::probe().name_with(Uid::effective().is_root())
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
    containment: Level,
    password: String,
    /// Programs the server may execute besides its own binaries (`restore_command`).
    server_exec: Vec<PathBuf>,
    /// The data directory came from a backup (a base backup), not from drcheck's initdb.
    restored: bool,
    /// `RLIMIT_AS` of each server process.
    memory_limit: Option<u64>,
    /// The longest one delegated tool call may take in this sandbox.
    tool_limit: Option<ToolLimit>,
    /// Its directory outlives it (`SandboxOptions::keep_at`).
    keep: bool,
    /// A hot standby: ready when it accepts connections, still in recovery.
    standby: bool,
    /// How a restore's recovery is ended: by drcheck's own promotion (fast: the
    /// end-of-recovery checkpoint runs after, not before, the server is ready).
    promote: Promote,
}

/// What a contained process of a run needs of its sandbox — its directories, the
/// server's user, the containment — owned and cheap to clone.
#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
    socket_dir: PathBuf,
    bindir: PathBuf,
    owner: Option<(Uid, Gid)>,
    containment: Level,
    tool_limit: Option<ToolLimit>,
}

/// Anything a contained process can run beside: a [`Sandbox`], or its [`Host`].
pub(crate) trait Contained {
    fn host(&self) -> Host;
}

impl Contained for Sandbox {
    fn host(&self) -> Host {
        Sandbox::host(self)
    }
}

impl Contained for Host {
    fn host(&self) -> Host {
        self.clone()
    }
}

impl Host {
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How long one delegated tool call may take here.
    pub(crate) fn tool_limit(&self) -> Option<&ToolLimit> {
        self.tool_limit.as_ref()
    }

    /// Where the restored data directory is (or will be).
    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    /// The containment of a process of this run: the run's directories read-write, the
    /// PostgreSQL installation and system libraries read-only, `execute` executable, the
    /// server's system calls (no `connect()`; a client or a tool sets its own
    /// [`Policy::syscalls`]), private namespaces where the kernel offers them.
    pub fn policy(&self, execute: &[PathBuf]) -> Policy {
        let mut exec: Vec<PathBuf> = execute.to_vec();
        exec.extend(contain::loader_paths());
        Policy {
            read_write: vec![self.root.clone(), self.socket_dir.clone()],
            read_only: contain::system_read_paths(&self.bindir),
            execute: exec,
            user: self.owner.map(|(u, g)| (u.as_raw(), g.as_raw())),
            groups: Vec::new(),
            require_abi: self.containment.landlock,
            connect_tcp: Vec::new(),
            syscalls: if self.containment.seccomp { Syscalls::Server } else { Syscalls::Unfiltered },
            namespaces: self.containment.namespaces,
            memory: None,
        }
    }

    /// Hands a path to the server's user (recursively), when drcheck runs as root.
    pub fn give_to_server(&self, path: &Path) -> Result<(), RestoreError> {
        let Some((uid, gid)) = self.owner else { return Ok(()) };
        let mut stack = vec![path.to_path_buf()];
        while let Some(p) = stack.pop() {
            use std::os::unix::fs::MetadataExt;
            let meta = std::fs::symlink_metadata(&p).map_err(|e| infra(format!("{}: {e}", p.display())))?;
            // A file the sandbox user already owns (one a contained tool wrote) is left
            // alone: a chown, even to the same owner, dirties the inode, which the
            // server's start-up sync then writes (fsync of 1,280 files: 0.079 s clean,
            // 0.105 s after such a chown, here).
            if (meta.uid(), meta.gid()) != (uid.as_raw(), gid.as_raw()) {
                std::os::unix::fs::lchown(&p, Some(uid.as_raw()), Some(gid.as_raw()))
                    .map_err(|e| infra(format!("cannot hand {} to the sandbox user: {e}", p.display())))?;
            } else if meta.is_file() && meta.mode() & 0o6000 != 0 {
                // What the chown did on the way for such a file: never set-user-ID or
                // set-group-ID (a tool restores the modes a backup's manifest says).
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(meta.mode() & 0o1777))
                    .map_err(|e| infra(format!("cannot clear {}'s set-id bits: {e}", p.display())))?;
            }
            if meta.is_dir() && p != self.socket_dir && p != self.root {
                for e in std::fs::read_dir(&p).map_err(|e| infra(format!("{}: {e}", p.display())))? {
                    stack.push(e.map_err(|e| infra(e.to_string()))?.path());
                }
            }
        }
        Ok(())
    }

    /// When the file system of the run's directory has less than 64 MiB left: how much.
    pub fn disk_full(&self) -> Option<String> {
        let s = nix::sys::statvfs::statvfs(&self.root).ok()?;
        let free = s.blocks_available().saturating_mul(s.fragment_size());
        (free < 64 << 20).then(|| {
            format!(
                "no room left in the scratch directory {} ({} MiB free of {} MiB)",
                self.root.parent().unwrap_or(&self.root).display(),
                free >> 20,
                s.blocks().saturating_mul(s.fragment_size()) >> 20
            )
        })
    }
}

fn infra(message: impl std::fmt::Display) -> RestoreError {
    RestoreError::infra(Stage::Sandbox, message.to_string())
}

/// When drcheck promotes a restored server in recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Promote {
    /// Recovery ends by itself (or never: a follower).
    No,
    /// As soon as it answers. A standby replaying to the archive's end, promoted, first
    /// replays all it can still get (the archive, `pg_wal`), then ends; a replay to a
    /// target (`recovery_target_action = pause`) takes the request where it pauses, at
    /// the target, and ends there.
    AtOnce,
    /// Promotion asked for; the count of looks that found replay still paused.
    Asked(u8),
}

impl Promote {
    /// What to tell a server still in recovery now, if anything, and what comes next.
    async fn next(self, conn: &mut PgConnection) -> (Option<&'static str>, Promote) {
        match self {
            Promote::No => (None, self),
            Promote::AtOnce => (Some("select pg_catalog.pg_promote(false)"), Promote::Asked(0)),
            // Paused at the target with the request unseen (it never should be): resumed,
            // which ends recovery the slow way rather than never.
            Promote::Asked(looks) => {
                let paused = sqlx::query_scalar::<_, String>("select pg_catalog.pg_get_wal_replay_pause_state()")
                    .fetch_one(conn)
                    .await
                    .is_ok_and(|s| s == "paused");
                match (paused, looks) {
                    (false, _) => (None, self),
                    (true, 0..=24) => (None, Promote::Asked(looks + 1)),
                    (true, _) => (Some("select pg_catalog.pg_wal_replay_resume()"), Promote::Asked(0)),
                }
            }
        }
    }
}

/// Server settings of a profile, passed as `-c name=value`.
pub(crate) fn profile_settings(profile: Profile) -> &'static [(&'static str, &'static str)] {
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
        let owner = server_owner(&opts.user)?;
        let containment = contain::probe();
        if !containment.confines_files() {
            if opts.require_containment {
                return Err(infra(
                    "cannot confine the restore: this kernel offers no Landlock (Linux ≥ 5.13 with landlock in the \
                     lsm= list), so a crafted backup could reach the host; refusing to restore. Set \
                     [sandbox] require_containment = false to restore uncontained",
                ));
            }
            tracing::warn!(
                "RESTORING UNCONTAINED: this kernel offers no Landlock; a crafted backup can read and write what \
                 the sandbox user can ([sandbox] require_containment = false)"
            );
        }
        let root = match &opts.keep_at {
            Some(dir) => {
                // Kept across runs: no owner record (the reaper never looks there); a
                // directory of drcheck's own, made private.
                let parent = dir.parent().unwrap_or(Path::new("/"));
                leftovers::check_private(parent).map_err(infra)?;
                match std::fs::symlink_metadata(dir) {
                    Err(_) => std::fs::DirBuilder::new()
                        .mode(0o700)
                        .create(dir)
                        .map_err(|e| infra(format!("cannot create {}: {e}", dir.display())))?,
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => return Err(infra(format!("{} is not a directory: refusing to use it", dir.display()))),
                }
                dir.clone()
            }
            None => {
                let root = sandbox_root(opts)?;
                // The owner record first: a sandbox directory without one is never reaped.
                leftovers::write_owner(&root, &leftovers::Owner::current(None)).map_err(infra)?;
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&root)
                    .map_err(|e| infra(format!("cannot create sandbox directory {}: {e}", root.display())))?;
                root
            }
        };
        // From here on, dropping `sandbox` cleans up whatever exists.
        let mut sandbox = Sandbox {
            data_dir: root.join("data"),
            root,
            socket_dir: PathBuf::new(),
            bin: None,
            profile: opts.profile,
            owner,
            server: None,
            containment,
            password: random_password(),
            server_exec: Vec::new(),
            restored: false,
            memory_limit: opts.memory_limit,
            keep: opts.keep_at.is_some(),
            standby: false,
            promote: Promote::No,
            tool_limit: opts.tool_limit.clone(),
        };
        let socket_dir = tempfile::Builder::new()
            .prefix("drcheck-")
            .tempdir_in("/tmp")
            .map_err(|e| infra(format!("cannot create socket directory in /tmp: {e}")))?
            .keep();
        sandbox.socket_dir = socket_dir;
        if !sandbox.keep {
            leftovers::write_owner(&sandbox.root, &leftovers::Owner::current(Some(sandbox.socket_dir.clone())))
                .map_err(infra)?;
        }
        std::fs::set_permissions(&sandbox.socket_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| infra(format!("cannot restrict {}: {e}", sandbox.socket_dir.display())))?;
        let pass = sandbox.root.join(PASS_FILE);
        // A kept sandbox's old one (never followed: a link is removed, not its target).
        let _ = std::fs::remove_file(&pass);
        write_private(&pass, format!("*:*:*:*:{}\n", sandbox.password).as_bytes())?;
        for dir in [sandbox.root.clone(), sandbox.socket_dir.clone(), pass] {
            sandbox.give_to_server(&dir)?;
        }
        Ok(sandbox)
    }

    /// Which containment the sandbox's processes run under.
    pub fn containment(&self) -> Level {
        self.containment
    }

    /// The report's `restore.containment`: every layer the sandbox's processes run under.
    pub fn containment_name(&self) -> String {
        self.containment.name_with(self.owner.is_some())
    }

    /// The password of this sandbox's superuser (random, per run).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// libpq's password file for this sandbox (for `PGPASSFILE`).
    pub fn passfile(&self) -> PathBuf {
        self.root.join(PASS_FILE)
    }

    /// Lets the server also execute `programs` (for a `restore_command`), still confined.
    pub fn allow_server_exec(&mut self, programs: &[&str]) {
        for p in programs {
            if let Ok(real) = std::fs::canonicalize(p) {
                self.server_exec.push(real);
            }
        }
    }

    /// The containment of a process of this run: see [`Host::policy`].
    pub fn policy(&self, execute: &[PathBuf]) -> Policy {
        self.host().policy(execute)
    }

    /// What contained tools need of this sandbox, owned: a WAL fetch runs beside the
    /// server's recovery without borrowing the sandbox.
    pub fn host(&self) -> Host {
        Host {
            root: self.root.clone(),
            socket_dir: self.socket_dir.clone(),
            bindir: self.bin.as_ref().map(|b| b.dir.clone()).unwrap_or_default(),
            owner: self.owner,
            containment: self.containment,
            tool_limit: self.tool_limit.clone(),
        }
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
        self.restored = true;
        self.start(settings, ready_timeout).await
    }

    /// Hands a path to the server's user (recursively), when drcheck runs as root.
    pub fn give_to_server(&self, path: &Path) -> Result<(), RestoreError> {
        self.host().give_to_server(path)
    }

    /// Chooses the server's binaries before it starts (to run its tools on the data).
    pub(crate) fn choose_bin(&mut self, bin: PgBin) {
        self.bin = Some(bin);
    }

    fn bin_ref(&self) -> &PgBin {
        self.bin.as_ref().expect("the sandbox's binaries are chosen before it starts")
    }

    /// A command for a PostgreSQL server binary, contained, run as the server's owner
    /// in a clean environment (so no secret of drcheck's reaches it).
    pub fn server_command(&self, tool: &str) -> Result<Command, RestoreError> {
        self.command_with(tool, &self.server_exec)
    }

    /// [`Self::server_command`], allowed to execute `extra` too.
    fn command_with(&self, tool: &str, extra: &[PathBuf]) -> Result<Command, RestoreError> {
        self.command_as(tool, extra, false)
    }

    fn command_as(&self, tool: &str, extra: &[PathBuf], client: bool) -> Result<Command, RestoreError> {
        let mut exec = vec![self.bin_ref().dir.clone()];
        exec.extend(extra.iter().cloned());
        let mut policy = self.policy(&exec);
        if client && policy.syscalls != Syscalls::Unfiltered {
            policy.syscalls = Syscalls::Client;
        }
        if !client {
            // The server and every backend it forks: what one statement of the backup
            // may hold.
            policy.memory = self.memory_limit;
        }
        let mut cmd = contain::command(&self.bin_ref().tool(tool), &policy);
        cmd.current_dir(&self.root)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("LC_ALL", "C.UTF-8")
            .env("PGPASSFILE", self.passfile())
            .stdin(Stdio::null());
        Ok(cmd)
    }

    /// A PostgreSQL client tool of the sandbox's bindir, contained like the server
    /// (except that it may connect: to the sandbox's socket) and connected to
    /// `database` over the sandbox's socket with the run's password.
    pub fn client_command(&self, tool: &str, database: &str) -> Result<tokio::process::Command, RestoreError> {
        let mut cmd = self.command_as(tool, &self.server_exec, true)?;
        cmd.arg("-h").arg(&self.socket_dir).args(["-p", &PORT.to_string(), "-U", "postgres", "-d", database]);
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        Ok(cmd)
    }

    async fn initdb(&self) -> Result<(), RestoreError> {
        let pwfile = self.root.join("initdb.pw");
        write_private(&pwfile, self.password.as_bytes())?;
        self.give_to_server(&pwfile)?;
        // initdb finds `postgres` through the shell (popen); it runs before any backup
        // content exists, and the server it bootstraps is not the one that restores.
        let shell: Vec<PathBuf> = std::fs::canonicalize("/bin/sh").into_iter().collect();
        let mut cmd = self.command_with("initdb", &shell)?;
        cmd.arg("-D").arg(&self.data_dir).arg(format!("--pwfile={}", pwfile.display())).args([
            "-U",
            "postgres",
            "--auth-local=scram-sha-256",
            "--auth-host=reject",
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
        let _ = std::fs::remove_file(&pwfile);
        if !out.status.success() {
            let mut msg = format!("initdb failed ({}): {}", out.status, tail(&out.stderr, 2000));
            if msg.contains("Permission denied") && self.owner.is_some() {
                msg.push_str(" (hint: the sandbox user must be able to enter sandbox.scratch_dir)");
            }
            return Err(infra(msg));
        }
        Ok(())
    }

    async fn start(&mut self, extra: &[(String, String)], ready_timeout: Duration) -> Result<(), RestoreError> {
        let log_path = self.root.join("postgres.log");
        let log = if self.keep {
            // A follower's log goes on across restarts (what it said before still counts).
            std::fs::OpenOptions::new().create(true).append(true).open(&log_path)
        } else {
            std::fs::File::create(&log_path)
        }
        .map_err(|e| infra(format!("cannot create {}: {e}", log_path.display())))?;
        let log2 = log.try_clone().map_err(|e| infra(e.to_string()))?;
        let mut cmd = self.server_command("postgres")?;
        cmd.arg("-D").arg(&self.data_dir).arg("-k").arg(&self.socket_dir).args(["-p", &PORT.to_string()]);
        // Dynamic shared memory in the data directory, never in the host's /dev/shm; every
        // log line starts with its SQLSTATE, which says who is to blame for an error.
        let base = [
            ("listen_addresses", ""),
            ("unix_socket_permissions", "0700"),
            ("dynamic_shared_memory_type", "mmap"),
            ("log_line_prefix", "%e "),
        ];
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
        // Once in, the same session asks again: a new one every 20 ms would be a backend
        // forked 50 times a second beside the replay, on the replay's cores.
        let mut session: Option<PgConnection> = None;
        loop {
            if let Some(child) = self.server.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.server = None;
                // A server giving up on a data directory from a backup is the backup's
                // failure unless its own error code says otherwise; one drcheck made
                // with initdb failing to start is never the backup's.
                let (blame, why) = if self.restored { self.server_blame() } else { (Blame::World, None) };
                return Err(blame.error(
                    Stage::Restore,
                    crate::error::with_reason(
                        format!("the sandbox server exited during start-up ({status}): {}", self.log_tail()),
                        why,
                    ),
                ));
            }
            if session.is_none() && socket.exists() {
                session = PgConnection::connect_with(&self.connect_options("postgres")).await.ok();
            }
            if let Some(conn) = session.as_mut() {
                // A server still in recovery (archive replay) is not yet a restored database.
                let in_recovery: Result<bool, _> =
                    sqlx::query_scalar("select pg_is_in_recovery()").fetch_one(&mut *conn).await;
                if matches!(in_recovery, Ok(false)) || (self.standby && in_recovery.is_ok()) {
                    if let Some(c) = session.take() {
                        let _ = c.close().await;
                    }
                    return Ok(());
                }
                if in_recovery.is_err() {
                    session = None;
                } else {
                    let (say, then) = self.promote.next(conn).await;
                    if let Some(say) = say {
                        let _ = sqlx::query(say).execute(&mut *conn).await;
                    }
                    self.promote = then;
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

    /// Who is to blame for the server giving up on a restored data directory or on what
    /// a client sent it: the world when the run's file system is (nearly) full or the
    /// server's log carries an error code of the world's (`error::blame_of_server_line`),
    /// else the backup. For the world, what says so — to put in the error.
    pub fn server_blame(&self) -> (Blame, Option<String>) {
        if let Some(room) = self.disk_full() {
            return (Blame::World, Some(room));
        }
        let log = std::fs::read(self.root.join("postgres.log")).unwrap_or_default();
        let text = String::from_utf8_lossy(&log);
        // Under `[sandbox] memory_limit`, a server process out of memory is a backup
        // asking one process for more than the limit allows: the backup's.
        let text: String = if self.memory_limit.is_some() {
            text.lines().filter(|l| !l.starts_with("53200 ")).collect::<Vec<_>>().join("\n")
        } else {
            text.into_owned()
        };
        match crate::error::world_line_of_log(&text) {
            Some(line) => (Blame::World, Some(format!("the server says: {}", line.escape_debug()))),
            None => (Blame::Backup, None),
        }
    }

    /// Whether the server's log shows one of its processes crashing (a backend ended by a
    /// signal it did not get from outside: the server restarts the others and says so).
    pub fn backend_crashed(&self) -> Option<String> {
        let log = std::fs::read(self.root.join("postgres.log")).unwrap_or_default();
        let text = String::from_utf8_lossy(&log);
        text.lines()
            .find(|l| l.contains("was terminated by signal") && !l.contains("signal 9:"))
            .map(|l| l.split_once(' ').map_or(l, |(_, rest)| rest).trim().to_string())
    }

    /// Who is to blame for a client tool (pg_restore, psql) failing against this
    /// sandbox: killed by a signal (the OOM killer), or the server's errors say the
    /// world — else the backup, whose content the tool was restoring.
    pub fn judge_client(&self, status: &std::process::ExitStatus) -> (Blame, Option<String>) {
        use std::os::unix::process::ExitStatusExt;
        match status.signal() {
            Some(sig) => (Blame::World, Some(format!("killed by signal {sig} (the OOM killer, or an operator)"))),
            None => self.server_blame(),
        }
    }

    /// When the file system of the run's directory has less than 64 MiB left: how much.
    pub fn disk_full(&self) -> Option<String> {
        self.host().disk_full()
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
            .password(&self.password)
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

    /// Stops the server and removes the sandbox's files, a kept one's too.
    pub fn discard(mut self) {
        self.keep = false;
        self.cleanup();
    }

    /// Ends recovery by promoting the server as `promote` says (PostgreSQL's fast
    /// promotion: an end-of-recovery record, the checkpoint after it in the background —
    /// not the immediate checkpoint, waited for, that ending archive recovery by itself
    /// takes).
    pub(crate) fn promote_by(&mut self, promote: Promote) {
        self.promote = promote;
    }

    /// The address space each of the server's processes may use (`[sandbox] memory_limit`).
    pub(crate) fn memory_limit(&self) -> Option<u64> {
        self.memory_limit
    }

    /// Makes this a hot standby: it is ready when it accepts connections, still
    /// replaying.
    pub(crate) fn set_standby(&mut self) {
        self.standby = true;
    }

    /// Whether it is a hot standby.
    pub(crate) fn is_standby(&self) -> bool {
        self.standby
    }

    /// Whether its server is running; when it has exited, how.
    pub fn server_exited(&mut self) -> Option<String> {
        let child = self.server.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                self.server = None;
                Some(status.to_string())
            }
            _ => None,
        }
    }

    /// Whether a server was started and has not been seen to exit.
    pub fn has_server(&self) -> bool {
        self.server.is_some()
    }

    /// Stopping the server waits for it and deleting a cluster takes seconds: never on
    /// an async worker (it would stall `/healthz` and every other run). The work goes to
    /// a thread of its own, which [`finish_teardowns`] waits for before the process exits.
    fn cleanup(&mut self) {
        let root = std::mem::take(&mut self.root);
        let work = Teardown {
            server: self.server.take(),
            root: if self.keep { PathBuf::new() } else { root },
            socket_dir: std::mem::take(&mut self.socket_dir),
        };
        if work.server.is_none() && work.root.as_os_str().is_empty() && work.socket_dir.as_os_str().is_empty() {
            return;
        }
        match std::thread::Builder::new().name("sandbox-teardown".into()).spawn(move || work.run()) {
            Ok(handle) => {
                let mut list = TEARDOWNS.lock().unwrap_or_else(|e| e.into_inner());
                // A daemon tears down one sandbox a run: forget the finished ones.
                list.retain(|h| !h.is_finished());
                list.push(handle);
            }
            // No thread to be had: tear down here rather than leave anything behind.
            Err(e) => tracing::warn!("cannot start a teardown thread ({e}); tearing down in place"),
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// What tearing a sandbox down takes, moved off the sandbox.
struct Teardown {
    server: Option<Child>,
    root: PathBuf,
    socket_dir: PathBuf,
}

impl Teardown {
    fn run(mut self) {
        let (root, socket_dir) = (std::mem::take(&mut self.root), std::mem::take(&mut self.socket_dir));
        if let Some(mut child) = self.server.take() {
            stop_server(&mut child);
        }
        if !root.as_os_str().is_empty() {
            // Whatever else still works inside (an initdb cancelled half-way leaves its
            // bootstrap backend behind) would write into the directory being removed.
            for attempt in 0..5 {
                leftovers::stop_processes_in(&root);
                match std::fs::remove_dir_all(&root) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(_) => std::thread::sleep(Duration::from_millis(20 * (attempt + 1))),
                }
            }
        }
        if !socket_dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&socket_dir);
        }
        if !root.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(leftovers::keys_dir(&root));
            let _ = std::fs::remove_file(leftovers::owner_file(&root));
        }
    }
}

impl Drop for Teardown {
    fn drop(&mut self) {
        // Only when the thread could not be started: `run` took everything otherwise.
        if self.server.is_some() || !self.root.as_os_str().is_empty() || !self.socket_dir.as_os_str().is_empty() {
            let work = Teardown {
                server: self.server.take(),
                root: std::mem::take(&mut self.root),
                socket_dir: std::mem::take(&mut self.socket_dir),
            };
            work.run();
        }
    }
}

static TEARDOWNS: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>> = std::sync::Mutex::new(Vec::new());

/// Waits for every sandbox teardown started so far (call before the process exits, and
/// in tests that check nothing is left).
pub fn finish_teardowns() {
    let handles: Vec<_> = std::mem::take(&mut *TEARDOWNS.lock().unwrap_or_else(|e| e.into_inner()));
    for h in handles {
        let _ = h.join();
    }
}

/// 32 random letters and digits.
fn random_password() -> String {
    use rand::Rng;
    rand::rng().sample_iter(rand::distr::Alphanumeric).take(32).map(char::from).collect()
}

/// Creates `path` (which must not exist: never follows a planted link) with mode 0600.
pub(crate) fn write_private(path: &Path, content: &[u8]) -> Result<(), RestoreError> {
    leftovers::create_private(path, content).map_err(infra)
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

/// Who the server must run as: `None` to run as ourselves, the sandbox user when root.
/// That user must own nothing else: not root, not the owner of the host's clusters
/// (whose peer authentication would let a restored server in).
fn server_owner(name: &str) -> Result<Option<(Uid, Gid)>, RestoreError> {
    if !Uid::effective().is_root() {
        return Ok(None);
    }
    let user = match User::from_name(name) {
        Ok(Some(u)) => u,
        _ => {
            return Err(infra(format!(
                "the sandbox user {name:?} does not exist: create it (`useradd --system --user-group \
                 --no-create-home --shell /usr/sbin/nologin {name}`; scripts/setup.sh and the image do) \
                 or name another in [sandbox] user"
            )));
        }
    };
    if let Some(why) = shares_identity(&user) {
        return Err(infra(format!(
            "[sandbox] user = {name:?} {why}: restored backups must run as a user that owns nothing else \
             (the default drcheck-sandbox)"
        )));
    }
    Ok(Some((user.uid, user.gid)))
}

/// Why `user` would share an identity with something on the host, if it would.
fn shares_identity(user: &User) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    if user.uid.is_root() || user.uid == Uid::current() {
        return Some("is drcheck's own user".into());
    }
    if user.name == "postgres" {
        return Some("is the owner of the host's PostgreSQL clusters".into());
    }
    for path in ["/var/run/postgresql", "/var/lib/postgresql", "/etc/postgresql"] {
        if std::fs::metadata(path).is_ok_and(|m| m.uid() == user.uid.as_raw()) {
            return Some(format!("owns {path}"));
        }
    }
    None
}

/// The last `max` bytes of `bytes` as trimmed text.
pub(crate) fn tail(bytes: &[u8], max: usize) -> String {
    let start = bytes.len().saturating_sub(max);
    String::from_utf8_lossy(&bytes[start..]).trim().to_string()
}

/// The directory a run's sandbox lives in: `scratch_dir/drcheck-<uid>/sandbox-<run>`.
pub(crate) fn sandbox_root(opts: &SandboxOptions) -> Result<PathBuf, RestoreError> {
    let private = leftovers::ensure_private_dir(&opts.scratch_dir).map_err(infra)?;
    Ok(private.join(format!("{SANDBOX_PREFIX}{}", opts.run_id)))
}

/// Removes sandboxes left by drcheck processes that no longer exist (see
/// [`crate::server::leftovers`]). Returns the directories removed.
pub fn reap_leftovers(scratch_dir: &Path) -> Vec<PathBuf> {
    leftovers::reap(scratch_dir)
}
