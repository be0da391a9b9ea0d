//! The status page for people: `/` lists every target with its last verdict, how old
//! it is, the last measured RTO against the target as a bar, the recoverable point (or
//! backup) age against the RPO, the next scheduled run and the last failure's reason;
//! `/targets/{name}` shows a target's recent runs and its RTO trend. Plain HTML with
//! inline CSS: no JavaScript, no external assets; refreshes itself every 30 s; one
//! column on a phone.
//!
//! Access: without `[api] token` the pages are open (read-only: they show what
//! `GET /api/v1/runs` shows, and reports never hold secrets). With a token they ask for
//! it like the API does — `Authorization: Bearer TOKEN`, or HTTP Basic with any user
//! name and the token as password, which a browser prompts for.

use super::Shared;
use crate::evidence::render::{esc, human, rto_chart};
use crate::evidence::{self, RunEvidence};
use crate::run_report::{RunReport, timestamp};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use base64::Engine as _;
use chrono::Utc;
use std::fmt::Write as _;
use std::sync::Arc;

/// Runs on a target's page (and in its trend).
const RECENT: u32 = 50;

/// Whether the request carries the token (when one is configured).
pub(super) fn allowed(headers: &HeaderMap, token: &str) -> bool {
    if super::auth::bearer_matches(headers, token) {
        return true;
    }
    let Some(v) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else { return false };
    let Some(basic) = v.strip_prefix("Basic ") else { return false };
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(basic.trim()) else { return false };
    let password = decoded.splitn(2, |b| *b == b':').nth(1).unwrap_or_default();
    super::auth::same(password, token.as_bytes())
}

fn ask_for_token() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Basic realm=\"drcheck\", charset=\"UTF-8\"")],
        "this status page needs the API token: any user name, the token as password\n",
    )
        .into_response()
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"refresh\" content=\"30\">\n<title>{}</title>\n<style>{CSS}</style></head><body>\n{body}\
         <footer><p>drcheck · refreshes every 30 s · <a href=\"/metrics\">metrics</a></p></footer>\n</body></html>\n",
        esc(title)
    )
}

const CSS: &str = "body{font-family:system-ui,sans-serif;margin:1rem;color:#111;background:#fff}\
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ccc;padding:.4rem;text-align:left;vertical-align:top;overflow-wrap:anywhere}\
.verdict{font-weight:700;padding:.1rem .4rem;border-radius:.2rem;white-space:nowrap;display:inline-block}.passed{background:#cfc}.failed,.error{background:#fcc}.inconclusive{background:#fe9}\
.aborted{background:#fec}.never{background:#eee}.bar{position:relative;background:#eee;height:.8rem;width:10rem;max-width:40vw}\
.bar span{position:absolute;left:0;top:0;bottom:0;background:#555}.bar.over span{background:#c00}\
.bar i{position:absolute;top:-.15rem;bottom:-.15rem;width:2px;background:#000}.why{font-size:.85rem;color:#333;max-width:30rem}\
@media (max-width:40rem){thead{display:none}tr{display:block;border-bottom:2px solid #999;padding:.4rem 0}\
td{display:block;border:0;padding:.15rem 0;max-width:none}td[data-label]::before{content:attr(data-label) \": \";font-weight:600}}";

/// The most of a failure's reason a status page's cell shows; the whole of it is the
/// cell's tooltip and on the target's page.
const WHY_SHOWN: usize = 240;

/// The last failure's cell: its reasons, cut to [`WHY_SHOWN`] characters (the whole as
/// the tooltip), and how long ago.
fn last_failure(reasons: &[String], at: &str) -> String {
    let all = reasons.join(" | ");
    let shown = crate::out::short(&all, WHY_SHOWN);
    format!("<span title=\"{}\">{}</span> ({})", esc(&all), esc(&shown), age(at))
}

