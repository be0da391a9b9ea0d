//! Where sandboxes live on disk, and reaping what crashed runs left behind.
//!
//! `scratch_dir` may be shared (the default is the system temp directory), so nothing
//! in it is trusted. drcheck keeps its sandboxes in a directory of its own,
//! `scratch_dir/drcheck-<uid>`: created by drcheck, owned by its uid, mode 0711 (the
//! sandbox user may pass through to its own sandbox, nobody else may list or create
//! anything there). Beside each sandbox directory lies its owner record
//! (`sandbox-<run>.owner`, 0600): the drcheck process (pid and start time, so a reused
//! pid or drcheck being PID 1 in a container is told apart) and the sandbox's socket
//! directory. Files *inside* a sandbox belong to the sandbox user and are never read
//! by the reaper: a restored backup could have written them.
//!
//! The reaper stops only processes whose working directory lies inside the leftover
//! sandbox (a sandbox server and its tools chdir there), never pid ≤ 1 or itself, and
//! removes only paths inside the private directory plus socket directories named
//! `/tmp/drcheck-*` that hold nothing but a server's socket and lock files.

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, Uid};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Sandbox directories inside the private directory start with this.
pub(crate) const SANDBOX_PREFIX: &str = "sandbox-";
const OWNER_SUFFIX: &str = ".owner";
const SOCKET_PREFIX: &str = "/tmp/drcheck-";

/// `scratch_dir/drcheck-<uid>`, drcheck's private directory in the scratch directory.
/// Why one of drcheck's own directories or files cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// A step on `path` failed (`doing`: "create", "write", "restrict", "inspect").
    #[error("cannot {doing} {}: {source}", path.display())]
    Io {
        doing: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A link, another user's, or writable by others.
    #[error(
        "{} is not drcheck's own private directory (a link, another user's, or writable by others): \
         refusing to use it; remove it or choose another sandbox.scratch_dir",
        path.display()
    )]
    NotPrivate { path: PathBuf },
}

impl DirError {
    fn io(doing: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> DirError {
        let path = path.to_path_buf();
        move |source| DirError::Io { doing, path, source }
    }
}

pub(crate) fn private_dir(scratch_dir: &Path) -> PathBuf {
    scratch_dir.join(format!("drcheck-{}", Uid::effective().as_raw()))
}

/// Creates (or checks) the private directory: a real directory owned by drcheck's
/// uid that no one else may write to. When someone else made `drcheck-<uid>` first (a
/// local user squatting the name in a shared scratch directory), drcheck neither uses
/// nor touches it, and is not stopped by it: it makes a directory of its own with an
/// unguessable name (`drcheck-<uid>.<random>`, kept for the rest of the process), and
/// says so.
pub(crate) fn ensure_private_dir(scratch_dir: &Path) -> Result<PathBuf, DirError> {
    let canonical = private_dir(scratch_dir);
    match ensure_own_dir(scratch_dir, &canonical, 0o711) {
        Ok(dir) => Ok(dir),
        Err(why) if std::fs::symlink_metadata(&canonical).is_ok() => {
            let mut fallbacks = FALLBACK.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(dir) = fallbacks.get(scratch_dir)
                && check_private(dir).is_ok()
            {
                return Ok(dir.clone());
            }
            use rand::Rng;
            let name = format!("drcheck-{}.{:016x}", Uid::effective().as_raw(), rand::rng().random::<u64>());
            let dir = scratch_dir.join(name);
            if let Err(e) = std::fs::DirBuilder::new().mode(0o711).create(&dir) {
                tracing::warn!(squatted = %canonical.display(), "{why}");
                return Err(DirError::io("create", &dir)(e));
            }
            let dir = ensure_own_dir(scratch_dir, &dir, 0o711)?;
            tracing::warn!(squatted = %canonical.display(), using = %dir.display(), "{why}");
            fallbacks.insert(scratch_dir.to_path_buf(), dir.clone());
            Ok(dir)
        }
        Err(why) => Err(why),
    }
}

/// The directory this process uses instead of a squatted `drcheck-<uid>`, per scratch dir.
static FALLBACK: std::sync::Mutex<std::collections::BTreeMap<PathBuf, PathBuf>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// drcheck's own directories in `scratch_dir` that may hold sandboxes: `drcheck-<uid>`
/// and the `drcheck-<uid>.<random>` ones made when that name was squatted.
fn own_private_dirs(scratch_dir: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![private_dir(scratch_dir)];
    let fallback = format!("drcheck-{}.", Uid::effective().as_raw());
    if let Ok(entries) = std::fs::read_dir(scratch_dir) {
        dirs.extend(
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with(&fallback))
                .map(|e| e.path()),
        );
    }
    dirs.retain(|d| check_private(d).is_ok());
    dirs
}

/// `scratch_dir/drcheck-<uid>-cache` (0700): what drcheck keeps between runs (the
/// pristine catalog fingerprints), apart from the sandboxes.
pub fn ensure_cache_dir(scratch_dir: &Path) -> Result<PathBuf, DirError> {
    let dir = scratch_dir.join(format!("drcheck-{}-cache", Uid::effective().as_raw()));
    ensure_own_dir(scratch_dir, &dir, 0o700)
}

