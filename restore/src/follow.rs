//! Following a WAL archive: one restored copy per target, kept as a hot standby in a
//! directory of its own (`[sandbox] state_dir`) across daemon restarts. It is seeded
//! from a base backup ([`crate::job::run`] with [`crate::WalReplay::standby`]) and then
//! fed every segment the archive gains — fetched by drcheck into the spool its
//! `restore_command` copies from, so the contained server never reaches the store.
//!
//! Each [`Follower::step`] lists the archive, fetches what is new in order, and reads
//! where replay is. What cannot be replayed — a gap, an unreadable segment, a segment
//! replay stops in, the server gone — is a [`NotReplayable`] naming the segment; a
//! store or server that cannot be asked is the world's ([`Step::unreachable`]).

use crate::error::{RestoreError, Stage};
use crate::server::recovery::{self, Replay, next_segment, on_a_later_timeline};
use crate::server::sandbox::{Sandbox, SandboxOptions};
use crate::source::{Archive, ArchivedFile};
use crate::store::BackupStore;
use drcheck_config::RecoveryTarget;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The follower's record of itself, in its directory.
const STATE: &str = "follow.json";
/// At most this many segments are fetched in one step (16 GiB of 64 MiB segments):
/// a follower far behind catches up over several steps, each reporting its progress.
const PER_STEP: usize = 256;
/// The follower's server log is cut back once read past this size.
const MAX_LOG: u64 = 16 << 20;
/// How long the server has to answer where replay is.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);
/// Between listings of the whole archive (which see a timeline history replaced or
/// removed), steps list only what sorts after the last segment fetched.
const FULL_LISTING_EVERY: u64 = 30;

/// What a follower remembers across restarts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FollowState {
    /// The base backup it was seeded from.
    pub backup: String,
    /// When it was seeded (RFC 3339): re-seeded from a newer backup after `reseed_after`.
    pub seeded_at: String,
    /// The newest segment fetched into the spool; the next one is asked for next.
    pub last_segment: Option<String>,
}

/// A segment that cannot be replayed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReplayable {
    /// The WAL file (24 hex digits).
    pub segment: String,
    /// `gap`, `unreadable`, `corrupt`, `stuck` or `crashed`.
    pub reason: &'static str,
    pub detail: String,
}

/// What one step found.
#[derive(Debug, Clone, Default)]
pub struct Step {
    /// Segments fetched into the spool, and their bytes as stored.
    pub fetched: u64,
    pub fetched_bytes: u64,
    /// Segments replay moved past since the last step.
    pub replayed_segments: u64,
    /// Where replay is (the end of the last replayed record), as a number.
    pub replayed_lsn: Option<u64>,
    /// The last replayed commit's time, read from the WAL.
    pub replayed_commit: Option<SystemTime>,
    /// The newest segment the archive holds.
    pub newest_archived: Option<String>,
    /// The archive's fault: what cannot be replayed.
    pub problem: Option<NotReplayable>,
    /// The world's: the store or the server could not be asked.
    pub unreachable: Option<String>,
}

/// A point replay was paused at, for validation.
#[derive(Debug, Clone)]
pub struct Paused {
    pub lsn: String,
    /// The last replayed commit (RFC 3339, UTC).
    pub commit: Option<String>,
    pub horizon: Option<crate::server::recovery::Horizon>,
}

/// A complaint of the server's about a record it could not read.
#[derive(Debug, Clone)]
struct Complaint {
    line: String,
    lsn: Option<u64>,
    segment: Option<String>,
}

/// A restored copy that follows its archive.
pub struct Follower {
    sandbox: Sandbox,
    dir: PathBuf,
    spool: PathBuf,
    state: FollowState,
    bins: crate::server::pgbin::Binaries,
    /// The replay position last read, and when it last moved.
    progress: Option<(u64, Instant)>,
    /// Bytes of the server's log already read for complaints.
    log_offset: u64,
    complaint: Option<Complaint>,
    segment_size: u64,
    /// The server said its segment size (until then a fetched segment's size is not judged).
    segment_known: bool,
    paused: bool,
    /// Since when WAL past replay's position has been in the spool (reset as replay moves).
    waiting_since: Option<Instant>,
    /// The version (ETag) of each segment as fetched.
    fetched_versions: BTreeMap<String, Option<String>>,
    /// The segment last named as not replayable: fetched again when the archive's copy
    /// changes (a repaired archive is followed without a new seed).
    suspect: Option<String>,
    /// Steps taken since this follower was opened.
    steps: u64,
    /// The last full listing's files all lay in one directory (objects under a flat
    /// `wal_prefix`): later steps may list only what sorts after the last segment.
    flat: bool,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower").field("dir", &self.dir).field("state", &self.state).finish_non_exhaustive()
    }
}

