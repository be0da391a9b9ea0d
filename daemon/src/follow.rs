//! `[target.follow]`: `drcheck daemon` keeps one restored copy per such target that
//! replays its WAL archive as it grows ([`drcheck_restore::Follower`]): seeded from the
//! newest base backup into `[sandbox] state_dir`, resumed where replay stopped after a
//! restart, seeded again after `reseed_after`, discarded when the target is removed.
//!
//! Every `interval` it lists the archive, fetches what is new and reads where replay
//! is; the metrics say how far (`drcheck_follow_*`), and the alerts fire when a segment
//! cannot be replayed (`DrcheckArchiveNotReplayable`, naming it) or what is replayable
//! is older than the RPO (`DrcheckArchiveBehind`).

use crate::alerts;
use crate::history::History;
use crate::metrics::Metrics;
use anyhow::{Context, anyhow, bail};
use drcheck_config::{Config, RecoveryTarget, TargetConfig};
use drcheck_restore::{
    BackupStore, Catalog, FollowStep, Follower, RestoreJob, SandboxOptions, Source, WalReplay, open_store,
};
use futures::FutureExt;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio_util::sync::CancellationToken;

/// What a follower needs of the daemon it runs in: its config (reloads included), the
/// history store, the metrics, its name in leases and the followers' shared state. The
/// daemon's `Shared` provides it; the follower never reaches further up.
pub(crate) trait FollowHost: Send + Sync + 'static {
    fn config(&self) -> Arc<Config>;
    fn history(&self) -> &History;
    fn metrics(&self) -> &Metrics;
    fn holder(&self) -> &str;
    fn followers(&self) -> &Followers;
}

/// The `reason` label of `drcheck_follow_not_replayable` for a gap the operator
/// acknowledged lost: `DrcheckArchiveNotReplayable` leaves it out.
const ACKNOWLEDGED_GAP: &str = "acknowledged_gap";

/// A backup tool's catalog is read again this often while following (the archive it
/// names changes with a stanza upgrade; the newest backup, for the next seed).
const CATALOG_EVERY: Duration = Duration::from_secs(3600);

/// The target's source and, for a backup tool's repository, its catalog — which names
/// the archive a follower reads.
struct SourceRead {
    source: Box<dyn Source>,
    catalog: Option<Catalog>,
    at: Instant,
}

/// What the status page shows of a follower.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct FollowView {
    pub state: String,
    pub seeded_from: Option<String>,
    pub seeded_at: Option<String>,
    pub replayed_lsn: Option<String>,
    pub replayed_commit: Option<String>,
    pub lag_seconds: Option<f64>,
    pub behind_bytes: Option<f64>,
    pub last_segment: Option<String>,
    pub newest_archived: Option<String>,
    pub problem: Option<String>,
    pub checked_at: Option<String>,
}

/// The followers running, by target.
#[derive(Default)]
pub(crate) struct Followers {
    running: Mutex<BTreeMap<String, Running>>,
    pub views: Mutex<BTreeMap<String, FollowView>>,
}

/// A follower, shared by its loop and the verifications that validate on it.
pub(crate) type Slot = Arc<tokio::sync::Mutex<Option<Follower>>>;

