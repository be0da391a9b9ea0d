//! The archive's reach: the newest moment archived WAL can be replayed to — the last
//! commit (or abort) record in the newest archived segment that holds one, read with
//! `pg_waldump` (contained like every tool that reads backup bytes). Never a file's
//! modification time: PostgreSQL refuses a target past the last replayable record, and a
//! moment drawn in that gap would fail a good archive.
//!
//! Each source says which segments its archive holds and fetches one by name
//! (objects under a `wal_prefix`, a pgBackRest stanza, a barman-cloud catalog: each a
//! `crate::source::Archive`);
//! [`newest`] tries them newest first.

use crate::error::{RestoreError, Stage};
use crate::server::capture;
use crate::server::contain;
use crate::server::sandbox::{Sandbox, tail};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

/// How far an archive replays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reach {
    /// The newest commit (or abort) record's time.
    pub at: SystemTime,
    /// The segment it is in.
    pub segment: String,
}

/// Newest segments read before giving up (a quiet primary switches segments on a
/// timer: the newest few may hold no transaction at all).
const SEGMENTS_TRIED: usize = 4;

/// The newest transaction end among `segments` (any order): each, newest first, is
/// fetched by `fetch(name, path)` into the sandbox and read with `pg_waldump`, until one
/// holds a commit or abort. `None` when none of the newest [`SEGMENTS_TRIED`] does.
pub(crate) async fn newest<F, Fut>(
    sandbox: &Sandbox,
    bins: &crate::server::pgbin::Binaries,
    segments: impl IntoIterator<Item = String>,
    fetch: F,
) -> Result<Option<Reach>, RestoreError>
where
    F: Fn(String, PathBuf) -> Fut,
    Fut: Future<Output = Result<(), RestoreError>>,
{
    let mut names: Vec<String> = segments.into_iter().filter(|s| is_segment(s)).collect();
    names.sort();
    names.dedup();
    let dir = sandbox.root().join("reach");
    std::fs::create_dir_all(&dir).map_err(|e| RestoreError::infra(Stage::Select, format!("{}: {e}", dir.display())))?;
    // Backup tools write into it as the sandbox user.
    sandbox.give_to_server(&dir)?;
    for name in names.iter().rev().take(SEGMENTS_TRIED) {
        let path = dir.join(name);
        fetch(name.clone(), path.clone()).await?;
        let found = newest_in_file(sandbox, bins, &path).await;
        let _ = std::fs::remove_file(&path);
        if let Some(at) = found? {
            return Ok(Some(Reach { at, segment: name.clone() }));
        }
    }
    Ok(None)
}

pub(crate) fn is_segment(name: &str) -> bool {
    name.len() == 24 && name.chars().all(|c| c.is_ascii_hexdigit())
}

/// `XLOG_PAGE_MAGIC` of each major (the first two bytes of every WAL page): which
/// `pg_waldump` reads a segment.
fn major_of_wal(head: &[u8]) -> Option<u32> {
    let magic = u16::from_le_bytes([*head.first()?, *head.get(1)?]);
    match magic {
        0xD101 => Some(12),
        0xD106 => Some(13),
        0xD10D => Some(14),
        0xD110 => Some(15),
        0xD113 => Some(16),
        0xD116 => Some(17),
        0xD118 => Some(18),
        _ => None,
    }
}

