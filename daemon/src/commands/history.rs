//! `drcheck history`: past runs from the history store, newest first.

use crate::cli::HistoryArgs;
use crate::exit::{CliError, Exit};
use crate::history::History;
use drcheck_config::Config;

pub async fn run(config: &Config, args: HistoryArgs) -> Result<Exit, CliError> {
    if let Some(t) = &args.target {
        super::select_targets(config, Some(t))?;
    }
    let history = History::open(&config.state.url).await.map_err(CliError::incomplete)?;
    let runs = history.recent(args.target.as_deref(), args.limit).await.map_err(CliError::incomplete)?;
    history.close().await;
    if args.json {
        let out = serde_json::json!({ "runs": runs });
        crate::outln!("{}", serde_json::to_string_pretty(&out).map_err(CliError::incomplete)?);
        return Ok(Exit::Passed);
    }
    crate::out!("{}", render(&runs));
    Ok(Exit::Passed)
}

/// The runs as a table under a header (newest first); a line saying so when there are none.
fn render(runs: &[crate::report::RunReport]) -> String {
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
    }
    text
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
        let mut r: crate::report::RunReport = serde_json::from_value(serde_json::json!({
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
}
