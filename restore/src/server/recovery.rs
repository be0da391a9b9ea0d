//! Recovery, shared by every physical restore method (base backups from objects,
//! pgBackRest, barman-cloud): the data directory is in place in the sandbox; this sets
//! the backup's own configuration aside, writes drcheck's (no command, library or file
//! outside the run; archiving off), serves archived WAL from a spool drcheck filled
//! (the restored server never reaches the store), sets the recovery target, starts the
//! server, waits until it is consistent and promoted, reads the recovered point and
//! switches the server to the run's password.

use crate::error::{RestoreError, Stage};
use crate::server::pgbin;
use crate::server::sandbox::{Promote, Sandbox};
use drcheck_config::RecoveryTarget;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Recovery can take long; the pipeline's RTO deadline is what bounds it.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Archived WAL under a prefix of the store, to replay after a base backup to `target`.
#[derive(Debug, Clone)]
pub struct WalReplay {
    pub prefix: String,
    pub target: RecoveryTarget,
    /// Start a hot standby that goes on replaying what arrives in its spool (a
    /// follower's seed) instead of promoting at the target.
    pub standby: bool,
}

/// Archived WAL to replay: the spool drcheck fills, and how far to go.
pub(crate) struct Replay<'a> {
    pub spool: &'a Path,
    pub target: &'a RecoveryTarget,
    /// The spool is still being filled ([`start_while_fetching`]): a file it lists in
    /// [`PLANNED`] and does not hold yet is waited for, not taken for the archive's end.
    pub streamed: bool,
    /// A hot standby (a follower): never promoted, no target, no password of ours (its
    /// roles are the primary's and it cannot be written): drcheck's own OS user gets in
    /// by peer authentication, which only the kernel can vouch for.
    pub standby: bool,
}

/// The prefix of the mark of a file being fetched into the spool (`.planned-NAME`, one
/// each): `restore_command` tests for it with the shell's own `[`, no process of its own.
const PLANNED: &str = ".planned-";
/// Written into the spool when a fetch failed: nothing more is waited for.
const FAILED: &str = ".failed";
/// The prefix of the mark recovery leaves for a file it asked for before it arrived.
const WAITED: &str = ".waited-";
/// The prefix of the mark recovery leaves for every file it asks for: how far replay is.
const ASKED: &str = ".asked-";

/// Starts the restored server while `names` — archived WAL in replay order, timeline
/// histories first — are fetched into `spool` by `fetch(name, temporary path)`,
/// `at_once` at a time: recovery replays each file as soon as it is whole (renamed into
/// place), so fetching and replay overlap instead of one waiting for the other. Each time
/// recovery asked for a file before it arrived, the window doubles, up to `at_most`: the
/// fetch runs as far ahead as the store's latency needs, measured, not guessed. A failed
/// fetch fails the restore even when recovery then ended (it would have taken the missing
/// file for the archive's end). Past a time or LSN target the server no longer asks:
/// the files after it are not fetched.
pub(crate) async fn start_while_fetching<F, Fut>(
    sandbox: &mut Sandbox,
    bins: &crate::server::pgbin::Binaries,
    replay: Replay<'_>,
    names: Vec<String>,
    at_once: usize,
    at_most: usize,
    fetch: F,
) -> Result<Recovered, RestoreError>
where
    F: Fn(String, PathBuf) -> Fut,
    Fut: std::future::Future<Output = Result<(), RestoreError>>,
{
    let Replay { spool, target, standby, .. } = replay;
    let log_path = sandbox.root().join("postgres.log");
    for name in &names {
        write_new(&spool.join(format!("{PLANNED}{name}")), "")?;
    }
    let host = sandbox.host();
    let first = at_once.max(1).min(names.len());
    let first_files: Vec<String> = names[..first].to_vec();
    let pace = std::sync::Mutex::new(Pace { files: names.len(), waited: 0, window: at_once.max(1), usage: None });
    let fetching = async {
        let one = |name: String| {
            let part = spool.join(format!(".part-{name}"));
            let fetched = fetch(name.clone(), part.clone());
            let host = &host;
            async move {
                fetched.await?;
                host.give_to_server(&part)?;
                std::fs::rename(&part, spool.join(&name))
                    .map_err(|e| RestoreError::infra(Stage::Fetch, format!("spooling {name}: {e}")))?;
                Ok::<String, RestoreError>(name)
            }
        };
        let waited = |name: &str| spool.join(format!("{WAITED}{name}")).exists();
        // Replay to a point stops somewhere in the archive: fetch only a reach past where
        // it is. To the latest point (or consistency) every file is needed: as fast as the
        // window allows.
        let to_a_point = !standby && !matches!(target, RecoveryTarget::Latest | RecoveryTarget::Immediate);
        let asked = |name: &str| spool.join(format!("{ASKED}{name}")).exists();
        let done = fetch_ahead(names, first, to_a_point, at_most, &pace, waited, asked, one).await;
        if done.is_err() {
            let _ = write_new(&spool.join(FAILED), "");
        }
        done
    };
    // The server starts once the first files are whole in the spool, and nothing more is
    // fetched until recovery asks for one: its start-up sync of the data directory (an
    // fsync per file) would otherwise wait on every journal commit the fetch's writes
    // and syncs bring (0.5–0.8 s against 0.1 s here, for a 1 GB pgBackRest restore).
    let first_there = async {
        let whole = |name: &String| spool.join(name).exists();
        while !first_files.iter().all(whole) && !spool.join(FAILED).exists() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    };
    let starting =
        start_restored_after(sandbox, bins, Some(Replay { spool, target, streamed: true, standby }), first_there);
    tokio::pin!(fetching, starting);
    let recovered: Result<Recovered, RestoreError> = tokio::select! {
        biased;
        fetched = &mut fetching => {
            let started = starting.await;
            // A failed fetch is the cause of whatever recovery did next.
            fetched?;
            started
        }
        started = &mut starting => {
            let recovered = started?;
            match target {
                // A standby is consistent before the planned files are all there.
                _ if standby => {
                    fetching.await?;
                    Ok(recovered)
                }
                // Reached (the server refuses to promote short of it): what comes after
                // is not needed.
                RecoveryTarget::Time(_) | RecoveryTarget::Lsn(_) => Ok(recovered),
                // Recovery ended where the spool ended: every fetch must have succeeded.
                _ => {
                    fetching.await?;
                    Ok(recovered)
                }
            }
        }
    };
    let mut pace = *pace.lock().unwrap_or_else(|e| e.into_inner());
    let log = std::fs::read(&log_path).unwrap_or_default();
    pace.usage = RedoUsage::of_log(&String::from_utf8_lossy(&log));
    recovered.map(|r| Recovered { pace: Some(pace), ..r })
}

