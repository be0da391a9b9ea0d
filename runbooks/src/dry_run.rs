//! `--dry-run`: the resolved plan, in the order it would run, executing nothing.

use crate::plan::{Runbook, Step};
use crate::scope::Scope;
use std::fmt::Write;

pub fn plan_text(rb: &Runbook) -> String {
    let scope = Scope::new(rb.variables.clone());
    let mut o = String::new();
    let _ = writeln!(o, "{} ({})", rb.title, rb.path.display());
    if let Some(d) = &rb.description {
        let _ = writeln!(o, "{}", d.trim());
    }
    let objective =
        |d: Option<std::time::Duration>| d.map(drcheck_config::format_duration).unwrap_or_else(|| "none".into());
    let _ = writeln!(o, "objectives: rto {}, rpo {}", objective(rb.rto), objective(rb.rpo));
    if !rb.variables.is_empty() {
        let _ = writeln!(o, "variables:");
        for (k, v) in scope.masked() {
            let _ = writeln!(o, "  {k} = {v}");
        }
    }
    section(&mut o, "steady state (checked before and after the method)", &rb.steady_state, &scope);
    section(&mut o, "method", &rb.steps, &scope);
    section(
        &mut o,
        "rollbacks (after the method, unless a step with on_failure: abort stops it)",
        &rb.rollbacks,
        &scope,
    );
    let _ = writeln!(o, "\ndry run: nothing was executed");
    o
}

fn section(o: &mut String, title: &str, steps: &[Step], scope: &Scope) {
    let _ = writeln!(o, "\n{title}:");
    if steps.is_empty() {
        let _ = writeln!(o, "  (none)");
    }
    for (i, s) in steps.iter().enumerate() {
        let _ = writeln!(
            o,
            "  {}. {} [{}{}] timeout {}, on_failure {} (line {})",
            i + 1,
            s.name,
            s.action.kind(),
            if s.recovery { ", recovery" } else { "" },
            crate::steps::fmt_duration(s.timeout),
            s.on_failure.as_str(),
            s.line
        );
        let _ = writeln!(o, "     {}", crate::steps::describe(&s.action, scope));
        if let Some(c) = s.action.capture() {
            let _ = writeln!(o, "     captures ${{{c}}}");
        }
    }
}
