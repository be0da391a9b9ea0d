//! Containment of everything that reads backup content.
//!
//! A backup is hostile input: `psql`, `pg_restore`, the sandbox server and
//! `pg_verifybackup` read bytes that whoever can write to the bucket chose. None of
//! them runs with drcheck's privileges. Each is started through a small helper — this
//! same binary, re-executed with [`HELPER_ARG`] — that, before it executes the tool:
//!
//! 1. drops to the sandbox's server user when drcheck is root (`setgroups`, `setgid`,
//!    `setuid`), so nothing that reads a backup runs as root;
//! 2. confines itself with Landlock: read the PostgreSQL installation and the system
//!    libraries, read and write only the run's own directories, execute only the
//!    binaries the step needs, no TCP bind or connect, no signals to processes outside
//!    the run and no abstract unix sockets outside it;
//! 3. executes the tool, which inherits the confinement (and so do its children: the
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

/// Which containment a run's processes get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Landlock with the given ABI (filesystem; TCP from ABI 4; scoping from ABI 6).
    Landlock(u8),
    /// No confinement: the kernel has no Landlock (or it is disabled), or the binary
    /// installed no helper.
    None,
}

impl Level {
    /// The report's `restore.containment`: `landlock-abi7` or `none`.
    pub fn name(self) -> String {
        match self {
            Level::Landlock(abi) => format!("landlock-abi{abi}"),
            Level::None => "none".to_string(),
        }
    }
}

/// Tells the library which binary acts as the helper (normally `/proc/self/exe`).
pub fn install_helper(path: PathBuf) {
    let _ = HELPER.set(path);
}

/// What the kernel offers, asked once of the helper (it confines itself and says what
/// it got).
pub fn probe() -> Level {
    *PROBED.get_or_init(|| {
        let Some(helper) = HELPER.get() else { return Level::None };
        let out = std::process::Command::new(helper)
            .args([HELPER_ARG, "--probe"])
            .env_clear()
            .stdin(std::process::Stdio::null())
            .output();
        match out {
            Ok(o) if o.status.success() => {
                let text = String::from_utf8_lossy(&o.stdout);
                text.trim()
                    .strip_prefix("landlock-abi")
                    .and_then(|v| v.parse().ok())
                    .map_or(Level::None, Level::Landlock)
            }
            _ => Level::None,
        }
    })
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
    /// The Landlock ABI the helper must enforce; `None` runs uncontained (only when the
    /// configuration allows it).
    pub require_abi: Option<u8>,
    /// TCP ports the process may connect to (a backup tool reaching its object store);
    /// empty for everything that reads restored data: no network at all.
    pub connect_tcp: Vec<u16>,
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

/// A command that runs `program` under `policy`: the helper when containment is on,
/// or `program` itself (as the policy's user) when it is off.
pub fn command(program: &Path, policy: &Policy) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let Some(helper) = HELPER.get().filter(|_| policy.require_abi.is_some() || policy.user.is_some()) else {
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
    for port in &policy.connect_tcp {
        cmd.arg("--connect").arg(port.to_string());
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
        match landlock_restrict(&Policy::default(), None) {
            Ok(Level::Landlock(abi)) => println!("landlock-abi{abi}"),
            Ok(Level::None) | Err(_) => println!("none"),
        }
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
            b"--connect" => {
                let v = value.to_string_lossy();
                policy.connect_tcp.push(v.parse().unwrap_or_else(|_| fail(format!("bad --connect {v}"))));
            }
            b"--abi" => {
                let v = value.to_string_lossy();
                policy.require_abi = Some(v.parse().unwrap_or_else(|_| fail(format!("bad --abi {v}"))));
            }
            other => fail(format!("unknown flag {}", String::from_utf8_lossy(other))),
        }
        i += 2;
    };
    let rest = &args[i + 2..];
    if let Some((uid, gid)) = policy.user {
        drop_privileges(uid, gid).unwrap_or_else(|e| fail(format!("cannot drop to uid {uid}: {e}")));
    }
    if !uncontained {
        let want = policy.require_abi.unwrap_or(1);
        match landlock_restrict(&policy, Some(want)) {
            Ok(Level::Landlock(_)) => {}
            Ok(Level::None) => fail("the kernel offers no Landlock".into()),
            Err(e) => fail(e),
        }
    }
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new(&program).args(rest).exec();
    fail(format!("cannot execute {}: {err}", program.to_string_lossy()))
}

fn drop_privileges(uid: u32, gid: u32) -> Result<(), nix::Error> {
    use nix::unistd::{Gid, Uid, setgid, setgroups, setuid};
    if Uid::effective().is_root() {
        setgroups(&[Gid::from_raw(gid)])?;
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
fn landlock_restrict(policy: &Policy, require: Option<u8>) -> Result<Level, String> {
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
    let err = |e: landlock::RulesetError| format!("landlock: {e}");
    let ruleset = Ruleset::default().set_compatibility(level).handle_access(AccessFs::from_all(abi)).map_err(err)?;
    let ruleset = if AccessNet::from_all(abi).is_empty() {
        ruleset
    } else {
        ruleset.handle_access(AccessNet::from_all(abi)).map_err(err)?
    };
    let ruleset =
        if Scope::from_all(abi).is_empty() { ruleset } else { ruleset.scope(Scope::from_all(abi)).map_err(err)? };
    let ruleset = ruleset.create().map_err(err)?;

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
    // PostgreSQL's dynamic shared memory segments live in /dev/shm.
    grant(Path::new("/dev/shm"), write);
    let mut ruleset = ruleset.add_rules(rules.into_iter().map(Ok::<_, landlock::RulesetError>)).map_err(err)?;
    if !AccessNet::from_all(abi).is_empty() {
        for port in &policy.connect_tcp {
            ruleset = ruleset.add_rule(landlock::NetPort::new(*port, AccessNet::ConnectTcp)).map_err(err)?;
        }
    }
    let status = ruleset.restrict_self().map_err(err)?;
    let effective = match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => (effective_abi as u8).min(MAX_ABI),
        _ => 0,
    };
    if status.ruleset == RulesetStatus::NotEnforced || effective == 0 {
        return match require {
            Some(want) => Err(format!("Landlock ABI {want} required, the kernel offers none")),
            None => Ok(Level::None),
        };
    }
    if let Some(want) = require
        && effective < want
    {
        return Err(format!("Landlock ABI {want} required, the kernel offers {effective}"));
    }
    Ok(Level::Landlock(effective))
}

/// The newest Landlock ABI whose rules drcheck sets.
pub const MAX_ABI: u8 = 7;
