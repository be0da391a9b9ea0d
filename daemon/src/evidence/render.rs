//! The report's four formats, each drawn only from the [`Evidence`] (so `report verify`
//! can draw it again and compare). Every run is one line in HTML, Markdown and JUnit,
//! holding its run id: a changed line names its run.

#[cfg(test)]
use super::sign::{Embedded, trailer};
use super::{DrillEvidence, Evidence, RunEvidence, TargetEvidence, epoch};
use crate::run_report::RunResult;
use drcheck_runbooks::journal::DrillResult;
use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    Html,
    Markdown,
    Junit,
    Json,
}

/// The whole document: the body and the evidence it carries.
#[cfg(test)]
pub(crate) fn document(format: Format, embedded: &Embedded) -> String {
    match format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(embedded).expect("evidence serializes");
            s.push('\n');
            s
        }
        _ => format!("{}{}", body(format, &embedded.evidence), trailer(embedded)),
    }
}

/// The visible part of a document (everything but JSON's): its head (the summary of
/// every target), a section per target, its tail (the drills). Drawn piece by piece, so
/// a report over a whole fleet is written, and verified, one target at a time.
#[cfg(test)]
pub(crate) fn body(format: Format, e: &Evidence) -> String {
    let mut out = head(format, e);
    for t in &e.targets {
        out.push_str(&section(format, e, t));
    }
    out.push_str(&tail(format, e));
    out
}

/// The body up to the first target's section. `e.targets` need only their summaries.
pub(crate) fn head(format: Format, e: &Evidence) -> String {
    match format {
        Format::Html => html_head(e),
        Format::Markdown => markdown_head(e),
        Format::Junit => junit_head(e),
        Format::Json => String::new(),
    }
}

/// One target's section (`e` gives the window).
#[cfg(test)]
pub(crate) fn section(format: Format, e: &Evidence, t: &TargetEvidence) -> String {
    let mut s = String::new();
    let _ = section_to(format, e, t, &mut |piece| {
        s.push_str(piece);
        Ok(())
    });
    s
}

/// About how much of a section is drawn before it is handed on.
const PIECE: usize = 64 << 10;

/// A section drawn in pieces of about [`PIECE`] bytes, each ending a line, handed to
/// `emit` as they are drawn: a target of 25,000 runs is never one string (issue 50).
struct Pieces<'a> {
    buf: String,
    emit: &'a mut dyn FnMut(&str) -> std::io::Result<()>,
    failed: Option<std::io::Error>,
}

impl Pieces<'_> {
    fn hand_on(&mut self) {
        if self.failed.is_none()
            && let Err(e) = (self.emit)(&self.buf)
        {
            self.failed = Some(e);
        }
        self.buf.clear();
    }

    fn finish(mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            self.hand_on();
        }
        self.failed.map_or(Ok(()), Err)
    }
}

impl std::fmt::Write for Pieces<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.buf.push_str(s);
        if self.buf.len() >= PIECE && self.buf.ends_with('\n') {
            self.hand_on();
        }
        Ok(())
    }
}

/// [`section`], handed to `emit` in pieces as it is drawn.
pub(crate) fn section_to(
    format: Format,
    e: &Evidence,
    t: &TargetEvidence,
    emit: &mut dyn FnMut(&str) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut p = Pieces { buf: String::with_capacity(PIECE + 4096), emit, failed: None };
    match format {
        Format::Html => html_section(e, t, &mut p),
        Format::Markdown => markdown_section(t, &mut p),
        Format::Junit => junit_section(e, t, &mut p),
        Format::Json => {}
    }
    p.finish()
}

/// The body after the last target's section.
pub(crate) fn tail(format: Format, e: &Evidence) -> String {
    match format {
        Format::Html => html_tail(e),
        Format::Markdown => markdown_tail(e),
        Format::Junit => junit_tail(e),
        Format::Json => String::new(),
    }
}

/// Which format a document's body is in.
pub(crate) fn detect(body: &str) -> Format {
    if body.starts_with("<!DOCTYPE html>") {
        Format::Html
    } else if body.starts_with("<?xml") {
        Format::Junit
    } else {
        Format::Markdown
    }
}

pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' | '\r' => out.push(' '),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

pub(crate) use crate::out::human;

