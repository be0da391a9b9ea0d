//! `drcheck verify`: verify one target or all, record each run, print the report.

use crate::dispatch::Dispatcher;
use crate::exit::{CliError, Exit};
use crate::history::History;
use crate::metrics::Metrics;
use crate::progress::Progress;
use crate::run_report::{RunResult, render_human};
use crate::verify;
use clap::Args;
use drcheck_config::Config;

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// Verify only this target (default: every target, one after another).
    #[arg(long)]
    pub target: Option<String>,
    /// Verify this backup key instead of the latest (needs --target).
    #[arg(long, requires = "target")]
    pub backup: Option<String>,
    /// Print `{"runs": [...]}` instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// Check the backup tool's repository only (the `repository` validator: the tool's
    /// own verification, WAL continuity), without restoring; not recorded as a run.
    #[arg(long, conflicts_with = "backup")]
    pub integrity_only: bool,
}

pub(crate) async fn run(config: &Config, args: VerifyArgs) -> Result<Exit, CliError> {
    let targets = super::select_targets(config, args.target.as_deref())?;
    if args.integrity_only {
        return integrity(config, &targets, args.json).await;
    }
    // Open the history store first: a run that cannot be recorded should not start.
    let history = History::open(&config.state.url).await.map_err(CliError::incomplete)?;
    let cancel = crate::shutdown::on_signals();
    let mut reports = Vec::new();
    let mut not_run = Vec::new();
    // The same per-target lease as the daemon: a CronJob and a daemon (or two
    // CronJobs) never restore the same target at once.
    let holder = crate::history::lease_holder_name("verify");
    for target in targets {
        if cancel.is_cancelled() {
            break;
        }
        let took_over = match history.lease_for(&target.name, &holder, verify::lease_ttl(target)).await {
            Ok(crate::history::Leased::Taken) => None,
            Ok(crate::history::Leased::TookOver(previous)) => Some(previous),
            Ok(crate::history::Leased::Held) => {
                let (who, until) = history
                    .lease(&target.name)
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| ("another process".into(), "its expiry".into()));
                crate::errln!(
                    "drcheck: {}: not verified: {who} is verifying it (lease in the history store, until {until}; \
                     if that run is gone, `drcheck lease release --target {}` frees it)",
                    target.name,
                    target.name
                );
                not_run.push(RunResult::Error);
                continue;
            }
            Err(e) => {
                crate::errln!("drcheck: {}: not verified: cannot take the lease: {e:#}", target.name);
                not_run.push(RunResult::Error);
                continue;
            }
        };
        let run_id = crate::ids::new_run_id();
        verify::run_begins(&history, target, &run_id, &holder, took_over.as_deref()).await;
        let progress = Progress::new(!args.json);
        let report =
            verify::verify_as(run_id, config, target, args.backup.as_deref(), &history, &cancel, &progress).await;
        drop(progress);
        let _ = history.release_lease(&target.name, &holder).await;
        if let Some(mistake) = &report.usage_error {
            // Nothing was verified: not a run, not a failure of the backup.
            let _ = history.run_start_dropped(&report.run_id).await;
            history.close().await;
            return Err(CliError::usage(anyhow::anyhow!("{}: {mistake}", target.name)));
        }
        if let Err(e) = history.record_with_alerts(&report, &sink_names(config)).await {
            tracing::error!(target = %report.target, run_id = %report.run_id, "cannot record the run: {e:#}");
            crate::errln!("drcheck: cannot record run {} in the history store: {e:#}", report.run_id);
        }
        if !args.json {
            crate::out!("{}", render_human(&report));
        }
        reports.push(report);
    }
    if let Err(e) = history.prune(config.state.keep_runs).await {
        crate::errln!("drcheck: warning: pruning the history store: {e:#}");
    }
    let metrics = export_metrics(config, &history, &reports).await;
    // Alerts go out after every verification is done, within a bounded time; whatever
    // is left stays in the outbox for the next run or the daemon.
    deliver_and_export(config, &history, &metrics, &cancel).await;
    history.close().await;
    if args.json {
        let out = serde_json::json!({ "runs": reports });
        crate::outln!("{}", serde_json::to_string_pretty(&out).map_err(CliError::incomplete)?);
    }
    Ok(overall_exit(reports.iter().map(|r| r.result).chain(not_run)))
}

