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
use crate::ids::new_run_id;
use crate::measure::Measurements;
use crate::progress::Progress;
use crate::run_report::{Phase, RunError, RunReport, RunResult, secs, timestamp};
use drcheck_config::{Config, TargetConfig};
use drcheck_validators::Status;
use std::time::{Duration, SystemTime};
use stop::{Stop, cap_message, short};
use tokio_util::sync::CancellationToken;

/// The PostgreSQL binaries restores may use: `[sandbox.pg_bindirs]`, `[sandbox]
/// pg_bindir`, then those installed in the common layouts.
pub(crate) fn binaries(config: &Config) -> drcheck_restore::Binaries {
    drcheck_restore::Binaries { per_major: config.sandbox.pg_bindirs.clone(), any: config.sandbox.pg_bindir.clone() }
}

/// How long a finished run still waits for its sample of the primary's horizon.
const SAMPLE_AFTER_RUN: Duration = Duration::from_secs(2);

/// What one run accumulates as it goes.
pub(crate) struct Run<'a> {
    pub(crate) target: &'a TargetConfig,
    pub(crate) report: RunReport,
    /// The instants it observed; objectives are computed from them at the end.
    pub(crate) m: Measurements,
    /// Which attempt this is (1, or 2 after starting over): names the sandbox, since
    /// the first attempt's may still be being removed.
    pub(crate) attempt: u32,
    /// The chosen backup already counts as proven in the report's coverage (a pass adds
    /// it otherwise).
    pub(crate) chosen_proven: bool,
    /// The store's and the restore's findings (`pinned`, `immutability`, `archive`):
    /// after the validators' in the report, whether or not the run got to validate.
    pub(crate) store_findings: Vec<crate::run_report::ValidatorReport>,
}

impl Run<'_> {
    pub(crate) fn phase(&mut self, name: &str, d: Duration) {
        self.report.phases.push(Phase { name: name.into(), seconds: secs(d) });
    }

    /// Forgets what an attempt measured, for another from a fresh listing.
    pub(crate) fn start_over(&mut self) {
        let r = &mut self.report;
        r.backup = None;
        r.phases.clear();
        r.validators.clear();
        r.restore = None;
        r.primary_queries = None;
        r.rpo.recovery_window_start = None;
        r.coverage = None;
        self.chosen_proven = false;
        self.store_findings.clear();
        self.m = Measurements::default();
        self.attempt += 1;
    }

    /// The name of this attempt's sandbox.
    pub(crate) fn sandbox_name(&self) -> String {
        match self.attempt {
            1 => self.report.run_id.clone(),
            n => format!("{}-{n}", self.report.run_id),
        }
    }
}

/// RTO and RPO from the run's measurement record (`measure.rs`), and the backup's time
/// as the backup itself records it.
pub(crate) fn objectives(run: &mut Run<'_>) {
    let (m, target, r) = (&run.m, run.target, &mut run.report);
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
    let mut run = new_run(run_id, target);
    tracing::info!(target = %target.name, run_id = %run.report.run_id, "verification started");
    // Every run samples the primary for drcheck's journal (issue 46): what tells later
    // backups' changes since their point apart without commit timestamps. Beside the run,
    // never in its way.
    let sample = crate::journal::record_quietly(history, target);
    tokio::pin!(sample);
    let mut sampled = false;
    let mut attempts = 0;
    let attempts_loop = async {
        loop {
            attempts += 1;
            let outcome = tokio::select! {
                r = steps(config, &mut run, backup_key, history, cancel, progress) => r,
                // Dropping `steps` drops the sandbox, which stops its server and removes its files.
                _ = cancel.cancelled() => Err(Stop::aborted("interrupted")),
            };
            match outcome {
                // The object changed under the download: once more from a fresh listing,
                // which sees the new version whole.
                Err(stop) if stop.changed && attempts == 1 => {
                    tracing::warn!(target = %target.name, reason = %stop.message, "starting over from a fresh listing");
                    run.start_over();
                }
                other => break other,
            }
        }
    };
    let outcome = {
        tokio::pin!(attempts_loop);
        loop {
            tokio::select! {
                outcome = &mut attempts_loop => break outcome,
                () = &mut sample, if !sampled => sampled = true,
            }
        }
    };
    // A primary slow to answer the sample never holds the run's end up for long.
    if !sampled && tokio::time::timeout(SAMPLE_AFTER_RUN, &mut sample).await.is_err() {
        tracing::warn!(target = %target.name, "the primary's horizon was not sampled in time: no sample of this run");
    }
    progress.finish();
    let mut report = finish(run, outcome);
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

/// A run of `target`, passed until something says otherwise.
pub(crate) fn new_run(run_id: String, target: &TargetConfig) -> Run<'_> {
    let started = SystemTime::now();
    Run {
        target,
        report: RunReport::begun(run_id, target, started),
        m: Measurements::default(),
        attempt: 1,
        chosen_proven: false,
        store_findings: Vec::new(),
    }
}

/// The verdict of a run from how its stages ended: objectives computed, the result,
/// the coverage a pass adds, the log line.
pub(crate) fn finish(mut run: Run<'_>, outcome: Result<(), Stop>) -> RunReport {
    let target = run.target;
    objectives(&mut run);
    let store_findings = std::mem::take(&mut run.store_findings);
    let r = &mut run.report;
    r.validators.extend(store_findings);
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
        if !run.chosen_proven {
            c.proven = (c.proven + 1).min(c.restorable);
        }
        let key = r.backup.as_ref().map(|b| b.key.as_str());
        let point = r.restore.as_ref().is_some_and(|i| i.recovery_target.is_some());
        if let Some(b) = c.backups.iter_mut().find(|b| Some(b.label.as_str()) == key) {
            b.last_proven_at = Some(r.finished_at.clone());
            b.points_proven += u64::from(point);
        }
    }
    let r = &run.report;
    if matches!(r.result, RunResult::Passed) {
        tracing::info!(target = %target.name, run_id = %r.run_id, result = r.result.as_str(), "verification finished");
    } else {
        // A failed run says why in its own log line: each failing check, a missed
        // objective, what stopped it.
        let reason = failure_reason(r);
        tracing::warn!(target = %target.name, run_id = %r.run_id, result = r.result.as_str(), reason = %reason, "verification finished");
    }
    run.report
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

/// The three stages, each handing the next what it returned.
pub(crate) async fn steps(
    config: &Config,
    run: &mut Run<'_>,
    backup_key: Option<&str>,
    history: &History,
    cancel: &CancellationToken,
    progress: &Progress,
) -> Result<(), Stop> {
    let selected = select::select_stage(config, run, backup_key, history, progress).await?;
    let ready = restore::restore_stage(config, run, &selected, progress).await?;
    validate::validate_stage(config, run, &selected, ready, history, cancel, progress).await
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
