//! What restoring by delegation to a backup tool's own CLI (pgBackRest, barman-cloud)
//! shares: running the tool contained, judging its failures, and planning which
//! archived WAL files recovery needs.
//!
//! The tool reads backup content, so it runs like every other such process (see
//! [`crate::server::contain`]): as the sandbox user, confined to the run's directory, with a
//! clean environment — plus the one thing it needs that the restored server never
//! gets: a TCP connection to the store's port. Its credentials reach it through its
//! environment, never its command line.

use crate::error::{Blame, RestoreError, Stage};
use crate::server::capture;
use crate::server::contain;
use crate::server::recovery;
use crate::server::sandbox::{Contained, Host, Sandbox, tail};
pub(crate) use crate::source::Integrity;
use drcheck_config::RecoveryTarget;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The most of a tool's standard output read (a catalog, a listing): more is a
/// repository beyond what drcheck holds in memory, and the run stops (drcheck's limit:
/// exit 3).
pub(crate) const STDOUT_LIMIT: usize = 128 << 20;

/// The end of a tool's standard error kept: its reason comes last.
const STDERR_KEEP: usize = 64 << 10;

/// One contained run of a backup tool.
pub(crate) struct Tool<'a> {
    /// The program (a binary, or a script whose interpreter is in `exec`).
    pub program: &'a Path,
    /// More it may execute (an interpreter).
    pub exec: Vec<PathBuf>,
    /// More it may read (a CA file, an interpreter's libraries).
    pub read: Vec<PathBuf>,
    /// The store's TCP port; `None`: no network at all (a repository on this machine).
    pub port: Option<u16>,
    /// A group the tool reads its repository through (drcheck as root drops the tool
    /// to the sandbox user with this one supplementary group; Landlock still lets it
    /// read only the repository).
    pub group: Option<u32>,
    pub env: Vec<(String, String)>,
}

/// The group a tool reads the repository at `dir` through, when drcheck is root and
/// the sandbox user could not read it otherwise: the directory's group (pgBackRest
/// writes its repository group-readable). Never root's group; `None` when the
/// repository is readable to anyone or drcheck is not root (the tool then runs as
/// drcheck's own user, who must be able to read it).
pub(crate) fn reading_group(dir: &Path) -> Result<Option<u32>, RestoreError> {
    use std::os::unix::fs::MetadataExt as _;
    let unsupported = |message| RestoreError::Unsupported { stage: Stage::Fetch, message };
    let m = std::fs::metadata(dir).map_err(|e| unsupported(format!("the repository {}: {e}", dir.display())))?;
    if !m.is_dir() {
        return Err(unsupported(format!("the repository {} is not a directory", dir.display())));
    }
    if !nix::unistd::Uid::effective().is_root() || m.mode() & 0o005 == 0o005 {
        return Ok(None);
    }
    if m.mode() & 0o050 != 0o050 {
        return Err(unsupported(format!(
            "the repository {} (mode {:o}) is readable by its owner only: the contained pgbackrest reads it through \
             its group — chmod -R g+rX it (pgBackRest's default repository mode is 0750)",
            dir.display(),
            m.mode() & 0o777
        )));
    }
    if m.gid() == 0 {
        return Err(unsupported(format!(
            "the repository {} belongs to group root: the contained pgbackrest never reads through root's group — \
             give it a group of its own (chgrp -R pgbackrest …)",
            dir.display()
        )));
    }
    Ok(Some(m.gid()))
}

/// What a tool printed and how it exited.
pub(crate) struct Output {
    pub code: Option<i32>,
    /// The signal that killed it (the OOM killer, an operator): then no `code`.
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    /// The end of what it said (stderr first), bounded.
    pub(crate) fn text(&self) -> String {
        let mut all = self.stderr.clone();
        all.extend_from_slice(&self.stdout);
        tail(&all, 2000)
    }

