//! Containment of everything that reads backup content.
//!
//! A backup is hostile input: `psql`, `pg_restore`, the sandbox server and
//! `pg_verifybackup` read bytes that whoever can write to the bucket chose. None of
//! them runs with drcheck's privileges. Each is started through a small helper — this
//! same binary, re-executed with [`HELPER_ARG`] — that, before it executes the tool:
//!
//! 1. enters private mount, IPC and (unless it must reach a store) network namespaces
//!    where the kernel lets it (as root directly, otherwise through a user namespace
//!    that maps only its own uid), and remounts the run's directories `noexec`,
//!    `nosuid`, `nodev` there: nothing a backup writes can be executed or loaded as
//!    native code, and no SysV segment or network of the host is visible;
//! 2. drops to the sandbox user when drcheck is root (`setgroups`, `setgid`,
//!    `setuid`) — a user that owns nothing else — so nothing that reads a backup runs
//!    as root, as `postgres`, or as anything another cluster trusts;
//! 3. confines itself with Landlock: read the PostgreSQL installation and the system
//!    libraries, read and write only the run's own directories, execute only the
//!    binaries the step needs, no TCP bind or connect, no signals to processes outside
//!    the run and no abstract unix sockets outside it;
//! 4. installs a seccomp filter ([`Syscalls`]): Landlock does not govern `connect()` on
//!    pathname unix sockets, so a server may not connect anywhere at all (PostgreSQL's
//!    own server never calls `connect()`; dblink, postgres_fdw and replication do), no
//!    process may open a socket other than a unix stream socket unless it must reach a
//!    store, nor trace, read or write another process's memory, nor use io_uring (which
//!    would bypass the filter);
//! 5. executes the tool, which inherits every layer (and so do its children: the
//!    server's backends, `COPY … TO PROGRAM`, psql's `\!`).
//!
//! A helper process rather than `pre_exec` keeps the privilege drop and the Landlock
//! calls out of a forked copy of a multi-threaded process, where only async-signal-safe
//! code may run. The binary opts in with [`install_helper`] and must hand its arguments
//! to [`helper_main`] first thing in `main`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The first argument that makes the binary act as the containment helper.
pub const HELPER_ARG: &str = "__drcheck-contain";
/// Exit status of the helper when it could not set up the containment it was asked for.
pub const HELPER_FAILED: i32 = 125;

static HELPER: OnceLock<PathBuf> = OnceLock::new();
static PROBED: OnceLock<Level> = OnceLock::new();

/// Which containment layers this kernel (and drcheck's privileges) offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Level {
    /// Landlock with the given ABI (filesystem; TCP from ABI 4; scoping from ABI 6).
    pub landlock: Option<u8>,
    /// A seccomp filter can be installed.
    pub seccomp: bool,
    /// Private mount, IPC and network namespaces can be entered (directly as root, or
    /// through a user namespace).
    pub namespaces: bool,
}

impl Level {
    /// Nothing at all: no Landlock, no seccomp, no namespaces (or no helper installed).
    pub const NONE: Level = Level { landlock: None, seccomp: false, namespaces: false };

    /// Whether the filesystem confinement (the layer drcheck requires) is there.
    pub fn confines_files(self) -> bool {
        self.landlock.is_some()
    }

    /// The report's `restore.containment`: every layer that applied, e.g.
    /// `landlock-abi7+uid+seccomp+ns`, or `none`. `uid` says the processes ran as a
    /// user of their own (drcheck was root).
    pub fn name_with(self, own_uid: bool) -> String {
        let mut parts = Vec::new();
        if let Some(abi) = self.landlock {
            parts.push(format!("landlock-abi{abi}"));
        }
        if own_uid {
            parts.push("uid".to_string());
        }
        if self.seccomp {
            parts.push("seccomp".to_string());
        }
        if self.namespaces {
            parts.push("ns".to_string());
        }
        if parts.is_empty() { "none".to_string() } else { parts.join("+") }
    }
}

/// Tells the library which binary acts as the helper (normally `/proc/self/exe`).
pub fn install_helper(path: PathBuf) {
    let _ = HELPER.set(path);
}

/// What the kernel offers, asked once of the helper (it tries each layer on itself and
/// says what it got).
pub fn probe() -> Level {
    *PROBED.get_or_init(|| {
        let Some(helper) = HELPER.get() else { return Level::NONE };
        let out = std::process::Command::new(helper)
            .args([HELPER_ARG, "--probe"])
            .env_clear()
            .stdin(std::process::Stdio::null())
            .output();
        match out {
            Ok(o) if o.status.success() => parse_probe(&String::from_utf8_lossy(&o.stdout)),
            _ => Level::NONE,
        }
    })
}