struct Running {
    slot: Slot,
    stop: CancellationToken,
    /// Set when the target was removed: the copy is discarded, not kept.
    removed: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Followers {
    /// Starts a follower for every target of `config` that follows and has none; stops
    /// (and discards) those whose target no longer follows.
    pub(crate) fn reconcile<H: FollowHost>(&self, shared: &Arc<H>, config: &Config) {
        let mut running = self.running.lock().unwrap();
        let wanted: Vec<&TargetConfig> = config.targets.iter().filter(|t| t.follow.is_some()).collect();
        let gone: Vec<String> =
            running.keys().filter(|name| !wanted.iter().any(|t| &t.name == *name)).cloned().collect();
        for name in gone {
            if let Some(r) = running.remove(&name) {
                r.removed.store(true, std::sync::atomic::Ordering::SeqCst);
                r.stop.cancel();
                self.views.lock().unwrap().remove(&name);
                shared.metrics().follow.forget("target", &name);
            }
        }
        for t in wanted {
            if running.contains_key(&t.name) {
                continue;
            }
            let stop = CancellationToken::new();
            let removed = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let slot: Slot = Arc::default();
            let task =
                tokio::spawn(follow(shared.clone(), t.name.clone(), slot.clone(), stop.clone(), removed.clone()));
            running.insert(t.name.clone(), Running { slot, stop, removed, task });
        }
    }

    /// The follower of `target`, when it follows.
    pub(crate) fn slot(&self, target: &str) -> Option<Slot> {
        self.running.lock().unwrap().get(target).map(|r| r.slot.clone())
    }

    /// Stops every follower; their copies are kept for the next start.
    pub(crate) async fn stop_all(&self) {
        let all: Vec<Running> = std::mem::take(&mut *self.running.lock().unwrap()).into_values().collect();
        for r in &all {
            r.stop.cancel();
        }
        for r in all {
            let _ = r.task.await;
        }
    }
}

/// Where the follower of `target` keeps its copy.
pub(crate) fn follow_dir(config: &Config, target: &str) -> Result<PathBuf, drcheck_restore::DirError> {
    Ok(drcheck_restore::ensure_follow_dir(&config.sandbox.state_dir)?.join(target))
}

/// Why a follower's directory cannot be had.
#[derive(Debug, thiserror::Error)]
enum LockError {
    #[error(transparent)]
    Dir(#[from] drcheck_restore::DirError),
    #[error("cannot open {}: {source}", path.display())]
    Open { path: PathBuf, source: std::io::Error },
    /// Another drcheck on this machine holds it: this one stands by.
    #[error("another drcheck process on this machine follows {target} in {}: standing by", dir.display())]
    HeldElsewhere { target: String, dir: PathBuf },
}

/// The lock of a follower's directory (`TARGET.lock` beside it): taken without waiting.
fn lock_dir(config: &Config, target: &str) -> Result<nix::fcntl::Flock<std::fs::File>, LockError> {
    let dir = follow_dir(config, target)?;
    let path = dir.with_extension("lock");
    let file = match std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path) {
        Ok(f) => f,
        Err(source) => return Err(LockError::Open { path, source }),
    };
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|_| LockError::HeldElsewhere { target: target.into(), dir })
}

fn options(config: &Config, target: &str) -> anyhow::Result<SandboxOptions> {
    let mut opts = crate::ids::sandbox_options(&config.sandbox, format!("follow-{target}"));
    opts.keep_at = Some(follow_dir(config, target)?);
    // A backup tool seeding the follower or fetching its next segment: bounded as a
    // run's restore is.
    if let Some(t) = config.target(target) {
        opts.tool_limit = Some(drcheck_restore::ToolLimit {
            within: t.rto.mul_f64(t.abort_factor),
            whose: "the restore's deadline: rto × abort_factor".into(),
        });
    }
    Ok(opts)
}

