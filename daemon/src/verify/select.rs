//! The first stage: where the target's backups come from, which one this run restores,
//! the point in time it replays to, and how much of the window is proven.

use super::stop::{Stop, Stopped, store_stop};
use crate::history::{History, Proven};
use crate::ids::fetch_options;
use crate::ids::{Purpose, Settings, catalog_sandbox, new_run_id};
use crate::measure::Measurements;
use crate::progress::Progress;
use crate::run_report::{BackupInfo, Coverage, ValidatorReport, secs, timestamp};
use drcheck_config::{RecoveryTarget, Selection, SourceConfig, TargetConfig};
use drcheck_restore::Consistency;
use drcheck_restore::backups_newest_first;
use drcheck_restore::{Backup, BackupStore, Catalog, Source, Stage, StoreError, open_source, open_store};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// What selection chose: the backup, where it comes from, and the target as the run
/// replays it (a drawn point in time made a fixed one) — and what it learned ([`Listed`]).
pub(crate) struct Selected {
    pub store: Arc<dyn BackupStore>,
    /// A backup tool's catalog (its backups and the repository that restores them);
    /// `None` for a store's objects.
    pub catalog: Option<Catalog>,
    pub backup: Backup,
    pub target: TargetConfig,
    /// The point in time was drawn in the recovery window (`recovery_target = "random"`).
    pub random: bool,
    /// An incremental backup's earlier links, oldest first (`drcheck_restore::chain_links`).
    pub chain: Vec<Backup>,
    /// WAL segments the operator acknowledged lost (`drcheck archive acknowledge-gap`).
    pub gaps: Vec<crate::history::Ack>,
    /// A `delta_restore` target: whether this restore goes onto the previous copy, as
    /// its restores measured ([`super::delta`]).
    pub delta: Option<super::delta::Choice>,
    pub listed: Listed,
}

/// What selection learned, for the run's verdict whether or not the run goes on: the
/// backup as the store lists it, the window's coverage, the store's own findings, and
/// the instants the objectives are computed from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Listed {
    pub backup: Option<BackupInfo>,
    pub coverage: Option<Coverage>,
    /// The chosen backup already counts as proven in `coverage` (a pass adds it otherwise).
    pub chosen_proven: bool,
    pub recovery_window_start: Option<String>,
    /// After a full listing: the backups the store still holds (the others' proofs go
    /// when the run is recorded — never before).
    pub still_listed: Option<Vec<String>>,
    /// The store's findings (`pinned`, `immutability`): after the validators' in the
    /// report, whether or not the run got to validate.
    pub findings: Vec<ValidatorReport>,
    pub m: Measurements,
}

