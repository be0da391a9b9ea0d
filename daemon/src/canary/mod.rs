//! The canary (`drcheck canary`, `[daemon] canary`): drcheck proves it would notice a
//! bad backup. It takes the newest backup a verification proved, copies it into its own
//! scratch directory — reading the store, never writing it — and makes defective copies
//! there, each one a store of its own that the whole pipeline verifies:
//!
//! - `flipped_page` (a base backup): one byte of one live row changed in the data page
//!   of the largest user table of `base.tar[.gz]`, its manifest entry made to agree (as
//!   a page corrupted on the primary and copied faithfully would be);
//! - `missing_segment` (a base backup with a WAL archive): the first archived segment
//!   after the backup's own WAL left out, later ones kept;
//! - `changed_row` (a dump): the dump restored into a sandbox, one row of the largest
//!   table changed there (triggers off), dumped again by the sandbox's own `pg_dump` and
//!   dated as the original.
//!
//! Each must end `failed`, named by the validator that owns the defect. The runs use a
//! history store of their own inside the scratch directory: they never become the
//! target's runs, proofs, pins, coverage or freshness.

mod finish;
pub(crate) use finish::finish;

use crate::canary_report::{CanaryReport, DefectOutcome, DefectVerdict, owners};
use crate::history::History;
use crate::ids::Settings;
use crate::ids::new_run_id;
use crate::progress::Progress;
use crate::run_report::{RunReport, RunResult};
use crate::verify::{restore, select};
use anyhow::{Context as _, anyhow};
use drcheck_config::{
    Config, FormatSetting, RecoveryTarget, Secret, Selection, SourceConfig, StorageConfig, TargetConfig,
};
use drcheck_restore::{Backup, BackupObject, BackupStore, open_store};
use drcheck_validators::Status;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;
use tokio_util::sync::CancellationToken;

/// Makes the target's defective copies and verifies each. Never writes to the store;
/// its scratch directory is removed when it ends.
pub(crate) async fn run_canary(
    config: &Config,
    target: &TargetConfig,
    history: &History,
    cancel: &CancellationToken,
) -> CanaryReport {
    let mut report = CanaryReport::new(&target.name);
    tracing::info!(target = %target.name, canary_id = %report.canary_id, "canary started");
    match canary_steps(config, target, history, cancel, &mut report).await {
        Ok(()) => {}
        Err(Halt::Skip(why)) => report.skipped = Some(why),
        Err(Halt::Fail(why)) => report.error = Some(why),
    }
    report.conclude();
    tracing::info!(target = %target.name, canary_id = %report.canary_id, result = %report.result, "{}", report.summary());
    report
}

/// Why a canary stopped before its defects: nothing it can do for this target (no
/// proven backup yet, a backup tool's repository), or a failure of the world's.
enum Halt {
    Skip(String),
    Fail(String),
}

impl From<anyhow::Error> for Halt {
    fn from(e: anyhow::Error) -> Self {
        Halt::Fail(format!("{e:#}"))
    }
}

