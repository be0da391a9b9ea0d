//! The drill report: one self-contained HTML file (inline CSS and SVG, no scripts, no
//! external resources) with the verdict, a timeline of the steps drawn against the RTO
//! budget, the action items for the debrief, and every step's detail and output.

use crate::journal::{DrillResult, Journal, Phase, StepRecord};
use crate::outcome::Status;
use std::fmt::Write;

/// A step that used more than this share of its timeout is listed as slow.
const SLOW_SHARE_OF_TIMEOUT: f64 = 0.5;
/// A recovery step that used more than this share of the RTO budget is listed as slow.
const SLOW_SHARE_OF_RTO: f64 = 1.0 / 3.0;

/// What the debrief should look at: failures, slow steps, missed objectives, rollbacks
/// that did not put things back, confirmations nobody gave.
pub fn action_items(j: &Journal) -> Vec<String> {
    let mut items = Vec::new();
    if let Some(signal) = &j.interrupted_by {
        let during = j.timeline().filter(|s| s.status == Status::Aborted).map(|s| format!("{:?}", s.name)).next();
        items.push(match during {
            Some(step) => format!("the drill was stopped by {signal} during step {step}"),
            None => format!("the drill was stopped by {signal}"),
        });
    }
    if j.rto.met == Some(false) {
        items.push(match (j.rto.measured_seconds, j.rto.objective_seconds) {
            (Some(m), Some(o)) if j.rto.complete => {
                format!("RTO missed: recovery took {}, {} over the {} objective", secs(m), secs(m - o), secs(o))
            }
            _ => "RTO not met: recovery did not finish".to_string(),
        });
    }
    if j.rpo.met == Some(false) {
        items.push(format!(
            "RPO missed: the restored backup was {} old (objective {})",
            secs(j.rpo.backup_age_seconds.unwrap_or_default()),
            secs(j.rpo.objective_seconds.unwrap_or_default())
        ));
    }
    for s in j.timeline() {
        let where_ = format!("{} step {:?} (line {})", j_phase(s.phase), s.name, s.line);
        match s.status {
            Status::Failed | Status::TimedOut => {
                let extra = if s.phase == Phase::Rollbacks {
                    ": the environment may not be back to normal, check it by hand"
                } else {
                    ""
                };
                items.push(format!("{where_} {}: {}{extra}", s.status.as_str(), s.detail));
                continue;
            }
            Status::Passed => {}
            _ => continue,
        }
        let took = s.duration_seconds.unwrap_or_default();
        if took > s.timeout_seconds * SLOW_SHARE_OF_TIMEOUT && took >= 1.0 {
            items.push(format!(
                "{where_} is slow: {} of its {} timeout ({:.0}%)",
                secs(took),
                secs(s.timeout_seconds),
                100.0 * took / s.timeout_seconds
            ));
        } else if let Some(budget) = j.rto.objective_seconds
            && s.recovery
            && took > budget * SLOW_SHARE_OF_RTO
        {
            items.push(format!(
                "{where_} is slow: {} is {:.0}% of the {} RTO budget",
                secs(took),
                100.0 * took / budget,
                secs(budget)
            ));
        }
        if let Some(c) = &s.confirmation
            && c.how == "--yes"
        {
            items.push(format!("{where_} was confirmed by --yes, not by a person: rehearse it by hand"));
        }
    }
    items
}

fn j_phase(p: Phase) -> &'static str {
    match p {
        Phase::SteadyStateBefore => "steady-state (before)",
        Phase::Steps => "method",
        Phase::SteadyStateAfter => "steady-state (after)",
        Phase::Rollbacks => "rollback",
    }
}

/// Seconds the way people read them: `0.4s`, `42s`, `3m05s`, `1h02m`.
pub fn secs(s: f64) -> String {
    let s = s.max(0.0);
    if s < 10.0 {
        format!("{s:.1}s")
    } else if s < 60.0 {
        format!("{s:.0}s")
    } else if s < 3600.0 {
        let t = s.round() as u64;
        if t.is_multiple_of(60) { format!("{}m", t / 60) } else { format!("{}m{:02}s", t / 60, t % 60) }
    } else {
        let t = s.round() as u64;
        format!("{}h{:02}m", t / 3600, t / 60 % 60)
    }
}

/// Text made safe in HTML text and in attribute values of either quote.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}

fn color(s: Status) -> &'static str {
    match s {
        Status::Passed => "#43a047",
        Status::Failed => "#e53935",
        Status::TimedOut => "#fb8c00",
        Status::Aborted => "#757575",
        Status::Skipped => "#bdbdbd",
    }
}