/// The first stage: the target's source read, a point in time drawn when asked for, the
/// backup chosen (the latest, a random or the least proven one, or `backup_key`), the
/// coverage counted and the backup described.
pub(crate) async fn select_stage(
    settings: Settings<'_>,
    target: &TargetConfig,
    run_id: &str,
    backup_key: Option<&str>,
    history: &History,
    progress: &Progress,
) -> Result<Selected, Stopped<Listed>> {
    let mut listed = Listed::default();
    progress.phase(&target.name, "selecting backup");
    let store = open_store(&target.storage, settings.storage).await;
    let (source, catalog) =
        read_source(settings, target, &store, run_id).await.map_err(|e| store_stop(Stage::Select, e))?;
    // When each backup last passed: what `least-proven` works through and coverage counts.
    let proven = history.proven(&target.name).await;
    // A random point in time is drawn in the recovery window first; from then on the
    // run is that of a fixed target (the same choice of backup, the same replay).
    let drawn_target;
    let drawn = match &target.recovery_target {
        RecoveryTarget::Random(window) => {
            progress.phase(&target.name, "reading the recovery window");
            let (at, reach) =
                draw_point(settings, target, &store, source.as_ref(), catalog.as_ref(), run_id, *window).await?;
            tracing::info!(target = %target.name, at = %timestamp(at), "random point in time drawn");
            listed.m.archive_reach = Some(reach);
            drawn_target = TargetConfig { recovery_target: RecoveryTarget::Time(timestamp(at)), ..target.clone() };
            Some(&drawn_target)
        }
        // A fixed point proves T; the RPO is still the archive's: how far it reaches now.
        RecoveryTarget::Time(_) | RecoveryTarget::Lsn(_) if has_archive(target) => {
            progress.phase(&target.name, "reading the archive's reach");
            match archive_reach(settings, target, &store, source.as_ref(), catalog.as_ref(), run_id).await {
                Ok(Some(reach)) => listed.m.archive_reach = Some(reach.at),
                Ok(None) => {}
                Err(stop) => {
                    tracing::warn!(target = %target.name, reason = %stop.message, "cannot read how far the WAL archive reaches: the RPO is not measured");
                }
            }
            None
        }
        _ => None,
    };
    let random = drawn.is_some();
    let target = drawn.unwrap_or(target);
    let (backup, restorable) = match &catalog {
        Some(c) => {
            let (backup, restorable) =
                select_from_catalog(&c.restorable, target, backup_key, &c.described, proven.as_ref())?;
            listed.recovery_window_start = c
                .restorable
                .iter()
                .find(|b| b.catalog.as_ref().is_some_and(|c| c.status.is_ok()))
                .map(|b| timestamp(b.last_modified));
            (backup, restorable)
        }
        None => {
            let (backup, restorable) = select(store.as_ref(), target, backup_key, proven.as_ref()).await?;
            // Base backups with an archive (`wal_prefix`): the window starts at the oldest
            // one's end (its last part's upload bounds it), as a tool's catalog says.
            if target.wal_prefix.is_some() {
                listed.recovery_window_start = restorable
                    .iter()
                    .flatten()
                    .filter(|b| b.is_physical())
                    .map(|b| b.last_modified)
                    .min()
                    .map(timestamp);
            }
            (backup, restorable)
        }
    };
    let mut vanished: Vec<String> = Vec::new();
    // What the RPO judges: the archive's reach, else the newest backup's time.
    let m = &mut listed.m;
    m.has_archive = has_archive(target);
    m.replays_to_end = matches!(target.recovery_target, RecoveryTarget::Latest);
    let newest = restorable.as_ref().and_then(|r| r.first());
    m.chosen_is_newest = newest.is_some_and(|n| n.key == backup.key);
    if let Some(n) = newest.filter(|n| n.key != backup.key) {
        match n.catalog {
            Some(_) => m.newest_consistent = Some(n.last_modified),
            None => m.newest_uploaded_at = Some(n.last_modified),
        }
    }
    // Ages are taken now, when the store said what exists — never after the restore.
    m.listed_at = Some(SystemTime::now());
    match &backup.catalog {
        // The tool's catalog says when the backup stopped.
        Some(_) => m.consistent = Some(Consistency { at: backup.last_modified, source: "catalog (backup stop)" }),
        // An object's upload time is not its data's: the restore reads that.
        None => m.uploaded_at = Some(backup.last_modified),
    }
    if let (Some(proven), Some(restorable)) = (&proven, &restorable) {
        let (coverage, chosen_proven) =
            coverage(restorable, proven, target.prove_within, &backup.key, SystemTime::now());
        listed.coverage = Some(coverage);
        listed.chosen_proven = chosen_proven;
    }
    let mut described = BackupInfo {
        key: backup.key.clone(),
        size_bytes: backup.size,
        created_at: None,
        created_at_source: None,
        uploaded_at: listed.m.uploaded_at.map(timestamp),
        format: None,
        encryption: None,
        kind: backup.catalog.as_ref().map(|c| c.kind.clone()),
        source: backup.catalog.as_ref().map(|c| c.tool.to_string()),
        pinned: vec![],
    };
    listed.backup = Some(described.clone());
    // A PostgreSQL 17+ incremental backup is restored with its whole chain, found from
    // what the backups' labels and manifests say (a missing link is the backup's failure).
    let chain = match (&catalog, backup.is_physical()) {
        (None, true) => {
            let linked = async {
                let all = match &restorable {
                    Some(all) => all.clone(),
                    None => drcheck_restore::backups_newest_first(
                        &store.list(&target.prefix).await.map_err(|e| store_stop(Stage::Select, e))?,
                    ),
                };
                drcheck_restore::chain_links(store.as_ref(), &all, &backup).await.map_err(Stop::from)
            };
            linked.await.map_err(|stop| Stopped { stop, learned: listed.clone() })?
        }
        _ => Vec::new(),
    };
    if !chain.is_empty() {
        let keys: Vec<&str> = chain.iter().map(|b| b.key.as_str()).collect();
        tracing::info!(target = %target.name, backup = %backup.key, links = %keys.join(" → "), "an incremental backup: its chain is restored with it");
    }
    // What keeps backups from being quietly destroyed: the proven ones still as proven
    // (a full listing only), and the chosen one's protection in the store.
    let now = SystemTime::now();
    let retain = match settings.storage {
        drcheck_config::StorageConfig::S3(s3) => s3.retain_until_at_least,
        _ => None,
    };
    let full_listing = backup_key.is_none() && fixed_time(target).is_none();
    let pins = target.pin;
    let mut wanted: Vec<&Backup> = vec![&backup];
    wanted.extend(chain.iter());
    if let (Some(all), Some(p), true) = (&restorable, &proven, full_listing && pins) {
        wanted.extend(all.iter().filter(|b| p.get(&b.key).is_some_and(|p| p.pin.is_some())));
    }
    // Why pins are not compared this run, when they are not.
    let not_compared = match (&restorable, &proven) {
        _ if !pins => Some("pins are off for this target ([target] pin = false)"),
        _ if !full_listing => {
            Some("not compared: this run did not list every backup (a named backup or a point in time)")
        }
        (None, _) => Some("not compared: this run did not list every backup"),
        (_, None) => Some("not compared: the history cannot be read"),
        _ => None,
    };
    match super::immutable::stored_objects(target, &store, &wanted).await {
        Ok(objects) => {
            if let (Some(all), Some(p), None) = (&restorable, &proven, not_compared) {
                let (compared, changes) = super::immutable::pin_changes(
                    p,
                    all,
                    &objects,
                    retain,
                    super::immutable::counts_additions(target),
                    now,
                );
                listed.findings.push(super::immutable::pinned_finding(compared, &changes));
                vanished = changes.iter().filter(|c| c.vanished).map(|c| c.backup.clone()).collect();
            } else if let Some(why) = not_compared {
                listed.findings.push(super::immutable::pinned_skipped(why));
            }
            let parts = objects.get(&backup.key).cloned().unwrap_or_default();
            let (finding, pinned) =
                super::immutable::immutability(target, settings.storage, &store, &backup, &parts, now).await;
            listed.findings.push(finding);
            if pins {
                described.pinned = pinned;
                // An incremental backup is proven with its chain: every link's objects pinned.
                for link in &chain {
                    described.pinned.extend(objects.get(&link.key).cloned().unwrap_or_default().into_iter().map(|o| {
                        crate::run_report::PinnedPart {
                            key: o.key,
                            size: o.size,
                            etag: o.etag,
                            version_id: None,
                            sha256: None,
                        }
                    }));
                }
                listed.backup = Some(described);
            }
        }
        Err(e) => {
            // The world's: both findings say they could not run.
            let why = format!("cannot list the backups' objects: {e}");
            tracing::warn!(target = %target.name, "{why}");
            listed.findings.push(super::immutable::pinned_skipped(&why));
            let mut f = super::immutable::pinned_skipped(&why);
            f.name = "immutability".into();
            listed.findings.push(f);
        }
    }
    // A full listing says which backups left the store: their proofs go with them —
    // but for those gone before retention could have removed them (named above).
    if let (true, Some(all)) = (full_listing, &restorable) {
        let mut keys: Vec<String> = all.iter().map(|b| b.key.clone()).collect();
        keys.extend(vanished);
        listed.still_listed = Some(keys);
    }
    let gaps = match history.acks(&target.name, crate::history::WAL_GAP).await {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!(target = %target.name, "cannot read the acknowledged WAL gaps: {e:#}");
            Vec::new()
        }
    };
    // Onto the previous copy or not: what the target's own restores measured.
    let delta = match target.delta_restore {
        false => None,
        true => Some(match history.recent(Some(&target.name), 50).await {
            Ok(recent) => super::delta::choose(&super::delta::past_of(&recent)),
            Err(e) => super::delta::Choice {
                delta: true,
                why: format!("onto the previous copy (the history's past restores cannot be read: {e:#})"),
            },
        }),
    };
    Ok(Selected { store, catalog, backup, target: target.clone(), random, chain, gaps, delta, listed })
}

