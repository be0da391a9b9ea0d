//! Exit codes: part of the contract scripts and CronJobs rely on.

use std::process::ExitCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Exit {
    /// Every run passed.
    Passed = 0,
    /// A backup or an objective is not met.
    Failed = 1,
    /// Usage or config error.
    Usage = 2,
    /// Could not complete for reasons outside the backup (storage unreachable after
    /// retries, sandbox could not start, interrupted).
    Incomplete = 3,
    /// Everything checked held, but more of the content than `max_undecided` could not
    /// be decided: not a proof of the backup.
    Inconclusive = 4,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e as u8)
    }
}

/// An error that already knows its exit code.
#[derive(Debug)]
pub(crate) struct CliError {
    pub exit: Exit,
    pub error: anyhow::Error,
}

impl CliError {
    pub(crate) fn usage(error: impl Into<anyhow::Error>) -> Self {
        Self { exit: Exit::Usage, error: error.into() }
    }

    pub(crate) fn incomplete(error: impl Into<anyhow::Error>) -> Self {
        Self { exit: Exit::Incomplete, error: error.into() }
    }
}

impl From<drcheck_config::ConfigError> for CliError {
    fn from(e: drcheck_config::ConfigError) -> Self {
        CliError::usage(e)
    }
}