/// Fetches `names` in order through `one`, `pace.window` at once. Before recovery has
/// `asked` for any file, only the `first` ones (the server's start-up sync runs then, and
/// the fetch's writes would slow it); then, when `bounded` (a replay to a point), never
/// more than `at_most` files past the newest one recovery asked for — a bounded reach
/// into the spool: a replay to a point in time fetches (and decompresses, on the same
/// cores as replay) at most `at_most` files past it, not the whole archive. The reach is
/// the window's ceiling, not the window: replay takes a file far faster than one fetch
/// brings it (35 ms against 150–300 ms for a tool's `archive-get` here), so a reach only
/// as wide as the window had recovery wait on every few files. Each time a fetched file
/// had been `waited` for (recovery asked before it arrived), the window doubles, up to
/// `at_most`.
#[allow(clippy::too_many_arguments)]
async fn fetch_ahead<F, Fut>(
    names: Vec<String>,
    first: usize,
    bounded: bool,
    at_most: usize,
    pace: &std::sync::Mutex<Pace>,
    waited: impl Fn(&str) -> bool,
    asked: impl Fn(&str) -> bool,
    one: F,
) -> Result<(), RestoreError>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<String, RestoreError>>,
{
    use futures::stream::{FuturesOrdered, StreamExt};
    const LOOK_AGAIN: std::time::Duration = std::time::Duration::from_millis(20);
    let mut in_flight = FuturesOrdered::new();
    // Files started, and one past the newest recovery asked for.
    let (mut started, mut reached) = (0usize, 0usize);
    loop {
        let mut p = *pace.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(newest) = (reached..started).rev().find(|&i| asked(&names[i])) {
            reached = newest + 1;
        }
        // At most a window at once; before recovery asks for anything, the first files
        // only; then, to a point, at most `at_most` past what recovery asked for.
        let reach = match (reached, bounded) {
            (0, _) => first,
            (_, true) => at_most.max(p.window),
            (_, false) => usize::MAX,
        };
        while started < names.len() && in_flight.len() < p.window && started < reached.saturating_add(reach) {
            in_flight.push_back(one(names[started].clone()));
            started += 1;
        }
        let more = started < names.len();
        let next = match (in_flight.is_empty(), more) {
            (true, false) => return Ok(()),
            // Far enough ahead: until recovery asks for more.
            (true, true) => {
                tokio::time::sleep(LOOK_AGAIN).await;
                continue;
            }
            (false, false) => in_flight.next().await,
            (false, true) => tokio::select! {
                next = in_flight.next() => next,
                () = tokio::time::sleep(LOOK_AGAIN) => continue,
            },
        };
        match next {
            None => continue,
            Some(Err(e)) => return Err(e),
            Some(Ok(name)) => {
                // Recovery asked for it before it was there: fetch further ahead.
                if waited(&name) {
                    p.waited += 1;
                    p.window = (p.window * 2).min(at_most.max(p.window));
                    *pace.lock().unwrap_or_else(|e| e.into_inner()) = p;
                }
            }
        }
    }
}

/// Removes the spool's marks of planned files: from now on a file the spool does not hold
/// is one the archive does not have yet (a follower's server asks again later).
pub(crate) fn stop_waiting(spool: &Path) -> Result<(), RestoreError> {
    let entries =
        std::fs::read_dir(spool).map_err(|e| RestoreError::infra(Stage::Fetch, format!("{}: {e}", spool.display())))?;
    for e in entries.filter_map(Result::ok) {
        if e.file_name().to_string_lossy().starts_with(PLANNED) {
            std::fs::remove_file(e.path())
                .map_err(|err| RestoreError::infra(Stage::Fetch, format!("{}: {err}", e.path().display())))?;
        }
    }
    Ok(())
}

/// The major version in a data directory's `PG_VERSION`.
pub(crate) fn read_major(dir: &Path) -> Result<u32, RestoreError> {
    let v = std::fs::read_to_string(dir.join("PG_VERSION"))
        .map_err(|e| RestoreError::bad(Stage::Restore, format!("the base backup has no readable PG_VERSION: {e}")))?;
    crate::server::pgbin::major_of(v.trim())
        .ok_or_else(|| RestoreError::bad(Stage::Restore, format!("PG_VERSION holds {:?}, not a version", v.trim())))
}

/// Starts the sandbox's server on the restored data directory (already in
/// `sandbox.data_dir()`), replaying `replay` if given; returns the last replayed
/// commit's time, when the WAL had one.
pub(crate) async fn start_restored(
    sandbox: &mut Sandbox,
    bins: &crate::server::pgbin::Binaries,
    replay: Option<Replay<'_>>,
) -> Result<Recovered, RestoreError> {
    start_restored_after(sandbox, bins, replay, std::future::ready(())).await
}