/// The probe's answer: words such as `landlock-abi7 seccomp ns`.
fn parse_probe(text: &str) -> Level {
    let mut level = Level::NONE;
    for word in text.split_whitespace() {
        if let Some(abi) = word.strip_prefix("landlock-abi").and_then(|v| v.parse().ok()) {
            level.landlock = Some(abi);
        } else if word == "seccomp" {
            level.seccomp = true;
        } else if word == "ns" {
            level.namespaces = true;
        }
    }
    level
}

/// Which system calls a contained process may not make (see [`seccomp_filter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Syscalls {
    /// No filter.
    #[default]
    Unfiltered,
    /// A PostgreSQL server and its helpers: no `connect()` at all, sockets only of
    /// the unix stream kind (its listen socket), no datagrams to an address, no
    /// tracing or cross-process memory access, no io_uring.
    Server,
    /// A client of the sandbox (psql, pg_restore, pg_amcheck): it connects to the
    /// sandbox's unix socket, so `connect()` stays; no other kind of socket, no
    /// tracing, no io_uring.
    Client,
    /// A backup tool that reaches its store over TCP (Landlock limits the port): no
    /// tracing, no cross-process memory access, no io_uring.
    Tool,
}

impl Syscalls {
    fn flag(self) -> Option<&'static str> {
        match self {
            Syscalls::Unfiltered => None,
            Syscalls::Server => Some("server"),
            Syscalls::Client => Some("client"),
            Syscalls::Tool => Some("tool"),
        }
    }

    fn parse(s: &str) -> Option<Syscalls> {
        match s {
            "server" => Some(Syscalls::Server),
            "client" => Some(Syscalls::Client),
            "tool" => Some(Syscalls::Tool),
            _ => None,
        }
    }
}

/// What one contained process may touch.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Read and write (create, remove, …) beneath these directories.
    pub read_write: Vec<PathBuf>,
    /// Read beneath these (files or directories).
    pub read_only: Vec<PathBuf>,
    /// May be executed (files or directories).
    pub execute: Vec<PathBuf>,
    /// Drop to this user and group first (when drcheck is root).
    pub user: Option<(u32, u32)>,
    /// Supplementary groups kept with `user` (a backup tool reading its repository
    /// through the repository's group); never group 0.
    pub groups: Vec<u32>,
    /// The Landlock ABI the helper must enforce; `None` runs without Landlock (only
    /// when the configuration allows it).
    pub require_abi: Option<u8>,
    /// TCP ports the process may connect to (a backup tool reaching its object store);
    /// empty for everything that reads restored data: no network at all.
    pub connect_tcp: Vec<u16>,
    /// The seccomp filter to install (required when not `Unfiltered`).
    pub syscalls: Syscalls,
    /// Enter private namespaces and remount `read_write` noexec (required when set).
    pub namespaces: bool,
    /// The address space the process (and every child) may use, `RLIMIT_AS`.
    pub memory: Option<u64>,
}

/// Paths every PostgreSQL binary needs to read: the installation, shared libraries,
/// time zones and locales, and the few files of `/etc` that libc reads. Nothing else
/// of `/etc` (drcheck's config may live there), no `/proc`, no `/home`, no `/root`.
pub fn system_read_paths(pg_bindir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> =
        ["/usr/lib", "/usr/lib64", "/usr/share", "/lib", "/lib64"].iter().map(PathBuf::from).collect();
    for f in [
        "/etc/ld.so.cache",
        "/etc/localtime",
        "/etc/passwd",
        "/etc/group",
        "/etc/nsswitch.conf",
        "/etc/postgresql-common/user_clusters",
        "/dev/urandom",
        "/dev/random",
    ] {
        paths.push(PathBuf::from(f));
    }
    // A configured bindir may live elsewhere (e.g. /opt/pgsql/bin): its installation too.
    if let Some(install) = pg_bindir.parent() {
        paths.push(install.to_path_buf());
    }
    paths
}

/// The dynamic loader(s): executing a dynamically linked binary opens its interpreter
/// for execution, so it must be allowed along with the binary.
pub fn loader_paths() -> Vec<PathBuf> {
    ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1", "/lib/ld-linux-x86-64.so.2"]
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect()
}

