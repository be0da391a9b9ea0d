//! `drcheck backups list`: what is in a target's store, newest first.

use crate::exit::{CliError, Exit};
use crate::ids::Settings;
use crate::run_report::timestamp;
use crate::verify::list_backups;
use clap::Subcommand;
use drcheck_config::Config;
use std::path::PathBuf;
use std::time::SystemTime;

#[derive(Debug, Subcommand)]
pub(crate) enum BackupsCommand {
    /// List a target's backups, newest first.
    List {
        /// Only this target (default: every target).
        #[arg(long)]
        target: Option<String>,
        /// Print JSON (`{"targets": [...]}`) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Download a backup (the latest, or --backup KEY) with drcheck's concurrent fetcher.
    Fetch {
        /// The target whose store holds the backup.
        #[arg(long)]
        target: String,
        /// The backup's key (default: the latest).
        #[arg(long)]
        backup: Option<String>,
        /// Where to write it.
        #[arg(long)]
        output: PathBuf,
        /// Undo its compression and encryption as `verify` does (gzip, zstd, lz4, age,
        /// OpenPGP, with the target's [target.decrypt] keys): what lands is what
        /// pg_restore or psql reads.
        #[arg(long)]
        decode: bool,
    },
    /// Forget a proven backup deleted on purpose: its proof and pins are dropped, so later
    /// runs no longer fail `pinned` for it — recorded with who, when and why (history,
    /// the evidence report). Never silent: the reason is required.
    Forget {
        /// The target the backup is of.
        #[arg(long)]
        target: String,
        /// The backup's key (as `backups list` shows it).
        key: String,
        /// Why it is gone on purpose.
        #[arg(long)]
        reason: String,
        /// Who decided (default: the login name drcheck runs as).
        #[arg(long)]
        by: Option<String>,
    },
}

/// `backups forget`: the proof dropped and the decision recorded, in one transaction.
pub(crate) async fn forget(
    config: &Config,
    target: &str,
    key: &str,
    reason: &str,
    by: Option<&str>,
) -> Result<Exit, CliError> {
    let t = super::select_targets(config, Some(target))?[0];
    if reason.trim().is_empty() {
        return Err(CliError::usage(anyhow::anyhow!("--reason must say why the backup is gone on purpose")));
    }
    let history = crate::history::History::open(&config.state.url).await.map_err(CliError::incomplete)?;
    let by = by.map(str::to_string).unwrap_or_else(crate::history::who_here);
    let acked = history.acknowledge(&t.name, crate::history::FORGOTTEN_BACKUP, key, None, reason, &by).await;
    history.close().await;
    let ack = acked.map_err(CliError::usage)?;
    crate::outln!(
        "{}: forgot the proof of {} — {}",
        t.name,
        crate::out::shown(key),
        crate::out::shown(&ack.describe())
    );
    Ok(Exit::Passed)
}

/// Each base backup of a store (not a tool's catalog): `full` or `incremental`, and an
/// incremental's prior (its label's `INCREMENTAL FROM LSN`, another backup's start; `?`
/// when no backup of the store started there). Backups whose label cannot be read are
/// left out (logged).
async fn chain_of(
    config: &Config,
    t: &drcheck_config::TargetConfig,
    backups: &[drcheck_restore::Backup],
) -> Vec<(String, (&'static str, Option<String>))> {
    if t.source != drcheck_config::SourceConfig::Objects {
        return Vec::new();
    }
    let store = drcheck_restore::open_store(&t.storage, &config.storage[&t.storage]).await;
    let mut labels = Vec::new();
    for b in backups.iter().filter(|b| b.is_physical()) {
        match drcheck_restore::read_label(store.as_ref(), b).await {
            Ok(Some(l)) => labels.push((b.key.clone(), l)),
            Ok(None) => {}
            Err(e) => tracing::warn!(backup = %b.key, "cannot read the backup's label: {e}"),
        }
    }
    labels
        .iter()
        .map(|(key, l)| {
            let kind = match l.from {
                None => ("full", None),
                Some((lsn, tli)) => {
                    let prior = labels
                        .iter()
                        .find(|(_, p)| p.start_lsn == lsn && p.timeline == tli)
                        .map(|(k, _)| k.clone())
                        .unwrap_or_else(|| "? (its prior is not in the store)".into());
                    ("incremental", Some(prior))
                }
            };
            (key.clone(), kind)
        })
        .collect()
}

pub(crate) async fn list(config: &Config, target: Option<&str>, json: bool) -> Result<Exit, CliError> {
    let targets = super::select_targets(config, target)?;
    // When each backup last passed a verification: the history's word (left out, with
    // a warning, when the history cannot be read).
    let history = match crate::history::History::open(&config.state.url).await {
        Ok(h) => Some(h),
        Err(e) => {
            crate::errln!("drcheck: warning: last_proven_at left out: {e:#}");
            None
        }
    };
    let mut out = Vec::new();
    for t in targets {
        let proven = match &history {
            Some(h) => h.proofs(&t.name).await.ok(),
            None => None,
        };
        let proof = |key: &str| proven.as_ref().and_then(|p| p.get(key));
        let proven_at = |key: &str| proof(key).map(|p| timestamp(p.last_passed));
        // Whether unreachable or refusing (403, no such bucket), a store that cannot be
        // listed is a problem outside the backups: exit 3.
        let (store, backups) = list_backups(Settings::of(config, t), t).await.map_err(|e| {
            CliError::incomplete(anyhow::Error::new(e).context(format!("listing backups of target {}", t.name)))
        })?;
        // Each pinned proof against what the store holds now, and the store's protection.
        let (protection, changes) = protection_and_pins(config, t, &backups, proven.as_ref()).await;
        // Base backups in a store: which are PostgreSQL 17+ incrementals, and of which
        // backup (its label's INCREMENTAL FROM LSN, matched to another's start).
        let chains = chain_of(config, t, &backups).await;
        let kind_of = |key: &str| chains.iter().find(|(k, _)| k == key).map(|(_, c)| c.clone());
        let changed = |key: &str| changes.iter().find(|c| c.backup == key);
        let pinned = |key: &str| proof(key).is_some_and(|p| p.pin.is_some());
        if json {
            let items: Vec<_> = backups
                .iter()
                .map(|b| {
                    let mut v = serde_json::json!({"key": b.key, "size_bytes": b.size, "created_at": timestamp(b.last_modified)});
                    if proven.is_some() {
                        v["last_proven_at"] = proven_at(&b.key).into();
                        v["points_proven"] = proof(&b.key).map_or(0, |p| p.points_proven).into();
                        v["pinned"] = pinned(&b.key).into();
                        v["changed_since_proven"] = changed(&b.key).map(|c| c.what.clone()).unwrap_or_default().into();
                    }
                    if let Some(kind) = kind_of(&b.key) {
                        v["type"] = kind.0.into();
                        if let Some(prior) = kind.1 {
                            v["incremental_of"] = prior.into();
                        }
                    }
                    if let Some(c) = &b.catalog {
                        v["source"] = c.tool.into();
                        v["type"] = c.kind.clone().into();
                        v["started_at"] = timestamp(c.started).into();
                        v["status"] = c.status.as_str().into();
                        v["wal_start"] = c.wal_start.clone().into();
                        v["wal_stop"] = c.wal_stop.clone().into();
                    }
                    v
                })
                .collect();
            let gone: Vec<_> = changes
                .iter()
                .filter(|c| c.vanished)
                .map(|c| serde_json::json!({"key": c.backup, "changed_since_proven": c.what}))
                .collect();
            out.push(serde_json::json!({
                "target": t.name, "store": store, "backups": items, "vanished_since_proven": gone,
                "protection": protection,
            }));
        } else {
            crate::outln!(
                "{} — {} under {:?}: {}",
                t.name,
                store,
                t.prefix,
                crate::out::count(backups.len(), "backup")
            );
            if let Some(p) = &protection {
                crate::outln!("  protection: {p}");
            }
            let latest = backups.iter().position(|b| b.catalog.as_ref().is_none_or(|c| c.status.is_ok()));
            for (i, b) in backups.iter().enumerate() {
                let age = SystemTime::now().duration_since(b.last_modified).unwrap_or_default();
                let marker = if Some(i) == latest { "latest" } else { "" };
                let catalog = b
                    .catalog
                    .as_ref()
                    .map(|c| format!("  {:<4} {} → ", c.kind, timestamp(c.started)))
                    .or_else(|| {
                        kind_of(&b.key).map(|(kind, prior)| match prior {
                            Some(p) => format!("  {kind} of {}", crate::out::shown(&p)),
                            None => format!("  {kind}"),
                        })
                    })
                    .unwrap_or_default();
                let status = b
                    .catalog
                    .as_ref()
                    .filter(|c| !c.status.is_ok())
                    .map(|c| format!("  [{}]", crate::out::shown(c.status.as_str())))
                    .unwrap_or_default();
                let last_proven = match (&proven, proven_at(&b.key)) {
                    (None, _) => String::new(),
                    (Some(_), Some(at)) => {
                        let points = match proof(&b.key).map_or(0, |p| p.points_proven) {
                            0 => String::new(),
                            1 => ", 1 point in time".to_string(),
                            n => format!(", {n} points in time"),
                        };
                        let pin = match (changed(&b.key), pinned(&b.key)) {
                            (Some(c), _) => format!(
                                ", CHANGED SINCE PROVEN: {}",
                                c.what.iter().map(|w| crate::out::shown(w)).collect::<Vec<_>>().join(", ")
                            ),
                            (None, true) => ", pinned".to_string(),
                            (None, false) => String::new(),
                        };
                        format!("  proven {at}{points}{pin}")
                    }
                    (Some(_), None) => "  never proven".to_string(),
                };
                crate::outln!(
                    "  {:<6} {}{catalog}  {:>12} B  {}  (age {}){status}{last_proven}",
                    marker,
                    crate::out::shown(&b.key),
                    b.size,
                    timestamp(b.last_modified),
                    drcheck_config::format_duration(age)
                );
            }
            for c in changes.iter().filter(|c| c.vanished) {
                crate::outln!(
                    "  GONE   {}  proven, {}",
                    crate::out::shown(&c.backup),
                    crate::out::shown(&c.what.join(", "))
                );
            }
        }
    }
    if let Some(h) = history {
        h.close().await;
    }
    if json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"targets": out})).map_err(CliError::incomplete)?
        );
    }
    Ok(Exit::Passed)
}