/// The timeline: one row per step in the order they ran, bars on a shared time axis,
/// the RTO budget as a shaded band from the clock's start, the measured RTO as a bracket.
pub fn timeline_svg(j: &Journal) -> String {
    const W: f64 = 1000.0;
    const X0: f64 = 330.0;
    const RIGHT: f64 = 110.0;
    const ROW: f64 = 24.0;
    const TOP: f64 = 62.0;
    let plot_w = W - X0 - RIGHT;
    let mut rows: Vec<Row> = Vec::new();
    let mut last_phase = None;
    for s in j.timeline() {
        if last_phase != Some(s.phase) {
            rows.push(Row::Header(s.phase));
            last_phase = Some(s.phase);
        }
        rows.push(Row::Step(s));
    }
    let rto_start = j.rto.started_offset_seconds;
    let budget_end = rto_start.zip(j.rto.objective_seconds).map(|(s, o)| s + o);
    // The axis spans the drill; the budget's end is drawn on it when it is near enough,
    // otherwise the band runs off the right edge (a drill far inside its budget would
    // otherwise squeeze every step into a sliver at the left).
    let span = j.duration_seconds.max(j.rto.ended_offset_seconds.unwrap_or(0.0)).max(0.5);
    let t_max = match budget_end {
        Some(be) if be <= span * 2.5 => be * 1.04,
        _ => span * 1.04,
    };
    let budget_off_scale = budget_end.is_some_and(|be| be > t_max);
    let x = |t: f64| X0 + t / t_max * plot_w;
    let h = TOP + rows.len() as f64 * ROW + 46.0;
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 {W} {h}" width="{W}" height="{h}" font-family="system-ui, sans-serif" font-size="12" role="img" aria-label="timeline of the drill">"#
    );
    let plot_bottom = TOP + rows.len() as f64 * ROW;
    // The RTO budget band and its end.
    if let (Some(s), Some(e)) = (rto_start, budget_end)
        && budget_off_scale
    {
        let _ = write!(
            o,
            r##"<rect x="{:.1}" y="{}" width="{:.1}" height="{:.1}" fill="#e3f2fd"/><text x="{:.1}" y="{}" fill="#1565c0" text-anchor="end" font-weight="600">RTO budget {} runs on past the drill →</text>"##,
            x(s),
            TOP - 8.0,
            W - RIGHT + 40.0 - x(s),
            plot_bottom - TOP + 8.0,
            W - RIGHT + 40.0,
            TOP - 12.0,
            esc(&secs(e - s)),
        );
    } else if let (Some(s), Some(e)) = (rto_start, budget_end) {
        let missed = j.rto.met == Some(false);
        let _ = write!(
            o,
            r##"<rect x="{:.1}" y="{}" width="{:.1}" height="{:.1}" fill="#e3f2fd"/><line x1="{:.1}" y1="{}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="2" stroke-dasharray="6 4"/><text x="{:.1}" y="{}" fill="{}" text-anchor="end" font-weight="600">RTO budget {} ends</text>"##,
            x(s),
            TOP - 8.0,
            x(e) - x(s),
            plot_bottom - TOP + 8.0,
            x(e),
            TOP - 8.0,
            x(e),
            plot_bottom,
            if missed { "#c62828" } else { "#1565c0" },
            x(e) - 4.0,
            TOP - 12.0,
            if missed { "#c62828" } else { "#1565c0" },
            esc(&secs(e - s)),
        );
    }
    // The measured RTO as a bracket above the rows.
    if let (Some(s), Some(e)) = (rto_start, j.rto.ended_offset_seconds) {
        let label = match (j.rto.measured_seconds, j.rto.met) {
            (Some(m), _) if !j.rto.complete => format!("recovery did not finish ({} on the RTO clock)", secs(m)),
            (Some(m), Some(true)) => format!("RTO measured {} — met", secs(m)),
            (Some(m), Some(false)) => format!("RTO measured {} — MISSED", secs(m)),
            (Some(m), None) => format!("RTO measured {}", secs(m)),
            _ => String::new(),
        };
        let y = 22.0;
        let _ = write!(
            o,
            r##"<path d="M{:.1} {} v-6 H{:.1} v6" fill="none" stroke="#0d47a1" stroke-width="2"/><text x="{:.1}" y="{}" fill="#0d47a1" font-weight="600">{}</text>"##,
            x(s),
            y + 6.0,
            x(e).max(x(s) + 2.0),
            x(s),
            y - 6.0,
            esc(&label)
        );
    }
    // The time axis.
    let step = tick_step(t_max);
    let mut t = 0.0;
    while t <= t_max + 1e-9 {
        let _ = write!(
            o,
            r##"<line x1="{:.1}" y1="{}" x2="{:.1}" y2="{:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" fill="#616161" text-anchor="middle">{}</text>"##,
            x(t),
            TOP - 4.0,
            x(t),
            plot_bottom,
            x(t),
            plot_bottom + 16.0,
            esc(&tick_label(t, step))
        );
        t += step;
    }
    for (i, row) in rows.iter().enumerate() {
        let y = TOP + i as f64 * ROW;
        match row {
            Row::Header(p) => {
                let _ = write!(
                    o,
                    r##"<text x="8" y="{:.1}" fill="#424242" font-weight="700" font-size="11" letter-spacing="0.5">{}</text><line x1="8" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#bdbdbd"/>"##,
                    y + 16.0,
                    esc(&p.title().to_uppercase()),
                    y + 21.0,
                    W - 8.0,
                    y + 21.0
                );
            }
            Row::Step(s) => {
                let name = truncate(&s.name, 46);
                if s.recovery {
                    let _ = write!(
                        o,
                        r##"<text x="8" y="{:.1}" fill="#1565c0" font-weight="700">⟲<title>recovery step: on the RTO clock</title></text>"##,
                        y + 16.0
                    );
                }
                let _ = write!(o, r##"<text x="24" y="{:.1}" fill="#212121">{}</text>"##, y + 16.0, esc(&name));
                let tip = format!("{} — {} — {}", s.name, s.status.as_str(), s.detail);
                match (s.offset_seconds, s.duration_seconds) {
                    (Some(off), Some(d)) => {
                        let x1 = x(off);
                        let w = (x(off + d) - x1).max(3.0);
                        let stroke = if s.recovery { r##" stroke="#0d47a1" stroke-width="2""## } else { "" };
                        let label = format!("{} {}", secs(d), mark(s.status));
                        let tx = (x1 + w + 6.0).min(W - RIGHT + 6.0);
                        let _ = write!(
                            o,
                            r##"<rect x="{x1:.1}" y="{:.1}" width="{w:.1}" height="14" rx="2" fill="{}"{stroke}><title>{}</title></rect><text x="{tx:.1}" y="{:.1}" fill="{}">{}</text>"##,
                            y + 5.0,
                            color(s.status),
                            esc(&tip),
                            y + 16.0,
                            if s.status == Status::Passed { "#424242" } else { color(s.status) },
                            esc(&label)
                        );
                    }
                    _ => {
                        let _ = write!(
                            o,
                            r##"<text x="{X0}" y="{:.1}" fill="#9e9e9e" font-style="italic">not run<title>{}</title></text>"##,
                            y + 16.0,
                            esc(&tip)
                        );
                    }
                }
            }
        }
    }
    // Legend.
    let ly = plot_bottom + 36.0;
    let mut lx = 20.0;
    for (st, text) in [
        (Status::Passed, "passed"),
        (Status::Failed, "failed"),
        (Status::TimedOut, "timed out"),
        (Status::Aborted, "stopped"),
    ] {
        let _ = write!(
            o,
            r##"<rect x="{lx}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}" fill="#424242">{text}</text>"##,
            ly - 10.0,
            color(st),
            lx + 16.0,
            ly
        );
        lx += 90.0;
    }
    let _ = write!(
        o,
        r##"<rect x="{lx}" y="{:.1}" width="12" height="12" fill="#fff" stroke="#0d47a1" stroke-width="2"/><text x="{:.1}" y="{:.1}" fill="#424242">⟲ recovery step (on the RTO clock)</text><rect x="{:.1}" y="{:.1}" width="12" height="12" fill="#e3f2fd"/><text x="{:.1}" y="{:.1}" fill="#424242">RTO budget</text>"##,
        ly - 10.0,
        lx + 16.0,
        ly,
        lx + 250.0,
        ly - 10.0,
        lx + 266.0,
        ly
    );
    o.push_str("</svg>");
    o
}

/// The RTO budget as a gauge: how much of it the recovery used.
pub fn rto_gauge_svg(j: &Journal) -> Option<String> {
    let (m, budget) = (j.rto.measured_seconds?, j.rto.objective_seconds?);
    const W: f64 = 640.0;
    let full = budget.max(m);
    let used_w = (m / full * W).max(2.0);
    let budget_x = budget / full * W;
    let met = j.rto.met == Some(true);
    let fill = if met { "#43a047" } else { "#e53935" };
    let label = format!(
        "recovery took {} of the {} budget ({:.1}%){}",
        secs(m),
        secs(budget),
        100.0 * m / budget,
        if j.rto.complete { "" } else { " — and did not finish" }
    );
    Some(format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="gauge" viewBox="0 0 {W} 40" width="{W}" height="40" font-family="system-ui, sans-serif" font-size="12" role="img" aria-label="{l}"><rect x="0" y="4" width="{W}" height="14" fill="#e3f2fd"/><rect x="0" y="4" width="{used_w:.1}" height="14" fill="{fill}"/><line x1="{budget_x:.1}" y1="0" x2="{budget_x:.1}" y2="22" stroke="#1565c0" stroke-width="2"/><text x="0" y="35" fill="#424242">{l}</text></svg>"##,
        l = esc(&label)
    ))
}