/// Lists the backups of a target, newest first.
pub(crate) async fn list_backups(
    settings: Settings<'_>,
    target: &TargetConfig,
) -> Result<(String, Vec<Backup>), StoreError> {
    let store = open_store(&target.storage, settings.storage).await;
    if let (_, Some(catalog)) = read_source(settings, target, &store, &new_run_id()).await? {
        let mut backups = catalog.restorable;
        backups.reverse();
        return Ok((catalog.described, backups));
    }
    let all = store.list(&target.prefix).await?;
    Ok((store.describe(), settled_newest_first(store.as_ref(), &all).await))
}

/// The store's backups newest first ([`backups_newest_first`]), with the one-file base
/// backups still within the upload grace that their own contents show whole.
pub(crate) async fn settled_newest_first(
    store: &dyn BackupStore,
    all: &[drcheck_restore::BackupObject],
) -> Vec<Backup> {
    let mut backups = backups_newest_first(all);
    let whole = drcheck_restore::whole_by_contents(store, all, SystemTime::now()).await;
    if !whole.is_empty() {
        backups.extend(whole.into_iter().map(|(b, _)| b));
        backups.sort_by(|a, b| b.last_modified.cmp(&a.last_modified).then_with(|| b.key.cmp(&a.key)));
    }
    backups
}

/// The target's source ([`drcheck_restore::open_source`]) and, when it is a backup
/// tool's repository, its catalog — read by the tool itself in a sandbox directory of
/// its own (contained, as for a restore).
pub(crate) async fn read_source(
    settings: Settings<'_>,
    target: &TargetConfig,
    store: &Arc<dyn BackupStore>,
    run_id: &str,
) -> Result<(Box<dyn Source>, Option<Catalog>), StoreError> {
    let source = open_source(target, settings.storage, store.describe(), fetch_options(settings.storage));
    if !source.reads_with_a_tool() {
        return Ok((source, None));
    }
    let host = catalog_sandbox(settings, target, &source.describe(), run_id, Purpose::Catalog)?;
    let catalog = source.catalog(&host, store).await;
    host.teardown();
    let catalog = catalog?;
    Ok((source, catalog))
}

