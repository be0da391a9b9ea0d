//! One verification of one target:
//! select backup → fetch (streamed) → restore into a sandbox → validate → RTO/RPO.
//!
//! The result is always a [`RunReport`]; `Err` never leaves this module, because a
//! failed or incomplete run is still a run to record. Cancellation (SIGTERM) and the
//! RTO deadline drop the in-flight work, and the sandbox's drop guard tears it down.
//!
//! The stages, each in its module and each returning what the next one needs:
//! [`select`] (→ `Selected`), [`restore`] (→ `Ready`), [`validate`]; beside them the
//! run's budget ([`budget`]), how it stops early ([`stop`]) and the repository check
//! ([`repository`]).

mod budget;
mod delta;
mod follower;
pub(crate) mod immutable;
mod repository;
pub(crate) mod restore;
pub(crate) mod select;
pub(crate) mod stop;
mod validate;

pub(crate) use budget::{check_disk_in, config_warnings, lease_ttl, run_budget};
pub(crate) use follower::verify_on_follower;
pub(crate) use repository::integrity_only;
pub(crate) use restore::{database_of, download};
pub(crate) use select::{coverage_now, list_backups, read_source};

use crate::history::History;
use crate::ids::{Settings, new_run_id};
use crate::measure::Measurements;
use crate::progress::Progress;
use crate::run_report::{RunError, RunReport, RunResult, secs, timestamp};
use drcheck_config::{Config, TargetConfig};
use drcheck_validators::Status;
use std::time::{Duration, SystemTime};
use stop::{Stop, cap_message, short};
use tokio_util::sync::CancellationToken;

/// The PostgreSQL binaries restores may use: `[sandbox.pg_bindirs]`, `[sandbox]
/// pg_bindir`, then those installed in the common layouts.
pub(crate) fn binaries(sandbox: &drcheck_config::SandboxConfig) -> drcheck_restore::Binaries {
    drcheck_restore::Binaries { per_major: sandbox.pg_bindirs.clone(), any: sandbox.pg_bindir.clone() }
}

/// How long a finished run still waits for its sample of the primary's horizon.
const SAMPLE_AFTER_RUN: Duration = Duration::from_secs(2);

/// What the stages of one attempt learned, each its own value, and how far they got:
/// what the verdict is judged from ([`judge`]).
#[derive(Debug, Default)]
pub(crate) struct Learned {
    pub(crate) listed: select::Listed,
    pub(crate) restored: Option<restore::Restored>,
    pub(crate) checked: Option<validate::Checked>,
}

impl Learned {
    /// The instants of the run: the restore's (which carries the listing's on), else the listing's.
    fn measurements(&self) -> &Measurements {
        self.restored.as_ref().map(|r| &r.m).unwrap_or(&self.listed.m)
    }
}

/// RTO and RPO from the run's measurement record (`measure.rs`), and the backup's time
/// as the backup itself records it.
pub(crate) fn objectives(m: &Measurements, target: &TargetConfig, r: &mut RunReport) {
    if let Some(rto) = m.rto() {
        r.rto.measured_seconds = Some(secs(rto));
        r.rto.met = Some(rto <= target.rto);
    }
    r.rpo.backup_age_seconds = m.backup_age().map(secs);
    r.rpo.recoverable_point_age_seconds = m.recoverable_point_age().map(secs);
    r.rpo.recoverable_point = m.recoverable_point().map(timestamp);
    r.rpo.measured_at = m.recoverable_point().and(m.listed_at).map(timestamp);
    r.rpo.proven_point = m.proven_point().map(timestamp);
    r.rpo.met = m.rpo_met(target.rpo);
    if let (Some(b), Some(c)) = (r.backup.as_mut(), m.consistent) {
        b.created_at = Some(timestamp(c.at));
        b.created_at_source = Some(c.source.to_string());
    }
}

/// Verifies `target`: the latest backup, or `backup_key` when given. `history` says which
/// backups were proven (what `least-proven` and coverage read) and keeps the repository
/// check's record; the caller records the run.
pub(crate) async fn verify(
    config: &Config,
    target: &TargetConfig,
    backup_key: Option<&str>,
    history: &History,
    cancel: &CancellationToken,
    progress: &Progress,
) -> RunReport {
    verify_as(new_run_id(), config, target, backup_key, history, cancel, progress).await
}

