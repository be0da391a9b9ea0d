//! The report of one verification run: the JSON contract (`{"runs": [...]}`) and the
//! human summary printed on a terminal.

use drcheck_validators::{Finding, Status};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RunResult {
    Passed,
    Failed,
    Error,
    /// Interrupted (SIGTERM/SIGINT) before it could finish.
    Aborted,
    /// Everything that ran held, but more of the content than `max_undecided` could not
    /// be decided (neither proven nor a change on the primary since the copy's point):
    /// never a pass, never a proof of the backup.
    Inconclusive,
}

impl std::str::FromStr for RunResult {
    type Err = drcheck_config::UnknownWord;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use RunResult::*;
        [Passed, Failed, Error, Aborted, Inconclusive]
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| drcheck_config::UnknownWord { what: "a run's result", word: s.into() })
    }
}

impl std::fmt::Display for RunResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl RunResult {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunResult::Passed => "passed",
            RunResult::Failed => "failed",
            RunResult::Error => "error",
            RunResult::Aborted => "aborted",
            RunResult::Inconclusive => "inconclusive",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BackupInfo {
    pub key: String,
    pub size_bytes: u64,
    /// When the backup's data is consistent as of (a dump's own start time, a base
    /// backup's `backup_label`, the tool's catalog stop); `null` when nothing records it.
    pub created_at: Option<String>,
    /// Where `created_at` was read (`dump header`, `backup_label START TIME`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at_source: Option<String>,
    /// When the object was uploaded (its last-modified time): reported, never taken as
    /// the data's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploaded_at: Option<String>,
    /// Detected from the content; `null` when the run never got to read it.
    pub format: Option<String>,
    /// `age` or `openpgp` when the backup is encrypted (detected from its content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<String>,
    /// Backups from a tool's catalog: `full`, `diff` or `incr`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Backups from a tool's catalog: which tool (`pgbackrest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The objects the backup is stored as (key, size, ETag, version id): pinned by a
    /// pass, compared with every later listing (the `pinned` finding).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pinned: Vec<PinnedPart>,
}

/// One stored object of a backup, as a run saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PinnedPart {
    pub key: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// Its SHA-256 as drcheck read it while restoring (single-object backups; a base
    /// backup's parts are pinned by ETag, size and version: hashing them would slow the
    /// file copy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Phase {
    pub name: String,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Rto {
    pub target_seconds: f64,
    /// Fetch start → restored database accepts connections; `null` if never reached.
    pub measured_seconds: Option<f64>,
    pub met: Option<bool>,
    /// When the restore will take longer than the RTO at the current trend (issue 50):
    /// from this and earlier runs' measured restores and the backups' growth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forecast: Option<crate::forecast::RtoForecast>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Rpo {
    pub target_seconds: f64,
    pub backup_age_seconds: Option<f64>,
    pub met: Option<bool>,
    /// From the `freshness` validator: how much newer the primary's data is than the
    /// backup's newest row — what a restore right now would lose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_lag_seconds: Option<f64>,
    /// What a restore right now would lose: listing time − `recoverable_point`. `met`
    /// judges this, never the age of the point the run proved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable_point_age_seconds: Option<f64>,
    /// The newest recoverable point known when the run listed the backups: the WAL
    /// archive's newest replayable commit, else the newest backup's consistency time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable_point: Option<String>,
    /// When the recoverable point was read: the run's listing time, which the RPO's age
    /// is taken at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_at: Option<String>,
    /// The point this run proved: where replay stopped (a fixed or random T, the latest
    /// point), else the chosen backup's own time. Reported, never judged against the RPO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proven_point: Option<String>,
    /// Backups from a tool's catalog: when the oldest restorable backup finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_window_start: Option<String>,
}

/// How hard the run leaned on the primary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PrimaryQueries {
    pub count: u64,
    pub longest_seconds: f64,
}

