//! Prometheus metrics: the contract's `drcheck_*` names (base units, timestamps not
//! ages, bounded labels) plus the daemon's own. One-shot runs push them to a
//! Pushgateway and/or write a node_exporter textfile; the daemon serves `/metrics`.

use crate::canary_report::{CanaryResult, DefectVerdict};
use crate::run_report::{RunReport, RunResult};
use drcheck_config::TargetConfig;
use drcheck_validators::Status;
use prometheus::{Encoder, Gauge, GaugeVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};
use std::path::Path;
use std::time::UNIX_EPOCH;

/// One metric as declared: name, help and labels (its kind is its field's type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct Declared {
    pub name: &'static str,
    pub help: &'static str,
    pub labels: &'static [&'static str],
}

/// A metric kind: made and registered from its declaration, and rid of the series of a
/// removed target or sink.
trait Make: Sized {
    fn make(r: &Registry, name: &str, help: &str, labels: &[&str]) -> Self;
    fn forget_label(&self, label: &str, value: &str);
}

macro_rules! vec_kind {
    ($t:ty) => {
        impl Make for $t {
            fn make(r: &Registry, name: &str, help: &str, labels: &[&str]) -> Self {
                let v = <$t>::new(Opts::new(name, help), labels).expect("valid metric");
                r.register(Box::new(v.clone())).expect("unique metric");
                v
            }
            fn forget_label(&self, label: &str, value: &str) {
                forget(self, label, value);
            }
        }
    };
}
vec_kind!(GaugeVec);
vec_kind!(IntGaugeVec);
vec_kind!(IntCounterVec);

macro_rules! single_kind {
    ($t:ty) => {
        impl Make for $t {
            fn make(r: &Registry, name: &str, help: &str, labels: &[&str]) -> Self {
                assert!(labels.is_empty(), "{name}: a single series has no labels");
                let v = <$t>::new(name, help).expect("valid metric");
                r.register(Box::new(v.clone())).expect("unique metric");
                v
            }
            fn forget_label(&self, _: &str, _: &str) {}
        }
    };
}
single_kind!(IntGauge);
single_kind!(Gauge);

