//! `drcheck status`: the status page's table in the terminal — each target's last
//! verdict, how long ago, the RTO measured against its target, the recoverable point's
//! age against the RPO, how much of the retention is proven, the next scheduled run and
//! the last failure's reason — read from the history store, no daemon needed.
//!
//! Exit: 0 when every target's last verdict passed, 1 when one failed, 4 when the others
//! passed and one was inconclusive, 3 otherwise (an error, an aborted run, a target never
//! verified).

use crate::evidence::RunEvidence;
use crate::exit::{CliError, Exit};
use crate::history::History;
use crate::out::human;
use crate::run_report::{RunReport, RunResult};
use drcheck_config::Config;
use std::collections::HashMap;

#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Row {
    pub target: String,
    /// The last run's result; `never` (no run yet) in the JSON.
    #[serde(serialize_with = "ser_verdict")]
    pub verdict: Option<RunResult>,
    pub started_at: Option<String>,
    pub rto_measured_seconds: Option<f64>,
    pub rto_target_seconds: f64,
    pub point_age_seconds: Option<f64>,
    pub rpo_target_seconds: f64,
    pub proven: Option<String>,
    /// How much of the content the last run decided (`N%`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_proven: Option<String>,
    pub next_run: Option<String>,
    pub last_failure: Option<String>,
    /// The last canary (`drcheck canary`): its result, what caught each defect, when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<String>,
    /// The last run's RTO forecast (issue 50).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rto_forecast: Option<crate::forecast::RtoForecast>,
}

pub(crate) async fn run(config: &Config, json: bool) -> Result<Exit, CliError> {
    let history = History::open(&config.state.url).await.map_err(CliError::incomplete)?;
    let latest = history.latest_per_target().await.map_err(CliError::incomplete)?;
    let failures = history.last_failure_per_target().await.map_err(CliError::incomplete)?;
    let canaries = history.latest_canaries(config).await.map_err(CliError::incomplete)?;
    history.close().await;
    let rows = rows(config, &latest, &failures, &canaries, chrono::Utc::now());
    if json {
        let out = serde_json::json!({ "targets": rows });
        crate::outln!("{}", serde_json::to_string_pretty(&out).map_err(CliError::incomplete)?);
    } else {
        crate::out!("{}", render(&rows, std::time::SystemTime::now()));
    }
    Ok(exit_of(&rows))
}

fn ser_verdict<S: serde::Serializer>(v: &Option<RunResult>, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(verdict_text(*v))
}

fn verdict_text(v: Option<RunResult>) -> &'static str {
    v.map_or("never", RunResult::as_str)
}

fn exit_of(rows: &[Row]) -> Exit {
    let is = |r: &Row, v: RunResult| r.verdict == Some(v);
    if rows.iter().any(|r| is(r, RunResult::Failed)) {
        Exit::Failed
    } else if rows.iter().all(|r| is(r, RunResult::Passed)) {
        Exit::Passed
    } else if rows.iter().all(|r| is(r, RunResult::Passed) || is(r, RunResult::Inconclusive)) {
        Exit::Inconclusive
    } else {
        Exit::Incomplete
    }
}