async fn canary_steps(
    config: &Config,
    target: &TargetConfig,
    history: &History,
    cancel: &CancellationToken,
    report: &mut CanaryReport,
) -> Result<(), Halt> {
    if target.source != SourceConfig::Objects {
        return Err(Halt::Skip(format!(
            "target {} reads a backup tool's repository ({}): the canary makes defective copies of a store's own backups only",
            target.name,
            target.source.name()
        )));
    }
    // The newest backup a verification proved that the store still holds.
    let proofs = history.proofs(&target.name).await.context("cannot read which backups were proven")?;
    if proofs.is_empty() {
        return Err(Halt::Skip(
            "no backup of this target was proven yet: the canary copies the newest proven backup".into(),
        ));
    }
    let mut proven: Vec<(SystemTime, SystemTime, String)> = proofs
        .iter()
        .map(|(k, p)| {
            let at = p.consistent_at.as_deref().and_then(|c| humantime::parse_rfc3339_weak(c).ok());
            (at.unwrap_or(p.last_passed), p.last_passed, k.clone())
        })
        .collect();
    proven.sort_by(|a, b| b.cmp(a));
    let store = open_store(&target.storage, &config.storage[&target.storage]).await;
    let listed = store.list(&target.prefix).await.context("cannot list the backups")?;
    let mut there = drcheck_restore::group_backups(&listed);
    let (backup, gone) = newest_still_there(&proven, &mut there);
    if !gone.is_empty() {
        report.notes.push(format!(
            "newer proven backups are no longer in {}: {} — the newest proven one still there is copied",
            store.describe(),
            gone.join(", ")
        ));
    }
    let backup = backup.ok_or_else(|| {
        Halt::Skip(format!(
            "none of the {} proven backups is still in {} ({}): nothing proven to copy",
            gone.len(),
            store.describe(),
            gone.join(", ")
        ))
    })?;
    report.backup = Some(backup.key.clone());

    for dir in reap_dead_canaries(&config.sandbox.scratch_dir) {
        tracing::warn!(dir = %dir.display(), "removed the directory of a canary whose process is gone");
    }
    let scratch = tempfile::Builder::new()
        .prefix(&format!("{CANARY_DIR}{}-", report.canary_id))
        .tempdir_in(&config.sandbox.scratch_dir)
        .with_context(|| format!("cannot make the canary's directory in {}", config.sandbox.scratch_dir.display()))?;
    // Held while the canary lives: a directory whose lock can be taken is a dead one's.
    let _alive = std::fs::File::create(scratch.path().join(LOCK))
        .map_err(anyhow::Error::from)
        .and_then(|f| {
            nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|(_, e)| e.into())
        })
        .context("cannot lock the canary's directory")?;
    // The canary's runs keep their own history: never the target's runs or proofs.
    let mut own_history =
        History::open(&Secret::new(format!("sqlite://{}", scratch.path().join("history.db").display())))
            .await
            .context("the canary's own history store")?;
    // Its runs judge what changed on the primary since the backup's point as the
    // target's would: by drcheck's journal of the primary, copied in.
    history
        .copy_journal(&target.name, &own_history)
        .await
        .context("copying drcheck's journal of the primary into the canary's history")?;
    let fetched = scratch.path().join("fetched");
    std::fs::create_dir(&fetched).with_context(|| fetched.display().to_string())?;

    if backup.is_physical() {
        physical_defects(config, target, &store, &backup, scratch.path(), &own_history, cancel, report).await?;
    } else {
        let out = scratch.path().join("changed_row");
        let made = changed_row_dump(config, target, &backup, &own_history, &out).await;
        // Under a read budget a run compares one slice of every table: the changed
        // table is compared whole by the canary's runs (it fits the budget, chosen so),
        // never left to whether its row falls in this run's slice.
        if let (Some(budget), Ok(Some(m))) = (target.primary_read_budget, &made)
            && let Some(table) = m.split(": ").next().filter(|t| !t.is_empty())
        {
            report.notes.push(format!(
                "primary_read_budget {}: the changed table {table} is compared whole by the canary's run, beside its slice",
                drcheck_validators::human_bytes(budget)
            ));
            own_history.focus_on(table.to_string());
        }
        push_verified(config, target, &backup.key, "changed_row", made, &out, &own_history, cancel, report).await;
    }
    own_history.close().await;
    Ok(())
}

/// The first of `proven` (newest first) that `there` (the store's listing) holds, and
/// the keys of the newer ones it does not.
fn newest_still_there(
    proven: &[(SystemTime, SystemTime, String)],
    there: &mut Vec<Backup>,
) -> (Option<Backup>, Vec<String>) {
    let mut gone = Vec::new();
    for (_, _, key) in proven {
        match there.iter().position(|b| &b.key == key) {
            Some(i) => return (Some(there.swap_remove(i)), gone),
            None => gone.push(key.clone()),
        }
    }
    (None, gone)
}

/// The canaries' directories in `scratch_dir` are named so…
const CANARY_DIR: &str = "drcheck-canary-";
/// …and hold this lock while their canary lives.
const LOCK: &str = ".alive";