/// The follower state kept in `dir`, if a follower was seeded there.
pub fn read_state(dir: &Path) -> Option<FollowState> {
    let text = std::fs::read_to_string(dir.join(STATE)).ok()?;
    serde_json::from_str(&text).ok()
}

impl Follower {
    /// A follower from a restore just seeded as a standby (`restored.sandbox` kept at
    /// `dir`): what it fetched while seeding is its start.
    pub fn seeded(
        restored: crate::request::Restored,
        backup: &str,
        bins: crate::server::pgbin::Binaries,
    ) -> Result<Follower, RestoreError> {
        let sandbox = restored.sandbox;
        let dir = sandbox.root().to_path_buf();
        let spool = recovery::spool_dir(&sandbox)?;
        // From now on a file not in the spool is one the archive does not have yet.
        recovery::stop_waiting(&spool)?;
        let last_segment = spooled_segments(&spool).into_iter().max_by(|a, b| by_position(a, b));
        let state = FollowState { backup: backup.to_string(), seeded_at: rfc3339(SystemTime::now()), last_segment };
        let follower = Follower::around(sandbox, dir, spool, state, bins);
        follower.save()?;
        Ok(follower)
    }

    /// The follower kept in `opts.keep_at`, its server started again where replay
    /// stopped; `None` when none was seeded there.
    pub async fn resume(
        opts: &SandboxOptions,
        bins: crate::server::pgbin::Binaries,
    ) -> Result<Option<Follower>, RestoreError> {
        let Some(dir) = opts.keep_at.clone() else { return Ok(None) };
        let Some(state) = read_state(&dir) else { return Ok(None) };
        if !dir.join("data").join("PG_VERSION").is_file() {
            return Ok(None);
        }
        let sandbox = Sandbox::create(opts)?;
        let spool = recovery::spool_dir(&sandbox)?;
        let mut follower = Follower::around(sandbox, dir, spool, state, bins);
        follower.start().await?;
        Ok(Some(follower))
    }

    fn around(
        sandbox: Sandbox,
        dir: PathBuf,
        spool: PathBuf,
        state: FollowState,
        bins: crate::server::pgbin::Binaries,
    ) -> Self {
        let log_offset = std::fs::metadata(dir.join("postgres.log")).map(|m| m.len()).unwrap_or(0);
        Follower {
            sandbox,
            dir,
            spool,
            state,
            bins,
            progress: None,
            log_offset,
            complaint: None,
            segment_size: 16 << 20,
            segment_known: false,
            paused: false,
            waiting_since: None,
            fetched_versions: BTreeMap::new(),
            suspect: None,
            steps: 0,
            flat: false,
        }
    }

    /// Starts its server (again) as a standby reading the spool.
    async fn start(&mut self) -> Result<(), RestoreError> {
        let replay = Replay { spool: &self.spool, target: &RecoveryTarget::Latest, streamed: false, standby: true };
        recovery::start_restored(&mut self.sandbox, &self.bins, Some(replay)).await?;
        Ok(())
    }