/// The backup a run verifies from a tool's catalog (oldest first): never one the tool
/// marks in error; the latest, a random one finished within the window, or the named one.
pub(crate) fn select_from_catalog(
    all: &[Backup],
    target: &TargetConfig,
    backup_key: Option<&str>,
    store: &str,
    proven: Option<&Proven>,
) -> Result<(Backup, Option<Vec<Backup>>), Stop> {
    if let Some(key) = backup_key {
        return all.iter().find(|b| b.key == key).cloned().map(|b| (b, None)).ok_or_else(|| {
            let known: Vec<&str> = all.iter().rev().take(5).map(|b| b.key.as_str()).collect();
            Stop::usage(
                "select",
                format!("--backup {key:?}: no such backup in the catalog of {store} (newest: {})", known.join(", ")),
            )
        });
    }
    let usable: Vec<&Backup> = all.iter().filter(|b| b.catalog.as_ref().is_some_and(|c| c.status.is_ok())).collect();
    let skipped = all.len() - usable.len();
    if skipped > 0 {
        tracing::warn!(skipped, "backups the catalog marks in error were skipped");
    }
    // A fixed point in time is reached from the newest backup that ended at or before
    // it (PostgreSQL refuses a target before the backup's end).
    let restorable: Vec<Backup> = usable.iter().rev().map(|b| (*b).clone()).collect();
    if let Some(at) = fixed_time(target) {
        return usable
            .iter()
            .rev()
            .find(|b| b.last_modified + STOP_CLOCK <= at)
            .map(|b| ((*b).clone(), Some(restorable.clone())))
            .ok_or_else(|| {
                Stop::failed(
                    "select",
                    format!(
                        "recovery_target {}: no restorable backup in the catalog of {store} ended at or before it \
                     (the oldest ended {})",
                        timestamp(at),
                        usable.first().map(|b| timestamp(b.last_modified)).unwrap_or_else(|| "—".into())
                    ),
                )
            });
    }
    let chosen = pick(&restorable, target.select, proven).cloned();
    chosen.map(|b| (b, Some(restorable))).ok_or_else(|| {
        Stop::failed(
            "select",
            format!("no usable backup in the catalog of {store} ({} listed, {skipped} marked in error)", all.len()),
        )
    })
}

/// A target's coverage right now: its restorable backups (a fresh listing) against their
/// proof records — what the daemon exports for every target from its start, before any
/// run of it.
pub(crate) async fn coverage_now(
    settings: Settings<'_>,
    target: &TargetConfig,
    history: &History,
) -> anyhow::Result<Coverage> {
    let (_, listed) = list_backups(settings, target).await?;
    let restorable: Vec<Backup> =
        listed.into_iter().filter(|b| b.catalog.as_ref().is_none_or(|c| c.status.is_ok())).collect();
    let proven =
        history.proven(&target.name).await.ok_or_else(|| anyhow::anyhow!("the history store cannot be read"))?;
    Ok(coverage(&restorable, &proven, target.prove_within, "", SystemTime::now()).0)
}

/// The backup `select` takes from the restorable ones (newest first): the newest; a
/// random one finished within the window; or the least proven — never proven first
/// (the newest of those), else the one whose last pass is oldest.
pub(crate) fn pick<'a>(newest_first: &'a [Backup], select: Selection, proven: Option<&Proven>) -> Option<&'a Backup> {
    match (select, proven) {
        (Selection::Latest, _) | (Selection::LeastProven, None) => newest_first.first(),
        (Selection::Random(window), _) => {
            let since = SystemTime::now() - window;
            let recent: Vec<&Backup> = newest_first.iter().filter(|b| b.last_modified >= since).collect();
            if recent.is_empty() { newest_first.first() } else { Some(recent[rand_index(recent.len())]) }
        }
        (Selection::LeastProven, Some(p)) => newest_first.iter().find(|b| !p.contains_key(&b.key)).or_else(|| {
            newest_first.iter().min_by_key(|b| p.get(&b.key).map(|p| p.last_passed).unwrap_or(SystemTime::UNIX_EPOCH))
        }),
    }
}

/// How much of the restorable backups passed within `within` as of `now`, and whether
/// `chosen` is already among them.
pub(crate) fn coverage(
    restorable: &[Backup],
    proven: &Proven,
    within: Duration,
    chosen: &str,
    now: SystemTime,
) -> (Coverage, bool) {
    let since = now.checked_sub(within).unwrap_or(SystemTime::UNIX_EPOCH);
    let is_proven = |key: &str| proven.get(key).is_some_and(|p| p.last_passed >= since);
    let n = restorable.iter().filter(|b| is_proven(&b.key)).count() as u64;
    let chosen_proven = restorable.iter().any(|b| b.key == chosen) && is_proven(chosen);
    let backups = restorable
        .iter()
        .map(|b| crate::run_report::BackupProof {
            label: b.key.clone(),
            stopped_at: timestamp(b.last_modified),
            last_proven_at: proven.get(&b.key).map(|p| timestamp(p.last_passed)),
            points_proven: proven.get(&b.key).map(|p| p.points_proven).unwrap_or(0),
        })
        .collect();
    (
        Coverage { restorable: restorable.len() as u64, proven: n, prove_within_seconds: secs(within), backups },
        chosen_proven || !restorable.iter().any(|b| b.key == chosen),
    )
}