/// How the restore was done: what measured the RTO.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct RestoreInfo {
    /// The sandbox profile: `production` (stock durability) or `fast`.
    pub profile: String,
    pub jobs: u32,
    pub server_major: Option<u32>,
    /// Physical backups replayed from a WAL archive: the last replayed commit's time.
    pub recovered_to: Option<String>,
    /// Physical backups with a WAL archive: the target replay was asked to reach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_target: Option<RecoveryTargetInfo>,
    /// Time and LSN targets: whether replay reached the target (`false`: recovery ended
    /// before it — a gap in the archive, or an archive that ends too early).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_reached: Option<bool>,
    /// How the restore's processes were confined: `landlock-abi7`, or `none`.
    #[serde(default)]
    pub containment: Option<String>,
    /// Base backups: the check against `backup_manifest`, or why it was not done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    /// A WAL replay: what set its pace (recovery waiting on the store, the CPU or the disk)
    /// and how far ahead the fetch ran (issue 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<String>,
    /// A `delta_restore` target: whether this restore went onto the previous copy, and
    /// the measurements that decided it (issue 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<String>,
    /// From the fetch's start to the first byte handed to the restore (object sources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_seconds: Option<f64>,
    /// Encrypted backups: which key opened it (a recipient, key fingerprint or
    /// "passphrase"), never the secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decrypted_by: Option<String>,
    /// Plain dumps restored without the source's roles (no `globals_key`): how many
    /// ownership and privilege statements were left out, as an archive's restore leaves
    /// them out (`--no-owner --no-privileges`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privileges_skipped: Option<u64>,
    /// What the restore wrote: its directory's size once restored (data, WAL, spool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_written: Option<u64>,
    /// How fast it wrote (bytes per second): a base backup's data directory less its WAL
    /// over the file copy (first request to the backup unpacked); a dump's whole
    /// directory over the whole restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_bps: Option<f64>,
    /// What the scratch disk can write (bytes per second; measured once per device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_write_bps: Option<f64>,
    /// `write_bps / disk_write_bps`: at 0.7 or more the disk was the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_fraction: Option<f64>,
    /// What limited the restore: `disk`, `network or decompression`, `restore` (the
    /// server's own loading) or `replay`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limited_by: Option<String>,
    /// Bytes fetched from the store, where the restore fetched less than the backup
    /// (a pgBackRest delta restore onto the previous copy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_fetched: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunError {
    pub stage: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ValidatorReport {
    pub name: String,
    pub status: Status,
    pub detail: String,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub measurements: std::collections::BTreeMap<String, f64>,
    /// What the check could not prove (a difference that cannot be told from a change on
    /// the primary since the copy's point), each with what would prove it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inconclusive: Vec<String>,
    /// [`Finding::refused_by_primary`]: not part of the report.
    #[serde(skip)]
    pub refused_by_primary: bool,
}

