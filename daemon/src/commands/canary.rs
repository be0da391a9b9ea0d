//! `drcheck canary`: defective copies of each target's newest proven backup, verified by
//! the whole pipeline, each of which must be caught; the canary alert sent through every
//! sink and resolved; the outcome recorded apart from the runs, in the metrics, and
//! paged when a defect passed (`DrcheckCanaryUndetected`) or a sink did not take the
//! canary alert (`DrcheckAlertPathBroken`). The daemon runs it on `[daemon] canary`.

use crate::alerts::Alert;
use crate::alerts::dispatch::Dispatcher;
use crate::exit::{CliError, Exit};
use crate::history::History;
use crate::metrics::Metrics;
use crate::verify::canary::{ALERT_PATH_BROKEN, CANARY_ALERT, CANARY_UNDETECTED, CanaryReport, SinkOutcome};
use clap::Args;
use drcheck_config::Config;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

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
        let mut report = crate::verify::canary::run_canary(config, target, &history, &cancel).await;
        finish(config, &history, Some(&metrics), &mut report, &cancel).await;
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
    if reports.iter().any(|r| r.result == "missed") {
        return Exit::Failed;
    }
    // A canary that could make no defect proved nothing: when none could, exit 3.
    if !reports.is_empty() && reports.iter().all(|r| r.result == "skipped") {
        return Exit::Incomplete;
    }
    let troubled = reports
        .iter()
        .filter(|r| r.result != "skipped")
        .any(|r| matches!(r.result.as_str(), "error" | "inconclusive") || r.alerts.iter().any(|s| !s.accepted));
    if troubled { Exit::Incomplete } else { Exit::Passed }
}

/// After a canary: its alert through every sink (fired and resolved, each sink given
/// `daemon.canary_alert_within` to accept it), the outcome recorded and in the metrics,
/// and `DrcheckCanaryUndetected` / `DrcheckAlertPathBroken` raised or resolved.
pub(crate) async fn finish(
    config: &Config,
    history: &History,
    metrics: Option<&Metrics>,
    report: &mut CanaryReport,
    cancel: &CancellationToken,
) {
    let sinks: Vec<String> = config.alerts.iter().map(|a| a.name.clone()).collect();
    if !sinks.is_empty() && report.result != "skipped" {
        report.alerts = deliver_canary_alert(config, history, metrics, report, &sinks, cancel).await;
    }
    if let Err(e) = history.record_canary(report).await {
        tracing::error!(target = %report.target, canary_id = %report.canary_id, "cannot record the canary: {e:#}");
    }
    if let Some(m) = metrics {
        m.canary.observe(report);
    }
    let target = report.target.clone();
    let missed: Vec<String> = report
        .defects
        .iter()
        .filter(|d| d.outcome == "undetected")
        .map(|d| format!("{} ({}): {}", d.defect, d.made, d.detail))
        .collect();
    let raised = if !missed.is_empty() {
        let why = format!(
            "canary {}: a defective copy of backup {} passed the pipeline: {}",
            report.canary_id,
            report.backup.as_deref().unwrap_or("?"),
            missed.join("; ")
        );
        history.raise(&target, CANARY_UNDETECTED, &why, &sinks).await
    } else if report.result == "caught" {
        history
            .resolve(&target, CANARY_UNDETECTED, &format!("canary {} caught every defect", report.canary_id), &sinks)
            .await
    } else {
        Ok(false)
    };
    if let Err(e) = raised {
        tracing::error!(target = %target, "cannot raise or resolve {CANARY_UNDETECTED}: {e:#}");
    }
    let broken: Vec<&SinkOutcome> = report.alerts.iter().filter(|s| !s.accepted).collect();
    let raised = if !broken.is_empty() {
        let accepted: Vec<String> = report.alerts.iter().filter(|s| s.accepted).map(|s| s.sink.clone()).collect();
        let why = format!(
            "canary {}: the canary alert did not reach {}",
            report.canary_id,
            broken.iter().map(|s| format!("{} ({})", s.sink, s.detail)).collect::<Vec<_>>().join(", ")
        );
        // Through the sinks that work: the broken one would not carry it either.
        history.raise(&target, ALERT_PATH_BROKEN, &why, &accepted).await
    } else if !report.alerts.is_empty() {
        history
            .resolve(
                &target,
                ALERT_PATH_BROKEN,
                &format!("canary {}: every sink accepted the canary alert", report.canary_id),
                &sinks,
            )
            .await
    } else {
        Ok(false)
    };
    if let Err(e) = raised {
        tracing::error!(target = %target, "cannot raise or resolve {ALERT_PATH_BROKEN}: {e:#}");
    }
}