/// `restore.recovery_target` of a run's (drawn) target.
pub(crate) fn recovery_target_info(target: &RecoveryTarget, random: bool) -> crate::run_report::RecoveryTargetInfo {
    let (kind, value) = match target {
        RecoveryTarget::Latest | RecoveryTarget::Random(_) => ("latest", None),
        RecoveryTarget::Immediate => ("immediate", None),
        RecoveryTarget::Time(t) => ("time", Some(t.clone())),
        RecoveryTarget::Lsn(l) => ("lsn", Some(l.clone())),
    };
    crate::run_report::RecoveryTargetInfo { kind: kind.into(), value, random }
}

/// Whether the target keeps a WAL archive: `wal_prefix`, or a backup tool's repository.
pub(crate) fn has_archive(target: &TargetConfig) -> bool {
    target.wal_prefix.is_some() || !matches!(target.source, SourceConfig::Objects)
}

/// How far the target's WAL archive replays: its newest transaction end, read from the
/// WAL itself (every source's archive answers the same question), in a sandbox of its own.
pub(crate) async fn archive_reach(
    settings: Settings<'_>,
    target: &TargetConfig,
    store: &Arc<dyn BackupStore>,
    source: &dyn Source,
    catalog: Option<&Catalog>,
    run_id: &str,
) -> Result<Option<drcheck_restore::Reach>, Stop> {
    let described = catalog.map(|c| c.described.clone()).unwrap_or_else(|| source.describe());
    let sandbox = catalog_sandbox(settings, target, &described, run_id, Purpose::Reach)
        .map_err(|e| store_stop(Stage::Select, e))?;
    let bins = crate::verify::binaries(settings.sandbox);
    let reach = match source.archive(catalog) {
        Some(a) => a.reach(&sandbox, store, &bins).await,
        None => Ok(None),
    };
    sandbox.teardown();
    Ok(reach?)
}

/// A moment drawn uniformly in the target's recovery window: from the oldest
/// restorable backup's stop (a base backup's upload for objects: it surely stopped
/// before) — or the start of `window` before now, if later — to the newest transaction
/// end the WAL archive holds (read from the WAL itself), that end excluded (replay must
/// see a commit after the target to stop there). Returns the moment and the archive's end.
pub(crate) async fn draw_point(
    settings: Settings<'_>,
    target: &TargetConfig,
    store: &Arc<dyn BackupStore>,
    source: &dyn Source,
    catalog: Option<&Catalog>,
    run_id: &str,
    window: Option<Duration>,
) -> Result<(SystemTime, SystemTime), Stop> {
    let stops: Vec<SystemTime> = match catalog {
        Some(c) => c
            .restorable
            .iter()
            .filter(|b| b.catalog.as_ref().is_some_and(|c| c.status.is_ok()))
            .map(|b| b.last_modified + STOP_CLOCK)
            .collect(),
        None => {
            let all = store.list(&target.prefix).await.map_err(|e| store_stop(Stage::Select, e))?;
            backups_newest_first(&all)
                .into_iter()
                .filter(|b| b.is_physical())
                .map(|b| b.last_modified + STOP_CLOCK)
                .collect()
        }
    };
    let described = catalog.map(|c| c.described.clone()).unwrap_or_else(|| store.describe());
    let Some(oldest) = stops.iter().min().copied() else {
        return Err(Stop::failed(
            "select",
            format!("no restorable base backup in {described} to draw a point in time after"),
        ));
    };
    let Some(reach) = archive_reach(settings, target, store, source, catalog, run_id).await? else {
        return Err(Stop::incomplete(
            "select",
            format!(
                "the WAL archive of {described} holds no transaction in its newest segments: no recovery window to draw a point in"
            ),
        ));
    };
    let start = match window {
        Some(w) => oldest.max(SystemTime::now().checked_sub(w).unwrap_or(oldest)),
        None => oldest,
    };
    if reach.at <= start {
        let why = format!(
            "the WAL archive of {described} replays to {} (its last transaction, in {}), not past {} ({}): no point in time to draw",
            timestamp(reach.at),
            reach.segment,
            timestamp(start),
            if start == oldest { "the oldest restorable backup's stop" } else { "the window's start" }
        );
        // Judged as `latest` judges it: an archive whose newest commit is older than the
        // RPO has stalled (the backup's failure, exit 1); younger, the database may just
        // have been idle since (nothing to prove, exit 3).
        return Err(match archive_stalled(reach.at, target.rpo, SystemTime::now()) {
            Some(age) => Stop::failed(
                "select",
                format!(
                    "{why}; its newest commit is {} old, over the RPO of {}: the archive has stalled",
                    drcheck_config::format_duration(age),
                    drcheck_config::format_duration(target.rpo)
                ),
            ),
            None => Stop::incomplete("select", why),
        });
    }
    Ok((draw_between(start, reach.at, uuid::Uuid::new_v4().as_u128()), reach.at))
}

/// How old the archive's newest commit is, when that is over the RPO (a stalled archive).
pub(crate) fn archive_stalled(newest_commit: SystemTime, rpo: Duration, now: SystemTime) -> Option<Duration> {
    now.duration_since(newest_commit).ok().filter(|age| *age > rpo)
}

/// A backup's recorded stop bounds its real stop from above only to the second: S3
/// listings give an object's `LastModified` (which bounds a base backup's stop) in whole
/// seconds, truncated, and so does pgBackRest's catalog (`timestamp.stop`). A second is
/// added before comparing it with a recovery target: PostgreSQL refuses a target before
/// the backup's end.
pub(crate) const STOP_CLOCK: Duration = Duration::from_secs(1);

