//! What a step ended as: its [`Status`], its [`Outcome`] (why, its output, what it
//! captured) and who confirmed a manual step — what the live output, the journal and the
//! report all read, below the steps that produce it.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Passed,
    Failed,
    TimedOut,
    /// Stopped by the kill switch (SIGINT/SIGTERM).
    Aborted,
    /// Never started.
    Skipped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::TimedOut => "timed_out",
            Status::Aborted => "aborted",
            Status::Skipped => "skipped",
        }
    }
}

/// Who confirmed a manual step, and when.
#[derive(Debug, Clone, Serialize)]
pub struct Confirmation {
    pub by: String,
    pub at: String,
    /// `terminal` or `--yes`.
    pub how: String,
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: Status,
    /// Why, in a line: `exit 0`, `returned "5000"`, `HTTP 503, expected 200`.
    pub detail: String,
    /// The last lines of output (secrets scrubbed).
    pub output: String,
    /// What `capture` stores.
    pub value: Option<String>,
    pub confirmation: Option<Confirmation>,
    /// A `verify` step's full report.
    pub verification: Option<serde_json::Value>,
    pub backup_age_seconds: Option<f64>,
}

impl Outcome {
    pub fn new(status: Status, detail: impl Into<String>) -> Self {
        Outcome {
            status,
            detail: detail.into(),
            output: String::new(),
            value: None,
            confirmation: None,
            verification: None,
            backup_age_seconds: None,
        }
    }

    pub fn passed(detail: impl Into<String>) -> Self {
        Self::new(Status::Passed, detail)
    }

    pub fn failed(detail: impl Into<String>) -> Self {
        Self::new(Status::Failed, detail)
    }
}
