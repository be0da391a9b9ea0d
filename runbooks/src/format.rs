//! The runbook file as users write it: YAML mapped onto these types with every key
//! known (`deny_unknown_fields`), so a typo is an error with its line, not silence.
//! `plan` turns this raw form into a checked `Runbook`.

use serde::Deserialize;
use serde_saphyr::Spanned;
use std::collections::BTreeMap;

/// A scalar written as a string, number or boolean (`port: 5432` and `port: "5432"`
/// mean the same); kept as the text the user wrote.
pub type Scalar = String;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRunbook {
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub objectives: RawObjectives,
    #[serde(default)]
    pub variables: BTreeMap<String, Spanned<Scalar>>,
    /// Checks run before the method and again after it: the hypothesis.
    #[serde(default)]
    pub steady_state: Vec<Spanned<RawStep>>,
    /// The method.
    pub steps: Vec<Spanned<RawStep>>,
    #[serde(default)]
    pub rollbacks: Vec<Spanned<RawStep>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawObjectives {
    pub rto: Option<Spanned<String>>,
    pub rpo: Option<Spanned<String>>,
}

/// One step: a name, exactly one kind, and how to run it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStep {
    pub name: String,
    pub shell: Option<RawShell>,
    pub sql: Option<RawSql>,
    pub http: Option<RawHttp>,
    pub verify: Option<RawVerify>,
    pub wait: Option<RawWait>,
    pub manual: Option<RawManual>,
    pub timeout: Option<Spanned<String>>,
    pub on_failure: Option<OnFailure>,
    #[serde(default)]
    pub recovery: bool,
}

/// What a failed step does to the drill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// Stop the method here and leave everything as it is (no rollbacks).
    Abort,
    /// Record the failure and go on with the next step.
    Continue,
    /// Stop the method here and run the rollbacks.
    Rollback,
}

impl OnFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Abort => "abort",
            OnFailure::Continue => "continue",
            OnFailure::Rollback => "rollback",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawShell {
    pub command: String,
    #[serde(default)]
    pub env: BTreeMap<String, Scalar>,
    pub workdir: Option<String>,
    /// Run as this OS user (drcheck must be root to switch); empty means drcheck's own.
    pub run_as: Option<String>,
    pub expect_exit: Option<i32>,
    /// A regular expression the output (stdout and stderr) must match; `^` and `$`
    /// match at line boundaries, as in grep.
    pub expect_output: Option<String>,
    /// A regular expression the output must not match.
    pub reject_output: Option<String>,
    /// Store the trimmed stdout in this variable for later steps.
    pub capture: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSql {
    /// A `postgres://` URL (`?host=/socket/dir` for a unix socket).
    pub dsn: Option<String>,
    /// Or: the primary of this target in drcheck's config.
    pub target: Option<String>,
    pub query: String,
    /// The first column of the first row, as text, must equal this.
    pub expect: Option<Scalar>,
    pub capture: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttp {
    pub method: Option<String>,
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, Scalar>,
    pub body: Option<String>,
    /// Default: any 2xx.
    pub expect_status: Option<u16>,
    pub body_contains: Option<String>,
    /// JSON pointer (`/status`) → the value it must equal.
    #[serde(default)]
    pub expect_json: BTreeMap<String, serde_json::Value>,
    pub capture: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVerify {
    pub target: String,
    /// A backup key instead of the latest.
    pub backup: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWait {
    /// A fixed pause.
    #[serde(rename = "for")]
    pub pause: Option<Spanned<String>>,
    /// Or: poll this check until it passes (the step's `timeout` bounds the wait).
    pub until: Option<Box<RawProbe>>,
    /// Or: poll the steady-state check or earlier step with this name.
    pub until_step: Option<Spanned<String>>,
    /// How often to poll (default 1s).
    pub every: Option<Spanned<String>>,
}

/// A check a `wait` polls: one of the checking kinds, without a name.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProbe {
    pub shell: Option<RawShell>,
    pub sql: Option<RawSql>,
    pub http: Option<RawHttp>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawManual {
    /// What the operator must do before confirming.
    pub instruction: String,
}