    pub(crate) fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// How it ended, in words: `exit 4`, `killed by signal 9`.
    pub(crate) fn how(&self) -> String {
        match (self.code, self.signal) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            (None, None) => "no exit status".to_string(),
        }
    }

    /// `text`, followed by what to do when the tool's words name a failure a user can
    /// fix: an untrusted TLS certificate.
    pub(crate) fn text_with_hint(&self) -> String {
        let text = self.text();
        if text.contains("CERTIFICATE_VERIFY_FAILED") || text.contains("certificate verify failed") {
            format!("{text} — TLS: the store's certificate is not trusted: set the storage's ca_file to its CA")
        } else {
            text
        }
    }
}

/// The tool's working directory in the sandbox (logs, locks, HOME), made on first use.
pub(crate) fn work_dir(host: &Host) -> Result<PathBuf, RestoreError> {
    let work = host.root().join("tool");
    if !work.exists() {
        std::fs::create_dir_all(&work).map_err(|e| infra(format!("{}: {e}", work.display())))?;
        host.give_to_server(&work)?;
    }
    Ok(work)
}

/// Runs `tool` with `args`, contained in the run's directory.
pub(crate) async fn run(at: &impl Contained, tool: &Tool<'_>, args: &[String]) -> Result<Output, RestoreError> {
    run_to(at, tool, args, None).await
}

/// [`run`], its standard output (binary: never scrubbed nor decoded) written to
/// `stdout_file` when given, created by drcheck inside the run's directory.
pub(crate) async fn run_to(
    at: &impl Contained,
    tool: &Tool<'_>,
    args: &[String],
    stdout_file: Option<&Path>,
) -> Result<Output, RestoreError> {
    let host = at.host();
    let work = work_dir(&host)?;
    let mut exec = vec![tool.program.to_path_buf()];
    exec.extend(tool.exec.iter().cloned());
    let mut policy = host.policy(&exec);
    policy.connect_tcp.extend(tool.port);
    if let (Some(g), Some(_)) = (tool.group, policy.user) {
        policy.groups.push(g);
    }
    if policy.syscalls != contain::Syscalls::Unfiltered {
        policy.syscalls = contain::Syscalls::Tool;
    }
    policy.read_only.extend(network_read_paths());
    policy.read_only.extend(tool.read.iter().cloned());
    let mut cmd = tokio::process::Command::from(contain::command(tool.program, &policy));
    cmd.current_dir(&work)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &work)
        .env("LC_ALL", "C.UTF-8")
        .envs(tool.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .args(args)
        .stdin(std::process::Stdio::null())
        // A group of its own: past its limit the tool and every process it started end.
        .process_group(0)
        .kill_on_drop(true);
    // `output()` would capture stdout whatever is set: spawn, and wait for the rest.
    let stdout = match stdout_file {
        Some(path) => std::process::Stdio::from(
            crate::transfer::stream::create_no_follow(path).map_err(|e| infra(format!("{}: {e}", path.display())))?,
        ),
        None => std::process::Stdio::piped(),
    };
    let mut child = cmd
        .stdout(stdout)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| infra(format!("cannot run {}: {e} (is it installed?)", tool.program.display())))?;
    // What it prints is the repository's doing: read it bounded (see `capture`).
    let (out_pipe, err_pipe) = (child.stdout.take(), child.stderr.take());
    let read_out = async move {
        match out_pipe {
            Some(p) => capture::at_most(p, STDOUT_LIMIT).await,
            None => Ok(Ok(Vec::new())),
        }
    };
    let read_err = async move {
        match err_pipe {
            Some(p) => capture::last_bytes(p, STDERR_KEEP).await,
            None => Ok(Vec::new()),
        }
    };
    let pid = child.id();
    let all = async { tokio::join!(read_out, read_err, child.wait()) };
    let (stdout, stderr, status) = match host.tool_limit() {
        None => all.await,
        Some(limit) => match tokio::time::timeout(limit.within, all).await {
            Ok(done) => done,
            Err(_) => {
                if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                    let _ =
                        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
                }
                let _ = child.kill().await;
                let name = tool.program.file_name().unwrap_or_default().to_string_lossy().into_owned();
                let what = args.iter().find(|a| !a.starts_with("--")).cloned().unwrap_or_default();
                return Err(infra(format!(
                    "{name} {what} did not finish within {} ({}): ended — is the store reachable (a proxy or \
                     firewall holding the connection open)?",
                    drcheck_config::format_duration(limit.within),
                    limit.whose
                )));
            }
        },
    };
    let running = |e: std::io::Error| infra(format!("running {}: {e}", tool.program.display()));
    let (status, stderr) = (status.map_err(running)?, stderr.map_err(running)?);
    let stdout = stdout.map_err(running)?.map_err(|n| {
        infra(format!(
            "{} printed {n} bytes, more than the {} MiB drcheck reads of a tool's output",
            tool.program.display(),
            STDOUT_LIMIT >> 20
        ))
    })?;
    let out = std::process::Output { status, stdout, stderr };
    use std::os::unix::process::ExitStatusExt;
    // The tool's credentials never travel on in what it printed (a debug log may quote
    // an access key in a header).
    let secret_name = |k: &str| ["KEY", "SECRET", "TOKEN", "PASS", "CIPHER"].iter().any(|w| k.contains(w));
    let secrets: Vec<&str> =
        tool.env.iter().filter(|(k, v)| secret_name(k) && v.len() >= 6).map(|(_, v)| v.as_str()).collect();
    Ok(Output {
        code: out.status.code(),
        signal: out.status.signal(),
        stdout: scrubbed(out.stdout, &secrets),
        stderr: scrubbed(out.stderr, &secrets),
    })
}