/// Removes the directories canaries left when their process died (SIGKILL, the OOM
/// killer): drcheck's own (its uid, never a link), whose lock nobody holds — or, without
/// a lock, untouched for an hour (a canary creates its lock right after its directory).
pub(crate) fn reap_dead_canaries(scratch_dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let me = nix::unistd::geteuid().as_raw();
    let Ok(entries) = std::fs::read_dir(scratch_dir) else { return Vec::new() };
    let mut removed = Vec::new();
    for e in entries.filter_map(Result::ok) {
        let path = e.path();
        let ours = e.file_name().to_string_lossy().starts_with(CANARY_DIR)
            && std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == me);
        if !ours {
            continue;
        }
        let dead = match std::fs::File::open(path.join(LOCK)) {
            Ok(f) => nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock).is_ok(),
            Err(_) => std::fs::symlink_metadata(&path)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > std::time::Duration::from_secs(3600))),
        };
        if dead && std::fs::remove_dir_all(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

/// The canary's copy of `target`: the same checks, pointed at `dir` (a filesystem store
/// holding the defective copy under the same keys), replayed to the archive's end.
fn canary_config(config: &Config, target: &TargetConfig, dir: &Path) -> (Config, TargetConfig) {
    let mut c = config.clone();
    let name = "drcheck-canary".to_string();
    c.storage.insert(
        name.clone(),
        StorageConfig::Filesystem { path: dir.to_path_buf(), kubernetes_claim: None, kubernetes_read_group: None },
    );
    let mut t = target.clone();
    t.storage = name;
    t.pin = false;
    t.select = Selection::Latest;
    t.schedule = None;
    t.follow = None;
    t.delta_restore = false;
    t.format = FormatSetting::Auto;
    if t.wal_prefix.is_some() {
        t.recovery_target = RecoveryTarget::Latest;
    }
    c.targets = vec![t.clone()];
    (c, t)
}

/// Verifies the defective copy in `dir` (when it was made) and judges the outcome.
#[allow(clippy::too_many_arguments)]
async fn push_verified(
    config: &Config,
    target: &TargetConfig,
    key: &str,
    defect: &str,
    made: anyhow::Result<Option<String>>,
    dir: &Path,
    own_history: &History,
    cancel: &CancellationToken,
    report: &mut CanaryReport,
) {
    let outcome = |outcome: DefectVerdict, made: String, detail: String| DefectOutcome {
        defect: defect.into(),
        outcome,
        made,
        named_by: Vec::new(),
        detail,
        run: None,
    };
    let made = match made {
        Ok(Some(m)) => m,
        Ok(None) => return,
        Err(why) => {
            report.defects.push(outcome(DefectVerdict::Skipped, String::new(), format!("{why:#}")));
            return;
        }
    };
    if cancel.is_cancelled() {
        report.defects.push(outcome(DefectVerdict::Error, made, "interrupted".into()));
        return;
    }
    let (c, t) = canary_config(config, target, dir);
    // Its log lines say whose run this is: the canary's, of this defect.
    let span = tracing::info_span!("canary", canary_id = %report.canary_id, defect);
    let mut run = tracing::Instrument::instrument(
        crate::verify::verify_as(new_run_id(), &c, &t, Some(key), own_history, cancel, &Progress::new(false)),
        span,
    )
    .await;
    run.canary = Some(defect.into());
    report.defects.push(judge(defect, made, run));
}

/// Whether the run caught the defect: it failed, and a check that owns the defect said
/// so (or the restore refused the copy as the backup's fault).
pub(crate) fn judge(defect: &str, made: String, run: RunReport) -> DefectOutcome {
    let owners = owners(defect);
    let mut named_by: Vec<String> = run
        .validators
        .iter()
        .filter(|v| v.status == Status::Failed && owners.contains(&v.name.as_str()))
        .map(|v| v.name.clone())
        .collect();
    let mut detail: Vec<String> = run
        .validators
        .iter()
        .filter(|v| named_by.contains(&v.name))
        .map(|v| format!("{}: {}", v.name, crate::out::short(&v.detail, 400)))
        .collect();
    if run.result == RunResult::Failed
        && let Some(e) = run.error.as_ref().filter(|e| e.stage == "restore" || e.stage == "fetch")
    {
        named_by.push("restore".into());
        detail.push(format!("{}: {}", e.stage, crate::out::short(&e.message, 400)));
    }
    let outcome = if run.result == RunResult::Failed && !named_by.is_empty() {
        DefectVerdict::Detected
    } else if matches!(run.result, RunResult::Error | RunResult::Aborted) {
        detail.push(match &run.error {
            Some(e) => {
                format!("the run could not judge the copy ({}): [{}] {}", run.result.as_str(), e.stage, e.message)
            }
            None => format!("the run ended {}", run.result.as_str()),
        });
        DefectVerdict::Error
    } else if let Some(seen) = seen_but_not_told(defect, &made, &run) {
        // The owner saw the changed table differ but could not tell it from a change on
        // the primary since the copy's point (a dump, no commit times, no `as_of`): a
        // limit of what can be proven, said — not a verifier that stopped detecting.
        detail.push(format!(
            "{} saw it but could not tell it from a change on the primary since the copy's point: {}",
            seen.0,
            crate::out::short(&seen.1, 400)
        ));
        DefectVerdict::Inconclusive
    } else {
        let said: Vec<String> = run
            .validators
            .iter()
            .filter(|v| owners.contains(&v.name.as_str()))
            .map(|v| format!("{} {}", v.name, v.status))
            .collect();
        detail.push(format!(
            "the defective copy's run ended {}; none of the checks that own this defect ({}) failed{}",
            run.result.as_str(),
            owners.join(", "),
            if said.is_empty() { " — none of them ran".to_string() } else { format!(" ({})", said.join(", ")) }
        ));
        DefectVerdict::Undetected
    };
    DefectOutcome { defect: defect.into(), outcome, made, named_by, detail: detail.join("; "), run: Some(run) }
}

/// A changed row's table named in an owning check's `inconclusive` list: (the check,
/// what it said).
fn seen_but_not_told(defect: &str, made: &str, run: &RunReport) -> Option<(String, String)> {
    if defect != "changed_row" {
        return None;
    }
    let table = made.split(": ").next().filter(|t| !t.is_empty())?;
    run.validators.iter().filter(|v| owners(defect).contains(&v.name.as_str())).find_map(|v| {
        let said = v.inconclusive.iter().find(|i| i.starts_with(&format!("{table}: ")))?;
        Some((v.name.clone(), said.clone()))
    })
}

/// Copies `obj` from the store to `dir/<key>`, dated as the store dates it.
async fn copy_object(
    store: &Arc<dyn BackupStore>,
    obj: &BackupObject,
    dir: &Path,
    fetch: drcheck_restore::FetchOptions,
) -> anyhow::Result<PathBuf> {
    let path = dir.join(&obj.key);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| parent.display().to_string())?;
    }
    let mut reader = drcheck_restore::fetch_parallel(store.clone(), obj, fetch);
    let mut file = tokio::fs::File::create(&path).await.with_context(|| path.display().to_string())?;
    tokio::io::copy(&mut reader, &mut file).await.with_context(|| format!("copying {}", obj.key))?;
    file.sync_all().await?;
    let file = file.into_std().await;
    file.set_modified(obj.last_modified)?;
    Ok(path)
}