/// A run that holds its target's lease begins: its row is written (so that, killed
/// outright, it is recorded `aborted` under this id by the next run), and the runs of
/// the target that died without recording themselves are recorded `aborted` now, under
/// their own ids — or, for a holder `took_over` from that left no row, under a new one.
pub(crate) async fn run_begins(
    history: &History,
    target: &TargetConfig,
    run_id: &str,
    holder: &str,
    took_over: Option<&str>,
) {
    let found = match history.abort_dead_runs(target, run_id).await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(target = %target.name, "cannot record the runs that died: {e:#}");
            Vec::new()
        }
    };
    for r in &found {
        tracing::warn!(target = %target.name, run_id = %r.run_id, started_at = %r.started_at,
            reason = %r.error.as_ref().map(|e| e.message.as_str()).unwrap_or_default(), "recorded a run that died as aborted");
    }
    if let Some(previous) = took_over
        && found.is_empty()
        && let Err(e) = history.record(&crate::run_report::died_report(target, previous)).await
    {
        tracing::warn!(target = %target.name, "cannot record the run that died: {e:#}");
    }
    if let Err(e) = history.run_started(run_id, &target.name, holder).await {
        tracing::warn!(target = %target.name, run_id, "cannot record the run's start: {e:#}");
    }
}

/// [`verify`] with a run id chosen by the caller (the trigger API answers with it).
pub(crate) async fn verify_as(
    run_id: String,
    config: &Config,
    target: &TargetConfig,
    backup_key: Option<&str>,
    history: &History,
    cancel: &CancellationToken,
    progress: &Progress,
) -> RunReport {
    let begun = RunReport::begun(run_id, target, SystemTime::now());
    tracing::info!(target = %target.name, run_id = %begun.run_id, "verification started");
    let settings = Settings::of(config, target);
    // Every run samples the primary for drcheck's journal (issue 46): what tells later
    // backups' changes since their point apart without commit timestamps. Beside the run,
    // never in its way.
    let sample = crate::journal::record_quietly(history, target);
    tokio::pin!(sample);
    let mut sampled = false;
    let attempts = async {
        let mut attempt = 1;
        loop {
            let ran =
                Attempt { settings, target, run_id: &begun.run_id, attempt, backup_key, history, cancel, progress };
            match steps(ran).await {
                // The object changed under the download: once more from a fresh listing,
                // which sees the new version whole (what the first attempt learned forgotten).
                (_, Err(stop)) if stop.changed && attempt == 1 => {
                    tracing::warn!(target = %target.name, reason = %stop.message, "starting over from a fresh listing");
                    attempt += 1;
                }
                other => break other,
            }
        }
    };
    let (learned, outcome) = {
        tokio::pin!(attempts);
        loop {
            tokio::select! {
                ended = &mut attempts => break ended,
                () = &mut sample, if !sampled => sampled = true,
            }
        }
    };
    // A primary slow to answer the sample never holds the run's end up for long.
    if !sampled && tokio::time::timeout(SAMPLE_AFTER_RUN, &mut sample).await.is_err() {
        tracing::warn!(target = %target.name, "the primary's horizon was not sampled in time: no sample of this run");
    }
    progress.finish();
    let mut report = judge(begun, target, learned, outcome);
    if report.result != RunResult::Aborted {
        report.rto.forecast = rto_forecast(history, target, &report).await;
    }
    report
}

/// How many of a target's newest measured restores the forecast reads.
const FORECAST_RUNS: u32 = 200;

/// The RTO forecast from the target's recorded restores and this run's (issue 50); none
/// when the history cannot be read (said in the log: the run's verdict stands).
async fn rto_forecast(history: &History, target: &TargetConfig, r: &RunReport) -> Option<crate::forecast::RtoForecast> {
    let mut samples = match history.rto_samples(&target.name, FORECAST_RUNS).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(target = %target.name, "no RTO forecast: cannot read the measured restores: {e:#}");
            return None;
        }
    };
    samples.extend(r.rto_sample());
    let now = SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs_f64();
    Some(crate::forecast::forecast(&samples, target.rto.as_secs_f64(), now))
}

