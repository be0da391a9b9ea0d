//! `verify`: a drcheck verification of a configured target, as a step. The runbooks
//! crate only defines the [`Verifier`] trait; the binary implements it with its
//! pipeline (so runbooks know nothing of S3, sandboxes or the history store).

use super::{Outcome, Raced, StepCtx, race};
use crate::format::RawVerify;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
pub struct VerifyOutcome {
    pub passed: bool,
    /// One line: result, backup, RTO, failed validators.
    pub summary: String,
    /// The run's JSON report, embedded in the journal.
    pub report: serde_json::Value,
    pub backup_age_seconds: Option<f64>,
}

#[async_trait::async_trait]
pub trait Verifier: Send + Sync {
    /// Verifies `target` (the latest backup, or `backup`); stops when `cancel` fires.
    async fn verify(
        &self,
        target: &str,
        backup: Option<&str>,
        cancel: CancellationToken,
    ) -> Result<VerifyOutcome, VerifyError>;
}

/// Why a verification could not run (not why it failed: that is its outcome).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("no target {0:?} in the config")]
    UnknownTarget(String),
    /// Another drcheck holds the target's lease.
    #[error("{target} is being verified by another drcheck ({holder}): not run")]
    Busy { target: String, holder: String },
    /// What the verifier could not do, in its words (the lease store, the report).
    #[error("{0}")]
    Unavailable(String),
}

pub async fn run(v: &RawVerify, ctx: &StepCtx<'_>) -> Result<Outcome, Outcome> {
    let target = ctx.resolve("target", &v.target)?;
    let backup = v.backup.as_deref().map(|b| ctx.resolve("backup", b)).transpose()?;
    let verifier = ctx.env.verifier.ok_or_else(|| Outcome::failed("verify steps need drcheck's config"))?;
    // The verification gets its own token so that it unwinds (and tears its sandbox
    // down) whether the deadline or the kill switch stops it.
    let token = CancellationToken::new();
    let run = verifier.verify(&target, backup.as_deref(), token.clone());
    tokio::pin!(run);
    let result = match race(ctx, &mut run).await {
        Raced::Done(r) => r,
        stopped => {
            token.cancel();
            let _ = run.await;
            return Err(match stopped {
                Raced::TimedOut => super::timed_out(ctx),
                _ => super::aborted(),
            });
        }
    };
    let r = result.map_err(|e| Outcome::failed(format!("verification of {target} could not run: {e}")))?;
    let mut o = if r.passed { Outcome::passed(r.summary.clone()) } else { Outcome::failed(r.summary.clone()) };
    o.verification = Some(r.report);
    o.backup_age_seconds = r.backup_age_seconds;
    Ok(o)
}
