//! The `drcheck` binary's library: the CLI, the verification pipeline and the history store.
//!
//! - [`cli`]: argument parsing and dispatch; maps outcomes to exit codes ([`exit`]).
//! - [`commands`]: one file per subcommand, each with its arguments.
//!
//! Only [`main`] is public: `main.rs` calls it; everything else is the crate's own
//! (`unreachable_pub` keeps it so).
//! - [`verify`]: one verification of one target as stages — select, restore into a
//!   sandbox, validate, measure RTO/RPO — producing a [`run_report::RunReport`].
//! - [`history`]: every run, its phases and validator results, in SQLite through sqlx.
//! - [`out`]: standard output that a closed pipe silences instead of panicking.
//! - [`validate`]: the validate step, on every database of a restored cluster.
//! - [`shutdown`]: SIGTERM/SIGINT become a cancellation token, so sandboxes are torn down.

#![warn(unreachable_pub)]

mod alerts;
mod canary;
mod canary_report;
pub mod cli;
mod commands;
mod disk;
mod dispatch;
mod evidence;
mod exit;
mod follow;
mod forecast;
mod heartbeat;
mod history;
mod ids;
mod journal;
mod layers;
mod measure;
mod metrics;
mod out;
mod pristine;
mod progress;
mod reaper;
mod run_report;
mod service;
mod shutdown;
mod validate;
mod verify;
