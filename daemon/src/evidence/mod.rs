//! Restore-test evidence for audits: what `drcheck report` gathers from the history
//! store and the drill journals over a time window, summarised per target, rendered as
//! HTML, Markdown, JUnit XML or JSON (`render.rs`), and signed (`sign.rs`).
//!
//! The model here is the report's canonical content: every format is drawn from it
//! and embeds it, the signature covers it, and `report verify` re-draws the document
//! from it to catch an edit of the visible text.

pub(crate) mod check;
pub(crate) mod controls;
pub(crate) mod render;
pub(crate) mod sign;
pub(crate) mod signoff;
pub(crate) mod stream;

/// JSON with sorted keys and no spaces: the bytes that are hashed and signed.
pub(crate) fn canonical_json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    sign::canonical(v)
}

use crate::run_report::{RunReport, RunResult};
use drcheck_runbooks::journal::DrillResult;
use drcheck_validators::Status;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Bumped when the model changes in a way an older verifier would misread.
pub(crate) const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Evidence {
    pub format_version: u32,
    pub generated_at: String,
    /// The window, RFC 3339 UTC: runs that started in `[from, to)`.
    pub from: String,
    pub to: String,
    pub targets: Vec<TargetEvidence>,
    pub drills: Vec<DrillEvidence>,
    /// The frameworks' controls the window's evidence answers (`[evidence] controls`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub controls: Vec<controls::ControlsEvidence>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TargetEvidence {
    pub name: String,
    /// The objectives of the newest run (what the target was held to).
    pub rto_target_seconds: Option<f64>,
    pub rpo_target_seconds: Option<f64>,
    pub summary: Summary,
    /// Proof of the recovery window: the newest run's count of restorable backups proven
    /// within `prove_within`, each backup's last pass, and the points in time the
    /// window's runs replayed to. Absent when no run recorded coverage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<TargetCoverage>,
    /// The store's protection of the newest verified backup, as the newest run that
    /// checked it said (the `immutability` finding). Absent when no run in the window did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub immutability: Option<ValidatorEvidence>,
    /// Whether the proven backups are still as proven (the newest `pinned` finding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<ValidatorEvidence>,
    /// What operators decided in the window (issue 48): proven backups forgotten on
    /// purpose, WAL segments acknowledged lost — who, when, why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acknowledgements: Vec<crate::history::Ack>,
    /// Oldest first.
    pub runs: Vec<RunEvidence>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TargetCoverage {
    pub restorable: u64,
    pub proven: u64,
    pub prove_within_seconds: f64,
    pub backups: Vec<crate::run_report::BackupProof>,
    pub points_in_time: Vec<PointInTime>,
}

/// A point in time a run's WAL replay was asked to reach, and what it reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PointInTime {
    /// The time or LSN, or `latest` / `immediate`.
    pub target: String,
    pub recovered_to: String,
    pub run_id: String,
    pub result: RunResult,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Summary {
    pub runs: u32,
    pub passed: u32,
    pub failed: u32,
    pub error: u32,
    pub aborted: u32,
    /// Runs whose content was too undecided to prove the backup (issue 46).
    #[serde(default)]
    pub inconclusive: u32,
    /// How much of the content the newest comparing run decided, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_proven_percent: Option<f64>,
    /// passed / runs; null without runs.
    pub pass_rate: Option<f64>,
    /// The longest measured restore; null when no restore finished.
    pub worst_rto_seconds: Option<f64>,
    /// The longest stretch of the window with no passing run: from the target's first
    /// run in the window (or a pass) to the next pass (or the window's end) — a target
    /// added on the window's last day is not "90 days without a pass". The whole window
    /// when it has no run at all.
    pub longest_without_pass_seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RunEvidence {
    pub run_id: String,
    pub started_at: String,
    pub finished_at: String,
    pub result: RunResult,
    pub backup_key: Option<String>,
    pub backup_created_at: Option<String>,
    pub rto_target_seconds: f64,
    pub rto_measured_seconds: Option<f64>,
    pub rto_met: Option<bool>,
    pub rpo_target_seconds: f64,
    /// The recoverable point's age where WAL was replayed, else the backup's age.
    pub rpo_age_seconds: Option<f64>,
    pub rpo_met: Option<bool>,
    pub validators: Vec<ValidatorEvidence>,
    /// Why the run did not pass: the run's error, else its failed validators and
    /// missed objectives.
    pub reasons: Vec<String>,
    /// How much of the content the run's comparisons decided, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_proven_percent: Option<f64>,
    /// The retention window's coverage as the run saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<crate::run_report::Coverage>,
    /// WAL replay: what it was asked to reach, and the last commit replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_to: Option<String>,
    /// The containment layers the restore ran under, as the run recorded them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ValidatorEvidence {
    pub name: String,
    pub status: Status,
    pub detail: String,
    /// `covered_*` measurements without the prefix: what the check covered.
    pub covered: Covered,
    /// What the check could not prove (cannot be told from a change on the primary since
    /// the copy's point), each with what would prove it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inconclusive: Vec<String>,
}

/// What a check covered, by kind: a map in the document (keys sorted), a sorted list in
/// memory — a map's node for each of 250,000 findings was most of what a report of one
/// target's 25,000 runs held (issue 50).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Covered(Vec<(Box<str>, f64)>);

impl Covered {
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &f64)> {
        self.0.iter().map(|(k, n)| (&**k, n))
    }
}

impl<K: Into<Box<str>>> FromIterator<(K, f64)> for Covered {
    fn from_iter<I: IntoIterator<Item = (K, f64)>>(items: I) -> Self {
        let mut v: Vec<(Box<str>, f64)> = items.into_iter().map(|(k, n)| (k.into(), n)).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        // A map: the last of equal keys holds.
        v.reverse();
        v.dedup_by(|a, b| a.0 == b.0);
        v.reverse();
        v.shrink_to_fit();
        Covered(v)
    }
}

impl<K: Into<Box<str>>, const N: usize> From<[(K, f64); N]> for Covered {
    fn from(items: [(K, f64); N]) -> Self {
        items.into_iter().collect()
    }
}

impl Serialize for Covered {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, n)| (&**k, n)))
    }
}

