//! The report's controls section (issue 38): for each control of the frameworks asked
//! for (`[evidence] controls`), what it asks — the mapping's words, `deploy/controls.toml`
//! — and each measure that answers it, computed over the window: met, missed or not
//! measured, with its figure, the runs that prove it and every miss named. Part of the
//! evidence, so signed with it: an edited verdict or wording fails `report verify`.

use super::{DrillEvidence, TargetEvidence};
use crate::canary_report::{CanaryResult, DefectVerdict};
use crate::run_report::RunResult;
use drcheck_config::controls::Mapping;
use drcheck_runbooks::journal::DrillResult;
use drcheck_validators::Status;
use serde::{Deserialize, Serialize};

/// At most this many proving runs are listed per measure (the rest counted).
const PROOF: usize = 20;

/// One framework's controls, as the window answers them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ControlsEvidence {
    pub framework: String,
    pub title: String,
    pub controls: Vec<ControlEvidence>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ControlEvidence {
    pub id: String,
    pub asks: String,
    /// `met` (every measure met), `missed` (one missed) or `not measured` (none missed,
    /// one could not be measured).
    pub verdict: Verdict,
    pub measures: Vec<Measure>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Measure {
    pub name: String,
    pub verdict: Verdict,
    /// The figure, in one line.
    pub figure: String,
    /// The runs (and drills) that prove it, by id.
    pub proof: Vec<String>,
    /// Each miss, named.
    pub misses: Vec<String>,
}

/// What one target's runs in the window say, for the measures.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TargetFacts {
    pub name: String,
    /// The longest a target may go without a pass: twice its schedule's interval.
    pub allowed_gap_seconds: f64,
    pub target: TargetEvidence,
}

/// `target`'s facts: its summary and coverage, and its runs with only what the
/// measures read (a report over a fleet keeps every run's few fields, not their details),
/// and its schedule's allowance.
pub(crate) fn facts(target: &TargetEvidence, schedule_interval_seconds: f64) -> TargetFacts {
    // The checks the measures read: those that read everything, and the store's.
    let mut read = drcheck_validators::names_where(|c| c.reads_everything);
    read.extend(["immutability", "pinned"]);
    let runs = target
        .runs
        .iter()
        .map(|r| super::RunEvidence {
            validators: r
                .validators
                .iter()
                .filter(|v| read.contains(&v.name.as_str()))
                .map(|v| super::ValidatorEvidence {
                    // Only the store's findings' words are quoted in a miss.
                    detail: if v.name == "immutability" || v.name == "pinned" {
                        v.detail.clone()
                    } else {
                        String::new()
                    },
                    covered: Default::default(),
                    inconclusive: Vec::new(),
                    ..v.clone()
                })
                .collect(),
            reasons: Vec::new(),
            content_proven_percent: None,
            coverage: None,
            ..r.clone()
        })
        .collect();
    TargetFacts {
        name: target.name.clone(),
        allowed_gap_seconds: 2.0 * schedule_interval_seconds,
        target: TargetEvidence { runs, ..target.clone() },
    }
}

/// A control's (or a measure's) verdict over the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Verdict {
    #[serde(rename = "met")]
    Met,
    #[serde(rename = "missed")]
    Missed,
    #[serde(rename = "not measured")]
    NotMeasured,
}

