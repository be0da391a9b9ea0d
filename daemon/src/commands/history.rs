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
    if runs.is_empty() {
        crate::outln!("no runs recorded");
    }
    for r in &runs {
        let rto = r.rto.measured_seconds.map(|s| format!("{s:.1}s")).unwrap_or_else(|| "—".into());
        let backup = r.backup.as_ref().map(|b| crate::out::shown(&b.key)).unwrap_or_else(|| "—".into());
        let error = r
            .error
            .as_ref()
            .map(|e| format!("  [{}] {}", e.stage, crate::out::shown(first_line(&e.message))))
            .unwrap_or_default();
        crate::outln!(
            "{}  {:<16} {:<8} rto {:>8}  {}  {}{}",
            r.started_at,
            r.target,
            r.result.as_str(),
            rto,
            backup,
            r.run_id,
            error
        );
    }
    Ok(Exit::Passed)
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}