pub(crate) fn rows(
    config: &Config,
    latest: &HashMap<String, RunReport>,
    failures: &HashMap<String, RunReport>,
    canaries: &HashMap<String, crate::canary_report::CanaryReport>,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<Row> {
    config
        .targets
        .iter()
        .map(|t| {
            let run = latest.get(&t.name);
            Row {
                target: t.name.clone(),
                verdict: run.map(|r| r.result),
                started_at: run.map(|r| r.started_at.clone()),
                rto_measured_seconds: run.and_then(|r| r.rto.measured_seconds),
                rto_target_seconds: t.rto.as_secs_f64(),
                point_age_seconds: run.and_then(|r| r.rpo.recoverable_point_age_seconds.or(r.rpo.backup_age_seconds)),
                rpo_target_seconds: t.rpo.as_secs_f64(),
                proven: run.and_then(|r| r.coverage.as_ref()).map(|c| format!("{} of {}", c.proven, c.restorable)),
                content_proven: run.and_then(|r| r.content.as_ref()).map(|c| format!("{}%", c.proven_percent)),
                next_run: t
                    .schedule
                    .as_ref()
                    .and_then(|s| s.next_after(now))
                    .map(|n| n.format("%Y-%m-%d %H:%M UTC").to_string()),
                last_failure: failures
                    .get(&t.name)
                    .map(|r| format!("{} ({})", RunEvidence::from_report(r).reasons.join(" | "), r.started_at)),
                canary: canaries.get(&t.name).map(|c| format!("{} ({})", c.outcomes(), c.finished_at)),
                rto_forecast: run.and_then(|r| r.rto.forecast.clone()),
            }
        })
        .collect()
}

/// `measured / target`, marked `!` past the target.
fn against(measured: Option<f64>, target: f64) -> String {
    match measured {
        Some(m) => format!("{}{} / {}", if m > target { "!" } else { "" }, human(m), human(target)),
        None => format!("— / {}", human(target)),
    }
}

fn ago(at: &str, now: std::time::SystemTime) -> String {
    match humantime::parse_rfc3339_weak(at) {
        Ok(t) => format!("{} ago", human(now.duration_since(t).unwrap_or_default().as_secs_f64())),
        Err(_) => at.to_string(),
    }
}

/// The table, a line per target; the last failure's reason under its target, cut to
/// one line of 160 characters (the terminal's width is not assumed).
pub(crate) fn render(rows: &[Row], now: std::time::SystemTime) -> String {
    if rows.is_empty() {
        return "no targets in the config\n".into();
    }
    let passed = rows.iter().filter(|r| r.verdict == Some(RunResult::Passed)).count();
    let mut out = format!("{passed} of {} targets passed their last verification\n", rows.len());
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            [
                crate::out::shown(&r.target),
                verdict_text(r.verdict).to_string(),
                r.started_at.as_deref().map(|s| ago(s, now)).unwrap_or_else(|| "never run".into()),
                against(r.rto_measured_seconds, r.rto_target_seconds),
                against(r.point_age_seconds, r.rpo_target_seconds),
                r.proven.clone().unwrap_or_else(|| "—".into()),
                r.content_proven.clone().unwrap_or_else(|| "—".into()),
                r.next_run.clone().unwrap_or_else(|| "on demand".into()),
            ]
        })
        .collect();
    let header =
        ["TARGET", "VERDICT", "WHEN", "RTO MEASURED / TARGET", "POINT AGE / RPO", "PROVEN", "CONTENT", "NEXT RUN"];
    let widths: Vec<usize> = (0..header.len())
        .map(|i| cells.iter().map(|c| c[i].chars().count()).chain([header[i].len()]).max().unwrap_or(0))
        .collect();
    let line = |cols: &[String]| {
        let mut l = String::new();
        for (i, c) in cols.iter().enumerate() {
            let pad = widths[i].saturating_sub(c.chars().count());
            l.push_str(c);
            if i + 1 < cols.len() {
                l.push_str(&" ".repeat(pad + 2));
            }
        }
        l.trim_end().to_string() + "\n"
    };
    out.push_str(&line(&header.map(String::from)));
    for (r, c) in rows.iter().zip(&cells) {
        out.push_str(&line(c));
        if let Some(why) = &r.last_failure {
            let one: String = why.split_whitespace().collect::<Vec<_>>().join(" ");
            let cut: String = one.chars().take(160).collect();
            let more = if cut.len() < one.len() { "…" } else { "" };
            out.push_str(&format!("    last failure: {}{more}\n", crate::out::shown(&cut)));
        }
        // The RTO forecast when it has something to say: a breach ahead, or over already.
        if let Some(f) = r
            .rto_forecast
            .as_ref()
            .filter(|f| matches!(f.outlook, crate::forecast::Outlook::Breach | crate::forecast::Outlook::Missed))
        {
            out.push_str(&format!("    rto forecast: {}\n", crate::out::shown(&f.detail)));
        }
        if let Some(c) = &r.canary {
            let cut: String = c.chars().take(160).collect();
            out.push_str(&format!("    canary: {}\n", crate::out::shown(&cut)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(target: &str, verdict: &str) -> Row {
        Row {
            target: target.into(),
            verdict: verdict.parse().ok(),
            started_at: Some("2026-12-01T03:00:00.000Z".into()),
            rto_measured_seconds: Some(5.0),
            rto_target_seconds: 1800.0,
            point_age_seconds: Some(7200.0),
            rpo_target_seconds: 93600.0,
            proven: Some("2 of 3".into()),
            next_run: Some("2026-12-02 03:00 UTC".into()),
            last_failure: None,
            canary: None,
            content_proven: None,
            rto_forecast: None,
        }
    }

    #[test]
    fn the_table_lines_up_and_says_each_failure_under_its_target() {
        let mut failed = row("ledger", "failed");
        failed.rto_measured_seconds = Some(2400.0);
        failed.last_failure = Some("[restore] pg_restore failed:\n end of file (2026-12-01T03:00:00Z)".into());
        let rows = vec![row("orders", "passed"), failed];
        let now = humantime::parse_rfc3339("2026-12-01T04:00:00Z").unwrap();
        let text = render(&rows, now);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "1 of 2 targets passed their last verification");
        assert!(lines[1].starts_with("TARGET  VERDICT  WHEN"), "{text}");
        let col = lines[1].find("RTO MEASURED").unwrap();
        assert_eq!(lines[2].find("5.0 s / 30.0 min"), Some(col), "{text}");
        assert!(lines[3].contains("!40.0 min / 30.0 min") && lines[3].contains("60.0 min ago"), "{text}");
        assert_eq!(lines[4], "    last failure: [restore] pg_restore failed: end of file (2026-12-01T03:00:00Z)");
        assert_eq!(exit_of(&rows), Exit::Failed);
        assert_eq!(exit_of(&rows[..1]), Exit::Passed);
        let never = Row { verdict: None, ..row("new", "never") };
        assert_eq!(exit_of(&[rows[0].clone(), never]), Exit::Incomplete);
    }

    /// Issue 50: a forecast breach is said under its target; too few runs say nothing.
    #[test]
    fn a_forecast_breach_is_said_under_its_target() {
        let forecast = |outlook: &str, detail: &str| {
            serde_json::from_value(serde_json::json!({"outlook": outlook, "runs": 8, "backups": 8,
                "span_days": 7.0, "confidence": "high", "detail": detail, "breach_at": "2026-12-12T00:00:00Z"}))
            .unwrap()
        };
        let mut growing = row("orders", "passed");
        growing.rto_forecast =
            Some(forecast("breach", "at the current trend the restore takes longer than the RTO 30m on 2026-12-12"));
        let mut young = row("ledger", "passed");
        young.rto_forecast = Some(forecast("insufficient", "no forecast yet: it needs 5 measured restores"));
        let text = render(&[growing, young], humantime::parse_rfc3339("2026-12-07T04:00:00Z").unwrap());
        assert!(
            text.contains(
                "\n    rto forecast: at the current trend the restore takes longer than the RTO 30m on 2026-12-12\n"
            ),
            "{text}"
        );
        assert!(!text.contains("no forecast yet"), "{text}");
    }
}