/// A command that runs `program` under `policy`: the helper when any layer is asked
/// for, or `program` itself (as the policy's user) when none is.
pub fn command(program: &Path, policy: &Policy) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let wanted = policy.require_abi.is_some()
        || policy.user.is_some()
        || policy.syscalls != Syscalls::Unfiltered
        || policy.namespaces
        || policy.memory.is_some();
    let Some(helper) = HELPER.get().filter(|_| wanted) else {
        let mut cmd = std::process::Command::new(program);
        if let Some((uid, gid)) = policy.user {
            cmd.uid(uid).gid(gid);
        }
        return cmd;
    };
    let mut cmd = std::process::Command::new(helper);
    cmd.arg(HELPER_ARG);
    for (flag, paths) in [("--rw", &policy.read_write), ("--ro", &policy.read_only), ("--exec", &policy.execute)] {
        for p in paths {
            cmd.arg(flag).arg(p);
        }
    }
    if let Some((uid, gid)) = policy.user {
        cmd.arg("--user").arg(format!("{uid}:{gid}"));
    }
    for g in &policy.groups {
        cmd.arg("--group").arg(g.to_string());
    }
    for port in &policy.connect_tcp {
        cmd.arg("--connect").arg(port.to_string());
    }
    if let Some(flag) = policy.syscalls.flag() {
        cmd.arg("--seccomp").arg(flag);
    }
    if policy.namespaces {
        cmd.arg("--ns");
    }
    if let Some(bytes) = policy.memory {
        cmd.arg("--memory").arg(bytes.to_string());
    }
    match policy.require_abi {
        Some(abi) => cmd.arg("--abi").arg(abi.to_string()),
        None => cmd.arg("--uncontained"),
    };
    cmd.arg("--").arg(program);
    cmd
}

/// The helper's side. Returns `None` when `args` do not ask for the helper; otherwise it
/// never returns (it executes the tool or exits with [`HELPER_FAILED`]).
pub fn helper_main(args: &[OsString]) -> Option<std::convert::Infallible> {
    if args.get(1).map(|a| a.as_bytes()) != Some(HELPER_ARG.as_bytes()) {
        return None;
    }
    let fail = |msg: String| -> ! {
        eprintln!("drcheck containment: {msg}");
        std::process::exit(HELPER_FAILED)
    };
    if args.get(2).map(|a| a.as_bytes()) == Some(b"--probe") {
        print_probe();
        std::process::exit(0);
    }
    let mut policy = Policy::default();
    let mut uncontained = false;
    let mut i = 2;
    let program = loop {
        let Some(flag) = args.get(i) else { fail("no program to run".into()) };
        let value = args.get(i + 1);
        match flag.as_bytes() {
            b"--" => break value.cloned().unwrap_or_else(|| fail("no program to run".into())),
            b"--uncontained" => {
                uncontained = true;
                i += 1;
                continue;
            }
            b"--ns" => {
                policy.namespaces = true;
                i += 1;
                continue;
            }
            _ => {}
        }
        let Some(value) = value else { fail(format!("{} needs a value", flag.to_string_lossy())) };
        match flag.as_bytes() {
            b"--rw" => policy.read_write.push(PathBuf::from(value)),
            b"--ro" => policy.read_only.push(PathBuf::from(value)),
            b"--exec" => policy.execute.push(PathBuf::from(value)),
            b"--user" => {
                let v = value.to_string_lossy();
                let parsed = v.split_once(':').and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)));
                policy.user = Some(parsed.unwrap_or_else(|| fail(format!("bad --user {v}"))));
            }
            b"--group" => {
                let v = value.to_string_lossy();
                match v.parse::<u32>() {
                    Ok(g) if g != 0 => policy.groups.push(g),
                    _ => fail(format!("bad --group {v} (never group 0)")),
                }
            }
            b"--connect" => {
                let v = value.to_string_lossy();
                policy.connect_tcp.push(v.parse().unwrap_or_else(|_| fail(format!("bad --connect {v}"))));
            }
            b"--memory" => {
                let v = value.to_string_lossy();
                policy.memory = Some(v.parse().unwrap_or_else(|_| fail(format!("bad --memory {v}"))));
            }
            b"--abi" => {
                let v = value.to_string_lossy();
                policy.require_abi = Some(v.parse().unwrap_or_else(|_| fail(format!("bad --abi {v}"))));
            }
            b"--seccomp" => {
                let v = value.to_string_lossy();
                policy.syscalls = Syscalls::parse(&v).unwrap_or_else(|| fail(format!("bad --seccomp {v}")));
            }
            other => fail(format!("unknown flag {}", String::from_utf8_lossy(other))),
        }
        i += 2;
    };
    let rest = &args[i + 2..];
    // Namespaces first: entering them (and remounting) needs privileges that the
    // later layers take away.
    if policy.namespaces {
        enter_namespaces(policy.connect_tcp.is_empty(), &policy.read_write)
            .unwrap_or_else(|e| fail(format!("cannot enter private namespaces: {e}")));
    }
    if let Some((uid, gid)) = policy.user {
        drop_privileges(uid, gid, &policy.groups).unwrap_or_else(|e| fail(format!("cannot drop to uid {uid}: {e}")));
    }
    if let Some(bytes) = policy.memory {
        use nix::sys::resource::{Resource, setrlimit};
        setrlimit(Resource::RLIMIT_AS, bytes, bytes)
            .unwrap_or_else(|e| fail(format!("cannot limit the address space to {bytes} bytes: {e}")));
    }
    if !uncontained {
        let want = policy.require_abi.unwrap_or(1);
        match landlock_restrict(&policy, Some(want)) {
            Ok(Some(_)) => {}
            Ok(None) => fail("the kernel offers no Landlock".into()),
            Err(e) => fail(e.to_string()),
        }
    }
    if policy.syscalls != Syscalls::Unfiltered {
        install_seccomp(policy.syscalls).unwrap_or_else(|e| fail(format!("cannot install the seccomp filter: {e}")));
    }
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new(&program).args(rest).exec();
    fail(format!("cannot execute {}: {err}", program.to_string_lossy()))
}

