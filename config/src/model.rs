//! The validated configuration's types: what every other crate reads. `validated`
//! makes them from the raw file, `effective` writes them back.

use crate::duration::format_duration;
use crate::schedule::Schedule;
use crate::secret::Secret;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Where the history store lives when `[state] url` is not set: a file in the working directory.
pub const DEFAULT_STATE_URL: &str = "sqlite://drcheck-history.db";

/// A validated configuration: every reference resolves, every duration parsed,
/// every `${ENV}` interpolated.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    #[serde(skip)]
    pub path: PathBuf,
    pub state: StateConfig,
    pub sandbox: SandboxConfig,
    pub storage: BTreeMap<String, StorageConfig>,
    #[serde(rename = "target")]
    pub targets: Vec<TargetConfig>,
    pub metrics: MetricsConfig,
    pub api: ApiConfig,
    pub daemon: DaemonConfig,
    pub evidence: EvidenceConfig,
    #[serde(rename = "alert")]
    pub alerts: Vec<AlertConfig>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MetricsConfig {
    /// The daemon's HTTP address: /metrics, /healthz, /readyz, /api/v1/…
    pub listen: String,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "ser_opt_userinfo")]
    pub pushgateway: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub textfile: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ApiConfig {
    /// Bearer token for the trigger API; without one, triggering is refused.
    #[serde(serialize_with = "ser_opt_secret", skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EvidenceConfig {
    /// The Ed25519 key `drcheck report` signs with: PKCS#8 PEM text (from a `${VAR}`)
    /// or the path of a file holding it.
    #[serde(serialize_with = "ser_opt_secret", skip_serializing_if = "Option::is_none")]
    pub signing_key: Option<Secret>,
    /// The frameworks whose controls the report maps its evidence to (`soc2`, …).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub controls: Vec<String>,
    /// A mapping of one's own instead of the built-in `deploy/controls.toml`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controls_file: Option<PathBuf>,
    /// The mapping in force (the file's, else the built-in one).
    #[serde(skip)]
    pub mapping: crate::controls::Mapping,
}

