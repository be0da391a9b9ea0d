//! The second stage: the chosen backup restored into a sandbox, timed against the RTO.

use super::budget::{CLUSTER_ALLOWANCE, check_disk};
use super::select::{Selected, recovery_target_info};
use super::stop::{Stop, restored_unreachable};
use crate::ids::{Settings, fetch_options, new_run_id, sandbox_options};
use crate::measure::Measurements;
use crate::progress::Progress;
use crate::run_report::{BackupInfo, Phase, RestoreInfo, ValidatorReport, secs};
use drcheck_config::{RecoveryTarget, SandboxConfig, TargetConfig};
use drcheck_restore::RestoreJob;
use drcheck_restore::reap_leftovers;
use drcheck_restore::{Backup, RestoreError, open_store};
use drcheck_restore::{SandboxOptions, WalReplay};
use sqlx::postgres::PgPoolOptions;
use std::time::{Duration, Instant};

/// The restored database, answering: what the validators work on.
pub(crate) struct Ready {
    pub sandbox: drcheck_restore::Sandbox,
    pub database: String,
    pub physical: bool,
    pub horizon: Option<drcheck_restore::Horizon>,
}

/// What the restore learned, for the run's verdict whether or not it got the database
/// to answer: its phases, how it ran, the backup as it read it, the instants it took.
#[derive(Debug, Default)]
pub(crate) struct Restored {
    pub phases: Vec<Phase>,
    pub info: Option<RestoreInfo>,
    /// The listing's description with what reading the backup told: its format, its
    /// encryption, each object's SHA-256 (into its pin).
    pub backup: Option<BackupInfo>,
    /// The listing's instants and the restore's own (the RTO clock, the consistency
    /// point, the last replayed commit).
    pub m: Measurements,
    /// The restore's finding (`archive`).
    pub findings: Vec<ValidatorReport>,
}

impl Restored {
    fn phase(&mut self, name: &str, d: Duration) {
        self.phases.push(Phase { name: name.into(), seconds: secs(d) });
    }
}

/// The second stage, on the RTO clock: room checked, the chosen backup fetched and
/// restored into the sandbox `sandbox_name` (what the restore tells as it goes
/// recorded), and the restored database asked to answer.
pub(crate) async fn restore_stage(
    settings: Settings<'_>,
    selected: &Selected,
    sandbox_name: String,
    progress: &Progress,
) -> (Restored, Result<Ready, Stop>) {
    let mut learned =
        Restored { backup: selected.listed.backup.clone(), m: selected.listed.m.clone(), ..Default::default() };
    let ready = restore_into(settings, selected, sandbox_name, progress, &mut learned).await;
    (learned, ready)
}