/// Tries every layer on this (throwaway) process and prints what worked. Namespaces
/// are tried in a child, so the order of the tries does not matter.
fn print_probe() {
    let mut words = Vec::new();
    // A child tries the namespaces (they change the process for good).
    let ns_ok = probe_namespaces().unwrap_or(false);
    if let Ok(Some(abi)) = landlock_restrict(&Policy::default(), None) {
        words.push(format!("landlock-abi{abi}"));
    }
    if install_seccomp(Syscalls::Server).is_ok() {
        words.push("seccomp".to_string());
    }
    if ns_ok {
        words.push("ns".to_string());
    }
    println!("{}", words.join(" "));
}

/// Runs the helper once more, entering the namespaces there (with `/bin/true` as the
/// program), so the probing process itself stays as it was.
fn probe_namespaces() -> Option<bool> {
    let exe = std::env::current_exe().ok()?;
    let dir = std::env::temp_dir();
    let out = std::process::Command::new(exe)
        .args([HELPER_ARG, "--ns", "--rw"])
        .arg(&dir)
        .args(["--uncontained", "--", "/bin/true"])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    Some(out.success())
}

fn drop_privileges(uid: u32, gid: u32, more: &[u32]) -> Result<(), nix::Error> {
    use nix::unistd::{Gid, Uid, setgid, setgroups, setuid};
    if Uid::effective().is_root() {
        let mut groups = vec![Gid::from_raw(gid)];
        groups.extend(more.iter().filter(|g| **g != 0).map(|g| Gid::from_raw(*g)));
        setgroups(&groups)?;
        setgid(Gid::from_raw(gid))?;
        setuid(Uid::from_raw(uid))?;
    }
    if Uid::effective().as_raw() != uid && Uid::effective().is_root() {
        return Err(nix::Error::EPERM);
    }
    Ok(())
}

