//! After a canary: its alert through every sink (fired and resolved), the outcome
//! recorded apart from the runs and in the metrics, and `DrcheckCanaryUndetected` /
//! `DrcheckAlertPathBroken` raised or resolved — for `drcheck canary` and the daemon alike.

use crate::alerts::Alert;
use crate::canary_report::{ALERT_PATH_BROKEN, CANARY_ALERT, CANARY_UNDETECTED, CanaryReport, SinkOutcome};
use crate::canary_report::{CanaryResult, DefectVerdict};
use crate::dispatch::Dispatcher;
use crate::history::History;
use crate::metrics::Metrics;
use drcheck_config::Config;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

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
    if !sinks.is_empty() && report.result != CanaryResult::Skipped {
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
        .filter(|d| d.outcome == DefectVerdict::Undetected)
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
    } else if report.result == CanaryResult::Caught {
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
        state: crate::alerts::AlertState::Firing,
        summary: format!("canary for {}: {}", report.target, report.result),
        description: report.summary(),
        run_id: Some(report.canary_id.clone()),
        // It lapses by itself even if its resolution never goes out (the process killed
        // between the two): a canary must never stay firing.
        ends_at: Some(crate::run_report::timestamp(
            std::time::SystemTime::now() + config.daemon.canary_alert_within + Duration::from_secs(3600),
        )),
        starts_at: now,
        dedup_key: crate::alerts::dedup_key(
            &report.target,
            CANARY_ALERT,
            &report.canary_id,
            crate::alerts::AlertState::Firing,
        ),
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