/// A one-shot command's end: alerts delivered within [`ALERT_BUDGET`] (what is left
/// stays in the outbox for the next run or the daemon), then the textfile written once —
/// after delivery, so it includes the alert counters.
pub(crate) async fn deliver_and_export(
    config: &Config,
    history: &History,
    metrics: &Metrics,
    cancel: &tokio_util::sync::CancellationToken,
) {
    if !config.alerts.is_empty() {
        let d = Dispatcher::new(history, &config.alerts, Some(metrics));
        match d.drain(ALERT_BUDGET, cancel).await {
            Ok(r) if r.pending > 0 => {
                crate::errln!("drcheck: warning: {} alert(s) not delivered yet; kept for the next run", r.pending)
            }
            Ok(_) => {}
            Err(e) => crate::errln!("drcheck: warning: delivering alerts: {e:#}"),
        }
    }
    if let Some(path) = &config.metrics.textfile
        && let Err(e) = crate::metrics::write_textfile(path, &metrics.render())
    {
        crate::errln!("drcheck: warning: {e:#}");
    }
}

/// One-shot metrics: pushed to the Pushgateway per target; returns them all for the
/// node_exporter textfile. A failure to export is reported but does not change the
/// verdict: the backup's result stands.
async fn export_metrics(config: &Config, history: &History, reports: &[crate::run_report::RunReport]) -> Metrics {
    let all = Metrics::new();
    all.init(config);
    all.seed_from_history(config, history).await;
    for r in reports {
        let Some(target) = config.target(&r.target) else { continue };
        all.observe(r, target);
        if let Some(gateway) = &config.metrics.pushgateway {
            let one = Metrics::new();
            one.observe(r, target);
            let body = if r.result == RunResult::Passed { one.render() } else { one.render_without_last_success() };
            if let Err(e) = crate::metrics::push(gateway, &r.target, body).await {
                tracing::warn!(target = %r.target, "{e:#}");
                crate::errln!("drcheck: warning: {e:#}");
            }
        }
    }
    all
}

/// The names of the configured alert sinks.
pub(crate) fn sink_names(config: &Config) -> Vec<String> {
    config.alerts.iter().map(|a| a.name.clone()).collect()
}

/// How long a one-shot run spends delivering alerts before leaving them for later.
const ALERT_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

/// A failed backup outranks an incomplete run: it is the news the operator must see;
/// an incomplete run outranks an inconclusive one (it did not even get to decide).
pub(crate) fn overall_exit(results: impl Iterator<Item = RunResult>) -> Exit {
    results
        .map(|r| match r {
            RunResult::Passed => Exit::Passed,
            RunResult::Failed => Exit::Failed,
            RunResult::Error | RunResult::Aborted => Exit::Incomplete,
            RunResult::Inconclusive => Exit::Inconclusive,
        })
        .fold(Exit::Passed, |acc, e| match (acc, e) {
            (Exit::Failed, _) | (_, Exit::Failed) => Exit::Failed,
            (Exit::Incomplete, _) | (_, Exit::Incomplete) => Exit::Incomplete,
            (Exit::Inconclusive, _) | (_, Exit::Inconclusive) => Exit::Inconclusive,
            _ => Exit::Passed,
        })
}

/// `verify --integrity-only`: the `repository` validator of each target, no restore.
/// Exit 0 when every repository holds, 1 when one is broken, 3 when one could not be
/// checked (unreachable, or not a backup tool's repository).
async fn integrity(config: &Config, targets: &[&drcheck_config::TargetConfig], json: bool) -> Result<Exit, CliError> {
    use drcheck_validators::Status;
    let mut checks = Vec::new();
    let mut results = Vec::new();
    // Where the tool's own verification is recorded (for the verify runs' schedule).
    let history = crate::history::History::open(&config.state.url).await.ok();
    for t in targets {
        let f = verify::integrity_only(crate::ids::Settings::of(config, t), t, history.as_ref()).await;
        results.push(match f.status {
            Status::Passed => RunResult::Passed,
            Status::Failed => RunResult::Failed,
            _ => RunResult::Error,
        });
        if !json {
            crate::outln!("{}: repository {} — {}", t.name, f.status.as_str(), f.detail);
        }
        checks.push(serde_json::json!({
            "target": t.name,
            "checked_at": crate::run_report::timestamp(std::time::SystemTime::now()),
            "status": f.status.as_str(),
            "detail": f.detail,
            "measurements": f.measurements,
        }));
    }
    if json {
        let text =
            serde_json::to_string_pretty(&serde_json::json!({"checks": checks})).map_err(CliError::incomplete)?;
        crate::outln!("{text}");
    }
    Ok(overall_exit(results.into_iter()))
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
        assert_eq!(overall_exit([Passed, Inconclusive].into_iter()), Exit::Inconclusive);
        assert_eq!(overall_exit([Inconclusive, Error].into_iter()), Exit::Incomplete, "could not even decide");
        assert_eq!(overall_exit([Inconclusive, Failed].into_iter()), Exit::Failed);
    }
}