enum Row<'a> {
    Header(Phase),
    Step(&'a StepRecord),
}

fn mark(s: Status) -> &'static str {
    match s {
        Status::Passed => "✔",
        Status::Failed => "✘ failed",
        Status::TimedOut => "✘ timed out",
        Status::Aborted => "■ stopped",
        Status::Skipped => "",
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n - 1).collect::<String>()) }
}

/// A tick spacing giving at most ~10 ticks.
fn tick_step(t_max: f64) -> f64 {
    const STEPS: &[f64] = &[
        0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0,
        14400.0,
    ];
    STEPS.iter().copied().find(|s| t_max / s <= 10.0).unwrap_or(28800.0)
}

fn tick_label(t: f64, step: f64) -> String {
    if step < 1.0 {
        format!("{t:.1}s")
    } else if t < 60.0 || step < 60.0 && t < 120.0 {
        format!("{}s", t.round() as u64)
    } else if t < 3600.0 {
        let t = t.round() as u64;
        if t.is_multiple_of(60) { format!("{}m", t / 60) } else { format!("{}m{:02}s", t / 60, t % 60) }
    } else {
        let t = t.round() as u64;
        if t.is_multiple_of(3600) { format!("{}h", t / 3600) } else { format!("{}h{:02}m", t / 3600, t / 60 % 60) }
    }
}