/// A bar of `measured` against `target` (the mark at the target; red past it).
fn bar(measured: Option<f64>, target: f64) -> String {
    let Some(m) = measured else { return "—".into() };
    if target <= 0.0 {
        return human(m);
    }
    // The bar's full width is 1.5 × the target: the mark sits at two thirds.
    let pct = (m / (target * 1.5) * 100.0).clamp(0.0, 100.0);
    format!(
        "<div class=\"bar{}\" title=\"{} of {}\"><span style=\"width:{pct:.0}%\"></span><i style=\"left:66.7%\"></i></div>{} / {}",
        if m > target { " over" } else { "" },
        human(m),
        human(target),
        human(m),
        human(target)
    )
}

fn age(at: &str) -> String {
    match evidence::epoch(at) {
        Some(t) => format!("{} ago", human((Utc::now().timestamp_millis() as f64 / 1000.0 - t).max(0.0))),
        None => "—".into(),
    }
}

fn next_run(s: &Shared, target: &str) -> String {
    let config = s.config();
    let Some(schedule) = config.target(target).and_then(|t| t.schedule.clone()) else { return "on demand".into() };
    match schedule.next_after(Utc::now()) {
        Some(t) => format!("<time>{}</time>", esc(&t.format("%Y-%m-%d %H:%M UTC").to_string())),
        None => "—".into(),
    }
}