/// Declares a group of metrics once — each a field, its kind, name, help and labels —
/// from which the group's registration, its `DECLARED` table (the documentation test
/// reads it) and the cleanup of a removed target's or sink's series follow.
macro_rules! metrics {
    (
        $(#[doc = $sd:literal])*
        $vis:vis struct $S:ident {
            $( $(#[doc = $fd:literal])* $f:ident : $K:ident = $name:literal, $help:literal, [$($l:literal),*]; )*
        }
    ) => {
        $(#[doc = $sd])*
        #[derive(Clone)]
        $vis struct $S {
            $( $(#[doc = $fd])* pub $f: $K, )*
        }

        impl $S {
            #[cfg_attr(not(test), allow(dead_code))]
            pub(crate) const DECLARED: &'static [Declared] =
                &[$( Declared { name: $name, help: $help, labels: &[$($l),*] }, )*];

            fn register(r: &Registry) -> Self {
                $S { $( $f: <$K as Make>::make(r, $name, $help, &[$($l),*]), )* }
            }

            /// Every series whose `label` is `value` (a removed target or sink).
            #[allow(dead_code)]
            pub(crate) fn forget(&self, label: &str, value: &str) {
                $( self.$f.forget_label(label, value); )*
            }
        }
    };
}

metrics! {
    /// The runs', the store's, the alerts' and the daemon's own series.
    pub(crate) struct Core {
        runs_total: IntCounterVec = "drcheck_verification_runs_total", "Verification runs by result.", ["target", "result"];
        last_run_success: IntGaugeVec = "drcheck_last_run_success", "1 if the last run passed, else 0.", ["target"];
        last_run_inconclusive: IntGaugeVec = "drcheck_last_run_inconclusive", "1 if the last run was inconclusive (more of the content undecided than max_undecided), else 0.", ["target"];
        content_proven: GaugeVec = "drcheck_content_proven_ratio", "The share of the content the last run's comparisons decided (proven, or changed on the primary since the copy's point), 0 to 1.", ["target"];
        last_success_timestamp: GaugeVec = "drcheck_last_success_timestamp_seconds", "When the last passing run finished (Unix time).", ["target"];
        restore_duration: GaugeVec = "drcheck_restore_duration_seconds", "The last measured RTO: fetch start to a restored database that accepts connections.", ["target"];
        phase_duration: GaugeVec = "drcheck_phase_duration_seconds", "Duration of each phase of the last run.", ["target", "phase"];
        rto_target: GaugeVec = "drcheck_rto_target_seconds", "The RTO objective.", ["target"];
        rpo_target: GaugeVec = "drcheck_rpo_target_seconds", "The RPO objective.", ["target"];
        rto_forecast_breach: GaugeVec = "drcheck_rto_forecast_breach_timestamp_seconds", "When a restore will take longer than the RTO at the current trend (Unix time; the run's time when it already does): from the target's measured restores and its backups' growth. Absent without a breach in sight or with too few runs to say.", ["target"];
        rto_warn_ahead: GaugeVec = "drcheck_rto_warn_ahead_seconds", "How long before the forecast breach to warn (target.rto_warn_ahead): DrcheckRTOForecastBreach compares the two.", ["target"];
        backup_timestamp: GaugeVec = "drcheck_backup_timestamp_seconds", "When the newest verified backup's data is from (Unix time: its consistency time); never moves back.", ["target"];
        backup_size: GaugeVec = "drcheck_backup_size_bytes", "Size of the last verified backup.", ["target"];
        validator_inconclusive: IntGaugeVec = "drcheck_validator_inconclusive", "What the last run's validator could not prove (cannot be told from changes on the primary since the copy's point): how many items.", ["target", "validator"];
        validator_success: IntGaugeVec = "drcheck_validator_success", "1 if the validator passed in the last run; 0 if it failed or errored; absent if it was skipped (see drcheck_validator_skipped).", ["target", "validator"];
        validator_skipped: IntGaugeVec = "drcheck_validator_skipped", "1 if the validator was skipped in the last run (nothing to check, not configured, or not run after another failure): neither a pass nor a failure.", ["target", "validator"];
        data_lag: GaugeVec = "drcheck_data_lag_seconds", "How much newer the primary's data was than the backup's newest row.", ["target"];
        recoverable_point: GaugeVec = "drcheck_recoverable_point_timestamp_seconds", "The newest recoverable point (Unix time) at the last run's listing: the WAL archive's newest replayable commit, else the newest backup's consistency time; never moves back.", ["target"];
        rpo_measured: GaugeVec = "drcheck_rpo_measured_timestamp_seconds", "When the recoverable point was last read (Unix time: the run's listing time); DrcheckRPOMissed compares the two.", ["target"];
        recovery_window_start: GaugeVec = "drcheck_recovery_window_start_timestamp_seconds", "When the oldest restorable backup in the tool's catalog finished (Unix time).", ["target"];
        backups_restorable: IntGaugeVec = "drcheck_backups_restorable", "Restorable backups of the target in its store or catalog, as its last run listed them.", ["target"];
        backups_proven: IntGaugeVec = "drcheck_backups_proven", "Of the restorable backups, those that passed a verification within prove_within.", ["target"];
        backups_unproven: IntGaugeVec = "drcheck_backups_unproven", "Restorable backups with no passing verification within prove_within.", ["target"];
        proves_window: IntGaugeVec = "drcheck_proves_retention", "1 when the target sets out to prove every restorable backup in turn (select = \"least-proven\"), else 0: DrcheckBackupsUnproven holds it to that.", ["target"];
        points_in_time_proven_total: IntCounterVec = "drcheck_points_in_time_proven_total", "Passing runs whose WAL replay reached the recovery target asked for (a point of the recovery window proven).", ["target"];
        backup_locked: IntGaugeVec = "drcheck_backup_locked", "1 if every object of the last verified backup is under an Object Lock retention now, else 0.", ["target"];
        backup_lock_remaining: GaugeVec = "drcheck_backup_lock_remaining_seconds", "How long the last verified backup's earliest-ending object lock still holds (seconds).", ["target"];
        backups_changed_since_proven: IntGaugeVec = "drcheck_backups_changed_since_proven", "Proven backups whose stored objects changed, or that vanished before retention, since they were proven.", ["target"];
        repository_check_success: IntGaugeVec = "drcheck_repository_check_success", "1 if the last check of the backup tool's repository (no restore) passed, else 0.", ["target"];
        repository_check_timestamp: GaugeVec = "drcheck_repository_check_timestamp_seconds", "When the backup tool's repository was last checked (Unix time).", ["target"];
        restore_profile: IntGaugeVec = "drcheck_restore_profile_info", "The sandbox profile that measured the last RTO (1 for the profile in use).", ["target", "profile"];
        scheduled_runs_total: IntCounterVec = "drcheck_scheduled_runs_total", "Runs started by the daemon's schedule.", ["target"];
        breaker_open: IntGaugeVec = "drcheck_circuit_breaker_open", "1 while a dependency's circuit breaker is open.", ["dependency"];
        alerts_sent_total: IntCounterVec = "drcheck_alerts_sent_total", "Alerts delivered, by sink.", ["sink"];
        alerts_dead_lettered_total: IntCounterVec = "drcheck_alerts_dead_lettered_total", "Alerts given up on after max_attempts, by sink.", ["sink"];
        build_info: IntGaugeVec = "drcheck_build_info", "drcheck's version; always 1.", ["version"];
        runs_in_flight: IntGauge = "drcheck_runs_in_flight", "Verifications running now.", [];
        alert_outbox_depth: IntGauge = "drcheck_alert_outbox_depth", "Alerts written but not yet delivered.", [];
        /// 1 while the config the daemon runs is the file's (started, or reloaded on
        /// SIGHUP); 0 after a reload failed and the old config was kept.
        config_reload_success: IntGauge = "drcheck_config_last_reload_successful", "1 if the config file was last loaded successfully (at start or on SIGHUP), 0 if the last reload failed.", [];
        /// When the running config was last loaded (Unix time).
        config_reload_timestamp: Gauge = "drcheck_config_last_reload_success_timestamp_seconds", "When the running config was loaded (Unix time).", [];
    }
}

metrics! {
    /// The heartbeat writer's own health (the daemon writes each target's heartbeat).
    pub(crate) struct HeartbeatMetrics {
        /// The last heartbeat written (Unix time).
        last_write: GaugeVec = "drcheck_heartbeat_last_write_timestamp_seconds", "When the daemon last wrote the target's heartbeat row on its primary (Unix time).", ["target"];
        /// How often it is to be written.
        interval: GaugeVec = "drcheck_heartbeat_interval_seconds", "How often the target's heartbeat is to be written ([target.heartbeat] interval).", ["target"];
        /// Writes that failed.
        failures_total: IntCounterVec = "drcheck_heartbeat_write_failures_total", "Heartbeat writes that failed (the daemon's log says why, secrets masked).", ["target"];
    }
}

metrics! {
    /// The followers' (`[target.follow]`): where replay is and what stops it.
    pub(crate) struct FollowMetrics {
        /// 1 while the follower runs and replays what the archive holds.
        up: IntGaugeVec = "drcheck_follow_up", "1 while the target's follower runs and replays its WAL archive.", ["target"];
        /// The last commit the follower replayed (Unix time, from the WAL).
        replayed_commit: GaugeVec = "drcheck_follow_replayed_commit_timestamp_seconds", "The last commit the follower replayed from the WAL archive (Unix time, read from the WAL).", ["target"];
        /// The primary's current WAL position less the follower's replayed one.
        behind_bytes: GaugeVec = "drcheck_follow_behind_bytes", "The primary's current WAL position less the follower's replayed position.", ["target"];
        segments_replayed_total: IntCounterVec = "drcheck_follow_segments_replayed_total", "WAL segments the follower replayed.", ["target"];
        fetched_bytes_total: IntCounterVec = "drcheck_follow_fetched_bytes_total", "Bytes of archived WAL the follower fetched from the store.", ["target"];
        /// 1 for the segment that cannot be replayed (one series per target while it lasts).
        not_replayable: IntGaugeVec = "drcheck_follow_not_replayable", "1 while the named WAL segment cannot be replayed (reason: gap, unreadable, corrupt, stuck, crashed).", ["target", "segment", "reason"];
        /// How often the follower checks its archive.
        interval: GaugeVec = "drcheck_follow_interval_seconds", "How often the follower lists its archive ([target.follow] interval).", ["target"];
        /// When the follower's copy was seeded from a base backup (Unix time).
        seeded: GaugeVec = "drcheck_follow_seeded_timestamp_seconds", "When the follower's copy was seeded from a base backup (Unix time).", ["target"];
    }
}

metrics! {
    /// The canaries' (`drcheck canary`): whether each defect was caught and each sink took
    /// the canary alert.
    pub(crate) struct CanaryMetrics {
        /// When a canary of the target last had every defect it made caught and every sink
        /// accept its alert (Unix time).
        last_success: GaugeVec = "drcheck_canary_last_success_timestamp_seconds", "When the target's canary last had every defect it made caught and every alert sink accept its canary alert (Unix time).", ["target"];
        /// 1 if the target's last canary caught the defect, 0 if it passed the pipeline.
        detected: IntGaugeVec = "drcheck_canary_detected", "1 if the target's last canary caught this defect (its owning check failed the defective copy), 0 if the copy passed.", ["target", "defect"];
        /// 1 if the sink accepted the target's last canary alert, 0 if not.
        alert_accepted: IntGaugeVec = "drcheck_canary_alert_accepted", "1 if the alert sink accepted the target's last canary alert, 0 if it did not within daemon.canary_alert_within.", ["target", "sink"];
    }
}

metrics! {
    /// A drill's (`drcheck drill run`), written to the textfile or the Pushgateway.
    pub(crate) struct DrillMetrics {
        runs: IntCounterVec = "drcheck_drill_runs_total", "DR drills run, by runbook and result.", ["runbook", "result"];
        duration: GaugeVec = "drcheck_drill_duration_seconds", "How long the last drill took, start to end.", ["runbook"];
        rto_met: IntGaugeVec = "drcheck_drill_rto_met", "1 if the last drill's recovery finished within objectives.rto, else 0.", ["runbook"];
        rto_seconds: GaugeVec = "drcheck_drill_rto_seconds", "The last drill's measured recovery time (first recovery step's start to the last one's end).", ["runbook"];
    }
}

/// Every series drcheck exports, by group; the core group's fields read as the
/// whole's (`metrics.runs_in_flight`).
pub(crate) struct Metrics {
    registry: Registry,
    core: Core,
    pub heartbeat: HeartbeatMetrics,
    pub follow: FollowMetrics,
    pub canary: CanaryMetrics,
}

impl std::ops::Deref for Metrics {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl CanaryMetrics {
    /// A finished canary's series.
    pub(crate) fn observe(&self, r: &crate::canary_report::CanaryReport) {
        let t = r.target.as_str();
        for d in &r.defects {
            match d.outcome {
                DefectVerdict::Detected => self.detected.with_label_values(&[t, &d.defect]).set(1),
                DefectVerdict::Undetected => self.detected.with_label_values(&[t, &d.defect]).set(0),
                // Seen but not provable: neither caught nor a verifier gone blind.
                DefectVerdict::Inconclusive => {
                    let _ = self.detected.remove_label_values(&[t, &d.defect]);
                }
                DefectVerdict::Error | DefectVerdict::Skipped => {}
            }
        }
        for s in &r.alerts {
            self.alert_accepted.with_label_values(&[t, &s.sink]).set(i64::from(s.accepted));
        }
        if r.result == CanaryResult::Caught
            && r.alerts.iter().all(|s| s.accepted)
            && let Ok(at) = humantime::parse_rfc3339_weak(&r.finished_at)
        {
            self.last_success
                .with_label_values(&[t])
                .set(at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64());
        }
    }
}

/// Removes every series of `v` whose `label` is `value`.
fn forget<P: prometheus::core::MetricVecBuilder>(v: &prometheus::core::MetricVec<P>, label: &str, value: &str) {
    use prometheus::core::Collector;
    for family in v.collect() {
        for m in family.get_metric() {
            let labels: std::collections::HashMap<&str, &str> =
                m.get_label().iter().map(|l| (l.name(), l.value())).collect();
            if labels.get(label) == Some(&value) {
                let _ = v.remove(&labels);
            }
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let r = Registry::new();
        let core = Core::register(&r);
        core.build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        Metrics {
            core,
            heartbeat: HeartbeatMetrics::register(&r),
            follow: FollowMetrics::register(&r),
            canary: CanaryMetrics::register(&r),
            registry: r,
        }
    }

    /// Creates every series the config implies, so dashboards and alert rules see them
    /// (at 0, or the objective) before the first run: labelled counters start at zero.
    pub(crate) fn init(&self, config: &drcheck_config::Config) {
        for sink in &config.alerts {
            self.alerts_sent_total.with_label_values(&[&sink.name]);
            self.alerts_dead_lettered_total.with_label_values(&[&sink.name]);
        }
        for t in &config.targets {
            self.rto_target.with_label_values(&[&t.name]).set(t.rto.as_secs_f64());
            self.rpo_target.with_label_values(&[&t.name]).set(t.rpo.as_secs_f64());
            self.rto_warn_ahead.with_label_values(&[&t.name]).set(t.rto_warn_ahead.as_secs_f64());
            self.proves_window
                .with_label_values(&[&t.name])
                .set(i64::from(t.select == drcheck_config::Selection::LeastProven));
            self.runs_total.with_label_values(&[&t.name, "passed"]);
            self.runs_total.with_label_values(&[&t.name, "failed"]);
            self.runs_total.with_label_values(&[&t.name, "error"]);
            if t.schedule.is_some() {
                self.scheduled_runs_total.with_label_values(&[&t.name]);
            }
            if let Some(hb) = t.heartbeat.as_ref().filter(|h| h.url.is_some()) {
                self.heartbeat.interval.with_label_values(&[&t.name]).set(hb.interval.as_secs_f64());
                self.heartbeat.failures_total.with_label_values(&[&t.name]);
            }
            if let Some(f) = &t.follow {
                self.follow.interval.with_label_values(&[&t.name]).set(f.interval.as_secs_f64());
                self.follow.up.with_label_values(&[&t.name]);
                self.follow.segments_replayed_total.with_label_values(&[&t.name]);
                self.follow.fetched_bytes_total.with_label_values(&[&t.name]);
            }
        }
    }

    /// Drops the series of targets and sinks `old` had and `new` does not (a reload):
    /// a removed target's last success must not age into a stale alert.
    pub(crate) fn forget_removed(&self, old: &drcheck_config::Config, new: &drcheck_config::Config) {
        for t in old.targets.iter().filter(|t| new.target(&t.name).is_none()) {
            self.forget_series("target", &t.name);
        }
        for sink in old.alerts.iter().filter(|a| new.alerts.iter().all(|n| n.name != a.name)) {
            self.forget_series("sink", &sink.name);
        }
    }

    /// Every series, of every group, whose `label` is `value`.
    fn forget_series(&self, label: &str, value: &str) {
        self.core.forget(label, value);
        self.heartbeat.forget(label, value);
        self.follow.forget(label, value);
        self.canary.forget(label, value);
    }

    /// Every metric drcheck declares: the registry's and the drills' (written by
    /// `drcheck drill run`).
    #[cfg(test)]
    pub(crate) fn declared() -> impl Iterator<Item = &'static Declared> {
        Core::DECLARED
            .iter()
            .chain(HeartbeatMetrics::DECLARED)
            .chain(FollowMetrics::DECLARED)
            .chain(CanaryMetrics::DECLARED)
            .chain(DrillMetrics::DECLARED)
    }

    /// Restores the last success of a target (from the history store, at start-up), so
    /// staleness is measured across restarts.
    pub(crate) fn set_last_success(&self, target: &str, finished_at: &str) {
        if let Ok(t) = humantime::parse_rfc3339(finished_at) {
            self.last_success_timestamp
                .with_label_values(&[target])
                .set(t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64());
        }
    }

    /// Records a finished run.
    pub(crate) fn observe(&self, r: &RunReport, target: &TargetConfig) {
        self.runs_total.with_label_values(&[r.target.as_str(), r.result.as_str()]).inc();
        self.show(r, target);
    }

    /// Every target's series from the history store: its last success and its latest
    /// run's gauges. The daemon calls it at start-up and a one-shot run before writing
    /// its textfile, so a failed run or `--target` never drops another target's series
    /// (and `DrcheckVerificationStale` can fire while runs keep failing).
    pub(crate) async fn seed_from_history(&self, config: &drcheck_config::Config, history: &crate::history::History) {
        for c in history.latest_canaries(config).await.unwrap_or_default().values() {
            self.canary.observe(c);
        }
        for t in &config.targets {
            if let Ok(Some(r)) = history.latest_verdict(&t.name).await {
                self.show(&r, t);
            }
            if let Ok(Some(last)) = history.last_success(&t.name).await {
                self.set_last_success(&t.name, &last);
            }
            // The newest points any run saw: whatever the latest run proved, they hold.
            if let Ok(f) = history.freshness(&t.name).await {
                let unix = |s: &Option<String>| {
                    s.as_deref()
                        .and_then(|s| humantime::parse_rfc3339_weak(s).ok())
                        .map(|t| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64())
                };
                if let Some(at) = unix(&f.backup_at) {
                    forward(&self.backup_timestamp, &t.name, at);
                }
                if let Some(at) = unix(&f.recoverable_point) {
                    forward(&self.recoverable_point, &t.name, at);
                }
                if let Some(at) = unix(&f.measured_at) {
                    forward(&self.rpo_measured, &t.name, at);
                }
            }
        }
    }

    /// A run's gauges (not its counters).
    fn show(&self, r: &RunReport, target: &TargetConfig) {
        let t = r.target.as_str();
        let passed = r.result == RunResult::Passed;
        // An aborted run (a shutdown, a deadline) says nothing about the backup: the
        // last verdict stands, as it does for the alerts.
        if r.result == RunResult::Aborted {
            return;
        }
        self.last_run_success.with_label_values(&[t]).set(passed as i64);
        self.last_run_inconclusive.with_label_values(&[t]).set((r.result == RunResult::Inconclusive) as i64);
        match &r.content {
            Some(c) => self.content_proven.with_label_values(&[t]).set(c.proven_percent / 100.0),
            None => {
                let _ = self.content_proven.remove_label_values(&[t]);
            }
        }
        if passed {
            self.set_last_success(t, &r.finished_at);
        }
        if let Some(m) = r.rto.measured_seconds {
            self.restore_duration.with_label_values(&[t]).set(m);
        }
        for p in &r.phases {
            self.phase_duration.with_label_values(&[t, &p.name]).set(p.seconds);
        }
        self.rto_target.with_label_values(&[t]).set(target.rto.as_secs_f64());
        self.rto_warn_ahead.with_label_values(&[t]).set(target.rto_warn_ahead.as_secs_f64());
        // The forecast of the last run that made one; a run that could not (the history
        // unreadable) leaves the last one standing.
        if let Some(f) = &r.rto.forecast {
            match f.breach_at.as_deref().map(humantime::parse_rfc3339_weak) {
                Some(Ok(at)) => self
                    .rto_forecast_breach
                    .with_label_values(&[t])
                    .set(at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()),
                _ => {
                    let _ = self.rto_forecast_breach.remove_label_values(&[t]);
                }
            }
        }
        self.rpo_target.with_label_values(&[t]).set(target.rpo.as_secs_f64());
        if let Some(b) = &r.backup {
            // Freshness only moves forward: proving an older backup (least-proven, a
            // point in time) says nothing about how fresh the newest one is.
            if let Some(Ok(ts)) = b.created_at.as_deref().map(humantime::parse_rfc3339) {
                forward(&self.backup_timestamp, t, ts.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64());
            }
            self.backup_size.with_label_values(&[t]).set(b.size_bytes as f64);
        }
        for v in &r.validators {
            // Skipped is neither: an alert on success == 0 must not fire for a check that
            // had nothing to do (issue 34).
            if v.status == Status::Skipped {
                let _ = self.validator_success.remove_label_values(&[t, &v.name]);
            } else {
                self.validator_success.with_label_values(&[t, &v.name]).set((v.status == Status::Passed) as i64);
            }
            self.validator_skipped.with_label_values(&[t, &v.name]).set((v.status == Status::Skipped) as i64);
            self.validator_inconclusive.with_label_values(&[t, &v.name]).set(v.inconclusive.len() as i64);
            if v.name == "immutability" {
                match v.measurements.get("locked") {
                    Some(l) => self.backup_locked.with_label_values(&[t]).set(i64::from(*l > 0.0)),
                    None => {
                        let _ = self.backup_locked.remove_label_values(&[t]);
                    }
                }
                match v.measurements.get("lock_remaining_seconds") {
                    Some(s) => self.backup_lock_remaining.with_label_values(&[t]).set(*s),
                    None => {
                        let _ = self.backup_lock_remaining.remove_label_values(&[t]);
                    }
                }
            }
            if v.name == "pinned"
                && let Some(c) = v.measurements.get("changed")
            {
                self.backups_changed_since_proven.with_label_values(&[t]).set(*c as i64);
            }
            if v.name == "repository"
                && let Ok(at) = humantime::parse_rfc3339_weak(&r.finished_at)
            {
                self.repository_check_success.with_label_values(&[t]).set((v.status == Status::Passed) as i64);
                let at = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
                self.repository_check_timestamp.with_label_values(&[t]).set(at);
            }
        }
        if let Some(info) = &r.restore {
            for p in ["production", "fast"] {
                self.restore_profile.with_label_values(&[t, p]).set((info.profile == p) as i64);
            }
        }
        let unix = |s: &str| {
            humantime::parse_rfc3339_weak(s)
                .ok()
                .map(|t| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64())
        };
        // The newest recoverable point the run knew of (the archive's reach, else the
        // newest backup's time) — not the point it proved; it only moves forward.
        if let Some(at) = r.rpo.recoverable_point.as_deref().and_then(unix) {
            forward(&self.recoverable_point, t, at);
        }
        if let Some(at) = r.rpo.measured_at.as_deref().and_then(unix) {
            forward(&self.rpo_measured, t, at);
        }
        // A point of the window proven: replay asked for a target and the run passed.
        if passed && r.restore.as_ref().is_some_and(|i| i.recovery_target.is_some() && i.recovered_to.is_some()) {
            self.points_in_time_proven_total.with_label_values(&[t]).inc();
        }
        if let Some(at) = r.rpo.recovery_window_start.as_deref().and_then(unix) {
            self.recovery_window_start.with_label_values(&[t]).set(at);
        }
        if let Some(lag) = r.rpo.data_lag_seconds {
            self.data_lag.with_label_values(&[t]).set(lag);
        }
        if let Some(c) = &r.coverage {
            self.show_coverage(t, c);
        }
    }

    /// A target's coverage gauges.
    pub(crate) fn show_coverage(&self, t: &str, c: &crate::run_report::Coverage) {
        self.backups_restorable.with_label_values(&[t]).set(c.restorable as i64);
        self.backups_proven.with_label_values(&[t]).set(c.proven as i64);
        self.backups_unproven.with_label_values(&[t]).set(c.restorable.saturating_sub(c.proven) as i64);
    }

    /// Records a repository check (the `repository` validator, alone or in a run).
    pub(crate) fn observe_integrity(&self, target: &str, f: &drcheck_validators::Finding) {
        let passed = f.status == drcheck_validators::Status::Passed;
        self.repository_check_success.with_label_values(&[target]).set(passed as i64);
        let now = std::time::SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        self.repository_check_timestamp.with_label_values(&[target]).set(now);
    }

    /// Sets each dependency's breaker gauge from the restore crate's breakers.
    /// The config was loaded (`ok`) or a reload failed and the old one is kept.
    pub(crate) fn config_loaded(&self, ok: bool) {
        self.config_reload_success.set(i64::from(ok));
        if ok {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            self.config_reload_timestamp.set(now.as_secs_f64());
        }
    }

    pub(crate) fn refresh_breakers(&self) {
        for (dep, state) in drcheck_restore::breaker::states() {
            let open = state == drcheck_restore::breaker::BreakerState::Open;
            self.breaker_open.with_label_values(&[&dep]).set(open as i64);
        }
    }

    /// The text exposition of everything.
    pub(crate) fn render(&self) -> String {
        self.refresh_breakers();
        encode(&self.registry.gather())
    }

    /// The text exposition without `drcheck_last_success_timestamp_seconds`.
    pub(crate) fn render_without_last_success(&self) -> String {
        let families: Vec<_> = self
            .registry
            .gather()
            .into_iter()
            .filter(|f| f.name() != "drcheck_last_success_timestamp_seconds")
            .collect();
        encode(&families)
    }
}

fn encode(families: &[prometheus::proto::MetricFamily]) -> String {
    let mut buf = Vec::new();
    let _ = TextEncoder::new().encode(families, &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

/// Pushes one target's metrics to a Pushgateway (POST: replaces only the pushed names,
/// so a failed run's push leaves the last success timestamp in place).
pub(crate) async fn push(gateway: &str, target: &str, body: String) -> anyhow::Result<()> {
    push_group(gateway, &format!("job/drcheck/target/{target}"), body).await
}

/// Pushes `body` to the Pushgateway group `grouping` (`job/…/label/value`).
pub(crate) async fn push_group(gateway: &str, grouping: &str, body: String) -> anyhow::Result<()> {
    let url = format!("{}/metrics/{grouping}", gateway.trim_end_matches('/'));
    // Errors name the gateway without the credentials its URL may carry.
    let gateway = &drcheck_config::redact_userinfo(gateway);
    let resp = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        .timeout(std::time::Duration::from_secs(15))
        .build()?
        .post(&url)
        .header("Content-Type", "text/plain; version=0.0.4")
        .body(body)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("pushing metrics to {gateway}: {}", e.without_url()))?;
    if !resp.status().is_success() {
        anyhow::bail!(
            "pushing metrics to {gateway}: HTTP {}: {}",
            resp.status(),
            resp.text().await.unwrap_or_default()
        );
    }
    Ok(())
}

/// Sets a timestamp gauge to `at` unless it already holds a later one.
fn forward(g: &GaugeVec, target: &str, at: f64) {
    let g = g.with_label_values(&[target]);
    if at > g.get() {
        g.set(at);
    }
}

/// Writes the exposition to `path` atomically (a temporary file renamed into place).
pub(crate) fn write_textfile(path: &Path, body: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!("prom.tmp.{}", std::process::id()));
    std::fs::write(&tmp, body).map_err(|e| anyhow::anyhow!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::anyhow!("renaming {} into place: {e}", path.display())
    })
}

/// A drill's metrics (`drcheck_drill_*`), as a text exposition.
/// The drill metrics of journal `j`; `totals` are the drill counts by result from the
/// history store (this drill included), else this drill alone is counted.
pub(crate) fn drill_exposition(j: &drcheck_runbooks::Journal, totals: Option<&[(String, i64)]>) -> String {
    let r = Registry::new();
    let DrillMetrics { runs, duration, rto_met, rto_seconds } = DrillMetrics::register(&r);
    let name = j.runbook.name.as_str();
    for result in ["completed", "failed", "aborted"] {
        runs.with_label_values(&[name, result]);
    }
    match totals {
        Some(totals) => {
            for (result, n) in totals {
                runs.with_label_values(&[name, result]).inc_by(*n as u64);
            }
        }
        None => runs.with_label_values(&[name, j.result.as_str()]).inc(),
    }
    duration.with_label_values(&[name]).set(j.duration_seconds);
    if let Some(met) = j.rto.met {
        rto_met.with_label_values(&[name]).set(met as i64);
    }
    if let Some(m) = j.rto.measured_seconds {
        rto_seconds.with_label_values(&[name]).set(m);
    }
    encode(&r.gather())
}

#[cfg(test)]
mod declared_tests {
    use super::*;
    use std::collections::BTreeSet;

    fn repo(path: &str) -> String {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// The `drcheck_*` names in `text` (a rules file, a dashboard, the README).
    fn names_in(text: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut rest = text;
        while let Some(i) = rest.find("drcheck_") {
            let tail = &rest[i..];
            let end =
                tail.find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')).unwrap_or(tail.len());
            out.insert(tail[..end].trim_end_matches('_').to_string());
            rest = &tail[end..];
        }
        out
    }

    /// Issue 49: each metric is declared once (registered from its declaration, by the
    /// `metrics!` macro); every one the shipped rules and the dashboard read is declared,
    /// and every declared one is documented in the README.
    #[test]
    fn every_metric_is_declared_once_used_where_declared_and_documented() {
        let declared: BTreeSet<&str> = Metrics::declared().map(|d| d.name).collect();
        assert_eq!(declared.len(), Metrics::declared().count(), "a metric declared twice");
        for (file, text) in [
            ("deploy/prometheus/rules.yml", repo("deploy/prometheus/rules.yml")),
            ("deploy/grafana/drcheck.json", repo("deploy/grafana/drcheck.json")),
        ] {
            let used = names_in(&text);
            let unknown: Vec<&String> = used.iter().filter(|n| !declared.contains(n.as_str())).collect();
            assert!(unknown.is_empty(), "{file} reads metrics nothing declares: {unknown:?}");
        }
        let readme = names_in(&repo("README.md"));
        let undocumented: Vec<&&str> = declared.iter().filter(|n| !readme.contains(**n)).collect();
        assert!(undocumented.is_empty(), "declared but not in the README: {undocumented:?}");
    }
}
