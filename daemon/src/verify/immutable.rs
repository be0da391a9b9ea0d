//! What keeps a backup from being quietly destroyed (issue 37), read from the store
//! without reading a byte of the backup again:
//!
//! - `immutability`: the bucket's versioning and Object Lock, and each object of the
//!   verified backup's retention (one HEAD each) — required by `[storage] require_lock`,
//!   else reported as a note (`skipped`: nothing was required of it).
//! - `pinned`: every proven backup's objects as they were when proven (key, size, ETag,
//!   version id) against what this run's listing sees — a proven backup whose bytes
//!   changed, or that vanished before retention could have removed it, fails.

use crate::history::Proven;
use crate::run_report::{PinnedPart, ValidatorReport, timestamp};
use drcheck_config::{LockMode, StorageConfig, TargetConfig, format_duration};
use drcheck_restore::{Backup, BackupObject, BackupStore, ObjectLock, StoreError};
use drcheck_validators::{Finding, Status, enforce_coverage};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// At most this many of a backup's objects are asked for their lock (one HEAD each).
const MAX_HEADS: usize = 1000;
/// At most this many problems are named in a detail.
const NAMED: usize = 8;

/// A retention period as people write it: whole days as `35d`.
pub(crate) fn in_days(d: Duration) -> String {
    match d.as_secs() {
        s if s > 0 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        _ => format_duration(d),
    }
}

/// Whether a file added to a proven backup counts as a change: for a store's own
/// backups; a backup tool adds files to a backup's directory itself.
pub(crate) fn counts_additions(target: &TargetConfig) -> bool {
    drcheck_restore::tool_files_root(target).is_none()
}

/// The objects each backup is stored as, by backup key: a store's backups carry their
/// parts; a tool's are listed once under its backups' root and grouped by directory.
pub(crate) async fn stored_objects(
    target: &TargetConfig,
    store: &Arc<dyn BackupStore>,
    backups: &[&Backup],
) -> Result<HashMap<String, Vec<BackupObject>>, StoreError> {
    let mut out: HashMap<String, Vec<BackupObject>> = HashMap::new();
    let Some(root) = drcheck_restore::tool_files_root(target) else {
        for b in backups {
            out.insert(b.key.clone(), b.parts.clone());
        }
        return Ok(out);
    };
    let wanted: std::collections::HashSet<&str> = backups.iter().map(|b| b.key.as_str()).collect();
    for o in store.list(&root).await? {
        let Some(rest) = o.key.strip_prefix(&root) else { continue };
        let Some((dir, _)) = rest.split_once('/') else { continue };
        if wanted.contains(dir) {
            out.entry(dir.to_string()).or_default().push(o);
        }
    }
    Ok(out)
}