/// `from/<rel>` linked at `to/<rel>` for every file under `from` but those `skip` says.
fn link_tree(from: &Path, to: &Path, skip: &dyn Fn(&str) -> bool) -> anyhow::Result<()> {
    fn walk(root: &Path, dir: &Path, to: &Path, skip: &dyn Fn(&str) -> bool) -> std::io::Result<()> {
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap_or(&p).to_string_lossy().to_string();
            if e.file_type()?.is_dir() {
                walk(root, &p, to, skip)?;
            } else if !skip(&rel) {
                let dest = to.join(&rel);
                if let Some(parent) = dest.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::hard_link(&p, &dest)?;
            }
        }
        Ok(())
    }
    std::fs::create_dir_all(to)?;
    walk(from, from, to, skip).context("linking the canary's copy")
}

/// The base backup's defects: `flipped_page`, and `missing_segment` with an archive.
#[allow(clippy::too_many_arguments)]
async fn physical_defects(
    config: &Config,
    target: &TargetConfig,
    store: &Arc<dyn BackupStore>,
    backup: &Backup,
    scratch: &Path,
    own_history: &History,
    cancel: &CancellationToken,
    report: &mut CanaryReport,
) -> anyhow::Result<()> {
    let fetched = scratch.join("fetched");
    let fetch = crate::ids::fetch_options(&config.storage[&target.storage]);
    let name_of = |k: &str| k.rsplit('/').next().unwrap_or(k).to_string();
    for part in &backup.parts {
        copy_object(store, part, &fetched, fetch).await?;
    }
    let base = backup.parts.iter().find(|p| name_of(&p.key).starts_with("base.tar"));
    let manifest = backup.parts.iter().find(|p| name_of(&p.key) == "backup_manifest");
    let base = base.ok_or_else(|| anyhow!("{}: no base.tar", backup.key))?;
    let base_name = name_of(&base.key);
    let gzip = match base_name.as_str() {
        "base.tar" => Some(false),
        "base.tar.gz" => Some(true),
        _ => None,
    };
    let base_path = fetched.join(&base.key);

    // The archive from the backup's start on, copied once; the segment to leave out chosen.
    // Which segment to leave out (its key, and what was made), or why none can be; a
    // failure to read the store or the backup stops the canary (the world's, not a skip).
    let mut drop: anyhow::Result<(String, String)> = Err(anyhow!("no WAL archive"));
    if let Some(wal_prefix) = &target.wal_prefix {
        drop = async {
            let Some(gz) = gzip else {
                return Ok(Err(anyhow!("{base_name}: the canary reads plain and gzip base backups only")));
            };
            let path = base_path.clone();
            let start = tokio::task::spawn_blocking(move || drcheck_restore::canary::start_segment_of(&path, gz))
                .await
                ?
                .with_context(|| format!("reading {}", base.key))?
                .ok_or_else(|| anyhow!("{}: no backup_label", base.key))?;
            let listed = store.list(wal_prefix).await?;
            // The backup's own WAL ends where its archived `.backup` file says it stopped.
            let mut stop = start.clone();
            for o in listed.iter().filter(|o| name_of(&o.key).ends_with(".backup") && name_of(&o.key).starts_with(&start)) {
                let text = store.read_range(&o.key, 0, o.size.min(64 * 1024)).await?;
                if let Some(s) = String::from_utf8_lossy(&text)
                    .lines()
                    .find_map(|l| l.strip_prefix("STOP WAL LOCATION: "))
                    .and_then(|l| l.split("(file ").nth(1))
                    .map(|s| s.trim_end_matches(')').trim().to_ascii_uppercase())
                {
                    stop = stop.max(s);
                }
            }
            // …and past what the backup carries itself (`pg_wal.tar`): recovery reads those
            // there, so leaving one out of the archive is no defect.
            if let Some(carried) = backup.parts.iter().find(|p| name_of(&p.key).starts_with("pg_wal.tar")) {
                let gz = match name_of(&carried.key).as_str() {
                    "pg_wal.tar" => Some(false),
                    "pg_wal.tar.gz" => Some(true),
                    _ => None,
                };
                let Some(gz) = gz else {
                    return Ok(Err(anyhow!("{}: the canary reads plain and gzip tars only", carried.key)));
                };
                let path = fetched.join(&carried.key);
                let names = tokio::task::spawn_blocking(move || drcheck_restore::canary::tar_members(&path, gz, 100_000))
                    .await
                    ?
                    .with_context(|| format!("reading {}", carried.key))?;
                for n in names {
                    let n = n.rsplit('/').next().unwrap_or(&n).to_ascii_uppercase();
                    if n.len() == 24 && n.chars().all(|c| c.is_ascii_hexdigit()) {
                        stop = stop.max(n);
                    }
                }
            }
            let wal = drcheck_restore::wal_objects(listed);
            let mut segments: Vec<&(BackupObject, String)> =
                wal.iter().filter(|(_, n)| n.len() == 24 && n.as_str() >= start.as_str()).collect();
            segments.sort_by(|a, b| a.1.cmp(&b.1));
            for (o, _) in wal.iter().filter(|(_, n)| n.ends_with(".history") || n.as_str() >= start.as_str()) {
                copy_object(store, o, &fetched, fetch).await?;
            }
            let newest = segments.last().map(|s| s.1.clone()).unwrap_or_default();
            Ok::<_, anyhow::Error>(
                segments
                    .iter()
                    .enumerate()
                    .find(|(i, (_, n))| n.as_str() > stop.as_str() && n[..8] == start[..8] && *i + 1 < segments.len())
                    .map(|(_, (o, n))| {
                        (o.key.clone(), format!("archived segment {n} ({}) left out; the archive goes on to {newest}", o.key))
                    })
                    .ok_or_else(|| {
                        anyhow!("the archive holds no segment after the backup's own WAL (up to {stop}) with another after it to leave out")
                    }),
            )
        }
        .await?;
    }

    // flipped_page
    let dir = scratch.join("flipped_page");
    let made: anyhow::Result<Option<String>> = match gzip {
        None => Err(anyhow!(
            "{base_name}: the canary rewrites plain and gzip base backups only (not compressed otherwise or encrypted)"
        )),
        Some(gz) => {
            let base_key = base.key.clone();
            let manifest_key = manifest.map(|m| m.key.clone());
            link_tree(&fetched, &dir, &|rel| rel == base_key || Some(rel) == manifest_key.as_deref())?;
            let (input, output, work) = (base_path.clone(), dir.join(&base.key), scratch.to_path_buf());
            // Its directory: nothing else of the backup may be beside it (a one-file
            // backup, `-X fetch`, no manifest) for the links to have made it.
            if let Some(parent) = output.parent() {
                std::fs::create_dir_all(parent).with_context(|| parent.display().to_string())?;
            }
            // What a restore of it may write (the backup is hostile input here too).
            let max = (base.size as f64 * config.sandbox.max_expansion) as u64 + (1 << 30);
            let flipped = tokio::task::spawn_blocking(move || {
                drcheck_restore::canary::flip_base_tar(&input, &output, gz, &work, max)
            })
            .await?
            .with_context(|| format!("rewriting {}", base.key))?;
            match flipped {
                None => Err(anyhow!("{}: no user table with a row to change", base.key)),
                Some(f) => {
                    set_mtime(&dir.join(&base.key), base.last_modified)?;
                    if let Some(m) = manifest {
                        let text = std::fs::read_to_string(fetched.join(&m.key)).with_context(|| m.key.to_string())?;
                        let edited = drcheck_restore::canary::manifest_without_checksum(&text, &f.path)?;
                        std::fs::write(dir.join(&m.key), edited)?;
                        set_mtime(&dir.join(&m.key), m.last_modified)?;
                    }
                    Ok(Some(format!(
                        "{}: byte {} of {} (block {}, row {}) changed from {:#04x} to {:#04x}",
                        base.key, f.offset, f.path, f.block, f.line, f.was, f.now
                    )))
                }
            }
        }
    };
    push_verified(config, target, &backup.key, "flipped_page", made, &dir, own_history, cancel, report).await;

    // missing_segment
    if target.wal_prefix.is_some() {
        let dir = scratch.join("missing_segment");
        let made = match drop {
            Ok((key, made)) => link_tree(&fetched, &dir, &|rel| rel == key).map(|_| Some(made)),
            Err(why) => Err(why),
        };
        push_verified(config, target, &backup.key, "missing_segment", made, &dir, own_history, cancel, report).await;
    }
    Ok(())
}