/// Confines the current process (and its future children) by `policy`. With
/// `require`, fails unless that ABI's rules were all enforced.
/// Why a layer of containment could not be put on.
#[derive(Debug, thiserror::Error)]
enum LayerError {
    #[error("landlock: {0}")]
    Landlock(#[from] landlock::RulesetError),
    /// The kernel offers an older Landlock ABI than required (0: none).
    #[error("Landlock ABI {want} required, the kernel offers {}", if *offered == 0 { "none".to_string() } else { offered.to_string() })]
    Abi { want: u8, offered: u8 },
    /// A step of entering the namespaces or of remounting.
    #[error("{step}: {source}")]
    Namespace { step: String, source: std::io::Error },
    #[error("{0}")]
    SeccompBuild(#[from] seccompiler::BackendError),
    #[error("{0}")]
    SeccompApply(#[from] seccompiler::Error),
    #[error("no_new_privs: {0}")]
    NoNewPrivs(nix::Error),
}

impl LayerError {
    fn step(step: impl Into<String>) -> impl FnOnce(nix::Error) -> LayerError {
        let step = step.into();
        move |e| LayerError::Namespace { step, source: e.into() }
    }

    fn write(step: &'static str) -> impl FnOnce(std::io::Error) -> LayerError {
        move |source| LayerError::Namespace { step: step.into(), source }
    }
}

fn landlock_restrict(policy: &Policy, require: Option<u8>) -> Result<Option<u8>, LayerError> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, PathBeneath, PathFd,
        Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
    };
    // ABI 7 is what drcheck is written and tested for: later ABIs add rights (such as
    // connecting to pathname unix sockets) that would need rules of their own.
    let abi = match require {
        Some(v) => ABI::from(i32::from(v.min(MAX_ABI))),
        None => ABI::from(i32::from(MAX_ABI)),
    };
    let level = if require.is_some() { CompatLevel::HardRequirement } else { CompatLevel::BestEffort };
    let ruleset = Ruleset::default().set_compatibility(level).handle_access(AccessFs::from_all(abi))?;
    let ruleset =
        if AccessNet::from_all(abi).is_empty() { ruleset } else { ruleset.handle_access(AccessNet::from_all(abi))? };
    let ruleset = if Scope::from_all(abi).is_empty() { ruleset } else { ruleset.scope(Scope::from_all(abi))? };
    let ruleset = ruleset.create()?;

    let read: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::ReadDir;
    // Everything inside the run's own directories but executing what was written there
    // (or making devices, which needs privileges anyway).
    let write = AccessFs::from_all(abi) & !(AccessFs::Execute | AccessFs::MakeChar | AccessFs::MakeBlock);
    let mut rules = Vec::new();
    let mut grant = |path: &Path, access: BitFlags<AccessFs>| {
        // Paths that do not exist on this system (e.g. /lib64 on arm64) are simply not granted.
        let Ok(fd) = PathFd::new(path) else { return };
        let is_dir = std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false);
        let access = if is_dir { access } else { access & AccessFs::from_file(abi) };
        if !access.is_empty() {
            rules.push(PathBeneath::new(fd, access));
        }
    };
    for p in &policy.read_only {
        grant(p, read);
    }
    for p in &policy.execute {
        grant(p, read | AccessFs::Execute);
    }
    for p in &policy.read_write {
        grant(p, write);
    }
    // Every tool writes its diagnostics to /dev/null at some point; nothing else of /dev.
    grant(Path::new("/dev/null"), AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate);
    // No /dev/shm: it is shared with every process of the host (another cluster's
    // segments included). Servers keep dynamic shared memory in their data directory
    // (`dynamic_shared_memory_type = mmap`).
    let mut ruleset = ruleset.add_rules(rules.into_iter().map(Ok::<_, landlock::RulesetError>))?;
    if !AccessNet::from_all(abi).is_empty() {
        for port in &policy.connect_tcp {
            ruleset = ruleset.add_rule(landlock::NetPort::new(*port, AccessNet::ConnectTcp))?;
        }
    }
    let status = ruleset.restrict_self()?;
    let effective = match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => (effective_abi as u8).min(MAX_ABI),
        _ => 0,
    };
    if status.ruleset == RulesetStatus::NotEnforced || effective == 0 {
        return match require {
            Some(want) => Err(LayerError::Abi { want, offered: 0 }),
            None => Ok(None),
        };
    }
    if let Some(want) = require
        && effective < want
    {
        return Err(LayerError::Abi { want, offered: effective });
    }
    Ok(Some(effective))
}

/// The newest Landlock ABI whose rules drcheck sets.
pub const MAX_ABI: u8 = 7;

