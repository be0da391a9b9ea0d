//! `drcheck daemon`: verifies targets on their schedules, serves `/metrics`,
//! `/healthz`, `/readyz` and the trigger API, delivers alerts, raises stale alerts.
//!
//! Shutdown is a parameter (a token), so tests can stop it: on SIGTERM/SIGINT the
//! daemon stops scheduling, gives runs in flight a grace period, then cancels them —
//! their sandboxes are torn down and they are recorded as `aborted` — and returns.
//! SIGHUP reloads the config, keeping the old one if the new one is invalid.

mod auth;
mod http;
pub(crate) mod schedule;
mod serve;
mod status;

use crate::dispatch::Dispatcher;
use crate::follow;
use crate::history::History;
use crate::metrics::Metrics;
use crate::progress::Progress;
use crate::verify;
use anyhow::Context as _;
use drcheck_config::Config;
use schedule::{Entry, Running, SystemClock};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long runs in flight may go on after a shutdown signal before they are cancelled.
const GRACE: Duration = Duration::from_secs(5);

/// What every part of the daemon shares.
pub(crate) struct Shared {
    pub config: RwLock<Arc<Config>>,
    pub config_path: PathBuf,
    pub history: History,
    pub metrics: Metrics,
    /// Bulkhead: at most `max_concurrent_restores` restores at once.
    pub restores: Arc<Semaphore>,
    /// Its size now (a reload resizes it).
    pub restores_size: std::sync::Mutex<usize>,
    /// Fires when shutdown begins: runs still queued for the bulkhead are dropped.
    pub stopping: CancellationToken,
    pub running: Running,
    /// This process's name in leases.
    pub holder: String,
    pub tracker: TaskTracker,
    /// Cancels runs in flight (after the grace period).
    pub runs_cancel: CancellationToken,
    /// Runs the trigger API accepted and that are not recorded yet: run id → target.
    pub triggered: std::sync::Mutex<std::collections::HashMap<String, String>>,
    /// The targets' followers (`[target.follow]`).
    pub followers: crate::follow::Followers,
}

impl crate::follow::FollowHost for Shared {
    fn config(&self) -> Arc<Config> {
        Shared::config(self)
    }
    fn history(&self) -> &History {
        &self.history
    }
    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
    fn holder(&self) -> &str {
        &self.holder
    }
    fn followers(&self) -> &crate::follow::Followers {
        &self.followers
    }
}

impl Shared {
    pub(crate) fn config(&self) -> Arc<Config> {
        self.config.read().unwrap().clone()
    }

    /// Resizes the bulkhead to `size`: more permits at once; fewer as runs holding
    /// them finish (the surplus is taken and forgotten).
    fn resize_bulkhead(&self, size: usize) {
        let mut now = self.restores_size.lock().unwrap();
        if size > *now {
            self.restores.add_permits(size - *now);
        } else if size < *now {
            let (sem, fewer) = (self.restores.clone(), (*now - size) as u32);
            tokio::spawn(async move {
                if let Ok(p) = sem.acquire_many_owned(fewer).await {
                    p.forget();
                }
            });
        }
        *now = size;
    }
}

/// Why a run of a target did not start (it is then not a run, and not recorded as one).
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotRun {
    #[error("no target {0:?}")]
    UnknownTarget(String),
    /// Queued behind the bulkhead when shutdown began.
    #[error("shutting down: the queued run was dropped, not started")]
    ShuttingDown,
    /// Another instance holds the target's lease (who, when it can say).
    #[error("another instance is verifying this target{}", .0.as_ref().map(|w| format!(" ({w} holds its lease)")).unwrap_or_default())]
    Busy(Option<String>),
    #[error("lease: {0:#}")]
    Lease(anyhow::Error),
}

