//! `drcheck verify`: verify one target or all, record each run, print the report.

use crate::cli::VerifyArgs;
use crate::exit::{CliError, Exit};
use crate::history::History;
use crate::pipeline;
use crate::progress::Progress;
use crate::report::{RunResult, render_human};
use drcheck_config::Config;

pub async fn run(config: &Config, args: VerifyArgs) -> Result<Exit, CliError> {
    let targets = super::select_targets(config, args.target.as_deref())?;
    // Open the history store first: a run that cannot be recorded should not start.
    let history = History::open(&config.state.url).await.map_err(CliError::incomplete)?;
    let cancel = crate::shutdown::on_signals();
    let mut reports = Vec::new();
    for target in targets {
        if cancel.is_cancelled() {
            break;
        }
        let progress = Progress::new(!args.json);
        let report = pipeline::verify(config, target, args.backup.as_deref(), &cancel, &progress).await;
        drop(progress);
        if let Err(e) = history.record(&report).await {
            tracing::error!(target = %report.target, run_id = %report.run_id, "cannot record the run: {e:#}");
            eprintln!("drcheck: cannot record run {} in the history store: {e:#}", report.run_id);
        }
        if !args.json {
            print!("{}", render_human(&report));
        }
        reports.push(report);
    }
    history.close().await;
    if args.json {
        let out = serde_json::json!({ "runs": reports });
        println!("{}", serde_json::to_string_pretty(&out).map_err(CliError::incomplete)?);
    }
    Ok(overall_exit(reports.iter().map(|r| r.result)))
}

/// A failed backup outranks an incomplete run: it is the news the operator must see.
pub fn overall_exit(results: impl Iterator<Item = RunResult>) -> Exit {
    results
        .map(|r| match r {
            RunResult::Passed => Exit::Passed,
            RunResult::Failed => Exit::Failed,
            RunResult::Error | RunResult::Aborted => Exit::Incomplete,
        })
        .fold(Exit::Passed, |acc, e| match (acc, e) {
            (Exit::Failed, _) | (_, Exit::Failed) => Exit::Failed,
            (Exit::Incomplete, _) | (_, Exit::Incomplete) => Exit::Incomplete,
            _ => Exit::Passed,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_outranks_incomplete() {
        use RunResult::*;
        assert_eq!(overall_exit([Passed, Passed].into_iter()), Exit::Passed);
        assert_eq!(overall_exit([Passed, Error].into_iter()), Exit::Incomplete);
        assert_eq!(overall_exit([Error, Failed, Aborted].into_iter()), Exit::Failed);
        assert_eq!(overall_exit([Aborted].into_iter()), Exit::Incomplete);
    }
}