/// `dir` (0700, made if missing, its parent must exist) as the cache directory instead:
/// `DRCHECK_CACHE_DIR`. Held to the same rule — drcheck's own, private, not a link.
pub fn ensure_cache_dir_at(dir: &Path) -> Result<PathBuf, DirError> {
    let parent = dir.parent().unwrap_or(Path::new("/"));
    ensure_own_dir(parent, dir, 0o700)
}

/// `state_dir/drcheck-follow-<uid>` (0711: the sandbox user passes through to its own
/// follower directory): where followers keep their copies between runs.
pub fn ensure_follow_dir(state_dir: &Path) -> Result<PathBuf, DirError> {
    let dir = state_dir.join(format!("drcheck-follow-{}", Uid::effective().as_raw()));
    ensure_own_dir(state_dir, &dir, 0o711)
}

fn ensure_own_dir(scratch_dir: &Path, dir: &Path, mode: u32) -> Result<PathBuf, DirError> {
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => {
            std::fs::create_dir_all(scratch_dir).map_err(DirError::io("create sandbox.scratch_dir", scratch_dir))?;
            std::fs::DirBuilder::new().mode(mode).create(dir).map_err(DirError::io("create", dir))?;
        }
    }
    check_private(dir)?;
    // The mode was masked by the umask on creation; set it exactly.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).map_err(DirError::io("restrict", dir))?;
    Ok(dir.to_path_buf())
}

pub(crate) fn check_private(dir: &Path) -> Result<(), DirError> {
    let m = std::fs::symlink_metadata(dir).map_err(DirError::io("inspect", dir))?;
    if !m.is_dir() || m.uid() != Uid::effective().as_raw() || m.mode() & 0o022 != 0 {
        return Err(DirError::NotPrivate { path: dir.to_path_buf() });
    }
    Ok(())
}

/// Who made a sandbox: a drcheck process, identified by pid and start time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub pid: i32,
    pub start: u64,
    pub socket_dir: Option<PathBuf>,
}

impl Owner {
    pub fn current(socket_dir: Option<PathBuf>) -> Owner {
        let pid = std::process::id() as i32;
        Owner { pid, start: start_time(pid).unwrap_or(0), socket_dir }
    }

    pub fn alive(&self) -> bool {
        process_running(self.pid, self.start)
    }

    fn parse(text: &str) -> Option<Owner> {
        let mut lines = text.lines();
        let mut first = lines.next()?.split_whitespace();
        let pid = first.next()?.parse().ok()?;
        let start = first.next()?.parse().ok()?;
        let socket_dir = lines.next().filter(|l| !l.is_empty()).map(PathBuf::from);
        Some(Owner { pid, start, socket_dir })
    }
}

/// The owner record of the sandbox directory `root`.
pub(crate) fn owner_file(root: &Path) -> PathBuf {
    let mut name = root.file_name().unwrap_or_default().to_os_string();
    name.push(OWNER_SUFFIX);
    root.with_file_name(name)
}

/// Where a run keeps what must stay out of the restore server's reach (gpg's home
/// with the decryption key): beside the sandbox's root, never inside it. Short (gpg's
/// agent socket lives in it, and a unix socket's path has at most 107 bytes), named
/// after the root so that teardown and the reaper find it.
pub(crate) fn keys_dir(root: &Path) -> PathBuf {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(root.file_name().unwrap_or_default().as_encoded_bytes());
    root.with_file_name(format!("k-{}", &hex::encode(digest)[..12]))
}

/// Writes `root`'s owner record (replacing it atomically).
pub(crate) fn write_owner(root: &Path, owner: &Owner) -> Result<(), DirError> {
    let path = owner_file(root);
    let tmp = path.with_extension("owner.tmp");
    let _ = std::fs::remove_file(&tmp);
    let text = format!(
        "{} {}\n{}\n",
        owner.pid,
        owner.start,
        owner.socket_dir.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
    );
    create_private(&tmp, text.as_bytes())?;
    std::fs::rename(&tmp, &path).map_err(DirError::io("write", &path))
}

/// Creates `path` with mode 0600 and `content`. It must not exist: a link planted there
/// is never followed (`O_NOFOLLOW | O_EXCL`).
pub(crate) fn create_private(path: &Path, content: &[u8]) -> Result<(), DirError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(DirError::io("create", path))?;
    f.write_all(content).map_err(DirError::io("write", path))
}

/// Whether process `pid`, started at `start` (clock ticks after boot), still runs. A
/// process of another user (the signal refused) counts as running when its start time
/// cannot be read; a pid reused by a later process does not; a zombie (dead, its exit
/// not yet collected by its parent — a SIGKILLed one-shot under a shell that has not
/// waited) does not either: it holds nothing.
pub fn process_running(pid: i32, start: u64) -> bool {
    if pid <= 0 {
        return false;
    }
    match kill(Pid::from_raw(pid), None) {
        Ok(()) | Err(nix::errno::Errno::EPERM) => {
            !matches!(state(pid), Some('Z' | 'X')) && start_time(pid).is_none_or(|s| s == start)
        }
        Err(_) => false,
    }
}

