//! One verification of one target:
//! select backup → fetch (streamed) → restore into a sandbox → validate → RTO/RPO.
//!
//! The result is always a [`RunReport`]; `Err` never leaves this module, because a
//! failed or incomplete run is still a run to record. Cancellation (SIGTERM) and the
//! RTO deadline drop the in-flight work, and the sandbox's drop guard tears it down.

use crate::progress::Progress;
use crate::report::{BackupInfo, Phase, Rpo, Rto, RunError, RunReport, RunResult, ValidatorReport, secs, timestamp};
use drcheck_config::{Config, TargetConfig};
use drcheck_restore::logical::{read_head, restore_custom};
use drcheck_restore::sandbox::reap_leftovers;
use drcheck_restore::store::backups_newest_first;
use drcheck_restore::{
    BackupObject, BackupStore, RestoreError, Sandbox, SandboxOptions, Stage, StoreError, open_store, pgbin,
};
use drcheck_validators::{Context, Primary, primary};
use sqlx::postgres::PgPoolOptions;
use std::time::{Duration, Instant, SystemTime};
use tokio_util::sync::CancellationToken;

/// The database the backup is restored into, inside the sandbox.
const RESTORED_DB: &str = "restored";
const VALIDATOR_TIMEOUT: Duration = Duration::from_secs(600);

/// Why a run stopped early, and whether the backup (or an objective) is to blame.
struct Stop {
    stage: String,
    message: String,
    result: RunResult,
}

impl Stop {
    fn incomplete(stage: &str, message: impl Into<String>) -> Self {
        Stop { stage: stage.into(), message: message.into(), result: RunResult::Error }
    }

    fn failed(stage: &str, message: impl Into<String>) -> Self {
        Stop { stage: stage.into(), message: message.into(), result: RunResult::Failed }
    }

    fn aborted(stage: &str) -> Self {
        Stop {
            stage: stage.into(),
            message: "interrupted by a signal; sandbox torn down".into(),
            result: RunResult::Aborted,
        }
    }
}

impl From<RestoreError> for Stop {
    fn from(e: RestoreError) -> Self {
        let result = if e.is_backup_fault() { RunResult::Failed } else { RunResult::Error };
        Stop { stage: e.stage().to_string(), message: e.to_string(), result }
    }
}

fn store_stop(stage: Stage, e: StoreError) -> Stop {
    Stop::incomplete(stage.as_str(), e.to_string())
}

/// What one run accumulates as it goes.
struct Run<'a> {
    target: &'a TargetConfig,
    report: RunReport,
}

impl Run<'_> {
    fn phase(&mut self, name: &str, d: Duration) {
        self.report.phases.push(Phase { name: name.into(), seconds: secs(d) });
    }
}

/// Lists the backups of a target, newest first.
pub async fn list_backups(config: &Config, target: &TargetConfig) -> Result<(String, Vec<BackupObject>), StoreError> {
    let store = open_store(&target.storage, &config.storage[&target.storage]).await;
    let all = store.list(&target.prefix).await?;
    let backups = backups_newest_first(&all).into_iter().cloned().collect();
    Ok((store.describe(), backups))
}

/// Verifies `target`: the latest backup, or `backup_key` when given.
pub async fn verify(
    config: &Config,
    target: &TargetConfig,
    backup_key: Option<&str>,
    cancel: &CancellationToken,
    progress: &Progress,
) -> RunReport {
    let started = SystemTime::now();
    let mut run = Run {
        target,
        report: RunReport {
            run_id: uuid::Uuid::new_v4().to_string(),
            target: target.name.clone(),
            result: RunResult::Passed,
            started_at: timestamp(started),
            finished_at: String::new(),
            backup: None,
            phases: Vec::new(),
            rto: Rto { target_seconds: secs(target.rto), measured_seconds: None, met: None },
            rpo: Rpo { target_seconds: secs(target.rpo), backup_age_seconds: None, met: None },
            validators: Vec::new(),
            error: None,
        },
    };
    tracing::info!(target = %target.name, run_id = %run.report.run_id, "verification started");
    let outcome = tokio::select! {
        r = steps(config, &mut run, backup_key, cancel, progress) => r,
        // Dropping `steps` drops the sandbox, which stops its server and removes its files.
        _ = cancel.cancelled() => Err(Stop::aborted("interrupted")),
    };
    progress.finish();
    let r = &mut run.report;
    r.result = match outcome {
        Err(stop) => {
            let result = stop.result;
            r.error = Some(RunError { stage: stop.stage, message: stop.message });
            result
        }
        Ok(()) if r.rpo.met == Some(false) || r.rto.met == Some(false) || r.validator_failed() => RunResult::Failed,
        Ok(()) if r.validator_errored() => RunResult::Error,
        Ok(()) => RunResult::Passed,
    };
    // A run that stopped after the RPO was measured still failed if the RPO was missed.
    if r.result == RunResult::Error && r.rpo.met == Some(false) {
        r.result = RunResult::Failed;
    }
    r.finished_at = timestamp(SystemTime::now());
    tracing::info!(target = %target.name, run_id = %r.run_id, result = r.result.as_str(), "verification finished");
    run.report
}

