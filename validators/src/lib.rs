//! drcheck's validators: checks that turn "the restore exited 0" into "this backup
//! holds our data". Each [`Validator`] looks at the restored copy and, where it
//! compares, at the primary, and returns one [`Finding`]: `passed`, `failed`,
//! `skipped` (could not run — never counted as passed) or `error`.
//!
//! Validators never know where a backup came from and never see storage credentials.
//! The primary is reached only through [`primary::connect`], which makes every session
//! read-only, time-limited and capped in number.

pub mod catalog;
pub mod primary;
mod row_counts;
mod schema;

pub use row_counts::RowCounts;
pub use schema::Schema;

use async_trait::async_trait;
use drcheck_config::quote_ident;
use serde::Serialize;
use sqlx::PgPool;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Passed,
    Failed,
    Skipped,
    Error,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
            Status::Error => "error",
        }
    }
}

/// One validator's verdict with a precise, human-readable detail.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub name: String,
    pub status: Status,
    pub detail: String,
}

impl Finding {
    pub fn new(name: &str, status: Status, detail: impl Into<String>) -> Self {
        Self { name: name.to_string(), status, detail: detail.into() }
    }
}

/// The primary, if it could be reached; otherwise why not.
pub enum Primary {
    Available(PgPool),
    Unavailable(String),
}

/// What validators get to look at.
pub struct Context {
    /// The restored database in the sandbox.
    pub restored: PgPool,
    pub primary: Primary,
    /// Allowed relative difference of row counts (0.001 = 0.1%).
    pub row_count_tolerance: f64,
}

#[async_trait]
pub trait Validator: Send + Sync {
    fn name(&self) -> &'static str;
    async fn validate(&self, cx: &Context) -> Finding;
}

/// The validators every target gets.
pub fn builtins() -> Vec<Box<dyn Validator>> {
    vec![Box::new(Schema), Box::new(RowCounts)]
}

/// Runs every validator, each under `timeout`; one failing or erroring never stops the others.
pub async fn run_all(validators: &[Box<dyn Validator>], cx: &Context, timeout: Duration) -> Vec<Finding> {
    let mut out = Vec::with_capacity(validators.len());
    for v in validators {
        let finding = match tokio::time::timeout(timeout, v.validate(cx)).await {
            Ok(f) => f,
            Err(_) => Finding::new(v.name(), Status::Error, format!("timed out after {timeout:?}")),
        };
        tracing::info!(validator = v.name(), status = finding.status.as_str(), "validator finished");
        out.push(finding);
    }
    out
}

/// A "schema"."table" name, quoted for SQL and readable for people.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableName {
    pub schema: String,
    pub name: String,
}

impl TableName {
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}