/// [`start_restored`], the server launched only once `ready` is: everything before the
/// launch (the backup's configuration set aside, drcheck's written, the data directory
/// handed over, `pg_controldata`) runs meanwhile.
pub(crate) async fn start_restored_after(
    sandbox: &mut Sandbox,
    bins: &crate::server::pgbin::Binaries,
    replay: Option<Replay<'_>>,
    ready: impl std::future::Future<Output = ()>,
) -> Result<Recovered, RestoreError> {
    let infra = |m: String| RestoreError::infra(Stage::Restore, m);
    let data = sandbox.data_dir().to_path_buf();
    let major = read_major(&data)?;
    let bin = bins.for_major(Some(major), true).map_err(|m| RestoreError::infra(Stage::Sandbox, m))?;
    // The backup's own configuration is not trusted: it could run commands
    // (archive/restore/recovery_end_command), load libraries, redirect the data
    // directory or include other files. It is set aside unread, and so are state files
    // that would change how the server starts (standby, a shipped recovery.signal).
    for name in [
        "postmaster.pid",
        "postmaster.opts",
        "postgresql.conf",
        "postgresql.auto.conf",
        "standby.signal",
        "recovery.signal",
        "pg_hba.conf",
        "pg_ident.conf",
    ] {
        remove_entry(&data.join(name))?;
    }
    write_new(&data.join("postgresql.conf"), "# written by drcheck: the backup's configuration is not used\n")?;
    write_new(&data.join("postgresql.auto.conf"), "# written by drcheck\n")?;
    // Until drcheck has set the run's password, only drcheck's own OS user may log in
    // (peer); then the server is switched to SCRAM with that password.
    let hba = sandbox.root().join("pg_hba.conf");
    let ident = sandbox.root().join("pg_ident.conf");
    write_new(&hba, "local all postgres peer map=drcheck\n")?;
    write_new(&ident, &format!("drcheck {} postgres\n", own_user_name()))?;
    sandbox.give_to_server(&hba)?;
    sandbox.give_to_server(&ident)?;
    let mut settings: Vec<(String, String)> = vec![
        ("hba_file".into(), hba.display().to_string()),
        ("ident_file".into(), ident.display().to_string()),
        ("data_directory".into(), data.display().to_string()),
        ("archive_mode".into(), "off".into()),
        ("archive_command".into(), String::new()),
        ("archive_library".into(), String::new()),
        ("restore_command".into(), String::new()),
        ("archive_cleanup_command".into(), String::new()),
        ("recovery_end_command".into(), String::new()),
        ("shared_preload_libraries".into(), String::new()),
        ("session_preload_libraries".into(), String::new()),
        ("local_preload_libraries".into(), String::new()),
        ("dynamic_library_path".into(), "$libdir".into()),
        ("external_pid_file".into(), String::new()),
        ("logging_collector".into(), "off".into()),
        ("ssl".into(), "off".into()),
        ("ssl_passphrase_command".into(), String::new()),
        ("jit".into(), "off".into()),
        ("hot_standby".into(), "off".into()),
        // The WAL being replayed was written at the primary's level.
        ("wal_level".into(), "replica".into()),
        ("max_wal_senders".into(), "0".into()),
        ("primary_conninfo".into(), String::new()),
        ("primary_slot_name".into(), String::new()),
        // The data directory's files synced at start-up, each (not the whole file
        // system: WAL fetched into the spool meanwhile is none of its business).
        ("recovery_init_sync_method".into(), "fsync".into()),
    ];
    if let Some(replay) = &replay {
        // PostgreSQL runs restore_command through the shell: the shell and cp may
        // execute, confined like the server.
        sandbox.allow_server_exec(&["/bin/sh", "/usr/bin/cp", "/bin/cp"]);
        settings.retain(|(k, _)| k != "restore_command");
        let spool = replay.spool.display();
        // A follower asks every second for the next file: one it does not hold yet is
        // the normal case there, not worth a line in the log each time.
        // A restore's replay takes each file as it is, linked rather than copied (16 MiB a
        // segment not written twice on the replay's cores); a follower, which keeps
        // restored segments, copies them.
        let copy = if replay.standby {
            format!("[ -e '{spool}/%f' ] && cp '{spool}/%f' '%p'")
        } else {
            sandbox.allow_server_exec(&["/usr/bin/ln", "/bin/ln"]);
            // A file the spool does not hold (recovery probes for timeline histories at
            // its start and its end) fails in the shell itself, with no process started.
            format!("[ -e '{spool}/%f' ] && {{ ln -f '{spool}/%f' '%p' 2>/dev/null || cp '{spool}/%f' '%p'; }}")
        };
        let command = if replay.streamed {
            // A planned file not there yet is waited for (until it is, or a fetch failed).
            sandbox.allow_server_exec(&["/usr/bin/sleep", "/bin/sleep"]);
            // A file asked for before it arrived leaves a mark: recovery waited on the
            // store, and the fetch widens its window ([`start_while_fetching`]).
            format!(
                "if [ -e '{spool}/{PLANNED}%f' ]; then : > '{spool}/{ASKED}%f'; [ -e '{spool}/%f' ] || : > '{spool}/{WAITED}%f'; \
                 until [ -e '{spool}/%f' ] || [ -e '{spool}/{FAILED}' ]; do sleep 0.02; done; fi; {copy}"
            )
        } else {
            copy
        };
        settings.push(("restore_command".into(), command));
        // Replay reads ahead in the WAL for the blocks it will touch (PostgreSQL 15+),
        // with more I/O at once than the default 10: a sandbox on local disk.
        if major >= 15 {
            settings.push(("recovery_prefetch".into(), "try".into()));
        }
        settings.push(("maintenance_io_concurrency".into(), "32".into()));
        if !replay.standby {
            // Replay with room for the blocks it changes: with the default 128 MB every
            // changed page soon evicts another, written out on the replay's own time
            // (half of its system time on a pgbench archive); with more, they are written
            // by the checkpoint after the promotion, in the background. Buffers are not
            // durability: the production profile's RTO stays the one a real recovery
            // sees — one tuned for it, as a DBA restoring under pressure would.
            let buffers = recovery_buffers(sandbox.memory_limit(), available_memory());
            settings.push(("shared_buffers".into(), format!("{}kB", buffers >> 10)));
        }
        if replay.standby {
            // Queries see the replayed data; the primary's limits that a hot standby
            // must match are its own (pg_control says them).
            settings.retain(|(k, _)| k != "hot_standby" && k != "max_wal_senders");
            settings.push(("hot_standby".into(), "on".into()));
            settings.push(("wal_retrieve_retry_interval".into(), "1s".into()));
            sandbox.choose_bin(bin.clone());
            settings.extend(standby_limits(sandbox, &bin).await);
            write_new(&data.join("standby.signal"), "")?;
            sandbox.set_standby();
        } else if major >= 14 {
            // drcheck promotes the server itself (fast promotion: the end-of-recovery
            // checkpoint runs after the server is ready, as in a real failover, instead
            // of before it, waited for). To the archive's end a standby replays all it
            // can get, then ends when promoted; to a point, replay pauses there and is
            // promoted. Either needs connections during recovery: a hot standby, with
            // the primary's limits.
            settings.retain(|(k, _)| k != "hot_standby" && k != "max_wal_senders");
            settings.push(("hot_standby".into(), "on".into()));
            sandbox.choose_bin(bin.clone());
            settings.extend(standby_limits(sandbox, &bin).await);
            settings.extend(target_settings(replay.target));
            if matches!(replay.target, RecoveryTarget::Latest) {
                write_new(&data.join("standby.signal"), "")?;
            } else {
                settings.push(("recovery_target_action".into(), "pause".into()));
                write_new(&data.join("recovery.signal"), "")?;
            }
            sandbox.promote_by(Promote::AtOnce);
        } else {
            settings.extend(target_settings(replay.target));
            settings.push(("recovery_target_action".into(), "promote".into()));
            write_new(&data.join("recovery.signal"), "")?;
        }
        sandbox.give_to_server(replay.spool)?;
    }
    sandbox.give_to_server(&data)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).map_err(|e| infra(e.to_string()))?;
    // Who is to blame for a server giving up on the restored data directory is decided
    // where it gives up (`Sandbox::server_blame`: its SQLSTATE), not remapped here.
    let targeted = replay.as_ref().filter(|r| matches!(r.target, RecoveryTarget::Time(_) | RecoveryTarget::Lsn(_)));
    let short = targeted.map(|r| (r.spool.to_path_buf(), r.target.clone()));
    ready.await;
    if let Err(e) = sandbox.start_existing(bin, &settings, RECOVERY_TIMEOUT).await {
        let log = std::fs::read(sandbox.root().join("postgres.log")).unwrap_or_default();
        let log = String::from_utf8_lossy(&log);
        return Err(match short {
            Some((spool, target)) if log.contains("recovery ended before configured recovery target was reached") => {
                not_reached(&target, &log, &spool)
            }
            _ => e,
        });
    }
    // Read before drcheck writes anything (setting the password takes a transaction id).
    let recovered = recovered(sandbox).await;
    if !sandbox.is_standby() {
        require_password(sandbox, &hba).await?;
    }
    Ok(recovered)
}