impl<'de> Deserialize<'de> for Covered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m = BTreeMap::<String, f64>::deserialize(d)?;
        Ok(m.into_iter().collect())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DrillEvidence {
    pub drill_id: String,
    pub runbook: String,
    pub title: String,
    pub started_at: String,
    pub result: DrillResult,
    pub duration_seconds: f64,
    pub rto_objective_seconds: Option<f64>,
    pub rto_measured_seconds: Option<f64>,
    pub rto_met: Option<bool>,
    pub reasons: Vec<String>,
    /// The journal file it was read from (its name only).
    pub journal: String,
}

impl RunEvidence {
    pub(crate) fn from_report(r: &RunReport) -> Self {
        let rpo_age = r.rpo.recoverable_point_age_seconds.or(r.rpo.backup_age_seconds);
        let mut reasons = Vec::new();
        if let Some(e) = &r.error {
            reasons.push(format!("[{}] {}", e.stage, e.message));
        }
        for v in r.validators.iter().filter(|v| v.status == Status::Failed || v.status == Status::Error) {
            reasons.push(format!("{} {}: {}", v.name, v.status, v.detail));
        }
        if r.rto.met == Some(false) {
            reasons.push(format!(
                "RTO missed: {:.1} s against {:.0} s",
                r.rto.measured_seconds.unwrap_or(0.0),
                r.rto.target_seconds
            ));
        }
        if r.rpo.met == Some(false) {
            reasons.push(format!(
                "RPO missed: {:.0} s old against {:.0} s",
                rpo_age.unwrap_or(0.0),
                r.rpo.target_seconds
            ));
        }
        if let (RunResult::Inconclusive, Some(c)) = (r.result, &r.content) {
            reasons.push(format!(
                "inconclusive: content {}% proven, {} of {} tables and {} rows undecided (max_undecided {}%)",
                c.proven_percent, c.tables_undecided, c.tables, c.rows_undecided, c.max_undecided_percent
            ));
        }
        Self {
            run_id: r.run_id.clone(),
            started_at: r.started_at.clone(),
            finished_at: r.finished_at.clone(),
            result: r.result,
            backup_key: r.backup.as_ref().map(|b| b.key.clone()),
            backup_created_at: r.backup.as_ref().and_then(|b| b.created_at.clone()),
            rto_target_seconds: r.rto.target_seconds,
            rto_measured_seconds: r.rto.measured_seconds,
            rto_met: r.rto.met,
            rpo_target_seconds: r.rpo.target_seconds,
            rpo_age_seconds: rpo_age,
            rpo_met: r.rpo.met,
            validators: r
                .validators
                .iter()
                .map(|v| ValidatorEvidence {
                    name: v.name.clone(),
                    status: v.status,
                    detail: v.detail.clone(),
                    covered: v
                        .measurements
                        .iter()
                        .filter_map(|(k, n)| k.strip_prefix("covered_").map(|k| (k.to_string(), *n)))
                        .collect(),
                    inconclusive: v.inconclusive.clone(),
                })
                .collect(),
            reasons,
            content_proven_percent: r.content.as_ref().map(|c| c.proven_percent),
            coverage: r.coverage.clone(),
            recovery_target: r
                .restore
                .as_ref()
                .and_then(|i| i.recovery_target.as_ref())
                .map(|t| t.value.clone().unwrap_or_else(|| t.kind.clone())),
            recovered_to: r.restore.as_ref().and_then(|i| i.recovered_to.clone()),
            containment: r.restore.as_ref().and_then(|i| i.containment.clone()),
        }
    }
}