#[derive(Debug, Clone, Serialize)]
pub struct DaemonConfig {
    pub max_concurrent_restores: usize,
    /// How often a firing alert is sent to Alertmanager again (it is sent with an
    /// `endsAt` 48 h ahead): default 1 h, at most 24 h.
    #[serde(serialize_with = "ser_duration")]
    pub alert_resend_interval: Duration,
    /// When the canary runs (`drcheck canary` for every target): defective copies of
    /// each target's newest proven backup that must be caught and paged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<Schedule>,
    /// How long a sink has to accept the canary alert before the alert path counts as
    /// broken (default 2m).
    #[serde(serialize_with = "ser_duration")]
    pub canary_alert_within: Duration,
    /// How often the daemon samples every target's primary for drcheck's journal of its
    /// transaction horizon (default 1m; `0s` turns it off): what tells, without commit
    /// timestamps, which rows a later backup's primary changed since the backup.
    #[serde(serialize_with = "ser_duration")]
    pub journal_interval: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertKind {
    Alertmanager,
    Webhook,
    Slack,
}

impl AlertKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::Alertmanager => "alertmanager",
            AlertKind::Webhook => "webhook",
            AlertKind::Slack => "slack",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct AlertConfig {
    /// Unique; names the sink in metrics and the outbox. Default: `KIND` or `KIND-N`.
    pub name: String,
    pub kind: AlertKind,
    /// The sink's URL; webhook URLs hold tokens in their paths, so it is shown as
    /// `scheme://host/***` only.
    #[serde(serialize_with = "ser_url_origin")]
    pub url: Secret,
    /// Webhook only: HMAC-SHA256 key for the `X-Drcheck-Signature` header.
    #[serde(serialize_with = "ser_opt_secret", skip_serializing_if = "Option::is_none")]
    pub secret: Option<Secret>,
    pub max_attempts: u32,
    #[serde(serialize_with = "ser_duration")]
    pub timeout: Duration,
}

#[derive(Debug, Clone, Serialize)]
pub struct StateConfig {
    /// The history store URL; it may carry a password, so it is a secret.
    #[serde(serialize_with = "ser_secret")]
    pub url: Secret,
    /// Runs kept per target; older ones are pruned.
    pub keep_runs: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct SandboxConfig {
    pub scratch_dir: PathBuf,
    /// Whether the file sets `scratch_dir` (else it is the default, which a generated
    /// pod's `DRCHECK_SCRATCH_DIR` makes its scratch volume).
    #[serde(skip)]
    pub scratch_dir_set: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pg_bindir: Option<PathBuf>,
    /// `[sandbox.pg_bindirs]`: each major's binaries (server and client tools), used for
    /// that major's backups before any installed ones.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub pg_bindirs: BTreeMap<u32, PathBuf>,
    pub profile: Profile,
    /// Free space needed in `scratch_dir`: the backup's size times this.
    pub expansion_factor: f64,
    /// Refuse to restore (exit 3) where the kernel cannot confine the restore.
    pub require_containment: bool,
    /// A restore may write at most the backup's size times this; beyond, it fails as
    /// a decompression bomb.
    pub max_expansion: f64,
    /// The user every process that reads backup content runs as when drcheck is root:
    /// one that owns nothing else (default `drcheck-sandbox`).
    pub user: String,
    /// The address space each process of the sandbox server may use (`RLIMIT_AS`):
    /// a backup's statements that need more fail as the backup's, never the host's.
    pub memory_limit: u64,
    /// Where followers keep their restored copies between runs (default: `scratch_dir`).
    pub state_dir: PathBuf,
}

/// `[sandbox] memory_limit` when not set: room for the server's shared memory, a
/// 512 MB index build and a generous query, far below what starves a host.
pub const DEFAULT_SANDBOX_MEMORY: u64 = 2 << 30;

/// How the sandbox server is tuned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Stock durability settings: the RTO a real recovery would see.
    Production,
    /// fsync, full-page writes and synchronous commit off, minimal WAL: quick integrity checks.
    Fast,
}

impl Profile {
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Production => "production",
            Profile::Fast => "fast",
        }
    }
}

/// Which kind of backup a target holds; `Auto` detects it from the content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FormatSetting {
    Auto,
    Custom,
    Tar,
    Directory,
    Plain,
    Physical,
}

impl FormatSetting {
    pub fn as_str(self) -> &'static str {
        match self {
            FormatSetting::Auto => "auto",
            FormatSetting::Custom => "custom",
            FormatSetting::Tar => "tar",
            FormatSetting::Directory => "directory",
            FormatSetting::Plain => "plain",
            FormatSetting::Physical => "physical",
        }
    }
}

/// How far a physical backup's WAL is replayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecoveryTarget {
    /// Everything in the WAL archive.
    Latest,
    /// Just to consistency.
    Immediate,
    /// To this moment (RFC 3339).
    Time(String),
    /// To this WAL position (`0/3000028`).
    Lsn(String),
    /// To a moment drawn at random in the recovery window — from the oldest restorable
    /// backup's stop (within the last `window`, when given) to the newest commit the
    /// archive holds — from the newest backup that ended at or before it.
    Random(#[serde(serialize_with = "ser_opt_duration")] Option<Duration>),
}

impl RecoveryTarget {
    /// Whether replay is asked to stop at a moment (a fixed or random time).
    pub fn is_time(&self) -> bool {
        matches!(self, RecoveryTarget::Time(_) | RecoveryTarget::Random(_))
    }
}

/// `[target.heartbeat]`: a table on the primary that receives a row every `interval`
/// (column `at timestamptz`) — the clock that proves where replay stopped.
#[derive(Debug, Clone, Serialize)]
pub struct HeartbeatConfig {
    pub schema: String,
    pub table: String,
    #[serde(serialize_with = "ser_duration")]
    pub interval: Duration,
    /// `drcheck daemon` writes the heartbeat through this (INSERT-only) credential.
    #[serde(serialize_with = "ser_opt_secret", skip_serializing_if = "Option::is_none")]
    pub url: Option<Secret>,
}