async fn steps(
    config: &Config,
    run: &mut Run<'_>,
    backup_key: Option<&str>,
    cancel: &CancellationToken,
    progress: &Progress,
) -> Result<(), Stop> {
    let target = run.target;
    progress.phase(&target.name, "selecting backup");
    let store = open_store(&target.storage, &config.storage[&target.storage]).await;
    let backup = select(store.as_ref(), target, backup_key).await?;
    let age = SystemTime::now().duration_since(backup.last_modified).unwrap_or_default();
    run.report.rpo.backup_age_seconds = Some(secs(age));
    run.report.rpo.met = Some(age <= target.rpo);
    run.report.backup = Some(BackupInfo {
        key: backup.key.clone(),
        size_bytes: backup.size,
        created_at: timestamp(backup.last_modified),
        format: None,
    });

    progress.phase(&target.name, "starting sandbox");
    let t = Instant::now();
    for dir in reap_leftovers(&config.sandbox.scratch_dir) {
        tracing::warn!(dir = %dir.display(), "removed a sandbox left by an earlier run");
    }
    let bin = pgbin::find(config.sandbox.pg_bindir.as_deref()).map_err(|m| Stop::incomplete("sandbox", m))?;
    let opts =
        SandboxOptions { scratch_dir: config.sandbox.scratch_dir.clone(), bin, run_id: run.report.run_id.clone() };
    let sandbox = Sandbox::start(&opts).await?;
    run.phase("sandbox", t.elapsed());

    // The RTO clock: from the start of the fetch until the restored database answers.
    let fetch_start = Instant::now();
    let deadline = target.rto.mul_f64(target.abort_factor);
    let restore = async {
        let mut reader = store.open(&backup.key).await.map_err(|e| store_stop(Stage::Fetch, e))?;
        let head = read_head(&mut reader, &store.describe()).await?;
        let format = drcheck_restore::format::detect(&head);
        if let Some(b) = run.report.backup.as_mut() {
            b.format = Some(format.as_str().to_string());
        }
        progress.bytes(&target.name, "fetch+restore", backup.size);
        let on_bytes = |n: u64| progress.set_position(n);
        let done =
            restore_custom(&sandbox, RESTORED_DB, head, reader, fetch_start, &store.describe(), &on_bytes).await?;
        Ok::<_, Stop>(done)
    };
    let done = match tokio::time::timeout(deadline, restore).await {
        Ok(r) => r?,
        Err(_) => {
            run.report.rto.measured_seconds = Some(secs(fetch_start.elapsed()));
            run.report.rto.met = Some(false);
            return Err(Stop::failed(
                "restore",
                format!(
                    "cancelled: still restoring after {} (rto {} × abort_factor {})",
                    drcheck_config::format_duration(deadline),
                    drcheck_config::format_duration(target.rto),
                    target.abort_factor
                ),
            ));
        }
    };
    run.phase("fetch", done.fetch);
    run.phase("restore", done.restore);
    progress.phase(&target.name, "checking the restored database");
    let restored = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(sandbox.connect_options(RESTORED_DB))
        .await
        .map_err(|e| Stop::incomplete("restore", format!("the restored database does not accept connections: {e}")))?;
    sqlx::query("select 1")
        .execute(&restored)
        .await
        .map_err(|e| Stop::incomplete("restore", format!("the restored database does not answer: {e}")))?;
    let rto = fetch_start.elapsed();
    run.report.rto.measured_seconds = Some(secs(rto));
    run.report.rto.met = Some(rto <= target.rto);

    progress.phase(&target.name, "validating");
    let t = Instant::now();
    let primary = match &target.primary {
        None => Primary::Unavailable("no primary configured for this target".into()),
        Some(url) => match primary::connect(url.expose(), &primary::PrimaryLimits::default()).await {
            Ok(pool) => Primary::Available(pool),
            Err(why) => {
                tracing::warn!(target = %target.name, reason = %why, "primary unreachable: comparisons skipped");
                Primary::Unavailable(format!("cannot connect to {}: {why}", url.redacted()))
            }
        },
    };
    let cx = Context { restored, primary, row_count_tolerance: target.row_count_tolerance };
    let validators = drcheck_validators::builtins();
    let findings = drcheck_validators::run_all(&validators, &cx, VALIDATOR_TIMEOUT).await;
    run.report.validators = findings.iter().map(ValidatorReport::from).collect();
    cx.restored.close().await;
    if let Primary::Available(p) = &cx.primary {
        p.close().await;
    }
    run.phase("validate", t.elapsed());
    if cancel.is_cancelled() {
        return Err(Stop::aborted("validate"));
    }
    sandbox.teardown();
    Ok(())
}

async fn select(
    store: &dyn BackupStore,
    target: &TargetConfig,
    backup_key: Option<&str>,
) -> Result<BackupObject, Stop> {
    if let Some(key) = backup_key {
        return store.stat(key).await.map_err(|e| {
            if e.unreachable { store_stop(Stage::Select, e) } else { Stop::failed("select", e.to_string()) }
        });
    }
    let all = store.list(&target.prefix).await.map_err(|e| store_stop(Stage::Select, e))?;
    drcheck_restore::select_latest(&all).cloned().ok_or_else(|| {
        Stop::failed(
            "select",
            format!(
                "no backup under prefix {:?} in {} ({} objects, none a backup)",
                target.prefix,
                store.describe(),
                all.len()
            ),
        )
    })
}