/// The verdict of a run from what its stages learned and how they ended: the report
/// filled in, objectives computed, the result, the coverage a pass adds, the log line.
pub(crate) fn judge(mut r: RunReport, target: &TargetConfig, learned: Learned, outcome: Result<(), Stop>) -> RunReport {
    let m = learned.measurements().clone();
    let Learned { listed, restored, checked } = learned;
    r.backup = listed.backup;
    r.coverage = listed.coverage;
    r.rpo.recovery_window_start = listed.recovery_window_start;
    r.still_listed = listed.still_listed;
    let mut store_findings = listed.findings;
    if let Some(restored) = restored {
        r.phases.extend(restored.phases);
        r.restore = restored.info;
        r.backup = restored.backup;
        store_findings.extend(restored.findings);
    }
    objectives(&m, target, &mut r);
    if let Some(c) = checked {
        r.phases.extend(c.phases);
        r.validators = c.validators;
        r.content = c.content;
        r.rpo.data_lag_seconds = c.data_lag_seconds;
        r.primary_queries = c.primary_queries;
        r.degraded = c.degraded;
        r.tables_decided = c.tables_decided;
        r.slice_compared = c.slice_compared;
    }
    r.validators.extend(store_findings);
    conclude(r, target, listed.chosen_proven, outcome)
}

/// Why a run did not pass, in one line for its log: what stopped it, each check that
/// failed or errored, each objective missed (RTO, RPO: with the figures), too much
/// undecided content, a degraded run. Never empty.
pub(crate) fn failure_reason(r: &RunReport) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(e) = &r.error {
        parts.push(format!("{}: {}", e.stage, short(&e.message, 500)));
    }
    parts.extend(
        r.validators
            .iter()
            .filter(|v| v.status == Status::Failed || v.status == Status::Error)
            .map(|v| format!("{} {}: {}", v.name, v.status, short(&v.detail, 300))),
    );
    if r.rto.met == Some(false) {
        parts.push(format!(
            "RTO missed: the restore took {} (rto {})",
            r.rto.measured_seconds.map(crate::out::whole).unwrap_or_else(|| "longer than allowed".into()),
            crate::out::whole(r.rto.target_seconds)
        ));
    }
    if r.rpo.met == Some(false) {
        let lost = r.rpo.recoverable_point_age_seconds.or(r.rpo.backup_age_seconds);
        parts.push(format!(
            "RPO missed: a restore now would lose {}{} (rpo {})",
            lost.map(crate::out::whole).unwrap_or_else(|| "more than allowed".into()),
            r.rpo
                .recoverable_point
                .as_ref()
                .map(|p| format!(", the newest recoverable point being {p}"))
                .unwrap_or_default(),
            crate::out::whole(r.rpo.target_seconds)
        ));
    }
    if r.result == RunResult::Inconclusive
        && let Some(c) = &r.content
    {
        parts.push(format!(
            "content {}% proven, {} of {} tables and {} rows undecided (max_undecided {}%)",
            c.proven_percent, c.tables_undecided, c.tables, c.rows_undecided, c.max_undecided_percent
        ));
    }
    if let Some(d) = &r.degraded {
        parts.push(format!("degraded: {d}"));
    }
    if parts.is_empty() {
        parts.push(format!("the run ended {} without a recorded reason", r.result.as_str()));
    }
    parts.join("; ")
}

/// One attempt of one run: what its stages are given.
#[derive(Clone, Copy)]
pub(crate) struct Attempt<'a> {
    pub settings: Settings<'a>,
    pub target: &'a TargetConfig,
    pub run_id: &'a str,
    /// 1, or 2 after starting over: names the sandbox, since the first attempt's may
    /// still be being removed.
    pub attempt: u32,
    pub backup_key: Option<&'a str>,
    pub history: &'a History,
    pub cancel: &'a CancellationToken,
    pub progress: &'a Progress,
}

impl Attempt<'_> {
    /// The name of this attempt's sandbox.
    fn sandbox_name(&self) -> String {
        match self.attempt {
            1 => self.run_id.to_string(),
            n => format!("{}-{n}", self.run_id),
        }
    }
}

