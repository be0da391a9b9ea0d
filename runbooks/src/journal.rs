//! The drill journal: what ran, when, for how long, what it said, and the verdict.
//! Written as JSON (`--json`, and next to the report); the HTML report is drawn from it.

use crate::format::OnFailure;
use crate::outcome::{Confirmation, Status};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DrillResult {
    /// The method ran to its end, the hypothesis held and the objectives were met.
    Completed,
    /// A step stopped the method, the steady state did not hold, an objective was
    /// missed, or a rollback failed.
    Failed,
    /// Stopped by the kill switch (SIGINT/SIGTERM), before or during the rollbacks.
    Aborted,
    /// Still going: the journal is rewritten after every step with this result, so a
    /// drill killed outright (SIGKILL, a crash) leaves its steps so far on record.
    Running,
}

impl std::str::FromStr for DrillResult {
    type Err = drcheck_config::UnknownWord;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use DrillResult::*;
        [Completed, Failed, Aborted, Running]
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| drcheck_config::UnknownWord { what: "a drill's result", word: s.into() })
    }
}

impl std::fmt::Display for DrillResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl DrillResult {
    pub fn as_str(self) -> &'static str {
        match self {
            DrillResult::Completed => "completed",
            DrillResult::Failed => "failed",
            DrillResult::Aborted => "aborted",
            DrillResult::Running => "running",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    SteadyStateBefore,
    Steps,
    SteadyStateAfter,
    Rollbacks,
}

impl Phase {
    pub fn title(self) -> &'static str {
        match self {
            Phase::SteadyStateBefore => "steady state (before)",
            Phase::Steps => "method",
            Phase::SteadyStateAfter => "steady state (after)",
            Phase::Rollbacks => "rollbacks",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Journal {
    pub drill_id: String,
    pub runbook: RunbookInfo,
    pub result: DrillResult,
    /// Whether the steady state held before and after the method; null when the drill
    /// was interrupted before that could be known.
    pub hypothesis_held: Option<bool>,
    /// Why the result is not `completed`.
    pub reasons: Vec<String>,
    pub started_at: String,
    pub finished_at: String,
    pub duration_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<String>,
    pub rto: RtoMeasure,
    pub rpo: RpoMeasure,
    /// The variables the drill ran with (secrets masked).
    pub variables: BTreeMap<String, String>,
    pub steady_state: SteadyState,
    pub steps: Vec<StepRecord>,
    pub rollbacks: Vec<StepRecord>,
    pub rollbacks_ran: bool,
    pub action_items: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunbookInfo {
    pub name: String,
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub file: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SteadyState {
    pub before: Vec<StepRecord>,
    pub after: Vec<StepRecord>,
}

/// The RTO clock: from the start of the first `recovery: true` step to the end of the
/// last one that ran.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RtoMeasure {
    pub objective_seconds: Option<f64>,
    pub measured_seconds: Option<f64>,
    /// Seconds from the drill's start to the clock's start and stop.
    pub started_offset_seconds: Option<f64>,
    pub ended_offset_seconds: Option<f64>,
    /// Every recovery step ran and passed: recovery actually finished.
    pub complete: bool,
    /// null without an objective.
    pub met: Option<bool>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RpoMeasure {
    pub objective_seconds: Option<f64>,
    /// Age of the newest backup a `verify` step restored (the data a restore would lose).
    pub backup_age_seconds: Option<f64>,
    pub met: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StepRecord {
    pub name: String,
    pub kind: &'static str,
    pub line: usize,
    pub phase: Phase,
    pub recovery: bool,
    pub on_failure: OnFailure,
    pub status: Status,
    /// What the step does, variables resolved, secrets masked.
    pub action: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// Seconds from the drill's start.
    pub offset_seconds: Option<f64>,
    pub duration_seconds: Option<f64>,
    pub timeout_seconds: f64,
    pub detail: String,
    pub output_tail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub captured: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<Confirmation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification: Option<serde_json::Value>,
}

impl Journal {
    /// Every step record in the order it ran.
    pub fn timeline(&self) -> impl Iterator<Item = &StepRecord> {
        self.steady_state.before.iter().chain(&self.steps).chain(&self.steady_state.after).chain(&self.rollbacks)
    }
}
