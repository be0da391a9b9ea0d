//! A verification on the target's follower (`mode = "follow"`): no restore — replay is
//! paused at a commit, the validators that only read run there with that commit as the
//! `as_of` cut, and replay resumes. What needs writes (amcheck's extension, resetting
//! the copy's settings) runs on the full restores of the rotation; the follower's
//! database and role settings are overridden in every session instead.

use super::stop::{Stop, restored_unreachable};
use super::{Run, finish, new_run};
use crate::run_report::{BackupInfo, FollowPoint, RunReport, ValidatorReport};
use drcheck_config::{Config, TargetConfig};
use drcheck_restore::Follower;
use std::time::{Instant, SystemTime};
use tokio_util::sync::CancellationToken;

/// The checks a follower cannot run: the validators that need a restore of their own
/// (they write to the copy), and the tool repository's check.
pub(crate) fn needs_a_restore() -> Vec<&'static str> {
    let mut names = drcheck_validators::names_where(|c| c.needs_restore);
    names.push("repository");
    names
}

/// Verifies `target` on its follower, paused for the validation and resumed after,
/// whatever happens.
pub(crate) async fn verify_on_follower(
    run_id: String,
    config: &Config,
    target: &TargetConfig,
    follower: &mut Follower,
    history: &crate::history::History,
    cancel: &CancellationToken,
) -> RunReport {
    let mut run = new_run(run_id, target);
    run.report.mode = "follow".into();
    tracing::info!(target = %target.name, run_id = %run.report.run_id, "verification on the follower started");
    let outcome = tokio::select! {
        r = on_follower(config, &mut run, follower, history) => r,
        _ = cancel.cancelled() => Err(Stop::aborted("interrupted")),
    };
    if let Err(e) = follower.resume_replay().await {
        tracing::warn!(target = %target.name, "cannot resume the follower's replay: {e}");
    }
    finish(run, outcome)
}

async fn on_follower(
    config: &Config,
    run: &mut Run<'_>,
    follower: &mut Follower,
    history: &crate::history::History,
) -> Result<(), Stop> {
    let target = run.target;
    let t = Instant::now();
    let paused = follower.pause().await.map_err(|e| Stop::incomplete("follow", e.to_string()))?;
    run.phase("pause", t.elapsed());
    let state = follower.state().clone();
    run.report.follow = Some(FollowPoint {
        lsn: paused.lsn.clone(),
        commit: paused.commit.clone(),
        seeded_from: state.backup.clone(),
        seeded_at: state.seeded_at.clone(),
    });
    run.report.backup = Some(BackupInfo {
        key: state.backup.clone(),
        size_bytes: 0,
        created_at: None,
        created_at_source: None,
        uploaded_at: None,
        format: Some("physical (follower)".into()),
        encryption: None,
        kind: None,
        source: None,
        pinned: vec![],
    });
    // The follower replays to the archive's end: the commit it is paused at is what can
    // be recovered now, and what this run proves.
    run.m.has_archive = true;
    run.m.replays_to_end = true;
    run.m.listed_at = Some(SystemTime::now());
    run.m.recovered_to = paused.commit.as_deref().and_then(|c| humantime::parse_rfc3339_weak(c).ok());
    let horizon = paused.horizon.as_ref().map(|h| drcheck_validators::asof::CopyHorizon {
        next_xid: h.next_xid,
        system_identifier: h.system_identifier.clone(),
    });
    let mut only_reads = target.clone();
    let needs_a_restore = needs_a_restore();
    only_reads.validators.enabled.retain(|v| !needs_a_restore.contains(&v.as_str()));
    let database =
        target.primary.as_ref().and_then(|p| super::database_of(p.expose())).unwrap_or_else(|| "postgres".into());
    let t = Instant::now();
    let cutoff = run.m.as_of_cutoff();
    let sandbox = follower.sandbox();
    let rotation = crate::validate::rotation(target, true, history).await;
    let journal = crate::validate::journal_for(target, cutoff, history).await;
    let copy = crate::validate::Copy {
        sandbox,
        database: &database,
        physical: true,
        at: cutoff,
        horizon,
        on_follower: true,
        rotation: rotation.clone(),
        journal,
    };
    let mut validated = match crate::validate::run(config, &only_reads, copy).await {
        Ok(v) => v,
        Err(e) => return Err(restored_unreachable(sandbox, "validate", e).await),
    };
    run.report.slice_compared = crate::validate::rotated(rotation.as_ref(), &validated.findings);
    let (decided, unproven) = crate::validate::tables_decided(target, &validated.findings, history).await;
    run.report.tables_decided = decided;
    validated.findings.extend(unproven);
    run.report.validators = validated.findings.iter().map(ValidatorReport::from).collect();
    run.report.content = crate::run_report::Content::of(&run.report.validators, target.max_undecided);
    run.report.primary_queries = validated.primary_queries;
    run.phase("validate", t.elapsed());
    if let Some(why) = validated.primary_unavailable {
        match target.comparisons {
            _ if run.report.validator_failed() => {
                run.report.degraded = Some(format!("comparisons with the primary could not run: {why}"));
            }
            drcheck_config::Comparisons::Required => {
                return Err(Stop::incomplete(
                    "validate",
                    format!("the comparisons with the primary could not run: {why}"),
                ));
            }
            drcheck_config::Comparisons::BestEffort => {
                run.report.degraded = Some(format!("comparisons with the primary skipped (best-effort): {why}"));
            }
        }
    }
    Ok(())
}