/// `bytes` with every occurrence of each of `secrets` replaced by `***`.
fn scrubbed(bytes: Vec<u8>, secrets: &[&str]) -> Vec<u8> {
    if secrets.is_empty() {
        return bytes;
    }
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    for s in secrets {
        text = text.replace(s, "***");
    }
    text.into_bytes()
}

pub(crate) fn infra(m: String) -> RestoreError {
    RestoreError::infra(Stage::Fetch, m)
}

/// A tool's failure, judged where it happened: killed by a signal (the OOM killer) or
/// with the run's file system full, the world's; otherwise what the tool's own exit
/// status says (`blame`, from its documented exit codes).
pub(crate) fn judged(at: &impl Contained, what: &str, out: &Output, blame: impl Fn(&Output) -> Blame) -> RestoreError {
    let message = format!("{what} failed ({}): {}", out.how(), out.text_with_hint());
    let room = at.host().disk_full();
    let who = if out.code.is_none() || room.is_some() { Blame::World } else { blame(out) };
    // A failure to set up the containment is drcheck's (HELPER_FAILED), whatever the tool.
    let who = if out.code == Some(contain::HELPER_FAILED) { Blame::World } else { who };
    let stage = if who == Blame::World { Stage::Fetch } else { Stage::Restore };
    who.error(stage, crate::error::with_reason(message, room))
}

/// Host and TCP port of an `http(s)://[user@]host[:port]/…` endpoint (IPv6 hosts in
/// brackets); the scheme's port when none is given.
pub(crate) fn endpoint_host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let hostport = rest.split('/').next()?.rsplit('@').next()?;
    match hostport.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && hostport.starts_with('[') == h.ends_with(']') && !p.contains(']') => {
            Some((h.to_string(), p.parse().ok()?))
        }
        _ => Some((hostport.to_string(), if scheme == "https" { 443 } else { 80 })),
    }
}

/// The TCP port of an endpoint URL.
pub(crate) fn endpoint_port(url: &str) -> Option<u16> {
    endpoint_host_port(url).map(|(_, port)| port)
}