impl HeartbeatConfig {
    /// `"schema"."table"`, quoted.
    pub fn quoted(&self) -> String {
        format!("{}.{}", crate::ident::quote_ident(&self.schema), crate::ident::quote_ident(&self.table))
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum StorageConfig {
    S3(S3Storage),
    Filesystem {
        path: PathBuf,
        /// `drcheck deploy kubernetes`: the PersistentVolumeClaim mounted read-only at
        /// `path` in the pods (a posix pgBackRest repository on a volume, an NFS share).
        #[serde(skip_serializing_if = "Option::is_none")]
        kubernetes_claim: Option<String>,
        /// …and a group of the pods that may read it (the repository's).
        #[serde(skip_serializing_if = "Option::is_none")]
        kubernetes_read_group: Option<u32>,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct S3Storage {
    pub bucket: String,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "ser_opt_userinfo")]
    pub endpoint: Option<String>,
    pub region: String,
    pub path_style: bool,
    /// Ranged GETs of this many bytes each…
    pub part_size: u64,
    /// …this many at once.
    pub concurrency: usize,
    /// Trust this CA for an https endpoint (handed to backup tools too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    pub verify_tls: bool,
    /// How long a failing store is asked again (backoff with jitter) before a run gives
    /// up: a blip of the store must not fail a nightly run.
    #[serde(serialize_with = "ser_duration")]
    pub retry_window: Duration,
    /// Every verified backup's objects must be locked in this mode (`compliance` also
    /// satisfies `governance`); without it the lock is reported, never required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_lock: Option<LockMode>,
    /// …until at least this long past the backup's time.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "ser_opt_duration")]
    pub retain_until_at_least: Option<Duration>,
    /// `drcheck storage check` may try a delete and a put to learn what the credentials
    /// allow; never otherwise.
    pub probe_write: bool,
}

/// An S3 Object Lock retention mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LockMode {
    /// Removable by whoever holds `s3:BypassGovernanceRetention`.
    Governance,
    /// Removable by no one until it expires.
    Compliance,
}

impl LockMode {
    /// As S3 spells it.
    pub fn as_s3(self) -> &'static str {
        match self {
            LockMode::Governance => "GOVERNANCE",
            LockMode::Compliance => "COMPLIANCE",
        }
    }
}

/// Where a target's backups come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SourceConfig {
    /// One object (or one base-backup directory) per backup under `prefix`.
    Objects,
    /// A pgBackRest repository on the target's storage, read through `pgbackrest`.
    Pgbackrest {
        stanza: String,
        repo_path: String,
        /// The repository's `cipher-pass` (encrypted repositories).
        #[serde(skip)]
        cipher_pass: Option<Secret>,
    },
    /// A barman-cloud catalog: `s3://bucket/prefix` + `server_name`.
    BarmanCloud { server_name: String },
}

impl SourceConfig {
    pub fn name(&self) -> &'static str {
        match self {
            SourceConfig::Objects => "objects",
            SourceConfig::Pgbackrest { .. } => "pgbackrest",
            SourceConfig::BarmanCloud { .. } => "barman-cloud",
        }
    }
}

/// Which backup of the catalog a run verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Selection {
    Latest,
    /// A random backup finished within this window (so old backups are proven too).
    Random(#[serde(serialize_with = "ser_duration")] Duration),
    /// The restorable backup whose last passing verification is oldest, never-proven
    /// ones first (newest of those first): every backup in retention proven in turn.
    #[serde(rename = "least-proven")]
    LeastProven,
}

