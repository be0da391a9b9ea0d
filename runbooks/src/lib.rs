//! DR-drill runbooks: scripted game days for PostgreSQL disaster recovery.
//!
//! A runbook (YAML) states a hypothesis as steady-state checks, a method of timed steps
//! (shell, sql, http, verify, wait, manual), and rollbacks. [`plan`] reads and checks
//! it, naming the line of every problem; [`runner`] runs it with timeouts, on_failure
//! rules, the RTO clock and a kill switch; [`journal`] is the record of what happened
//! and [`report`] draws it as a self-contained HTML page with a timeline.
//!
//! This crate knows nothing of S3, sandboxes or the scheduler: a `verify` step calls
//! the [`steps::Verifier`] trait, which the `drcheck` binary implements.

pub mod clock;
pub mod drill_report;
pub mod dry_run;
pub mod format;
pub mod journal;
mod layers;
pub mod live;
pub mod outcome;
pub mod plan;
pub mod runner;
pub mod scope;
pub mod steps;

pub use journal::{DrillResult, Journal};
pub use plan::{CheckError, Runbook, load};
pub use runner::{KillSwitch, run};
pub use steps::{Env, Verifier, VerifyError, VerifyOutcome};
