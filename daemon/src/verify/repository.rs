//! The `repository` validator: a backup tool's repository checked without a restore.

use super::select::read_source;
use crate::history::History;
use crate::ids::{Purpose, Settings, catalog_sandbox, new_run_id};
use drcheck_config::TargetConfig;
use drcheck_restore::{BackupStore, Catalog, RestoreError, open_store};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// The `repository` validator on its own (`verify --integrity-only`, `integrity_schedule`).
pub(crate) async fn integrity_only(
    settings: Settings<'_>,
    target: &TargetConfig,
    history: Option<&History>,
) -> drcheck_validators::Finding {
    use drcheck_validators::{Finding, Status};
    let store = open_store(&target.storage, settings.storage).await;
    let run_id = new_run_id();
    match read_source(settings, target, &store, &run_id).await {
        Ok((_, Some(c))) => check_repository(settings, target, &store, &run_id, &c, history, ToolCheck::Run).await,
        Ok((_, None)) => Finding::new(
            "repository",
            Status::Error,
            format!(
                "target {} reads objects (source = \"objects\"): there is no backup tool's repository to check",
                target.name
            ),
        ),
        Err(e) => Finding::new("repository", Status::Error, e.to_string()),
    }
}

/// The `repository` validator: the tool's repository checked without a restore (the
/// tool's own verification where it has one, read line by line; WAL continuity).
pub(crate) async fn check_repository(
    settings: Settings<'_>,
    target: &TargetConfig,
    store: &Arc<dyn BackupStore>,
    run_id: &str,
    catalog: &Catalog,
    history: Option<&History>,
    tool: ToolCheck,
) -> drcheck_validators::Finding {
    use drcheck_validators::{Finding, Status};
    let t = Instant::now();
    // The tool's own verification re-reads the whole repository: a verify run of a
    // target with an integrity_schedule leaves it to the schedule while its last run passed.
    let reuse = match (history, tool) {
        (Some(h), ToolCheck::AtMostOncePerSchedule) => {
            let last = h.tool_check(&target.name).await.unwrap_or_default();
            reusable_tool_check(target.integrity_schedule.as_ref(), last, SystemTime::now())
        }
        _ => None,
    };
    let result = match catalog_sandbox(settings, target, &catalog.repository.describe(), run_id, Purpose::Integrity) {
        Ok(sandbox) => {
            let r = catalog.repository.integrity(&sandbox.host(), store, &catalog.restorable, reuse.as_deref()).await;
            sandbox.teardown();
            r
        }
        Err(e) => Err(RestoreError::Store(e)),
    };
    let tool_seconds = result.as_ref().ok().and_then(|i| i.tool_seconds);
    if let (Some(h), Some(seconds)) = (history, tool_seconds) {
        let passed = result.as_ref().is_ok_and(|i| i.problems.is_empty());
        if let Err(e) = h.record_tool_check(&target.name, SystemTime::now(), passed, seconds).await {
            tracing::warn!(target = %target.name, "cannot record the repository check: {e:#}");
        }
    }
    let finding = match result {
        Err(e) if e.is_backup_fault() => Finding::new("repository", Status::Failed, e.to_string()),
        Err(e) => Finding::new("repository", Status::Error, e.to_string()),
        Ok(i) if !i.problems.is_empty() => Finding::new("repository", Status::Failed, i.problems.join("; "))
            .covered("backups", i.backups)
            .covered("wal_files", i.wal_files),
        Ok(i) => {
            let mut detail = format!("{} restorable backups, WAL continuous over {} files", i.backups, i.wal_files);
            for n in &i.notes {
                detail.push_str("; ");
                detail.push_str(n);
            }
            Finding::new("repository", Status::Passed, detail)
                .covered("backups", i.backups)
                .covered("wal_files", i.wal_files)
        }
    };
    // Like every validator's: a pass over nothing (no restorable backup) is not a pass.
    let finding = drcheck_validators::enforce_coverage(finding).with("seconds", t.elapsed().as_secs_f64());
    match tool_seconds {
        Some(s) => finding.with("tool_seconds", s),
        None => finding,
    }
}

/// Whether a repository check runs the tool's own verification whatever was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToolCheck {
    /// `--integrity-only` and the integrity schedule: that is what they are for.
    Run,
    /// A verify run: not again while a passed one is younger than one period of the
    /// target's integrity_schedule.
    AtMostOncePerSchedule,
}

/// Why the tool's own verification need not run again: the last one passed less than
/// one period of `schedule` ago (the schedule runs the next). None without a schedule.
pub(crate) fn reusable_tool_check(
    schedule: Option<&drcheck_config::Schedule>,
    last: Option<(SystemTime, bool)>,
    now: SystemTime,
) -> Option<String> {
    let (at, true) = last? else { return None };
    let next = schedule?.next_after(now.into())?;
    let after = schedule?.next_after(next)?;
    let period = (after - next).to_std().ok()?;
    let age = now.duration_since(at).ok()?;
    (age < period).then(|| {
        format!(
            "it passed {} ago and runs once per integrity_schedule (every {})",
            drcheck_config::format_duration(age),
            drcheck_config::format_duration(period)
        )
    })
}

