//! One verification of one target:
//! select backup → fetch (streamed) → restore into a sandbox → validate → RTO/RPO.
//!
//! The result is always a [`RunReport`]; `Err` never leaves this module, because a
//! failed or incomplete run is still a run to record. Cancellation (SIGTERM) and the
//! RTO deadline drop the in-flight work, and the sandbox's drop guard tears it down.

use crate::measure::Measurements;
use crate::progress::Progress;
use crate::report::RestoreInfo;
use crate::report::{
    BackupInfo, Coverage, Phase, Rpo, Rto, RunError, RunReport, RunResult, ValidatorReport, secs, timestamp,
};
use drcheck_config::{Comparisons, Config, RecoveryTarget, Selection, SourceConfig, StorageConfig, TargetConfig};
use drcheck_restore::barman::Catalog as BarmanCatalog;
use drcheck_restore::fetch::FetchOptions;
use drcheck_restore::job::Delegated;
use drcheck_restore::job::{self, RestoreJob};
use drcheck_restore::objects::WalArchive;
use drcheck_restore::pgbackrest::{Repo, Stanza};
use drcheck_restore::recovery::WalReplay;
use drcheck_restore::request::Consistency;
use drcheck_restore::sandbox::reap_leftovers;
use drcheck_restore::source::Archive;
use drcheck_restore::store::backups_newest_first;
use drcheck_restore::{Backup, BackupStore, RestoreError, SandboxOptions, Stage, StoreError, open_store};
use sqlx::postgres::PgPoolOptions;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio_util::sync::CancellationToken;

/// Why a run stopped early, and whether the backup (or an objective) is to blame.
struct Stop {
    stage: String,
    message: String,
    result: RunResult,
    /// The run was asked for something that does not exist: the caller's mistake,
    /// not a run to record.
    usage: bool,
    /// The object changed while being read: another listing may see it whole.
    changed: bool,
}

/// The restored server stopped answering (`message`). Its processes crashing on what the
/// backup holds (a catalog edited so that every backend crashes), with nothing of the
/// host's to show, is the backup's; anything else cannot be told apart: the run's.
async fn restored_unreachable(sandbox: &drcheck_restore::Sandbox, stage: &str, message: String) -> Stop {
    // The server logs a crashed backend once it has reaped it, which can be after the
    // client saw its connection drop: the log is given two seconds to say so.
    let mut crash = sandbox.backend_crashed();
    for _ in 0..20 {
        if crash.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        crash = sandbox.backend_crashed();
    }
    match (sandbox.server_blame(), crash) {
        ((drcheck_restore::error::Blame::Backup, _), Some(crash)) => Stop::failed(
            stage,
            format!("{message} — the restored server's processes crash on what the backup holds ({crash})"),
        ),
        ((_, why), _) => Stop::incomplete(stage, drcheck_restore::error::with_reason(message, why)),
    }
}

impl Stop {
    fn usage(stage: &str, message: impl Into<String>) -> Self {
        Stop { stage: stage.into(), message: message.into(), result: RunResult::Error, usage: true, changed: false }
    }

    fn incomplete(stage: &str, message: impl Into<String>) -> Self {
        Stop { stage: stage.into(), message: message.into(), result: RunResult::Error, usage: false, changed: false }
    }

    fn failed(stage: &str, message: impl Into<String>) -> Self {
        Stop { stage: stage.into(), message: message.into(), result: RunResult::Failed, usage: false, changed: false }
    }

    fn aborted(stage: &str) -> Self {
        Stop {
            stage: stage.into(),
            message: "interrupted by a signal; sandbox torn down".into(),
            result: RunResult::Aborted,
            usage: false,
            changed: false,
        }
    }
}

impl From<RestoreError> for Stop {
    fn from(e: RestoreError) -> Self {
        let result = if e.is_backup_fault() { RunResult::Failed } else { RunResult::Error };
        let changed = matches!(&e, RestoreError::Store(s) if s.changed);
        // A backup that needs a key the configuration does not give: the operator's to fix.
        let usage = matches!(&e, RestoreError::Config { .. });
        Stop { stage: e.stage().to_string(), message: e.to_string(), result, usage, changed }
    }
}

fn store_stop(stage: Stage, e: StoreError) -> Stop {
    Stop::incomplete(stage.as_str(), e.to_string())
}

/// What one run accumulates as it goes.
struct Run<'a> {
    target: &'a TargetConfig,
    report: RunReport,
    /// The instants it observed; objectives are computed from them at the end.
    m: Measurements,
    /// Which attempt this is (1, or 2 after starting over): names the sandbox, since
    /// the first attempt's may still be being removed.
    attempt: u32,
    /// The chosen backup already counts as proven in the report's coverage (a pass adds
    /// it otherwise).
    chosen_proven: bool,
}

impl Run<'_> {
    fn phase(&mut self, name: &str, d: Duration) {
        self.report.phases.push(Phase { name: name.into(), seconds: secs(d) });
    }

    /// Forgets what an attempt measured, for another from a fresh listing.
    fn start_over(&mut self) {
        let r = &mut self.report;
        r.backup = None;
        r.phases.clear();
        r.validators.clear();
        r.restore = None;
        r.primary_queries = None;
        r.rpo.recovery_window_start = None;
        r.coverage = None;
        self.chosen_proven = false;
        self.m = Measurements::default();
        self.attempt += 1;
    }

    /// The name of this attempt's sandbox.
    fn sandbox_name(&self) -> String {
        match self.attempt {
            1 => self.report.run_id.clone(),
            n => format!("{}-{n}", self.report.run_id),
        }
    }
}

/// Lists the backups of a target, newest first.
pub async fn list_backups(config: &Config, target: &TargetConfig) -> Result<(String, Vec<Backup>), StoreError> {
    let store = open_store(&target.storage, &config.storage[&target.storage]).await;
    if let Some((described, mut backups, _)) = tool_catalog(config, target, &store, &new_run_id()).await? {
        backups.reverse();
        return Ok((described, backups));
    }
    let all = store.list(&target.prefix).await?;
    Ok((store.describe(), backups_newest_first(&all)))
}