/// Runs one verification of `target` under the bulkhead and the lease, records it
/// (with its alerts) and updates the metrics; or says why it did not run.
pub(crate) async fn run_target(shared: Arc<Shared>, target: String, run_id: String) -> Result<(), NotRun> {
    let config = shared.config();
    let Some(t) = config.target(&target).cloned() else { return Err(NotRun::UnknownTarget(target)) };
    // Queued behind the bulkhead when shutdown begins: dropped, not started (and so
    // not recorded as an aborted run).
    let _permit = tokio::select! {
        biased;
        _ = shared.stopping.cancelled() => return Err(NotRun::ShuttingDown),
        p = shared.restores.clone().acquire_owned() => p.map_err(|_| NotRun::ShuttingDown)?,
    };
    if shared.stopping.is_cancelled() {
        return Err(NotRun::ShuttingDown);
    }
    let ttl = crate::verify::lease_ttl(&t);
    let took_over = match shared.history.lease_for(&target, &shared.holder, ttl).await {
        Ok(crate::history::Leased::Taken) => None,
        Ok(crate::history::Leased::TookOver(previous)) => Some(previous),
        Ok(crate::history::Leased::Held) => {
            let why = NotRun::Busy(shared.history.lease_holder(&target).await.ok().flatten());
            tracing::warn!(target = %target, run_id = %run_id, reason = %why, "run skipped");
            return Err(why);
        }
        Err(e) => return Err(NotRun::Lease(e)),
    };
    verify::run_begins(&shared.history, &t, &run_id, &shared.holder, took_over.as_deref()).await;
    shared.metrics.runs_in_flight.inc();
    let report = match on_follower(&shared, &config, &t).await {
        Some(slot) => {
            let mut follower = slot.lock().await;
            match follower.as_mut() {
                Some(fl) => {
                    verify::verify_on_follower(run_id, &config, &t, fl, &shared.history, &shared.runs_cancel).await
                }
                None => {
                    drop(follower);
                    verify::verify_as(
                        run_id,
                        &config,
                        &t,
                        None,
                        &shared.history,
                        &shared.runs_cancel,
                        &Progress::new(false),
                    )
                    .await
                }
            }
        }
        None => {
            verify::verify_as(run_id, &config, &t, None, &shared.history, &shared.runs_cancel, &Progress::new(false))
                .await
        }
    };
    shared.metrics.runs_in_flight.dec();
    shared.metrics.observe(&report, &t);
    let sinks: Vec<String> = config.alerts.iter().map(|a| a.name.clone()).collect();
    if let Err(e) = shared.history.record_with_alerts(&report, &sinks).await {
        tracing::error!(target = %target, run_id = %report.run_id, "cannot record the run: {e:#}");
    }
    let _ = shared.history.release_lease(&target, &shared.holder).await;
    // What another drcheck (a CronJob's, killed) left meanwhile: not kept until this
    // target's next run.
    crate::reaper::reap_orphans(&config.sandbox.scratch_dir).await;
    if let Err(e) = shared.history.prune(config.state.keep_runs).await {
        tracing::warn!("pruning history: {e:#}");
    }
    Ok(())
}

/// Whether this run of a following target validates on its follower: only when every
/// restorable backup was proven by a restore within `prove_within` — a backup due for
/// its proof is restored (amcheck and the settings reset included), the rotation going
/// on; the follower is used between.
async fn on_follower(shared: &Shared, config: &Config, t: &drcheck_config::TargetConfig) -> Option<follow::Slot> {
    t.follow.as_ref()?;
    let slot = shared.followers.slot(&t.name)?;
    match verify::coverage_now(crate::ids::Settings::of(config, t), t, &shared.history).await {
        Ok(c) if c.restorable > 0 && c.proven >= c.restorable => Some(slot),
        Ok(c) => {
            tracing::info!(target = %t.name, proven = c.proven, restorable = c.restorable, "a backup is due for its proof: a full restore, not the follower");
            None
        }
        Err(e) => {
            tracing::warn!(target = %t.name, "cannot tell which backups are proven ({e:#}): a full restore");
            None
        }
    }
}

/// Schedule entries of repository checks are named `integrity:TARGET`.
const INTEGRITY: &str = "integrity:";

fn entries(config: &Config) -> Vec<Entry> {
    let restores = config.targets.iter().filter_map(|t| Some((t.name.clone(), t.schedule.as_ref()?, t.jitter)));
    let checks = config
        .targets
        .iter()
        .filter_map(|t| Some((format!("{INTEGRITY}{}", t.name), t.integrity_schedule.as_ref()?, t.jitter)));
    let canary = config.daemon.canary.as_ref().map(|s| (CANARY.to_string(), s, std::time::Duration::ZERO));
    restores.chain(checks).chain(canary).map(|(name, s, jitter)| Entry::new(&name, s, jitter)).collect()
}

/// The schedule entry of the canary (`[daemon] canary`): every target, one after another.
const CANARY: &str = "canary:";