#[cfg(test)]
mod tool_check_tests {
    use super::*;
    use crate::verify::budget::{config_warnings, run_budget};
    use crate::verify::select::{archive_stalled, only_uploading};
    use std::time::Duration;

    fn config(target: &str) -> Result<drcheck_config::Config, String> {
        let text = format!(
            "[storage.r]\nkind = \"filesystem\"\npath = \"/tmp\"\n[[target]]\nname = \"t\"\nstorage = \"r\"\nrpo = \"1d\"\n{target}"
        );
        drcheck_config::parse(&text, std::path::Path::new("c.toml")).map_err(|e| e.to_string())
    }

    /// Issue 34: a 15–20 minute RTO gave a CronJob ~7 h (every validator's timeout added up).
    /// Issue 34: a fresh one-file base backup (`-X fetch`, no manifest) read "none a backup".
    #[test]
    fn a_base_backup_that_may_still_be_uploading_is_said_so() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let obj = |key: &str, age: u64| drcheck_restore::BackupObject {
            key: key.into(),
            size: 10,
            last_modified: now - Duration::from_secs(age),
            etag: None,
        };
        let why = only_uploading(&[obj("phys/b1/base.tar.gz", 30)], now).unwrap();
        assert!(why.contains("phys/b1/ (last written 30s ago") && why.contains("--backup phys/b1/"), "{why}");
        assert!(why.contains("taken as whole 10m after"), "{why}");
        assert_eq!(only_uploading(&[obj("phys/b1/base.tar.gz", 900)], now), None, "whole by now");
        assert_eq!(only_uploading(&[obj("notes.txt", 30)], now), None, "not a base backup");
    }

    /// Issue 34: an archive ending before the oldest backup was exit 3 for `random` and
    /// exit 1 (RPO missed) for `latest`: both judge its newest commit against the RPO.
    #[test]
    fn an_archive_older_than_the_rpo_has_stalled() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let day = Duration::from_secs(86_400);
        assert_eq!(archive_stalled(now - day * 2, day, now), Some(day * 2));
        assert_eq!(archive_stalled(now - day / 2, day, now), None, "idle since, within the RPO");
        assert_eq!(archive_stalled(now + day, day, now), None, "a clock ahead is not stalled");
    }

    /// Issue 48: the defaults warned against themselves ("a run may take 1h 40m … lower
    /// validators.phase_timeout"). The default phase is the RTO's share of the 4× rule.
    #[test]
    fn the_run_budget_is_the_restore_deadline_and_the_validate_phase() {
        let c = config("rto = \"15m\"\n").unwrap();
        // 15m × 2 + the phase's default (4 − 2) × 15m − 10m = 20m + 10m: exactly 4× the RTO.
        assert_eq!(c.targets[0].validators.phase_timeout, Duration::from_secs(20 * 60));
        assert_eq!(c.targets[0].validators.timeout, Duration::from_secs(20 * 60), "at most the phase");
        assert_eq!(run_budget(&c.targets[0]), Duration::from_secs(60 * 60));
        assert!(config_warnings(&c, true).is_empty(), "no warning with the defaults");
        let long = config("rto = \"15m\"\n[target.validators]\nphase_timeout = \"1h\"\n").unwrap();
        let w = config_warnings(&long, true);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("a run may take 1h 40m") && w[0].contains("lower validators.phase_timeout"), "{w:?}");
        assert!(config_warnings(&long, false).is_empty(), "the daemon's start warns of units only");
        let day = config("rto = \"6h\"\n").unwrap();
        assert_eq!(day.targets[0].validators.phase_timeout, Duration::from_secs(11 * 3600 + 50 * 60));
        assert_eq!(day.targets[0].validators.timeout, Duration::from_secs(30 * 60), "30m a validator");
        let tight = config("rto = \"15m\"\n[target.validators]\ntimeout = \"5m\"\nphase_timeout = \"20m\"\n").unwrap();
        assert_eq!(run_budget(&tight.targets[0]), Duration::from_secs(60 * 60));
        assert!(config_warnings(&tight, true).is_empty());
        let week = config("rto = \"8d\"\n").unwrap();
        assert!(config_warnings(&week, false)[0].contains("is over a week"));
        let e = config("rto = \"15m\"\n[target.validators]\ntimeout = \"5m\"\nphase_timeout = \"1m\"\n").unwrap_err();
        assert!(e.contains("phase_timeout") && e.contains("shorter than validators.timeout"), "{e}");
    }

    #[test]
    fn the_tools_verification_is_reused_within_one_period_of_the_integrity_schedule() {
        let hourly = drcheck_config::Schedule::parse("t", "0 0 * * * *").unwrap();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let ago = |s: u64| Some((now - Duration::from_secs(s), true));
        let why = reusable_tool_check(Some(&hourly), ago(600), now).unwrap();
        assert_eq!(why, "it passed 10m ago and runs once per integrity_schedule (every 1h)");
        assert_eq!(reusable_tool_check(Some(&hourly), ago(3700), now), None, "older than the period");
        assert_eq!(
            reusable_tool_check(Some(&hourly), Some((now - Duration::from_secs(60), false)), now),
            None,
            "failed"
        );
        assert_eq!(reusable_tool_check(None, ago(60), now), None, "no schedule: every run checks");
        assert_eq!(reusable_tool_check(Some(&hourly), None, now), None, "never checked");
    }
}