impl From<&Finding> for ValidatorReport {
    fn from(f: &Finding) -> Self {
        Self {
            name: f.name.clone(),
            status: f.status,
            detail: f.detail.clone(),
            measurements: f.measurements.clone(),
            inconclusive: f.inconclusive.clone(),
            refused_by_primary: f.refused_by_primary,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunReport {
    pub run_id: String,
    pub target: String,
    pub result: RunResult,
    pub started_at: String,
    pub finished_at: String,
    pub backup: Option<BackupInfo>,
    pub phases: Vec<Phase>,
    pub rto: Rto,
    pub rpo: Rpo,
    pub validators: Vec<ValidatorReport>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_queries: Option<PrimaryQueries>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// A target with `comparisons = "best-effort"` whose comparisons with the primary
    /// could not run: what the verdict lacks, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
    /// How much of the target's retention has been proven: restorable backups, and how
    /// many passed a verification within `prove_within` (this run included). Absent
    /// when the store or the history could not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<Coverage>,
    /// The run was asked for something that does not exist (a `--backup` naming nothing
    /// in the store): a usage error, never recorded as a run.
    #[serde(skip)]
    pub usage_error: Option<String>,
    /// `restore` (a backup restored into a sandbox) or `follow` (validated on the
    /// target's follower, paused at a replayed commit: no restore, no RTO measured).
    #[serde(default = "restore_mode")]
    pub mode: String,
    /// A `follow` run: the point it validated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow: Option<FollowPoint>,
    /// A canary's run (`drcheck canary`): the defect made on purpose in a copy of the
    /// backup. Never recorded as a run, a verification or a proof.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<String>,
    /// How much of the content the comparisons decided (issue 46); absent when no
    /// comparison with the primary ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    /// A full listing's backups (and those gone before retention, named by `pinned`):
    /// the record stage keeps the proofs of these and forgets the rest — the select
    /// stage reads the history store, never writes it. Not part of the report.
    #[serde(skip)]
    pub still_listed: Option<Vec<String>>,
    /// The tables this run's `checksums` looked at, and whether each was decided in
    /// full: kept by the record stage (`table_proofs`). Not part of the report.
    #[serde(skip)]
    pub tables_decided: Option<Box<[(String, bool)]>>,
    /// `primary_read_budget`: the slice (`slices`, `slice`) this run compared through,
    /// kept by the record stage. Not part of the report.
    #[serde(skip)]
    pub slice_compared: Option<(u32, u32)>,
}

/// What a run's comparisons decided: proven (matched), or a change on the primary since
/// the copy's point — and what they could not decide.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Content {
    /// Tables compared, and those with a part neither proven nor changed since.
    pub tables: u64,
    pub tables_undecided: u64,
    /// Rows proven by `checksums`, and rows it could not decide.
    pub rows_proven: u64,
    pub rows_undecided: u64,
    /// The smaller of the proven shares of tables and rows, in percent.
    pub proven_percent: f64,
    /// `[target] max_undecided`, in percent: more undecided than this and the run is
    /// `inconclusive`.
    pub max_undecided_percent: f64,
}

impl Content {
    /// From the comparisons' findings: `checksums` (tables and rows) and the most
    /// undecided tables any other comparison reports. `None` when none compared.
    pub(crate) fn of(validators: &[ValidatorReport], max_undecided: f64) -> Option<Content> {
        let m = |v: &ValidatorReport, k: &str| v.measurements.get(k).copied().unwrap_or(0.0).max(0.0) as u64;
        // The comparisons whose undecided parts count against `max_undecided`.
        let weighed = drcheck_validators::names_where(|c| c.weighs_undecided);
        let compared: Vec<&ValidatorReport> = validators
            .iter()
            .filter(|v| weighed.contains(&v.name.as_str()) && v.status != Status::Error)
            .filter(|v| {
                v.status != Status::Skipped || v.measurements.contains_key(drcheck_validators::UNDECIDED_TABLES)
            })
            .collect();
        let sums = compared.iter().find(|v| v.name == "checksums");
        let counts = compared.iter().find(|v| v.name == "row_counts");
        let undecided = compared.iter().map(|v| m(v, drcheck_validators::UNDECIDED_TABLES)).max().unwrap_or(0);
        let base = sums.or(counts)?;
        let tables = (m(base, "covered_tables") + m(base, drcheck_validators::UNDECIDED_TABLES)).max(undecided);
        let (rows_proven, rows_undecided) =
            sums.map(|v| (m(v, "covered_rows"), m(v, drcheck_validators::UNDECIDED_ROWS))).unwrap_or((0, 0));
        if tables == 0 && rows_proven + rows_undecided == 0 {
            return None;
        }
        let share = |part: u64, whole: u64| if whole == 0 { 0.0 } else { part as f64 / whole as f64 };
        let undecided_share = share(undecided, tables).max(share(rows_undecided, rows_proven + rows_undecided));
        Some(Content {
            tables,
            tables_undecided: undecided,
            rows_proven,
            rows_undecided,
            proven_percent: ((1.0 - undecided_share) * 10_000.0).round() / 100.0,
            max_undecided_percent: (max_undecided * 10_000.0).round() / 100.0,
        })
    }

    /// More undecided than the target allows.
    pub(crate) fn too_undecided(&self) -> bool {
        100.0 - self.proven_percent > self.max_undecided_percent + 1e-9
    }
}

fn restore_mode() -> String {
    "restore".into()
}

/// Where a follower was paused for a `follow` run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct FollowPoint {
    /// The replayed WAL position.
    pub lsn: String,
    /// The last replayed commit (RFC 3339): the `as_of` cut the comparisons ran at.
    pub commit: Option<String>,
    /// The base backup the follower was seeded from, and when.
    pub seeded_from: String,
    pub seeded_at: String,
}

/// Proof of the retention window, backup by backup.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Coverage {
    /// Restorable backups listed (complete, not marked in error by their tool).
    pub restorable: u64,
    /// Of those, how many passed a verification within `prove_within`.
    pub proven: u64,
    pub prove_within_seconds: f64,
    /// Each restorable backup, newest first, with its last passing verification.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backups: Vec<BackupProof>,
}

/// One restorable backup in a target's coverage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct BackupProof {
    pub label: String,
    /// When it ended (a tool's catalog stop; an object's upload time).
    pub stopped_at: String,
    /// Its last passing verification; `null` when never.
    pub last_proven_at: Option<String>,
    /// Passing runs that replayed it to a recovery target (points in time proven).
    #[serde(default)]
    pub points_proven: u64,
}