/// Enters private mount and IPC namespaces (and a network namespace when `no_network`),
/// then remounts each of `writable` onto itself `noexec,nosuid,nodev`: nothing written
/// there can be executed, `mmap`ed executable (a shared library a backup drops) or
/// carry set-ID bits. As root the namespaces are entered directly; otherwise through a
/// user namespace that maps only this process's own uid and gid.
fn enter_namespaces(no_network: bool, writable: &[PathBuf]) -> Result<(), LayerError> {
    use nix::mount::{MsFlags, mount};
    use nix::sched::{CloneFlags, unshare};
    use nix::unistd::{Gid, Uid};
    let mut flags = CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWIPC;
    if no_network {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    let (uid, gid) = (Uid::current(), Gid::current());
    if uid.is_root() {
        unshare(flags).map_err(LayerError::step("unshare"))?;
    } else {
        unshare(flags | CloneFlags::CLONE_NEWUSER).map_err(LayerError::step("unshare (user namespace)"))?;
        std::fs::write("/proc/self/setgroups", "deny").map_err(LayerError::write("setgroups"))?;
        std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")).map_err(LayerError::write("uid_map"))?;
        std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")).map_err(LayerError::write("gid_map"))?;
    }
    // Nothing mounted here may propagate back to the host.
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .map_err(LayerError::step("making mounts private"))?;
    for dir in writable {
        // Keep the flags the mount already has (a user namespace may not clear them).
        let kept = nix::sys::statvfs::statvfs(dir).map(|v| mount_flags(v.flags())).unwrap_or(MsFlags::empty());
        mount(Some(dir), dir, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>)
            .map_err(LayerError::step(format!("bind-mounting {}", dir.display())))?;
        let restricted =
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOEXEC | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | kept;
        mount(None::<&str>, dir, None::<&str>, restricted, None::<&str>)
            .map_err(LayerError::step(format!("remounting {} noexec", dir.display())))?;
    }
    Ok(())
}

/// The `mount(2)` flags matching a file system's `statvfs` flags.
fn mount_flags(f: nix::sys::statvfs::FsFlags) -> nix::mount::MsFlags {
    use nix::mount::MsFlags;
    use nix::sys::statvfs::FsFlags;
    let pairs = [
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ];
    pairs.iter().filter(|(s, _)| f.contains(*s)).fold(MsFlags::empty(), |acc, (_, m)| acc | *m)
}

/// Installs the seccomp filter for `kind` on this process (and so on what it executes).
/// Denied calls fail with `EPERM`, as a permission would.
fn install_seccomp(kind: Syscalls) -> Result<(), LayerError> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond,
        SeccompFilter, SeccompRule,
    };
    use std::collections::BTreeMap;
    let cond = |arg: u8, len: Len, op: Op, value: u64| Cond::new(arg, len, op, value);
    let rule = |conds: Vec<Cond>| SeccompRule::new(conds);
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    // Everything contained: no tracing, no reading or writing another process's
    // memory, no io_uring (its operations bypass seccomp).
    for call in [
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ] {
        rules.insert(call, vec![]);
    }
    let af_unix = libc::AF_UNIX as u64;
    match kind {
        Syscalls::Unfiltered => return Ok(()),
        Syscalls::Tool => {}
        Syscalls::Client => {
            // Sockets of the unix kind only (the sandbox's socket).
            rules.insert(libc::SYS_socket, vec![rule(vec![cond(0, Len::Dword, Op::Ne, af_unix)?])?]);
        }
        Syscalls::Server => {
            // No connection out at all, not even over a pathname unix socket.
            rules.insert(libc::SYS_connect, vec![]);
            rules.insert(
                libc::SYS_socket,
                vec![
                    rule(vec![cond(0, Len::Dword, Op::Ne, af_unix)?])?,
                    // Unix sockets of the stream kind only (the listen socket): a
                    // datagram socket could send to an address without connecting.
                    rule(vec![
                        cond(0, Len::Dword, Op::Eq, af_unix)?,
                        cond(1, Len::Dword, Op::MaskedEq(0xf), libc::SOCK_DGRAM as u64)?,
                    ])?,
                    rule(vec![
                        cond(0, Len::Dword, Op::Eq, af_unix)?,
                        cond(1, Len::Dword, Op::MaskedEq(0xf), libc::SOCK_SEQPACKET as u64)?,
                    ])?,
                ],
            );
            // A datagram to an address needs no connect().
            rules.insert(libc::SYS_sendto, vec![rule(vec![cond(4, Len::Qword, Op::Ne, 0)?])?]);
        }
    }
    let arch: seccompiler::TargetArch = std::env::consts::ARCH.try_into()?;
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)?;
    let program: BpfProgram = filter.try_into()?;
    // Landlock has already set no_new_privs when it ran; without it, set it here.
    nix::sys::prctl::set_no_new_privs().map_err(LayerError::NoNewPrivs)?;
    Ok(seccompiler::apply_filter(&program)?)
}