/// The `immutability` finding for the verified `backup` (stored as `objects`), and its
/// objects as pinned (with their version ids where the store keeps versions).
pub(crate) async fn immutability(
    target: &TargetConfig,
    storage: &StorageConfig,
    store: &Arc<dyn BackupStore>,
    backup: &Backup,
    objects: &[BackupObject],
    now: SystemTime,
) -> (ValidatorReport, Vec<PinnedPart>) {
    let plain = |o: &BackupObject| PinnedPart {
        key: o.key.clone(),
        size: o.size,
        etag: o.etag.clone(),
        version_id: None,
        sha256: None,
    };
    let StorageConfig::S3(s3) = storage else {
        return (
            finding(
                Status::Skipped,
                "a filesystem store has no versioning or object lock: nothing keeps a backup there from being \
                 replaced or deleted"
                    .into(),
                BTreeMap::new(),
            ),
            objects.iter().map(plain).collect(),
        );
    };
    let required = s3.require_lock;
    let unknown = |e: StoreError| {
        let status = if required.is_some() { Status::Error } else { Status::Skipped };
        finding(status, format!("cannot read how the store protects the backup: {e}"), BTreeMap::new())
    };
    let protection = match store.protection().await {
        Ok(Some(p)) => p,
        Ok(None) => return (finding(Status::Skipped, "the store keeps no locks".into(), BTreeMap::new()), vec![]),
        Err(e) => return (unknown(e), objects.iter().map(plain).collect()),
    };
    let mut locks: Vec<(&BackupObject, ObjectLock)> = Vec::new();
    for o in objects.iter().take(MAX_HEADS) {
        match store.object_lock(&o.key).await {
            Ok(Some(l)) => locks.push((o, l)),
            Ok(None) => {}
            Err(e) => return (unknown(e), objects.iter().map(plain).collect()),
        }
    }
    let pinned: Vec<PinnedPart> = objects
        .iter()
        .map(|o| {
            let version_id = locks.iter().find(|(p, _)| p.key == o.key).and_then(|(_, l)| l.version_id.clone());
            PinnedPart { version_id, ..plain(o) }
        })
        .collect();
    let judged = judge(&protection, &locks, required, s3.retain_until_at_least, backup.last_modified, now);
    let versioned = (!locks.is_empty()).then(|| locks.iter().any(|(_, l)| l.version_id.is_some()));
    let mut facts = protection.describe(versioned);
    let n = locks.len();
    facts.push_str(&format!("; {} of {n} objects locked", judged.locked_now));
    if let Some((mode, until)) = &judged.earliest {
        facts.push_str(&format!(" ({mode} until {} at the earliest)", timestamp(*until)));
    }
    if judged.legal_holds > 0 {
        facts.push_str(&format!("; {} under legal hold", judged.legal_holds));
    }
    if objects.len() > MAX_HEADS {
        facts.push_str(&format!("; the first {MAX_HEADS} of {} objects asked", objects.len()));
    }
    let mut m = BTreeMap::new();
    m.insert("objects".into(), n as f64);
    m.insert("objects_locked".into(), judged.locked_now as f64);
    m.insert("locked".into(), f64::from(u8::from(n > 0 && judged.locked_now == n)));
    if let Some((_, until)) = judged.earliest.filter(|_| judged.locked_now == n && n > 0) {
        m.insert("lock_remaining_seconds".into(), until.duration_since(now).unwrap_or_default().as_secs_f64());
    }
    let report = match required {
        None => finding(
            Status::Skipped,
            format!("a note, nothing required (set [storage.{}] require_lock to require it): {facts}", target.storage),
            m,
        ),
        Some(_) if judged.problems.is_empty() && n > 0 => {
            finding(Status::Passed, format!("{} required and held: {facts}", judged.requirement), m)
        }
        Some(_) if n == 0 => finding(
            Status::Failed,
            format!("{} required, but the backup has no objects to lock: {facts}", judged.requirement),
            m,
        ),
        Some(_) => {
            let named: Vec<&str> = judged.problems.iter().take(NAMED).map(String::as_str).collect();
            let more = judged.problems.len().saturating_sub(NAMED);
            finding(
                Status::Failed,
                format!(
                    "{} required: {}{}; {facts}",
                    judged.requirement,
                    named.join("; "),
                    if more > 0 { format!(" (and {more} more)") } else { String::new() }
                ),
                m,
            )
        }
    };
    (report, pinned)
}

/// A store check's finding, through the same coverage rule as every validator's: a pass
/// says what it covered (`covered_objects`, the objects asked).
fn finding(status: Status, detail: String, measurements: BTreeMap<String, f64>) -> ValidatorReport {
    let mut f = Finding::new("immutability", status, detail);
    if let Some(n) = measurements.get("objects").copied() {
        f = f.covered("objects", n as u64);
    }
    f.measurements.extend(measurements);
    ValidatorReport::from(&enforce_coverage(f))
}

/// What the locks say against what is required.
#[derive(Debug, Default)]
struct Judged {
    locked_now: usize,
    legal_holds: usize,
    /// The lock that ends first, when every object is locked.
    earliest: Option<(String, SystemTime)>,
    requirement: String,
    /// Each object that falls short, named.
    problems: Vec<String>,
}

