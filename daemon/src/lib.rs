//! The `drcheck` binary's library: the CLI, the verification pipeline and the history store.
//!
//! - [`cli`]: argument parsing and dispatch; maps outcomes to exit codes ([`exit`]).
//! - [`commands`]: one file per subcommand.
//! - [`pipeline`]: one verification of one target — select, fetch, restore into a
//!   sandbox, validate, measure RTO/RPO — producing a [`run_report::RunReport`].
//! - [`history`]: every run, its phases and validator results, in SQLite through sqlx.
//! - [`out`]: standard output that a closed pipe silences instead of panicking.
//! - [`validate`]: the validate step, on every database of a restored cluster.
//! - [`shutdown`]: SIGTERM/SIGINT become a cancellation token, so sandboxes are torn down.

pub mod alerts;
pub mod cli;
pub mod commands;
pub mod evidence;
pub mod exit;
pub mod heartbeat;
pub mod history;
pub mod ids;
pub mod measure;
pub mod metrics;
pub mod out;
pub mod pristine;
pub mod progress;
pub mod run_report;
pub mod service;
pub mod shutdown;
pub mod validate;
pub mod verify;