/// The stages, each handed the previous one's value and returning its own: select →
/// restore → validate; what each learned is kept for the verdict however the next
/// ends. Cancelled (SIGTERM), the stage in flight is dropped — its sandbox with it —
/// and the run is `aborted` in that stage.
pub(crate) async fn steps(a: Attempt<'_>) -> (Learned, Result<(), Stop>) {
    let mut learned = Learned::default();
    // Each stage's future on the heap: together they are far larger than a stack wants.
    let selecting = Box::pin(select::select_stage(a.settings, a.target, a.run_id, a.backup_key, a.history, a.progress));
    let selected = match until_cancelled(a.cancel, "select", selecting).await {
        Ok(Ok(s)) => s,
        Ok(Err(stopped)) => {
            learned.listed = stopped.learned;
            return (learned, Err(stopped.stop));
        }
        Err(aborted) => return (learned, Err(aborted)),
    };
    learned.listed = selected.listed.clone();
    let restoring = Box::pin(restore::restore_stage(a.settings, &selected, a.sandbox_name(), a.progress));
    let ready = match until_cancelled(a.cancel, "restore", restoring).await {
        Ok((restored, ready)) => {
            learned.restored = Some(restored);
            ready
        }
        Err(aborted) => Err(aborted),
    };
    let ready = match ready {
        Ok(r) => r,
        Err(stop) => return (learned, Err(stop)),
    };
    let cutoff = learned.measurements().as_of_cutoff();
    let validating = Box::pin(validate::validate_stage(
        a.settings, &selected, ready, cutoff, a.run_id, a.history, a.cancel, a.progress,
    ));
    match until_cancelled(a.cancel, "validate", validating).await {
        Ok((checked, outcome)) => {
            learned.checked = Some(checked);
            (learned, outcome)
        }
        Err(aborted) => (learned, Err(aborted)),
    }
}

/// `stage` run to its end, or dropped when the run is cancelled (`Stop::aborted`).
async fn until_cancelled<T>(cancel: &CancellationToken, stage: &str, f: impl Future<Output = T>) -> Result<T, Stop> {
    tokio::select! {
        done = f => Ok(done),
        _ = cancel.cancelled() => Err(Stop::aborted(stage)),
    }
}

