//! One file per step kind. Each runs one action within its deadline, watches the kill
//! switch, and returns an [`Outcome`]: a failed check is an outcome, not an error.

// A step returns its `Outcome` once, as `Ok` or (failing early) as `Err`: its size
// does not matter, and one type for both keeps every kind's code straight.
#![allow(clippy::result_large_err)]

mod http;
mod manual;
mod shell;
pub use shell::kill_running_groups;
mod sql;
mod verify;
mod wait;

pub use crate::plan::output_regex;
pub use verify::{Verifier, VerifyError, VerifyOutcome};

use crate::live::Live;
use crate::plan::Action;
use crate::scope::Scope;
use drcheck_config::Config;
use std::future::Future;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use crate::outcome::{Confirmation, Outcome, Status};

/// A step that ran out of its time.
pub(super) fn timed_out(ctx: &StepCtx<'_>) -> Outcome {
    Outcome::new(Status::TimedOut, format!("timed out after {}", fmt_duration(ctx.timeout)))
}

/// A step the kill switch stopped.
pub(super) fn aborted() -> Outcome {
    Outcome::new(Status::Aborted, "stopped by the kill switch")
}

/// What every step can reach.
pub struct Env<'a> {
    pub config: Option<&'a Config>,
    pub verifier: Option<&'a dyn Verifier>,
    /// `--yes`: manual steps are confirmed without asking.
    pub yes: bool,
    pub live: &'a Live,
    /// Set for every shell step (`DRCHECK_BIN`, `DRCHECK_CONFIG`).
    pub shell_env: Vec<(String, String)>,
    /// Called with the journal so far after every step (result `running`): the caller
    /// writes it atomically, so a drill killed outright leaves a readable record.
    pub checkpoint: Option<&'a (dyn Fn(&crate::journal::Journal) + Send + Sync)>,
}

pub struct StepCtx<'a> {
    pub scope: &'a Scope,
    pub env: &'a Env<'a>,
    pub deadline: Instant,
    pub timeout: std::time::Duration,
    pub cancel: &'a CancellationToken,
}

impl StepCtx<'_> {
    /// A text of the step with its variables resolved; a missing one fails the step.
    fn resolve(&self, what: &str, text: &str) -> Result<String, Outcome> {
        self.scope.resolve(text).map_err(|e| Outcome::failed(format!("{what}: {e}")))
    }

    fn scrub(&self, text: &str) -> String {
        crate::scope::scrub(text, &self.scope.secret_values())
    }
}

enum Raced<T> {
    Done(T),
    TimedOut,
    Cancelled,
}

/// Runs `fut` until it finishes, the step's deadline passes, or the kill switch trips.
async fn race<T>(ctx: &StepCtx<'_>, fut: impl Future<Output = T>) -> Raced<T> {
    tokio::select! {
        r = fut => Raced::Done(r),
        _ = tokio::time::sleep_until(ctx.deadline) => Raced::TimedOut,
        _ = ctx.cancel.cancelled() => Raced::Cancelled,
    }
}

/// Runs one action.
pub async fn run(action: &Action, ctx: &StepCtx<'_>) -> Outcome {
    let r = match action {
        Action::Shell(s) => shell::run(s, ctx).await,
        Action::Sql(s) => sql::run(s, ctx).await,
        Action::Http(h) => http::run(h, ctx).await,
        Action::Verify(v) => verify::run(v, ctx).await,
        Action::Wait(w) => Box::pin(wait::run(w, ctx)).await,
        Action::Manual(m) => manual::run(m, ctx).await,
    };
    r.unwrap_or_else(|o| o)
}

/// How a step's action reads in the plan, the live output and the journal
/// (variables resolved where known, secrets masked).
pub fn describe(action: &Action, scope: &Scope) -> String {
    use crate::plan::Wait;
    let d = |t: &str| scope.display(t);
    match action {
        Action::Shell(s) => {
            let user = s.run_as.as_deref().map(d).filter(|u| !u.is_empty());
            match user {
                Some(u) => format!("$ {}   (as {u})", d(&s.command)),
                None => format!("$ {}", d(&s.command)),
            }
        }
        Action::Sql(s) => {
            let on = match (&s.dsn, &s.target) {
                (Some(dsn), _) => d(dsn),
                (None, Some(t)) => format!("primary of {}", d(t)),
                (None, None) => String::new(),
            };
            format!("sql on {on}: {}", d(&s.query))
        }
        Action::Http(h) => format!("{} {}", h.method.as_deref().unwrap_or("GET"), d(&h.url)),
        Action::Verify(v) => match &v.backup {
            Some(b) => format!("drcheck verify --target {} --backup {}", d(&v.target), d(b)),
            None => format!("drcheck verify --target {}", d(&v.target)),
        },
        Action::Wait(Wait::Pause(p)) => format!("wait {}", fmt_duration(*p)),
        Action::Wait(Wait::Until { probe, every }) => {
            format!("every {} until: {}", fmt_duration(*every), describe(probe, scope))
        }
        Action::Manual(m) => format!("operator: {}", d(&m.instruction)),
    }
}

/// `200ms`, `5s`, `1h 30m`.
pub fn fmt_duration(d: std::time::Duration) -> String {
    if d < std::time::Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        drcheck_config::format_duration(d)
    }
}

/// Keeps the last `max` bytes of `text`, cut at a line boundary.
pub fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let cut = &text[start..];
    match cut.find('\n') {
        Some(i) if i + 1 < cut.len() => format!("…\n{}", &cut[i + 1..]),
        _ => format!("…{cut}"),
    }
}