/// `restore.recovery_target`: how far WAL was asked to be replayed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RecoveryTargetInfo {
    /// `latest`, `immediate`, `time` or `lsn`.
    pub kind: String,
    /// The time or LSN; `null` for latest and immediate.
    pub value: Option<String>,
    /// Drawn at random within the recovery window (`recovery_target = "random"`).
    pub random: bool,
}

impl RunReport {
    /// This run's measured restore as a forecast sample (none without a measured RTO,
    /// a backup size or the backup's data time).
    pub(crate) fn rto_sample(&self) -> Option<crate::forecast::Sample> {
        let b = self.backup.as_ref()?;
        let at = humantime::parse_rfc3339_weak(b.created_at.as_deref()?).ok()?;
        let rto = self.rto.measured_seconds?;
        let phase = |n: &str| self.phases.iter().filter(|p| p.name == n).map(|p| p.seconds).reduce(|a, b| a + b);
        Some(crate::forecast::Sample {
            backup: b.key.clone(),
            data_at: at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64(),
            size_bytes: b.size_bytes as f64,
            rto_seconds: rto,
            fixed_seconds: phase("sandbox").unwrap_or(0.0).min(rto),
            fetch_seconds: phase("fetch"),
            restore_seconds: phase("restore"),
        })
    }

    pub(crate) fn validator_failed(&self) -> bool {
        self.validators.iter().any(|v| v.status == Status::Failed)
    }

    pub(crate) fn validator_errored(&self) -> bool {
        self.validators.iter().any(|v| v.status == Status::Error)
    }
}

/// RFC 3339 UTC with millisecond precision.
pub(crate) fn timestamp(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

pub(crate) fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

fn human_secs(s: f64) -> String {
    if s < 60.0 { format!("{s:.1}s") } else { drcheck_config::format_duration(Duration::from_secs_f64(s)) }
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "not measured",
    }
}