/// Queues the canary alert (firing, then resolved) for every sink and delivers it until
/// each sink has taken both, or `canary_alert_within` ran out. What a sink did not take
/// goes to the dead letters (a canary page hours late would only confuse).
async fn deliver_canary_alert(
    config: &Config,
    history: &History,
    metrics: Option<&Metrics>,
    report: &CanaryReport,
    sinks: &[String],
    cancel: &CancellationToken,
) -> Vec<SinkOutcome> {
    let now = crate::run_report::timestamp(std::time::SystemTime::now());
    let alert = Alert {
        alertname: CANARY_ALERT.into(),
        target: report.target.clone(),
        severity: "info".into(),
        state: "firing".into(),
        summary: format!("canary for {}: {}", report.target, report.result),
        description: report.summary(),
        run_id: Some(report.canary_id.clone()),
        // It lapses by itself even if its resolution never goes out (the process killed
        // between the two): a canary must never stay firing.
        ends_at: Some(crate::run_report::timestamp(
            std::time::SystemTime::now() + config.daemon.canary_alert_within + Duration::from_secs(3600),
        )),
        starts_at: now,
        dedup_key: crate::alerts::dedup_key(&report.target, CANARY_ALERT, &report.canary_id, "firing"),
        canary: true,
    };
    if let Err(e) = history.enqueue_canary_alert(&alert, sinks).await {
        let detail = format!("the canary alert could not be queued: {e:#}");
        return sinks
            .iter()
            .map(|s| SinkOutcome { sink: s.clone(), accepted: false, detail: detail.clone() })
            .collect();
    }
    let firing = alert.dedup_key.clone();
    // Each sink's resolution, queued once it took the firing alert.
    let mut resolved: std::collections::HashMap<String, String> = Default::default();
    let d = Dispatcher::new(history, &config.alerts, metrics);
    let deadline = tokio::time::Instant::now() + config.daemon.canary_alert_within;
    loop {
        if let Err(e) = d.round().await {
            tracing::warn!("delivering the canary alert: {e:#}");
        }
        let mut all = true;
        for s in sinks {
            match resolved.get(s) {
                Some(key) => all &= history.delivered(s, key).await.unwrap_or(false),
                None if history.delivered(s, &firing).await.unwrap_or(false) => {
                    match history.enqueue_canary_resolution(&alert, s).await {
                        Ok(key) => {
                            resolved.insert(s.clone(), key);
                        }
                        Err(e) => tracing::warn!(sink = %s, "cannot queue the canary alert's resolution: {e:#}"),
                    }
                    all = false;
                }
                None => all = false,
            }
        }
        if all || tokio::time::Instant::now() >= deadline || cancel.is_cancelled() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = cancel.cancelled() => break,
        }
    }
    let mut out = Vec::new();
    for s in sinks {
        let accepted = history.delivered(s, &firing).await.unwrap_or(false);
        let detail = if accepted {
            "accepted".to_string()
        } else {
            let why = history.last_delivery_error(s, &firing).await.ok().flatten();
            let detail = match why {
                Some(e) => format!(
                    "not accepted within {}: {e}",
                    drcheck_config::format_duration(config.daemon.canary_alert_within)
                ),
                None => format!(
                    "not accepted within {}",
                    drcheck_config::format_duration(config.daemon.canary_alert_within)
                ),
            };
            if let Err(e) = history.dead_letter_canary(s, &report.canary_id, &detail).await {
                tracing::warn!(sink = %s, "cannot move the canary alert to the dead letters: {e:#}");
            }
            detail
        };
        out.push(SinkOutcome { sink: s.clone(), accepted, detail });
    }
    out
}

/// The human summary of one canary.
pub(crate) fn render(r: &CanaryReport) -> String {
    let mut out = format!(
        "canary {} of {}: {}\n  backup: {}\n",
        r.canary_id,
        r.target,
        r.result.to_uppercase(),
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
            out.push_str(&format!("  {:<16} {:<10} {}\n", "", "", crate::verify::stop::short(&d.detail, 600)));
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

    fn canary(result: &str) -> CanaryReport {
        let mut r: CanaryReport = serde_json::from_value(serde_json::json!({
            "canary_id": "c", "target": "t", "backup": null, "started_at": "", "finished_at": "",
            "result": result, "defects": []
        }))
        .unwrap();
        r.result = result.into();
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