/// The shared buffers a restore's replay gets: a quarter of each process's memory limit
/// (every process maps them, and a backend's own work needs the rest), at most 1 GiB and
/// an eighth of the memory the host or its cgroup has available; never less than
/// PostgreSQL's default 128 MB.
pub(crate) fn recovery_buffers(memory_limit: Option<u64>, available: Option<u64>) -> u64 {
    const DEFAULT: u64 = 128 << 20;
    let mut n: u64 = 1 << 30;
    if let Some(limit) = memory_limit {
        n = n.min(limit / 4);
    }
    if let Some(free) = available {
        n = n.min(free / 8);
    }
    // Whole 8 kB pages.
    n.max(DEFAULT) / 8192 * 8192
}

/// The memory available to drcheck's restores: the host's (`MemAvailable`) or, when less,
/// what its cgroup (v2) still allows.
fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let host = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb << 10)?;
    let read = |f: &str| std::fs::read_to_string(format!("/sys/fs/cgroup/{f}")).ok()?.trim().parse::<u64>().ok();
    let group = read("memory.max").map(|max| max.saturating_sub(read("memory.current").unwrap_or(0)));
    Some(group.map_or(host, |g| g.min(host)))
}

/// The settings a hot standby must hold at least at the primary's values
/// (`max_connections`, …), read from the data directory's `pg_control` with
/// `pg_controldata`, contained; the server's defaults when it cannot be read.
async fn standby_limits(sandbox: &Sandbox, bin: &pgbin::PgBin) -> Vec<(String, String)> {
    let Ok(cmd) = sandbox.server_command("pg_controldata") else { return Vec::new() };
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.arg("-D").arg(sandbox.data_dir()).kill_on_drop(true);
    let Ok(Ok(out)) = tokio::time::timeout(Duration::from_secs(30), cmd.output()).await else {
        tracing::warn!(tool = %bin.tool("pg_controldata").display(), "cannot read the primary's limits for the standby");
        return Vec::new();
    };
    controldata_limits(&String::from_utf8_lossy(&out.stdout))
}