/// For a target whose backups come from a backup tool: its catalog (oldest first), read
/// by the tool itself in a sandbox directory of its own (contained, as for a restore),
/// with what the restore needs to delegate to the tool. `None` for `source = "objects"`.
async fn tool_catalog(
    config: &Config,
    target: &TargetConfig,
    store: &Arc<dyn BackupStore>,
    run_id: &str,
) -> Result<Option<(String, Vec<Backup>, Delegated)>, StoreError> {
    let StorageConfig::S3(s3) = &config.storage[&target.storage] else { return Ok(None) };
    let delegated = match &target.source {
        SourceConfig::Objects => return Ok(None),
        SourceConfig::Pgbackrest { stanza, repo_path, cipher_pass } => Repo {
            stanza: stanza.clone(),
            repo_path: repo_path.clone(),
            bucket: s3.bucket.clone(),
            endpoint: s3.endpoint.clone(),
            region: s3.region.clone(),
            path_style: s3.path_style,
            ca_file: s3.ca_file.clone(),
            verify_tls: s3.verify_tls,
            cipher_pass: cipher_pass.as_ref().map(|p| p.expose().to_string()),
        },
        SourceConfig::BarmanCloud { server_name } => {
            let catalog = BarmanCatalog {
                bucket: s3.bucket.clone(),
                prefix: target.prefix.trim_matches('/').to_string(),
                server_name: server_name.clone(),
                endpoint: s3.endpoint.clone(),
                region: s3.region.clone(),
                ca_file: s3.ca_file.clone(),
            };
            let sandbox = catalog_sandbox(config, &catalog.describe(), run_id, Purpose::Catalog)?;
            let backups = catalog.catalog(&sandbox, store).await;
            sandbox.teardown();
            return Ok(Some((catalog.describe(), backups?, Arc::new(catalog))));
        }
    };
    let repo = delegated;
    let sandbox = catalog_sandbox(config, &repo.describe(), run_id, Purpose::Catalog)?;
    let catalog = repo.catalog(&sandbox).await;
    sandbox.teardown();
    let catalog = catalog?;
    Ok(Some((repo.describe(), catalog.backups.clone(), Arc::new(Stanza { repo, catalog }))))
}