fn set_mtime(path: &Path, at: SystemTime) -> anyhow::Result<()> {
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(at))
        .with_context(|| path.display().to_string())
}

/// The dump with one row changed: restored into a sandbox like any run's, the row
/// changed through the sandbox's own connection (triggers and rules off: the restored
/// database is hostile input and must not choose what changes), dumped by the
/// sandbox's `pg_dump` into `dir/<key>` and dated as the original.
async fn changed_row_dump(
    config: &Config,
    target: &TargetConfig,
    backup: &Backup,
    own_history: &History,
    dir: &Path,
) -> anyhow::Result<Option<String>> {
    let progress = Progress::new(false);
    let t = TargetConfig { pin: false, select: Selection::Latest, ..target.clone() };
    let (settings, run_id) = (Settings::of(config, &t), new_run_id());
    let selected = select::select_stage(settings, &t, &run_id, Some(&backup.key), own_history, &progress)
        .await
        .map_err(|s| anyhow!("selecting {}: {}", backup.key, s.stop.message))?;
    let (restored, ready) = restore::restore_stage(settings, &selected, run_id, &progress).await;
    let ready = ready.map_err(|s| anyhow!("restoring {} to change a row: {}", backup.key, s.message))?;
    let consistent = restored.m.consistent.map(|c| c.at);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(drcheck_validators::guard::restored_session(ready.sandbox.connect_options(&ready.database)))
        .await
        .context("connecting to the restored copy")?;
    let changed = change_one_row(&pool, target.primary_read_budget).await?;
    pool.close().await;
    let Some(made) = changed else {
        return Err(match target.primary_read_budget {
            Some(b) => anyhow!(
                "the dump holds no table with a row to change that is at most primary_read_budget ({}): no run \
                 compares such a table whole, so a changed row could not be judged",
                drcheck_validators::human_bytes(b)
            ),
            None => anyhow!("the dump holds no table with a row to change"),
        });
    };
    let path = dir.join(&backup.key);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // pg_dump writes inside the sandbox (where its confinement lets it), as its user.
    let inside = ready.sandbox.root().join("canary.dump");
    std::fs::File::create(&inside).with_context(|| inside.display().to_string())?;
    ready.sandbox.give_to_server(&inside)?;
    let mut cmd = ready.sandbox.client_command("pg_dump", &ready.database)?;
    cmd.arg("-Fc").arg("-f").arg(&inside);
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    let out = cmd.output().await.context("cannot run pg_dump")?;
    if !out.status.success() {
        return Err(anyhow!(
            "pg_dump of the changed copy failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::copy(&inside, &path).context("copying the changed dump")?;
    drop(ready);
    if let Some(at) = consistent {
        use std::io::{Read as _, Seek as _, Write as _};
        let mut f = std::fs::File::options().read(true).write(true).open(&path)?;
        let mut head = vec![0u8; 4096];
        let n = f.read(&mut head)?;
        head.truncate(n);
        drcheck_restore::canary::set_dump_time(&mut head, at)
            .with_context(|| format!("the changed dump ({n} bytes)"))?;
        f.rewind().and_then(|_| f.write_all(&head))?;
    }
    set_mtime(&path, backup.last_modified)?;
    Ok(Some(made))
}

/// Changes one value of one row of the largest user table: a column no index covers (the
/// row keeps its key), text made another text of the same length, a number one more.
/// Every name quoted, every function and operator `pg_catalog`'s with exact argument
/// types; triggers and rules off (`session_replication_role = replica`), and a table
/// with one that fires even so (`ENABLE ALWAYS`/`REPLICA`) is never chosen — the copy's
/// code could undo the change and make the canary page for nothing.
/// Under a read budget only a table no larger than it (the canary's run compares it
/// whole).
async fn change_one_row(pool: &sqlx::PgPool, budget: Option<u64>) -> anyhow::Result<Option<String>> {
    let candidates: Vec<(String, String, String, String)> = sqlx::query_as(
        "select n.nspname::pg_catalog.text, c.relname::pg_catalog.text, a.attname::pg_catalog.text,
                t.typname::pg_catalog.text
           from pg_catalog.pg_class c
           join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) c.relnamespace
           join pg_catalog.pg_attribute a on a.attrelid operator(pg_catalog.=) c.oid
           join pg_catalog.pg_type t on t.oid operator(pg_catalog.=) a.atttypid
          where c.relkind operator(pg_catalog.=) 'r' and a.attnum operator(pg_catalog.>) 0 and not a.attisdropped
            and a.attgenerated operator(pg_catalog.=) ''
            and n.nspname operator(pg_catalog.<>) all (array['pg_catalog', 'information_schema'])
            and n.nspname::pg_catalog.text operator(pg_catalog.!~~) 'pg\\_%'
            and t.typname operator(pg_catalog.=) any (array['text', 'varchar', 'bpchar', 'int2', 'int4', 'int8', 'numeric'])
            and not exists (select 1 from pg_catalog.pg_index i
                             where i.indrelid operator(pg_catalog.=) c.oid
                               and a.attnum operator(pg_catalog.=) any (i.indkey::pg_catalog.int2[]))
            -- No code of the copy's may run on the update: not a trigger or rule that
            -- fires with session_replication_role = replica (ENABLE ALWAYS / REPLICA).
            and not exists (select 1 from pg_catalog.pg_trigger g
                             where g.tgrelid operator(pg_catalog.=) c.oid and not g.tgisinternal
                               and g.tgenabled::pg_catalog.text operator(pg_catalog.=) any (array['A', 'R']))
            and not exists (select 1 from pg_catalog.pg_rewrite w
                             where w.ev_class operator(pg_catalog.=) c.oid
                               and w.ev_enabled::pg_catalog.text operator(pg_catalog.=) any (array['A', 'R']))
            and pg_catalog.pg_total_relation_size(c.oid) operator(pg_catalog.<=) $1
          order by c.relpages desc, n.nspname, c.relname, a.attnum
          limit 50",
    )
    .bind(budget.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX)))
    .fetch_all(pool)
    .await
    .context("reading the copy's tables")?;
    for (schema, table, column, ty) in candidates {
        let q = |s: &str| drcheck_config::quote_ident(s);
        let (rel, col) = (format!("{}.{}", q(&schema), q(&table)), q(&column));
        let (value, filter) = if ["text", "varchar", "bpchar"].contains(&ty.as_str()) {
            (
                format!(
                    "pg_catalog.translate({col}::pg_catalog.text, \
                     'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'::pg_catalog.text, \
                     'bcdefghijklmnopqrstuvwxyzaBCDEFGHIJKLMNOPQRSTUVWXYZA1234567890'::pg_catalog.text)"
                ),
                format!("{col}::pg_catalog.text operator(pg_catalog.~) '[A-Za-z0-9]'::pg_catalog.text"),
            )
        } else {
            (format!("{col} operator(pg_catalog.+) 1::pg_catalog.{ty}"), format!("{col} is not null"))
        };
        let sql = format!(
            "update {rel} set {col} = {value}
              where ctid operator(pg_catalog.=) (select ctid from {rel} where {filter} order by ctid limit 1)
             returning ctid::pg_catalog.text"
        );
        let mut tx = pool.begin().await?;
        // The copy's triggers, rules and constraints' actions stay out of it.
        sqlx::query("set local session_replication_role = replica").execute(&mut *tx).await?;
        match sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql)).fetch_optional(&mut *tx).await {
            Ok(Some(ctid)) => {
                tx.commit().await?;
                return Ok(Some(format!("{schema}.{table}: column {column} of the row at ctid {ctid} changed")));
            }
            Ok(None) => {}
            Err(e) => tracing::info!(table = %rel, column = %column, "canary: this column cannot be changed: {e}"),
        }
        let _ = tx.rollback().await;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canary_report::CanaryResult;
    use crate::run_report::{RunError, ValidatorReport};

    const CONFIG: &str = "[storage.s]\nkind = \"filesystem\"\npath = \"/tmp\"\n[[target]]\nname = \"t\"\nstorage = \"s\"\nprefix = \"p/\"\nrto = \"1h\"\nrpo = \"1d\"\n";

    fn run(result: RunResult, validators: &[(&str, &str)], error: Option<(&str, &str)>) -> RunReport {
        let mut r = crate::run_report::died_report(
            &drcheck_config::parse(CONFIG, std::path::Path::new("c.toml")).unwrap().targets[0],
            "x",
        );
        r.result = result;
        r.error = error.map(|(stage, message)| RunError { stage: stage.into(), message: message.into() });
        r.validators = validators
            .iter()
            .map(|(n, s)| ValidatorReport {
                name: (*n).into(),
                status: s.parse().unwrap(),
                detail: format!("{n} said {s}"),
                measurements: Default::default(),
                inconclusive: Vec::new(),
                refused_by_primary: false,
            })
            .collect();
        r
    }

    #[test]
    fn caught_only_when_the_owner_fails() {
        let d = judge(
            "changed_row",
            "x".into(),
            run(RunResult::Failed, &[("row_counts", "passed"), ("checksums", "failed")], None),
        );
        assert_eq!((d.outcome, d.named_by.clone()), (DefectVerdict::Detected, vec!["checksums".to_string()]));
        // Failed for another reason (an old backup misses its RPO): not caught.
        let d = judge(
            "changed_row",
            "x".into(),
            run(RunResult::Failed, &[("checksums", "passed"), ("freshness", "failed")], None),
        );
        assert_eq!(d.outcome, DefectVerdict::Undetected);
        assert!(d.detail.contains("checksums passed"), "{}", d.detail);
        // The owner did not run at all (disabled): not caught, said so.
        let d = judge("changed_row", "x".into(), run(RunResult::Passed, &[("row_counts", "passed")], None));
        assert_eq!(d.outcome, DefectVerdict::Undetected);
        assert!(d.detail.contains("none of them ran"), "{}", d.detail);
        // Seen, but not told from a change on the primary (a dump without commit times).
        let mut r = run(RunResult::Passed, &[("checksums", "passed")], None);
        r.validators[0].inconclusive =
            vec!["public.tiny: 1 rows differ — to prove it, set track_commit_timestamp".into()];
        let d = judge("changed_row", "public.tiny: column v of the row at ctid (0,1) changed".into(), r.clone());
        assert_eq!(d.outcome, DefectVerdict::Inconclusive, "{d:?}");
        assert!(d.detail.contains("checksums saw it"), "{}", d.detail);
        // …another table's inconclusive (live changes elsewhere) is no excuse.
        let d = judge("changed_row", "public.items: column note of the row at ctid (0,1) changed".into(), r);
        assert_eq!(d.outcome, DefectVerdict::Undetected);
        // The restore refused the copy as the backup's fault.
        let d = judge("flipped_page", "x".into(), run(RunResult::Failed, &[], Some(("restore", "invalid page"))));
        assert_eq!((d.outcome, d.named_by.clone()), (DefectVerdict::Detected, vec!["restore".to_string()]));
        // The world's fault: no verdict.
        let d = judge("missing_segment", "x".into(), run(RunResult::Error, &[], Some(("fetch", "store unreachable"))));
        assert_eq!(d.outcome, DefectVerdict::Error);
    }

    #[test]
    fn a_dead_canarys_directory_is_removed_and_a_live_ones_kept() {
        let scratch = tempfile::tempdir().unwrap();
        let live = scratch.path().join(format!("{CANARY_DIR}live"));
        let dead = scratch.path().join(format!("{CANARY_DIR}dead"));
        let other = scratch.path().join("drcheck-0");
        for d in [&live, &dead, &other] {
            std::fs::create_dir(d).unwrap();
        }
        let held = nix::fcntl::Flock::lock(
            std::fs::File::create(live.join(LOCK)).unwrap(),
            nix::fcntl::FlockArg::LockExclusiveNonblock,
        )
        .unwrap();
        std::fs::File::create(dead.join(LOCK)).unwrap();
        assert_eq!(reap_dead_canaries(scratch.path()), vec![dead.clone()]);
        assert!(live.exists() && other.exists() && !dead.exists());
        drop(held);
    }

    #[test]
    fn one_missed_defect_makes_the_canary_missed() {
        let mut r = CanaryReport::new("t");
        r.conclude();
        assert_eq!(r.result, CanaryResult::Skipped);
        let d = |o: DefectVerdict| DefectOutcome {
            defect: "d".into(),
            outcome: o,
            made: String::new(),
            named_by: vec![],
            detail: String::new(),
            run: None,
        };
        r.defects = vec![d(DefectVerdict::Detected), d(DefectVerdict::Error)];
        r.conclude();
        assert_eq!(r.result, CanaryResult::Error);
        r.defects = vec![d(DefectVerdict::Detected), d(DefectVerdict::Undetected), d(DefectVerdict::Error)];
        r.conclude();
        assert_eq!(r.result, CanaryResult::Missed);
        r.defects = vec![d(DefectVerdict::Detected), d(DefectVerdict::Inconclusive)];
        r.conclude();
        assert_eq!(r.result, CanaryResult::Inconclusive);
        r.defects = vec![d(DefectVerdict::Detected), d(DefectVerdict::Skipped)];
        r.conclude();
        assert_eq!(r.result, CanaryResult::Caught);
        // Stopped by the world after one defect: not "caught" — the rest were never tried.
        r.error = Some("the store went away".into());
        r.conclude();
        assert_eq!(r.result, CanaryResult::Error);
    }
}