fn opt(v: Option<f64>) -> String {
    v.map(human).unwrap_or_else(|| "—".into())
}

fn met(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "not measured",
    }
}

fn rate(t: &TargetEvidence) -> String {
    t.summary.pass_rate.map(|r| format!("{:.0}%", r * 100.0)).unwrap_or_else(|| "—".into())
}

/// The recovery window's proof, in words: `3 of 4 backups proven within 30days;
/// points in time proven: 2 (latest → 2026-11-30T03:00:00Z, …)`.
fn window(t: &TargetEvidence) -> Option<String> {
    let c = t.coverage.as_ref()?;
    let within = drcheck_config::format_duration(std::time::Duration::from_secs_f64(c.prove_within_seconds));
    let never: Vec<&str> = c.backups.iter().filter(|b| b.last_proven_at.is_none()).map(|b| b.label.as_str()).collect();
    let mut line = format!("{} of {} backups proven within {within}", c.proven, c.restorable);
    if !never.is_empty() {
        line.push_str(&format!(" (never proven: {})", never.join(", ")));
    }
    let passed: Vec<String> = c
        .points_in_time
        .iter()
        .filter(|p| p.result == RunResult::Passed)
        .map(|p| format!("{} → {}", p.target, p.recovered_to))
        .collect();
    if !passed.is_empty() {
        line.push_str(&format!("; points in time proven: {} ({})", passed.len(), passed.join(", ")));
    }
    Some(line)
}