/// The `repository` validator on its own (`verify --integrity-only`, `integrity_schedule`).
pub async fn integrity_only(config: &Config, target: &TargetConfig) -> drcheck_validators::Finding {
    use drcheck_validators::{Finding, Status};
    let store = open_store(&target.storage, &config.storage[&target.storage]).await;
    let run_id = new_run_id();
    match tool_catalog(config, target, &store, &run_id).await {
        Ok(Some((_, backups, delegated))) => {
            check_repository(config, target, &store, &run_id, &backups, &delegated, ToolCheck::Run).await
        }
        Ok(None) => Finding::new(
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
pub async fn check_repository(
    config: &Config,
    target: &TargetConfig,
    store: &Arc<dyn BackupStore>,
    run_id: &str,
    backups: &[Backup],
    delegated: &Delegated,
    tool: ToolCheck,
) -> drcheck_validators::Finding {
    use drcheck_validators::{Finding, Status};
    let t = Instant::now();
    // The tool's own verification re-reads the whole repository: a verify run of a
    // target with an integrity_schedule leaves it to the schedule while its last run passed.
    let history = crate::history::History::open(&config.state.url).await.ok();
    let reuse = match (&history, tool) {
        (Some(h), ToolCheck::AtMostOncePerSchedule) => {
            let last = h.tool_check(&target.name).await.unwrap_or_default();
            reusable_tool_check(target.integrity_schedule.as_ref(), last, SystemTime::now())
        }
        _ => None,
    };
    let result = match catalog_sandbox(config, &delegated.describe(), run_id, Purpose::Integrity) {
        Ok(sandbox) => {
            let r = delegated.integrity(&sandbox.host(), store, backups, reuse.as_deref()).await;
            sandbox.teardown();
            r
        }
        Err(e) => Err(RestoreError::Store(e)),
    };
    let tool_seconds = result.as_ref().ok().and_then(|i| i.tool_seconds);
    if let (Some(h), Some(seconds)) = (&history, tool_seconds) {
        let passed = result.as_ref().is_ok_and(|i| i.problems.is_empty());
        if let Err(e) = h.record_tool_check(&target.name, SystemTime::now(), passed, seconds).await {
            tracing::warn!(target = %target.name, "cannot record the repository check: {e:#}");
        }
    }
    if let Some(h) = history {
        h.close().await;
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
pub enum ToolCheck {
    /// `--integrity-only` and the integrity schedule: that is what they are for.
    Run,
    /// A verify run: not again while a passed one is younger than one period of the
    /// target's integrity_schedule.
    AtMostOncePerSchedule,
}

/// Why the tool's own verification need not run again: the last one passed less than
/// one period of `schedule` ago (the schedule runs the next). None without a schedule.
fn reusable_tool_check(
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

/// RTO and RPO from the run's measurement record (`measure.rs`), and the backup's time
/// as the backup itself records it.
fn objectives(run: &mut Run<'_>) {
    let (m, target, r) = (&run.m, run.target, &mut run.report);
    if let Some(rto) = m.rto() {
        r.rto.measured_seconds = Some(secs(rto));
        r.rto.met = Some(rto <= target.rto);
    }
    r.rpo.backup_age_seconds = m.backup_age().map(secs);
    r.rpo.recoverable_point_age_seconds = m.recoverable_point_age().map(secs);
    r.rpo.recoverable_point = m.recoverable_point().map(timestamp);
    r.rpo.measured_at = m.recoverable_point().and(m.listed_at).map(timestamp);
    r.rpo.proven_point = m.proven_point().map(timestamp);
    r.rpo.met = m.rpo_met(target.rpo);
    if let (Some(b), Some(c)) = (r.backup.as_mut(), m.consistent) {
        b.created_at = Some(timestamp(c.at));
        b.created_at_source = Some(c.source.to_string());
    }
}

/// How the sandbox of run `run_id` is made, from `[sandbox]`.
pub(crate) fn sandbox_options(config: &Config, run_id: String) -> SandboxOptions {
    SandboxOptions {
        scratch_dir: config.sandbox.scratch_dir.clone(),
        run_id,
        profile: config.sandbox.profile,
        require_containment: config.sandbox.require_containment,
        user: config.sandbox.user.clone(),
        memory_limit: Some(config.sandbox.memory_limit),
    }
}

/// A sandbox directory (no server) for a backup tool reading its repository: listing
/// the catalog, reading the archive's reach, checking integrity.
///
/// Each `purpose` of a run gets a directory of its own: a sandbox is torn down on a
/// thread of its own after the run is done with it, so the next one of the same run
/// must never need the same name (it would find the last one still being removed).
fn catalog_sandbox(
    config: &Config,
    store: &str,
    run_id: &str,
    purpose: Purpose,
) -> Result<drcheck_restore::Sandbox, StoreError> {
    drcheck_restore::Sandbox::create(&sandbox_options(config, purpose.sandbox_name(run_id))).map_err(|e| StoreError {
        store: store.to_string(),
        message: e.to_string(),
        unreachable: false,
        changed: false,
    })
}

/// What a run reads a backup tool's repository for, each in a sandbox of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// Listing the catalog (`tool_catalog`).
    Catalog,
    /// Reading the newest transaction the archive holds (`draw_point`).
    Reach,
    /// The `repository` validator (`check_repository`).
    Integrity,
}

impl Purpose {
    #[cfg(test)]
    const ALL: [Purpose; 3] = [Purpose::Catalog, Purpose::Reach, Purpose::Integrity];

    fn sandbox_name(self, run_id: &str) -> String {
        let purpose = match self {
            Purpose::Catalog => "catalog",
            Purpose::Reach => "reach",
            Purpose::Integrity => "integrity",
        };
        format!("{run_id}-{purpose}")
    }
}

/// Downloads a single-object backup to `output` with the concurrent fetcher; with
/// `decode`, its compression and encryption undone as a verification undoes them (gpg
/// contained in a sandbox of its own, every layer bounded by `max_expansion`), so what
/// lands is what pg_restore or psql reads. Returns the bytes written and the layers
/// undone, outermost first.
pub async fn download(
    config: &Config,
    target: &TargetConfig,
    backup: &Backup,
    output: &std::path::Path,
    decode: bool,
) -> anyhow::Result<(u64, Vec<String>)> {
    use drcheck_restore::logical::{self, Copy, copy_in_blocks};
    let store = open_store(&target.storage, &config.storage[&target.storage]).await;
    let shown = store.describe();
    let Some(object) = backup.parts.first() else { anyhow::bail!("{} has no object to download", backup.key) };
    let mut reader = drcheck_restore::fetch::parallel(store, object, fetch_options(config, target));
    let mut sandbox = None;
    let mut layers = Vec::new();
    if decode {
        let sb = drcheck_restore::Sandbox::create(&sandbox_options(config, format!("{}-decode", new_run_id())))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let decryption = std::sync::Mutex::new(None);
        let ceiling = ((backup.size as f64 * config.sandbox.max_expansion).min(u64::MAX as f64) as u64)
            .saturating_add(CLUSTER_ALLOWANCE);
        let peel = logical::Peel { decrypt: &target.decrypt, decryption: &decryption, expansion_ceiling: ceiling };
        let peeled = async {
            let head = logical::read_head(&mut reader, &shown).await?;
            logical::peel(&peel, &sb, head, reader, &shown).await
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
        reader = logical::rejoin(head, inner);
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

/// How a target's backups are downloaded.
fn fetch_options(config: &Config, target: &TargetConfig) -> FetchOptions {
    match &config.storage[&target.storage] {
        StorageConfig::S3(s3) => FetchOptions {
            part_size: s3.part_size,
            concurrency: s3.concurrency,
            window: s3.part_size.max(drcheck_restore::fetch::WINDOW),
            backoff: drcheck_restore::retry::Backoff::within(s3.retry_window),
        },
        StorageConfig::Filesystem { .. } => FetchOptions::default(),
    }
}

/// The database a `postgres://` URL names, for physical restores (which hold every database).
pub fn database_of(url: &str) -> Option<String> {
    let path = url.split('?').next()?.rsplit_once('/')?.1;
    (!path.is_empty() && !path.contains('@')).then(|| path.to_string())
}

/// The most of an error message a report, the history and alerts keep. Messages quote
/// tools' output, and that output quotes the backup: whoever wrote the backup must not
/// be able to fill the history or an alert with it.
pub const MAX_ERROR_CHARS: usize = 2000;

/// `text` cut to `max` characters, for one log line.
fn short(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// `message` cut to [`MAX_ERROR_CHARS`] characters (head and tail kept: the tool's
/// name leads, its last words are usually the reason), saying how much was left out.
fn cap_message(message: &str) -> String {
    let chars: Vec<char> = message.chars().collect();
    if chars.len() <= MAX_ERROR_CHARS {
        return message.to_string();
    }
    let keep = MAX_ERROR_CHARS / 2;
    let head: String = chars[..keep].iter().collect();
    let tail: String = chars[chars.len() - keep..].iter().collect();
    format!("{head} […{} characters left out…] {tail}", chars.len() - 2 * keep)
}

/// How long one run of `t` may take at most: the restore's deadline (`rto ×
/// abort_factor`), the validate phase's (`validators.phase_timeout`, every validator of
/// every database), and ten minutes to select, record and tear down. The lease's TTL and
/// a CronJob's `activeDeadlineSeconds` are both this, so Kubernetes never kills a run its
/// lease still allows.
pub fn run_budget(t: &TargetConfig) -> Duration {
    t.rto.mul_f64(t.abort_factor) + t.validators.phase_timeout + Duration::from_secs(600)
}

/// What in a loaded config is valid but probably not meant (issue 34): an RTO over a
/// week (a unit mistaken) — logged by the daemon on load — and, with `budgets` (`config
/// check`, `deploy kubernetes`: where the deadline is shown or generated), a run budget —
/// the lease's TTL and a CronJob's deadline — over four times the RTO, naming what makes
/// it so.
pub fn config_warnings(config: &Config, budgets: bool) -> Vec<String> {
    let week = Duration::from_secs(7 * 86_400);
    let mut out = Vec::new();
    for t in &config.targets {
        let rto = drcheck_config::format_duration(t.rto);
        if t.rto > week {
            out.push(format!("target {:?}: rto = {rto:?} is over a week — is the unit the one you meant?", t.name));
            continue;
        }
        let budget = run_budget(t);
        if budgets && budget > t.rto * 4 {
            out.push(format!(
                "target {:?}: a run may take {} (rto {rto} × abort_factor {} + validators.phase_timeout {} + 10m), \
                 over 4× the RTO: a stuck run holds its lease and its CronJob that long — lower validators.phase_timeout",
                t.name,
                drcheck_config::format_duration(budget),
                t.abort_factor,
                drcheck_config::format_duration(t.validators.phase_timeout),
            ));
        }
    }
    out
}

/// How long a run may hold its target's lease: its whole [`run_budget`].
pub fn lease_ttl(t: &TargetConfig) -> Duration {
    run_budget(t)
}

/// What a restored cluster writes regardless of the backup's size.
const CLUSTER_ALLOWANCE: u64 = 1 << 30;

/// Refuses to start when `scratch_dir` lacks room for the restore; returns the most
/// the restore may write: the backup's size × `max_expansion` plus what any cluster
/// needs (1 GiB: catalogs, WAL up to `max_wal_size`), at most the free space less a
/// reserve (5 % of the file system, at most 1 GiB), so a bomb never fills the disk.
fn check_disk(config: &Config, backup: &Backup) -> Result<(u64, u64), Stop> {
    let dir = &config.sandbox.scratch_dir;
    // A configured scratch_dir that does not exist yet is made, as the private directory
    // inside it would be (issue 34: it was an error, "cannot check free space … ENOENT").
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(|e| {
            Stop::incomplete("sandbox", format!("cannot create sandbox.scratch_dir {}: {e}", dir.display()))
        })?;
    }
    let stat = nix::sys::statvfs::statvfs(dir)
        .map_err(|e| Stop::incomplete("sandbox", format!("cannot check free space in {}: {e}", dir.display())))?;
    let free = stat.blocks_available() as u64 * stat.fragment_size() as u64;
    let total = stat.blocks() as u64 * stat.fragment_size() as u64;
    let reserve = (total / 20).min(1 << 30);
    let ceiling = (backup.size as f64 * config.sandbox.max_expansion).min(u64::MAX as f64) as u64;
    let ceiling = ceiling.saturating_add(CLUSTER_ALLOWANCE);
    let need = (backup.size as f64 * config.sandbox.expansion_factor) as u64;
    if free < need {
        return Err(Stop::incomplete(
            "sandbox",
            format!(
                "not enough space in {}: {free} bytes free, restoring a {}-byte backup needs about {need} (size × expansion_factor {})",
                dir.display(),
                backup.size,
                config.sandbox.expansion_factor
            ),
        ));
    }
    Ok((ceiling, free.saturating_sub(reserve)))
}

/// Verifies `target`: the latest backup, or `backup_key` when given.
pub async fn verify(
    config: &Config,
    target: &TargetConfig,
    backup_key: Option<&str>,
    cancel: &CancellationToken,
    progress: &Progress,
) -> RunReport {
    verify_as(new_run_id(), config, target, backup_key, cancel, progress).await
}

/// The record of a run that died without recording itself (SIGKILL, the OOM killer),
/// made by the run that took over its lease: `aborted`, saying who it was. Its start is
/// unknown; the record is dated when it was found.
pub fn died_report(target: &TargetConfig, holder: &str) -> RunReport {
    let now = timestamp(SystemTime::now());
    RunReport {
        run_id: new_run_id(),
        target: target.name.clone(),
        result: RunResult::Aborted,
        started_at: now.clone(),
        finished_at: now,
        backup: None,
        phases: Vec::new(),
        rto: Rto { target_seconds: secs(target.rto), measured_seconds: None, met: None },
        rpo: Rpo { target_seconds: secs(target.rpo), ..Default::default() },
        validators: Vec::new(),
        restore: None,
        primary_queries: None,
        error: Some(RunError {
            stage: "unknown".into(),
            message: format!(
                "{holder} died without recording its run (its process is gone; found when the next run took its lease)"
            ),
        }),
        degraded: None,
        coverage: None,
        usage_error: None,
    }
}

/// A fresh run id.
pub fn new_run_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// [`verify`] with a run id chosen by the caller (the trigger API answers with it).
pub async fn verify_as(
    run_id: String,
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
            run_id,
            target: target.name.clone(),
            result: RunResult::Passed,
            started_at: timestamp(started),
            finished_at: String::new(),
            backup: None,
            phases: Vec::new(),
            rto: Rto { target_seconds: secs(target.rto), measured_seconds: None, met: None },
            rpo: Rpo {
                target_seconds: secs(target.rpo),
                backup_age_seconds: None,
                met: None,
                data_lag_seconds: None,
                recoverable_point_age_seconds: None,
                recoverable_point: None,
                measured_at: None,
                proven_point: None,
                recovery_window_start: None,
            },
            validators: Vec::new(),
            restore: None,
            primary_queries: None,
            error: None,
            degraded: None,
            coverage: None,
            usage_error: None,
        },
        m: Measurements::default(),
        attempt: 1,
        chosen_proven: false,
    };
    tracing::info!(target = %target.name, run_id = %run.report.run_id, "verification started");
    let mut attempts = 0;
    let outcome = loop {
        attempts += 1;
        let outcome = tokio::select! {
            r = steps(config, &mut run, backup_key, cancel, progress) => r,
            // Dropping `steps` drops the sandbox, which stops its server and removes its files.
            _ = cancel.cancelled() => Err(Stop::aborted("interrupted")),
        };
        match outcome {
            // The object changed under the download: once more from a fresh listing,
            // which sees the new version whole.
            Err(stop) if stop.changed && attempts == 1 => {
                tracing::warn!(target = %target.name, reason = %stop.message, "starting over from a fresh listing");
                run.start_over();
            }
            other => break other,
        }
    };
    progress.finish();
    objectives(&mut run);
    let r = &mut run.report;
    r.result = match outcome {
        Err(stop) => {
            let result = stop.result;
            if stop.usage {
                r.usage_error = Some(stop.message.clone());
            }
            r.error = Some(RunError { stage: stop.stage, message: cap_message(&stop.message) });
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
    // A pass proves the chosen backup: the coverage says so (and the evidence, which
    // reads it), not only the count.
    if r.result == RunResult::Passed
        && let Some(c) = r.coverage.as_mut()
    {
        if !run.chosen_proven {
            c.proven = (c.proven + 1).min(c.restorable);
        }
        let key = r.backup.as_ref().map(|b| b.key.as_str());
        let point = r.restore.as_ref().is_some_and(|i| i.recovery_target.is_some());
        if let Some(b) = c.backups.iter_mut().find(|b| Some(b.label.as_str()) == key) {
            b.last_proven_at = Some(r.finished_at.clone());
            b.points_proven += u64::from(point);
        }
    }
    let r = &run.report;
    if matches!(r.result, RunResult::Passed) {
        tracing::info!(target = %target.name, run_id = %r.run_id, result = r.result.as_str(), "verification finished");
    } else {
        // A failed run says why in its own log line: each failing check with its reason.
        let failing: Vec<String> = r
            .validators
            .iter()
            .filter(|v| v.status == "failed" || v.status == "error")
            .map(|v| format!("{} {}: {}", v.name, v.status, short(&v.detail, 300)))
            .collect();
        let reason = match (&r.error, failing.is_empty()) {
            (Some(e), _) => format!("{}: {}", e.stage, short(&e.message, 500)),
            (None, false) => failing.join("; "),
            (None, true) => r.degraded.clone().unwrap_or_default(),
        };
        tracing::warn!(target = %target.name, run_id = %r.run_id, result = r.result.as_str(), reason = %reason, "verification finished");
    }
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
    let mut repository = None;
    let tool =
        tool_catalog(config, target, &store, &run.report.run_id).await.map_err(|e| store_stop(Stage::Select, e))?;
    // When each backup last passed: what `least-proven` works through and coverage counts.
    let proven = proven_backups(config, target).await;
    // A random point in time is drawn in the recovery window first; from then on the
    // run is that of a fixed target (the same choice of backup, the same replay).
    let drawn_target;
    let drawn = match &target.recovery_target {
        RecoveryTarget::Random(window) => {
            progress.phase(&target.name, "reading the recovery window");
            let (at, reach) = draw_point(config, target, &store, tool.as_ref(), &run.report.run_id, *window).await?;
            tracing::info!(target = %target.name, at = %timestamp(at), "random point in time drawn");
            run.m.archive_reach = Some(reach);
            drawn_target = TargetConfig { recovery_target: RecoveryTarget::Time(timestamp(at)), ..target.clone() };
            Some(&drawn_target)
        }
        // A fixed point proves T; the RPO is still the archive's: how far it reaches now.
        RecoveryTarget::Time(_) | RecoveryTarget::Lsn(_) if has_archive(target) => {
            progress.phase(&target.name, "reading the archive's reach");
            match archive_reach(config, target, &store, tool.as_ref(), &run.report.run_id).await {
                Ok(Some(reach)) => run.m.archive_reach = Some(reach.at),
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
    let (backup, delegated, restorable) = match tool {
        Some((described, backups, delegated)) => {
            repository = Some((backups.clone(), delegated.clone()));
            let (backup, restorable) = select_from_catalog(&backups, target, backup_key, &described, proven.as_ref())?;
            run.report.rpo.recovery_window_start = backups
                .iter()
                .find(|b| b.catalog.as_ref().is_some_and(|c| c.status == "ok"))
                .map(|b| timestamp(b.last_modified));
            (backup, Some(delegated), restorable)
        }
        None => {
            let (backup, restorable) = select(store.as_ref(), target, backup_key, proven.as_ref()).await?;
            // Base backups with an archive (`wal_prefix`): the window starts at the oldest
            // one's end (its last part's upload bounds it), as a tool's catalog says.
            if target.wal_prefix.is_some() {
                run.report.rpo.recovery_window_start = restorable
                    .iter()
                    .flatten()
                    .filter(|b| b.is_physical())
                    .map(|b| b.last_modified)
                    .min()
                    .map(timestamp);
            }
            (backup, None, restorable)
        }
    };
    // A full listing says which backups left the store: their proofs go with them.
    if let (None, None, Some(listed)) = (backup_key, fixed_time(target), &restorable) {
        let keys: Vec<String> = listed.iter().map(|b| b.key.clone()).collect();
        forget_removed_proofs(config, target, &keys).await;
    }
    // What the RPO judges: the archive's reach, else the newest backup's time.
    run.m.has_archive = has_archive(target);
    run.m.replays_to_end = matches!(target.recovery_target, RecoveryTarget::Latest);
    let newest = restorable.as_ref().and_then(|r| r.first());
    run.m.chosen_is_newest = newest.is_some_and(|n| n.key == backup.key);
    if let Some(n) = newest.filter(|n| n.key != backup.key) {
        match n.catalog {
            Some(_) => run.m.newest_consistent = Some(n.last_modified),
            None => run.m.newest_uploaded_at = Some(n.last_modified),
        }
    }
    if let (Some(proven), Some(restorable)) = (&proven, &restorable) {
        let (coverage, chosen_proven) =
            coverage(restorable, proven, target.prove_within, &backup.key, SystemTime::now());
        run.report.coverage = Some(coverage);
        run.chosen_proven = chosen_proven;
    }
    // Ages are taken now, when the store said what exists — never after the restore.
    run.m.listed_at = Some(SystemTime::now());
    match &backup.catalog {
        // The tool's catalog says when the backup stopped.
        Some(_) => {
            run.m.consistent = Some(Consistency { at: backup.last_modified, source: "catalog (backup stop)" });
        }
        // An object's upload time is not its data's: the restore reads that.
        None => run.m.uploaded_at = Some(backup.last_modified),
    }
    run.report.backup = Some(BackupInfo {
        key: backup.key.clone(),
        size_bytes: backup.size,
        created_at: None,
        created_at_source: None,
        uploaded_at: run.m.uploaded_at.map(timestamp),
        format: None,
        encryption: None,
        kind: backup.catalog.as_ref().map(|c| c.kind.clone()),
        source: backup.catalog.as_ref().map(|c| c.tool.to_string()),
    });

    let (expansion_ceiling, free_for_restore) = check_disk(config, &backup)?;
    for dir in reap_leftovers(&config.sandbox.scratch_dir) {
        tracing::warn!(dir = %dir.display(), "removed a sandbox left by an earlier run");
    }

    // The RTO clock: from the start of the fetch until the restored database answers.
    let fetch_start = Instant::now();
    let deadline = target.rto.mul_f64(target.abort_factor);
    progress.bytes(&target.name, "fetch+restore", backup.size);
    let format_seen = std::sync::Mutex::new(None::<String>);
    let first_byte = std::sync::Arc::new(std::sync::Mutex::new(None::<Duration>));
    let on_format = |f: &str| *format_seen.lock().unwrap() = Some(f.to_string());
    let job = RestoreJob {
        store: store.clone(),
        backup: &backup,
        fetch: fetch_options(config, target),
        sandbox: sandbox_options(config, run.sandbox_name()),
        pg_bindir: config.sandbox.pg_bindir.clone(),
        format: target.format,
        jobs: target.restore_jobs,
        globals_key: target.globals_key.clone(),
        wal: target
            .wal_prefix
            .as_ref()
            .map(|p| WalReplay { prefix: p.clone(), target: target.recovery_target.clone() }),
        delegated,
        recovery_target: target.recovery_target.clone(),
        database_hint: target.primary.as_ref().and_then(|p| database_of(p.expose())),
        on_format: &on_format,
        progress: {
            let (counter, first) = (progress.byte_counter(), first_byte.clone());
            std::sync::Arc::new(move |n: u64| {
                if n > 0 {
                    first.lock().unwrap().get_or_insert_with(|| fetch_start.elapsed());
                }
                counter(n)
            })
        },
        sandbox_ready_in: Default::default(),
        max_write_bytes: expansion_ceiling.min(free_for_restore).max(1 << 20),
        expansion_ceiling,
        decrypt: &target.decrypt,
        decryption: Default::default(),
    };
    // Which containment the restore runs under is known before it starts, and reported
    // even when the restore fails.
    run.report.restore = Some(RestoreInfo {
        profile: config.sandbox.profile.as_str().into(),
        jobs: target.restore_jobs,
        server_major: None,
        recovered_to: None,
        containment: Some(drcheck_restore::sandbox::containment_name()),
        manifest: None,
        first_byte_seconds: None,
        decrypted_by: None,
        recovery_target: None,
        target_reached: None,
        privileges_skipped: None,
    });
    let outcome = tokio::time::timeout(deadline, job::run(&job)).await;
    if let Some(d) = *job.sandbox_ready_in.lock().unwrap() {
        run.phase("sandbox", d);
    }
    if let (Some(b), Some(f)) = (run.report.backup.as_mut(), format_seen.lock().unwrap().take()) {
        b.format = Some(f);
    }
    if let Some(d) = job.decryption.lock().unwrap().take() {
        if let Some(b) = run.report.backup.as_mut() {
            b.encryption = Some(d.encryption);
        }
        if let Some(r) = run.report.restore.as_mut() {
            r.decrypted_by = d.decrypted_by;
        }
    }
    let restored = match outcome {
        Ok(Err(e)) => {
            if let Some(info) = run.report.restore.as_mut()
                && e.to_string().contains(drcheck_restore::recovery::TARGET_NOT_REACHED)
            {
                info.recovery_target = Some(recovery_target_info(&target.recovery_target, random));
                info.target_reached = Some(false);
            }
            return Err(e.into());
        }
        Ok(Ok(r)) => r,
        Err(_) => {
            run.m.fetch_started = Some(fetch_start);
            run.m.ready = Some(fetch_start.elapsed());
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
    run.phase("fetch", restored.fetch);
    run.phase("restore", restored.restore);
    run.m.fetch_started = Some(fetch_start);
    run.m.fetch_ended = Some(restored.fetch);
    run.m.first_byte = *first_byte.lock().unwrap();
    if let Some(c) = restored.consistent_at {
        run.m.consistent = Some(c);
    }
    run.m.recovered_to = restored.recovered_to.as_deref().and_then(|t| humantime::parse_rfc3339_weak(t).ok());
    if let Some(info) = run.report.restore.as_mut() {
        info.server_major = restored.sandbox.bin().major;
        info.recovered_to = restored.recovered_to.clone();
        // Replay was asked for a point: say which (physical restores with an archive).
        let replayed =
            restored.format.contains("physical") && (target.wal_prefix.is_some() || backup.catalog.is_some());
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
        info.first_byte_seconds = first_byte.lock().unwrap().map(secs);
        info.privileges_skipped = restored.skipped_privileges;
    }
    progress.phase(&target.name, "checking the restored database");
    let physical = restored.format.contains("physical");
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
    run.m.ready = Some(fetch_start.elapsed());
    pool.close().await;

    progress.phase(&target.name, "validating");
    let t = Instant::now();
    let cutoff = run.m.as_of_cutoff();
    let horizon = restored.horizon.as_ref().map(|h| drcheck_validators::asof::CopyHorizon {
        next_xid: h.next_xid,
        system_identifier: h.system_identifier.clone(),
    });
    let validated = match crate::validate::run(config, target, &sandbox, &database, physical, cutoff, horizon).await {
        Ok(v) => v,
        Err(e) => return Err(restored_unreachable(&sandbox, "validate", e).await),
    };
    run.report.validators = validated.findings.iter().map(ValidatorReport::from).collect();
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
    if let Some((backups, delegated)) = &repository
        && target.validators.enabled.iter().any(|v| v == "repository")
    {
        let f = check_repository(
            config,
            target,
            &store,
            &run.report.run_id,
            backups,
            delegated,
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

/// The checks that erred because the primary refused drcheck's role (SQLSTATE 42501,
/// a missing grant), made `skipped` saying so; their names.
fn refused_by_the_primary(validators: &mut [ValidatorReport]) -> Vec<String> {
    let mut names = Vec::new();
    for v in validators.iter_mut().filter(|v| v.status == "error" && v.detail.contains("(SQLSTATE 42501)")) {
        v.status = "skipped".into();
        v.detail = format!("skipped (comparisons = \"best-effort\"): the primary refused drcheck's role: {}", v.detail);
        names.push(v.name.clone());
    }
    names
}

/// The backup a run verifies from a tool's catalog (oldest first): never one the tool
/// marks in error; the latest, a random one finished within the window, or the named one.
fn select_from_catalog(
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
    let usable: Vec<&Backup> = all.iter().filter(|b| b.catalog.as_ref().is_some_and(|c| c.status == "ok")).collect();
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

/// Each proven backup's proof record, by key.
pub(crate) type Proven = std::collections::HashMap<String, crate::history::Proof>;

/// [`History::proofs`] of the target; `None` (with a log line) when the history cannot be
/// read — then `least-proven` takes the newest and coverage is not reported.
pub(crate) async fn proven_backups(config: &Config, target: &TargetConfig) -> Option<Proven> {
    let history = match crate::history::History::open(&config.state.url).await {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(target = %target.name, "cannot read which backups were proven: {e:#}");
            return None;
        }
    };
    let proven = history.proofs(&target.name).await;
    history.close().await;
    proven.map_err(|e| tracing::warn!(target = %target.name, "cannot read which backups were proven: {e:#}")).ok()
}

/// A target's coverage right now: its restorable backups (a fresh listing) against their
/// proof records — what the daemon exports for every target from its start, before any
/// run of it.
pub async fn coverage_now(config: &Config, target: &TargetConfig) -> Result<Coverage, String> {
    let (_, listed) = list_backups(config, target).await.map_err(|e| e.to_string())?;
    let restorable: Vec<Backup> =
        listed.into_iter().filter(|b| b.catalog.as_ref().is_none_or(|c| c.status == "ok")).collect();
    let proven = proven_backups(config, target).await.ok_or("the history store cannot be read")?;
    Ok(coverage(&restorable, &proven, target.prove_within, "", SystemTime::now()).0)
}

/// Forgets the proofs of backups a full listing (`listed`: every restorable key) no
/// longer finds: a proof is kept while its backup is in the store.
async fn forget_removed_proofs(config: &Config, target: &TargetConfig, listed: &[String]) {
    let Ok(history) = crate::history::History::open(&config.state.url).await else { return };
    match history.keep_proofs_of(&target.name, listed).await {
        Ok(0) => {}
        Ok(n) => {
            tracing::info!(target = %target.name, forgotten = n, "proofs of backups no longer in the store forgotten")
        }
        Err(e) => tracing::warn!(target = %target.name, "cannot forget the proofs of removed backups: {e:#}"),
    }
    history.close().await;
}

/// The backup `select` takes from the restorable ones (newest first): the newest; a
/// random one finished within the window; or the least proven — never proven first
/// (the newest of those), else the one whose last pass is oldest.
fn pick<'a>(newest_first: &'a [Backup], select: Selection, proven: Option<&Proven>) -> Option<&'a Backup> {
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
fn coverage(
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
        .map(|b| crate::report::BackupProof {
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
fn recovery_target_info(target: &RecoveryTarget, random: bool) -> crate::report::RecoveryTargetInfo {
    let (kind, value) = match target {
        RecoveryTarget::Latest | RecoveryTarget::Random(_) => ("latest", None),
        RecoveryTarget::Immediate => ("immediate", None),
        RecoveryTarget::Time(t) => ("time", Some(t.clone())),
        RecoveryTarget::Lsn(l) => ("lsn", Some(l.clone())),
    };
    crate::report::RecoveryTargetInfo { kind: kind.into(), value, random }
}

/// Whether the target keeps a WAL archive: `wal_prefix`, or a backup tool's repository.
fn has_archive(target: &TargetConfig) -> bool {
    target.wal_prefix.is_some() || !matches!(target.source, SourceConfig::Objects)
}

/// How far the target's WAL archive replays: its newest transaction end, read from the
/// WAL itself (every source's archive answers the same question), in a sandbox of its own.
async fn archive_reach(
    config: &Config,
    target: &TargetConfig,
    store: &Arc<dyn BackupStore>,
    tool: Option<&(String, Vec<Backup>, Delegated)>,
    run_id: &str,
) -> Result<Option<drcheck_restore::reach::Reach>, Stop> {
    let described = tool.map(|(d, _, _)| d.clone()).unwrap_or_else(|| store.describe());
    let sandbox =
        catalog_sandbox(config, &described, run_id, Purpose::Reach).map_err(|e| store_stop(Stage::Select, e))?;
    let bindir = config.sandbox.pg_bindir.as_deref();
    let objects = target
        .wal_prefix
        .as_ref()
        .map(|prefix| WalArchive { prefix: prefix.clone(), fetch: fetch_options(config, target) });
    let archive: Option<&dyn Archive> = match tool {
        Some((_, _, repository)) => Some(repository.as_ref()),
        None => objects.as_ref().map(|o| o as &dyn Archive),
    };
    let reach = match archive {
        Some(a) => a.reach(&sandbox, store, bindir).await,
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
async fn draw_point(
    config: &Config,
    target: &TargetConfig,
    store: &Arc<dyn BackupStore>,
    tool: Option<&(String, Vec<Backup>, Delegated)>,
    run_id: &str,
    window: Option<Duration>,
) -> Result<(SystemTime, SystemTime), Stop> {
    let stops: Vec<SystemTime> = match tool {
        Some((_, backups, _)) => backups
            .iter()
            .filter(|b| b.catalog.as_ref().is_some_and(|c| c.status == "ok"))
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
    let described = tool.map(|(d, _, _)| d.clone()).unwrap_or_else(|| store.describe());
    let Some(oldest) = stops.iter().min().copied() else {
        return Err(Stop::failed(
            "select",
            format!("no restorable base backup in {described} to draw a point in time after"),
        ));
    };
    let Some(reach) = archive_reach(config, target, store, tool, run_id).await? else {
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
fn archive_stalled(newest_commit: SystemTime, rpo: Duration, now: SystemTime) -> Option<Duration> {
    now.duration_since(newest_commit).ok().filter(|age| *age > rpo)
}

/// A backup's recorded stop bounds its real stop from above only to the second: S3
/// listings give an object's `LastModified` (which bounds a base backup's stop) in whole
/// seconds, truncated, and so does pgBackRest's catalog (`timestamp.stop`). A second is
/// added before comparing it with a recovery target: PostgreSQL refuses a target before
/// the backup's end.
const STOP_CLOCK: Duration = Duration::from_secs(1);

/// A moment in `[start, end)`, whole microseconds (PostgreSQL's resolution), from `seed`.
fn draw_between(start: SystemTime, end: SystemTime, seed: u128) -> SystemTime {
    let span = end.duration_since(start).unwrap_or_default().as_micros().max(1);
    let offset = (seed % span) as u64;
    let at = start + Duration::from_micros(offset);
    let micros = at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_micros() as u64;
    let at = SystemTime::UNIX_EPOCH + Duration::from_micros(micros);
    if at >= end { end - Duration::from_micros(1) } else { at }
}

/// The target's fixed recovery time, if it has one.
fn fixed_time(target: &TargetConfig) -> Option<SystemTime> {
    match &target.recovery_target {
        drcheck_config::RecoveryTarget::Time(t) => humantime::parse_rfc3339_weak(t).ok(),
        _ => None,
    }
}

/// A random index below `n` (uniform enough for picking a backup to prove).
fn rand_index(n: usize) -> usize {
    uuid::Uuid::new_v4().as_u128() as usize % n.max(1)
}

async fn select(
    store: &dyn BackupStore,
    target: &TargetConfig,
    backup_key: Option<&str>,
    proven: Option<&Proven>,
) -> Result<(Backup, Option<Vec<Backup>>), Stop> {
    if let Some(key) = backup_key {
        let all = store.list(key).await.map_err(|e| store_stop(Stage::Select, e))?;
        // A backup named explicitly is taken even while it looks incomplete.
        return drcheck_restore::store::group_backups(&all).into_iter().find(|b| b.key == key).map(|b| (b, None)).ok_or_else(|| {
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
    let restorable = backups_newest_first(&all);
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
fn only_uploading(all: &[drcheck_restore::store::BackupObject], now: SystemTime) -> Option<String> {
    let grace = drcheck_restore::store::UPLOAD_GRACE;
    let waiting: Vec<(String, Duration)> = drcheck_restore::store::group_backups(all)
        .into_iter()
        .filter(|b| b.is_physical())
        .map(|b| (b.key, now.duration_since(b.last_modified).unwrap_or_default()))
        .filter(|(_, age)| *age < grace)
        .collect();
    let (key, age) = waiting.iter().min_by_key(|(_, age)| *age)?;
    Some(format!(
        "the only backup{} may still be uploading: {} (last written {}s ago; a base backup without backup_manifest \
         or pg_wal.tar is taken as whole {} after its last write) — verify again then, or name it now with --backup {key}",
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
mod cap_tests {
    #[test]
    fn long_messages_keep_head_and_tail() {
        let long = format!("pg_restore failed: {}the reason", "x".repeat(10_000));
        let capped = super::cap_message(&long);
        assert!(capped.chars().count() < super::MAX_ERROR_CHARS + 60, "{}", capped.len());
        assert!(capped.starts_with("pg_restore failed") && capped.ends_with("the reason"));
        assert!(capped.contains("characters left out"));
        assert_eq!(super::cap_message("short"), "short");
    }
}

#[cfg(test)]
mod select_tests {
    use super::*;
    use drcheck_restore::store::CatalogEntry;

    fn target(select: &str) -> TargetConfig {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            format!(
                "[storage.r]\nkind = \"s3\"\nbucket = \"b\"\nendpoint = \"https://h:1\"\n[[target]]\nname = \"t\"\nsource = \"pgbackrest\"\nstanza = \"main\"\nstorage = \"r\"\nrto = \"1h\"\nrpo = \"1h\"\nselect = \"{select}\"\n"
            ),
        )
        .unwrap();
        drcheck_config::load(&path).unwrap().targets.remove(0)
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
                status: status.into(),
                wal_start: None,
                wal_stop: None,
                tablespaces: vec![],
            }),
        }
    }

    fn proof(last_passed: SystemTime) -> crate::history::Proof {
        crate::history::Proof { last_passed, consistent_at: None, last_run_id: "r".into(), points_proven: 0 }
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
}

#[cfg(test)]
mod tool_check_tests {
    use super::*;

    fn config(target: &str) -> Result<Config, String> {
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
        let obj = |key: &str, age: u64| drcheck_restore::store::BackupObject {
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

    #[test]
    fn the_run_budget_is_the_restore_deadline_and_the_validate_phase() {
        let c = config("rto = \"15m\"\n").unwrap();
        // 15m × 2 + the phase's 1h (twice the validators' 30m) + 10m.
        assert_eq!(run_budget(&c.targets[0]), Duration::from_secs(100 * 60));
        let w = config_warnings(&c, true);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("a run may take 1h 40m") && w[0].contains("lower validators.phase_timeout"), "{w:?}");
        assert!(config_warnings(&c, false).is_empty(), "the daemon's start warns of units only");
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
