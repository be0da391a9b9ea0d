//! `drcheck canary`: defective copies of each target's newest proven backup, verified by
//! the whole pipeline, each of which must be caught; the canary alert sent through every
//! sink and resolved; the outcome recorded apart from the runs, in the metrics, and
//! paged when a defect passed (`DrcheckCanaryUndetected`) or a sink did not take the
//! canary alert (`DrcheckAlertPathBroken`). The daemon runs it on `[daemon] canary`.

use crate::canary_report::CanaryReport;
use crate::canary_report::CanaryResult;
use crate::exit::{CliError, Exit};
use crate::history::History;
use crate::metrics::Metrics;
use clap::Args;
use drcheck_config::Config;

#[derive(Debug, Args)]
pub(crate) struct CanaryArgs {
    /// Only this target (default: every target, one after another).
    #[arg(long)]
    pub target: Option<String>,
    /// Print `{"canaries": [...]}` instead of the summary.
    #[arg(long)]
    pub json: bool,
}

pub(crate) async fn run(config: &Config, args: CanaryArgs) -> Result<Exit, CliError> {
    let targets = super::select_targets(config, args.target.as_deref())?;
    let history = History::open(&config.state.url).await.map_err(CliError::incomplete)?;
    let cancel = crate::shutdown::on_signals();
    let metrics = Metrics::new();
    metrics.init(config);
    metrics.seed_from_history(config, &history).await;
    let mut reports = Vec::new();
    for target in targets {
        if cancel.is_cancelled() {
            break;
        }
        let mut report = crate::canary::run_canary(config, target, &history, &cancel).await;
        crate::canary::finish(config, &history, Some(&metrics), &mut report, &cancel).await;
        // A CronJob's metrics go through the Pushgateway, into the target's group (POST:
        // only the canary's series are replaced).
        if let Some(gateway) = &config.metrics.pushgateway {
            let one = Metrics::new();
            one.canary.observe(&report);
            if let Err(e) = crate::metrics::push(gateway, &report.target, one.render()).await {
                tracing::warn!(target = %report.target, "{e:#}");
                crate::errln!("drcheck: warning: {e:#}");
            }
        }
        if !args.json {
            crate::outln!("{}", render(&report));
        }
        reports.push(report);
    }
    super::verify::deliver_and_export(config, &history, &metrics, &cancel).await;
    history.close().await;
    if args.json {
        let out = serde_json::json!({ "canaries": reports });
        crate::outln!("{}", serde_json::to_string_pretty(&out).map_err(CliError::incomplete)?);
    }
    Ok(exit_of(&reports))
}

/// The exit code of several canaries, as the README says: 1 when a defect passed in any
/// of them (a verdict outranks the world's trouble elsewhere), else 3 when one could not
/// judge (an error, inconclusive, a sink that did not take its alert) or none could make
/// a defect at all, else 0.
pub(crate) fn exit_of(reports: &[CanaryReport]) -> Exit {
    if reports.iter().any(|r| r.result == CanaryResult::Missed) {
        return Exit::Failed;
    }
    // A canary that could make no defect proved nothing: when none could, exit 3.
    if !reports.is_empty() && reports.iter().all(|r| r.result == CanaryResult::Skipped) {
        return Exit::Incomplete;
    }
    let troubled = reports
        .iter()
        .filter(|r| r.result != CanaryResult::Skipped)
        .any(|r| matches!(r.result.as_str(), "error" | "inconclusive") || r.alerts.iter().any(|s| !s.accepted));
    if troubled { Exit::Incomplete } else { Exit::Passed }
}

/// The human summary of one canary.
pub(crate) fn render(r: &CanaryReport) -> String {
    let mut out = format!(
        "canary {} of {}: {}\n  backup: {}\n",
        r.canary_id,
        r.target,
        r.result.as_str().to_uppercase(),
        r.backup.as_deref().unwrap_or("-")
    );
    if let Some(e) = r.error.as_ref().or(r.skipped.as_ref()) {
        out.push_str(&format!("  {e}\n"));
    }
    for n in &r.notes {
        out.push_str(&format!("  note: {n}\n"));
    }
    for d in &r.defects {
        out.push_str(&format!("  {:<16} {:<10} {}\n", d.defect, d.outcome, d.made));
        if !d.detail.is_empty() {
            out.push_str(&format!("  {:<16} {:<10} {}\n", "", "", crate::out::short(&d.detail, 600)));
        }
    }
    for s in &r.alerts {
        out.push_str(&format!("  alert → {:<12} {}\n", s.sink, s.detail));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canary_report::SinkOutcome;

    fn canary(result: &str) -> CanaryReport {
        let mut r: CanaryReport = serde_json::from_value(serde_json::json!({
            "canary_id": "c", "target": "t", "backup": null, "started_at": "", "finished_at": "",
            "result": result, "defects": []
        }))
        .unwrap();
        r.result = result.parse().unwrap();
        r
    }

    #[test]
    fn a_missed_defect_anywhere_exits_1_even_beside_an_error() {
        let cases: &[(&[&str], Exit)] = &[
            (&["missed", "error"], Exit::Failed),
            (&["error", "missed"], Exit::Failed),
            (&["caught", "inconclusive", "missed"], Exit::Failed),
            (&["caught", "error"], Exit::Incomplete),
            (&["caught", "skipped"], Exit::Passed),
            (&["skipped", "skipped"], Exit::Incomplete),
            (&["caught"], Exit::Passed),
            (&[], Exit::Passed),
        ];
        for (results, want) in cases {
            let reports: Vec<CanaryReport> = results.iter().map(|r| canary(r)).collect();
            assert_eq!(exit_of(&reports), *want, "{results:?}");
        }
        // A sink that did not take the canary alert is the world's trouble: 3, unless a defect passed.
        let mut deaf = canary("caught");
        deaf.alerts.push(SinkOutcome { sink: "hook".into(), accepted: false, detail: "refused".into() });
        assert_eq!(exit_of(&[deaf.clone()]), Exit::Incomplete);
        assert_eq!(exit_of(&[deaf, canary("missed")]), Exit::Failed);
    }
}