/// Paths a TLS client reads besides the system libraries: the CA store and the
/// resolver's configuration.
fn network_read_paths() -> Vec<PathBuf> {
    ["/etc/ssl", "/usr/lib/ssl", "/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/gai.conf"]
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect()
}

/// The WAL files (and timeline history files) an archive holds.
#[derive(Debug, Default)]
pub(crate) struct Archived {
    pub segments: BTreeSet<String>,
    pub history: BTreeSet<String>,
}

impl Archived {
    /// Adds an archived file by its name: `<24 hex>` followed by nothing, `.gz`-like
    /// suffixes or pgBackRest's `-<sha1>…`; `<8 hex>.history…`. Backup history files
    /// (`….00000028.backup`) and partial segments are not WAL to replay.
    pub(crate) fn add(&mut self, name: &str) {
        match archived_name(name) {
            Some(n) if n.len() == 24 => {
                self.segments.insert(n);
            }
            Some(n) => {
                self.history.insert(n);
            }
            None => {}
        }
    }
}

/// The WAL file an archived file's name stands for (see [`Archived::add`]): a segment's
/// 24 hex digits (upper case) or `XXXXXXXX.history`; `None` for anything else.
pub(crate) fn archived_name(name: &str) -> Option<String> {
    let hex = |s: &str| s.chars().all(|c| c.is_ascii_hexdigit());
    if name.len() >= 24 && name.is_char_boundary(24) && hex(&name[..24]) {
        let rest = &name[24..];
        (rest.is_empty() || rest.starts_with('-') || [".gz", ".bz2", ".xz", ".zst", ".lz4", ".snappy"].contains(&rest))
            .then(|| name[..24].to_ascii_uppercase())
    } else if name.len() >= 16 && name.is_char_boundary(16) && hex(&name[..8]) && name[8..].starts_with(".history") {
        Some(name[..16].to_string())
    } else {
        None
    }
}

/// Which WAL files recovery gets.
pub(crate) struct Plan {
    pub segments: Vec<String>,
    /// The first file missing after the backup's own: recovery stops before it.
    pub gap: Option<String>,
}

/// The WAL files to fetch: `start..=stop` must all be there (else `Err(missing)`);
/// after `stop`, as far as the archive is continuous up to `last`.
/// A WAL file a backup needs to become consistent that the archive does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct MissingSegment(pub String);

pub(crate) fn plan_segments(start: &str, stop: &str, last: &str, archived: &Archived) -> Result<Plan, MissingSegment> {
    let mut segments = Vec::new();
    let mut seg = start.to_string();
    let last = if last < stop { stop } else { last };
    loop {
        if !archived.segments.contains(&seg)
            && let Some(later) = recovery::on_a_later_timeline(&seg, &archived.segments, |t| {
                archived.history.contains(&format!("{t}.history"))
            })
        {
            // A promotion: the archive goes on on the new timeline (its history archived).
            seg = later;
            continue;
        }
        if !archived.segments.contains(&seg) {
            if seg.as_str() <= stop {
                return Err(MissingSegment(seg));
            }
            return Ok(Plan { segments, gap: Some(seg) });
        }
        segments.push(seg.clone());
        if seg.as_str() >= last {
            return Ok(Plan { segments, gap: None });
        }
        match recovery::next_segment(&seg) {
            Some(n) => seg = n,
            None => return Ok(Plan { segments, gap: None }),
        }
    }
}

/// Fetches a tool's planned WAL — timeline histories first, recovery reads them before
/// any segment — by `fetch(host, name, path)`, four at a time (each is one short-lived
/// tool process), while the sandbox's server replays what has arrived
/// ([`recovery::start_while_fetching`]). Returns the recovered point.
/// The tool's WAL fetches (`archive-get`, `barman-cloud-wal-restore`: a process each)
/// running at once to begin with, and at most — the window widens while recovery waits.
pub(crate) const TOOL_WAL_AT_ONCE: usize = 4;
const TOOL_WAL_AT_MOST: usize = 16;