/// The result of a run whose report holds all it learned: the stop's blame, else the
/// findings' and objectives'; a pass adds the chosen backup to the coverage.
fn conclude(mut r: RunReport, target: &TargetConfig, chosen_proven: bool, outcome: Result<(), Stop>) -> RunReport {
    r.result = match outcome {
        Err(stop) => {
            let result = stop.result;
            if stop.usage {
                r.usage_error = Some(stop.message.clone());
            }
            r.error = Some(RunError { stage: stop.stage, message: cap_message(&stop.message) });
            result
        }
        Ok(()) if r.rpo.met == Some(false) || r.rto.met == Some(false) || r.validator_failed() => RunResult::Failed,
        Ok(()) if r.validator_errored() => RunResult::Error,
        // Held where it was decided, but too much could not be: never a pass.
        Ok(()) if r.content.as_ref().is_some_and(|c| c.too_undecided()) => RunResult::Inconclusive,
        Ok(()) => RunResult::Passed,
    };
    // A run that stopped after the RPO was measured still failed if the RPO was missed.
    if r.result == RunResult::Error && r.rpo.met == Some(false) {
        r.result = RunResult::Failed;
    }
    r.finished_at = timestamp(SystemTime::now());
    // A pass proves the chosen backup: the coverage says so (and the evidence, which
    // reads it), not only the count.
    if r.result == RunResult::Passed
        && let Some(c) = r.coverage.as_mut()
    {
        if !chosen_proven {
            c.proven = (c.proven + 1).min(c.restorable);
        }
        let key = r.backup.as_ref().map(|b| b.key.as_str());
        let point = r.restore.as_ref().is_some_and(|i| i.recovery_target.is_some());
        if let Some(b) = c.backups.iter_mut().find(|b| Some(b.label.as_str()) == key) {
            b.last_proven_at = Some(r.finished_at.clone());
            b.points_proven += u64::from(point);
        }
    }
    if matches!(r.result, RunResult::Passed) {
        tracing::info!(target = %target.name, run_id = %r.run_id, result = r.result.as_str(), "verification finished");
    } else {
        // A failed run says why in its own log line: each failing check, a missed
        // objective, what stopped it.
        let reason = failure_reason(&r);
        tracing::warn!(target = %target.name, run_id = %r.run_id, result = r.result.as_str(), reason = %reason, "verification finished");
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> TargetConfig {
        drcheck_config::parse(
            "[storage.s]\nkind = \"filesystem\"\npath = \"/tmp\"\n[[target]]\nname = \"t\"\nstorage = \"s\"\nprefix = \"p/\"\nrto = \"15m\"\nrpo = \"1d\"\n",
            std::path::Path::new("c.toml"),
        )
        .unwrap()
        .targets[0]
            .clone()
    }

    /// Issue 48: an RPO miss logged `reason=` empty. Every way a run fails says why.
    #[test]
    fn every_failure_and_miss_has_a_reason() {
        let mut r = crate::run_report::died_report(&target(), "x");
        r.error = None;
        r.result = RunResult::Failed;
        r.rpo.met = Some(false);
        r.rpo.recoverable_point_age_seconds = Some(2.0 * 86400.0 + 3600.0);
        r.rpo.recoverable_point = Some("2026-12-05T03:00:00.000Z".into());
        let why = failure_reason(&r);
        assert!(why.starts_with("RPO missed: a restore now would lose 2days 1h"), "{why}");
        assert!(why.contains("2026-12-05T03:00:00.000Z") && why.contains("(rpo 1day)"), "{why}");
        r.rpo.met = Some(true);
        r.rto.met = Some(false);
        r.rto.measured_seconds = Some(1260.0);
        let why = failure_reason(&r);
        assert!(why.starts_with("RTO missed: the restore took 21m (rto 15m)"), "{why}");
        r.rto.met = Some(true);
        assert_eq!(failure_reason(&r), "the run ended failed without a recorded reason");
    }

    fn finding(name: &str, status: Status) -> crate::run_report::ValidatorReport {
        crate::run_report::ValidatorReport::from(&drcheck_validators::Finding::new(name, status, "d"))
    }

    /// What select learns of `key`, the newest of two restorable backups, neither proven.
    fn listing(key: &str) -> select::Listed {
        let now = SystemTime::now();
        let mut l = select::Listed {
            backup: Some(crate::run_report::BackupInfo {
                key: key.into(),
                size_bytes: 1,
                created_at: None,
                created_at_source: None,
                uploaded_at: None,
                format: None,
                encryption: None,
                kind: None,
                source: None,
                pinned: vec![],
            }),
            coverage: Some(crate::run_report::Coverage {
                restorable: 2,
                proven: 0,
                prove_within_seconds: 86400.0,
                backups: [key, "older"]
                    .iter()
                    .map(|k| crate::run_report::BackupProof {
                        label: (*k).into(),
                        stopped_at: timestamp(now),
                        last_proven_at: None,
                        points_proven: 0,
                    })
                    .collect(),
            }),
            findings: vec![finding("pinned", Status::Passed)],
            ..Default::default()
        };
        l.m.listed_at = Some(now);
        l.m.consistent = Some(crate::measure::Consistency { at: now - Duration::from_secs(60), source: "dump" });
        l
    }

    /// The verdict is judged from the stages' values alone: each stage's findings in
    /// order (the validators', then the store's), the objectives from the instants the
    /// restore carried on, and a pass proves the chosen backup in the coverage.
    #[test]
    fn a_pass_is_judged_from_what_each_stage_returned() {
        let t = target();
        let listed = listing("t/new.dump");
        let mut restored = restore::Restored {
            backup: listed.backup.clone(),
            m: listed.m.clone(),
            findings: vec![finding("archive", Status::Passed)],
            ..Default::default()
        };
        restored.m.fetch_started = Some(std::time::Instant::now());
        restored.m.ready = Some(Duration::from_secs(30));
        restored.phases.push(crate::run_report::Phase { name: "restore".into(), seconds: 30.0 });
        let checked = validate::Checked { validators: vec![finding("schema", Status::Passed)], ..Default::default() };
        let learned = Learned { listed, restored: Some(restored), checked: Some(checked) };
        let r = judge(RunReport::begun("r".into(), &t, SystemTime::now()), &t, learned, Ok(()));
        assert_eq!(r.result, RunResult::Passed, "{r:?}");
        let names: Vec<&str> = r.validators.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["schema", "pinned", "archive"]);
        assert_eq!((r.rto.measured_seconds, r.rto.met), (Some(30.0), Some(true)));
        assert_eq!(r.rpo.backup_age_seconds, Some(60.0));
        assert_eq!(r.backup.as_ref().and_then(|b| b.created_at_source.as_deref()), Some("dump"));
        let c = r.coverage.as_ref().unwrap();
        assert_eq!(c.proven, 1, "the pass proves the chosen backup");
        assert!(c.backups[0].last_proven_at.is_some() && c.backups[1].last_proven_at.is_none(), "{c:?}");
    }

    /// A stage that stops hands on what it learned: a restore cancelled past its
    /// deadline still measured the RTO (missed: failed), and a chain that could not be
    /// followed still names the backup — and neither proves anything.
    #[test]
    fn a_stopped_stage_keeps_what_it_learned() {
        let t = target();
        let listed = listing("t/new.dump");
        let mut restored =
            restore::Restored { backup: listed.backup.clone(), m: listed.m.clone(), ..Default::default() };
        restored.m.ready = Some(Duration::from_secs(31 * 60));
        let learned = Learned { listed, restored: Some(restored), checked: None };
        let stop = Stop::failed("restore", "cancelled: still restoring after 30m");
        let r = judge(RunReport::begun("r".into(), &t, SystemTime::now()), &t, learned, Err(stop));
        assert_eq!(r.result, RunResult::Failed);
        assert_eq!(r.rto.met, Some(false), "the deadline's restore measured the RTO: {r:?}");
        assert_eq!(r.error.as_ref().map(|e| e.stage.as_str()), Some("restore"));
        assert_eq!(r.coverage.as_ref().unwrap().proven, 0);
        let chain = Stop::failed("select", "a link of the chain is missing");
        let learned = Learned { listed: listing("t/incr"), restored: None, checked: None };
        let r = judge(RunReport::begun("r".into(), &t, SystemTime::now()), &t, learned, Err(chain));
        assert_eq!(r.backup.as_ref().map(|b| b.key.as_str()), Some("t/incr"));
        assert_eq!(r.rto.measured_seconds, None, "no restore, no RTO");
        assert_eq!(r.validators.len(), 1, "the store's finding is kept: {:?}", r.validators);
    }

    /// Cancelled, the stage in flight is dropped and named: the run is `aborted` there.
    #[tokio::test]
    async fn a_cancelled_stage_is_dropped_and_named() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let never = std::future::pending::<()>();
        let stop = until_cancelled(&cancel, "restore", never).await.unwrap_err();
        assert_eq!((stop.stage.as_str(), stop.result), ("restore", RunResult::Aborted));
        let live = CancellationToken::new();
        assert_eq!(until_cancelled(&live, "select", async { 7 }).await.ok(), Some(7));
    }
}