/// What the validators covered, in words: `amcheck passed (289 relations); …`.
fn coverage(r: &RunEvidence) -> String {
    r.validators
        .iter()
        .map(|v| {
            let mut covered: Vec<String> = v.covered.iter().map(|(k, n)| format!("{n:.0} {k}")).collect();
            if !v.inconclusive.is_empty() {
                covered.push(format!("{} inconclusive", v.inconclusive.len()));
            }
            if covered.is_empty() {
                format!("{} {}", v.name, v.status)
            } else {
                format!("{} {} ({})", v.name, v.status, covered.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// First 12 characters of a run id: enough to tell runs apart in a table.
/// The store's findings of the newest run that made them (issue 37), named for a reader.
fn store_findings(t: &TargetEvidence) -> Vec<(&'static str, &super::ValidatorEvidence)> {
    let mut out = Vec::new();
    if let Some(f) = &t.immutability {
        out.push(("Immutability (newest backup)", f));
    }
    if let Some(f) = &t.pinned {
        out.push(("Proven backups unchanged", f));
    }
    out
}

fn short_id(id: &str) -> &str {
    &id[..id.len().min(12)]
}

const CSS: &str = "body{font-family:system-ui,sans-serif;margin:1.5rem;color:#000;background:#fff;max-width:75rem}\
table{border-collapse:collapse;margin:.5rem 0 1.5rem;width:100%}th,td{border:1px solid #444;padding:.25rem .45rem;\
text-align:left;vertical-align:top;font-size:.9rem}th{background:#eee}.passed,.completed{font-weight:600}\
.failed,.error,.aborted,.MISSED{font-weight:700;text-decoration:underline}.why{font-size:.8rem}\
svg{max-width:100%;height:auto;border:1px solid #444}@media print{a{color:#000}th{background:#fff}}";

fn html_head(e: &Evidence) -> String {
    let mut h = String::new();
    let _ = writeln!(h, "<!DOCTYPE html>");
    let _ = writeln!(h, "<html lang=\"en\"><head><meta charset=\"utf-8\">");
    let _ = writeln!(h, "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    let _ = writeln!(h, "<title>drcheck restore-test evidence {} to {}</title>", esc(&e.from), esc(&e.to));
    let _ = writeln!(h, "<style>{CSS}</style></head><body>");
    let _ = writeln!(h, "<h1>Restore-test evidence</h1>");
    let _ = writeln!(
        h,
        "<p>Runs that started from <time>{}</time> to <time>{}</time>; generated <time>{}</time> by drcheck.</p>",
        esc(&e.from),
        esc(&e.to),
        esc(&e.generated_at)
    );
    let _ = writeln!(h, "<h2>Summary</h2>");
    let _ = writeln!(
        h,
        "<table id=\"summary\"><thead><tr><th>target</th><th>runs</th><th>passed</th><th>failed</th><th>error</th><th>aborted</th><th>inconclusive</th><th>pass rate</th><th>content proven</th><th>worst RTO</th><th>RTO target</th><th>longest without a passing run</th></tr></thead><tbody>"
    );
    for t in &e.targets {
        let s = &t.summary;
        let _ = writeln!(
            h,
            "<tr id=\"summary-{n}\"><td><a href=\"#target-{n}\">{n}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            s.runs,
            s.passed,
            s.failed,
            s.error,
            s.aborted,
            s.inconclusive,
            rate(t),
            content(s),
            opt(s.worst_rto_seconds),
            opt(t.rto_target_seconds),
            human(s.longest_without_pass_seconds),
            n = esc(&t.name)
        );
    }
    let _ = writeln!(h, "</tbody></table>");
    h
}

fn html_section(e: &Evidence, t: &TargetEvidence, h: &mut Pieces<'_>) {
    {
        let _ = writeln!(h, "<section id=\"target-{}\">", esc(&t.name));
        let _ = writeln!(h, "<h2>{}</h2>", esc(&t.name));
        let _ = writeln!(
            h,
            "<p>RTO target {}, RPO target {}; {} runs, {} passed.</p>",
            opt(t.rto_target_seconds),
            opt(t.rpo_target_seconds),
            t.summary.runs,
            t.summary.passed
        );
        if let Some(w) = window(t) {
            let _ = writeln!(h, "<p class=\"coverage\">Recovery window: {}.</p>", esc(&w));
        }
        for (what, f) in store_findings(t) {
            let _ = writeln!(h, "<p class=\"store\">{what}: {} — {}</p>", f.status.as_str(), esc(&f.detail));
        }
        for a in &t.acknowledgements {
            let _ = writeln!(h, "<p class=\"acknowledged\">Acknowledged: {}</p>", esc(&acknowledgement(a)));
        }
        let _ = h.write_str(&rto_chart(t, &e.from, &e.to));
        let _ = writeln!(
            h,
            "<table class=\"runs\"><thead><tr><th>started</th><th>run</th><th>verdict</th><th>backup</th><th>RTO measured / target</th><th>RPO age / target</th><th>validators (what they covered)</th><th>why not passed</th></tr></thead><tbody>"
        );
        for r in &t.runs {
            let _ = writeln!(
                h,
                "<tr id=\"run-{id}\" class=\"run\" data-result=\"{res}\"><td>{}</td><td title=\"{id}\">{}</td><td class=\"{res}\">{res}</td><td>{}</td><td>{} / {} <span class=\"{}\">{}</span></td><td>{} / {} <span class=\"{}\">{}</span></td><td class=\"why\">{}</td><td class=\"why\">{}</td></tr>",
                esc(&r.started_at),
                esc(short_id(&r.run_id)),
                esc(r.backup_key.as_deref().unwrap_or("—")),
                opt(r.rto_measured_seconds),
                human(r.rto_target_seconds),
                met(r.rto_met),
                met(r.rto_met),
                opt(r.rpo_age_seconds),
                human(r.rpo_target_seconds),
                met(r.rpo_met),
                met(r.rpo_met),
                esc(&coverage(r)),
                esc(&r.reasons.join(" | ")),
                id = esc(&r.run_id),
                res = r.result.as_str()
            );
        }
        let _ = writeln!(h, "</tbody></table></section>");
    }
}

fn html_tail(e: &Evidence) -> String {
    let mut h = String::new();
    if !e.controls.is_empty() {
        let _ = writeln!(h, "<section id=\"controls\"><h2>Controls</h2>");
        for f in &e.controls {
            let _ = writeln!(h, "<h3 id=\"controls-{}\">{}</h3>", esc(&f.framework), esc(&f.title));
            let _ = writeln!(
                h,
                "<table class=\"controls\"><thead><tr><th>control</th><th>asks</th><th>verdict</th><th>evidence</th></tr></thead><tbody>"
            );
            for c in &f.controls {
                let _ = write!(
                    h,
                    "<tr id=\"control-{}-{}\" data-verdict=\"{v}\"><td>{}</td><td>{}</td><td class=\"{v}\">{v}</td><td><ul>",
                    esc(&f.framework),
                    esc(&c.id),
                    esc(&c.id),
                    esc(&c.asks),
                    v = c.verdict.as_str()
                );
                for m in &c.measures {
                    let proof: Vec<String> = m
                        .proof
                        .iter()
                        .map(|id| match id.starts_with("and ") {
                            true => esc(id),
                            false => format!("<a href=\"#run-{}\">{}</a>", esc(id), esc(short_id(id))),
                        })
                        .collect();
                    let _ = write!(
                        h,
                        "<li data-measure=\"{}\" data-verdict=\"{}\">{} — {}: {}{}{}</li>",
                        esc(&m.name),
                        m.verdict.as_str(),
                        esc(&m.name),
                        m.verdict.as_str(),
                        esc(&m.figure),
                        if proof.is_empty() { String::new() } else { format!("; proof: {}", proof.join(" ")) },
                        if m.misses.is_empty() {
                            String::new()
                        } else {
                            format!("; missed: {}", esc(&m.misses.join(" | ")))
                        }
                    );
                }
                let _ = writeln!(h, "</ul></td></tr>");
            }
            let _ = writeln!(h, "</tbody></table>");
        }
        let _ = writeln!(h, "</section>");
    }
    let _ = writeln!(h, "<h2>DR drills</h2>");
    if e.drills.is_empty() {
        let _ = writeln!(h, "<p id=\"no-drills\">No drill journal in the window.</p>");
    } else {
        let _ = writeln!(
            h,
            "<table id=\"drills\"><thead><tr><th>started</th><th>runbook</th><th>result</th><th>duration</th><th>RTO measured / objective</th><th>why not completed</th></tr></thead><tbody>"
        );
        for d in &e.drills {
            h.push_str(&drill_row_html(d));
        }
        let _ = writeln!(h, "</tbody></table>");
    }
    let _ = writeln!(
        h,
        "<footer><p>Verify with <code>drcheck report verify FILE --public-key KEY.pem</code>.</p></footer>"
    );
    let _ = writeln!(h, "</body></html>");
    h
}

fn drill_row_html(d: &DrillEvidence) -> String {
    format!(
        "<tr id=\"drill-{id}\" class=\"drill\" data-result=\"{res}\"><td>{}</td><td>{} — {}</td><td class=\"{res}\">{res}</td><td>{}</td><td>{} / {} <span class=\"{}\">{}</span></td><td class=\"why\">{}</td></tr>\n",
        esc(&d.started_at),
        esc(&d.runbook),
        esc(&d.title),
        human(d.duration_seconds),
        opt(d.rto_measured_seconds),
        opt(d.rto_objective_seconds),
        met(d.rto_met),
        met(d.rto_met),
        esc(&d.reasons.join(" | ")),
        id = esc(&d.drill_id),
        res = d.result.as_str()
    )
}

/// The RTO trend: measured restore time per run across the window, the target as a
/// dashed line; passes as filled circles, failures as crosses, runs with no measured
/// restore as hollow squares on the axis. Black and white, so it prints.
pub(crate) fn rto_chart(t: &TargetEvidence, window_from: &str, window_to: &str) -> String {
    let (w, hgt, left, right, top, bottom) = (640.0, 200.0, 56.0, 12.0, 14.0, 28.0);
    let from = epoch(window_from).unwrap_or(0.0);
    let to = epoch(window_to).unwrap_or(from + 1.0).max(from + 1.0);
    let target = t.rto_target_seconds.unwrap_or(0.0);
    let longest = t.runs.iter().filter_map(|r| r.rto_measured_seconds).fold(0.0, f64::max);
    // Runs of a few seconds against a target of half an hour would lie on the axis: the
    // scale is then the runs' own and the target is said above the chart.
    let target_above = target > 0.0 && longest > 0.0 && longest * 4.0 < target;
    let most = if target_above { longest } else { longest.max(target) }.max(1.0) * 1.1;
    let x = |at: f64| left + (at - from) / (to - from) * (w - left - right);
    let y = |s: f64| (top + (1.0 - s / most) * (hgt - top - bottom)).min(hgt - bottom - 4.0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg class=\"rto-trend\" viewBox=\"0 0 {w} {hgt}\" width=\"{w}\" height=\"{hgt}\" role=\"img\" aria-label=\"RTO trend of {}\" xmlns=\"http://www.w3.org/2000/svg\">",
        esc(&t.name)
    );
    let _ = writeln!(s, "<title>Restore time of {} per run; dashed: the RTO target</title>", esc(&t.name));
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#000\"/><line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{b}\" stroke=\"#000\"/>",
        b = hgt - bottom,
        r = w - right
    );
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{}</text><text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">0</text>",
        left - 4.0,
        top + 8.0,
        esc(&human(most)),
        left - 4.0,
        hgt - bottom
    );
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"{}\" font-size=\"10\">{}</text><text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{}</text>",
        hgt - 8.0,
        esc(window_from.get(..10).unwrap_or(window_from)),
        w - right,
        hgt - 8.0,
        esc(window_to.get(..10).unwrap_or(window_to))
    );
    if target_above {
        let _ = writeln!(
            s,
            "<text class=\"rto-target above\" x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">RTO target {} (above this scale: every run well within it)</text>",
            w - right - 2.0,
            top + 8.0,
            esc(&human(target))
        );
    } else if target > 0.0 {
        let _ = writeln!(
            s,
            "<line class=\"rto-target\" x1=\"{left}\" y1=\"{ty:.1}\" x2=\"{}\" y2=\"{ty:.1}\" stroke=\"#000\" stroke-dasharray=\"6 4\"/><text x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">RTO target {}</text>",
            w - right,
            w - right - 2.0,
            y(target) - 3.0,
            esc(&human(target)),
            ty = y(target)
        );
    }
    let points: Vec<String> = t
        .runs
        .iter()
        .filter_map(|r| Some(format!("{:.1},{:.1}", x(epoch(&r.started_at)?), y(r.rto_measured_seconds?))))
        .collect();
    if points.len() > 1 {
        let _ =
            writeln!(s, "<polyline fill=\"none\" stroke=\"#000\" stroke-width=\"1\" points=\"{}\"/>", points.join(" "));
    }
    for r in &t.runs {
        let Some(at) = epoch(&r.started_at) else { continue };
        let px = x(at);
        let label = format!("{} {} {}", esc(&r.started_at), r.result.as_str(), opt(r.rto_measured_seconds));
        match (r.rto_measured_seconds, r.result.as_str()) {
            (Some(m), "passed") => {
                let _ = writeln!(
                    s,
                    "<circle class=\"point passed\" cx=\"{px:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"#000\"><title>{label}</title></circle>",
                    y(m)
                );
            }
            (Some(m), _) => {
                let py = y(m);
                let _ = writeln!(
                    s,
                    "<path class=\"point {}\" d=\"M{:.1} {:.1}L{:.1} {:.1}M{:.1} {:.1}L{:.1} {:.1}\" stroke=\"#000\" stroke-width=\"2\"><title>{label}</title></path>",
                    r.result.as_str(),
                    px - 4.0,
                    py - 4.0,
                    px + 4.0,
                    py + 4.0,
                    px - 4.0,
                    py + 4.0,
                    px + 4.0,
                    py - 4.0
                );
            }
            (None, _) => {
                let _ = writeln!(
                    s,
                    "<rect class=\"point {}\" x=\"{:.1}\" y=\"{:.1}\" width=\"7\" height=\"7\" fill=\"#fff\" stroke=\"#000\"><title>{label}</title></rect>",
                    r.result.as_str(),
                    px - 3.5,
                    hgt - bottom - 3.5
                );
            }
        }
    }
    let _ = writeln!(s, "</svg>");
    s
}

/// Markdown table cells: no pipes or line breaks from the data.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// An operator's decision, said in a report.
fn acknowledgement(a: &crate::history::Ack) -> String {
    match (a.kind.as_str(), &a.subject_to) {
        (crate::history::WAL_GAP, Some(to)) => {
            format!("WAL {}..{} lost, {}", a.subject, to, a.describe())
        }
        _ => format!("backup {} deleted on purpose, its proof forgotten, {}", a.subject, a.describe()),
    }
}

/// The newest comparing run's content proven, `content proven N%`, or `—`.
fn content(s: &super::Summary) -> String {
    s.content_proven_percent.map(|p| format!("{p}%")).unwrap_or_else(|| "—".into())
}

fn markdown_head(e: &Evidence) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# Restore-test evidence\n");
    let _ = writeln!(m, "Runs that started from {} to {}; generated {} by drcheck.\n", e.from, e.to, e.generated_at);
    let _ = writeln!(m, "## Summary\n");
    let _ = writeln!(
        m,
        "| target | runs | passed | failed | error | aborted | inconclusive | pass rate | content proven | worst RTO | RTO target | longest without a passing run |"
    );
    let _ = writeln!(m, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for t in &e.targets {
        let s = &t.summary;
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(&t.name),
            s.runs,
            s.passed,
            s.failed,
            s.error,
            s.aborted,
            s.inconclusive,
            rate(t),
            content(s),
            opt(s.worst_rto_seconds),
            opt(t.rto_target_seconds),
            human(s.longest_without_pass_seconds)
        );
    }
    m
}

fn markdown_section(t: &TargetEvidence, m: &mut Pieces<'_>) {
    {
        let _ = writeln!(m, "\n## {}\n", cell(&t.name));
        let _ = writeln!(
            m,
            "RTO target {}, RPO target {}; {} runs, {} passed.\n",
            opt(t.rto_target_seconds),
            opt(t.rpo_target_seconds),
            t.summary.runs,
            t.summary.passed
        );
        if let Some(w) = window(t) {
            let _ = writeln!(m, "Recovery window: {w}.\n");
        }
        for (what, f) in store_findings(t) {
            let _ = writeln!(m, "{what}: {} — {}\n", cell(f.status.as_str()), cell(&f.detail));
        }
        for a in &t.acknowledgements {
            let _ = writeln!(m, "Acknowledged: {}\n", cell(&acknowledgement(a)));
        }
        let _ = writeln!(
            m,
            "| started | run | verdict | backup | RTO measured / target | RPO age / target | validators | why not passed |"
        );
        let _ = writeln!(m, "|---|---|---|---|---|---|---|---|");
        for r in &t.runs {
            let _ = writeln!(
                m,
                "| {} | {} | **{}** | {} | {} / {} {} | {} / {} {} | {} | {} |",
                r.started_at,
                cell(&r.run_id),
                r.result,
                cell(r.backup_key.as_deref().unwrap_or("—")),
                opt(r.rto_measured_seconds),
                human(r.rto_target_seconds),
                met(r.rto_met),
                opt(r.rpo_age_seconds),
                human(r.rpo_target_seconds),
                met(r.rpo_met),
                cell(&coverage(r)),
                cell(&r.reasons.join(" / "))
            );
        }
    }
}

fn markdown_tail(e: &Evidence) -> String {
    let mut m = String::new();
    if !e.controls.is_empty() {
        let _ = writeln!(m, "\n## Controls");
        for f in &e.controls {
            let _ = writeln!(m, "\n### {}\n", cell(&f.title));
            let _ = writeln!(m, "| control | asks | verdict | evidence |");
            let _ = writeln!(m, "|---|---|---|---|");
            for c in &f.controls {
                let evidence: Vec<String> = c
                    .measures
                    .iter()
                    .map(|x| {
                        let mut s = format!("{} — {}: {}", x.name, x.verdict, x.figure);
                        if !x.proof.is_empty() {
                            s.push_str(&format!("; proof: {}", x.proof.join(" ")));
                        }
                        if !x.misses.is_empty() {
                            s.push_str(&format!("; missed: {}", x.misses.join(" / ")));
                        }
                        s
                    })
                    .collect();
                let _ = writeln!(
                    m,
                    "| {} | {} | **{}** | {} |",
                    cell(&c.id),
                    cell(&c.asks),
                    c.verdict,
                    cell(&evidence.join("<br>"))
                );
            }
        }
    }
    let _ = writeln!(m, "\n## DR drills\n");
    if e.drills.is_empty() {
        let _ = writeln!(m, "No drill journal in the window.");
    } else {
        let _ = writeln!(
            m,
            "| started | drill | runbook | result | duration | RTO measured / objective | why not completed |"
        );
        let _ = writeln!(m, "|---|---|---|---|---|---|---|");
        for d in &e.drills {
            let _ = writeln!(
                m,
                "| {} | {} | {} | **{}** | {} | {} / {} {} | {} |",
                d.started_at,
                cell(&d.drill_id),
                cell(&d.runbook),
                d.result,
                human(d.duration_seconds),
                opt(d.rto_measured_seconds),
                opt(d.rto_objective_seconds),
                met(d.rto_met),
                cell(&d.reasons.join(" / "))
            );
        }
    }
    let _ = writeln!(m, "\nVerify with `drcheck report verify FILE --public-key KEY.pem`.\n");
    m
}

fn xml(s: &str) -> String {
    esc(s)
}

/// A test case's verdict element: none when `result` is `ok`, `<failure>` when failed,
/// `<error>` otherwise (error, aborted, inconclusive), with the reasons.
fn junit_verdict(result: &str, ok: &str, reasons: &[String]) -> String {
    let why = xml(&reasons.join(" | "));
    match result {
        r if r == ok => String::new(),
        "failed" => format!("<failure type=\"failed\" message=\"{why}\">{why}</failure>"),
        other => format!("<error type=\"{}\" message=\"{why}\">{why}</error>", xml(other)),
    }
}

/// JUnit XML: a test suite per target, a test case per run (its time the measured
/// RTO); failed → `<failure>`, error and aborted → `<error>`; drills in a suite of their
/// own. The shape Jenkins, GitLab and the `junitparser` library read.
fn junit_head(e: &Evidence) -> String {
    let mut j = String::new();
    let controls = e.controls.iter().flat_map(|f| f.controls.iter());
    let runs: u32 =
        e.targets.iter().map(|t| t.summary.runs).sum::<u32>() + e.drills.len() as u32 + controls.clone().count() as u32;
    let failures: u32 = e.targets.iter().map(|t| t.summary.failed).sum::<u32>()
        + e.drills.iter().filter(|d| d.result == DrillResult::Failed).count() as u32
        + controls.filter(|c| c.verdict == super::controls::Verdict::Missed).count() as u32;
    let errors: u32 =
        e.targets.iter().map(|t| t.summary.error + t.summary.aborted + t.summary.inconclusive).sum::<u32>()
            + e.drills.iter().filter(|d| d.result == DrillResult::Aborted).count() as u32;
    let _ = writeln!(j, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
    let _ = writeln!(
        j,
        "<testsuites name=\"drcheck restore tests {} to {}\" tests=\"{runs}\" failures=\"{failures}\" errors=\"{errors}\">",
        xml(&e.from),
        xml(&e.to)
    );
    j
}

fn junit_section(e: &Evidence, t: &TargetEvidence, j: &mut Pieces<'_>) {
    {
        let s = &t.summary;
        let time: f64 = t.runs.iter().filter_map(|r| r.rto_measured_seconds).sum();
        let _ = writeln!(
            j,
            "<testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"0\" time=\"{time:.3}\" timestamp=\"{}\">",
            xml(&t.name),
            s.runs,
            s.failed,
            s.error + s.aborted + s.inconclusive,
            xml(&e.from)
        );
        for r in &t.runs {
            let name = format!("restore test {} (run {})", r.started_at, r.run_id);
            let time = r.rto_measured_seconds.unwrap_or(0.0);
            let head =
                format!("<testcase classname=\"drcheck.{}\" name=\"{}\" time=\"{time:.3}\">", xml(&t.name), xml(&name));
            let out = format!(
                "<system-out>{}</system-out>",
                xml(&format!(
                    "backup {}; RTO {} / {} {}; RPO {} / {} {}; {}",
                    r.backup_key.as_deref().unwrap_or("—"),
                    opt(r.rto_measured_seconds),
                    human(r.rto_target_seconds),
                    met(r.rto_met),
                    opt(r.rpo_age_seconds),
                    human(r.rpo_target_seconds),
                    met(r.rpo_met),
                    coverage(r)
                ))
            );
            let verdict = junit_verdict(r.result.as_str(), "passed", &r.reasons);
            let _ = writeln!(j, "{head}{verdict}{out}</testcase>");
        }
        let _ = writeln!(j, "</testsuite>");
    }
}

fn junit_tail(e: &Evidence) -> String {
    let mut j = String::new();
    for f in &e.controls {
        let missed = f.controls.iter().filter(|c| c.verdict == super::controls::Verdict::Missed).count();
        let unmeasured = f.controls.iter().filter(|c| c.verdict == super::controls::Verdict::NotMeasured).count();
        let _ = writeln!(
            j,
            "<testsuite name=\"controls: {}\" tests=\"{}\" failures=\"{missed}\" errors=\"0\" skipped=\"{unmeasured}\" timestamp=\"{}\">",
            xml(&f.title),
            f.controls.len(),
            xml(&e.from)
        );
        for c in &f.controls {
            let said: Vec<String> =
                c.measures.iter().map(|m| format!("{} — {}: {}", m.name, m.verdict, m.figure)).collect();
            let misses: Vec<String> = c.measures.iter().flat_map(|m| m.misses.iter().cloned()).collect();
            let verdict = match c.verdict.as_str() {
                "met" => String::new(),
                "missed" => {
                    format!("<failure message=\"{}\">{}</failure>", xml(&misses.join(" | ")), xml(&said.join("\n")))
                }
                _ => format!("<skipped message=\"{}\"/>", xml(&said.join(" | "))),
            };
            let _ = writeln!(
                j,
                "<testcase classname=\"drcheck.controls.{}\" name=\"{}\">{verdict}</testcase>",
                xml(&f.framework),
                xml(&format!("{} — {}", c.id, c.asks))
            );
        }
        let _ = writeln!(j, "</testsuite>");
    }
    if !e.drills.is_empty() {
        let failed = e.drills.iter().filter(|d| d.result == DrillResult::Failed).count();
        let aborted = e.drills.iter().filter(|d| d.result == DrillResult::Aborted).count();
        let _ = writeln!(
            j,
            "<testsuite name=\"DR drills\" tests=\"{}\" failures=\"{failed}\" errors=\"{aborted}\" skipped=\"0\" timestamp=\"{}\">",
            e.drills.len(),
            xml(&e.from)
        );
        for d in &e.drills {
            let verdict = junit_verdict(d.result.as_str(), "completed", &d.reasons);
            let _ = writeln!(
                j,
                "<testcase classname=\"drcheck.drill.{}\" name=\"{}\" time=\"{:.3}\">{verdict}</testcase>",
                xml(&d.runbook),
                xml(&format!("drill {} (drill {})", d.started_at, d.drill_id)),
                d.duration_seconds
            );
        }
        let _ = writeln!(j, "</testsuite>");
    }
    let _ = writeln!(j, "</testsuites>");
    j
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(at: &str, rto: f64) -> crate::evidence::RunEvidence {
        serde_json::from_value(serde_json::json!({
            "run_id": at, "started_at": at, "finished_at": at, "result": "passed",
            "backup_key": null, "backup_created_at": null, "rto_target_seconds": 1800.0,
            "rto_measured_seconds": rto, "rto_met": true, "rpo_target_seconds": 86400.0,
            "rpo_age_seconds": null, "rpo_met": null, "validators": [], "reasons": []
        }))
        .unwrap()
    }

    /// Issue 34: runs of a few seconds against a 30-minute RTO were drawn on the axis.
    #[test]
    fn short_runs_stand_clear_of_the_axis_under_a_long_rto() {
        let runs = vec![run("2026-12-01T03:00:00Z", 5.0), run("2026-12-02T03:00:00Z", 8.0)];
        let (from, to) = ("2026-12-01T00:00:00Z", "2026-12-03T00:00:00Z");
        let t = crate::evidence::target_evidence(
            "orders",
            runs,
            crate::evidence::epoch(from).unwrap(),
            crate::evidence::epoch(to).unwrap(),
        );
        let svg = rto_chart(&t, from, to);
        assert!(svg.contains("RTO target 30.0 min (above this scale"), "{svg}");
        let ys: Vec<f64> =
            svg.match_indices("cy=\"").map(|(i, _)| svg[i + 4..].split('"').next().unwrap().parse().unwrap()).collect();
        assert_eq!(ys.len(), 2, "{svg}");
        // The plot runs from y 14 to 172: the 8 s run near the top, the 5 s one clear of the axis.
        assert!(ys[1] < 40.0 && ys[0] < 110.0, "{ys:?}");
    }
}
