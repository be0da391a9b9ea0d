//! How a run stops early: the stage, the message, and who is to blame.

use crate::run_report::RunResult;
use drcheck_restore::{RestoreError, Stage, StoreError};
use std::time::Duration;

/// Why a run stopped early, and whether the backup (or an objective) is to blame.
pub(crate) struct Stop {
    pub(crate) stage: String,
    pub(crate) message: String,
    pub(crate) result: RunResult,
    /// The run was asked for something that does not exist: the caller's mistake,
    /// not a run to record.
    pub(crate) usage: bool,
    /// The object changed while being read: another listing may see it whole.
    pub(crate) changed: bool,
}

/// A stage that stopped early, with what it had learned by then: the report keeps it
/// (a failed chain still names the backup; a restore past its deadline still measured it).
pub(crate) struct Stopped<L> {
    pub(crate) stop: Stop,
    pub(crate) learned: L,
}

impl<L: Default> From<Stop> for Stopped<L> {
    /// A stop before the stage learned anything.
    fn from(stop: Stop) -> Self {
        Stopped { stop, learned: L::default() }
    }
}

/// The restored server stopped answering (`message`). Its processes crashing on what the
/// backup holds (a catalog edited so that every backend crashes), with nothing of the
/// host's to show, is the backup's; anything else cannot be told apart: the run's.
pub(crate) async fn restored_unreachable(sandbox: &drcheck_restore::Sandbox, stage: &str, message: String) -> Stop {
    // The server logs a crashed backend once it has reaped it, which can be after the
    // client saw its connection drop: the log is given two seconds to say so.
    let mut crash = sandbox.backend_crashed();
    for _ in 0..20 {
        if crash.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        crash = sandbox.backend_crashed();
    }
    match (sandbox.server_blame(), crash) {
        ((drcheck_restore::Blame::Backup, _), Some(crash)) => Stop::failed(
            stage,
            format!("{message} — the restored server's processes crash on what the backup holds ({crash})"),
        ),
        ((_, why), _) => Stop::incomplete(stage, drcheck_restore::with_reason(message, why)),
    }
}

impl Stop {
    pub(crate) fn usage(stage: &str, message: impl Into<String>) -> Self {
        Stop { stage: stage.into(), message: message.into(), result: RunResult::Error, usage: true, changed: false }
    }

    pub(crate) fn incomplete(stage: &str, message: impl Into<String>) -> Self {
        Stop { stage: stage.into(), message: message.into(), result: RunResult::Error, usage: false, changed: false }
    }

    pub(crate) fn failed(stage: &str, message: impl Into<String>) -> Self {
        Stop { stage: stage.into(), message: message.into(), result: RunResult::Failed, usage: false, changed: false }
    }

    pub(crate) fn aborted(stage: &str) -> Self {
        Stop {
            stage: stage.into(),
            message: "interrupted by a signal; sandbox torn down".into(),
            result: RunResult::Aborted,
            usage: false,
            changed: false,
        }
    }
}

impl From<RestoreError> for Stop {
    fn from(e: RestoreError) -> Self {
        let result = if e.is_backup_fault() { RunResult::Failed } else { RunResult::Error };
        let changed = matches!(&e, RestoreError::Store(s) if s.changed);
        // A backup that needs a key the configuration does not give: the operator's to fix.
        let usage = matches!(&e, RestoreError::Config { .. });
        Stop { stage: e.stage().to_string(), message: e.to_string(), result, usage, changed }
    }
}

pub(crate) fn store_stop(stage: Stage, e: StoreError) -> Stop {
    Stop::incomplete(stage.as_str(), e.to_string())
}

/// The most of an error message a report, the history and alerts keep. Messages quote
/// tools' output, and that output quotes the backup: whoever wrote the backup must not
/// be able to fill the history or an alert with it.
pub(crate) const MAX_ERROR_CHARS: usize = 2000;

pub(crate) use crate::out::short;

/// `message` cut to [`MAX_ERROR_CHARS`] characters (head and tail kept: the tool's
/// name leads, its last words are usually the reason), saying how much was left out.
pub(crate) fn cap_message(message: &str) -> String {
    let chars: Vec<char> = message.chars().collect();
    if chars.len() <= MAX_ERROR_CHARS {
        return message.to_string();
    }
    let keep = MAX_ERROR_CHARS / 2;
    let head: String = chars[..keep].iter().collect();
    let tail: String = chars[chars.len() - keep..].iter().collect();
    format!("{head} […{} characters left out…] {tail}", chars.len() - 2 * keep)
}

#[cfg(test)]
mod cap_tests {
    #[test]
    fn long_messages_keep_head_and_tail() {
        let long = format!("pg_restore failed: {}the reason", "x".repeat(10_000));
        let capped = super::cap_message(&long);
        assert!(capped.chars().count() < super::MAX_ERROR_CHARS + 60, "{}", capped.len());
        assert!(capped.starts_with("pg_restore failed") && capped.ends_with("the reason"));
        assert!(capped.contains("characters left out"));
        assert_eq!(super::cap_message("short"), "short");
    }
}