/// `max_connections setting: 300` and its kind in `pg_controldata`'s output, as settings.
pub(crate) fn controldata_limits(text: &str) -> Vec<(String, String)> {
    let names = [
        ("max_connections setting:", "max_connections"),
        ("max_worker_processes setting:", "max_worker_processes"),
        ("max_wal_senders setting:", "max_wal_senders"),
        ("max_prepared_xacts setting:", "max_prepared_transactions"),
        ("max_locks_per_xact setting:", "max_locks_per_transaction"),
    ];
    let mut out = Vec::new();
    for line in text.lines() {
        for (label, setting) in names {
            if let Some(v) = line.trim().strip_prefix(label).map(str::trim)
                && v.parse::<u32>().is_ok()
            {
                out.push((setting.to_string(), v.to_string()));
            }
        }
    }
    out
}

/// What a restored physical copy knows of its point: the transaction horizon and the
/// cluster it came from. On the primary, a row version whose `xmin` is below `next_xid`
/// and committed in the copy was there, unchanged, at the copy's point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Horizon {
    /// `pg_snapshot_xmax(pg_current_snapshot())` right after recovery: every
    /// transaction id at or above it began after the copy's point.
    pub next_xid: u64,
    /// `pg_control_system().system_identifier`: the cluster the backup was taken of.
    pub system_identifier: String,
}

/// Where a restored server's recovery ended, read before drcheck wrote to it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recovered {
    /// The last replayed commit's time, when the WAL had one.
    pub recovered_to: Option<String>,
    /// The transaction horizon of the copy's point.
    pub horizon: Option<Horizon>,
    /// How replay and the WAL's fetch kept pace (streamed replays only).
    pub pace: Option<Pace>,
}

/// How a streamed replay and the fetch ahead of it kept pace: which files recovery asked
/// for before they had arrived (it waited on the store), and how wide the prefetch
/// window grew for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pace {
    pub files: usize,
    /// Files recovery asked for before they were whole in the spool.
    pub waited: usize,
    /// The widest the window of files fetched at once grew.
    pub window: usize,
    /// What the replaying process itself used, as the server logged it at the end of redo.
    pub usage: Option<RedoUsage>,
}

/// The replaying (startup) process's own resource use over the redo, in milliseconds, as
/// PostgreSQL 14+ logs it: `redo done at 0/5000100 system usage: CPU: user: 1.07 s,
/// system: 0.25 s, elapsed: 1.60 s`. Time that is neither CPU was spent waiting: on the
/// disk (reads of the blocks it changes) or on `restore_command` (the next file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RedoUsage {
    pub user_ms: u64,
    pub system_ms: u64,
    pub elapsed_ms: u64,
}

impl RedoUsage {
    /// The last `redo done … system usage` line of a server log.
    pub(crate) fn of_log(log: &str) -> Option<RedoUsage> {
        let line = log.lines().rev().find(|l| l.contains("redo done at") && l.contains("system usage:"))?;
        let secs = |key: &str| -> Option<u64> {
            let rest = &line[line.find(key)? + key.len()..];
            let n: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
            n.parse::<f64>().ok().map(|s| (s * 1000.0).round() as u64)
        };
        Some(RedoUsage { user_ms: secs("user:")?, system_ms: secs("system:")?, elapsed_ms: secs("elapsed:")? })
    }

    /// The share of the redo's time the replaying process was on a CPU.
    fn cpu_share(&self) -> f64 {
        (self.user_ms + self.system_ms) as f64 / self.elapsed_ms.max(1) as f64
    }
}

/// From this share of its time on a CPU, replay was CPU-bound; below it, it mostly waited
/// (on the disk, when it never waited for WAL).
const CPU_BOUND: f64 = 0.6;

impl Pace {
    /// What limited replay — the store (fetch), the CPU or the disk — said for the report.
    pub(crate) fn said(&self) -> String {
        let usage = self.usage.map(|u| {
            format!(
                "; redo {:.2} s, of it CPU {:.2} s (user {:.2}, system {:.2}: {:.0} %)",
                u.elapsed_ms as f64 / 1000.0,
                (u.user_ms + u.system_ms) as f64 / 1000.0,
                u.user_ms as f64 / 1000.0,
                u.system_ms as f64 / 1000.0,
                u.cpu_share() * 100.0
            )
        });
        let usage = usage.unwrap_or_default();
        if self.waited > 0 {
            return format!(
                "replay waited for {} of {} WAL files (up to {} fetched at once): the store (fetch) set the pace{usage}",
                self.waited, self.files, self.window
            );
        }
        let limit = match self.usage {
            Some(u) if u.cpu_share() >= CPU_BOUND => "the CPU set the pace",
            Some(_) => {
                "the disk set the pace (replay mostly waited — on the disk and on restore_command — never for WAL)"
            }
            None => "replay itself (CPU or disk: the server did not say its usage) set the pace",
        };
        format!(
            "replay never waited for WAL ({} files, up to {} fetched at once): {limit}{usage}",
            self.files, self.window
        )
    }
}

/// The same segment as `seg` on the nearest later timeline among `segments` whose
/// history `has_history` (of an 8-digit timeline) says is there: after a promotion, the
/// old timeline's last segment is archived only as `.partial` and replay goes on with
/// the new timeline's.
pub(crate) fn on_a_later_timeline(
    seg: &str,
    segments: &std::collections::BTreeSet<String>,
    has_history: impl Fn(&str) -> bool,
) -> Option<String> {
    let (timeline, number) = (seg.get(..8)?, seg.get(8..)?);
    let timeline = u32::from_str_radix(timeline, 16).ok()?;
    segments
        .iter()
        .filter(|s| s.get(8..) == Some(number))
        .filter(|s| {
            let t = s.get(..8).unwrap_or_default();
            u32::from_str_radix(t, 16).is_ok_and(|n| n > timeline) && has_history(t)
        })
        .min()
        .cloned()
}

