//! What a canary found (`drcheck canary`, `[daemon] canary`): its report, each defect's
//! outcome, each sink's answer, and the alert names — kept below the history store, which
//! records canaries, and the metrics and evidence, which read them. How a canary is made
//! and judged is [`crate::canary`].

use crate::ids::new_run_id;
use crate::run_report::{RunReport, timestamp};
use serde::{Deserialize, Serialize};
use std::time::SystemTime;

/// The canary alert: fired and resolved at once through every sink.
pub(crate) const CANARY_ALERT: &str = "DrcheckCanary";
/// A defect passed the pipeline.
pub(crate) const CANARY_UNDETECTED: &str = "DrcheckCanaryUndetected";
/// A sink did not accept the canary alert.
pub(crate) const ALERT_PATH_BROKEN: &str = "DrcheckAlertPathBroken";

/// The checks that own `defect`: the validators that say they catch it (the registry's
/// `catches`), the binary's own `archive` finding for a segment left out, and the
/// restore itself (a copy refused as the backup's fault is caught).
pub(crate) fn owners(defect: &str) -> Vec<&'static str> {
    let mut owners = drcheck_validators::names_where(|c| c.catches.contains(&defect));
    if defect == "missing_segment" {
        owners.push("archive");
    }
    owners.push("restore");
    owners
}

/// A canary's verdict (see [`CanaryReport::result`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CanaryResult {
    Caught,
    Missed,
    Error,
    Inconclusive,
    Skipped,
}

/// One defect's outcome (see [`DefectOutcome::outcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum DefectVerdict {
    Detected,
    Undetected,
    Inconclusive,
    Error,
    Skipped,
}

impl CanaryResult {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CanaryResult::Caught => "caught",
            CanaryResult::Missed => "missed",
            CanaryResult::Error => "error",
            CanaryResult::Inconclusive => "inconclusive",
            CanaryResult::Skipped => "skipped",
        }
    }
}

impl DefectVerdict {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DefectVerdict::Detected => "detected",
            DefectVerdict::Undetected => "undetected",
            DefectVerdict::Inconclusive => "inconclusive",
            DefectVerdict::Error => "error",
            DefectVerdict::Skipped => "skipped",
        }
    }
}

impl std::str::FromStr for CanaryResult {
    type Err = drcheck_config::UnknownWord;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use CanaryResult::*;
        [Caught, Missed, Error, Inconclusive, Skipped]
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| drcheck_config::UnknownWord { what: "a canary result", word: s.into() })
    }
}

impl std::str::FromStr for DefectVerdict {
    type Err = drcheck_config::UnknownWord;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use DefectVerdict::*;
        [Detected, Undetected, Inconclusive, Error, Skipped]
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| drcheck_config::UnknownWord { what: "a defect's outcome", word: s.into() })
    }
}

impl std::fmt::Display for CanaryResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for DefectVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One canary of one target.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CanaryReport {
    pub canary_id: String,
    pub target: String,
    /// The proven backup the defective copies were made of.
    pub backup: Option<String>,
    pub started_at: String,
    pub finished_at: String,
    /// `caught` (every defect made was caught), `missed` (one was not), `error` (none
    /// missed, but one could not be judged or the canary stopped early), `inconclusive`
    /// (one was seen but could not be told from a change on the primary), `skipped` (no
    /// defect could be made for this target, said in `skipped`).
    pub result: CanaryResult,
    pub defects: Vec<DefectOutcome>,
    /// Each sink: whether it accepted the canary alert.
    #[serde(default)]
    pub alerts: Vec<SinkOutcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why no defect could be made for this target (`skipped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// What the canary decided on the way: a newer proven backup that is gone from the
    /// store (the next one copied instead), a budgeted target's changed table compared
    /// whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DefectOutcome {
    pub defect: String,
    /// `detected`, `undetected`, `inconclusive` (its owner saw it but could not tell it
    /// from a change on the primary), `error` (the run could not judge it) or `skipped`
    /// (it could not be made).
    pub outcome: DefectVerdict,
    /// Where the defect is.
    pub made: String,
    /// Which owning checks named it.
    #[serde(default)]
    pub named_by: Vec<String>,
    pub detail: String,
    /// The verification of the defective copy (marked `canary`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunReport>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct SinkOutcome {
    pub sink: String,
    pub accepted: bool,
    pub detail: String,
}

impl CanaryReport {
    pub(crate) fn new(target: &str) -> Self {
        CanaryReport {
            canary_id: new_run_id(),
            target: target.into(),
            backup: None,
            started_at: timestamp(SystemTime::now()),
            finished_at: String::new(),
            result: CanaryResult::Skipped,
            defects: Vec::new(),
            alerts: Vec::new(),
            error: None,
            skipped: None,
            notes: Vec::new(),
        }
    }

    /// The verdict from the defects' outcomes.
    pub(crate) fn conclude(&mut self) {
        let has = |o: DefectVerdict| self.defects.iter().any(|d| d.outcome == o);
        self.result = if has(DefectVerdict::Undetected) {
            CanaryResult::Missed
        } else if has(DefectVerdict::Error) || self.error.is_some() {
            CanaryResult::Error
        } else if has(DefectVerdict::Inconclusive) {
            CanaryResult::Inconclusive
        } else if has(DefectVerdict::Detected) {
            CanaryResult::Caught
        } else {
            CanaryResult::Skipped
        };
        self.finished_at = timestamp(SystemTime::now());
    }

    /// Its result and each defect's outcome, short: `caught: changed_row by checksums`.
    pub(crate) fn outcomes(&self) -> String {
        let parts: Vec<String> = self
            .defects
            .iter()
            .map(|d| match d.outcome {
                DefectVerdict::Detected => format!("{} by {}", d.defect, d.named_by.join(", ")),
                other => format!("{} {other}", d.defect),
            })
            .collect();
        let broken: Vec<&str> = self.alerts.iter().filter(|s| !s.accepted).map(|s| s.sink.as_str()).collect();
        let mut out = format!(
            "{}: {}",
            self.result,
            if parts.is_empty() { "no defect made".to_string() } else { parts.join("; ") }
        );
        if !broken.is_empty() {
            out.push_str(&format!("; alert not accepted by {}", broken.join(", ")));
        }
        out
    }

    /// One line: what was made and what caught it.
    pub(crate) fn summary(&self) -> String {
        let parts: Vec<String> = self
            .defects
            .iter()
            .map(|d| match d.outcome {
                DefectVerdict::Detected => format!("{} caught by {}", d.defect, d.named_by.join(", ")),
                other => format!("{} {other}: {}", d.defect, crate::out::short(&d.detail, 300)),
            })
            .collect();
        let what = if parts.is_empty() {
            self.error.clone().or_else(|| self.skipped.clone()).unwrap_or_default()
        } else {
            parts.join("; ")
        };
        format!(
            "canary of {} ({}): {} — {what}",
            self.target,
            self.backup.as_deref().unwrap_or("no backup"),
            self.result
        )
    }
}