/// Downloads one backup object to `output`, reporting the throughput.
pub(crate) async fn fetch(
    config: &Config,
    target: &str,
    key: Option<&str>,
    output: &std::path::Path,
    decode: bool,
) -> Result<Exit, CliError> {
    let t = super::select_targets(config, Some(target))?[0];
    let started = std::time::Instant::now();
    let (store, backups) =
        list_backups(Settings::of(config, t), t).await.map_err(|e| CliError::incomplete(anyhow::Error::new(e)))?;
    let backup = match key {
        Some(k) => backups.into_iter().find(|b| b.key == k),
        None => backups.into_iter().next(),
    }
    .ok_or_else(|| CliError { exit: Exit::Failed, error: anyhow::anyhow!("no such backup in {store}") })?;
    if let Some(c) = &backup.catalog {
        return Err(CliError::usage(anyhow::anyhow!(
            "{} is a {} backup: its files live in the tool's repository; `drcheck verify --backup {}` restores it",
            backup.key,
            c.tool,
            backup.key
        )));
    }
    if backup.is_physical() {
        return Err(CliError::usage(anyhow::anyhow!(
            "{} is a physical backup of several files; fetch them one by one with --backup KEY",
            backup.key
        )));
    }
    let (bytes, layers) = crate::verify::download(Settings::of(config, t), t, &backup, output, decode)
        .await
        .map_err(CliError::incomplete)?;
    let secs = started.elapsed().as_secs_f64();
    let undone = if layers.is_empty() { String::new() } else { format!(" ({} undone)", layers.join(", ")) };
    crate::outln!(
        "{} → {}: {bytes} bytes{undone} in {secs:.2}s ({:.1} MiB/s)",
        crate::out::shown(&backup.key),
        output.display(),
        bytes as f64 / secs / 1048576.0
    );
    Ok(Exit::Passed)
}