fn judge(
    protection: &drcheck_restore::Protection,
    locks: &[(&BackupObject, ObjectLock)],
    required: Option<LockMode>,
    at_least: Option<Duration>,
    backup_at: SystemTime,
    now: SystemTime,
) -> Judged {
    let mut j = Judged::default();
    let need_until = at_least.map(|d| backup_at + d).filter(|t| *t > now).unwrap_or(now);
    if let Some(mode) = required {
        j.requirement = match at_least {
            Some(d) => format!(
                "{} lock until {} ({} past the backup's time {})",
                mode.as_s3(),
                timestamp(need_until),
                in_days(d),
                timestamp(backup_at)
            ),
            None => format!("{} lock", mode.as_s3()),
        };
    }
    let mut all_locked = !locks.is_empty();
    for (o, l) in locks {
        j.legal_holds += usize::from(l.legal_hold);
        let live = l.mode.as_ref().zip(l.retain_until).filter(|(_, until)| *until > now);
        match live {
            Some((mode, until)) => {
                j.locked_now += 1;
                if j.earliest.as_ref().is_none_or(|(_, e)| until < *e) {
                    j.earliest = Some((mode.clone(), until));
                }
            }
            None => all_locked = false,
        }
        let Some(want) = required else { continue };
        let key = crate::out::shown(&o.key);
        match live {
            None if l.legal_hold => j.problems.push(format!(
                "{key}: under legal hold only (anyone allowed s3:PutObjectLegalHold can lift it), no retention"
            )),
            None if !protection.lock_enabled => {
                j.problems.push(format!("{key}: not locked (the bucket has no Object Lock)"))
            }
            None => j.problems.push(format!("{key}: not locked")),
            Some((mode, _)) if want == LockMode::Compliance && mode != "COMPLIANCE" => j
                .problems
                .push(format!("{key}: {mode} (removable with s3:BypassGovernanceRetention), COMPLIANCE required")),
            Some((_, until)) if until < need_until => j.problems.push(format!(
                "{key}: locked until {} only, {} required",
                timestamp(until),
                timestamp(need_until)
            )),
            Some(_) => {}
        }
    }
    if !all_locked {
        j.earliest = None;
    }
    j
}

/// One proven backup whose stored objects are not what was proven.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PinChange {
    pub backup: String,
    /// What changed, part by part (or that the backup is gone).
    pub what: Vec<String>,
    /// The backup is no longer listed (its proof is kept: the finding stays until
    /// retention would have removed it).
    pub vanished: bool,
}

/// Every proven backup with a pin against the listing (`listed`: the backups a full
/// listing found, with `objects` their stored objects): changed bytes, removed parts,
/// added parts when `additions` (a store's own backups; a tool writes files into a
/// backup's directory after it — barman-cloud's `keep` annotations), or the backup gone
/// while it is not the oldest — retention removes the oldest first — or younger than
/// `retain_at_least`. Returns how many pins were compared and what changed.
pub(crate) fn pin_changes(
    proven: &Proven,
    listed: &[Backup],
    objects: &HashMap<String, Vec<BackupObject>>,
    retain_at_least: Option<Duration>,
    additions: bool,
    now: SystemTime,
) -> (usize, Vec<PinChange>) {
    let oldest_listed = listed.iter().map(|b| b.last_modified).min();
    let mut compared = 0;
    let mut changes = Vec::new();
    let mut keys: Vec<&String> = proven.keys().collect();
    keys.sort();
    for key in keys {
        let Some(pin) = proven[key].pin.as_ref().filter(|p| !p.parts.is_empty()) else { continue };
        compared += 1;
        let pinned_at = pin.at.as_deref().and_then(|t| humantime::parse_rfc3339_weak(t).ok());
        let Some(now_parts) = listed.iter().any(|b| &b.key == key).then(|| objects.get(key)).flatten() else {
            let older_than_all = match (pinned_at, oldest_listed) {
                (Some(at), Some(oldest)) => at < oldest,
                // Nothing left at all, or no time pinned: not retention's doing.
                _ => false,
            };
            let within = match (pinned_at, retain_at_least) {
                (Some(at), Some(d)) => at + d > now,
                _ => false,
            };
            if !older_than_all || within {
                let why = if within {
                    format!(
                        "gone from the store before its retention ({} past {})",
                        in_days(retain_at_least.unwrap_or_default()),
                        pin.at.clone().unwrap_or_default()
                    )
                } else {
                    "gone from the store while older backups are still there (retention removes the oldest first)"
                        .to_string()
                };
                changes.push(PinChange { backup: key.clone(), what: vec![why], vanished: true });
            }
            continue;
        };
        let mut what = Vec::new();
        let by_key: HashMap<&str, &BackupObject> = now_parts.iter().map(|o| (o.key.as_str(), o)).collect();
        for p in &pin.parts {
            let shown = crate::out::shown(&p.key);
            match by_key.get(p.key.as_str()) {
                None => what.push(format!("{shown}: removed")),
                Some(o) if o.size != p.size => what.push(format!("{shown}: {} bytes, {} when proven", o.size, p.size)),
                Some(o) if o.etag.is_some() && p.etag.is_some() && o.etag != p.etag => what.push(format!(
                    "{shown}: ETag {}, {} when proven",
                    o.etag.as_deref().unwrap_or_default(),
                    p.etag.as_deref().unwrap_or_default()
                )),
                Some(_) => {}
            }
        }
        for o in now_parts.iter().filter(|_| additions) {
            if !pin.parts.iter().any(|p| p.key == o.key) {
                what.push(format!("{}: added since proven", crate::out::shown(&o.key)));
            }
        }
        if !what.is_empty() {
            changes.push(PinChange { backup: key.clone(), what, vanished: false });
        }
    }
    (compared, changes)
}