pub(super) async fn index(State(s): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let config = s.config();
    if let Some(token) = &config.api.token
        && !allowed(&headers, token.expose())
    {
        return ask_for_token();
    }
    let latest = match s.history.latest_per_target().await {
        Ok(l) => l,
        Err(e) => {
            return (StatusCode::SERVICE_UNAVAILABLE, format!("history store unreachable: {e:#}\n")).into_response();
        }
    };
    let failures = s.history.last_failure_per_target().await.unwrap_or_default();
    let mut b = String::new();
    let _ = writeln!(b, "<h1>drcheck: can we restore?</h1>");
    let passing = config
        .targets
        .iter()
        .filter(|t| latest.get(&t.name).is_some_and(|r| r.result == crate::run_report::RunResult::Passed))
        .count();
    let _ = writeln!(
        b,
        "<p id=\"overview\">{passing} of {} passed their last verification · {}</p>",
        crate::out::count(config.targets.len(), "target"),
        esc(&timestamp(std::time::SystemTime::now()))
    );
    let _ = writeln!(
        b,
        "<table id=\"targets\"><thead><tr><th>target</th><th>last verdict</th><th>when</th><th>RTO measured / target</th><th>recoverable point age / RPO</th><th>backups proven</th><th>content proven</th><th>next run</th><th>last failure</th></tr></thead><tbody>"
    );
    for t in &config.targets {
        let run = latest.get(&t.name);
        let verdict = run.map(|r| r.result.as_str()).unwrap_or("never");
        let (when, rto, rpo) = match run {
            Some(r) => {
                let age_s = r.rpo.recoverable_point_age_seconds.or(r.rpo.backup_age_seconds);
                (
                    age(&r.started_at),
                    bar(r.rto.measured_seconds, r.rto.target_seconds) + &forecast_cell(r.rto.forecast.as_ref()),
                    bar(age_s, r.rpo.target_seconds),
                )
            }
            None => ("never run".into(), "—".into(), "—".into()),
        };
        // How much of the retention has been proven (the latest run's count).
        let proven = run
            .and_then(|r| r.coverage.as_ref())
            .map(|c| {
                format!(
                    "{} of {} within {}",
                    c.proven,
                    c.restorable,
                    drcheck_config::format_duration(std::time::Duration::from_secs_f64(c.prove_within_seconds))
                )
            })
            .unwrap_or_else(|| "—".into());
        // How much of the content the latest run decided (issue 46).
        let content = run
            .and_then(|r| r.content.as_ref())
            .map(|c| format!("{}% ({} of {} tables undecided)", c.proven_percent, c.tables_undecided, c.tables))
            .unwrap_or_else(|| "—".into());
        let why = failures
            .get(&t.name)
            .map(|r| last_failure(&RunEvidence::from_report(r).reasons, &r.started_at))
            .unwrap_or_default();
        let _ = writeln!(
            b,
            "<tr class=\"target\" id=\"target-{n}\" data-verdict=\"{verdict}\"><td data-label=\"target\"><a href=\"/targets/{n}\">{n}</a></td><td data-label=\"verdict\"><span class=\"verdict {verdict}\">{verdict}</span></td><td data-label=\"when\">{when}</td><td data-label=\"RTO\">{rto}</td><td data-label=\"RPO\">{rpo}</td><td data-label=\"proven\" class=\"proven\">{proven}</td><td data-label=\"content\" class=\"content\">{content}</td><td data-label=\"next\">{}</td><td data-label=\"last failure\" class=\"why\">{why}</td></tr>",
            next_run(&s, &t.name),
            n = esc(&t.name)
        );
    }
    let _ = writeln!(b, "</tbody></table>");
    // Each target's last canary: drcheck proving it would notice a bad backup.
    let canaries = s.history.latest_canaries(&config).await.unwrap_or_default();
    if !canaries.is_empty() {
        let _ = writeln!(
            b,
            "<h2>Canaries</h2>\n<table id=\"canaries\"><thead><tr><th>target</th><th>result</th><th>when</th><th>backup</th><th>defects</th></tr></thead><tbody>"
        );
        for t in &config.targets {
            let Some(c) = canaries.get(&t.name) else { continue };
            let _ = writeln!(
                b,
                "<tr class=\"canary\" id=\"canary-{n}\" data-result=\"{result}\"><td data-label=\"target\">{n}</td><td data-label=\"result\">{result}</td><td data-label=\"when\">{when}</td><td data-label=\"backup\">{backup}</td><td data-label=\"defects\" class=\"why\">{outcomes}</td></tr>",
                n = esc(&t.name),
                result = c.result,
                when = age(&c.finished_at),
                backup = esc(c.backup.as_deref().unwrap_or("—")),
                outcomes = esc(&c.outcomes()),
            );
        }
        let _ = writeln!(b, "</tbody></table>");
    }
    let views = s.followers.views.lock().unwrap().clone();
    if !views.is_empty() {
        let _ = writeln!(
            b,
            "<h2>Followers</h2>\n<table id=\"followers\"><thead><tr><th>target</th><th>state</th><th>replayed to</th><th>lag</th><th>behind the primary</th><th>last segment / newest archived</th><th>seeded from</th><th>problem</th></tr></thead><tbody>"
        );
        for (name, v) in &views {
            let opt = |o: &Option<String>| esc(o.as_deref().unwrap_or("—"));
            let _ = writeln!(
                b,
                "<tr class=\"follower\" id=\"follower-{n}\" data-state=\"{state}\"><td data-label=\"target\">{n}</td><td data-label=\"state\">{state}</td><td data-label=\"replayed to\">{commit} ({lsn})</td><td data-label=\"lag\">{lag}</td><td data-label=\"behind\">{behind}</td><td data-label=\"segments\">{last} / {newest}</td><td data-label=\"seeded from\">{seeded} ({at})</td><td data-label=\"problem\" class=\"why\">{problem}</td></tr>",
                n = esc(name),
                state = esc(&v.state),
                commit = opt(&v.replayed_commit),
                lsn = opt(&v.replayed_lsn),
                lag = v.lag_seconds.map(human).unwrap_or_else(|| "—".into()),
                behind = v.behind_bytes.map(|b| format!("{} bytes", b as u64)).unwrap_or_else(|| "—".into()),
                last = opt(&v.last_segment),
                newest = opt(&v.newest_archived),
                seeded = opt(&v.seeded_from),
                at = opt(&v.seeded_at),
                problem = opt(&v.problem),
            );
        }
        let _ = writeln!(b, "</tbody></table>");
    }
    Html(page("drcheck status", &b)).into_response()
}

