//! The third stage: what the restored copy holds, checked on its own and against the
//! primary.

use super::Run;
use super::repository::{ToolCheck, check_repository};
use super::restore::Ready;
use super::select::Selected;
use super::stop::{Stop, restored_unreachable};
use crate::history::History;
use crate::progress::Progress;
use crate::run_report::ValidatorReport;
use drcheck_config::{Comparisons, Config};
use drcheck_validators::Status;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// The third stage: the validators on the restored copy and against the primary, the
/// data's own lag, comparisons the primary refused or could not run, and the backup
/// tool's repository check.
pub(super) async fn validate_stage(
    config: &Config,
    run: &mut Run<'_>,
    selected: &Selected,
    ready: Ready,
    history: &History,
    cancel: &CancellationToken,
    progress: &Progress,
) -> Result<(), Stop> {
    let target = &selected.target;
    let Ready { sandbox, database, physical, horizon } = ready;
    progress.phase(&target.name, "validating");
    let t = Instant::now();
    let cutoff = run.m.as_of_cutoff();
    let horizon = horizon.as_ref().map(|h| drcheck_validators::asof::CopyHorizon {
        next_xid: h.next_xid,
        system_identifier: h.system_identifier.clone(),
    });
    let rotation = crate::validate::rotation(target, physical, history).await;
    let journal = crate::validate::journal_for(target, cutoff, history).await;
    let copy = crate::validate::Copy {
        sandbox: &sandbox,
        database: &database,
        physical,
        at: cutoff,
        horizon,
        on_follower: false,
        rotation: rotation.clone(),
        journal,
    };
    let mut validated = match crate::validate::run(config, target, copy).await {
        Ok(v) => v,
        Err(e) => return Err(restored_unreachable(&sandbox, "validate", e).await),
    };
    run.report.slice_compared = crate::validate::rotated(rotation.as_ref(), &validated.findings);
    let (decided, unproven) = crate::validate::tables_decided(target, &validated.findings, history).await;
    run.report.tables_decided = decided;
    validated.findings.extend(unproven);
    run.report.validators = validated.findings.iter().map(ValidatorReport::from).collect();
    run.report.content = crate::run_report::Content::of(&run.report.validators, target.max_undecided);
    // The heartbeat is the data's own clock: its lag is preferred to the as_of columns'.
    let lag_of = |name: &str| {
        validated
            .findings
            .iter()
            .filter(|f| f.name == name)
            .find_map(|f| f.measurements.get("data_lag_seconds").copied())
    };
    run.report.rpo.data_lag_seconds = lag_of("point_in_time").or_else(|| lag_of("freshness"));
    run.report.primary_queries = validated.primary_queries;
    if target.comparisons == Comparisons::BestEffort && validated.primary_unavailable.is_none() {
        // A missing grant on the primary is comparisons that cannot run, like a wrong
        // password: best-effort makes those checks skipped and the verdict degraded.
        let denied = refused_by_the_primary(&mut run.report.validators);
        if !denied.is_empty() && !run.report.validator_failed() {
            run.report.degraded = Some(format!(
                "comparisons the primary refused to drcheck's role skipped (best-effort): {}",
                denied.join(", ")
            ));
        }
    }
    if let Some(why) = &validated.primary_unavailable {
        match target.comparisons {
            // The copy failed its own checks: the backup is bad whatever the primary
            // would have said (failed outranks incomplete); the report still says
            // what did not run.
            _ if run.report.validator_failed() => {
                run.report.degraded = Some(format!("comparisons with the primary could not run: {why}"));
            }
            // A verdict says what ran: without its comparisons the run did not complete.
            Comparisons::Required => {
                run.phase("validate", t.elapsed());
                return Err(Stop::incomplete(
                    "validate",
                    format!(
                        "the comparisons with the primary could not run: {why}. The restore and the self-checks \
                         are recorded; fix the primary's URL, password or grant, or set comparisons = \
                         \"best-effort\" for this target to accept runs without them"
                    ),
                ));
            }
            Comparisons::BestEffort => {
                run.report.degraded = Some(format!("comparisons with the primary skipped (best-effort): {why}"));
            }
        }
    }
    if let Some(c) = &selected.catalog
        && target.validators.enabled.iter().any(|v| v == "repository")
    {
        let f = check_repository(
            config,
            target,
            &selected.store,
            &run.report.run_id,
            c,
            Some(history),
            ToolCheck::AtMostOncePerSchedule,
        )
        .await;
        run.report.validators.push(ValidatorReport::from(&f));
    }
    run.phase("validate", t.elapsed());
    if cancel.is_cancelled() {
        return Err(Stop::aborted("validate"));
    }
    sandbox.teardown();
    Ok(())
}
/// The checks that erred because the primary refused drcheck's role (it answered
/// SQLSTATE 42501 — a missing grant — while they ran), made `skipped` saying so; their names.
pub(crate) fn refused_by_the_primary(validators: &mut [ValidatorReport]) -> Vec<String> {
    let mut names = Vec::new();
    for v in validators.iter_mut().filter(|v| v.status == Status::Error && v.refused_by_primary) {
        v.status = Status::Skipped;
        v.detail = format!("skipped (comparisons = \"best-effort\"): the primary refused drcheck's role: {}", v.detail);
        names.push(v.name.clone());
    }
    names
}