/// A scheduled canary of every target, each under the bulkhead (it restores like a
/// run); recorded apart from the runs, paged through the outbox.
async fn canary_all(shared: Arc<Shared>) {
    let config = shared.config();
    for t in &config.targets {
        let _permit = tokio::select! {
            biased;
            _ = shared.stopping.cancelled() => return,
            p = shared.restores.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
        };
        let mut report = crate::canary::run_canary(&config, t, &shared.history, &shared.runs_cancel).await;
        crate::canary::finish(&config, &shared.history, Some(&shared.metrics), &mut report, &shared.runs_cancel).await;
    }
}

/// A scheduled repository check: the `repository` validator, no restore, no lease (it
/// only reads the repository); its verdict goes to the metrics and the log.
async fn check_target(shared: Arc<Shared>, target: &str) {
    let config = shared.config();
    let Some(t) = config.target(target) else { return };
    let finding = verify::integrity_only(crate::ids::Settings::of(&config, t), t, Some(&shared.history)).await;
    shared.metrics.observe_integrity(target, &finding);
    match finding.status {
        drcheck_validators::Status::Passed => {
            tracing::info!(target, detail = %finding.detail, "repository check passed")
        }
        _ => {
            tracing::warn!(target, status = finding.status.as_str(), detail = %finding.detail, "repository check did not pass")
        }
    }
}

/// A message of several lines as one: its lines trimmed and joined, the lines that only
/// point at a column (`|`, `^^^`) left out.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.chars().all(|c| matches!(c, '|' | '^' | ' ')))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `config` with only the targets named in `only` (all when it is empty); a name the
/// config does not have is an error naming it.
pub(crate) fn only_targets(mut config: Config, only: &[String]) -> Result<Config, NoSuchTarget> {
    if only.is_empty() {
        return Ok(config);
    }
    if let Some(missing) = only.iter().find(|n| config.target(n).is_none()) {
        let known = config.targets.iter().map(|t| t.name.clone()).collect();
        return Err(NoSuchTarget { name: missing.clone(), known });
    }
    config.targets.retain(|t| only.contains(&t.name));
    Ok(config)
}

/// A `--target` the config does not have.
#[derive(Debug, thiserror::Error)]
#[error("--target {name:?}: the config has no such target (it has: {})", .known.join(", "))]
pub(crate) struct NoSuchTarget {
    pub name: String,
    pub known: Vec<String>,
}