/// One target's follower, until `stop`.
async fn follow<H: FollowHost>(
    shared: Arc<H>,
    name: String,
    slot: Slot,
    stop: CancellationToken,
    removed: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut store: Option<Arc<dyn BackupStore>> = None;
    let mut problem_before: Option<(String, String)> = None;
    let mut held_elsewhere = false;
    let mut dir_lock: Option<nix::fcntl::Flock<std::fs::File>> = None;
    let mut primary_conn: Option<sqlx::postgres::PgConnection> = None;
    let mut source_read: Option<SourceRead> = None;
    loop {
        let config = shared.config();
        let Some(t) = config.target(&name).cloned() else { break };
        let Some(f) = t.follow.clone() else { break };
        let store = match &store {
            Some(s) => s.clone(),
            None => {
                let s = open_store(&t.storage, &config.storage[&t.storage]).await;
                store = Some(s.clone());
                s
            }
        };
        // One server per copy on this machine, whatever the history store says: the
        // directory's lock, held for as long as this task follows.
        if dir_lock.is_none() {
            match lock_dir(&config, &name) {
                Ok(l) => dir_lock = Some(l),
                Err(e) => {
                    shared.metrics().follow.up.with_label_values(&[&name]).set(0);
                    set_view(shared.as_ref(), &name, |v| {
                        v.state = "standing by".into();
                        v.problem = Some(e.to_string());
                    });
                    if !held_elsewhere {
                        tracing::warn!(target = %name, "{e}");
                        held_elsewhere = true;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(f.interval) => continue,
                        _ = stop.cancelled() => break,
                    }
                }
            }
        }
        // One follower per target across drcheck instances (a StatefulSet rolling over, two
        // daemons on one config): the lease `follow:TARGET`, renewed each interval, long
        // enough to seed.
        let lease = format!("follow:{name}");
        let ttl = (f.interval * 3 + Duration::from_secs(60)).max(crate::verify::run_budget(&t));
        match shared.history().lease_for(&lease, shared.holder(), ttl).await {
            Ok(crate::history::Leased::Held) => {
                let holder = shared.history().lease_holder(&lease).await.ok().flatten().unwrap_or_default();
                if !held_elsewhere {
                    tracing::warn!(target = %name, holder = %holder, "another drcheck follows this target: waiting for its lease");
                    held_elsewhere = true;
                }
                shared.metrics().follow.up.with_label_values(&[&name]).set(0);
                set_view(shared.as_ref(), &name, |v| {
                    v.state = "standing by".into();
                    v.problem = Some(format!("{holder} follows this target"));
                });
                // Our copy (if any) stops; kept for when the lease comes back.
                drop(slot.lock().await.take());
                tokio::select! {
                    _ = tokio::time::sleep(f.interval) => continue,
                    _ = stop.cancelled() => break,
                }
            }
            Ok(_) => held_elsewhere = false,
            Err(e) => tracing::warn!(target = %name, "cannot take the follower's lease (following anyway): {e:#}"),
        }
        // Held for the step: a verification validating on the follower holds it too.
        let mut follower = tokio::select! {
            f = slot.lock() => f,
            _ = stop.cancelled() => break,
        };
        let due_reseed = follower.as_ref().is_some_and(|fl| {
            humantime::parse_rfc3339(&fl.state().seeded_at)
                .is_ok_and(|at| SystemTime::now().duration_since(at).unwrap_or_default() > f.reseed_after)
        });
        if due_reseed {
            tracing::info!(target = %name, "the follower is older than reseed_after: seeding it again");
            if let Some(old) = follower.take() {
                old.discard();
                drcheck_restore::finish_teardowns();
            }
        }
        // The archive to follow: objects under `wal_prefix`, or the repository a backup
        // tool's catalog names (read by the tool, contained).
        let due_read = source_read.as_ref().is_none_or(|r| {
            r.at.elapsed() > CATALOG_EVERY || due_reseed || (r.source.reads_with_a_tool() && r.catalog.is_none())
        });
        if due_read {
            let run_id = crate::ids::new_run_id();
            match crate::verify::read_source(crate::ids::Settings::of(&config, &t), &t, &store, &run_id).await {
                Ok((source, catalog)) => source_read = Some(SourceRead { source, catalog, at: Instant::now() }),
                Err(e) => tracing::warn!(target = %name, "cannot read the repository's catalog: {e}"),
            }
        }
        if follower.is_none() {
            set_view(shared.as_ref(), &name, |v| v.state = "starting".into());
            // A panic in here is drcheck's bug: logged, the follower down, tried again
            // next interval — never the end of following, nor of the daemon.
            let catalog = source_read.as_ref().and_then(|r| r.catalog.as_ref());
            let opened =
                AssertUnwindSafe(open_or_seed(&config, &t, &store, catalog)).catch_unwind().await.unwrap_or_else(
                    |_| Err(anyhow::anyhow!("drcheck failed while starting the follower (a bug: see the log)")),
                );
            match opened {
                Ok(fl) => {
                    if let Some(at) = humantime::parse_rfc3339(&fl.state().seeded_at).ok().and_then(unix) {
                        shared.metrics().follow.seeded.with_label_values(&[&name]).set(at);
                    }
                    set_view(shared.as_ref(), &name, |v| {
                        v.seeded_from = Some(fl.state().backup.clone());
                        v.seeded_at = Some(fl.state().seeded_at.clone());
                    });
                    *follower = Some(fl);
                }
                Err(e) => {
                    tracing::warn!(target = %name, "the follower cannot start: {e:#}");
                    shared.metrics().follow.up.with_label_values(&[&name]).set(0);
                    set_view(shared.as_ref(), &name, |v| {
                        v.state = "down".into();
                        v.problem = Some(format!("{e:#}"));
                    });
                }
            }
        }
        let archive = source_read.as_ref().and_then(|r| r.source.archive(r.catalog.as_ref()));
        if let (Some(fl), None) = (follower.as_mut(), archive) {
            // The catalog could not be read: the world's, said as such.
            let step = FollowStep {
                unreachable: Some(
                    "the repository's catalog cannot be read (see the log): its archive is not known".into(),
                ),
                ..Default::default()
            };
            report(shared.as_ref(), &config, &t, fl, &step, None, &mut problem_before).await;
        } else if let (Some(fl), Some(archive)) = (follower.as_mut(), archive) {
            match AssertUnwindSafe(fl.step(archive, &store, f.interval * 2)).catch_unwind().await {
                Ok(step) => {
                    let behind = primary_behind(&t, step.replayed_lsn, &mut primary_conn).await;
                    report(shared.as_ref(), &config, &t, fl, &step, behind, &mut problem_before).await;
                }
                Err(_) => {
                    tracing::error!(target = %name, "drcheck failed while following (a bug): the follower is restarted");
                    shared.metrics().follow.up.with_label_values(&[&name]).set(0);
                    *follower = None;
                }
            }
        }
        drop(follower);
        tokio::select! {
            _ = tokio::time::sleep(f.interval) => {}
            _ = stop.cancelled() => break,
        }
    }
    let follower = slot.lock().await.take();
    let _ = shared.history().release_lease(&format!("follow:{name}"), shared.holder()).await;
    if let Some(fl) = follower {
        if removed.load(std::sync::atomic::Ordering::SeqCst) {
            tracing::info!(target = %name, "the target no longer follows: its copy is removed");
            let dir = fl.dir().to_path_buf();
            fl.discard();
            let _ = std::fs::remove_file(dir.with_extension("lock"));
        } else {
            drop(fl);
        }
    } else if removed.load(std::sync::atomic::Ordering::SeqCst)
        && let Ok(dir) = follow_dir(&shared.config(), &name)
        && dir.exists()
    {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The follower kept in the target's directory, or a new one seeded from the newest
/// base backup (of the tool's `catalog`, for a backup tool's repository).
async fn open_or_seed(
    config: &Config,
    t: &TargetConfig,
    store: &Arc<dyn BackupStore>,
    catalog: Option<&Catalog>,
) -> anyhow::Result<Follower> {
    let opts = options(config, &t.name)?;
    match Follower::resume(&opts, crate::verify::binaries(&config.sandbox)).await {
        Ok(Some(fl)) => {
            tracing::info!(target = %t.name, backup = %fl.state().backup, "follower resumed where replay stopped");
            return Ok(fl);
        }
        Ok(None) => {}
        Err(e) => {
            // A copy that does not start again is seeded anew rather than left broken.
            tracing::warn!(target = %t.name, "the follower's copy did not start again ({e}): seeding it anew");
        }
    }
    let dir = opts.keep_at.clone().unwrap_or_default();
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    seed(config, t, store, opts, catalog).await
}

async fn seed(
    config: &Config,
    t: &TargetConfig,
    store: &Arc<dyn BackupStore>,
    opts: SandboxOptions,
    catalog: Option<&Catalog>,
) -> anyhow::Result<Follower> {
    let mut chain = Vec::new();
    let backup = match catalog {
        // The tool's newest backup it calls good.
        Some(c) => c
            .restorable
            .iter()
            .rev()
            .find(|b| b.catalog.as_ref().is_some_and(|e| e.status.is_ok()))
            .cloned()
            .ok_or_else(|| anyhow!("no backup {} marks good to seed the follower from", c.described))?,
        None if !matches!(t.source, drcheck_config::SourceConfig::Objects) => {
            bail!("the repository's catalog cannot be read (see the log): nothing to seed from");
        }
        None => {
            let listed = store.list(&t.prefix).await.context("cannot list the backups")?;
            let backups = drcheck_restore::backups_newest_first(&listed);
            let newest = backups.iter().find(|b| b.key.ends_with('/')).cloned().ok_or_else(|| {
                anyhow!(
                    "no base backup under {:?} to seed the follower from (a follower starts from a physical base backup)",
                    t.prefix
                )
            })?;
            // An incremental backup is seeded with its whole chain.
            chain = drcheck_restore::chain_links(store.as_ref(), &backups, &newest).await?;
            newest
        }
    };
    let dir = opts.keep_at.clone().unwrap_or_default();
    let (ceiling, free) = crate::verify::check_disk_in(dir.parent().unwrap_or(&dir), &config.sandbox, &backup)
        .map_err(|s| anyhow!(s.message))?;
    let started = std::time::Instant::now();
    tracing::info!(target = %t.name, backup = %backup.key, "seeding the follower");
    let job = RestoreJob {
        store: store.clone(),
        backup: &backup,
        fetch: crate::ids::fetch_options(&config.storage[&t.storage]),
        sandbox: opts,
        bins: crate::verify::binaries(&config.sandbox),
        format: t.format,
        jobs: t.restore_jobs,
        globals_key: None,
        wal: Some(WalReplay {
            prefix: t.wal_prefix.clone().unwrap_or_default(),
            target: RecoveryTarget::Latest,
            standby: true,
        }),
        delegated: catalog.map(|c| c.repository.clone()),
        chain,
        recovery_target: RecoveryTarget::Latest,
        database_hint: t.primary.as_ref().and_then(|p| crate::verify::database_of(p.expose())),
        events: drcheck_restore::Events::none(),
        max_write_bytes: ceiling.min(free).max(1 << 20),
        expansion_ceiling: ceiling,
        decrypt: &t.decrypt,
        delta: false,
    };
    let restored = drcheck_restore::run(&job).await.with_context(|| format!("seeding from {}", backup.key))?;
    if !restored.physical {
        bail!("{} is not a physical base backup: a follower replays WAL onto one", backup.key);
    }
    let fl = Follower::seeded(restored, &backup.key, crate::verify::binaries(&config.sandbox))?;
    tracing::info!(target = %t.name, backup = %backup.key, seconds = started.elapsed().as_secs_f64(), "follower seeded");
    Ok(fl)
}

/// The primary's current WAL position less `replayed`, where a primary is configured
/// and answers within ten seconds. The connection is kept between steps (`conn`): one
/// login per interval would cost the primary an authentication every time.
async fn primary_behind(
    t: &TargetConfig,
    replayed: Option<u64>,
    conn: &mut Option<sqlx::postgres::PgConnection>,
) -> Option<f64> {
    use sqlx::Connection;
    let (url, replayed) = (t.primary.as_ref()?, replayed?);
    let asked = async {
        if conn.is_none() {
            *conn = Some(sqlx::postgres::PgConnection::connect(url.expose()).await.ok()?);
        }
        let c = conn.as_mut()?;
        let lsn: Result<Option<String>, _> =
            sqlx::query_scalar("select pg_catalog.pg_current_wal_lsn()::pg_catalog.text").fetch_one(c).await;
        match lsn {
            Ok(lsn) => drcheck_restore::parse_lsn(&lsn?),
            Err(_) => {
                *conn = None;
                None
            }
        }
    };
    match tokio::time::timeout(Duration::from_secs(10), asked).await {
        Ok(Some(current)) => Some(current.saturating_sub(replayed) as f64),
        Ok(None) => None,
        Err(_) => {
            *conn = None;
            None
        }
    }
}

fn unix(t: SystemTime) -> Option<f64> {
    t.duration_since(SystemTime::UNIX_EPOCH).ok().map(|d| d.as_secs_f64())
}

fn set_view<H: FollowHost>(shared: &H, name: &str, f: impl FnOnce(&mut FollowView)) {
    let mut views = shared.followers().views.lock().unwrap();
    f(views.entry(name.to_string()).or_default());
}

/// A step into the metrics, the status page and the alerts.
async fn report<H: FollowHost>(
    shared: &H,
    config: &Config,
    t: &TargetConfig,
    fl: &Follower,
    step: &FollowStep,
    behind: Option<f64>,
    problem_before: &mut Option<(String, String)>,
) {
    let m = &shared.metrics().follow;
    let name = t.name.as_str();
    m.segments_replayed_total.with_label_values(&[name]).inc_by(step.replayed_segments);
    m.fetched_bytes_total.with_label_values(&[name]).inc_by(step.fetched_bytes);
    let commit = step.replayed_commit.and_then(unix);
    if let Some(c) = commit {
        // Freshness only moves forward.
        let g = m.replayed_commit.with_label_values(&[name]);
        if c > g.get() {
            g.set(c);
        }
    }
    if let Some(b) = behind {
        m.behind_bytes.with_label_values(&[name]).set(b);
    }
    let up = step.problem.is_none() && step.unreachable.is_none() && fl.sandbox().has_server();
    m.up.with_label_values(&[name]).set(i64::from(up));
    let history = &shared.history();
    // A gap the operator acknowledged lost (issue 48): named, never paged.
    let acknowledged = match &step.problem {
        Some(p) if p.reason == "gap" => history
            .acks(name, crate::history::WAL_GAP)
            .await
            .unwrap_or_default()
            .into_iter()
            .find(|a| a.covers_segment(&p.segment)),
        _ => None,
    };
    let now =
        problem_now(step).map(|(s, r)| if acknowledged.is_some() { (s, ACKNOWLEDGED_GAP.to_string()) } else { (s, r) });
    if *problem_before != now {
        if let Some((segment, reason)) = problem_before.take() {
            let _ = m.not_replayable.remove_label_values(&[name, &segment, &reason]);
        }
        if let Some((segment, reason)) = &now {
            m.not_replayable.with_label_values(&[name, segment, reason]).set(1);
        }
        *problem_before = now;
    }
    let sinks: Vec<String> = config.alerts.iter().map(|a| a.name.clone()).collect();
    match &step.problem {
        Some(p) if let Some(a) = &acknowledged => {
            tracing::info!(target = %name, segment = %p.segment, acknowledgement = %a.describe(), "the follower stands at an acknowledged gap in the archive: reseed it from a base backup taken after the gap");
            let desc = format!("WAL segment {} of {name}: a gap acknowledged lost ({})", p.segment, a.describe());
            let _ = history.resolve(name, alerts::ARCHIVE_NOT_REPLAYABLE, &desc, &sinks).await;
        }
        Some(p) => {
            tracing::warn!(target = %name, segment = %p.segment, reason = p.reason, detail = %p.detail, "the archive cannot be replayed");
            let desc = format!("WAL segment {} of {name} cannot be replayed ({}): {}", p.segment, p.reason, p.detail);
            if let Err(e) = history.raise(name, alerts::ARCHIVE_NOT_REPLAYABLE, &desc, &sinks).await {
                tracing::warn!(target = %name, "cannot raise {}: {e:#}", alerts::ARCHIVE_NOT_REPLAYABLE);
            }
        }
        None if step.unreachable.is_none() && step.replayed_segments > 0 => {
            let desc = format!("replay of {name} moved on");
            let _ = history.resolve(name, alerts::ARCHIVE_NOT_REPLAYABLE, &desc, &sinks).await;
        }
        None => {}
    }
    if step.fetched > 0 || step.replayed_segments > 0 {
        tracing::info!(
            target = %name,
            fetched = step.fetched,
            replayed = step.replayed_segments,
            last = fl.state().last_segment.as_deref().unwrap_or("-"),
            "following"
        );
    }
    if let Some(u) = &step.unreachable {
        tracing::warn!(target = %name, "the follower could not check its archive: {u}");
    }
    // What is replayable older than the RPO (the commit's age, as the RPO measures).
    let age = commit.map(|c| unix(SystemTime::now()).unwrap_or_default() - c);
    match age {
        Some(a) if a > t.rpo.as_secs_f64() => {
            let desc = format!(
                "the newest commit {name}'s follower could replay is {a:.0}s old; the RPO is {}",
                drcheck_config::format_duration(t.rpo)
            );
            let _ = history.raise(name, alerts::ARCHIVE_BEHIND, &desc, &sinks).await;
        }
        Some(_) => {
            let _ = history
                .resolve(name, alerts::ARCHIVE_BEHIND, &format!("{name}'s follower is within its RPO"), &sinks)
                .await;
        }
        None => {}
    }
    set_view(shared, name, |v| {
        v.state = if up {
            "following".into()
        } else if acknowledged.is_some() {
            "at an acknowledged gap".into()
        } else if step.problem.is_some() {
            "not replayable".into()
        } else {
            "degraded".into()
        };
        v.replayed_lsn = step.replayed_lsn.map(drcheck_restore::format_lsn).or(v.replayed_lsn.take());
        if let Some(c) = step.replayed_commit {
            v.replayed_commit = Some(humantime::format_rfc3339_millis(c).to_string());
        }
        v.lag_seconds = age.or(v.lag_seconds);
        v.behind_bytes = behind;
        v.last_segment = fl.state().last_segment.clone();
        v.newest_archived = step.newest_archived.clone().or(v.newest_archived.take());
        v.problem = step
            .problem
            .as_ref()
            .map(|p| match &acknowledged {
                Some(a) => format!("{} (gap, acknowledged lost — {}): {}", p.segment, a.describe(), p.detail),
                None => format!("{} ({}): {}", p.segment, p.reason, p.detail),
            })
            .or_else(|| step.unreachable.clone());
        v.checked_at = Some(humantime::format_rfc3339_seconds(SystemTime::now()).to_string());
        v.seeded_from = Some(fl.state().backup.clone());
        v.seeded_at = Some(fl.state().seeded_at.clone());
    });
}

fn problem_now(step: &FollowStep) -> Option<(String, String)> {
    step.problem.as_ref().map(|p| (p.segment.clone(), p.reason.to_string()))
}
