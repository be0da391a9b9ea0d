//! Runs a drill: the steady state before, the method, the steady state after, the
//! rollbacks — timing every step, keeping the RTO clock, and honouring the kill switch.
//!
//! Rollbacks run whenever the method started, except after a step with
//! `on_failure: abort` (which leaves everything as it is for investigation) — so a
//! completed drill also puts the environment back, as game days do. The first signal
//! stops the method (the running step is stopped) and the rollbacks run; a second
//! signal stops the rollbacks too.

use crate::format::OnFailure;
use crate::journal::{DrillResult, Journal, Phase, RpoMeasure, RtoMeasure, RunbookInfo, SteadyState, StepRecord};
use crate::plan::{Runbook, Step};
use crate::scope::Scope;
use crate::steps::{self, Env, Outcome, Status, StepCtx};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The kill switch: `stop` ends the method, `force` ends the rollbacks too.
#[derive(Clone, Default)]
pub struct KillSwitch {
    pub stop: CancellationToken,
    pub force: CancellationToken,
    /// The signal that tripped it, for the journal.
    pub cause: Arc<Mutex<Option<String>>>,
}

impl KillSwitch {
    pub fn trip(&self, cause: &str) {
        if let Ok(mut c) = self.cause.lock() {
            c.get_or_insert_with(|| cause.to_string());
        }
        if self.stop.is_cancelled() {
            self.force.cancel();
        }
        self.stop.cancel();
    }
}

struct Run<'a> {
    env: &'a Env<'a>,
    scope: Scope,
    t0: Instant,
    rto_budget: Option<Duration>,
    rto_start: Option<Instant>,
    /// The journal so far (result `running`), handed to `env.checkpoint` after each step.
    partial: Journal,
}