/// Runs the daemon until `shutdown` fires. `reload` fires on SIGHUP.
pub(crate) async fn run(
    config: Config,
    only: Vec<String>,
    shutdown: CancellationToken,
    mut reload: tokio::sync::mpsc::Receiver<()>,
) -> anyhow::Result<()> {
    let history = History::open(&config.state.url).await?;
    let listen: std::net::SocketAddr = config.metrics.listen.parse().context("metrics.listen")?;
    let shared = Arc::new(Shared {
        restores: Arc::new(Semaphore::new(config.daemon.max_concurrent_restores)),
        restores_size: std::sync::Mutex::new(config.daemon.max_concurrent_restores),
        stopping: CancellationToken::new(),
        config_path: config.path.clone(),
        config: RwLock::new(Arc::new(config)),
        history,
        metrics: Metrics::new(),
        running: Default::default(),
        holder: crate::history::lease_holder_name("daemon"),
        tracker: TaskTracker::new(),
        runs_cancel: CancellationToken::new(),
        triggered: Default::default(),
        followers: Default::default(),
    });
    let config = shared.config();
    // Sandboxes and canaries a drcheck killed outright left: gone before anything runs.
    crate::reaper::reap_orphans(&config.sandbox.scratch_dir).await;
    shared.metrics.init(&config);
    shared.metrics.config_loaded(true);
    shared.metrics.seed_from_history(&config, &shared.history).await;
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    let nofile = serve::raise_nofile_limit();
    let max_connections = serve::max_connections(nofile);
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        config = %shared.config_path.display(),
        %listen,
        max_connections,
        targets = config.targets.len(),
        "daemon listening"
    );
    for t in &config.targets {
        let next = t.schedule.as_ref().and_then(|s| s.next_after(chrono::Utc::now()));
        match next {
            Some(at) => tracing::info!(target = %t.name, next_run = %at.to_rfc3339(), "scheduled"),
            None => tracing::info!(target = %t.name, "on demand (no schedule)"),
        }
    }
    let http_stop = CancellationToken::new();
    let server = {
        let (app, stop) = (http::router(shared.clone()), http_stop.clone());
        tokio::spawn(serve::serve(listener, app, stop, max_connections))
    };
    let background = CancellationToken::new();
    let dispatcher = tokio::spawn(dispatch_loop(shared.clone(), background.clone()));
    let stale = tokio::spawn(stale_loop(shared.clone(), background.clone()));
    let heartbeat = {
        let (sh, metrics) = (shared.clone(), shared.metrics.heartbeat.clone());
        tokio::spawn(crate::heartbeat::writer_loop(move || sh.config(), background.clone(), metrics))
    };
    // drcheck's journal of every target's primary horizon, every journal_interval.
    let journal = {
        let (sh, stop) = (shared.clone(), background.clone());
        tokio::spawn(async move { crate::journal::sampler_loop(|| sh.config(), &sh.history, stop).await })
    };
    // Every target's coverage from the start, so DrcheckBackupsUnproven can fire for a
    // target that has not run yet.
    let names: Vec<String> = config.targets.iter().map(|t| t.name.clone()).collect();
    tokio::spawn(coverage_refresh(shared.clone(), names, background.clone()));
    shared.followers.reconcile(&shared, &config);

    let mut pending = schedule::pending(&schedule::Pending::new(), &entries(&config), chrono::Utc::now());
    loop {
        let sched_stop = CancellationToken::new();
        let sh = shared.clone();
        let runner: schedule::Runner = Arc::new(move |t: String| {
            let sh = sh.clone();
            Box::pin(async move {
                if let Some(name) = t.strip_prefix(INTEGRITY) {
                    return check_target(sh, name).await;
                }
                if t == CANARY {
                    return canary_all(sh).await;
                }
                if let Err(e) = run_target(sh, t.clone(), crate::ids::new_run_id()).await {
                    tracing::warn!(target = %t, "scheduled run did not start: {e}");
                }
            })
        });
        let m = shared.clone();
        let on_fire: schedule::OnFire = Arc::new(move |t: &str, started: bool| {
            if started && !t.starts_with(INTEGRITY) && t != CANARY {
                m.metrics.scheduled_runs_total.with_label_values(&[t]).inc();
            }
        });
        let sched = tokio::spawn(schedule::run(
            std::mem::take(&mut pending),
            Arc::new(SystemClock),
            runner,
            shared.running.clone(),
            shared.tracker.clone(),
            sched_stop.clone(),
            on_fire,
        ));
        tokio::select! {
            _ = shutdown.cancelled() => {
                shared.stopping.cancel();
                sched_stop.cancel();
                let _ = sched.await;
                break;
            }
            Some(()) = reload.recv() => {
                sched_stop.cancel();
                // What was pending: an unchanged target keeps its next firing.
                let before = sched.await.unwrap_or_default();
                let path = shared.config_path.clone();
                let old = shared.config();
                match drcheck_config::load(&path).map_err(anyhow::Error::from).and_then(|c| Ok(only_targets(c, &only)?)) {
                    Ok(new) => {
                        tracing::info!(path = %path.display(), targets = new.targets.len(), "config reloaded");
                        shared.metrics.config_loaded(true);
                        pending = schedule::pending(&before, &entries(&new), chrono::Utc::now());
                        // The new config first: a coverage refresh still running from before
                        // sees a removed target gone once it has written (coverage_refresh).
                        let new = Arc::new(new);
                        *shared.config.write().unwrap() = new.clone();
                        shared.metrics.forget_removed(&old, &new);
                        shared.metrics.init(&new);
                        let added: Vec<String> =
                            new.targets.iter().filter(|t| old.target(&t.name).is_none()).map(|t| t.name.clone()).collect();
                        tokio::spawn(coverage_refresh(shared.clone(), added, background.clone()));
                        shared.resize_bulkhead(new.daemon.max_concurrent_restores);
                        shared.followers.reconcile(&shared, &new);
                    }
                    Err(e) => {
                        // One line (a TOML error points at its text over several).
                        tracing::error!(
                            reason = %one_line(&e.to_string()),
                            "config reload failed, keeping the running config"
                        );
                        shared.metrics.config_loaded(false);
                        pending = before;
                    }
                }
            }
        }
    }

    // Shutdown: no new runs; runs in flight get a grace period, then are cancelled.
    tracing::info!("shutting down: {} run(s) in flight", shared.running.lock().unwrap().len());
    shared.tracker.close();
    if tokio::time::timeout(GRACE, shared.tracker.wait()).await.is_err() {
        shared.runs_cancel.cancel();
        shared.tracker.wait().await;
    }
    // Followers stop their servers and keep their copies for the next start.
    shared.followers.stop_all().await;
    http_stop.cancel();
    background.cancel();
    let _ = server.await;
    let _ = dispatcher.await;
    let _ = stale.await;
    let _ = heartbeat.await;
    let _ = journal.await;
    // One last delivery round for the alerts the final runs raised.
    let config = shared.config();
    let d = Dispatcher::new(&shared.history, &config.alerts, Some(&shared.metrics));
    let _ = d.drain(Duration::from_secs(5), &CancellationToken::new()).await;
    Ok(())
}

