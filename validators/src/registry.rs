//! The one list of validators, in the order they run (self-checks first), and the run
//! of a selection of them over one restored database: each under its timeout, all
//! before the phase's deadline, every finding through the coverage rule.

use crate::context::{Context, PhaseDeadline, Primary, Validator};
use crate::finding::{Finding, Status, enforce_coverage};
use crate::{
    amcheck, checksums, custom, freshness, full_read, indexes, large_objects, point_in_time, row_counts, schema,
    sequences,
};
use std::time::Duration;

/// Every validator, in the order they run (self-checks first).
fn all() -> Vec<Box<dyn Validator>> {
    vec![
        Box::new(amcheck::Amcheck),
        Box::new(full_read::FullRead),
        Box::new(sequences::Sequences),
        Box::new(indexes::Indexes),
        Box::new(schema::Schema),
        Box::new(row_counts::RowCounts),
        Box::new(checksums::Checksums),
        Box::new(large_objects::LargeObjects),
        Box::new(freshness::Freshness),
        Box::new(custom::Custom),
        Box::new(point_in_time::PointInTime),
    ]
}

/// What one validator needs and serves, as the binary reads it (the follower, the
/// canary, the evidence's measures, the content's weighing) instead of lists of names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub name: &'static str,
    pub self_check: bool,
    pub needs_restore: bool,
    pub catches: &'static [&'static str],
    pub reads_everything: bool,
    pub weighs_undecided: bool,
}

/// Every validator's capabilities, in running order.
pub fn capabilities() -> Vec<Capabilities> {
    all()
        .iter()
        .map(|v| Capabilities {
            name: v.name(),
            self_check: v.self_check(),
            needs_restore: v.needs_restore(),
            catches: v.catches(),
            reads_everything: v.reads_everything(),
            weighs_undecided: v.weighs_undecided(),
        })
        .collect()
}

/// The names of the validators `which` holds for, in running order.
pub fn names_where(which: impl Fn(&Capabilities) -> bool) -> Vec<&'static str> {
    capabilities().into_iter().filter(|c| which(c)).map(|c| c.name).collect()
}

/// The validators `enabled` names, in their running order.
pub fn selected(enabled: &[String]) -> Vec<Box<dyn Validator>> {
    all().into_iter().filter(|v| enabled.iter().any(|e| e == v.name())).collect()
}

/// Runs every validator, each under `timeout` and all before `deadline`; one failing or
/// erroring never stops the others.
pub async fn run_all(
    validators: &[Box<dyn Validator>],
    cx: &Context,
    timeout: Duration,
    deadline: PhaseDeadline,
) -> Vec<Finding> {
    // Self-checks (sandbox only) each run on their own, beside the comparisons (sandbox
    // and primary), which run one at a time: the work overlaps where cores allow, and
    // the primary sees no more than before. Findings keep the validators' order.
    let (own, compare): (Vec<_>, Vec<_>) =
        validators.iter().map(|v| v.as_ref()).enumerate().partition(|(_, v)| v.self_check());
    let own = futures::future::join_all(own.into_iter().map(|v| run_group(vec![v], cx, timeout, deadline)));
    let (own, mut all) = tokio::join!(own, run_group(compare, cx, timeout, deadline));
    all.extend(own.into_iter().flatten());
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().flat_map(|(_, f)| f).collect()
}

async fn run_group(
    validators: Vec<(usize, &dyn Validator)>,
    cx: &Context,
    timeout: Duration,
    deadline: PhaseDeadline,
) -> Vec<(usize, Vec<Finding>)> {
    let mut out = Vec::with_capacity(validators.len());
    // What the primary refused so far: a check during which it refused more erred for
    // want of a grant (the comparisons run one at a time, so the count is theirs).
    let refused = || match &cx.primary {
        Primary::Available(p) => p.stats().refused,
        Primary::Unavailable(_) => 0,
    };
    for (i, v) in validators {
        let refused_before = refused();
        let started = std::time::Instant::now();
        let left = deadline.at.saturating_duration_since(tokio::time::Instant::now());
        let findings = if left.is_zero() {
            vec![Finding::new(v.name(), Status::Error, format!("not run: {}", deadline.stopped()))]
        } else {
            match tokio::time::timeout(timeout.min(left), v.validate(cx)).await {
                Ok(f) => f,
                Err(_) if left < timeout => vec![Finding::new(v.name(), Status::Error, deadline.stopped())],
                Err(_) => vec![Finding::new(v.name(), Status::Error, format!("timed out after {timeout:?}"))],
            }
        };
        // Logged as recorded: after coverage is enforced (a pass over nothing is skipped).
        let was_refused = refused() > refused_before;
        let findings: Vec<Finding> = findings
            .into_iter()
            .map(|mut f| {
                f.refused_by_primary = was_refused && f.status == Status::Error;
                enforce_coverage(f.advise_grant())
                    .with("seconds", (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0)
            })
            .collect();
        for f in &findings {
            tracing::info!(validator = %f.name, status = f.status.as_str(), seconds = started.elapsed().as_secs_f64(), "validator finished");
        }
        out.push((i, findings));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one list: the config's vocabulary of validators is the registry's, plus the
    /// checks of the store and the tool's repository the binary makes itself.
    #[test]
    fn the_configs_validators_are_the_registrys() {
        const BINARY_OWN: [&str; 1] = ["repository"];
        let mut registry: Vec<&str> = capabilities().iter().map(|c| c.name).collect();
        registry.extend(BINARY_OWN);
        let mut config: Vec<&str> = drcheck_config::ALL_VALIDATORS.to_vec();
        registry.sort_unstable();
        config.sort_unstable();
        assert_eq!(registry, config, "drcheck_config::ALL_VALIDATORS and the registry differ");
        assert!(names_where(|c| c.needs_restore).contains(&"amcheck"));
        assert_eq!(names_where(|c| c.catches.contains(&"changed_row")), ["checksums"]);
    }
}