pub(crate) async fn replay_plan<F, Fut>(
    sandbox: &mut Sandbox,
    bins: &crate::server::pgbin::Binaries,
    target: &RecoveryTarget,
    archived: &Archived,
    plan: &Plan,
    standby: bool,
    fetch: F,
) -> Result<recovery::Recovered, RestoreError>
where
    F: Fn(Host, String, PathBuf) -> Fut,
    Fut: std::future::Future<Output = Result<(), RestoreError>>,
{
    let spool = recovery::spool_dir(sandbox)?;
    let names: Vec<String> = archived.history.iter().chain(plan.segments.iter()).cloned().collect();
    let host = sandbox.host();
    recovery::start_while_fetching(
        sandbox,
        bins,
        recovery::Replay { spool: &spool, target, streamed: true, standby },
        names,
        TOOL_WAL_AT_ONCE,
        TOOL_WAL_AT_MOST,
        |name, part| fetch(host.clone(), name, part),
    )
    .await
}

/// WAL continuity over a catalog (oldest first): every restorable backup's own WAL must
/// be archived, and the archive must run without a gap from the oldest restorable
/// backup's start to its newest file — a gap means no point in time after it can be
/// recovered from the backups before it.
pub(crate) fn continuity(backups: &[crate::store::Backup], archived: &Archived, integrity: &mut Integrity) {
    let usable: Vec<_> =
        backups.iter().filter_map(|b| b.catalog.as_ref().filter(|c| c.status.is_ok()).map(|c| (b, c))).collect();
    integrity.backups += usable.len() as u64;
    let Some(newest) = archived.segments.iter().next_back() else {
        if !usable.is_empty() {
            integrity.problems.push("the WAL archive is empty".into());
        }
        return;
    };
    for (b, c) in &usable {
        if let (Some(start), Some(stop)) = (&c.wal_start, &c.wal_stop)
            && let Err(missing) = plan_segments(start, stop, stop, archived)
        {
            integrity.problems.push(format!(
                "backup {} cannot become consistent: WAL file {missing} (of {start}..{stop}) is missing",
                b.key
            ));
        }
    }
    if let Some(start) = usable.first().and_then(|(_, c)| c.wal_start.clone())
        && let Ok(plan) = plan_segments(&start, &start, newest, archived)
    {
        integrity.wal_files += plan.segments.len() as u64;
        if let Some(gap) = plan.gap {
            integrity
                .problems
                .push(format!("the WAL archive has a gap at {gap} (archived up to {newest}): recovery cannot pass it"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 34: after a promotion the gap named the old timeline's next segment, which
    /// never exists (the archive goes on on the new timeline).
    #[test]
    fn a_promotion_continues_on_the_new_timeline() {
        let mut a = Archived::default();
        for n in 1..=4 {
            a.add(&format!("00000001000000000000000{n}"));
        }
        a.add("000000010000000000000005.partial");
        for n in 5..=8 {
            a.add(&format!("00000002000000000000000{n}"));
        }
        let last = "000000020000000000000008";
        // Without the new timeline's history, the switch is not known: a gap, named.
        let plan = plan_segments("000000010000000000000001", "000000010000000000000002", last, &a).unwrap();
        assert_eq!(plan.gap.as_deref(), Some("000000010000000000000005"));
        a.add("00000002.history");
        let plan = plan_segments("000000010000000000000001", "000000010000000000000002", last, &a).unwrap();
        assert_eq!(plan.gap, None);
        assert_eq!(plan.segments.len(), 8, "{:?}", plan.segments);
        assert_eq!(plan.segments[4], "000000020000000000000005");
        // A file missing after the switch is named on the timeline it is missing from.
        a.segments.remove("000000020000000000000007");
        let plan = plan_segments("000000010000000000000001", "000000010000000000000002", last, &a).unwrap();
        assert_eq!(plan.gap.as_deref(), Some("000000020000000000000007"));
    }

    #[test]
    fn archive_names_of_both_tools_give_segments() {
        let mut a = Archived::default();
        for n in [
            "000000010000000000000003-aa.gz",
            "000000010000000000000004.gz",
            "000000010000000000000005",
            "000000010000000000000003.00000028.backup",
            "000000010000000000000003.00000028.backup.gz",
            "000000010000000000000006.partial",
            "00000002.history.gz",
            "00000002.history",
            "backup.info",
        ] {
            a.add(n);
        }
        assert_eq!(a.segments.len(), 3, "{a:?}");
        assert_eq!(a.history.iter().collect::<Vec<_>>(), ["00000002.history"]);
    }

    #[test]
    fn missing_wal_inside_the_backup_fails_after_it_stops_recovery() {
        let mut a = Archived::default();
        for n in ["000000010000000000000003", "000000010000000000000004", "000000010000000000000006"] {
            a.add(n);
        }
        let p = plan_segments("000000010000000000000003", "000000010000000000000004", "000000010000000000000006", &a)
            .unwrap();
        assert_eq!(p.segments.len(), 2);
        assert_eq!(p.gap.as_deref(), Some("000000010000000000000005"));
        let err = plan_segments("000000010000000000000003", "000000010000000000000005", "000000010000000000000006", &a);
        assert_eq!(err.err().map(|m| m.0).as_deref(), Some("000000010000000000000005"));
    }

    #[test]
    fn continuity_names_the_missing_file_and_the_gap() {
        use crate::store::{Backup, CatalogEntry};
        let backup = |key: &str, start: &str, stop: &str| Backup {
            key: key.into(),
            size: 1,
            last_modified: std::time::SystemTime::UNIX_EPOCH,
            parts: vec![],
            sha256_key: None,
            catalog: Some(CatalogEntry {
                tool: "pgbackrest",
                kind: "full".into(),
                started: std::time::SystemTime::UNIX_EPOCH,
                status: crate::store::CatalogStatus::Ok,
                wal_start: Some(start.into()),
                wal_stop: Some(stop.into()),
                tablespaces: vec![],
            }),
        };
        let mut a = Archived::default();
        for n in ["000000010000000000000002", "000000010000000000000003", "000000010000000000000005"] {
            a.add(n);
        }
        let backups = [
            backup("F", "000000010000000000000002", "000000010000000000000002"),
            backup("I", "000000010000000000000004", "000000010000000000000004"),
        ];
        let mut i = Integrity::default();
        continuity(&backups, &a, &mut i);
        assert_eq!(i.problems.len(), 2, "{:?}", i.problems);
        assert!(i.problems[0].contains("backup I") && i.problems[0].contains("000000010000000000000004"));
        assert!(i.problems[1].contains("gap at 000000010000000000000004"));
        a.add("000000010000000000000004");
        let mut i = Integrity::default();
        continuity(&backups, &a, &mut i);
        assert!(i.problems.is_empty(), "{:?}", i.problems);
        assert_eq!((i.backups, i.wal_files), (2, 4));
    }

    #[test]
    fn endpoint_ports() {
        assert_eq!(endpoint_port("https://127.0.0.1:9443"), Some(9443));
        assert_eq!(endpoint_port("http://minio.local/bucket"), Some(80));
        assert_eq!(endpoint_port("https://s3.amazonaws.com"), Some(443));
        assert_eq!(endpoint_port("http://user:pw@h:9000/"), Some(9000));
        assert_eq!(endpoint_host_port("https://[::1]:9443/x"), Some(("[::1]".into(), 9443)));
        assert_eq!(endpoint_host_port("https://[::1]"), Some(("[::1]".into(), 443)));
        assert_eq!(endpoint_host_port("https://127.0.0.1:x"), None);
    }
}
