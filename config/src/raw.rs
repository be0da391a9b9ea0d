//! The config exactly as written. Unknown keys are errors, not silence.

use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub state: RawState,
    #[serde(default)]
    pub sandbox: RawSandbox,
    #[serde(default)]
    pub storage: BTreeMap<String, RawStorage>,
    #[serde(default, rename = "target")]
    pub targets: Vec<RawTarget>,
    #[serde(default)]
    pub metrics: RawMetrics,
    #[serde(default)]
    pub api: RawApi,
    #[serde(default)]
    pub daemon: RawDaemon,
    #[serde(default)]
    pub evidence: RawEvidence,
    #[serde(default, rename = "alert")]
    pub alerts: Vec<RawAlert>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    pub listen: Option<Spanned<String>>,
    pub pushgateway: Option<Spanned<String>>,
    pub textfile: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApi {
    pub token: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEvidence {
    pub signing_key: Option<Spanned<String>>,
    pub controls: Option<Spanned<Vec<String>>>,
    pub controls_file: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDaemon {
    pub max_concurrent_restores: Option<Spanned<i64>>,
    pub alert_resend_interval: Option<Spanned<String>>,
    pub canary: Option<Spanned<String>>,
    pub canary_alert_within: Option<Spanned<String>>,
    pub journal_interval: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAlert {
    pub kind: Spanned<String>,
    pub url: Spanned<String>,
    pub name: Option<String>,
    pub secret: Option<Spanned<String>>,
    pub max_attempts: Option<Spanned<i64>>,
    pub timeout: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawState {
    pub url: Option<Spanned<String>>,
    pub keep_runs: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSandbox {
    pub scratch_dir: Option<Spanned<String>>,
    pub pg_bindir: Option<Spanned<String>>,
    /// `[sandbox.pg_bindirs]`: `"16" = "/usr/pgsql-16/bin"`, a directory per major.
    pub pg_bindirs: Option<BTreeMap<String, Spanned<String>>>,
    pub profile: Option<Spanned<String>>,
    pub expansion_factor: Option<Spanned<f64>>,
    pub require_containment: Option<bool>,
    pub max_expansion: Option<Spanned<f64>>,
    pub user: Option<Spanned<String>>,
    pub memory_limit: Option<Spanned<String>>,
    /// Where followers keep their restored copies between runs.
    pub state_dir: Option<Spanned<String>>,
}

/// One storage. `kind` selects which of the other keys apply; the validation step
/// rejects keys that do not belong to the kind.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStorage {
    pub kind: Spanned<String>,
    pub bucket: Option<Spanned<String>>,
    pub endpoint: Option<Spanned<String>>,
    pub region: Option<Spanned<String>>,
    pub path_style: Option<bool>,
    pub path: Option<Spanned<String>>,
    pub part_size: Option<Spanned<String>>,
    pub concurrency: Option<Spanned<i64>>,
    pub ca_file: Option<Spanned<String>>,
    pub verify_tls: Option<bool>,
    pub retry_window: Option<Spanned<String>>,
    pub require_lock: Option<Spanned<String>>,
    pub retain_until_at_least: Option<Spanned<String>>,
    pub probe_write: Option<bool>,
    /// A filesystem storage in `drcheck deploy kubernetes`'s pods: the
    /// PersistentVolumeClaim that holds it, and a group that may read it.
    pub kubernetes_claim: Option<Spanned<String>>,
    pub kubernetes_read_group: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTarget {
    pub name: Spanned<String>,
    pub primary: Option<Spanned<String>>,
    pub storage: Spanned<String>,
    pub prefix: Option<Spanned<String>>,
    pub rto: Spanned<String>,
    pub rpo: Spanned<String>,
    pub row_count_tolerance: Option<Spanned<String>>,
    pub abort_factor: Option<Spanned<f64>>,
    pub format: Option<Spanned<String>>,
    pub restore_jobs: Option<Spanned<i64>>,
    pub wal_prefix: Option<Spanned<String>>,
    pub recovery_target: Option<Spanned<String>>,
    pub globals_key: Option<Spanned<String>>,
    pub validators: Option<RawValidators>,
    /// `"schema.table" = "column"`: the column that says when a row was written.
    pub as_of: Option<BTreeMap<String, Spanned<String>>>,
    #[serde(default, rename = "check")]
    pub checks: Vec<RawCheck>,
    pub schedule: Option<Spanned<String>>,
    pub jitter: Option<Spanned<String>>,
    pub stale_after: Option<Spanned<String>>,
    pub source: Option<Spanned<String>>,
    pub stanza: Option<Spanned<String>>,
    pub repo_path: Option<Spanned<String>>,
    pub cipher_pass: Option<Spanned<String>>,
    pub server_name: Option<Spanned<String>>,
    pub select: Option<Spanned<String>>,
    /// How recently each restorable backup must have been proven (`least-proven`, coverage).
    pub prove_within: Option<Spanned<String>>,
    /// Warn this long before the RTO forecast says a restore will take longer than the RTO.
    pub rto_warn_ahead: Option<Spanned<String>>,
    pub integrity_schedule: Option<Spanned<String>>,
    pub comparisons: Option<Spanned<String>>,
    /// What a deliberately partial dump holds (`pg_dump -n`/`-t`): schemas or tables.
    pub dump_scope: Option<Vec<Spanned<String>>>,
    pub kubernetes: Option<RawKubernetes>,
    pub decrypt: Option<RawDecrypt>,
    pub heartbeat: Option<RawHeartbeat>,
    pub follow: Option<RawFollow>,
    pub delta_restore: Option<Spanned<bool>>,
    pub pin: Option<bool>,
    pub primary_read_budget: Option<Spanned<String>>,
    /// The share of a run's comparisons that may stay undecided before the run is
    /// `inconclusive` (rows and tables, each).
    pub max_undecided: Option<Spanned<String>>,
    /// The primary is not the cluster the backups are taken of, on purpose.
    pub other_cluster: Option<bool>,
}

/// `[target.follow]`: a restored copy that replays the WAL archive as it grows.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFollow {
    pub interval: Option<Spanned<String>>,
    pub reseed_after: Option<Spanned<String>>,
}

/// `[target.heartbeat]`: the primary's heartbeat table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHeartbeat {
    pub table: Spanned<String>,
    pub interval: Option<Spanned<String>>,
    pub url: Option<Spanned<String>>,
}

/// `[target.decrypt]`: the keys that open encrypted backups (secrets: `${VAR}` or a path).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDecrypt {
    pub age_identity: Option<Spanned<String>>,
    pub age_passphrase: Option<Spanned<String>>,
    pub gpg_passphrase: Option<Spanned<String>>,
    pub gpg_secret_key: Option<Spanned<String>>,
    pub signed_by: Option<Spanned<String>>,
}

/// `[target.kubernetes]`: how `drcheck deploy kubernetes` sizes and places the job.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKubernetes {
    pub scratch: Option<Spanned<String>>,
    pub storage_class: Option<Spanned<String>>,
    pub cpu_request: Option<Spanned<String>>,
    pub cpu_limit: Option<Spanned<String>>,
    pub memory_request: Option<Spanned<String>>,
    pub memory_limit: Option<Spanned<String>>,
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub tolerations: Vec<RawToleration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToleration {
    pub key: Option<String>,
    pub operator: Option<Spanned<String>>,
    pub value: Option<String>,
    pub effect: Option<Spanned<String>>,
    pub toleration_seconds: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawValidators {
    pub enabled: Option<Spanned<Vec<String>>>,
    pub timeout: Option<Spanned<String>>,
    pub phase_timeout: Option<Spanned<String>>,
    pub statement_timeout: Option<Spanned<String>>,
    pub primary_concurrency: Option<Spanned<i64>>,
    pub checksum_chunk_rows: Option<Spanned<i64>>,
    pub checksum_sample_rows: Option<Spanned<i64>>,
    pub as_of_grace: Option<Spanned<String>>,
    pub checksum_drill_rows: Option<Spanned<i64>>,
    pub stats_settle: Option<Spanned<String>>,
    pub exclude: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCheck {
    pub name: Spanned<String>,
    pub sql: Spanned<String>,
    pub expect: Option<String>,
    pub compare: Option<Spanned<String>>,
}