/// Issue 50's "done when": a database growing 5 % a day, restored at 80 % of its RTO.
/// Runs recorded in a real history store → the forecast a run makes → its metric →
/// the shipped alert rule under promtool: a breach within a week, and the warning fires.
/// A database that does not grow: no metric, no warning.
#[cfg(test)]
mod forecast_tests {
    use super::*;
    use crate::forecast::Outlook;

    const DAY: u64 = 86_400;

    fn target() -> TargetConfig {
        drcheck_config::parse(
            "[storage.s]\nkind = \"filesystem\"\npath = \"/tmp\"\n[[target]]\nname = \"t\"\nstorage = \"s\"\nprefix = \"p/\"\nrto = \"15m\"\nrpo = \"1d\"\n",
            std::path::Path::new("c.toml"),
        )
        .unwrap()
        .targets[0]
            .clone()
    }

    /// A passed run of a backup `age` days old, `growth` a day behind today's 8 GB, whose
    /// restore takes `fraction` of the RTO at today's size.
    fn run(i: u32, age: u64, growth: f64, fraction: f64, now: SystemTime) -> RunReport {
        let size = 8e9 / (1.0 + growth).powf(age as f64);
        let moving = (900.0 * fraction - 4.0) * size / 8e9;
        // The backup two hours before its run; today's run an hour ago.
        let at = timestamp(now - Duration::from_secs(age * DAY + 7200));
        serde_json::from_value(serde_json::json!({
            "run_id": format!("r{i}"), "target": "t", "result": "passed",
            "started_at": timestamp(now - Duration::from_secs(age * DAY + 3600)),
            "finished_at": timestamp(now - Duration::from_secs(age * DAY + 3000)),
            "backup": {"key": format!("t/{age}.dump"), "size_bytes": size as u64, "created_at": at},
            "phases": [{"name": "sandbox", "seconds": 4.0}, {"name": "fetch", "seconds": moving * 0.2},
                       {"name": "restore", "seconds": moving * 0.8}],
            "validators": [],
            "rto": {"target_seconds": 900.0, "measured_seconds": 4.0 + moving, "met": true},
            "rpo": {"target_seconds": 86400.0, "backup_age_seconds": null, "met": null}
        }))
        .unwrap()
    }