#[derive(Debug, Clone, Serialize)]
pub struct TargetConfig {
    pub name: String,
    #[serde(serialize_with = "ser_opt_secret", skip_serializing_if = "Option::is_none")]
    pub primary: Option<Secret>,
    pub storage: String,
    pub prefix: String,
    #[serde(serialize_with = "ser_duration")]
    pub rto: Duration,
    #[serde(serialize_with = "ser_duration")]
    pub rpo: Duration,
    /// Allowed relative difference of row counts, as a fraction (0.001 = 0.1%).
    pub row_count_tolerance: f64,
    /// A restore running past `rto × abort_factor` is cancelled.
    pub abort_factor: f64,
    pub format: FormatSetting,
    /// Parallel `pg_restore -j` jobs (custom and directory dumps).
    pub restore_jobs: u32,
    /// Where archived WAL for physical backups lives in the same store.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wal_prefix: Option<String>,
    pub recovery_target: RecoveryTarget,
    /// A `pg_dumpall --globals-only` file in the store, applied before the restore.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub globals_key: Option<String>,
    pub validators: ValidatorsConfig,
    /// Daemon mode: when to verify (cron, 5 or 6 fields), normalised to 6 fields.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// A random delay up to this long is added to each scheduled start.
    #[serde(serialize_with = "ser_duration")]
    pub jitter: Duration,
    /// Daemon mode: alert when no verification succeeded for this long.
    #[serde(serialize_with = "ser_opt_duration", skip_serializing_if = "Option::is_none")]
    pub stale_after: Option<Duration>,
    pub source: SourceConfig,
    pub select: Selection,
    /// Each restorable backup should have passed a verification this recently (default
    /// 30 days): what `least-proven` works through and what coverage counts as proven.
    #[serde(serialize_with = "ser_duration")]
    pub prove_within: Duration,
    /// Warn (`DrcheckRTOForecastBreach`) this long before the RTO forecast's breach (default 30 days).
    #[serde(serialize_with = "ser_duration")]
    pub rto_warn_ahead: Duration,
    /// Daemon mode: when to check the backup tool's repository without a restore.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub integrity_schedule: Option<Schedule>,
    /// Whether a run may pass without its comparisons with the primary.
    pub comparisons: Comparisons,
    pub kubernetes: KubernetesConfig,
    /// Keys for encrypted backups (`[target.decrypt]`).
    #[serde(skip_serializing_if = "DecryptConfig::is_empty")]
    pub decrypt: DecryptConfig,
    /// The primary's heartbeat table (`[target.heartbeat]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<HeartbeatConfig>,
    /// A restored copy that follows the WAL archive (`[target.follow]`, daemon only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follow: Option<FollowConfig>,
    /// pgBackRest: each restore goes onto the previous one's copy (kept in `state_dir`)
    /// with `--delta`, fetching only the files that changed.
    pub delta_restore: bool,
    /// A pass pins the backup it proved, and every later run fails when a pinned
    /// backup changed or vanished (`pinned`); off for a fixed key overwritten by each
    /// new backup (`latest.dump`), where every night would be a change.
    pub pin: bool,
    /// The most the comparisons read from the primary per run (bytes): they rotate over
    /// tables and key ranges, every range compared within a number of runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary_read_budget: Option<u64>,
    /// The share (a fraction) of the rows and of the tables a run compares that may stay
    /// undecided — neither proven nor a change on the primary since the copy's point —
    /// before the run's result is `inconclusive` (default 1%).
    pub max_undecided: f64,
    /// The primary is another cluster than the one the backups are taken of, on purpose
    /// (a logical replica, a copy): a physical copy of another system is then compared,
    /// not failed as "not a backup of this primary".
    pub other_cluster: bool,
}

/// `[target.follow]`: `drcheck daemon` keeps a restored copy of the target that replays
/// every segment its WAL archive gains.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FollowConfig {
    /// How often the archive is listed and replay checked (default 1m).
    #[serde(serialize_with = "ser_duration")]
    pub interval: Duration,
    /// The copy is seeded again from the newest base backup when it is this old
    /// (default 7d).
    #[serde(serialize_with = "ser_duration")]
    pub reseed_after: Duration,
}