/// The `pinned` finding of a run that compared nothing, and why.
pub(crate) fn pinned_skipped(why: &str) -> ValidatorReport {
    ValidatorReport::from(&enforce_coverage(Finding::new("pinned", Status::Skipped, why)))
}

/// The `pinned` finding from [`pin_changes`].
pub(crate) fn pinned_finding(compared: usize, changes: &[PinChange]) -> ValidatorReport {
    let mut m = BTreeMap::new();
    m.insert("pinned".into(), compared as f64);
    m.insert("changed".into(), changes.len() as f64);
    let (status, detail) = if compared == 0 {
        (Status::Skipped, "no proven backup is pinned yet (a passing run pins the backup it proved)".to_string())
    } else if changes.is_empty() {
        (Status::Passed, format!("{compared} proven backups are as they were proven (each object's size and ETag)"))
    } else {
        let named: Vec<String> = changes
            .iter()
            .take(NAMED)
            .map(|c| {
                let parts: Vec<&str> = c.what.iter().take(NAMED).map(String::as_str).collect();
                format!("{}: {}", crate::out::shown(&c.backup), parts.join(", "))
            })
            .collect();
        (
            Status::Failed,
            format!(
                "{} of {compared} proven backups changed since they were proven — {}",
                changes.len(),
                named.join("; ")
            ),
        )
    };
    let mut f = Finding::new("pinned", status, detail).covered("backups", compared as u64);
    f.measurements.extend(m);
    ValidatorReport::from(&enforce_coverage(f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Pin, Proof};

    fn obj(key: &str, size: u64, etag: &str, at: u64) -> BackupObject {
        BackupObject {
            key: key.into(),
            size,
            last_modified: SystemTime::UNIX_EPOCH + Duration::from_secs(at),
            etag: Some(etag.into()),
        }
    }

    fn backup(key: &str, parts: Vec<BackupObject>) -> Backup {
        Backup {
            key: key.into(),
            size: parts.iter().map(|p| p.size).sum(),
            last_modified: parts.iter().map(|p| p.last_modified).max().unwrap(),
            parts,
            sha256_key: None,
            catalog: None,
        }
    }

    fn proof(at: u64, parts: &[&BackupObject]) -> Proof {
        Proof {
            last_passed: SystemTime::UNIX_EPOCH + Duration::from_secs(at + 10),
            consistent_at: None,
            last_run_id: "r".into(),
            points_proven: 0,
            pin: Some(Pin {
                at: Some(timestamp(SystemTime::UNIX_EPOCH + Duration::from_secs(at))),
                parts: parts
                    .iter()
                    .map(|o| PinnedPart {
                        key: o.key.clone(),
                        size: o.size,
                        etag: o.etag.clone(),
                        version_id: None,
                        sha256: None,
                    })
                    .collect(),
            }),
        }
    }

    #[test]
    fn a_changed_part_and_a_vanished_backup_are_named_retention_is_not() {
        let day = 86_400;
        let (a, b, c) =
            (obj("d/a.dump", 10, "e1", day), obj("d/b.dump", 20, "e2", 2 * day), obj("d/c.dump", 30, "e3", 3 * day));
        let mut proven = Proven::new();
        proven.insert("d/a.dump".into(), proof(day, &[&a]));
        proven.insert("d/b.dump".into(), proof(2 * day, &[&b]));
        proven.insert("d/c.dump".into(), proof(3 * day, &[&c]));
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10 * day);
        // As proven: nothing to say.
        let listed = vec![
            backup("d/c.dump", vec![c.clone()]),
            backup("d/b.dump", vec![b.clone()]),
            backup("d/a.dump", vec![a.clone()]),
        ];
        let objects: HashMap<_, _> = listed.iter().map(|b| (b.key.clone(), b.parts.clone())).collect();
        assert_eq!(pin_changes(&proven, &listed, &objects, None, true, now), (3, vec![]));
        // A file added to a proven backup's directory: a change for a store's own backups,
        // the tool's doing for a repository's.
        let mut added = objects.clone();
        added.get_mut("d/a.dump").unwrap().push(obj("d/a.dump/annotations/keep", 4, "k", 9 * day));
        assert_eq!(pin_changes(&proven, &listed, &added, None, true, now).1.len(), 1);
        assert_eq!(pin_changes(&proven, &listed, &added, None, false, now), (3, vec![]));
        // The oldest gone (retention), the middle one replaced: only the replacement.
        let b2 = obj("d/b.dump", 20, "forged", 9 * day);
        let listed = vec![backup("d/c.dump", vec![c.clone()]), backup("d/b.dump", vec![b2])];
        let objects: HashMap<_, _> = listed.iter().map(|b| (b.key.clone(), b.parts.clone())).collect();
        let (n, changes) = pin_changes(&proven, &listed, &objects, None, true, now);
        assert_eq!(n, 3);
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(changes[0].what[0].contains("ETag forged, e2 when proven"), "{changes:?}");
        // …unless retention was promised for longer: then the oldest's removal is named too.
        let (_, changes) = pin_changes(&proven, &listed, &objects, Some(Duration::from_secs(35 * day)), true, now);
        assert!(
            changes.iter().any(|c| c.backup == "d/a.dump" && c.vanished && c.what[0].contains("before its retention")),
            "{changes:?}"
        );
        // The newest deleted while older ones remain: not retention.
        let listed = vec![backup("d/b.dump", vec![b.clone()]), backup("d/a.dump", vec![a.clone()])];
        let objects: HashMap<_, _> = listed.iter().map(|b| (b.key.clone(), b.parts.clone())).collect();
        let (_, changes) = pin_changes(&proven, &listed, &objects, None, true, now);
        assert_eq!(changes.len(), 1);
        assert!(changes[0].vanished && changes[0].backup == "d/c.dump", "{changes:?}");
        let f = pinned_finding(3, &changes);
        assert_eq!(f.status, Status::Failed);
        assert!(f.detail.contains("d/c.dump") && f.detail.contains("older backups are still there"), "{}", f.detail);
        assert_eq!(pinned_finding(0, &[]).status, Status::Skipped, "nothing pinned is not a pass");
    }

    #[test]
    fn a_lock_is_judged_by_mode_and_date() {
        let day = Duration::from_secs(86_400);
        let now = SystemTime::UNIX_EPOCH + 100 * day;
        let backup_at = now - day;
        let o = obj("d/a.dump", 1, "e", 99 * 86_400);
        let lock = |mode: Option<&str>, until: Option<SystemTime>| ObjectLock {
            size: 1,
            etag: None,
            version_id: Some("v1".into()),
            mode: mode.map(str::to_string),
            retain_until: until,
            legal_hold: false,
        };
        let p = drcheck_restore::Protection { lock_enabled: true, ..Default::default() };
        let long = [(&o, lock(Some("COMPLIANCE"), Some(now + 40 * day)))];
        let j = judge(&p, &long, Some(LockMode::Compliance), Some(35 * day), backup_at, now);
        assert!(j.problems.is_empty(), "{:?}", j.problems);
        assert_eq!(j.locked_now, 1);
        // Governance does not satisfy compliance; a short lock names both dates.
        let gov = [(&o, lock(Some("GOVERNANCE"), Some(now + 40 * day)))];
        let j = judge(&p, &gov, Some(LockMode::Compliance), None, backup_at, now);
        assert!(j.problems[0].contains("COMPLIANCE required"), "{:?}", j.problems);
        let short = [(&o, lock(Some("COMPLIANCE"), Some(now + day)))];
        let j = judge(&p, &short, Some(LockMode::Governance), Some(35 * day), backup_at, now);
        assert!(
            j.problems[0].contains("locked until") && j.problems[0].contains(&timestamp(backup_at + 35 * day)),
            "{:?}",
            j.problems
        );
        // An expired lock is no lock.
        let expired = [(&o, lock(Some("COMPLIANCE"), Some(now - day)))];
        let j = judge(&p, &expired, Some(LockMode::Governance), None, backup_at, now);
        assert_eq!(j.locked_now, 0);
        assert!(j.problems[0].ends_with("not locked"), "{:?}", j.problems);
        // Without a requirement, only facts.
        assert!(judge(&p, &expired, None, None, backup_at, now).problems.is_empty());
    }
}