/// Why replay stopped short of `target`: the last transaction it replayed (the server's
/// own log line) and the first WAL file it needed that the spool — what the archive
/// holds — does not have.
fn not_reached(target: &RecoveryTarget, log: &str, spool: &Path) -> RestoreError {
    let what = match target {
        RecoveryTarget::Time(t) => format!("recovery_target_time {t}"),
        RecoveryTarget::Lsn(l) => format!("recovery_target_lsn {l}"),
        _ => "the recovery target".into(),
    };
    let last = log
        .lines()
        .rev()
        .find_map(|l| l.split("last completed transaction was at log time ").nth(1))
        .map(|t| t.trim().to_string());
    let all: Vec<String> = std::fs::read_dir(spool)
        .map(|d| d.flatten().filter_map(|e| e.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    let hex = |n: &str| n.chars().all(|c| c.is_ascii_hexdigit());
    let names: std::collections::BTreeSet<String> = all.iter().filter(|n| n.len() == 24 && hex(n)).cloned().collect();
    let histories: std::collections::BTreeSet<&str> =
        all.iter().filter_map(|n| n.strip_suffix(".history")).filter(|t| t.len() == 8 && hex(t)).collect();
    // Followed across promotions (a later timeline whose history was fetched).
    let missing = names.first().map(|first| {
        let mut seg = first.clone();
        loop {
            let Some(next) = next_segment(&seg) else { break seg };
            if names.contains(&next) {
                seg = next;
            } else if let Some(later) = on_a_later_timeline(&next, &names, |t| histories.contains(t)) {
                seg = later;
            } else {
                break next;
            }
        }
    });
    RestoreError::TargetNotReached { target: what, last_replayed: last, missing_wal: missing }
}

/// The `recovery_target*` settings of a target (none for `latest`).
pub(crate) fn target_settings(target: &RecoveryTarget) -> Vec<(String, String)> {
    match target {
        RecoveryTarget::Latest => vec![],
        RecoveryTarget::Immediate => vec![("recovery_target".into(), "immediate".into())],
        RecoveryTarget::Time(t) => vec![("recovery_target_time".into(), pg_timestamp(t))],
        RecoveryTarget::Lsn(l) => vec![("recovery_target_lsn".into(), l.clone())],
        // Drawn into a `Time` before any restore starts (the window needs the catalog).
        RecoveryTarget::Random(_) => unreachable!("a random recovery target is drawn before the restore"),
    }
}

/// A spool directory for archived WAL in the sandbox.
pub(crate) fn spool_dir(sandbox: &Sandbox) -> Result<PathBuf, RestoreError> {
    let spool = sandbox.root().join("wal-spool");
    std::fs::create_dir_all(&spool)
        .map_err(|e| RestoreError::infra(Stage::Fetch, format!("{}: {e}", spool.display())))?;
    sandbox.give_to_server(&spool)?;
    Ok(spool)
}

/// The WAL file after `segment` (24 hex digits) for 16 MiB segments: the low part
/// counts 00000000..000000FF, then the middle part increments.
pub(crate) fn next_segment(segment: &str) -> Option<String> {
    if segment.len() != 24 {
        return None;
    }
    let tli = &segment[..8];
    let log = u32::from_str_radix(&segment[8..16], 16).ok()?;
    let seg = u32::from_str_radix(&segment[16..], 16).ok()?;
    let (log, seg) = if seg >= 0xFF { (log.checked_add(1)?, 0) } else { (log, seg + 1) };
    Some(format!("{tli}{log:08X}{seg:08X}"))
}

/// Sets the run's password on the restored superuser and switches the server from
/// peer authentication to SCRAM, so from now on only holders of the password get in.
async fn require_password(sandbox: &Sandbox, hba: &Path) -> Result<(), RestoreError> {
    use sqlx::Connection;
    let infra = |m: String| RestoreError::infra(Stage::Restore, m);
    let mut conn = sqlx::postgres::PgConnection::connect_with(&sandbox.connect_options("postgres"))
        .await
        .map_err(|e| infra(format!("cannot connect to the restored server: {e}")))?;
    // The password is ours (letters and digits only), never the backup's.
    sqlx::query(sqlx::AssertSqlSafe(format!("ALTER ROLE postgres PASSWORD '{}'", sandbox.password())))
        .execute(&mut conn)
        .await
        .map_err(|e| infra(format!("cannot set the sandbox password: {e}")))?;
    remove_entry(hba)?;
    write_new(hba, "local all all scram-sha-256\n")?;
    sandbox.give_to_server(hba)?;
    sqlx::query("select pg_reload_conf()")
        .execute(&mut conn)
        .await
        .map_err(|e| infra(format!("cannot reload the sandbox's configuration: {e}")))?;
    let _ = conn.close().await;
    // The reload is asynchronous: wait until a password-less login is refused.
    let mut without = sandbox.connect_options("postgres");
    without = without.password("");
    for _ in 0..500 {
        if sqlx::postgres::PgConnection::connect_with(&without).await.is_err() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(infra("the sandbox server did not switch to password authentication".into()))
}

/// The name of the OS user drcheck runs as (peer authentication maps it).
fn own_user_name() -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::effective())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| nix::unistd::Uid::effective().to_string())
}