/// A moment in `[start, end)`, whole microseconds (PostgreSQL's resolution), from `seed`.
pub(crate) fn draw_between(start: SystemTime, end: SystemTime, seed: u128) -> SystemTime {
    let span = end.duration_since(start).unwrap_or_default().as_micros().max(1);
    let offset = (seed % span) as u64;
    let at = start + Duration::from_micros(offset);
    let micros = at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_micros() as u64;
    let at = SystemTime::UNIX_EPOCH + Duration::from_micros(micros);
    if at >= end { end - Duration::from_micros(1) } else { at }
}

/// The target's fixed recovery time, if it has one.
pub(crate) fn fixed_time(target: &TargetConfig) -> Option<SystemTime> {
    match &target.recovery_target {
        drcheck_config::RecoveryTarget::Time(t) => humantime::parse_rfc3339_weak(t).ok(),
        _ => None,
    }
}

/// A random index below `n` (uniform enough for picking a backup to prove).
pub(crate) fn rand_index(n: usize) -> usize {
    uuid::Uuid::new_v4().as_u128() as usize % n.max(1)
}

pub(crate) async fn select(
    store: &dyn BackupStore,
    target: &TargetConfig,
    backup_key: Option<&str>,
    proven: Option<&Proven>,
) -> Result<(Backup, Option<Vec<Backup>>), Stop> {
    if let Some(key) = backup_key {
        let all = store.list(key).await.map_err(|e| store_stop(Stage::Select, e))?;
        // A backup named explicitly is taken even while it looks incomplete.
        return drcheck_restore::group_backups(&all).into_iter().find(|b| b.key == key).map(|b| (b, None)).ok_or_else(|| {
            Stop::usage(
                "select",
                format!(
                    "--backup {key:?}: no such backup in {} (`drcheck backups list --target {}` shows what there is)",
                    store.describe(),
                    target.name
                ),
            )
        });
    }
    let all = store.list(&target.prefix).await.map_err(|e| store_stop(Stage::Select, e))?;
    // A fixed point in time, replayed from archived WAL: the newest base backup whose
    // upload had finished by then (so the backup surely ended before it).
    if let (Some(at), Some(_)) = (fixed_time(target), &target.wal_prefix) {
        let candidates: Vec<Backup> = backups_newest_first(&all).into_iter().filter(|b| b.is_physical()).collect();
        return candidates
            .iter()
            .find(|b| b.last_modified + STOP_CLOCK <= at)
            .cloned()
            .map(|b| (b, Some(candidates.clone())))
            .ok_or_else(|| {
                Stop::failed(
                    "select",
                    format!(
                        "recovery_target {}: no base backup under prefix {:?} was complete by then ({} base backups)",
                        timestamp(at),
                        target.prefix,
                        candidates.len()
                    ),
                )
            });
    }
    let restorable = settled_newest_first(store, &all).await;
    pick(&restorable, target.select, proven).cloned().map(|b| (b, Some(restorable.clone()))).ok_or_else(|| {
        if let Some(why) = only_uploading(&all, SystemTime::now()) {
            return Stop::incomplete(
                "select",
                format!("under prefix {:?} in {}: {why}", target.prefix, store.describe()),
            );
        }
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

/// When the only backups listed are base backups that may still be uploading (no
/// `backup_manifest` nor `pg_wal.tar` yet, written within the grace): what to say — not
/// "none a backup" (issue 34: a fresh one-file `-X fetch` backup read so), but that it
/// is taken as whole once the grace has passed, or at once when named.
pub(crate) fn only_uploading(all: &[drcheck_restore::BackupObject], now: SystemTime) -> Option<String> {
    let grace = drcheck_restore::UPLOAD_GRACE;
    let waiting: Vec<(String, Duration)> = drcheck_restore::group_backups(all)
        .into_iter()
        .filter(|b| b.is_physical())
        .map(|b| (b.key, now.duration_since(b.last_modified).unwrap_or_default()))
        .filter(|(_, age)| *age < grace)
        .collect();
    let (key, age) = waiting.iter().min_by_key(|(_, age)| *age)?;
    Some(format!(
        "the only backup{} may still be uploading: {} (last written {}s ago; a base backup without backup_manifest \
         or pg_wal.tar is taken as whole {} after its last write, or at once when its uncompressed base.tar shows it whole: \
         backup_label, its WAL inside, the tar's end) — verify again then, or name it now with --backup {key}",
        if waiting.len() == 1 { "" } else { "s" },
        waiting.iter().map(|(k, _)| crate::out::shown(k)).collect::<Vec<_>>().join(", "),
        age.as_secs(),
        drcheck_config::format_duration(grace),
    ))
}

#[cfg(test)]
mod draw_tests {
    use super::*;

    #[test]
    fn points_are_drawn_inside_the_window_to_the_microsecond() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_micros(1_796_000_000_123_456);
        let end = start + Duration::from_secs(3600);
        let mut seen = std::collections::BTreeSet::new();
        for seed in [0u128, 1, 59, u128::MAX, 3_600_000_000, 3_599_999_999, 1 << 90] {
            let at = draw_between(start, end, seed);
            assert!(at >= start && at < end, "{seed}: {at:?}");
            assert_eq!(at.duration_since(SystemTime::UNIX_EPOCH).unwrap().subsec_nanos() % 1000, 0);
            seen.insert(at);
        }
        assert!(seen.len() >= 5, "{seen:?}");
        // The end itself is never drawn (replay must see a commit after the target).
        assert!(draw_between(start, start + Duration::from_micros(1), 0) == start);
    }

    /// Sandboxes are torn down on threads of their own: a random run lists the catalog,
    /// then reads the archive's reach at once, and a shared name made the second find
    /// the first still being removed ("cannot create sandbox directory …: File exists").
    #[test]
    fn every_sandbox_of_a_run_has_a_name_of_its_own() {
        let run_id = "82a2924a-47e4-4b60-80d0-dc3f5e5a911a";
        let mut names: Vec<String> = Purpose::ALL.iter().map(|p| p.sandbox_name(run_id)).collect();
        // The restore's own sandboxes: the run's id, then `-2`, `-3`… on retries.
        names.extend([run_id.to_string(), format!("{run_id}-2"), format!("{run_id}-3")]);
        let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
    }
}

#[cfg(test)]
mod select_tests {
    use super::*;
    use drcheck_restore::CatalogEntry;

    /// The one target of a config on an S3 storage `r`, with `target` lines.
    fn target_with(target: &str) -> TargetConfig {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            format!(
                "[storage.r]\nkind = \"s3\"\nbucket = \"b\"\nendpoint = \"https://h:1\"\n[[target]]\nname = \"t\"\nstorage = \"r\"\nrto = \"1h\"\nrpo = \"1h\"\n{target}\n"
            ),
        )
        .unwrap();
        drcheck_config::load(&path).unwrap().targets.remove(0)
    }

    /// A pgBackRest target choosing by `select`.
    fn target(select: &str) -> TargetConfig {
        target_with(&format!("source = \"pgbackrest\"\nstanza = \"main\"\nselect = \"{select}\""))
    }

    fn backup(key: &str, age_days: u64, status: &str) -> Backup {
        let at = SystemTime::now() - Duration::from_secs(age_days * 86400);
        Backup {
            key: key.into(),
            size: 1,
            last_modified: at,
            parts: vec![],
            sha256_key: None,
            catalog: Some(CatalogEntry {
                tool: "pgbackrest",
                kind: "full".into(),
                started: at,
                status: if status == "ok" {
                    drcheck_restore::CatalogStatus::Ok
                } else {
                    drcheck_restore::CatalogStatus::Unusable(status.into())
                },
                wal_start: None,
                wal_stop: None,
                tablespaces: vec![],
            }),
        }
    }

    fn proof(last_passed: SystemTime) -> crate::history::Proof {
        crate::history::Proof { last_passed, consistent_at: None, last_run_id: "r".into(), points_proven: 0, pin: None }
    }

    #[test]
    fn the_catalog_selection_skips_errors_and_picks_within_the_window() {
        let all = [backup("old", 30, "ok"), backup("a", 5, "ok"), backup("b", 2, "ok"), backup("broken", 1, "error")];
        let latest = select_from_catalog(&all, &target("latest"), None, "repo", None).unwrap_or_else(|_| panic!()).0;
        assert_eq!(latest.key, "b", "never the one in error");
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let b = select_from_catalog(&all, &target("random:7d"), None, "repo", None).unwrap_or_else(|_| panic!()).0;
            seen.insert(b.key);
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["a", "b"], "random within the window, never old or broken");
        let named =
            select_from_catalog(&all, &target("latest"), Some("old"), "repo", None).unwrap_or_else(|_| panic!()).0;
        assert_eq!(named.key, "old");
        assert!(select_from_catalog(&all, &target("latest"), Some("nope"), "repo", None).is_err());
        let none = [backup("broken", 1, "error")];
        let Err(stop) = select_from_catalog(&none, &target("latest"), None, "repo", None) else { panic!() };
        assert!(stop.message.contains("1 marked in error"), "{}", stop.message);
        let Err(stop) = select_from_catalog(&all, &target("latest"), Some("nope"), "repo", None) else { panic!() };
        assert!(stop.usage, "a --backup naming nothing is the caller's mistake: {}", stop.message);
    }

    /// Issue 22: a fixed recovery time between two backups restores the one that ended
    /// before it — not the newest, which PostgreSQL would refuse to replay back to it.
    #[test]
    fn a_fixed_time_target_picks_the_newest_backup_that_ended_before_it() {
        let all = [backup("old", 30, "ok"), backup("a", 5, "ok"), backup("b", 2, "ok")];
        let between = timestamp(SystemTime::now() - Duration::from_secs(3 * 86400));
        let mut t = target("latest");
        t.recovery_target = drcheck_config::RecoveryTarget::Time(between);
        let chosen = select_from_catalog(&all, &t, None, "repo", None).unwrap_or_else(|s| panic!("{}", s.message)).0;
        assert_eq!(chosen.key, "a");
        t.recovery_target =
            drcheck_config::RecoveryTarget::Time(timestamp(SystemTime::now() - Duration::from_secs(60 * 86400)));
        let Err(stop) = select_from_catalog(&all, &t, None, "repo", None) else { panic!() };
        assert!(stop.message.contains("no restorable backup") && !stop.usage, "{}", stop.message);
    }

    /// Issue 25: `least-proven` proves never-proven backups first (the newest of them),
    /// then the one whose last pass is oldest; coverage counts passes within the window.
    #[test]
    fn least_proven_works_through_retention_and_coverage_counts_it() {
        let all = [backup("c1", 3, "ok"), backup("c2", 2, "ok"), backup("c3", 1, "ok"), backup("bad", 0, "error")];
        let t = target("least-proven");
        let mut proven = Proven::new();
        let mut order = Vec::new();
        let now = SystemTime::now();
        for i in 0..4u64 {
            let (b, restorable) =
                select_from_catalog(&all, &t, None, "repo", Some(&proven)).unwrap_or_else(|_| panic!());
            let (c, _) = coverage(restorable.as_deref().unwrap(), &proven, t.prove_within, &b.key, now);
            assert_eq!((c.restorable, c.proven), (3, i.min(3)), "before run {i}");
            order.push(b.key.clone());
            proven.insert(b.key, proof(now - Duration::from_secs(3600 * (10 - i))));
        }
        assert_eq!(order, ["c3", "c2", "c1", "c3"], "each once, newest first, then the oldest-proven");
        // A pass older than prove_within no longer counts.
        proven.insert("c2".into(), proof(now - t.prove_within - Duration::from_secs(1)));
        let (c, chosen_proven) = coverage(&all[..3], &proven, t.prove_within, "c2", now);
        assert_eq!((c.restorable, c.proven, chosen_proven), (3, 2, false));
        // Without a history, least-proven is the newest.
        let (b, _) = select_from_catalog(&all, &t, None, "repo", None).unwrap_or_else(|_| panic!());
        assert_eq!(b.key, "c3");
    }

    /// A target reading a store's objects under `orders/`.
    fn objects_target(extra: &str) -> TargetConfig {
        target_with(&format!("prefix = \"orders/\"\n{extra}"))
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }

    /// Issue 35: selection over a store's objects, on an in-memory store — no server.
    #[test]
    fn the_objects_selection_reads_the_store_newest_first_and_least_proven_first() {
        let store = drcheck_restore::MemStore::new();
        let now = SystemTime::now();
        let day = Duration::from_secs(86_400);
        for (key, age) in [("orders/a.dump", 3), ("orders/b.dump", 2), ("orders/c.dump", 1)] {
            store.put(key, &b"PGDMP"[..], now - day * age);
        }
        store.put("elsewhere/z.dump", &b"PGDMP"[..], now);
        let (latest, restorable) =
            block_on(select(&store, &objects_target(""), None, None)).unwrap_or_else(|s| panic!("{}", s.message));
        assert_eq!(latest.key, "orders/c.dump");
        let keys: Vec<String> = restorable.unwrap().into_iter().map(|b| b.key).collect();
        assert_eq!(keys, ["orders/c.dump", "orders/b.dump", "orders/a.dump"], "newest first, under the prefix only");
        // Least proven: the one never proven, though it is the oldest.
        let proven: Proven =
            [("orders/c.dump".to_string(), proof(now)), ("orders/b.dump".to_string(), proof(now - day))].into();
        let target = objects_target("select = \"least-proven\"");
        let (chosen, _) =
            block_on(select(&store, &target, None, Some(&proven))).unwrap_or_else(|s| panic!("{}", s.message));
        assert_eq!(chosen.key, "orders/a.dump");
        // Named: taken as it is; a name that is not there is the user's mistake.
        let (named, _) =
            block_on(select(&store, &target, Some("orders/b.dump"), None)).unwrap_or_else(|s| panic!("{}", s.message));
        assert_eq!(named.key, "orders/b.dump");
        let Err(stop) = block_on(select(&store, &target, Some("orders/nope.dump"), None)) else { panic!() };
        assert!(stop.usage && stop.message.contains("no such backup in memory"), "{}", stop.message);
        // Nothing that is a backup: failed, saying what was there.
        let empty = drcheck_restore::MemStore::new();
        empty.put("orders/c.dump.sha256", &b"0123"[..], now);
        let Err(stop) = block_on(select(&empty, &target, None, None)) else { panic!() };
        assert!(stop.message.contains("1 objects, none a backup"), "{}", stop.message);
        // A base backup still being uploaded is not "none a backup": the run could not
        // complete yet (exit 3), and says when it will be taken.
        let uploading = drcheck_restore::MemStore::new();
        uploading.put("orders/phys/b1/base.tar.gz", &b"tar"[..], now - Duration::from_secs(30));
        let Err(stop) = block_on(select(&uploading, &target, None, None)) else { panic!() };
        assert_eq!(stop.result, crate::run_report::RunResult::Error, "{}", stop.message);
        assert!(stop.message.contains("phys/b1/"), "{}", stop.message);
    }
}