/// Lists each of `targets` and sets its coverage gauges from the proof records, a few at
/// a time, each within a bound; a target that cannot be listed is left to its first run.
async fn coverage_refresh(shared: Arc<Shared>, targets: Vec<String>, stop: CancellationToken) {
    use futures::stream::{self, StreamExt};
    let config = shared.config();
    let work = stream::iter(targets)
        .map(|name| {
            let (config, shared) = (config.clone(), shared.clone());
            async move {
                let Some(t) = config.target(&name) else { return };
                match tokio::time::timeout(Duration::from_secs(120), verify::coverage_now(crate::ids::Settings::of(&config, t), t, &shared.history)).await {
                    Ok(Ok(c)) => {
                        shared.metrics.show_coverage(&name, &c);
                        // A reload may have removed the target meanwhile (it set the new
                        // config before dropping the removed series): drop its series again.
                        let now = shared.config();
                        if now.target(&name).is_none() {
                            shared.metrics.forget_removed(&config, &now);
                        }
                    }
                    Ok(Err(e)) => tracing::info!(target = %name, "coverage not known until its first run: {e}"),
                    Err(_) => tracing::info!(target = %name, "coverage not known until its first run: listing took over 2 minutes"),
                }
            }
        })
        .buffer_unordered(4)
        .collect::<Vec<()>>();
    tokio::select! {
        _ = work => {}
        _ = stop.cancelled() => {}
    }
}

async fn dispatch_loop(shared: Arc<Shared>, stop: CancellationToken) {
    while !stop.is_cancelled() {
        let config = shared.config();
        if !config.alerts.is_empty() {
            let d = Dispatcher::new(&shared.history, &config.alerts, Some(&shared.metrics))
                .resending(config.daemon.alert_resend_interval);
            if let Err(e) = d.round().await {
                tracing::warn!("alert dispatch: {e:#}");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = stop.cancelled() => {}
        }
    }
}

/// Raises `DrcheckVerificationStale` for targets without a success for `stale_after`.
async fn stale_loop(shared: Arc<Shared>, stop: CancellationToken) {
    let started = SystemTime::now();
    while !stop.is_cancelled() {
        let config = shared.config();
        let sinks: Vec<String> = config.alerts.iter().map(|a| a.name.clone()).collect();
        for t in config.targets.iter().filter(|t| t.stale_after.is_some()) {
            let limit = t.stale_after.unwrap_or_default();
            let last = shared.history.last_success(&t.name).await.ok().flatten();
            let since = last.as_deref().and_then(|l| humantime::parse_rfc3339(l).ok()).unwrap_or(started);
            let age = SystemTime::now().duration_since(since).unwrap_or_default();
            if age > limit && !sinks.is_empty() {
                let what = match &last {
                    Some(l) => format!("no successful verification of {} since {l}", t.name),
                    None => format!("no successful verification of {} on record", t.name),
                };
                let desc = format!("{what} (stale_after {})", drcheck_config::format_duration(limit));
                if let Err(e) = shared.history.raise_stale(&t.name, &desc, &sinks).await {
                    tracing::warn!("stale check: {e:#}");
                }
            }
        }
        // Check often enough to notice staleness within a quarter of the shortest limit.
        let every =
            config.targets.iter().filter_map(|t| t.stale_after).min().map(|d| d / 4).unwrap_or(Duration::from_secs(30));
        tokio::select! {
            _ = tokio::time::sleep(every.clamp(Duration::from_secs(1), Duration::from_secs(30))) => {}
            _ = stop.cancelled() => {}
        }
    }
}