impl Verdict {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::Missed => "missed",
            Verdict::NotMeasured => "not measured",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn measure(name: &str, verdict: Verdict, figure: String, mut proof: Vec<String>, misses: Vec<String>) -> Measure {
    if proof.len() > PROOF {
        let more = proof.len() - PROOF;
        proof.truncate(PROOF);
        proof.push(format!("and {more} more"));
    }
    Measure { name: name.into(), verdict, figure, proof, misses }
}

fn verdict(ok: bool) -> Verdict {
    if ok { Verdict::Met } else { Verdict::Missed }
}

/// The measure `name` over the window's targets and drills.
pub(crate) fn compute(
    name: &str,
    targets: &[TargetFacts],
    drills: &[DrillEvidence],
    canaries: &[crate::canary_report::CanaryReport],
) -> Measure {
    let runs = || targets.iter().flat_map(|t| t.target.runs.iter().map(move |r| (t, r)));
    match name {
        "verified_on_schedule" => {
            let mut misses = Vec::new();
            for t in targets {
                let gap = t.target.summary.longest_without_pass_seconds;
                if t.target.summary.passed == 0 {
                    misses.push(format!("{}: no passing verification in the window", t.name));
                } else if gap > t.allowed_gap_seconds {
                    misses.push(format!(
                        "{}: {} without a pass (its schedule allows {})",
                        t.name,
                        crate::out::human(gap),
                        crate::out::human(t.allowed_gap_seconds)
                    ));
                }
            }
            let proof: Vec<String> =
                runs().filter(|(_, r)| r.result == RunResult::Passed).map(|(_, r)| r.run_id.clone()).collect();
            let figure = format!(
                "{} of {} targets verified within their schedule ({} passing runs)",
                targets.len() - misses.len().min(targets.len()),
                targets.len(),
                proof.len()
            );
            measure(name, verdict(misses.is_empty() && !targets.is_empty()), figure, proof, misses)
        }
        "backups_proven" => {
            let mut misses = Vec::new();
            let (mut proven, mut restorable) = (0, 0);
            for t in targets {
                match &t.target.coverage {
                    Some(c) => {
                        proven += c.proven;
                        restorable += c.restorable;
                        if c.proven < c.restorable {
                            misses.push(format!(
                                "{}: {} of {} restorable backups proven within {}",
                                t.name,
                                c.proven,
                                c.restorable,
                                crate::out::human(c.prove_within_seconds)
                            ));
                        }
                    }
                    None => misses.push(format!("{}: no run in the window recorded its coverage", t.name)),
                }
            }
            let proof = runs().filter(|(_, r)| r.result == RunResult::Passed).map(|(_, r)| r.run_id.clone()).collect();
            let figure = format!("{proven} of {restorable} restorable backups proven within prove_within");
            measure(name, verdict(misses.is_empty() && !targets.is_empty()), figure, proof, misses)
        }
        "restores_isolated" => {
            let restores: Vec<_> =
                runs().filter(|(_, r)| r.containment.is_some() || r.rto_measured_seconds.is_some()).collect();
            let mut layers: Vec<String> = restores.iter().filter_map(|(_, r)| r.containment.clone()).collect();
            layers.sort();
            layers.dedup();
            let misses: Vec<String> = restores
                .iter()
                .filter(|(_, r)| r.containment.as_deref().is_none_or(|c| c == "none" || c.is_empty()))
                .map(|(t, r)| format!("{}: run {} restored without containment recorded", t.name, r.run_id))
                .collect();
            if restores.is_empty() {
                return measure(name, Verdict::NotMeasured, "no restore in the window".into(), vec![], vec![]);
            }
            let figure = format!(
                "{} of {} restores contained ({})",
                restores.len() - misses.len(),
                restores.len(),
                layers.join(", ")
            );
            let proof = restores.iter().map(|(_, r)| r.run_id.clone()).collect();
            measure(name, verdict(misses.is_empty()), figure, proof, misses)
        }
        "integrity_checked" => {
            let checks = drcheck_validators::names_where(|c| c.reads_everything);
            let mut misses = Vec::new();
            let mut proof = Vec::new();
            let mut names: Vec<&str> = Vec::new();
            for t in targets {
                let passing: Vec<_> = t
                    .target
                    .runs
                    .iter()
                    .filter(|r| r.result == RunResult::Passed)
                    .filter(|r| {
                        r.validators.iter().any(|v| checks.contains(&v.name.as_str()) && v.status == Status::Passed)
                    })
                    .collect();
                if passing.is_empty() {
                    misses.push(format!("{}: no passing run whose integrity checks passed", t.name));
                }
                for r in passing {
                    proof.push(r.run_id.clone());
                    for v in
                        r.validators.iter().filter(|v| checks.contains(&v.name.as_str()) && v.status == Status::Passed)
                    {
                        if !names.contains(&v.name.as_str()) {
                            names.push(checks.iter().find(|c| **c == v.name).copied().unwrap_or(""));
                        }
                    }
                }
            }
            names.sort();
            let figure = format!(
                "{} of {} targets integrity-checked ({} passed)",
                targets.len() - misses.len().min(targets.len()),
                targets.len(),
                if names.is_empty() { "none".to_string() } else { names.join(", ") }
            );
            measure(name, verdict(misses.is_empty() && !targets.is_empty()), figure, proof, misses)
        }
        "restore_within_rto" => {
            let measured: Vec<_> = runs().filter(|(_, r)| r.rto_met.is_some()).collect();
            if measured.is_empty() {
                return measure(
                    name,
                    Verdict::NotMeasured,
                    "no restore time measured in the window".into(),
                    vec![],
                    vec![],
                );
            }
            let misses: Vec<String> = measured
                .iter()
                .filter(|(_, r)| r.rto_met == Some(false))
                .map(|(t, r)| {
                    format!(
                        "{}: run {} restored in {}, RTO {}",
                        t.name,
                        r.run_id,
                        r.rto_measured_seconds.map(crate::out::human).unwrap_or_default(),
                        crate::out::human(r.rto_target_seconds)
                    )
                })
                .collect();
            let worst = measured.iter().filter_map(|(_, r)| r.rto_measured_seconds).fold(0.0, f64::max);
            let figure = format!(
                "{} of {} measured restores within their RTO (the longest {})",
                measured.len() - misses.len(),
                measured.len(),
                crate::out::human(worst)
            );
            let proof =
                measured.iter().filter(|(_, r)| r.rto_met == Some(true)).map(|(_, r)| r.run_id.clone()).collect();
            measure(name, verdict(misses.is_empty()), figure, proof, misses)
        }
        "drills_run" => {
            let completed: Vec<String> =
                drills.iter().filter(|d| d.result == DrillResult::Completed).map(|d| d.drill_id.clone()).collect();
            let misses: Vec<String> = drills
                .iter()
                .filter(|d| d.result != DrillResult::Completed)
                .map(|d| format!("drill {} ({}): {}", d.drill_id, d.runbook, d.result))
                .collect();
            let figure = format!("{} drills in the window, {} completed", drills.len(), completed.len());
            let ok = !completed.is_empty();
            let misses = if ok { misses } else { vec!["no DR drill completed in the window".into()] };
            measure(name, verdict(ok), figure, completed, misses)
        }
        "canaries_caught" => {
            let caught: Vec<String> = canaries
                .iter()
                .filter(|c| c.result == CanaryResult::Caught && c.alerts.iter().all(|s| s.accepted))
                .map(|c| c.canary_id.clone())
                .collect();
            let mut misses = Vec::new();
            for c in canaries {
                for d in
                    c.defects.iter().filter(|d| matches!(d.outcome.as_str(), "undetected" | "error" | "inconclusive"))
                {
                    misses.push(format!(
                        "{}: canary {}: {} {}: {}",
                        c.target, c.canary_id, d.defect, d.outcome, d.detail
                    ));
                }
                if let Some(e) = &c.error {
                    misses.push(format!("{}: canary {} ({}): {e}", c.target, c.canary_id, c.result));
                }
                for s in c.alerts.iter().filter(|s| !s.accepted) {
                    misses.push(format!(
                        "{}: canary {}: alert sink {} did not accept the canary alert: {}",
                        c.target, c.canary_id, s.sink, s.detail
                    ));
                }
            }
            if canaries.is_empty() {
                misses.push("no canary ran in the window (`drcheck canary`, [daemon] canary)".into());
            }
            let skipped: Vec<String> =
                canaries.iter().filter_map(|c| Some(format!("{}: {}", c.target, c.skipped.as_ref()?))).collect();
            let defects: usize =
                canaries.iter().map(|c| c.defects.iter().filter(|d| d.outcome != DefectVerdict::Skipped).count()).sum();
            let detected: usize = canaries
                .iter()
                .map(|c| c.defects.iter().filter(|d| d.outcome == DefectVerdict::Detected).count())
                .sum();
            let mut figure = format!(
                "{} canaries in the window: {detected} of {defects} defects made were caught; {} canaries caught every defect and reached every alert sink",
                canaries.len(),
                caught.len()
            );
            if !skipped.is_empty() {
                figure.push_str(&format!("; no defect could be made for {}", skipped.join("; ")));
            }
            measure(name, verdict(misses.is_empty() && !caught.is_empty()), figure, caught, misses)
        }
        "backups_immutable" => {
            let mut misses = Vec::new();
            let mut proof = Vec::new();
            for t in targets {
                let newest = |n: &str| t.target.runs.iter().rev().find(|r| r.validators.iter().any(|v| v.name == n));
                match newest("immutability")
                    .and_then(|r| r.validators.iter().find(|v| v.name == "immutability").map(|v| (r, v)))
                {
                    Some((r, v)) if v.status == Status::Passed => proof.push(r.run_id.clone()),
                    Some((r, v)) if v.status == Status::Skipped => misses
                        .push(format!("{}: no lock required of its backups (run {}: {})", t.name, r.run_id, v.detail)),
                    Some((r, v)) => misses.push(format!("{}: run {}: {}", t.name, r.run_id, v.detail)),
                    None => misses.push(format!("{}: no run in the window checked its backups' protection", t.name)),
                }
                if let Some((r, v)) =
                    newest("pinned").and_then(|r| r.validators.iter().find(|v| v.name == "pinned").map(|v| (r, v)))
                    && v.status == Status::Failed
                {
                    misses.push(format!("{}: run {}: {}", t.name, r.run_id, v.detail));
                }
            }
            let figure = format!(
                "{} of {} targets' newest backups locked as required, proven backups unchanged",
                targets.len()
                    - targets.iter().filter(|t| misses.iter().any(|m| m.starts_with(&format!("{}:", t.name)))).count(),
                targets.len()
            );
            measure(name, verdict(misses.is_empty() && !targets.is_empty()), figure, proof, misses)
        }
        other => {
            measure(other, Verdict::NotMeasured, format!("{other} is not a measure drcheck knows"), vec![], vec![])
        }
    }
}

/// The controls section: each framework asked for, in the order asked.
pub(crate) fn section(
    mapping: &Mapping,
    frameworks: &[String],
    targets: &[TargetFacts],
    drills: &[DrillEvidence],
    canaries: &[crate::canary_report::CanaryReport],
) -> Vec<ControlsEvidence> {
    frameworks
        .iter()
        .filter_map(|name| {
            let f = mapping.get(name)?;
            let controls = f
                .controls
                .iter()
                .map(|c| {
                    let measures: Vec<Measure> =
                        c.evidence.iter().map(|m| compute(m, targets, drills, canaries)).collect();
                    let verdict = if measures.iter().any(|m| m.verdict == Verdict::Missed) {
                        Verdict::Missed
                    } else if measures.iter().all(|m| m.verdict == Verdict::Met) {
                        Verdict::Met
                    } else {
                        Verdict::NotMeasured
                    };
                    ControlEvidence { id: c.id.clone(), asks: c.asks.clone(), verdict, measures }
                })
                .collect();
            Some(ControlsEvidence { framework: name.clone(), title: f.title.clone(), controls })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{RunEvidence, Summary, ValidatorEvidence};
    use super::*;

    fn run(id: &str, result: &str, rto_met: Option<bool>, validators: &[(&str, &str)]) -> RunEvidence {
        RunEvidence {
            run_id: id.into(),
            started_at: "2026-11-02T00:00:00Z".into(),
            finished_at: "2026-11-02T00:01:00Z".into(),
            result: result.parse().unwrap(),
            backup_key: None,
            backup_created_at: None,
            rto_target_seconds: 60.0,
            rto_measured_seconds: rto_met.map(|m| if m { 30.0 } else { 90.0 }),
            rto_met,
            rpo_target_seconds: 3600.0,
            rpo_age_seconds: None,
            rpo_met: None,
            validators: validators
                .iter()
                .map(|(n, s)| ValidatorEvidence {
                    name: n.to_string(),
                    status: s.parse().unwrap(),
                    detail: format!("{n} {s}"),
                    covered: Default::default(),
                    inconclusive: vec![],
                })
                .collect(),
            reasons: vec![],
            content_proven_percent: None,
            coverage: None,
            recovery_target: None,
            recovered_to: None,
            containment: rto_met.map(|_| "landlock-abi7+uid+seccomp+ns".to_string()),
        }
    }

    fn target(name: &str, runs: Vec<RunEvidence>, gap: f64) -> TargetFacts {
        let passed = runs.iter().filter(|r| r.result == RunResult::Passed).count() as u32;
        let t = TargetEvidence {
            name: name.into(),
            rto_target_seconds: Some(60.0),
            rpo_target_seconds: Some(3600.0),
            summary: Summary {
                runs: runs.len() as u32,
                passed,
                failed: runs.len() as u32 - passed,
                error: 0,
                aborted: 0,
                inconclusive: 0,
                content_proven_percent: None,
                pass_rate: None,
                worst_rto_seconds: None,
                longest_without_pass_seconds: gap,
            },
            coverage: None,
            immutability: None,
            pinned: None,
            acknowledgements: Vec::new(),
            runs,
        };
        facts(&t, 86_400.0)
    }

    #[test]
    fn canaries_caught_reads_each_canary_in_the_window() {
        use crate::canary_report::{CanaryReport, DefectOutcome, SinkOutcome};
        let canary = |id: &str, outcome: &str, accepted: bool| CanaryReport {
            canary_id: id.into(),
            target: "orders".into(),
            backup: Some("dumps/o.dump".into()),
            started_at: "2026-12-01T04:00:00Z".into(),
            finished_at: "2026-12-01T04:01:00Z".into(),
            result: if outcome == "detected" { CanaryResult::Caught } else { CanaryResult::Missed },
            defects: vec![DefectOutcome {
                defect: "changed_row".into(),
                outcome: outcome.parse().unwrap(),
                made: "public.items: column note of the row at ctid (0,1) changed".into(),
                named_by: vec![],
                detail: "none of the checks that own this defect (checksums, restore) failed".into(),
                run: None,
            }],
            alerts: vec![SinkOutcome { sink: "pager".into(), accepted, detail: String::new() }],
            error: None,
            skipped: None,
            notes: vec![],
        };
        let m = compute("canaries_caught", &[], &[], &[canary("c1", "detected", true)]);
        assert_eq!((m.verdict, m.proof.clone()), (Verdict::Met, vec!["c1".to_string()]), "{m:?}");
        assert!(m.figure.starts_with("1 canaries in the window: 1 of 1 defects made were caught"), "{m:?}");
        let m =
            compute("canaries_caught", &[], &[], &[canary("c1", "detected", true), canary("c2", "undetected", true)]);
        assert_eq!(m.verdict, Verdict::Missed);
        assert!(m.misses[0].starts_with("orders: canary c2: changed_row undetected"), "{m:?}");
        let m = compute("canaries_caught", &[], &[], &[canary("c3", "detected", false)]);
        assert_eq!(m.verdict, Verdict::Missed, "caught, but the page did not arrive");
        assert!(m.misses[0].contains("alert sink pager did not accept"), "{m:?}");
    }

    #[test]
    fn met_and_missed_obligations_are_named_with_their_runs() {
        let good = target(
            "orders",
            vec![run("r1", "passed", Some(true), &[("checksums", "passed"), ("immutability", "passed")])],
            3600.0,
        );
        let late = target("ledger", vec![run("r2", "failed", Some(false), &[("checksums", "failed")])], 5.0 * 86_400.0);
        let both = [good.clone(), late];
        let m = compute("verified_on_schedule", &both, &[], &[]);
        assert_eq!(m.verdict, Verdict::Missed);
        assert!(m.misses[0].starts_with("ledger: no passing verification"), "{m:?}");
        assert_eq!(m.proof, vec!["r1".to_string()]);
        let m = compute("restore_within_rto", &both, &[], &[]);
        assert_eq!(m.verdict, Verdict::Missed);
        assert!(m.misses[0].contains("run r2 restored in 90.0 s, RTO 60.0 s"), "{m:?}");
        let m = compute("restores_isolated", &both, &[], &[]);
        assert_eq!(m.verdict, Verdict::Met, "{m:?}");
        assert!(m.figure.contains("landlock-abi7+uid+seccomp+ns"));
        // A target alone that holds: met; no drill: missed; canaries: not measured.
        let only = [good];
        assert_eq!(compute("integrity_checked", &only, &[], &[]).verdict, Verdict::Met);
        assert_eq!(compute("backups_immutable", &only, &[], &[]).verdict, Verdict::Met);
        assert_eq!(compute("drills_run", &only, &[], &[]).verdict, Verdict::Missed);
        assert_eq!(compute("canaries_caught", &only, &[], &[]).verdict, Verdict::Missed, "no canary ran");
        assert_eq!(
            compute("backups_proven", &only, &[], &[]).verdict,
            Verdict::Missed,
            "no coverage recorded is a miss"
        );
        // A control's verdict: any miss → missed.
        let mapping = drcheck_config::controls::parse(drcheck_config::controls::DEFAULT, "built-in").unwrap();
        let s = section(&mapping, &["soc2".to_string()], &only, &[], &[]);
        assert_eq!(s[0].controls[0].id, "A1.3");
        assert_eq!(s[0].controls[0].verdict, Verdict::Missed, "no drill ran");
        assert!(section(&mapping, &["nope".to_string()], &only, &[], &[]).is_empty());
    }
}