async fn restore_into(
    settings: Settings<'_>,
    selected: &Selected,
    sandbox_name: String,
    progress: &Progress,
    learned: &mut Restored,
) -> Result<Ready, Stop> {
    let (target, backup, store, random) = (&selected.target, &selected.backup, &selected.store, selected.random);
    let (expansion_ceiling, free_for_restore) = check_disk(settings.sandbox, backup)?;
    for dir in reap_leftovers(&settings.sandbox.scratch_dir) {
        tracing::warn!(dir = %dir.display(), "removed a sandbox left by an earlier run");
    }

    // The RTO clock: from the start of the fetch until the restored database answers.
    let fetch_start = Instant::now();
    let deadline = target.rto.mul_f64(target.abort_factor);
    progress.bytes(&target.name, "fetch+restore", backup.size);
    let (events, mut told) = drcheck_restore::Events::channel();
    let job = RestoreJob {
        store: store.clone(),
        backup,
        fetch: fetch_options(settings.storage),
        sandbox: SandboxOptions {
            // The previous restore's copy, kept between runs: the next one goes onto it.
            keep_at: delta_copy(settings.sandbox, target),
            // A tool call hung past the restore's own deadline is ended, named.
            tool_limit: Some(drcheck_restore::ToolLimit {
                within: deadline,
                whose: "the restore's deadline: rto × abort_factor".into(),
            }),
            ..sandbox_options(settings.sandbox, sandbox_name)
        },
        bins: crate::verify::binaries(settings.sandbox),
        format: target.format,
        jobs: target.restore_jobs,
        globals_key: target.globals_key.clone(),
        wal: target.wal_prefix.as_ref().map(|p| WalReplay {
            prefix: p.clone(),
            target: target.recovery_target.clone(),
            standby: false,
        }),
        delegated: selected.catalog.as_ref().map(|c| c.repository.clone()),
        recovery_target: target.recovery_target.clone(),
        database_hint: target.primary.as_ref().and_then(|p| database_of(p.expose())),
        events,
        max_write_bytes: expansion_ceiling.min(free_for_restore).max(1 << 20),
        expansion_ceiling,
        decrypt: &target.decrypt,
        delta: selected.delta.as_ref().is_some_and(|c| c.delta),
        chain: selected.chain.clone(),
    };
    // Which containment the restore runs under is known before it starts, and reported
    // even when the restore fails.
    learned.info = Some(RestoreInfo {
        profile: settings.sandbox.profile.as_str().into(),
        jobs: target.restore_jobs,
        server_major: None,
        recovered_to: None,
        containment: Some(drcheck_restore::containment_name()),
        manifest: None,
        first_byte_seconds: None,
        decrypted_by: None,
        recovery_target: None,
        target_reached: None,
        privileges_skipped: None,
        delta: selected.delta.as_ref().map(|c| c.why.clone()),
        ..Default::default()
    });
    // What the restore tells as it goes: progress now, the rest into the report.
    let mut heard = Heard::default();
    let count = progress.byte_counter();
    let outcome = {
        let restoring = tokio::time::timeout(deadline, drcheck_restore::run(&job));
        tokio::pin!(restoring);
        loop {
            tokio::select! {
                outcome = &mut restoring => break outcome,
                Some(event) = told.recv() => heard.take(event, fetch_start, count.as_ref()),
            }
        }
    };
    drop(job);
    while let Ok(event) = told.try_recv() {
        heard.take(event, fetch_start, count.as_ref());
    }
    if let Some(d) = heard.sandbox_ready {
        learned.phase("sandbox", d);
    }
    if let (Some(b), Some(f)) = (learned.backup.as_mut(), heard.format.take()) {
        b.format = Some(f);
    }
    // What was hashed while restoring goes into the backup's pin.
    if let Some(b) = learned.backup.as_mut() {
        for (key, hex) in heard.sha256.drain(..) {
            if let Some(p) = b.pinned.iter_mut().find(|p| p.key == key) {
                p.sha256 = Some(hex);
            }
        }
    }
    if let Some(d) = heard.decryption.take() {
        if let Some(b) = learned.backup.as_mut() {
            b.encryption = Some(d.encryption);
        }
        if let Some(r) = learned.info.as_mut() {
            r.decrypted_by = d.decrypted_by;
        }
    }
    let restored = match outcome {
        Ok(Err(e)) => {
            if let Some(info) = learned.info.as_mut()
                && matches!(e, RestoreError::TargetNotReached { .. })
            {
                info.recovery_target = Some(recovery_target_info(&target.recovery_target, random));
                info.target_reached = Some(false);
            }
            return Err(e.into());
        }
        Ok(Ok(r)) => r,
        Err(_) => {
            learned.m.fetch_started = Some(fetch_start);
            learned.m.ready = Some(fetch_start.elapsed());
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
    let fetched = restored.fetch;
    learned.phase("fetch", restored.fetch);
    learned.phase("restore", restored.restore);
    if let Some(c) = restored.combine {
        // Part of the restore (inside its time): the chain made one data directory.
        learned.phase("combine", c);
    }
    learned.m.fetch_started = Some(fetch_start);
    learned.m.fetch_ended = Some(restored.fetch);
    learned.m.first_byte = heard.first_byte;
    if let Some(c) = restored.consistent_at {
        learned.m.consistent = Some(c);
    }
    learned.m.recovered_to = restored.recovered_to.as_deref().and_then(|t| humantime::parse_rfc3339_weak(t).ok());
    if let Some(info) = learned.info.as_mut() {
        info.server_major = restored.sandbox.bin().major;
        info.recovered_to = restored.recovered_to.clone();
        // Replay was asked for a point: say which (physical restores with an archive).
        let replayed = restored.physical && (target.wal_prefix.is_some() || backup.catalog.is_some());
        if replayed {
            info.recovery_target = Some(recovery_target_info(&target.recovery_target, random));
            // The server promotes only once the target is reached (PostgreSQL 13+
            // refuses to end recovery short of it): a started copy reached it.
            if matches!(target.recovery_target, RecoveryTarget::Time(_) | RecoveryTarget::Lsn(_)) {
                info.target_reached = Some(true);
            }
        }
        info.containment = Some(restored.sandbox.containment_name());
        info.manifest = restored.manifest.clone();
        info.replay = restored.replay.clone();
        info.first_byte_seconds = heard.first_byte.map(secs);
        info.privileges_skipped = restored.skipped_privileges;
        info.bytes_fetched = restored.bytes_fetched;
    }
    if let Some(check) = &restored.archive {
        learned.findings.push(archive_finding(check, &selected.gaps));
    }
    progress.phase(&target.name, "checking the restored database");
    let physical = restored.physical;
    let sandbox = restored.sandbox;
    let database = restored.database;
    let pool = match PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(drcheck_validators::guard::restored_session(sandbox.connect_options(&database)))
        .await
    {
        Ok(pool) => pool,
        Err(e) => {
            let why = format!("the restored database does not accept connections: {e}");
            return Err(restored_unreachable(&sandbox, "restore", why).await);
        }
    };
    if let Err(e) = sqlx::query("select 1").execute(&pool).await {
        let why = format!("the restored database does not answer: {e}");
        return Err(restored_unreachable(&sandbox, "restore", why).await);
    }
    let ready = fetch_start.elapsed();
    learned.m.ready = Some(ready);
    pool.close().await;
    // How close the restore came to what the disk can write, and what limited it.
    if let Some(info) = learned.info.as_mut() {
        let written = drcheck_restore::disk_usage(sandbox.root());
        let disk = crate::disk::write_bps(settings.sandbox).await;
        // A base backup's file copy: its data directory less the WAL replay brought (and
        // the spool it came through), over the copy; a dump: all of it, over the restore.
        let (copy_bytes, copied) = if physical {
            let data = sandbox.data_dir();
            (
                drcheck_restore::disk_usage(data).saturating_sub(drcheck_restore::disk_usage(&data.join("pg_wal"))),
                fetched,
            )
        } else {
            (written, ready)
        };
        let write_bps = copy_bytes as f64 / copied.as_secs_f64().max(1e-3);
        let fraction = disk.map(|d| write_bps / d);
        info.bytes_written = Some(written);
        info.write_bps = Some(write_bps);
        info.disk_write_bps = disk;
        info.disk_fraction = fraction;
        info.limited_by = Some(crate::disk::limited_by(fraction, physical, fetched, ready).to_string());
    }
    Ok(Ready { sandbox, database, physical, horizon: restored.horizon })
}

/// Where a `delta_restore` target keeps the copy its next restore goes onto
/// (`state_dir`), when it is one and the directory can be made.
fn delta_copy(sandbox: &SandboxConfig, target: &TargetConfig) -> Option<std::path::PathBuf> {
    if !target.delta_restore {
        return None;
    }
    match drcheck_restore::ensure_follow_dir(&sandbox.state_dir) {
        Ok(dir) => Some(dir.join(format!("{}.delta", target.name))),
        Err(e) => {
            tracing::warn!(target = %target.name, "no place to keep the copy for a delta restore ({e}): restoring in full");
            None
        }
    }
}

/// What a restore told as it went ([`drcheck_restore::RestoreEvent`]).
#[derive(Default)]
pub(crate) struct Heard {
    format: Option<String>,
    /// From the start of the fetch to the first byte received.
    first_byte: Option<Duration>,
    sandbox_ready: Option<Duration>,
    decryption: Option<drcheck_restore::Decryption>,
    /// Each object's SHA-256 as it was read whole, by key.
    sha256: Vec<(String, String)>,
}

impl Heard {
    fn take(&mut self, event: drcheck_restore::RestoreEvent, fetch_start: Instant, count: &dyn Fn(u64)) {
        use drcheck_restore::RestoreEvent as E;
        match event {
            E::Format(f) => self.format = Some(f),
            E::FirstByte(at) => {
                self.first_byte.get_or_insert(at.saturating_duration_since(fetch_start));
            }
            E::Received(n) => count(n),
            E::SandboxReady(d) => self.sandbox_ready = Some(d),
            E::Decryption(d) => self.decryption = Some(d),
            E::Sha256 { key, hex } => self.sha256.push((key, hex)),
        }
    }
}

/// Downloads a single-object backup to `output` with the concurrent fetcher; with
/// `decode`, its compression and encryption undone as a verification undoes them (gpg
/// contained in a sandbox of its own, every layer bounded by `max_expansion`), so what
/// lands is what pg_restore or psql reads. Returns the bytes written and the layers
/// undone, outermost first.
pub(crate) async fn download(
    settings: Settings<'_>,
    target: &TargetConfig,
    backup: &Backup,
    output: &std::path::Path,
    decode: bool,
) -> anyhow::Result<(u64, Vec<String>)> {
    use drcheck_restore::{Copy, copy_in_blocks, read_head, rejoin};
    use drcheck_restore::{Peel, peel};
    let store = open_store(&target.storage, settings.storage).await;
    let shown = store.describe();
    let Some(object) = backup.parts.first() else { anyhow::bail!("{} has no object to download", backup.key) };
    let mut reader = drcheck_restore::fetch_parallel(store, object, fetch_options(settings.storage));
    let mut sandbox = None;
    let mut layers = Vec::new();
    if decode {
        let sb =
            drcheck_restore::Sandbox::create(&sandbox_options(settings.sandbox, format!("{}-decode", new_run_id())))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        let events = drcheck_restore::Events::none();
        let ceiling = ((backup.size as f64 * settings.sandbox.max_expansion).min(u64::MAX as f64) as u64)
            .saturating_add(CLUSTER_ALLOWANCE);
        let layers_of = Peel { decrypt: &target.decrypt, events: &events, expansion_ceiling: ceiling };
        let peeled = async {
            let head = read_head(&mut reader, &shown).await?;
            peel(&layers_of, &sb, head, reader, &shown).await
        }
        .await;
        let (inner, head, undone) = match peeled {
            Ok(p) => p,
            Err(e) => {
                sb.teardown();
                anyhow::bail!("decoding {}: {e}", backup.key);
            }
        };
        layers = undone.iter().map(|l| l.to_string()).collect();
        reader = rejoin(head, inner);
        sandbox = Some(sb);
    }
    let written = match tokio::fs::File::create(output).await {
        Ok(mut file) => match copy_in_blocks(reader, &mut file).await {
            Ok(n) => Ok(n),
            Err(Copy::Read(e)) => {
                Err(anyhow::anyhow!("{} {}: {e}", if decode { "decoding" } else { "downloading" }, backup.key))
            }
            Err(Copy::Write(e)) => Err(anyhow::anyhow!("writing {}: {e}", output.display())),
        },
        Err(e) => Err(anyhow::anyhow!("writing {}: {e}", output.display())),
    };
    if let Some(sb) = sandbox {
        sb.teardown();
    }
    Ok((written?, layers))
}

/// The database a `postgres://` URL names, for physical restores (which hold every database).
pub(crate) fn database_of(url: &str) -> Option<String> {
    let path = url.split('?').next()?.rsplit_once('/')?.1;
    (!path.is_empty() && !path.contains('@')).then(|| path.to_string())
}

/// The `archive` finding of a base backup replayed to the latest point from a store's
/// archive: a gap after the backup's start means no point after it can be recovered
/// from this backup, however well the copy restores — the archive's fault (`failed`).
/// A gap the archiver may still be filling (an upload in flight) proves nothing either
/// way: `skipped`, never `passed`.
pub(crate) fn archive_finding(
    c: &drcheck_restore::ArchiveCheck,
    acknowledged: &[crate::history::Ack],
) -> crate::run_report::ValidatorReport {
    use drcheck_validators::{Finding, Status};
    // A gap the operator acknowledged lost (issue 48): named, not failed — and not
    // passed: points after it stay unrecoverable from this backup.
    let known = c.gap.as_ref().and_then(|g| acknowledged.iter().find(|a| a.covers_segment(g)));
    let f = match (&c.gap, c.in_flight) {
        (Some(gap), _) if let Some(a) = known => Finding::new(
            "archive",
            Status::Skipped,
            format!(
                "the WAL archive has a gap at {gap}, acknowledged lost ({}..{}, {}): recovery from this backup \
                 stops before it — points after it need a base backup taken after the gap",
                a.subject,
                a.subject_to.as_deref().unwrap_or(""),
                a.describe()
            ),
        ),
        (None, _) => Finding::new(
            "archive",
            Status::Passed,
            format!(
                "WAL continuous from the backup's start ({}) to the archive's newest segment ({}): {} segments",
                c.start, c.newest, c.files
            ),
        ),
        (Some(gap), false) => Finding::new(
            "archive",
            Status::Failed,
            format!(
                "the WAL archive has a gap at {gap} (archived up to {}): recovery from this backup stops before it, so no point after it can be recovered",
                c.newest
            ),
        ),
        (Some(gap), true) => Finding::new(
            "archive",
            Status::Skipped,
            format!(
                "WAL segment {gap} is not archived while later ones are, archived within the last {}s: an upload still in flight, or a gap — not told apart yet",
                drcheck_restore::GAP_GRACE.as_secs()
            ),
        ),
    };
    let mut r = crate::run_report::ValidatorReport::from(&f);
    r.measurements.insert("wal_segments".into(), c.files as f64);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(gap: Option<&str>) -> drcheck_restore::ArchiveCheck {
        drcheck_restore::ArchiveCheck {
            start: "000000010000000000000002".into(),
            newest: "000000010000000000000020".into(),
            files: 9,
            gap: gap.map(str::to_string),
            in_flight: false,
        }
    }

    /// Issue 48: a gap the operator acknowledged lost is named, with who and why — not
    /// failed every night, and never passed.
    #[test]
    fn an_acknowledged_gap_is_named_not_failed() {
        let ack = crate::history::Ack {
            id: "a".into(),
            target: "orders".into(),
            kind: crate::history::WAL_GAP.into(),
            subject: "000000010000000000000010".into(),
            subject_to: Some("000000010000000000000011".into()),
            reason: "the archiver's disk died".into(),
            by: "ada".into(),
            at: "2026-12-07T00:00:00.000Z".into(),
        };
        let f = archive_finding(&check(Some("000000010000000000000011")), std::slice::from_ref(&ack));
        assert_eq!(f.status, drcheck_validators::Status::Skipped, "{f:?}");
        assert!(f.detail.contains("acknowledged lost") && f.detail.contains("archiver's disk died"), "{}", f.detail);
        let f = archive_finding(&check(Some("000000010000000000000012")), std::slice::from_ref(&ack));
        assert_eq!(f.status, drcheck_validators::Status::Failed, "a gap outside the acknowledged range: {f:?}");
        assert_eq!(archive_finding(&check(None), &[ack]).status, drcheck_validators::Status::Passed);
    }
}
