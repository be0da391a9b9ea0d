//! A verification on the target's follower (`mode = "follow"`): no restore — replay is
//! paused at a commit, the validators that only read run there with that commit as the
//! `as_of` cut, and replay resumes. What needs writes (amcheck's extension, resetting
//! the copy's settings) runs on the full restores of the rotation; the follower's
//! database and role settings are overridden in every session instead.

use super::stop::{Stop, restored_unreachable};
use super::validate::Checked;
use super::{Learned, judge};
use crate::run_report::{BackupInfo, FollowPoint, Phase, RunReport, secs};
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
    let mut begun = RunReport::begun(run_id, target, SystemTime::now());
    begun.mode = "follow".into();
    tracing::info!(target = %target.name, run_id = %begun.run_id, "verification on the follower started");
    let mut learned = Learned::default();
    let outcome = tokio::select! {
        r = on_follower(&config.sandbox, target, follower, history, &mut begun.follow, &mut learned) => r,
        _ = cancel.cancelled() => Err(Stop::aborted("validate")),
    };
    if let Err(e) = follower.resume_replay().await {
        tracing::warn!(target = %target.name, "cannot resume the follower's replay: {e}");
    }
    judge(begun, target, learned, outcome)
}

/// Pauses the follower's replay and validates its copy: the point it paused at into
/// `point`, what it learned into `learned` (both outlive a cancelled run's future).
async fn on_follower(
    sandbox_settings: &drcheck_config::SandboxConfig,
    target: &TargetConfig,
    follower: &mut Follower,
    history: &crate::history::History,
    point: &mut Option<FollowPoint>,
    learned: &mut Learned,
) -> Result<(), Stop> {
    let t = Instant::now();
    let paused = follower.pause().await.map_err(|e| Stop::incomplete("follow", e.to_string()))?;
    let paused_for = Phase { name: "pause".into(), seconds: secs(t.elapsed()) };
    let state = follower.state().clone();
    *point = Some(FollowPoint {
        lsn: paused.lsn.clone(),
        commit: paused.commit.clone(),
        seeded_from: state.backup.clone(),
        seeded_at: state.seeded_at.clone(),
    });
    learned.checked = Some(Checked { phases: vec![paused_for], ..Default::default() });
    let listed = &mut learned.listed;
    listed.backup = Some(BackupInfo {
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
    listed.m.has_archive = true;
    listed.m.replays_to_end = true;
    listed.m.listed_at = Some(SystemTime::now());
    listed.m.recovered_to = paused.commit.as_deref().and_then(|c| humantime::parse_rfc3339_weak(c).ok());
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
    let cutoff = listed.m.as_of_cutoff();
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
    let validated = match crate::validate::run(sandbox_settings, &only_reads, copy).await {
        Ok(v) => v,
        Err(e) => return Err(restored_unreachable(sandbox, "validate", format!("{e:#}")).await),
    };
    let unavailable = validated.primary_unavailable.clone();
    let paused = learned.checked.take().map(|c| c.phases).unwrap_or_default();
    let checked = learned.checked.insert(Checked::of(target, validated, rotation.as_ref(), history).await);
    checked.phases = paused;
    checked.phases.push(Phase { name: "validate".into(), seconds: secs(t.elapsed()) });
    match unavailable {
        Some(why) => checked.primary_unavailable(target, &why),
        None => Ok(()),
    }
}