/// Removes a file or link at `path` without following it; nothing there is fine.
pub(crate) fn remove_entry(path: &Path) -> Result<(), RestoreError> {
    match std::fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(m) if m.is_dir() => Err(RestoreError::bad(
            Stage::Restore,
            format!("the base backup holds a directory where a file is expected: {}", path.display()),
        )),
        Ok(_) => std::fs::remove_file(path)
            .map_err(|e| RestoreError::infra(Stage::Restore, format!("cannot remove {}: {e}", path.display()))),
    }
}

/// Writes a new file that drcheck controls: never through a link the backup planted.
pub(crate) fn write_new(path: &Path, content: &str) -> Result<(), RestoreError> {
    remove_entry(path)?;
    crate::server::sandbox::write_private(path, content.as_bytes())
}

/// An RFC 3339 timestamp the way PostgreSQL's `recovery_target_time` accepts it
/// (`2026-11-30 03:00:00.000000+00`: no `T`, no `Z`).
fn pg_timestamp(rfc3339: &str) -> String {
    match humantime::parse_rfc3339_weak(rfc3339) {
        Ok(t) => humantime::format_rfc3339_micros(t).to_string().replace('T', " ").replace('Z', "+00"),
        Err(_) => rfc3339.to_string(),
    }
}

/// The last replayed commit and the transaction horizon, asked of the server right
/// after recovery, before any transaction of drcheck's: built-ins only, schema-qualified
/// (the catalog check later proves them PostgreSQL's own).
async fn recovered(sandbox: &Sandbox) -> Recovered {
    use sqlx::Connection;
    let Ok(mut conn) = sqlx::postgres::PgConnection::connect_with(&sandbox.connect_options("postgres")).await else {
        return Recovered::default();
    };
    let row = sqlx::query_as::<_, (Option<String>, Option<String>, Option<String>)>(
        "select pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.pg_last_xact_replay_timestamp()),                 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),                 pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::pg_catalog.text,                 (select s.system_identifier::pg_catalog.text from pg_catalog.pg_control_system() s)",
    )
    .fetch_one(&mut conn)
    .await;
    let _ = conn.close().await;
    let Ok((recovered_to, xmax, system)) = row else { return Recovered::default() };
    let horizon = match (xmax.and_then(|x| x.parse::<u64>().ok()), system) {
        (Some(next_xid), Some(system_identifier)) => Some(Horizon { next_xid, system_identifier }),
        _ => None,
    };
    Recovered { recovered_to, horizon, pace: None }
}

#[cfg(test)]
mod tests {
    use super::{Pace, RedoUsage, fetch_ahead};

    /// Issue 50: a restore's replay gets more shared buffers than the default, within the
    /// sandbox's memory limit and what the host has.
    #[test]
    fn replay_buffers_stay_within_the_memory_limit_and_the_host() {
        use super::recovery_buffers;
        const M: u64 = 1 << 20;
        assert_eq!(recovery_buffers(Some(2048 * M), Some(20_000 * M)), 512 * M, "a quarter of the default 2 GiB limit");
        assert_eq!(recovery_buffers(None, Some(20_000 * M)), 1024 * M, "at most 1 GiB");
        assert_eq!(recovery_buffers(Some(2048 * M), Some(1600 * M)), 200 * M, "an eighth of what is available");
        assert_eq!(recovery_buffers(Some(256 * M), Some(100 * M)), 128 * M, "never below PostgreSQL's default");
        assert_eq!(recovery_buffers(Some(2048 * M + 12345), None) % 8192, 0, "whole pages");
    }

    /// Issue 50: what limited replay — the store, the CPU or the disk — from the server's
    /// own account of the redo (its log line), as PostgreSQL 15 writes it.
    #[test]
    fn replay_says_whether_the_store_the_cpu_or_the_disk_set_its_pace() {
        let log = "2026-12-07 22:00:01.100 UTC 00000 LOG:  redo starts at 0/2000028\n\
                   2026-12-07 22:00:02.700 UTC 00000 LOG:  redo done at 0/3E000A0 system usage: CPU: user: 1.07 s, system: 0.25 s, elapsed: 1.60 s\n";
        let u = RedoUsage::of_log(log).expect("the line is read");
        assert_eq!((u.user_ms, u.system_ms, u.elapsed_ms), (1070, 250, 1600));
        assert_eq!(RedoUsage::of_log("LOG:  redo starts at 0/2000028"), None);
        let pace = |waited, usage| Pace { files: 30, waited, window: 4, usage };
        let cpu = pace(0, Some(u)).said();
        assert!(cpu.contains("the CPU set the pace") && cpu.contains("CPU 1.32 s") && cpu.contains("82 %"), "{cpu}");
        let waiting = RedoUsage { user_ms: 300, system_ms: 100, elapsed_ms: 2000 };
        let disk = pace(0, Some(waiting)).said();
        assert!(disk.contains("the disk set the pace"), "{disk}");
        let store = pace(5, Some(waiting)).said();
        assert!(store.contains("the store (fetch) set the pace") && store.contains("5 of 30"), "{store}");
        let unsaid = pace(0, None).said();
        assert!(unsaid.contains("did not say"), "{unsaid}");
    }
    use drcheck_config::RecoveryTarget;