/// The summary an operator reads on a terminal.
pub(crate) fn render_human(r: &RunReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}: {}", r.target, r.result.as_str().to_uppercase());
    let _ = writeln!(s, "  run         {} ({} → {})", r.run_id, r.started_at, r.finished_at);
    if let Some(f) = &r.follow {
        let _ = writeln!(
            s,
            "  follower    paused at {} (commit {}), seeded from {} at {}",
            f.lsn,
            f.commit.as_deref().unwrap_or("none replayed"),
            crate::out::shown(&f.seeded_from),
            f.seeded_at
        );
    }
    if let Some(b) = &r.backup {
        let _ = writeln!(
            s,
            "  backup      {} ({}, {}, {})",
            crate::out::shown(&b.key),
            drcheck_validators::human_bytes(b.size_bytes),
            b.format.as_deref().unwrap_or("format unknown"),
            match (&b.created_at, &b.created_at_source) {
                (Some(at), Some(from)) => format!("data as of {at} from its {from}"),
                (Some(at), None) => format!("data as of {at}"),
                _ => "its data's time is not recorded".to_string(),
            }
        );
    }
    if !r.phases.is_empty() {
        let phases: Vec<String> = r.phases.iter().map(|p| format!("{} {}", p.name, human_secs(p.seconds))).collect();
        let _ = writeln!(s, "  phases      {}", phases.join(" · "));
    }
    if let Some(ri) = &r.restore {
        let server = ri.server_major.map(|m| format!("PostgreSQL {m}, ")).unwrap_or_default();
        let recovered = ri.recovered_to.as_ref().map(|t| format!(", recovered to {t}")).unwrap_or_default();
        let contained = match ri.containment.as_deref() {
            Some("none") => ", UNCONTAINED".to_string(),
            Some(c) => format!(", contained ({c})"),
            None => String::new(),
        };
        let _ = writeln!(s, "  sandbox     {server}{} profile, {} job(s){recovered}{contained}", ri.profile, ri.jobs);
        if let (Some(w), Some(bps)) = (ri.bytes_written, ri.write_bps) {
            let disk = match (ri.disk_write_bps, ri.disk_fraction) {
                (Some(d), Some(f)) => {
                    format!(", {:.0}% of the disk's {}/s", f * 100.0, drcheck_validators::human_bytes(d as u64))
                }
                _ => String::new(),
            };
            let by = ri.limited_by.as_deref().map(|l| format!(" — limited by {l}")).unwrap_or_default();
            let _ = writeln!(
                s,
                "  writes      {} at {}/s{disk}{by}",
                drcheck_validators::human_bytes(w),
                drcheck_validators::human_bytes(bps as u64)
            );
        }
        if let Some(m) = &ri.manifest {
            let _ = writeln!(s, "  manifest    {}", crate::out::shown_lines(m, "              "));
        }
        if let Some(d) = &ri.delta {
            let _ = writeln!(s, "  delta       {}", crate::out::shown_lines(d, "              "));
        }
        if let Some(p) = &ri.replay {
            let _ = writeln!(s, "  replay      {}", crate::out::shown_lines(p, "              "));
        }
    }
    let rto = r.rto.measured_seconds.map(human_secs).unwrap_or_else(|| "—".into());
    let _ = writeln!(
        s,
        "  RTO         {rto} measured, target {} — {}",
        human_secs(r.rto.target_seconds),
        verdict(r.rto.met)
    );
    if let Some(f) = &r.rto.forecast {
        let _ = writeln!(s, "  forecast    {}", crate::out::shown_lines(&f.detail, "              "));
    }
    let age = match r.rpo.recoverable_point_age_seconds {
        Some(p) => format!("recoverable point {} old", human_secs(p)),
        None => "the newest recoverable point is unknown".to_string(),
    };
    let _ = writeln!(s, "  RPO         {age}, target {} — {}", human_secs(r.rpo.target_seconds), verdict(r.rpo.met));
    if let Some(p) = &r.rpo.proven_point {
        let _ = writeln!(s, "  proven      {p} (the point this run restored and checked)");
    }
    if let Some(lag) = r.rpo.data_lag_seconds {
        let _ = writeln!(s, "  data lag    {} behind the primary (what a restore now would lose)", human_secs(lag));
    }
    if let Some(q) = &r.primary_queries {
        let _ = writeln!(s, "  primary     {} queries, longest {}", q.count, human_secs(q.longest_seconds));
    }
    if let Some(c) = &r.content {
        let _ = writeln!(
            s,
            "  content     {}% proven ({} of {} tables and {} rows undecided; at most {}% may be) — {}",
            c.proven_percent,
            c.tables_undecided,
            c.tables,
            c.rows_undecided,
            c.max_undecided_percent,
            if c.too_undecided() { "INCONCLUSIVE" } else { "decided" }
        );
    }
    if !r.validators.is_empty() {
        let _ = writeln!(s, "  validators");
        for v in &r.validators {
            let _ = writeln!(
                s,
                "    {:<8} {:<14} {}",
                v.status,
                crate::out::shown(&v.name),
                crate::out::shown_lines(&v.detail, "                            ")
            );
            for i in &v.inconclusive {
                let _ = writeln!(
                    s,
                    "             inconclusive  {}",
                    crate::out::shown_lines(i, "                           ")
                );
            }
        }
    }
    if let Some(d) = &r.degraded {
        let _ = writeln!(s, "  DEGRADED    {}", crate::out::shown_lines(d, "              "));
    }
    if let Some(e) = &r.error {
        let _ = writeln!(s, "  error       [{}] {}", e.stage, crate::out::shown_lines(&e.message, "              "));
    }
    s
}

/// The record of a run that died without recording itself (SIGKILL, the OOM killer),
/// made by the run that took over its lease: `aborted`, saying who it was. Its start is
/// unknown; the record is dated when it was found.
pub(crate) fn died_report(target: &drcheck_config::TargetConfig, holder: &str) -> RunReport {
    let mut r = RunReport::begun(crate::ids::new_run_id(), target, SystemTime::now());
    r.result = RunResult::Aborted;
    r.finished_at = r.started_at.clone();
    r.error = Some(RunError {
        stage: "unknown".into(),
        message: format!(
            "{holder} died without recording its run (its process is gone; found when the next run took its lease)"
        ),
    });
    r
}