/// Seconds since the epoch of an RFC 3339 time; `None` if it is not one.
pub(crate) fn epoch(t: &str) -> Option<f64> {
    chrono::DateTime::parse_from_rfc3339(t).ok().map(|d| d.timestamp_millis() as f64 / 1000.0)
}

/// The summary of `runs` (oldest first) over the window `[from, to)` (epoch seconds).
pub(crate) fn summarise(runs: &[RunEvidence], from: f64, to: f64) -> Summary {
    let count = |r: RunResult| runs.iter().filter(|x| x.result == r).count() as u32;
    let passed = count(RunResult::Passed);
    let first = runs.iter().filter_map(|r| epoch(&r.started_at)).reduce(f64::min);
    let mut last_pass = first.unwrap_or(from).clamp(from, to);
    let mut longest: f64 = 0.0;
    for r in runs.iter().filter(|r| r.result == RunResult::Passed) {
        let at = epoch(&r.finished_at).unwrap_or(last_pass).clamp(from, to);
        longest = longest.max(at - last_pass);
        last_pass = at;
    }
    longest = longest.max(to - last_pass);
    Summary {
        runs: runs.len() as u32,
        passed,
        failed: count(RunResult::Failed),
        error: count(RunResult::Error),
        aborted: count(RunResult::Aborted),
        inconclusive: count(RunResult::Inconclusive),
        content_proven_percent: runs.iter().rev().find_map(|r| r.content_proven_percent),
        pass_rate: (!runs.is_empty()).then(|| passed as f64 / runs.len() as f64),
        worst_rto_seconds: runs.iter().filter_map(|r| r.rto_measured_seconds).reduce(f64::max),
        longest_without_pass_seconds: (longest * 1000.0).round() / 1000.0,
    }
}

/// One target's evidence from its runs in the window (any order).
pub(crate) fn target_evidence(name: &str, mut runs: Vec<RunEvidence>, from: f64, to: f64) -> TargetEvidence {
    runs.sort_by(|a, b| a.started_at.cmp(&b.started_at).then(a.run_id.cmp(&b.run_id)));
    let newest = runs.last();
    let points_in_time: Vec<PointInTime> = runs
        .iter()
        .filter_map(|r| {
            Some(PointInTime {
                target: r.recovery_target.clone().unwrap_or_else(|| "latest".into()),
                recovered_to: r.recovered_to.clone()?,
                run_id: r.run_id.clone(),
                result: r.result,
            })
        })
        .collect();
    let coverage = runs.iter().rev().find_map(|r| r.coverage.as_ref()).map(|c| TargetCoverage {
        restorable: c.restorable,
        proven: c.proven,
        prove_within_seconds: c.prove_within_seconds,
        backups: c.backups.clone(),
        points_in_time: points_in_time.clone(),
    });
    let newest_finding =
        |name: &str| runs.iter().rev().find_map(|r| r.validators.iter().find(|v| v.name == name)).cloned();
    TargetEvidence {
        name: name.to_string(),
        rto_target_seconds: newest.map(|r| r.rto_target_seconds),
        rpo_target_seconds: newest.map(|r| r.rpo_target_seconds),
        summary: summarise(&runs, from, to),
        coverage,
        immutability: newest_finding("immutability"),
        pinned: newest_finding("pinned"),
        acknowledgements: Vec::new(),
        runs,
    }
}