pub async fn run(rb: &Runbook, env: &Env<'_>, kill: &KillSwitch) -> Journal {
    let started_at = SystemTime::now();
    let scope = Scope::new(rb.variables.clone());
    let partial = Journal {
        drill_id: uuid::Uuid::new_v4().to_string(),
        runbook: RunbookInfo {
            name: rb.name.clone(),
            title: rb.title.clone(),
            description: rb.description.clone(),
            file: rb.path.display().to_string(),
        },
        result: DrillResult::Running,
        hypothesis_held: None,
        reasons: Vec::new(),
        started_at: timestamp(started_at),
        finished_at: timestamp(started_at),
        duration_seconds: 0.0,
        interrupted_by: None,
        rto: RtoMeasure::default(),
        rpo: RpoMeasure::default(),
        variables: scope.masked(),
        steady_state: SteadyState { before: Vec::new(), after: Vec::new() },
        steps: Vec::new(),
        rollbacks: Vec::new(),
        rollbacks_ran: false,
        action_items: Vec::new(),
    };
    if let Some(save) = env.checkpoint {
        save(&partial);
    }
    let mut r = Run { env, scope, t0: Instant::now(), rto_budget: rb.rto, rto_start: None, partial };
    let mut reasons = Vec::new();

    env.live.section(Phase::SteadyStateBefore.title());
    let before = r.sequence(&rb.steady_state, Phase::SteadyStateBefore, &kill.stop).await;
    let before_ok = before.iter().all(|s| s.status == Status::Passed);
    let mut aborted = before.iter().any(|s| s.status == Status::Aborted);
    if !before_ok && !aborted {
        reasons.push("the steady state did not hold before the method: nothing was changed".to_string());
    }
    let method_runs = before_ok && !aborted;

    let mut stopped_by: Option<(String, OnFailure)> = None;
    let mut steps = Vec::new();
    if method_runs {
        env.live.section(Phase::Steps.title());
    }
    for step in &rb.steps {
        if !method_runs || aborted || stopped_by.is_some() || kill.stop.is_cancelled() {
            aborted |= method_runs && kill.stop.is_cancelled();
            steps.push(skipped(step, Phase::Steps, &r.scope));
            continue;
        }
        let rec = r.step(step, Phase::Steps, &kill.stop).await;
        match rec.status {
            Status::Aborted => aborted = true,
            Status::Failed | Status::TimedOut if step.on_failure != OnFailure::Continue => {
                reasons.push(format!(
                    "step {:?} {} (on_failure: {}): {}",
                    step.name,
                    rec.status.as_str(),
                    step.on_failure.as_str(),
                    rec.detail
                ));
                stopped_by = Some((step.name.clone(), step.on_failure));
            }
            _ => {}
        }
        steps.push(rec);
    }

    let mut after = Vec::new();
    let mut hypothesis_held = if method_runs || aborted { None } else { Some(false) };
    if method_runs && !aborted && stopped_by.is_none() {
        env.live.section(Phase::SteadyStateAfter.title());
        after = r.sequence(&rb.steady_state, Phase::SteadyStateAfter, &kill.stop).await;
        if after.iter().any(|s| s.status == Status::Aborted) {
            aborted = true;
        } else {
            let held = after.iter().all(|s| s.status == Status::Passed);
            if !held {
                reasons.push("the steady state did not hold after the method: the hypothesis is refuted".to_string());
            }
            hypothesis_held = Some(held);
        }
    } else if stopped_by.is_some() {
        hypothesis_held = Some(false);
    }

    let rollbacks_ran = method_runs && !matches!(stopped_by, Some((_, OnFailure::Abort)));
    let mut rollbacks = Vec::new();
    if rollbacks_ran && !rb.rollbacks.is_empty() {
        env.live.section(Phase::Rollbacks.title());
    }
    let mut stop_rollbacks = false;
    for step in &rb.rollbacks {
        if !rollbacks_ran || stop_rollbacks || kill.force.is_cancelled() {
            rollbacks.push(skipped(step, Phase::Rollbacks, &r.scope));
            continue;
        }
        let rec = r.step(step, Phase::Rollbacks, &kill.force).await;
        match rec.status {
            Status::Passed => {}
            Status::Aborted => stop_rollbacks = true,
            _ => {
                reasons.push(format!("rollback {:?} {}: {}", step.name, rec.status.as_str(), rec.detail));
                stop_rollbacks = step.on_failure == OnFailure::Abort;
            }
        }
        rollbacks.push(rec);
    }
    // A signal while the rollbacks ran (the method had finished): the drill did not
    // complete as planned — it was interrupted, whatever the steps said.
    if kill.stop.is_cancelled() && !aborted {
        aborted = true;
        reasons.push("interrupted during the rollbacks".to_string());
    }

    let rto = rto_measure(rb, &steps);
    if rto.met == Some(false) {
        reasons.push(match rto.measured_seconds {
            Some(m) if rto.complete => format!(
                "RTO objective missed: recovery took {m:.1}s, the objective is {:.0}s",
                rto.objective_seconds.unwrap_or_default()
            ),
            _ => "RTO objective not met: recovery did not finish".to_string(),
        });
    }
    let rpo = rpo_measure(rb, &steps);
    if rpo.met == Some(false) {
        reasons.push(format!(
            "RPO objective missed: the restored backup was {:.0}s old, the objective is {:.0}s",
            rpo.backup_age_seconds.unwrap_or_default(),
            rpo.objective_seconds.unwrap_or_default()
        ));
    }
    let interrupted_by = if aborted { kill.cause.lock().ok().and_then(|c| c.clone()) } else { None };
    let result = if aborted {
        DrillResult::Aborted
    } else if reasons.is_empty() {
        DrillResult::Completed
    } else {
        DrillResult::Failed
    };
    let mut journal = Journal {
        drill_id: r.partial.drill_id.clone(),
        runbook: r.partial.runbook.clone(),
        result,
        hypothesis_held,
        reasons,
        started_at: timestamp(started_at),
        finished_at: timestamp(SystemTime::now()),
        duration_seconds: r.t0.elapsed().as_secs_f64(),
        interrupted_by,
        rto,
        rpo,
        variables: r.scope.masked(),
        steady_state: SteadyState { before, after },
        steps,
        rollbacks,
        rollbacks_ran,
        action_items: Vec::new(),
    };
    journal.action_items = crate::drill_report::action_items(&journal);
    journal
}