pub(super) async fn target(State(s): State<Arc<Shared>>, Path(name): Path<String>, headers: HeaderMap) -> Response {
    let config = s.config();
    if let Some(token) = &config.api.token
        && !allowed(&headers, token.expose())
    {
        return ask_for_token();
    }
    if config.target(&name).is_none() {
        return (StatusCode::NOT_FOUND, Html(page("not found", &format!("<p>No target {}.</p>", esc(&name)))))
            .into_response();
    }
    let runs: Vec<RunReport> = match s.history.recent(Some(&name), RECENT).await {
        Ok(r) => r,
        Err(e) => {
            return (StatusCode::SERVICE_UNAVAILABLE, format!("history store unreachable: {e:#}\n")).into_response();
        }
    };
    let now = timestamp(std::time::SystemTime::now());
    let from = runs.last().map(|r| r.started_at.clone()).unwrap_or_else(|| now.clone());
    let (from_e, to_e) = (evidence::epoch(&from).unwrap_or(0.0), evidence::epoch(&now).unwrap_or(0.0));
    let te = evidence::target_evidence(&name, runs.iter().map(RunEvidence::from_report).collect(), from_e, to_e);
    let mut b = String::new();
    let _ = writeln!(b, "<p><a href=\"/\">← all targets</a></p><h1>{}</h1>", esc(&name));
    let _ = writeln!(
        b,
        "<p>{} recent runs, {} passed · next run {}</p>",
        te.summary.runs,
        te.summary.passed,
        next_run(&s, &name)
    );
    b.push_str(&rto_chart(&te, &from, &now));
    // The newest forecast (issue 50): when the restore will outgrow the RTO.
    if let Some(f) = runs.iter().find_map(|r| r.rto.forecast.as_ref()) {
        let _ = writeln!(
            b,
            "<p id=\"rto-forecast\" data-outlook=\"{}\">RTO forecast: {}</p>",
            f.outlook.as_str(),
            esc(&f.detail)
        );
    }
    let _ = writeln!(
        b,
        "<table id=\"runs\"><thead><tr><th>started</th><th>verdict</th><th>backup</th><th>RTO measured / target</th><th>RPO age / target</th><th>why not passed</th></tr></thead><tbody>"
    );
    for r in te.runs.iter().rev() {
        let _ = writeln!(
            b,
            "<tr class=\"run\" id=\"run-{id}\" data-result=\"{res}\"><td data-label=\"started\">{}</td><td data-label=\"verdict\"><span class=\"verdict {res}\">{res}</span></td><td data-label=\"backup\">{}</td><td data-label=\"RTO\">{}</td><td data-label=\"RPO\">{}</td><td data-label=\"why\" class=\"why\">{}</td></tr>",
            esc(&r.started_at),
            esc(r.backup_key.as_deref().unwrap_or("—")),
            bar(r.rto_measured_seconds, r.rto_target_seconds),
            bar(r.rpo_age_seconds, r.rpo_target_seconds),
            esc(&r.reasons.join(" | ")),
            id = esc(&r.run_id),
            res = r.result.as_str()
        );
    }
    let _ = writeln!(b, "</tbody></table>");
    Html(page(&format!("drcheck: {name}"), &b)).into_response()
}

/// Under the RTO bar: the forecast's date when it sees a breach, its whole sentence as
/// the tooltip; nothing for too few runs.
fn forecast_cell(f: Option<&crate::forecast::RtoForecast>) -> String {
    use crate::forecast::Outlook;
    let Some(f) = f else { return String::new() };
    let shown = match (f.outlook, f.breach_at.as_deref()) {
        (Outlook::Breach, Some(at)) => format!("forecast: over the RTO from {}", at.get(..10).unwrap_or(at)),
        (Outlook::Missed, _) => "forecast: over the RTO at the trend now".to_string(),
        (Outlook::Clear, _) => "forecast: no breach in sight".to_string(),
        _ => return String::new(),
    };
    format!("<br><small class=\"forecast {}\" title=\"{}\">{}</small>", f.outlook.as_str(), esc(&f.detail), esc(&shown))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 48: the last-failure cell is bounded whatever the reason's length (the
    /// whole reason stays as its tooltip).
    #[test]
    fn a_long_failure_reason_is_cut_in_its_cell() {
        let long = vec!["checksums failed: ".to_string() + &"public.items: id=1 differs; ".repeat(200)];
        let cell = last_failure(&long, "2026-12-07T00:00:00Z");
        let shown = cell.split('>').nth(1).unwrap().split('<').next().unwrap();
        assert!(shown.chars().count() <= WHY_SHOWN + 1, "{}", shown.len());
        assert!(cell.contains("title=\"checksums failed: public.items") && cell.len() > 5000);
    }
}
