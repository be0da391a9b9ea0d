//! Alerts: derived from each run, written to the outbox in the run's own transaction
//! (`History::record`), delivered at least once by the [`dispatch`] loop with a stable
//! dedup key, retried with backoff and jitter behind a circuit breaker per sink, and
//! moved to dead letters after `max_attempts`.

pub(crate) mod sinks;

use crate::run_report::{RunReport, RunResult};
use drcheck_validators::Status;
use serde::{Deserialize, Serialize};

pub(crate) const FAILED: &str = "DrcheckVerificationFailed";
pub(crate) const RTO_MISSED: &str = "DrcheckRTOMissed";
pub(crate) const RPO_MISSED: &str = "DrcheckRPOMissed";
pub(crate) const STALE: &str = "DrcheckVerificationStale";
/// A run that held where it could decide, but left more of the content undecided than
/// `max_undecided`: no proof of the backup (a warning, never the failure page).
pub(crate) const CONTENT_UNPROVEN: &str = "DrcheckContentUnproven";
/// A follower cannot replay a segment of the archive (a gap, an unreadable or corrupt
/// segment, replay stuck, its server gone).
pub(crate) const ARCHIVE_NOT_REPLAYABLE: &str = "DrcheckArchiveNotReplayable";
/// What a follower can replay is older than the RPO.
pub(crate) const ARCHIVE_BEHIND: &str = "DrcheckArchiveBehind";

/// An alert's state (`firing`, `resolved` in the JSON and the outbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum AlertState {
    Firing,
    Resolved,
}

impl AlertState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AlertState::Firing => "firing",
            AlertState::Resolved => "resolved",
        }
    }
}

impl std::fmt::Display for AlertState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One alert in one state, as queued for every sink.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Alert {
    pub alertname: String,
    pub target: String,
    pub severity: String,
    pub state: AlertState,
    pub summary: String,
    pub description: String,
    pub run_id: Option<String>,
    /// When this firing episode began (RFC 3339).
    pub starts_at: String,
    /// For resolutions: when it resolved; for a canary's firing alert, when it lapses by
    /// itself.
    pub ends_at: Option<String>,
    /// Stable per alert, episode and state: the `Idempotency-Key`.
    pub dedup_key: String,
    /// A canary's alert (`drcheck canary`): made on purpose to prove the path to the
    /// pager, resolved right after; labelled `canary="true"`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub canary: bool,
}

/// Which of the run-derived alerts a run makes fire, with why.
pub(crate) fn firing(r: &RunReport) -> Vec<(&'static str, &'static str, String)> {
    let mut out = Vec::new();
    if r.result == RunResult::Aborted {
        return out;
    }
    if matches!(r.result, RunResult::Failed | RunResult::Error) {
        let why = r
            .error
            .as_ref()
            .map(|e| format!("[{}] {}", e.stage, e.message))
            .or_else(|| {
                let bad: Vec<String> = r
                    .validators
                    .iter()
                    .filter(|v| v.status == Status::Failed || v.status == Status::Error)
                    .map(|v| format!("{}: {}", v.name, v.detail))
                    .collect();
                (!bad.is_empty()).then(|| bad.join("; "))
            })
            .unwrap_or_else(|| "an objective was missed".into());
        out.push((FAILED, severity_of(FAILED), format!("verification of {} {}: {why}", r.target, r.result.as_str())));
    }
    if r.result == RunResult::Inconclusive {
        let why = match &r.content {
            Some(c) => format!(
                "content {}% proven: {} of {} tables and {} rows undecided (max_undecided {}%)",
                c.proven_percent, c.tables_undecided, c.tables, c.rows_undecided, c.max_undecided_percent
            ),
            None => "its content could not be decided".into(),
        };
        out.push((
            CONTENT_UNPROVEN,
            severity_of(CONTENT_UNPROVEN),
            format!("verification of {} inconclusive: {why}", r.target),
        ));
    }
    if r.rto.met == Some(false) {
        out.push((
            RTO_MISSED,
            severity_of(RTO_MISSED),
            format!(
                "restore took {:.0}s, the RTO is {:.0}s",
                r.rto.measured_seconds.unwrap_or_default(),
                r.rto.target_seconds
            ),
        ));
    }
    if r.rpo.met == Some(false) {
        out.push((
            RPO_MISSED,
            severity_of(RPO_MISSED),
            format!(
                "the newest recoverable point is {:.0}s old, the RPO is {:.0}s",
                r.rpo.recoverable_point_age_seconds.or(r.rpo.backup_age_seconds).unwrap_or_default(),
                r.rpo.target_seconds
            ),
        ));
    }
    out
}

/// Each alert's severity. Fixed per alert, so that a resolution carries the very same
/// labels as the firing alert (Alertmanager identifies alerts by their labels).
pub(crate) fn severity_of(alertname: &str) -> &'static str {
    if alertname == RTO_MISSED || alertname == CONTENT_UNPROVEN { "warning" } else { "critical" }
}

/// The run-derived alert names (every one of them can resolve).
pub(crate) const RUN_ALERTS: [&str; 4] = [FAILED, RTO_MISSED, RPO_MISSED, CONTENT_UNPROVEN];

/// The dedup key of an alert in a state within an episode.
pub(crate) fn dedup_key(target: &str, alertname: &str, episode: &str, state: AlertState) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(format!("{target}\n{alertname}\n{episode}\n{state}")))[..32].to_string()
}