/// `[target.decrypt]`: what opens an encrypted backup. Each value is a secret: the key
/// itself (from `${VAR}`) or the path of a file that holds it, read at each run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DecryptConfig {
    /// An age X25519 identity (`AGE-SECRET-KEY-1…`) or an identity file's path.
    #[serde(serialize_with = "ser_opt_secret", skip_serializing_if = "Option::is_none")]
    pub age_identity: Option<Secret>,
    /// The passphrase of an `age -p` backup (age's scrypt recipient).
    #[serde(serialize_with = "ser_opt_secret", skip_serializing_if = "Option::is_none")]
    pub age_passphrase: Option<Secret>,
    /// OpenPGP: the passphrase of a symmetrically encrypted backup (`gpg -c`), and of
    /// `gpg_secret_key` when that key is protected.
    #[serde(serialize_with = "ser_opt_secret", skip_serializing_if = "Option::is_none")]
    pub gpg_passphrase: Option<Secret>,
    /// OpenPGP: a secret key (armoured `-----BEGIN PGP PRIVATE KEY BLOCK-----`, or the
    /// path of a file holding one, armoured or binary) for public-key encrypted backups.
    #[serde(serialize_with = "ser_opt_secret", skip_serializing_if = "Option::is_none")]
    pub gpg_secret_key: Option<Secret>,
    /// OpenPGP: the public key (armoured `-----BEGIN PGP PUBLIC KEY BLOCK-----`, or the
    /// path of a file holding one) whose signature a signed backup must carry: a
    /// signed-only message (`gpg -s`, `--clearsign`) is unwrapped only after it verifies,
    /// and an encrypted one must be signed by it too.
    #[serde(serialize_with = "ser_opt_secret", skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<Secret>,
}

impl DecryptConfig {
    pub fn is_empty(&self) -> bool {
        self.age_identity.is_none()
            && self.age_passphrase.is_none()
            && self.gpg_passphrase.is_none()
            && self.gpg_secret_key.is_none()
            && self.signed_by.is_none()
    }
}

/// `comparisons`: what a run whose comparisons with the primary could not run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Comparisons {
    /// The default: a run that could not compare (primary unreachable, wrong password)
    /// is `error`, exit 3 — a verdict says what ran.
    #[serde(rename = "required")]
    Required,
    /// The restore and self-checks decide; the run is marked degraded.
    #[serde(rename = "best-effort")]
    BestEffort,
}

/// `[target.kubernetes]`; what is not set is decided by `drcheck deploy kubernetes`
/// (scratch from the latest backup's size, the rest from its flags and defaults).
#[derive(Debug, Clone, Default, Serialize)]
pub struct KubernetesConfig {
    /// Scratch space (a Kubernetes quantity, e.g. "80Gi").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scratch: Option<String>,
    /// A generic ephemeral volume of this StorageClass instead of an emptyDir.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_request: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_limit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_request: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Toleration {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub operator: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
    #[serde(rename = "tolerationSeconds", skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

/// Whether `s` is a Kubernetes resource quantity ("500m", "2", "1.5Gi", "80G").
pub fn is_quantity(s: &str) -> bool {
    let digits_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, suffix) = s.split_at(digits_end);
    !num.is_empty()
        && num.parse::<f64>().is_ok()
        && ["", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"].contains(&suffix)
}

fn ser_opt_duration<S: serde::Serializer>(d: &Option<Duration>, ser: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => ser.serialize_str(&format_duration(*d)),
        None => ser.serialize_none(),
    }
}

/// Every validator drcheck has, in the order they run.
pub const ALL_VALIDATORS: [&str; 12] = [
    "amcheck",
    "full_read",
    "sequences",
    "indexes",
    "schema",
    "row_counts",
    "checksums",
    "large_objects",
    "freshness",
    "custom",
    "repository",
    "point_in_time",
];