/// A drill journal (the JSON `drcheck drill run` writes), if it is one.
pub(crate) fn drill_from_journal(journal: &serde_json::Value, file: &str) -> Option<DrillEvidence> {
    let s = |v: &serde_json::Value| v.as_str().map(str::to_string);
    Some(DrillEvidence {
        drill_id: s(&journal["drill_id"])?,
        runbook: s(&journal["runbook"]["name"])?,
        title: s(&journal["runbook"]["title"]).unwrap_or_default(),
        started_at: s(&journal["started_at"])?,
        result: serde_json::from_value(journal["result"].clone()).ok()?,
        duration_seconds: journal["duration_seconds"].as_f64().unwrap_or(0.0),
        rto_objective_seconds: journal["rto"]["objective_seconds"].as_f64(),
        rto_measured_seconds: journal["rto"]["measured_seconds"].as_f64(),
        rto_met: journal["rto"]["met"].as_bool(),
        reasons: journal["reasons"]
            .as_array()
            .map(|a| a.iter().filter_map(|r| r.as_str().map(str::to_string)).collect())
            .unwrap_or_default(),
        journal: file.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, started: &str, finished: &str, result: &str, rto: Option<f64>) -> RunEvidence {
        RunEvidence {
            run_id: id.into(),
            started_at: started.into(),
            finished_at: finished.into(),
            result: result.parse().unwrap(),
            backup_key: None,
            backup_created_at: None,
            rto_target_seconds: 60.0,
            rto_measured_seconds: rto,
            rto_met: rto.map(|s| s <= 60.0),
            rpo_target_seconds: 3600.0,
            rpo_age_seconds: None,
            rpo_met: None,
            validators: vec![],
            reasons: vec![],
            content_proven_percent: None,
            coverage: None,
            recovery_target: None,
            recovered_to: None,
            containment: None,
        }
    }

    #[test]
    fn the_summary_counts_and_finds_the_longest_stretch_without_a_pass() {
        let from = epoch("2026-11-01T00:00:00Z").unwrap();
        let to = epoch("2026-11-11T00:00:00Z").unwrap();
        let runs = vec![
            run("a", "2026-11-02T00:00:00Z", "2026-11-02T00:00:10Z", "passed", Some(10.0)),
            run("b", "2026-11-03T00:00:00Z", "2026-11-03T00:01:40Z", "failed", Some(100.0)),
            run("c", "2026-11-04T00:00:00Z", "2026-11-04T00:00:01Z", "error", None),
            run("d", "2026-11-09T00:00:00Z", "2026-11-09T00:00:10Z", "passed", Some(12.0)),
        ];
        let s = summarise(&runs, from, to);
        assert_eq!((s.runs, s.passed, s.failed, s.error, s.aborted), (4, 2, 1, 1, 0));
        assert_eq!(s.pass_rate, Some(0.5));
        assert_eq!(s.worst_rto_seconds, Some(100.0));
        // From the pass on the 2nd to the pass on the 9th: 7 days.
        assert_eq!(s.longest_without_pass_seconds, 7.0 * 86400.0);
        // No pass at all: from the first run (the 3rd) to the window's end. Issue 26: not
        // from the window's start, when the target had no run before.
        let s = summarise(&runs[1..3], from, to);
        assert_eq!(s.longest_without_pass_seconds, 8.0 * 86400.0);
        // A target whose only run passed on the window's last day: no stretch before it.
        let late = [run("e", "2026-11-10T23:00:00Z", "2026-11-10T23:00:10Z", "passed", Some(1.0))];
        assert_eq!(summarise(&late, from, to).longest_without_pass_seconds, 3600.0 - 10.0);
        assert_eq!(summarise(&[], from, to).longest_without_pass_seconds, 10.0 * 86400.0);
        assert_eq!(summarise(&[], from, to).pass_rate, None);
    }

    #[test]
    fn a_target_carries_its_newest_runs_store_findings() {
        let from = epoch("2026-11-01T00:00:00Z").unwrap();
        let to = epoch("2026-11-11T00:00:00Z").unwrap();
        let finding = |name: &str, status: &str| ValidatorEvidence {
            name: name.into(),
            status: status.parse().unwrap(),
            detail: format!("{name} {status}"),
            covered: Covered::default(),
            inconclusive: vec![],
        };
        let mut a = run("a", "2026-11-02T00:00:00Z", "2026-11-02T00:01:00Z", "passed", Some(10.0));
        a.validators = vec![finding("immutability", "passed"), finding("pinned", "passed")];
        let mut b = run("b", "2026-11-03T00:00:00Z", "2026-11-03T00:01:00Z", "failed", Some(10.0));
        b.validators = vec![finding("immutability", "failed")];
        // A run without them (a follower's validation) leaves the newest that has them.
        let c = run("c", "2026-11-04T00:00:00Z", "2026-11-04T00:01:00Z", "passed", None);
        let t = target_evidence("orders", vec![c, b, a], from, to);
        assert_eq!(t.immutability.as_ref().map(|f| f.status.as_str()), Some("failed"));
        assert_eq!(t.pinned.as_ref().map(|f| f.status.as_str()), Some("passed"));
        assert!(target_evidence("none", vec![], from, to).immutability.is_none());
    }
}