/// The whole report as one HTML document.
pub fn html(j: &Journal) -> String {
    let (badge, badge_color) = match j.result {
        DrillResult::Completed => ("COMPLETED", "#2e7d32"),
        DrillResult::Failed => ("FAILED", "#c62828"),
        DrillResult::Aborted => ("ABORTED", "#616161"),
        DrillResult::Running => ("DID NOT FINISH", "#616161"),
    };
    let hypothesis = match j.hypothesis_held {
        Some(true) => "held: the steady state was the same before and after",
        Some(false) => "did not hold",
        None => "not tested (the drill was interrupted)",
    };
    let rto = match (j.rto.measured_seconds, j.rto.objective_seconds, j.rto.met) {
        (Some(m), Some(o), Some(true)) => format!("{} of {} — met", secs(m), secs(o)),
        (Some(m), Some(o), _) if j.rto.complete => format!("{} of {} — MISSED", secs(m), secs(o)),
        (Some(m), Some(o), _) => format!("recovery did not finish ({} spent of {})", secs(m), secs(o)),
        (Some(m), None, _) => format!("{} (no objective)", secs(m)),
        (None, Some(o), _) => format!("not measured (objective {})", secs(o)),
        (None, None, _) => "no objective, no recovery steps".to_string(),
    };
    let rpo = match (j.rpo.backup_age_seconds, j.rpo.objective_seconds, j.rpo.met) {
        (Some(a), Some(o), Some(met)) => {
            format!("backup {} old, objective {} — {}", secs(a), secs(o), if met { "met" } else { "MISSED" })
        }
        (Some(a), None, _) => format!("backup {} old (no objective)", secs(a)),
        (None, Some(o), _) => format!("not measured by this drill (objective {}; no verify step passed)", secs(o)),
        _ => "—".to_string(),
    };
    let mut o = String::new();
    let _ = write!(
        o,
        r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Drill report: {title}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:24px auto;max-width:1040px;color:#212121;padding:0 16px}}
h1{{font-size:22px;margin:0 0 4px}} h2{{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #e0e0e0;padding-bottom:4px}}
.badge{{display:inline-block;padding:3px 10px;border-radius:4px;color:#fff;font-weight:700;background:{badge_color}}}
table{{border-collapse:collapse;width:100%;font-size:13px}} td,th{{text-align:left;padding:4px 8px;border-bottom:1px solid #eee;vertical-align:top}}
th{{background:#fafafa}} .summary td:first-child{{width:180px;color:#616161}}
.st-passed{{color:#2e7d32}} .st-failed,.st-timed_out{{color:#c62828;font-weight:600}} .st-aborted,.st-skipped{{color:#757575}}
pre{{background:#f5f5f5;padding:8px;overflow-x:auto;font-size:12px;max-height:320px}} code{{font-size:12px}}
.items li{{margin:4px 0}} .muted{{color:#757575}} svg.timeline{{max-width:100%;height:auto;border:1px solid #eee}}
</style></head><body>
<h1>{title} <span class="badge">{badge}</span></h1>
<p class="muted">{desc}</p>
<table class="summary">
<tr><td>Hypothesis</td><td>{hypothesis}</td></tr>
<tr><td>RTO</td><td>{rto}{gauge}</td></tr>
<tr><td>RPO</td><td>{rpo}</td></tr>
<tr><td>Started</td><td>{started} (took {took})</td></tr>
<tr><td>Runbook</td><td><code>{file}</code> (drill {id})</td></tr>
{reasons}
</table>
<h2>Timeline</h2>
{svg}
<h2>Action items</h2>
{items}
<h2>Steps</h2>
<table><tr><th>Phase</th><th>Step</th><th>Kind</th><th>Status</th><th>Start</th><th>Took</th><th>Detail</th></tr>
"##,
        title = esc(&j.runbook.title),
        desc = esc(j.runbook.description.as_deref().unwrap_or("")),
        started = esc(&j.started_at),
        took = secs(j.duration_seconds),
        file = esc(&j.runbook.file),
        id = esc(&j.drill_id),
        reasons = if j.reasons.is_empty() {
            String::new()
        } else {
            format!(
                "<tr><td>Why not completed</td><td>{}</td></tr>",
                j.reasons.iter().map(|r| esc(r)).collect::<Vec<_>>().join("<br>")
            )
        },
        svg = timeline_svg(j),
        gauge = rto_gauge_svg(j).map(|g| format!("<br>{g}")).unwrap_or_default(),
        items = if j.action_items.is_empty() {
            "<p>None: every step passed within its time and the objectives were met.</p>".to_string()
        } else {
            format!(
                "<ul class=\"items\">{}</ul>",
                j.action_items.iter().map(|i| format!("<li>{}</li>", esc(i))).collect::<String>()
            )
        },
    );
    for s in j.timeline() {
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}{}<br><code>{}</code></td><td>{}</td><td class=\"st-{}\">{}</td><td>{}</td><td>{}</td><td>{}{}</td></tr>",
            esc(s.phase.title()),
            esc(&s.name),
            if s.recovery { " <span class=\"muted\">(recovery)</span>" } else { "" },
            esc(&s.action),
            s.kind,
            s.status.as_str(),
            s.status.as_str(),
            s.offset_seconds.map(|t| format!("+{}", secs(t))).unwrap_or_default(),
            s.duration_seconds.map(secs).unwrap_or_default(),
            esc(&s.detail),
            match &s.confirmation {
                Some(c) => format!(
                    "<br><span class=\"muted\">confirmed by {} ({}) at {}</span>",
                    esc(&c.by),
                    esc(&c.how),
                    esc(&c.at)
                ),
                None => String::new(),
            }
        );
    }
    o.push_str("</table>\n<h2>Output</h2>\n");
    for s in j.timeline().filter(|s| !s.output_tail.is_empty()) {
        let _ = writeln!(
            o,
            "<details><summary>{} — {}</summary><pre>{}</pre></details>",
            esc(s.phase.title()),
            esc(&s.name),
            esc(&s.output_tail)
        );
    }
    o.push_str("<h2>Variables</h2>\n<table>");
    for (k, v) in &j.variables {
        let _ = write!(o, "<tr><td><code>{}</code></td><td><code>{}</code></td></tr>", esc(k), esc(v));
    }
    o.push_str("</table>\n</body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_markup_character_is_escaped_single_quotes_too() {
        assert_eq!(
            esc("<a href='x' title=\"y\">&</a>"),
            "&lt;a href=&#39;x&#39; title=&quot;y&quot;&gt;&amp;&lt;/a&gt;"
        );
    }

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(secs(0.42), "0.4s");
        assert_eq!(secs(42.0), "42s");
        assert_eq!(secs(185.0), "3m05s");
        assert_eq!(secs(900.0), "15m");
        assert_eq!(secs(3720.0), "1h02m");
        assert_eq!(tick_step(40.0), 5.0);
        assert_eq!(tick_step(900.0), 120.0);
        assert_eq!(tick_label(120.0, 60.0), "2m");
        assert_eq!(tick_label(90.0, 30.0), "90s");
    }

    #[test]
    fn markup_in_names_is_escaped() {
        assert_eq!(esc("<b>&\""), "&lt;b&gt;&amp;&quot;");
    }
}