impl RunReport {
    /// The report of a run of `target` begun `at`: passed until something says
    /// otherwise, its objectives set, nothing measured yet — the one place a report is
    /// made whole.
    pub(crate) fn begun(run_id: String, target: &drcheck_config::TargetConfig, at: SystemTime) -> RunReport {
        RunReport {
            run_id,
            target: target.name.clone(),
            result: RunResult::Passed,
            started_at: timestamp(at),
            finished_at: String::new(),
            backup: None,
            phases: Vec::new(),
            rto: Rto { target_seconds: secs(target.rto), measured_seconds: None, met: None, forecast: None },
            rpo: Rpo { target_seconds: secs(target.rpo), ..Default::default() },
            validators: Vec::new(),
            restore: None,
            primary_queries: None,
            error: None,
            degraded: None,
            coverage: None,
            usage_error: None,
            mode: "restore".into(),
            follow: None,
            canary: None,
            content: None,
            still_listed: None,
            tables_decided: None,
            slice_compared: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(name: &str, status: &str, m: &[(&str, f64)]) -> ValidatorReport {
        ValidatorReport {
            name: name.into(),
            status: status.parse().unwrap(),
            detail: String::new(),
            measurements: m.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            inconclusive: vec![],
            refused_by_primary: false,
        }
    }

    /// Issue 46: what the comparisons could not decide is weighed against max_undecided —
    /// by tables and by rows, whichever is worse; a pass over everything decided is 100%.
    #[test]
    fn the_undecided_share_is_the_worse_of_tables_and_rows() {
        let sums = |tables: f64, undecided: f64, rows: f64, rows_undecided: f64| {
            finding(
                "checksums",
                "passed",
                &[
                    ("covered_tables", tables),
                    ("undecided_tables", undecided),
                    ("covered_rows", rows),
                    ("undecided_rows", rows_undecided),
                ],
            )
        };
        let c = Content::of(&[sums(99.0, 1.0, 1_000_000.0, 10.0)], 0.01).unwrap();
        assert_eq!((c.tables, c.tables_undecided, c.proven_percent), (100, 1, 99.0));
        assert!(!c.too_undecided(), "1% of the tables, at most 1% allowed: {c:?}");
        let c = Content::of(&[sums(98.0, 2.0, 1_000_000.0, 0.0)], 0.01).unwrap();
        assert!(c.too_undecided(), "{c:?}");
        let c = Content::of(&[sums(100.0, 0.0, 900.0, 100.0)], 0.01).unwrap();
        assert_eq!(c.proven_percent, 90.0, "10% of the rows undecided: {c:?}");
        assert!(c.too_undecided());
        // Everything undecided: checksums covered nothing (skipped), still weighed.
        let c = Content::of(
            &[finding("checksums", "skipped", &[("covered_tables", 0.0), ("undecided_tables", 3.0)])],
            0.01,
        )
        .unwrap();
        assert_eq!((c.tables, c.proven_percent), (3, 0.0));
        assert!(c.too_undecided());
        // Another comparison's undecided tables count too (the worst of them).
        let counts = finding("row_counts", "passed", &[("covered_tables", 9.0), ("undecided_tables", 1.0)]);
        let c = Content::of(&[sums(10.0, 0.0, 500.0, 0.0), counts], 0.0).unwrap();
        assert_eq!(c.tables_undecided, 1);
        assert!(c.too_undecided(), "max_undecided 0%: {c:?}");
        // Nothing compared (no primary): no content section at all.
        assert!(Content::of(&[finding("amcheck", "passed", &[("covered_relations", 9.0)])], 0.01).is_none());
        assert!(Content::of(&[finding("checksums", "error", &[])], 0.01).is_none());
        let all = Content::of(&[sums(12.0, 0.0, 5000.0, 0.0)], 0.01).unwrap();
        assert_eq!(all.proven_percent, 100.0);
    }

    fn sample() -> RunReport {
        RunReport {
            run_id: "r1".into(),
            target: "orders".into(),
            result: RunResult::Failed,
            started_at: "2026-11-30T00:00:00.000Z".into(),
            finished_at: "2026-11-30T00:00:09.000Z".into(),
            backup: Some(BackupInfo {
                key: "orders/a.dump".into(),
                size_bytes: 3 << 20,
                created_at: Some("x".into()),
                created_at_source: None,
                uploaded_at: None,
                format: Some("custom".into()),
                encryption: None,
                kind: None,
                source: None,
                pinned: vec![],
            }),
            phases: vec![Phase { name: "fetch".into(), seconds: 1.25 }],
            rto: Rto { target_seconds: 1800.0, measured_seconds: Some(8.0), met: Some(true), forecast: None },
            rpo: Rpo {
                target_seconds: 3600.0,
                backup_age_seconds: Some(7200.0),
                recoverable_point_age_seconds: Some(7200.0),
                recoverable_point: None,
                measured_at: None,
                proven_point: None,
                recovery_window_start: None,
                met: Some(false),
                data_lag_seconds: None,
            },
            validators: vec![ValidatorReport {
                name: "schema".into(),
                status: Status::Skipped,
                detail: "primary unavailable".into(),
                measurements: Default::default(),
                inconclusive: vec![],
                refused_by_primary: false,
            }],
            restore: None,
            primary_queries: None,
            error: None,
            degraded: None,
            coverage: None,
            usage_error: None,
            mode: "restore".into(),
            follow: None,
            canary: None,
            content: None,
            still_listed: None,
            tables_decided: None,
            slice_compared: None,
        }
    }

    #[test]
    fn json_has_the_contract_fields() {
        let v = serde_json::to_value(sample()).unwrap();
        for k in
            ["run_id", "target", "result", "started_at", "finished_at", "backup", "phases", "rto", "rpo", "validators"]
        {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["result"], "failed");
        assert_eq!(v["backup"]["size_bytes"], 3 << 20);
        assert_eq!(v["rpo"]["met"], false);
        assert!(v.get("error").is_none());
    }

    /// Issue 26: what the README says is `null` is `null`, and what it says is absent is
    /// absent — read from the README itself, checked against a run that measured nothing.
    #[test]
    fn the_readme_says_which_fields_are_null_and_which_absent() {
        let readme = include_str!("../../README.md").replace('\n', " ");
        let between = |a: &str, b: &str| -> Vec<String> {
            let start = readme.find(a).unwrap_or_else(|| panic!("README lacks {a:?}")) + a.len();
            let end = start + readme[start..].find(b).unwrap();
            // The fields, without the parenthesised reasons (which quote other things).
            let mut text = String::new();
            let mut depth = 0;
            for c in readme[start..end].chars() {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    c if depth == 0 => text.push(c),
                    _ => {}
                }
            }
            text.split('`').skip(1).step_by(2).map(str::to_string).collect()
        };
        let null = between("is `null`, never a made-up 0:", "A field that does not apply");
        let absent = between("apply is absent (never `null`):", "For base backups");
        assert!(null.len() >= 8 && absent.len() >= 12, "{null:?} {absent:?}");
        // Nothing measured: a backup and a restore that learnt nothing, no error.
        let mut r = sample();
        r.rto = Rto { target_seconds: 1.0, measured_seconds: None, met: None, forecast: None };
        r.rpo.backup_age_seconds = None;
        r.rpo.recoverable_point_age_seconds = None;
        r.rpo.met = None;
        r.backup.as_mut().unwrap().format = None;
        r.restore = Some(RestoreInfo {
            profile: "production".into(),
            jobs: 1,
            server_major: None,
            recovered_to: None,
            recovery_target: None,
            target_reached: None,
            containment: None,
            manifest: None,
            first_byte_seconds: None,
            decrypted_by: None,
            privileges_skipped: None,
            ..Default::default()
        });
        let nested = serde_json::to_value(&r).unwrap();
        let mut bare = r.clone();
        bare.backup = None;
        bare.restore = None;
        let top = serde_json::to_value(&bare).unwrap();
        let lookup = |path: &str| -> (bool, Option<serde_json::Value>) {
            let v = if path.contains('.') { &nested } else { &top };
            let mut at = v;
            let parts: Vec<&str> = path.split('.').collect();
            for p in &parts[..parts.len() - 1] {
                at = &at[*p];
            }
            let last = parts[parts.len() - 1];
            (at.is_object(), at.get(last).cloned())
        };
        for f in &null {
            let (parent, v) = lookup(f);
            assert!(parent && v == Some(serde_json::Value::Null), "README: `{f}` is null; the JSON: {v:?}");
        }
        for f in &absent {
            let (parent, v) = lookup(f);
            assert!(parent && v.is_none(), "README: `{f}` is absent; the JSON: {v:?}");
        }
    }

    #[test]
    fn human_summary_shows_misses_and_skips() {
        let h = render_human(&sample());
        assert!(h.contains("orders: FAILED"), "{h}");
        assert!(h.contains("3.0 MiB"), "{h}");
        assert!(h.contains("RPO         recoverable point 2h old, target 1h — MISSED"), "{h}");
        assert!(h.contains("skipped"), "{h}");
    }
}