    pub fn state(&self) -> &FollowState {
        &self.state
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// Stops the server and removes the follower's directory (its target was removed,
    /// or it is re-seeded).
    pub fn discard(self) {
        self.sandbox.discard();
    }

    fn save(&self) -> Result<(), RestoreError> {
        let path = self.dir.join(STATE);
        let part = self.dir.join(".follow.json.part");
        let text = serde_json::to_string_pretty(&self.state).unwrap_or_default();
        recovery::write_new(&part, &text)?;
        std::fs::rename(&part, &path)
            .map_err(|e| RestoreError::infra(Stage::Restore, format!("saving {}: {e}", path.display())))
    }

    /// One round: the server checked (started again if it died), the archive listed and
    /// what is new fetched in order, replay's position read, and whether it is stuck.
    /// `archive` is the target's ([`crate::Source::archive`]): objects under a
    /// `wal_prefix`, or a backup tool's repository (its tool run contained beside the
    /// follower's server, into the follower's directory).
    pub async fn step(&mut self, archive: &dyn Archive, store: &Arc<dyn BackupStore>, stuck_after: Duration) -> Step {
        let mut step = Step::default();
        let exited = self.sandbox.server_exited();
        let down = exited.is_some() || !self.sandbox.has_server();
        if down {
            // Gone: what it said last names the segment (a crafted one can kill it), else
            // the one replay was in.
            let complaint = self.read_complaints();
            let segment =
                complaint.as_ref().and_then(|c| c.segment.clone()).unwrap_or_else(|| self.replay_segment_name());
            let how = exited.map_or_else(|| "did not start again".to_string(), |s| format!("exited ({s})"));
            let why = complaint.map(|c| c.line).unwrap_or_else(|| self.sandbox.log_tail());
            step.problem = Some(NotReplayable {
                segment,
                reason: "crashed",
                detail: format!("the follower's server {how} replaying it: {}", cut(&why, 600)),
            });
        }
        // The whole archive now and then, and whenever something is wrong (a repaired
        // segment is found by its new version); else what is new since the last segment.
        let full = !self.flat || self.suspect.is_some() || self.steps.is_multiple_of(FULL_LISTING_EVERY);
        self.steps += 1;
        let after = if full { None } else { self.state.last_segment.clone() };
        match archive.files(&self.sandbox, store, after.as_deref()).await {
            Ok(listed) => {
                if after.is_none() {
                    self.flat = one_directory(&listed);
                }
                self.fetch_new(archive, store, listed, after.is_none(), &mut step).await
            }
            Err(e) => {
                step.unreachable = Some(format!("cannot list {}: {}", archive.describe(), cut(&e.to_string(), 600)))
            }
        }
        if down {
            if let Err(e) = self.start().await {
                tracing::warn!(dir = %self.dir.display(), "the follower's server did not start again: {}", cut(&e.to_string(), 600));
            }
        } else {
            self.read_replay(&mut step).await;
            if step.problem.is_none() && !self.paused {
                step.problem = self.stuck(stuck_after);
            }
        }
        if let Some(p) = &step.problem {
            self.suspect = Some(p.segment.clone());
        }
        step
    }

    /// Fetches, in replay order, every segment after the last one fetched (across a
    /// promotion whose history is archived), stopping at the first one missing.
    async fn fetch_new(
        &mut self,
        archive: &dyn Archive,
        store: &Arc<dyn BackupStore>,
        listed: Vec<ArchivedFile>,
        whole: bool,
        step: &mut Step,
    ) {
        // One file per name: two stored copies of one segment (a tool's duplicate) are
        // the tool's to refuse when fetching, the first listed is the one judged here.
        let mut objects: BTreeMap<String, ArchivedFile> = BTreeMap::new();
        for f in listed {
            objects.entry(f.name.clone()).or_insert(f);
        }
        let segments: BTreeSet<String> = objects.keys().filter(|n| n.len() == 24).cloned().collect();
        step.newest_archived = segments.iter().max_by(|a, b| by_position(a, b)).cloned();
        // Timeline histories first: replay asks for them before a new timeline's WAL. One
        // the archive changed is fetched again, one it no longer holds leaves the spool
        // (a crafted history can stop the server: repairing the archive repairs this).
        for name in spooled_histories(&self.spool).into_iter().filter(|_| whole) {
            if !objects.contains_key(&name) {
                tracing::info!(file = %name, "the archive no longer holds this timeline history: removed from the spool");
                let _ = std::fs::remove_file(self.spool.join(&name));
                self.fetched_versions.remove(&name);
            }
        }
        for (name, obj) in objects.iter().filter(|(n, _)| n.ends_with(".history")) {
            let known = self.fetched_versions.get(name);
            // Small: fetched once per start of drcheck, then again only when it changes.
            if self.spool.join(name).exists() && known == Some(&obj.version) {
                continue;
            }
            if let Err(e) = self.fetch_one(archive, store, obj).await {
                step.unreachable = Some(format!("fetching {name}: {e}"));
                return;
            }
        }
        // The segment last named as not replayable, changed in the archive since it was
        // fetched: fetched again, with what follows it.
        if let Some(suspect) = self.suspect.clone()
            && let Some(obj) = objects.get(&suspect)
            && self.fetched_versions.get(&suspect) != Some(&obj.version)
            && self.state.last_segment.as_deref().is_some_and(|l| by_position(l, &suspect).is_ge())
        {
            tracing::info!(segment = %suspect, "the archive's copy of the segment that could not be replayed changed: fetching it again");
            let _ = std::fs::remove_file(self.spool.join(&suspect));
            self.state.last_segment = segment_number(&suspect, self.segment_size)
                .and_then(|n| n.checked_sub(1))
                .map(|n| self.name_of(n, &[]))
                .map(|prev| format!("{}{}", &suspect[..8], &prev[8..]));
            self.suspect = None;
        }
        let Some(last) = self.state.last_segment.clone() else { return };
        let mut next = match next_segment(&last) {
            Some(n) => n,
            None => return,
        };
        let spool = self.spool.clone();
        for _ in 0..PER_STEP {
            let candidate = if segments.contains(&next) {
                next.clone()
            } else if let Some(later) =
                on_a_later_timeline(&next, &segments, |t| spool.join(format!("{t}.history")).exists())
            {
                later
            } else {
                // Something later is archived while this one is not: a gap.
                if segments.iter().any(|s| s[8..] > next[8..] && s[..8] >= next[..8]) {
                    step.problem = Some(NotReplayable {
                        segment: next.clone(),
                        reason: "gap",
                        detail: format!(
                            "the archive holds later WAL ({}) but not {next}: replay cannot pass it",
                            step.newest_archived.clone().unwrap_or_default()
                        ),
                    });
                }
                break;
            };
            let obj = &objects[&candidate];
            match self.fetch_one(archive, store, obj).await {
                // A segment is whole or not replayable: the server would take a short one
                // for one still being copied and wait for the rest forever.
                Ok(()) if self.segment_known && self.spooled_size(&candidate) != self.segment_size => {
                    let size = self.spooled_size(&candidate);
                    let _ = std::fs::remove_file(self.spool.join(&candidate));
                    self.fetched_versions.remove(&candidate);
                    step.problem = Some(NotReplayable {
                        segment: candidate.clone(),
                        reason: "unreadable",
                        detail: format!(
                            "{} holds {size} bytes of WAL, a segment is {}: truncated when it was archived",
                            obj.key, self.segment_size
                        ),
                    });
                    break;
                }
                Ok(()) => {}
                Err(e) if e.is_backup_fault() => {
                    step.problem = Some(NotReplayable {
                        segment: candidate.clone(),
                        reason: "unreadable",
                        detail: format!("{}: {}", obj.key, cut(&e.to_string(), 600)),
                    });
                    break;
                }
                Err(e) => {
                    step.unreachable = Some(format!("fetching {}: {}", obj.key, cut(&e.to_string(), 600)));
                    break;
                }
            }
            step.fetched += 1;
            step.fetched_bytes += obj.size;
            self.state.last_segment = Some(candidate.clone());
            if let Err(e) = self.save() {
                step.unreachable = Some(e.to_string());
                break;
            }
            match next_segment(&candidate) {
                Some(n) => next = n,
                None => break,
            }
        }
    }

    /// The size of a spooled file (0 when it is not there).
    fn spooled_size(&self, name: &str) -> u64 {
        std::fs::metadata(self.spool.join(name)).map(|m| m.len()).unwrap_or(0)
    }

    async fn fetch_one(
        &mut self,
        archive: &dyn Archive,
        store: &Arc<dyn BackupStore>,
        file: &ArchivedFile,
    ) -> Result<(), RestoreError> {
        let name = file.name.as_str();
        let part = self.spool.join(format!(".part-{name}"));
        let _ = std::fs::remove_file(&part);
        let fetched = archive.fetch_file(&self.sandbox, store, file, &part).await;
        if let Err(e) = fetched {
            let _ = std::fs::remove_file(&part);
            return Err(e);
        }
        self.sandbox.give_to_server(&part)?;
        std::fs::rename(&part, self.spool.join(name))
            .map_err(|e| RestoreError::infra(Stage::Fetch, format!("spooling {name}: {e}")))?;
        self.fetched_versions.insert(name.to_string(), file.version.clone());
        Ok(())
    }

    /// Where replay is and its last commit; spooled segments older than the last
    /// restartpoint's are removed (the server keeps what it needs in `pg_wal`).
    async fn read_replay(&mut self, step: &mut Step) {
        let asked = tokio::time::timeout(ASK_TIMEOUT, self.ask()).await;
        let (lsn, commit, redo, size) = match asked {
            Ok(Ok(row)) => row,
            Ok(Err(e)) => {
                step.unreachable.get_or_insert(format!("cannot ask the follower where replay is: {e}"));
                return;
            }
            Err(_) => {
                step.unreachable.get_or_insert(format!("the follower did not answer within {ASK_TIMEOUT:?}"));
                return;
            }
        };
        if let Some(size) = size.filter(|s| *s > 0) {
            self.segment_size = size as u64;
            self.segment_known = true;
        }
        let lsn = lsn.as_deref().and_then(parse_lsn);
        step.replayed_lsn = lsn;
        step.replayed_commit =
            commit.filter(|c| c.is_finite() && *c > 0.0).map(|c| SystemTime::UNIX_EPOCH + Duration::from_secs_f64(c));
        if let Some(lsn) = lsn {
            match self.progress {
                Some((before, _)) if lsn > before => {
                    step.replayed_segments = lsn / self.segment_size - before / self.segment_size;
                    self.progress = Some((lsn, Instant::now()));
                    self.complaint = None;
                    self.waiting_since = None;
                }
                Some(_) => {}
                None => self.progress = Some((lsn, Instant::now())),
            }
        }
        if let Some(redo) = redo.as_deref().and_then(parse_lsn) {
            let keep_from = redo / self.segment_size;
            for name in spooled_segments(&self.spool) {
                if segment_number(&name, self.segment_size).is_some_and(|n| n < keep_from) {
                    let _ = std::fs::remove_file(self.spool.join(&name));
                }
            }
        }
    }

    async fn ask(&self) -> Result<(Option<String>, Option<f64>, Option<String>, Option<i64>), sqlx::Error> {
        use sqlx::Connection;
        let mut conn = sqlx::postgres::PgConnection::connect_with(&self.sandbox.connect_options("postgres")).await?;
        let row = sqlx::query_as(
            "select pg_catalog.pg_last_wal_replay_lsn()::pg_catalog.text, \
             pg_catalog.date_part('epoch', pg_catalog.pg_last_xact_replay_timestamp())::pg_catalog.float8, \
             (select c.redo_lsn::pg_catalog.text from pg_catalog.pg_control_checkpoint() c), \
             (select i.bytes_per_wal_segment::pg_catalog.int8 from pg_catalog.pg_control_init() i)",
        )
        .fetch_one(&mut conn)
        .await;
        let _ = conn.close().await;
        row
    }

    /// Replay has not moved for `stuck_after` while WAL past its position is in the
    /// spool (or the server complained about a record of a segment it was given).
    fn stuck(&mut self, stuck_after: Duration) -> Option<NotReplayable> {
        let complaint = self.read_complaints();
        let (lsn, since) = self.progress?;
        let at = lsn / self.segment_size;
        let fetched = spooled_segments(&self.spool);
        let last = self.state.last_segment.as_deref().and_then(|s| segment_number(s, self.segment_size));
        let waiting = last.is_some_and(|l| l > at);
        let complained = complaint.as_ref().filter(|c| {
            let n = c
                .segment
                .as_deref()
                .and_then(|s| segment_number(s, self.segment_size))
                .or(c.lsn.map(|l| l / self.segment_size));
            n.is_some_and(|n| n >= at && last.is_some_and(|l| l >= n))
        });
        if !(waiting || complained.is_some()) {
            self.waiting_since = None;
            return None;
        }
        // Stuck counts from when there was something to replay, not from the last move:
        // a segment that arrives after a quiet hour is not stuck the moment it lands.
        let waiting_since = *self.waiting_since.get_or_insert_with(Instant::now);
        let since = since.max(waiting_since);
        if since.elapsed() < stuck_after {
            return None;
        }
        let number = complained
            .and_then(|c| {
                c.segment
                    .as_deref()
                    .and_then(|s| segment_number(s, self.segment_size))
                    .or(c.lsn.map(|l| l / self.segment_size))
            })
            .unwrap_or(at);
        let segment = complained.and_then(|c| c.segment.clone()).unwrap_or_else(|| self.name_of(number, &fetched));
        let (reason, detail) = match complained {
            Some(c) => {
                ("corrupt", format!("replay stopped at {}: the server says {}", format_lsn(lsn), cut(&c.line, 400)))
            }
            None => (
                "stuck",
                format!(
                    "replay has not moved from {} for {}s while later WAL is there",
                    format_lsn(lsn),
                    since.elapsed().as_secs()
                ),
            ),
        };
        Some(NotReplayable { segment, reason, detail })
    }

    /// The WAL file name of segment `number`, on the timeline of the files fetched.
    fn name_of(&self, number: u64, fetched: &[String]) -> String {
        let per_log = 0x1_0000_0000u64 / self.segment_size;
        let suffix = format!("{:08X}{:08X}", number / per_log, number % per_log);
        if let Some(f) = fetched.iter().filter(|f| f[8..] == suffix).max() {
            return f.clone();
        }
        let tli = self.state.last_segment.as_deref().map_or("00000001", |s| &s[..8]);
        format!("{tli}{suffix}")
    }

    fn replay_segment_name(&self) -> String {
        match self.progress {
            Some((lsn, _)) => self.name_of(lsn / self.segment_size, &spooled_segments(&self.spool)),
            None => self.state.last_segment.clone().unwrap_or_default(),
        }
    }

    /// The server's newest complaint about a record since the last read of its log;
    /// kept until replay moves.
    fn read_complaints(&mut self) -> Option<Complaint> {
        use std::io::{Read, Seek, SeekFrom};
        let path = self.dir.join("postgres.log");
        if let Ok(mut f) = std::fs::OpenOptions::new().read(true).write(true).open(&path) {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            if len < self.log_offset {
                self.log_offset = 0;
            }
            // At most the last MiB of what is new.
            let from = self.log_offset.max(len.saturating_sub(1 << 20));
            let mut text = String::new();
            if f.seek(SeekFrom::Start(from)).is_ok() {
                let mut bytes = Vec::new();
                let _ = (&mut f).take(len - from).read_to_end(&mut bytes);
                text = String::from_utf8_lossy(&bytes).into_owned();
            }
            self.log_offset = len;
            if let Some(c) = text.lines().rev().find_map(complaint_of) {
                self.complaint = Some(c);
            }
            // The server appends for as long as it follows: read, the log is cut back
            // (it writes with O_APPEND, so it goes on at the new end).
            if len > MAX_LOG {
                let _ = f.set_len(0);
                self.log_offset = 0;
            }
        }
        self.complaint.clone()
    }

    /// Pauses replay (for validation at a fixed point) and says where it stopped.
    pub async fn pause(&mut self) -> Result<Paused, RestoreError> {
        use sqlx::Connection;
        let infra = |m: String| RestoreError::infra(Stage::Restore, m);
        let mut conn = sqlx::postgres::PgConnection::connect_with(&self.sandbox.connect_options("postgres"))
            .await
            .map_err(|e| infra(format!("cannot connect to the follower: {e}")))?;
        sqlx::query("select pg_catalog.pg_wal_replay_pause()")
            .execute(&mut conn)
            .await
            .map_err(|e| infra(format!("cannot pause replay: {e}")))?;
        self.paused = true;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let state: String = sqlx::query_scalar("select pg_catalog.pg_get_wal_replay_pause_state()")
                .fetch_one(&mut conn)
                .await
                .map_err(|e| infra(format!("cannot read the replay state: {e}")))?;
            if state == "paused" {
                break;
            }
            if Instant::now() > deadline {
                return Err(infra("replay did not pause within 60s".into()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (lsn, commit, xmax, system) = sqlx::query_as::<_, (Option<String>, Option<String>, Option<String>, Option<String>)>(
            "select pg_catalog.pg_last_wal_replay_lsn()::pg_catalog.text, \
             pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.pg_last_xact_replay_timestamp()), 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), \
             pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::pg_catalog.text, \
             (select s.system_identifier::pg_catalog.text from pg_catalog.pg_control_system() s)",
        )
        .fetch_one(&mut conn)
        .await
        .map_err(|e| infra(format!("cannot read the paused point: {e}")))?;
        let _ = conn.close().await;
        let horizon = match (xmax.and_then(|x| x.parse::<u64>().ok()), system) {
            (Some(next_xid), Some(system_identifier)) => {
                Some(crate::server::recovery::Horizon { next_xid, system_identifier })
            }
            _ => None,
        };
        Ok(Paused { lsn: lsn.unwrap_or_default(), commit, horizon })
    }

    /// Lets replay go on after [`Follower::pause`].
    pub async fn resume_replay(&mut self) -> Result<(), RestoreError> {
        use sqlx::Connection;
        let infra = |m: String| RestoreError::infra(Stage::Restore, m);
        let mut conn = sqlx::postgres::PgConnection::connect_with(&self.sandbox.connect_options("postgres"))
            .await
            .map_err(|e| infra(format!("cannot connect to the follower: {e}")))?;
        sqlx::query("select pg_catalog.pg_wal_replay_resume()")
            .execute(&mut conn)
            .await
            .map_err(|e| infra(format!("cannot resume replay: {e}")))?;
        let _ = conn.close().await;
        self.paused = false;
        // The pause is not a stall.
        if let Some((lsn, _)) = self.progress {
            self.progress = Some((lsn, Instant::now()));
        }
        Ok(())
    }
}

/// The lines of a server's log that say a record could not be read or replayed.
fn complaint_of(line: &str) -> Option<Complaint> {
    const SAID: [&str; 15] = [
        "has wrong size",
        "in history file",
        "invalid data in history file",
        "invalid record length at ",
        "incorrect resource manager data checksum",
        "invalid magic number",
        "invalid resource manager ID",
        "record with incorrect prev-link",
        "invalid record offset at ",
        "invalid contrecord length",
        "missing contrecord",
        "invalid info bits",
        "out-of-sequence timeline ID",
        "WAL file is from different database system",
        "PANIC:",
    ];
    if !SAID.iter().any(|s| line.contains(s)) {
        return None;
    }
    let lsn = line.split(" at ").nth(1).and_then(|rest| rest.split([':', ',', ' ']).next()).and_then(parse_lsn);
    // The WAL file it names, if it names one (`log segment 0000…`, `archive file "0000…"`).
    let segment = line.split(|c: char| !c.is_ascii_hexdigit()).find(|w| w.len() == 24).map(str::to_string);
    // The server's words quote what the archive holds (a history file's line): no
    // control character of it reaches a log, an alert or a terminal.
    let line: String = line.trim().chars().map(|c| if c.is_control() { '?' } else { c }).collect();
    Some(Complaint { line, lsn, segment })
}

/// `16/B374D848` as a number.
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (hi, lo) = text.trim().split_once('/')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

/// A number as `16/B374D848`.
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// The segment number of a WAL file name (timeline left out).
fn segment_number(name: &str, segment_size: u64) -> Option<u64> {
    if name.len() != 24 {
        return None;
    }
    let log = u64::from_str_radix(&name[8..16], 16).ok()?;
    let seg = u64::from_str_radix(&name[16..24], 16).ok()?;
    Some(log * (0x1_0000_0000 / segment_size) + seg)
}

/// Orders WAL file names by position, then timeline.
fn by_position(a: &str, b: &str) -> std::cmp::Ordering {
    (&a[8..], &a[..8]).cmp(&(&b[8..], &b[..8]))
}

/// The timeline histories (`XXXXXXXX.history`) in the spool.
fn spooled_histories(spool: &Path) -> Vec<String> {
    std::fs::read_dir(spool)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.len() == 16 && n.ends_with(".history"))
                .collect()
        })
        .unwrap_or_default()
}

/// The segments (24 hex digits) in the spool.
fn spooled_segments(spool: &Path) -> Vec<String> {
    std::fs::read_dir(spool)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.len() == 24 && n.chars().all(|c| c.is_ascii_hexdigit()))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether every file lies in one directory of the store (none nested deeper): then
/// keys sort as their names do, and a listing from a key on sees every later segment.
fn one_directory(files: &[ArchivedFile]) -> bool {
    let dir = |k: &str| k.rsplit_once('/').map(|(d, _)| d.to_string()).unwrap_or_default();
    let mut dirs = files.iter().map(|f| dir(&f.key));
    match dirs.next() {
        Some(first) => dirs.all(|d| d == first),
        None => false,
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// At most `max` characters of `text`, on one line and without control characters (what
/// it quotes may be the archive's).
fn cut(text: &str, max: usize) -> String {
    let clean: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    match clean.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &clean[..i]),
        None => clean,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsns_read_and_write_as_postgres_does() {
        assert_eq!(parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(format_lsn(0x16_B374_D848), "16/B374D848");
        assert_eq!(parse_lsn("nonsense"), None);
        assert_eq!(segment_number("000000010000000100000003", 16 << 20), Some(256 + 3));
        assert_eq!(segment_number("short", 16 << 20), None);
    }

    #[test]
    fn the_servers_complaints_name_the_record_and_the_segment() {
        let c = complaint_of("00000 LOG:  incorrect resource manager data checksum in record at 0/5000028").unwrap();
        assert_eq!(c.lsn, Some(0x500_0028));
        let c = complaint_of("00000 LOG:  invalid magic number 0000 in log segment 000000010000000000000007, offset 0")
            .unwrap();
        assert_eq!(c.segment.as_deref(), Some("000000010000000000000007"));
        let c = complaint_of(
            "XX000 FATAL:  archive file \"00000001000000000000000C\" has wrong size: 17825792 instead of 16777216",
        )
        .unwrap();
        assert_eq!(c.segment.as_deref(), Some("00000001000000000000000C"));
        let c = complaint_of("XX000 FATAL:  syntax error in history file: \x1b[31mred\x07").unwrap();
        assert!(!c.line.chars().any(char::is_control), "{:?}", c.line);
        assert!(complaint_of("00000 LOG:  restored log file \"000000010000000000000005\" from archive").is_none());
    }

    #[test]
    fn only_an_archive_in_one_directory_is_listed_from_a_key_on() {
        let f = |key: &str| ArchivedFile {
            name: key.rsplit('/').next().unwrap().into(),
            key: key.into(),
            size: 1,
            version: None,
        };
        let flat = [f("wal/000000010000000000000003.gz"), f("wal/00000002.history")];
        assert!(one_directory(&flat));
        // Nested (pgBackRest, barman-cloud, a wal-g layout): keys do not sort as names do.
        let nested = [f("a/0000000100000000/000000010000000000000003-ab.gz"), f("a/00000002.history")];
        assert!(!one_directory(&nested));
        assert!(!one_directory(&[]));
    }

    #[tokio::test]
    async fn a_listing_after_a_segment_holds_later_segments_and_later_timelines() {
        let store = crate::store::MemStore::new();
        for k in [
            "wal/00000001.history",
            "wal/000000010000000000000004.gz",
            "wal/000000010000000000000005",
            "wal/000000010000000000000006.gz",
            "wal/00000002.history",
            "wal/000000020000000000000006",
        ] {
            store.put(k, b"x".to_vec(), SystemTime::now());
        }
        let got: Vec<String> = crate::store::BackupStore::list_after(&store, "wal/", "wal/000000010000000000000005~")
            .await
            .unwrap()
            .into_iter()
            .map(|o| o.key)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(got, ["wal/000000010000000000000006.gz", "wal/00000002.history", "wal/000000020000000000000006"]);
    }
}