impl Run<'_> {
    /// Steady-state checks: every one runs (each is evidence), unless the kill switch trips.
    async fn sequence(&mut self, list: &[Step], phase: Phase, cancel: &CancellationToken) -> Vec<StepRecord> {
        let mut out = Vec::new();
        for step in list {
            if cancel.is_cancelled() {
                out.push(skipped(step, phase, &self.scope));
            } else {
                out.push(self.step(step, phase, cancel).await);
            }
        }
        out
    }

    async fn step(&mut self, step: &Step, phase: Phase, cancel: &CancellationToken) -> StepRecord {
        let at = self.t0.elapsed();
        let began = SystemTime::now();
        let start = Instant::now();
        if step.recovery && self.rto_start.is_none() {
            self.rto_start = Some(start);
        }
        // Described before it runs: what it was asked to do, with the values of then.
        let planned = skipped(step, phase, &self.scope);
        let label = format!("{} ({}{})", step.name, step.action.kind(), if step.recovery { ", recovery" } else { "" });
        self.env.live.started(&label, &planned.action, at);
        let outcome = {
            let ctx = StepCtx {
                scope: &self.scope,
                env: self.env,
                deadline: start + step.timeout,
                timeout: step.timeout,
                cancel,
            };
            // A backstop beyond the step's own deadline handling, so no kind can hang the drill.
            match tokio::time::timeout(step.timeout + Duration::from_secs(30), steps::run(&step.action, &ctx)).await {
                Ok(o) => o,
                Err(_) => Outcome::new(Status::TimedOut, "timed out (the step did not stop at its deadline)"),
            }
        };
        let took = start.elapsed();
        let mut captured = None;
        if outcome.status == Status::Passed
            && let (Some(name), Some(value)) = (step.action.capture(), &outcome.value)
        {
            self.scope.set(name, value.clone());
            captured = Some(name.to_string());
        }
        let rto = match (self.rto_start, self.rto_budget) {
            (Some(s), Some(b)) if step.recovery => Some((s.elapsed(), b)),
            _ => None,
        };
        self.env.live.finished(&outcome, took, rto);
        let record = StepRecord {
            status: outcome.status,
            started_at: Some(timestamp(began)),
            finished_at: Some(timestamp(SystemTime::now())),
            offset_seconds: Some(at.as_secs_f64()),
            duration_seconds: Some(took.as_secs_f64()),
            detail: outcome.detail,
            output_tail: outcome.output,
            captured,
            confirmation: outcome.confirmation,
            verification: with_age(outcome.verification, outcome.backup_age_seconds),
            ..planned
        };
        self.checkpoint(&record);
        record
    }

    /// The step's record into the journal so far, and that journal to the caller.
    fn checkpoint(&mut self, record: &StepRecord) {
        let p = &mut self.partial;
        match record.phase {
            Phase::SteadyStateBefore => p.steady_state.before.push(record.clone()),
            Phase::Steps => p.steps.push(record.clone()),
            Phase::SteadyStateAfter => p.steady_state.after.push(record.clone()),
            Phase::Rollbacks => p.rollbacks.push(record.clone()),
        }
        p.variables = self.scope.masked();
        p.finished_at = timestamp(SystemTime::now());
        p.duration_seconds = self.t0.elapsed().as_secs_f64();
        if let Some(save) = self.env.checkpoint {
            save(p);
        }
    }
}

/// Keeps the backup age next to the embedded report so the RPO can be computed from
/// the journal alone.
fn with_age(report: Option<serde_json::Value>, age: Option<f64>) -> Option<serde_json::Value> {
    match (report, age) {
        (Some(mut r), Some(a)) => {
            if let Some(o) = r.as_object_mut() {
                o.insert("drill_backup_age_seconds".into(), a.into());
            }
            Some(r)
        }
        (r, _) => r,
    }
}

/// The record of a step that did not run (and the base of one that did).
fn skipped(step: &Step, phase: Phase, scope: &Scope) -> StepRecord {
    StepRecord {
        name: step.name.clone(),
        kind: step.action.kind(),
        line: step.line,
        phase,
        recovery: step.recovery,
        on_failure: step.on_failure,
        status: Status::Skipped,
        action: steps::describe(&step.action, scope),
        started_at: None,
        finished_at: None,
        offset_seconds: None,
        duration_seconds: None,
        timeout_seconds: step.timeout.as_secs_f64(),
        detail: "not run".into(),
        output_tail: String::new(),
        captured: None,
        confirmation: None,
        verification: None,
    }
}

fn rto_measure(rb: &Runbook, steps: &[StepRecord]) -> RtoMeasure {
    let objective = rb.rto.map(|d| d.as_secs_f64());
    let recovery: Vec<&StepRecord> = steps.iter().filter(|s| s.recovery).collect();
    let ran: Vec<(f64, f64)> =
        recovery.iter().filter_map(|s| Some((s.offset_seconds?, s.offset_seconds? + s.duration_seconds?))).collect();
    let complete = !recovery.is_empty() && recovery.iter().all(|s| s.status == Status::Passed);
    let start = ran.iter().map(|r| r.0).reduce(f64::min);
    let end = ran.iter().map(|r| r.1).reduce(f64::max);
    let measured = start.zip(end).map(|(s, e)| e - s);
    // Not measured (null) when no recovery step started: the drill stopped before.
    let met = objective.filter(|_| measured.is_some()).map(|o| complete && measured.is_some_and(|m| m <= o));
    RtoMeasure {
        objective_seconds: objective,
        measured_seconds: measured,
        started_offset_seconds: start,
        ended_offset_seconds: end,
        complete,
        met,
    }
}

fn rpo_measure(rb: &Runbook, steps: &[StepRecord]) -> RpoMeasure {
    let objective = rb.rpo.map(|d| d.as_secs_f64());
    let age = steps
        .iter()
        .filter(|s| s.kind == "verify" && s.status == Status::Passed)
        .filter_map(|s| s.verification.as_ref()?.get("drill_backup_age_seconds")?.as_f64())
        .reduce(f64::max);
    RpoMeasure { objective_seconds: objective, backup_age_seconds: age, met: objective.zip(age).map(|(o, a)| a <= o) }
}

pub use crate::clock::timestamp;