/// The store's protection, in words, and each pinned proof of `t` that no longer matches
/// what the store holds (`backups`: a full listing, newest first).
async fn protection_and_pins(
    config: &Config,
    t: &drcheck_config::TargetConfig,
    backups: &[drcheck_restore::Backup],
    proven: Option<&crate::history::Proven>,
) -> (Option<String>, Vec<crate::verify::immutable::PinChange>) {
    let store = drcheck_restore::open_store(&t.storage, &config.storage[&t.storage]).await;
    let protection = match store.protection().await {
        Ok(Some(p)) => Some(p.describe(None)),
        Ok(None) => None,
        Err(e) => Some(format!("cannot be read: {e}")),
    };
    let Some(proven) = proven.filter(|_| t.pin) else { return (protection, Vec::new()) };
    let wanted: Vec<&drcheck_restore::Backup> =
        backups.iter().filter(|b| proven.get(&b.key).is_some_and(|p| p.pin.is_some())).collect();
    let retain = match &config.storage[&t.storage] {
        drcheck_config::StorageConfig::S3(s3) => s3.retain_until_at_least,
        _ => None,
    };
    let restorable: Vec<drcheck_restore::Backup> =
        backups.iter().filter(|b| b.catalog.as_ref().is_none_or(|c| c.status.is_ok())).cloned().collect();
    match crate::verify::immutable::stored_objects(t, &store, &wanted).await {
        Ok(objects) => (protection, {
            let additions = crate::verify::immutable::counts_additions(t);
            crate::verify::immutable::pin_changes(proven, &restorable, &objects, retain, additions, SystemTime::now()).1
        }),
        Err(e) => {
            crate::errln!("drcheck: warning: {}: the pinned proofs are not compared: {e}", t.name);
            (protection, Vec::new())
        }
    }
}