/// Which validators run for a target, and how.
#[derive(Debug, Clone, Serialize)]
pub struct ValidatorsConfig {
    pub enabled: Vec<String>,
    /// Each validator's own time limit.
    #[serde(serialize_with = "ser_duration")]
    pub timeout: Duration,
    /// The whole validate phase's (every validator, every database of a physical copy):
    /// with the restore's deadline, it bounds a run — the lease's TTL and a CronJob's
    /// deadline are made of it.
    #[serde(serialize_with = "ser_duration")]
    pub phase_timeout: Duration,
    /// Whether the file sets `phase_timeout` (else it is the RTO's share: `(4 −
    /// abort_factor) × rto − 10m`, at least 5m).
    #[serde(skip)]
    pub phase_timeout_set: bool,
    /// `statement_timeout` of every query on the primary.
    #[serde(serialize_with = "ser_duration")]
    pub statement_timeout: Duration,
    /// How many queries may run on the primary at once.
    pub primary_concurrency: u32,
    /// Rows per checksum query (tables are hashed in key ranges of this size).
    pub checksum_chunk_rows: u64,
    /// Tables larger than this are sampled: this many rows, in whole chunks.
    pub checksum_sample_rows: u64,
    /// Where nothing says which transactions had committed at the copy's point (a dump
    /// without `track_commit_timestamp` on the primary), `as_of` rows this close before
    /// the cut-off may still have been in flight: they are counted, not compared.
    #[serde(serialize_with = "ser_duration")]
    pub as_of_grace: Duration,
    /// The most rows `checksums` reads (both sides) to decide a table's differing ranges
    /// row by row; past it the table's comparison is an error naming this setting —
    /// never a pass, never undecided.
    pub checksum_drill_rows: u64,
    /// How long the primary's statistics (its insert counters) may lag its commits: rows
    /// written this recently are not weighed against the counters.
    #[serde(serialize_with = "ser_duration")]
    pub stats_settle: Duration,
    /// Tables (`schema.table`) left out of row counts and checksums.
    pub exclude: Vec<String>,
    /// `[target] dump_scope`: what a deliberately partial dump holds — schemas
    /// (`"public"`) or tables (`"sales.invoices"`); empty: the whole database. The
    /// primary's objects outside it are not expected in the copy.
    pub dump_scope: Vec<String>,
    /// `(schema, table) → column` saying when a row was written.
    #[serde(skip)]
    pub as_of: Vec<(String, String, String)>,
    pub checks: Vec<CustomCheck>,
}

/// A check written in SQL by the user.
#[derive(Debug, Clone, Serialize)]
pub struct CustomCheck {
    pub name: String,
    pub sql: String,
    /// The expected value (first column of the first row, as text), or `None` to compare
    /// with the same query's result on the primary.
    pub expect: Option<String>,
}

impl Config {
    pub fn target(&self, name: &str) -> Option<&TargetConfig> {
        self.targets.iter().find(|t| t.name == name)
    }

    /// The effective config as TOML, secrets redacted: what `drcheck config check` prints.
    pub fn to_redacted_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }
}

fn ser_duration<S: serde::Serializer>(d: &Duration, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(&format_duration(*d))
}

fn ser_secret<S: serde::Serializer>(s: &Secret, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(&s.redacted())
}

fn ser_url_origin<S: serde::Serializer>(s: &Secret, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(&crate::secret::origin_only(s.expose()))
}

fn ser_opt_secret<S: serde::Serializer>(s: &Option<Secret>, ser: S) -> Result<S::Ok, S::Error> {
    match s {
        Some(s) => ser.serialize_str(&s.redacted()),
        None => ser.serialize_none(),
    }
}

fn ser_opt_userinfo<S: serde::Serializer>(s: &Option<String>, ser: S) -> Result<S::Ok, S::Error> {
    match s {
        Some(s) => ser.serialize_str(&crate::secret::redact_userinfo(s)),
        None => ser.serialize_none(),
    }
}

/// Where sandboxes go when `[sandbox] scratch_dir` is not set: somewhere private to
/// drcheck, never a shared directory another local user could prepare for it —
/// `/var/lib/drcheck` as root, `$XDG_RUNTIME_DIR/drcheck` (a per-user 0700 directory)
/// otherwise, the system temp directory only when neither is available.
pub fn default_scratch_dir() -> PathBuf {
    // The generated Kubernetes pods say where their scratch volume is mounted.
    if let Some(d) = std::env::var_os("DRCHECK_SCRATCH_DIR").filter(|d| std::path::Path::new(d).is_absolute()) {
        return PathBuf::from(d);
    }
    if nix::unistd::Uid::effective().is_root() {
        return PathBuf::from("/var/lib/drcheck");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() && std::path::Path::new(&d).is_absolute() => PathBuf::from(d).join("drcheck"),
        _ => std::env::temp_dir(),
    }
}