/// The newest transaction end in one WAL file, by the `pg_waldump` of its major, run
/// contained (the file is the backup's bytes) with `TZ=UTC`.
async fn newest_in_file(
    sandbox: &Sandbox,
    bins: &crate::server::pgbin::Binaries,
    file: &Path,
) -> Result<Option<SystemTime>, RestoreError> {
    let infra = |m: String| RestoreError::infra(Stage::Select, m);
    let mut head = [0u8; 2];
    let _ = std::io::Read::read_exact(&mut std::fs::File::open(file).map_err(|e| infra(e.to_string()))?, &mut head);
    let major = major_of_wal(&head);
    let Some(major) = major else {
        return Err(RestoreError::bad(
            Stage::Select,
            format!("archived WAL {}: not a WAL segment of a known PostgreSQL version", file.display()),
        ));
    };
    let bin = bins.for_major(Some(major), true).map_err(|e| infra(e.to_string()))?;
    let tool = bin.tool("pg_waldump");
    if !tool.is_file() {
        return Err(infra(format!("{} not found: the archive's newest commit cannot be read", tool.display())));
    }
    let mut policy = sandbox.policy(std::slice::from_ref(&bin.dir));
    policy.read_only.extend(contain::system_read_paths(&bin.dir));
    let name = file.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let dir = file.parent().unwrap_or(Path::new("/"));
    let mut child = tokio::process::Command::from(contain::command(&tool, &policy))
        .arg(format!("--path={}", dir.display()))
        .arg("--rmgr=Transaction")
        .arg(&name)
        .env_clear()
        .env("TZ", "UTC")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| infra(format!("cannot run {}: {e}", tool.display())))?;
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    // A segment is the backup's bytes: one full of commits prints hundreds of megabytes.
    // Read line by line, keeping only the newest time seen.
    let mut newest: Option<SystemTime> = None;
    let read = async {
        let out = capture::each_line(stdout.expect("piped"), LINE_KEPT, |line| {
            newest = newest.max(transaction_end(&String::from_utf8_lossy(line)));
        });
        let err = capture::last_bytes(stderr.expect("piped"), 2000);
        let (out, err, status) = tokio::join!(out, err, child.wait());
        Ok::<_, std::io::Error>((out?, err?, status?))
    };
    let (printed, err, status) = tokio::time::timeout(Duration::from_secs(120), read)
        .await
        .map_err(|_| infra(format!("pg_waldump of {name} took over 2 minutes")))?
        .map_err(|e| infra(format!("running {}: {e}", tool.display())))?;
    // pg_waldump exits 1 at the end of the written WAL ("invalid record length"): what it
    // printed before counts. Nothing printed and a failure is a failure.
    if newest.is_none() && !status.success() && printed == 0 {
        let err = tail(&err, 2000);
        let benign = err.contains("invalid record length") || err.contains("could not find a valid record");
        if !benign {
            return Err(RestoreError::bad(Stage::Select, format!("pg_waldump cannot read archived WAL {name}: {err}")));
        }
    }
    Ok(newest)
}

/// The most of one `pg_waldump` line read: a commit's time comes right after `desc:`,
/// its list of subtransactions, relations and invalidations (any length) after it.
const LINE_KEPT: usize = 4096;

/// The time of a `COMMIT`/`ABORT` line of `pg_waldump --rmgr=Transaction`
/// (`… desc: COMMIT 2026-12-02 02:10:00.123456 UTC; …`), if it is one.
pub(crate) fn transaction_end(line: &str) -> Option<SystemTime> {
    let desc = line.split("desc: ").nth(1)?;
    let rest = desc.strip_prefix("COMMIT ").or_else(|| desc.strip_prefix("ABORT "))?;
    let stamp = rest.split(';').next()?.trim();
    let (when, zone) = stamp.rsplit_once(' ')?;
    if zone != "UTC" && zone != "GMT" {
        return None;
    }
    let t = chrono::NaiveDateTime::parse_from_str(when, "%Y-%m-%d %H:%M:%S%.f").ok()?.and_utc();
    let micros = u64::try_from(t.timestamp_micros()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_micros(micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_commit_or_abort_is_read_from_waldump_output() {
        let out = "rmgr: Transaction len (rec/tot):     34/    34, tx:        735, lsn: 0/03000100, prev 0/030000C8, desc: COMMIT 2026-12-02 02:10:00.123456 UTC\n\
                   rmgr: Transaction len (rec/tot):     34/    34, tx:        736, lsn: 0/03000200, prev 0/03000100, desc: ABORT 2026-12-02 02:10:05.000001 UTC\n\
                   rmgr: Transaction len (rec/tot):    530/   530, tx:        737, lsn: 0/03000300, prev 0/03000200, desc: COMMIT 2026-12-02 02:10:03.5 UTC; inval msgs: catcache 7\n\
                   rmgr: Transaction len (rec/tot):     34/    34, tx:        738, lsn: 0/03000400, prev 0/03000300, desc: COMMIT 2026-12-02 04:10:03.5 CEST\n";
        let t = out.lines().filter_map(transaction_end).max().unwrap();
        assert_eq!(humantime::format_rfc3339_micros(t).to_string(), "2026-12-02T02:10:05.000001Z");
        assert_eq!(transaction_end("rmgr: XLOG desc: SWITCH"), None);
        assert_eq!(transaction_end(""), None);
    }

    #[test]
    fn wal_page_magic_names_the_major() {
        assert_eq!(major_of_wal(&[0x10, 0xD1]), Some(15));
        assert_eq!(major_of_wal(&[0x13, 0xD1]), Some(16));
        assert_eq!(major_of_wal(&[0, 0]), None);
        assert_eq!(major_of_wal(&[]), None);
    }
}