    async fn forecast_after_a_week(growth: f64) -> (crate::forecast::RtoForecast, String) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("h.db").display());
        let h = History::open(&drcheck_config::Secret::new(url)).await.unwrap();
        let t = target();
        let now = SystemTime::now();
        for (i, age) in (1..=7).rev().enumerate() {
            h.record(&run(i as u32, age, growth, 0.8, now)).await.unwrap();
        }
        let mut today = run(99, 0, growth, 0.8, now);
        let f = rto_forecast(&h, &t, &today).await.unwrap();
        today.rto.forecast = Some(f.clone());
        let m = crate::metrics::Metrics::new();
        m.observe(&today, &t);
        (f, m.render())
    }

    fn gauge(exposition: &str, name: &str) -> Option<f64> {
        exposition.lines().find_map(|l| l.strip_prefix(&format!("{name}{{target=\"t\"}} "))?.parse().ok())
    }

    #[tokio::test]
    async fn a_database_growing_5_percent_a_day_at_80_percent_of_its_rto_breaches_within_a_week_and_warns() {
        let (f, exposition) = forecast_after_a_week(0.05).await;
        assert_eq!(f.outlook, Outlook::Breach, "{f:?}");
        assert_eq!((f.runs, f.backups), (8, 8));
        let now = SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        let breach = gauge(&exposition, "drcheck_rto_forecast_breach_timestamp_seconds").expect(&exposition);
        let days = (breach - now) / DAY as f64;
        assert!((3.0..7.0).contains(&days), "a breach in {days} days: {f:?}");
        let ahead = gauge(&exposition, "drcheck_rto_warn_ahead_seconds").unwrap();
        assert_eq!(ahead, 30.0 * DAY as f64);
        // The shipped rule, on those values (promtool's clock starts at 0: the breach is
        // given as seconds from now), fires at once — and not for a breach 60 days out.
        let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus/rules.yml");
        let test = format!(
            "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1h\n    input_series:\n\
             \x20     - series: 'drcheck_rto_forecast_breach_timestamp_seconds{{job=\"drcheck\",target=\"t\"}}'\n        values: '{}x10'\n\
             \x20     - series: 'drcheck_rto_warn_ahead_seconds{{job=\"drcheck\",target=\"t\"}}'\n        values: '{ahead}x10'\n\
             \x20     - series: 'drcheck_rto_forecast_breach_timestamp_seconds{{job=\"drcheck\",target=\"later\"}}'\n        values: '{}x10'\n\
             \x20     - series: 'drcheck_rto_warn_ahead_seconds{{job=\"drcheck\",target=\"later\"}}'\n        values: '{ahead}x10'\n\
             \x20   alert_rule_test:\n      - eval_time: 1h\n        alertname: DrcheckRTOForecastBreach\n        exp_alerts:\n\
             \x20         - exp_labels: {{severity: warning, job: drcheck, target: t}}\n\
             \x20           exp_annotations:\n\
             \x20             summary: \"Restoring t will take longer than its RTO within its warning horizon\"\n\
             \x20             description: \"At the current trend the restore of t exceeds its RTO in {}: `drcheck status` says why (growth, throughput, the limiting phase).\"\n",
            rules.display(),
            (breach - now).round(),
            60 * DAY,
            // What the rule's `{{ $value | humanizeDuration }}` says an hour in.
            {
                let v = (breach - now).round() as u64 - 3600;
                format!("{}d {}h {}m {}s", v / DAY, v % DAY / 3600, v % 3600 / 60, v % 60)
            }
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("forecast_test.yml");
        std::fs::write(&file, &test).unwrap();
        let out = std::process::Command::new("promtool")
            .args(["test", "rules"])
            .arg(&file)
            .output()
            .expect("running promtool (scripts/setup.sh installs it)");
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{test}\n{said}");
    }

    #[tokio::test]
    async fn a_database_that_does_not_grow_has_no_breach_and_no_warning() {
        let (f, exposition) = forecast_after_a_week(0.0).await;
        assert_eq!(f.outlook, Outlook::Clear, "{f:?}");
        assert_eq!(gauge(&exposition, "drcheck_rto_forecast_breach_timestamp_seconds"), None, "{exposition}");
    }
}