    /// Issue 50: the window widens only while recovery waits on the store, up to its
    /// ceiling; a replay that never waits keeps the window it started with.
    #[tokio::test]
    async fn the_prefetch_window_widens_while_recovery_waits_and_only_then() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let run = |waits: bool| async move {
            let (now, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
            let pace = std::sync::Mutex::new(Pace { files: 40, waited: 0, window: 2, usage: None });
            let names: Vec<String> = (0..40).map(|i| format!("{i:024X}")).collect();
            let one = |name: String| {
                let (now, most) = (&now, &most);
                async move {
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    Ok(name)
                }
            };
            fetch_ahead(names, 2, false, 16, &pace, |_| waits, |_| true, one).await.unwrap();
            let p = *pace.lock().unwrap();
            (p, most.load(Ordering::SeqCst))
        };
        let (p, most) = run(true).await;
        assert_eq!((p.waited, p.window), (40, 16), "{p:?}");
        assert_eq!(most, 16, "as many fetched at once as the window allows");
        assert!(
            p.said().starts_with("replay waited for 40 of 40 WAL files (up to 16 fetched at once)"),
            "{}",
            p.said()
        );
        let (p, most) = run(false).await;
        assert_eq!((p.waited, p.window, most), (0, 2, 2), "{p:?}");
        assert!(p.said().starts_with("replay never waited for WAL"), "{}", p.said());
    }

    /// Issue 50: the fetch never runs more than the window's ceiling (16) past the newest
    /// file recovery asked for — a replay stopped at a point in time leaves the rest of the archive
    /// alone — and goes on as recovery asks for more.
    #[tokio::test]
    async fn the_fetch_stays_a_window_ahead_of_what_recovery_asked_for() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let fetched = AtomicUsize::new(0);
        let asked_upto = AtomicUsize::new(0);
        let pace = std::sync::Mutex::new(Pace { files: 40, waited: 0, window: 3, usage: None });
        let names: Vec<String> = (0..40).map(|i| format!("{i:024X}")).collect();
        let index = |name: &str| usize::from_str_radix(name, 16).unwrap();
        let one = |name: String| {
            let fetched = &fetched;
            async move {
                fetched.fetch_add(1, Ordering::SeqCst);
                Ok(name)
            }
        };
        let asked = |name: &str| index(name) < asked_upto.load(Ordering::SeqCst);
        let fetching = fetch_ahead(names, 3, true, 16, &pace, |_| false, asked, one);
        tokio::pin!(fetching);
        let stalled = tokio::time::timeout(std::time::Duration::from_millis(200), &mut fetching).await;
        assert!(stalled.is_err(), "it waits for recovery to ask for a file");
        assert_eq!(fetched.load(Ordering::SeqCst), 3, "before recovery asks (its start-up sync), the first files only");
        asked_upto.store(5, Ordering::SeqCst);
        let stalled = tokio::time::timeout(std::time::Duration::from_millis(200), &mut fetching).await;
        assert!(stalled.is_err(), "it waits for recovery to ask for more");
        assert_eq!(fetched.load(Ordering::SeqCst), 21, "the 5 asked for and the reach of 16 past them, 3 at a time");
        // Recovery asks for everything: the fetch runs to the end.
        asked_upto.store(40, Ordering::SeqCst);
        tokio::time::timeout(std::time::Duration::from_secs(5), &mut fetching).await.unwrap().unwrap();
        assert_eq!(fetched.load(Ordering::SeqCst), 40);
    }

    #[test]
    fn segments_follow_each_other() {
        assert_eq!(super::next_segment("000000010000000000000002").unwrap(), "000000010000000000000003");
        assert_eq!(super::next_segment("0000000100000000000000FF").unwrap(), "000000010000000100000000");
        assert_eq!(super::next_segment("short"), None);
    }

    #[test]
    fn replay_that_stopped_short_names_the_last_transaction_and_the_missing_file() {
        let spool = tempfile::tempdir().unwrap();
        for n in
            ["000000010000000000000002", "000000010000000000000003", "000000010000000000000005", "00000002.history"]
        {
            std::fs::write(spool.path().join(n), b"").unwrap();
        }
        std::fs::write(spool.path().join(".part-000000010000000000000004"), b"").unwrap();
        let log = "00000 LOG:  redo done at 0/3000148\n00000 LOG:  last completed transaction was at log time 2026-12-02 02:15:24.335+00\n\
                   XX000 FATAL:  recovery ended before configured recovery target was reached\n";
        let target = RecoveryTarget::Time("2026-12-02T02:15:30Z".into());
        let e = super::not_reached(&target, log, spool.path());
        assert!(
            matches!(&e, crate::error::RestoreError::TargetNotReached { missing_wal: Some(w), last_replayed: Some(t), .. }
                if w == "000000010000000000000004" && t == "2026-12-02 02:15:24.335+00"),
            "{e:?}"
        );
        assert!(e.is_backup_fault());
        let m = e.to_string();
        assert!(m.starts_with("recovery ended before reaching its target"), "{m}");
        assert!(m.contains("recovery_target_time 2026-12-02T02:15:30Z"), "{m}");
        assert!(m.contains("the last transaction replayed was at 2026-12-02 02:15:24.335+00"), "{m}");
        assert!(m.contains("needed WAL file 000000010000000000000004"), "{m}");
        // Issue 34: after a promotion (timeline 2 from segment 6, its history fetched) the
        // file named is the new timeline's, not the old one's, which never exists.
        std::fs::write(spool.path().join("000000010000000000000004"), b"").unwrap();
        for n in ["000000020000000000000006", "000000020000000000000007"] {
            std::fs::write(spool.path().join(n), b"").unwrap();
        }
        let m = super::not_reached(&target, log, spool.path()).to_string();
        assert!(m.contains("needed WAL file 000000020000000000000008"), "{m}");
        let empty = tempfile::tempdir().unwrap();
        let m = super::not_reached(&target, "", empty.path()).to_string();
        assert!(m.contains("no transaction was replayed") && m.contains("held no WAL file"), "{m}");
    }

    #[test]
    fn recovery_target_time_is_in_postgres_form() {
        assert_eq!(super::pg_timestamp("2026-11-30T08:36:06.268191Z"), "2026-11-30 08:36:06.268191+00");
    }
}
