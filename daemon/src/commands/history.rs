//! `drcheck history`: past runs from the history store, newest first.

use crate::exit::{CliError, Exit};
use crate::history::History;
use clap::Args;
use drcheck_config::Config;
use drcheck_validators::Status;

#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// Only this target's runs.
    #[arg(long)]
    pub target: Option<String>,
    /// How many runs to show.
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// Print `{"runs": [...]}` instead of the table.
    #[arg(long)]
    pub json: bool,
    /// The canaries (`drcheck canary`) instead of the runs: `{"canaries": [...]}` with
    /// `--json`. A canary's runs are never among the runs.
    #[arg(long)]
    pub canaries: bool,
}

pub(crate) async fn run(config: &Config, args: HistoryArgs) -> Result<Exit, CliError> {
    if let Some(t) = &args.target {
        super::select_targets(config, Some(t))?;
    }
    let history = History::open(&config.state.url).await.map_err(CliError::incomplete)?;
    if args.canaries {
        let canaries =
            history.recent_canaries(args.target.as_deref(), args.limit).await.map_err(CliError::incomplete)?;
        history.close().await;
        if args.json {
            let out = serde_json::json!({ "canaries": canaries });
            crate::outln!("{}", serde_json::to_string_pretty(&out).map_err(CliError::incomplete)?);
        } else {
            for c in &canaries {
                crate::out!("{}", super::canary::render(c));
            }
        }
        return Ok(Exit::Passed);
    }
    let runs = history.recent(args.target.as_deref(), args.limit).await.map_err(CliError::incomplete)?;
    // Runs not (yet) recorded: running (or killed, until the next run of the target
    // records them aborted), and triggered runs that were skipped.
    let starts = history.run_starts(args.target.as_deref(), args.limit).await.map_err(CliError::incomplete)?;
    history.close().await;
    if args.json {
        let out = serde_json::json!({ "runs": runs, "not_recorded": starts });
        crate::outln!("{}", serde_json::to_string_pretty(&out).map_err(CliError::incomplete)?);
        return Ok(Exit::Passed);
    }
    for s in &starts {
        crate::out!(
            "{:<24}  {:<16} {:<8} {:>8}  {}  {}{}\n",
            s.started_at,
            s.target,
            s.state,
            "—",
            crate::out::shown(&s.holder),
            s.run_id,
            s.reason.as_ref().map(|r| format!("  {}", crate::out::shown(r))).unwrap_or_default()
        );
    }
    crate::out!("{}", render(&runs));
    Ok(Exit::Passed)
}

/// The runs as a table under a header (newest first); a line saying so when there are none.
fn render(runs: &[crate::run_report::RunReport]) -> String {
    if runs.is_empty() {
        return "no runs recorded\n".into();
    }
    let mut text =
        format!("{:<24}  {:<16} {:<8} {:>8}  {}  {}\n", "STARTED", "TARGET", "RESULT", "RTO", "BACKUP", "RUN");
    for r in runs {
        let rto = r.rto.measured_seconds.map(|s| format!("{s:.1}s")).unwrap_or_else(|| "—".into());
        let backup = r.backup.as_ref().map(|b| crate::out::shown(&b.key)).unwrap_or_else(|| "—".into());
        let error = r
            .error
            .as_ref()
            .map(|e| format!("  [{}] {}", e.stage, crate::out::shown(first_line(&e.message))))
            .unwrap_or_default();
        text.push_str(&format!(
            "{:<24}  {:<16} {:<8} {:>8}  {}  {}{}\n",
            r.started_at,
            r.target,
            r.result.as_str(),
            rto,
            backup,
            r.run_id,
            error
        ));
        // Each check that failed or errored, with its reason (issue 34: only run-level
        // errors were shown, and the reason of a failed run was in its JSON alone).
        for v in r.validators.iter().filter(|v| v.status == Status::Failed || v.status == Status::Error) {
            text.push_str(&format!("    {} {}: {}\n", crate::out::shown(&v.name), v.status, short(&v.detail)));
        }
    }
    text
}

/// The first line of a detail, at most 200 characters, escaped for the terminal.
fn short(detail: &str) -> String {
    let line = first_line(detail);
    let cut: String = line.chars().take(200).collect();
    let more = if cut.len() < line.len() { "…" } else { "" };
    format!("{}{more}", crate::out::shown(&cut))
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 26: `history` has a header naming its columns, aligned with the rows.
    #[test]
    fn history_has_a_header_over_its_columns() {
        let mut r: crate::run_report::RunReport = serde_json::from_value(serde_json::json!({
            "run_id": "r-1", "target": "orders", "result": "passed",
            "started_at": "2026-12-01T03:00:00.000Z", "finished_at": "2026-12-01T03:01:00.000Z",
            "backup": null, "phases": [], "validators": [],
            "rto": {"target_seconds": 60.0, "measured_seconds": 12.5, "met": true},
            "rpo": {"target_seconds": 60.0, "backup_age_seconds": null, "met": null}
        }))
        .unwrap();
        r.backup = None;
        let text = render(&[r]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with("STARTED") && lines[0].contains("TARGET") && lines[0].contains("RUN"), "{text}");
        assert_eq!(lines[0].find("TARGET"), lines[1].find("orders"), "aligned: {text}");
        assert_eq!(lines[0].find("RESULT"), lines[1].find("passed"), "aligned: {text}");
        assert_eq!(render(&[]), "no runs recorded\n");
    }

    /// Issue 34: a failed run shows each failing check's reason under its row.
    #[test]
    fn a_failed_runs_checks_and_reasons_are_shown() {
        let r: crate::run_report::RunReport = serde_json::from_value(serde_json::json!({
            "run_id": "r-2", "target": "orders", "result": "failed",
            "started_at": "2026-12-01T03:00:00.000Z", "finished_at": "2026-12-01T03:01:00.000Z",
            "backup": null, "phases": [],
            "validators": [
                {"name": "amcheck", "status": "passed", "detail": "no corruption found"},
                {"name": "checksums", "status": "failed", "detail": "public.orders: id=17 is missing\nmore"},
                {"name": "schema", "status": "error", "detail": "permission denied for table t"},
                {"name": "freshness", "status": "skipped", "detail": "no as_of columns"}
            ],
            "rto": {"target_seconds": 60.0, "measured_seconds": 12.5, "met": true},
            "rpo": {"target_seconds": 60.0, "backup_age_seconds": null, "met": null}
        }))
        .unwrap();
        let text = render(&[r]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(lines[2], "    checksums failed: public.orders: id=17 is missing", "{text}");
        assert_eq!(lines[3], "    schema error: permission denied for table t", "{text}");
        assert!(!text.contains("amcheck") && !text.contains("freshness"), "{text}");
    }
}