/// A process's state letter (`R`, `S`, `Z`, …), field 3 of `/proc/PID/stat`.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// This machine as seen from this process: the kernel's boot id and the pid namespace,
/// so a pid recorded with it names the same process only to a reader with the same pair
/// (not to a container beside it, not after a reboot). `None` where /proc does not say.
pub fn machine_id() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let ns = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let ns = ns.to_string_lossy();
    let inode = ns.strip_prefix("pid:[")?.strip_suffix(']')?;
    Some(format!("{}-{inode}", boot.trim().get(..8)?))
}

/// A process's start time (clock ticks after boot), field 22 of `/proc/PID/stat`.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: skip past its end.
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Removes sandboxes whose drcheck process is gone: stops the processes working inside
/// them and deletes their directories. Returns the directories removed.
pub(crate) fn reap(scratch_dir: &Path) -> Vec<PathBuf> {
    own_private_dirs(scratch_dir).iter().flat_map(|dir| reap_in(dir)).collect()
}

fn reap_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut reaped = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(OWNER_SUFFIX) else { continue };
        if !stem.starts_with(SANDBOX_PREFIX) || stem.contains('/') {
            continue;
        }
        let record = entry.path();
        let owner = std::fs::read_to_string(&record).ok().and_then(|t| Owner::parse(&t));
        if owner.as_ref().is_some_and(Owner::alive) {
            continue;
        }
        let root = dir.join(stem);
        stop_processes_in(&root);
        // Removing it also ends the gpg-agent that watched it.
        let _ = std::fs::remove_dir_all(keys_dir(&root));
        if let Some(sock) = owner.and_then(|o| o.socket_dir) {
            let text = sock.to_string_lossy();
            let plain = text.strip_prefix(SOCKET_PREFIX).is_some_and(|rest| !rest.is_empty() && !rest.contains('/'));
            if plain && std::fs::symlink_metadata(&sock).is_ok_and(|m| m.is_dir()) && only_sockets(&sock) {
                let _ = std::fs::remove_dir_all(&sock);
            }
        }
        let gone = match std::fs::symlink_metadata(&root) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&root).is_ok(),
            Ok(_) => std::fs::remove_file(&root).is_ok(),
            Err(_) => true,
        };
        if gone {
            let _ = std::fs::remove_file(&record);
            reaped.push(root);
        }
    }
    reaped
}

/// Whether `dir` holds nothing but a PostgreSQL server's socket and lock files.
fn only_sockets(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.filter_map(Result::ok).all(|e| e.file_name().to_string_lossy().starts_with(".s.PGSQL."))
    })
}

/// SIGKILLs every process (other than pid ≤ 1 and this one) whose working directory is
/// `root` or beneath it: the leftover sandbox's server, its backends, its tools.
pub(crate) fn stop_processes_in(root: &Path) {
    let Ok(procs) = std::fs::read_dir("/proc") else { return };
    let me = std::process::id() as i32;
    for p in procs.filter_map(Result::ok) {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if pid <= 1 || pid == me {
            continue;
        }
        if let Ok(cwd) = std::fs::read_link(p.path().join("cwd"))
            && cwd.starts_with(root)
        {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_records_round_trip_and_tell_a_reused_pid_apart() {
        let me = Owner::current(Some(PathBuf::from("/tmp/drcheck-abc")));
        let text = format!("{} {}\n/tmp/drcheck-abc\n", me.pid, me.start);
        assert_eq!(Owner::parse(&text), Some(me.clone()));
        assert!(me.alive());
        assert!(!Owner { start: me.start + 1, ..me.clone() }.alive(), "same pid, other start time");
        assert!(!Owner { pid: 0, ..me }.alive());
        assert_eq!(Owner::parse("1\n"), None);
    }
}

#[cfg(test)]
mod cache_dir_tests {
    use super::*;

    /// `DRCHECK_CACHE_DIR` is held to the rule of the default cache directory.
    #[test]
    fn a_named_cache_directory_is_made_private_and_one_others_may_write_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("cache");
        assert_eq!(ensure_cache_dir_at(&dir).unwrap(), dir);
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        // Made by someone else's hand: writable by others, or a link to one.
        let open = base.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(ensure_cache_dir_at(&open), Err(DirError::NotPrivate { .. })));
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(ensure_cache_dir_at(&link).is_err());
    }
}

#[cfg(test)]
mod zombie_tests {
    use super::*;

    /// Issue 33: a dead child not yet waited for is a zombie; it holds no lease.
    #[test]
    fn a_zombie_is_not_running() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let start = start_time(pid).unwrap();
        // Not waited for: once it exits it stays a zombie until reaped.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while state(pid) != Some('Z') {
            assert!(std::time::Instant::now() < deadline, "the child never became a zombie");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(kill(Pid::from_raw(pid), None).is_ok(), "a zombie still takes signal 0");
        assert!(!process_running(pid, start));
        child.wait().unwrap();
        let me = std::process::id() as i32;
        assert!(process_running(me, start_time(me).unwrap()));
    }
}
