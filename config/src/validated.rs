//! Raw config → validated config, in one step, with errors that name the key and line.

use crate::duration::{format_duration, parse_duration};
use crate::error::ConfigError;
use crate::interpolate::interpolate;
use crate::raw::{RawConfig, RawStorage, RawTarget};
use crate::secret::Secret;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

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
pub struct DaemonConfig {
    pub max_concurrent_restores: usize,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pg_bindir: Option<PathBuf>,
    pub profile: Profile,
    /// Free space needed in `scratch_dir`: the backup's size times this.
    pub expansion_factor: f64,
    /// Refuse to restore (exit 3) where the kernel cannot confine the restore.
    pub require_containment: bool,
    /// A restore may write at most the backup's size times this; beyond, it fails as
    /// a decompression bomb.
    pub max_expansion: f64,
}

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
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum StorageConfig {
    S3(S3Storage),
    Filesystem { path: PathBuf },
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
    pub schedule: Option<String>,
    /// A random delay up to this long is added to each scheduled start.
    #[serde(serialize_with = "ser_duration")]
    pub jitter: Duration,
    /// Daemon mode: alert when no verification succeeded for this long.
    #[serde(serialize_with = "ser_opt_duration", skip_serializing_if = "Option::is_none")]
    pub stale_after: Option<Duration>,
}

fn ser_opt_duration<S: serde::Serializer>(d: &Option<Duration>, ser: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => ser.serialize_str(&format_duration(*d)),
        None => ser.serialize_none(),
    }
}

/// A crontab line in 5 fields (minute hour day month weekday) or 6 (with seconds),
/// or a `@daily`-style shorthand, as the `cron` crate wants it (6 or 7 fields).
pub fn normalize_schedule(s: &str) -> Result<String, String> {
    let t = s.trim();
    let fields = t.split_whitespace().count();
    let six = match fields {
        _ if t.starts_with('@') => t.to_string(),
        5 => format!("0 {t}"),
        6 | 7 => t.to_string(),
        _ => return Err(format!("expected a crontab line of 5 fields (\"0 3 * * *\") or 6 with seconds, got {s:?}")),
    };
    six.parse::<cron::Schedule>().map_err(|e| format!("not a valid schedule {s:?}: {e}"))?;
    Ok(six)
}

/// Every validator drcheck has, in the order they run.
pub const ALL_VALIDATORS: [&str; 9] =
    ["amcheck", "full_read", "sequences", "indexes", "schema", "row_counts", "checksums", "freshness", "custom"];

/// Which validators run for a target, and how.
#[derive(Debug, Clone, Serialize)]
pub struct ValidatorsConfig {
    pub enabled: Vec<String>,
    /// Each validator's own time limit.
    #[serde(serialize_with = "ser_duration")]
    pub timeout: Duration,
    /// `statement_timeout` of every query on the primary.
    #[serde(serialize_with = "ser_duration")]
    pub statement_timeout: Duration,
    /// How many queries may run on the primary at once.
    pub primary_concurrency: u32,
    /// Rows per checksum query (tables are hashed in key ranges of this size).
    pub checksum_chunk_rows: u64,
    /// Tables larger than this are sampled: this many rows, in whole chunks.
    pub checksum_sample_rows: u64,
    /// Tables (`schema.table`) left out of row counts and checksums.
    pub exclude: Vec<String>,
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

fn ser_duration<S: serde::Serializer>(d: &Duration, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(&format_duration(*d))
}

/// Carries what every error needs: the file, its text (for line numbers) and the env.
struct Ctx<'a> {
    path: &'a Path,
    text: &'a str,
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl Ctx<'_> {
    fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())].matches('\n').count() + 1
    }

    fn err(&self, key: &str, span: Option<std::ops::Range<usize>>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            line: span.map(|s| self.line_of(s.start)),
            key: key.to_string(),
            message: message.into(),
        }
    }

    /// Interpolates `${ENV}` in a spanned string value.
    fn string(&self, key: &str, v: &Spanned<String>) -> Result<String, ConfigError> {
        interpolate(v.get_ref(), self.env).map_err(|m| self.err(key, Some(v.span()), m))
    }

    fn opt_string(&self, key: &str, v: &Option<Spanned<String>>) -> Result<Option<String>, ConfigError> {
        v.as_ref().map(|v| self.string(key, v)).transpose()
    }

    fn duration(&self, key: &str, v: &Spanned<String>) -> Result<Duration, ConfigError> {
        parse_duration(v.get_ref()).map_err(|m| self.err(key, Some(v.span()), m))
    }
}

pub(crate) fn validate(
    raw: RawConfig,
    text: &str,
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let cx = Ctx { path, text, env };

    let url = cx.opt_string("state.url", &raw.state.url)?.unwrap_or_else(|| DEFAULT_STATE_URL.to_string());
    if !(url.starts_with("sqlite:") || url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        let span = raw.state.url.as_ref().map(|v| v.span());
        return Err(cx.err("state.url", span, "expected a `sqlite://PATH` or `postgres://…` URL"));
    }

    let scratch_dir = cx
        .opt_string("sandbox.scratch_dir", &raw.sandbox.scratch_dir)?
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let pg_bindir = cx.opt_string("sandbox.pg_bindir", &raw.sandbox.pg_bindir)?.map(PathBuf::from);
    let profile = match &raw.sandbox.profile {
        None => Profile::Production,
        Some(p) => match p.get_ref().as_str() {
            "production" => Profile::Production,
            "fast" => Profile::Fast,
            other => {
                return Err(cx.err(
                    "sandbox.profile",
                    Some(p.span()),
                    format!("expected \"production\" or \"fast\", got {other:?}"),
                ));
            }
        },
    };
    let expansion_factor = match &raw.sandbox.expansion_factor {
        None => 5.0,
        Some(f) if *f.get_ref() >= 0.0 && f.get_ref().is_finite() => *f.get_ref(),
        Some(f) => return Err(cx.err("sandbox.expansion_factor", Some(f.span()), "expected a number ≥ 0")),
    };
    let require_containment = raw.sandbox.require_containment.unwrap_or(true);
    let max_expansion = match &raw.sandbox.max_expansion {
        None => 200.0,
        Some(f) if *f.get_ref() >= 1.0 && f.get_ref().is_finite() => *f.get_ref(),
        Some(f) => return Err(cx.err("sandbox.max_expansion", Some(f.span()), "expected a number ≥ 1")),
    };

    let mut storage = BTreeMap::new();
    for (name, s) in &raw.storage {
        storage.insert(name.clone(), validate_storage(&cx, name, s)?);
    }

    let mut targets: Vec<TargetConfig> = Vec::new();
    for (i, t) in raw.targets.iter().enumerate() {
        let target = validate_target(&cx, i, t, &storage)?;
        if targets.iter().any(|o| o.name == target.name) {
            return Err(cx.err(
                &format!("target[{i}].name"),
                Some(t.name.span()),
                format!("duplicate target name {:?}", target.name),
            ));
        }
        targets.push(target);
    }

    let keep_runs = match &raw.state.keep_runs {
        None => 1000,
        Some(n) if (1..=10_000_000).contains(n.get_ref()) => *n.get_ref() as u32,
        Some(n) => return Err(cx.err("state.keep_runs", Some(n.span()), "expected a whole number from 1 to 10000000")),
    };
    let listen = cx.opt_string("metrics.listen", &raw.metrics.listen)?.unwrap_or_else(|| "127.0.0.1:9187".into());
    if listen.parse::<std::net::SocketAddr>().is_err() {
        let span = raw.metrics.listen.as_ref().map(|l| l.span());
        return Err(cx.err("metrics.listen", span, format!("expected HOST:PORT with an IP address, got {listen:?}")));
    }
    let pushgateway = cx.opt_string("metrics.pushgateway", &raw.metrics.pushgateway)?;
    if let (Some(p), Some(span)) = (&pushgateway, &raw.metrics.pushgateway)
        && !(p.starts_with("http://") || p.starts_with("https://"))
    {
        return Err(cx.err(
            "metrics.pushgateway",
            Some(span.span()),
            format!("expected an http:// or https:// URL, got {p:?}"),
        ));
    }
    let metrics = MetricsConfig {
        listen,
        pushgateway,
        textfile: cx.opt_string("metrics.textfile", &raw.metrics.textfile)?.map(PathBuf::from),
    };
    let api =
        ApiConfig { token: cx.opt_string("api.token", &raw.api.token)?.filter(|t| !t.is_empty()).map(Secret::new) };
    let daemon = DaemonConfig {
        max_concurrent_restores: match &raw.daemon.max_concurrent_restores {
            None => 1,
            Some(n) if (1..=64).contains(n.get_ref()) => *n.get_ref() as usize,
            Some(n) => {
                return Err(cx.err(
                    "daemon.max_concurrent_restores",
                    Some(n.span()),
                    "expected a whole number from 1 to 64",
                ));
            }
        },
    };
    let mut alerts: Vec<AlertConfig> = Vec::new();
    for (i, a) in raw.alerts.iter().enumerate() {
        let key = |k: &str| format!("alert[{i}].{k}");
        let kind = match a.kind.get_ref().as_str() {
            "alertmanager" => AlertKind::Alertmanager,
            "webhook" => AlertKind::Webhook,
            "slack" => AlertKind::Slack,
            other => {
                return Err(cx.err(
                    &key("kind"),
                    Some(a.kind.span()),
                    format!("expected alertmanager, webhook or slack, got {other:?}"),
                ));
            }
        };
        let url = cx.string(&key("url"), &a.url)?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(cx.err(&key("url"), Some(a.url.span()), "expected an http:// or https:// URL"));
        }
        if a.secret.is_some() && kind != AlertKind::Webhook {
            return Err(cx.err(&key("secret"), a.secret.as_ref().map(|s| s.span()), "only webhooks are signed"));
        }
        let name = a.name.clone().unwrap_or_else(|| {
            let same = raw.alerts[..i].iter().filter(|o| o.kind.get_ref() == a.kind.get_ref()).count();
            if same == 0 { kind.as_str().to_string() } else { format!("{}-{}", kind.as_str(), same + 1) }
        });
        if alerts.iter().any(|o| o.name == name) {
            return Err(cx.err(&key("name"), Some(a.kind.span()), format!("duplicate alert sink name {name:?}")));
        }
        alerts.push(AlertConfig {
            name,
            kind,
            url: Secret::new(url),
            secret: cx.opt_string(&key("secret"), &a.secret)?.map(Secret::new),
            max_attempts: match &a.max_attempts {
                None => 8,
                Some(n) if (1..=1000).contains(n.get_ref()) => *n.get_ref() as u32,
                Some(n) => {
                    return Err(cx.err(&key("max_attempts"), Some(n.span()), "expected a whole number from 1 to 1000"));
                }
            },
            timeout: match &a.timeout {
                None => Duration::from_secs(10),
                Some(t) => cx.duration(&key("timeout"), t)?,
            },
        });
    }
    Ok(Config {
        metrics,
        api,
        daemon,
        alerts,
        path: path.to_path_buf(),
        state: StateConfig { url: Secret::new(url), keep_runs },
        sandbox: SandboxConfig {
            scratch_dir,
            pg_bindir,
            profile,
            expansion_factor,
            require_containment,
            max_expansion,
        },
        storage,
        targets,
    })
}

fn validate_storage(cx: &Ctx<'_>, name: &str, s: &RawStorage) -> Result<StorageConfig, ConfigError> {
    let key = |k: &str| format!("storage.{name}.{k}");
    let reject = |k: &str, present: bool, kind: &str| -> Result<(), ConfigError> {
        if present {
            Err(cx.err(&key(k), Some(s.kind.span()), format!("not a key of kind = {kind:?}")))
        } else {
            Ok(())
        }
    };
    match s.kind.get_ref().as_str() {
        "s3" => {
            reject("path", s.path.is_some(), "s3")?;
            let bucket = s
                .bucket
                .as_ref()
                .ok_or_else(|| cx.err(&key("bucket"), Some(s.kind.span()), "missing: kind = \"s3\" needs a bucket"))?;
            let bucket = cx.string(&key("bucket"), bucket)?;
            if bucket.is_empty() {
                return Err(cx.err(&key("bucket"), s.bucket.as_ref().map(|b| b.span()), "must not be empty"));
            }
            let endpoint = cx.opt_string(&key("endpoint"), &s.endpoint)?;
            if let (Some(e), Some(span)) = (&endpoint, &s.endpoint)
                && !(e.starts_with("http://") || e.starts_with("https://"))
            {
                return Err(cx.err(
                    &key("endpoint"),
                    Some(span.span()),
                    format!("expected an http:// or https:// URL, got {e:?}"),
                ));
            }
            let region = cx
                .opt_string(&key("region"), &s.region)?
                .or_else(|| (cx.env)("AWS_REGION"))
                .unwrap_or_else(|| "us-east-1".to_string());
            let part_size = match &s.part_size {
                None => 8 << 20,
                Some(v) => parse_size(v.get_ref()).map_err(|m| cx.err(&key("part_size"), Some(v.span()), m))?,
            };
            if part_size < 64 << 10 {
                let span = s.part_size.as_ref().map(|v| v.span());
                return Err(cx.err(&key("part_size"), span, "must be at least 64KiB"));
            }
            let concurrency = match &s.concurrency {
                None => 4,
                Some(v) if (1..=64).contains(v.get_ref()) => *v.get_ref() as usize,
                Some(v) => {
                    return Err(cx.err(&key("concurrency"), Some(v.span()), "expected a whole number from 1 to 64"));
                }
            };
            Ok(StorageConfig::S3(S3Storage {
                bucket,
                endpoint,
                region,
                path_style: s.path_style.unwrap_or(false),
                part_size,
                concurrency,
            }))
        }
        "filesystem" => {
            for (k, present) in [
                ("bucket", s.bucket.is_some()),
                ("endpoint", s.endpoint.is_some()),
                ("region", s.region.is_some()),
                ("path_style", s.path_style.is_some()),
                ("part_size", s.part_size.is_some()),
                ("concurrency", s.concurrency.is_some()),
            ] {
                reject(k, present, "filesystem")?;
            }
            let path = s.path.as_ref().ok_or_else(|| {
                cx.err(&key("path"), Some(s.kind.span()), "missing: kind = \"filesystem\" needs a path")
            })?;
            Ok(StorageConfig::Filesystem { path: PathBuf::from(cx.string(&key("path"), path)?) })
        }
        other => {
            Err(cx.err(&key("kind"), Some(s.kind.span()), format!("expected \"s3\" or \"filesystem\", got {other:?}")))
        }
    }
}

fn validate_target(
    cx: &Ctx<'_>,
    i: usize,
    t: &RawTarget,
    storage: &BTreeMap<String, StorageConfig>,
) -> Result<TargetConfig, ConfigError> {
    let key = |k: &str| format!("target[{i}].{k}");
    let name = t.name.get_ref().clone();
    let valid_name = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
    if !valid_name {
        return Err(cx.err(
            &key("name"),
            Some(t.name.span()),
            format!("expected 1-63 characters of A-Z a-z 0-9 - _ . (it is used in metric labels and file names), got {name:?}"),
        ));
    }
    let storage_name = t.storage.get_ref();
    if !storage.contains_key(storage_name) {
        let known: Vec<&str> = storage.keys().map(String::as_str).collect();
        return Err(cx.err(
            &key("storage"),
            Some(t.storage.span()),
            format!("unknown storage {storage_name:?}; defined: [{}]", known.join(", ")),
        ));
    }
    let primary = cx.opt_string(&key("primary"), &t.primary)?;
    if let (Some(p), Some(span)) = (&primary, &t.primary)
        && !(p.starts_with("postgres://") || p.starts_with("postgresql://"))
    {
        // The value itself is not echoed: it may hold a password.
        return Err(cx.err(&key("primary"), Some(span.span()), "expected a postgres:// URL"));
    }
    let tolerance = match &t.row_count_tolerance {
        None => 0.001,
        Some(v) => parse_percent(v.get_ref()).map_err(|m| cx.err(&key("row_count_tolerance"), Some(v.span()), m))?,
    };
    let abort_factor = match &t.abort_factor {
        None => 2.0,
        Some(v) if *v.get_ref() >= 1.0 && v.get_ref().is_finite() => *v.get_ref(),
        Some(v) => {
            return Err(cx.err(
                &key("abort_factor"),
                Some(v.span()),
                format!("expected a number ≥ 1, got {}", v.get_ref()),
            ));
        }
    };
    let format = match &t.format {
        None => FormatSetting::Auto,
        Some(f) => match f.get_ref().as_str() {
            "auto" => FormatSetting::Auto,
            "custom" => FormatSetting::Custom,
            "tar" => FormatSetting::Tar,
            "directory" => FormatSetting::Directory,
            "plain" => FormatSetting::Plain,
            "physical" => FormatSetting::Physical,
            other => {
                return Err(cx.err(
                    &key("format"),
                    Some(f.span()),
                    format!("expected one of auto, custom, tar, directory, plain, physical; got {other:?}"),
                ));
            }
        },
    };
    let restore_jobs = match &t.restore_jobs {
        None => 1,
        Some(v) if (1..=64).contains(v.get_ref()) => *v.get_ref() as u32,
        Some(v) => return Err(cx.err(&key("restore_jobs"), Some(v.span()), "expected a whole number from 1 to 64")),
    };
    let recovery_target = match &t.recovery_target {
        None => RecoveryTarget::Latest,
        Some(v) => {
            match v.get_ref().as_str() {
                "latest" => RecoveryTarget::Latest,
                "immediate" => RecoveryTarget::Immediate,
                ts if humantime::parse_rfc3339_weak(ts).is_ok() => RecoveryTarget::Time(ts.to_string()),
                other => {
                    return Err(cx.err(
                    &key("recovery_target"),
                    Some(v.span()),
                    format!("expected \"latest\", \"immediate\" or a timestamp like \"2026-11-30T03:00:00Z\", got {other:?}"),
                ));
                }
            }
        }
    };
    let validators = validate_validators(cx, i, t)?;
    let schedule = match &t.schedule {
        None => None,
        Some(s) => Some(normalize_schedule(s.get_ref()).map_err(|m| cx.err(&key("schedule"), Some(s.span()), m))?),
    };
    let jitter = match &t.jitter {
        None => Duration::ZERO,
        Some(j) => cx.duration(&key("jitter"), j)?,
    };
    let stale_after = t.stale_after.as_ref().map(|s| cx.duration(&key("stale_after"), s)).transpose()?;
    Ok(TargetConfig {
        schedule,
        jitter,
        stale_after,
        validators,
        format,
        restore_jobs,
        recovery_target,
        wal_prefix: cx.opt_string(&key("wal_prefix"), &t.wal_prefix)?,
        globals_key: cx.opt_string(&key("globals_key"), &t.globals_key)?,
        name,
        primary: primary.map(Secret::new),
        storage: storage_name.clone(),
        prefix: cx.opt_string(&key("prefix"), &t.prefix)?.unwrap_or_default(),
        rto: cx.duration(&key("rto"), &t.rto)?,
        rpo: cx.duration(&key("rpo"), &t.rpo)?,
        row_count_tolerance: tolerance,
        abort_factor,
    })
}

fn validate_validators(cx: &Ctx<'_>, i: usize, t: &RawTarget) -> Result<ValidatorsConfig, ConfigError> {
    let key = |k: &str| format!("target[{i}].validators.{k}");
    let v = t.validators.as_ref();
    let enabled = match v.and_then(|v| v.enabled.as_ref()) {
        None => ALL_VALIDATORS.iter().map(|s| s.to_string()).collect(),
        Some(list) => {
            for name in list.get_ref() {
                if !ALL_VALIDATORS.contains(&name.as_str()) {
                    return Err(cx.err(
                        &key("enabled"),
                        Some(list.span()),
                        format!("unknown validator {name:?}; known: {}", ALL_VALIDATORS.join(", ")),
                    ));
                }
            }
            list.get_ref().clone()
        }
    };
    let dur = |k: &str, f: Option<&Spanned<String>>, default: u64| match f {
        None => Ok(Duration::from_secs(default)),
        Some(s) => cx.duration(&key(k), s),
    };
    let count = |k: &str, f: Option<&Spanned<i64>>, default: u64, max: i64| match f {
        None => Ok(default),
        Some(n) if (1..=max).contains(n.get_ref()) => Ok(*n.get_ref() as u64),
        Some(n) => Err(cx.err(&key(k), Some(n.span()), format!("expected a whole number from 1 to {max}"))),
    };
    let mut as_of = Vec::new();
    for (table, column) in t.as_of.iter().flatten() {
        let (schema, name) = table.split_once('.').unwrap_or(("public", table));
        if name.is_empty() || schema.is_empty() || column.get_ref().is_empty() {
            return Err(cx.err(
                &format!("target[{i}].as_of"),
                Some(column.span()),
                format!("expected \"schema.table\" = \"column\", got {table:?}"),
            ));
        }
        as_of.push((schema.to_string(), name.to_string(), column.get_ref().clone()));
    }
    let mut checks = Vec::new();
    for (j, c) in t.checks.iter().enumerate() {
        let k = format!("target[{i}].check[{j}]");
        let expect = match (&c.expect, &c.compare) {
            (Some(e), None) => Some(e.clone()),
            (None, Some(cmp)) if cmp.get_ref() == "primary" => None,
            (None, Some(cmp)) => {
                return Err(cx.err(
                    &format!("{k}.compare"),
                    Some(cmp.span()),
                    format!("expected \"primary\", got {:?}", cmp.get_ref()),
                ));
            }
            _ => {
                return Err(cx.err(
                    &k,
                    Some(c.name.span()),
                    "needs exactly one of `expect = \"…\"` or `compare = \"primary\"`",
                ));
            }
        };
        if c.sql.get_ref().trim().is_empty() {
            return Err(cx.err(&format!("{k}.sql"), Some(c.sql.span()), "must not be empty"));
        }
        // Each check is its own finding, recorded under its name: two of one name would
        // collide in the history store and lose the run.
        if checks.iter().any(|o: &CustomCheck| o.name == *c.name.get_ref()) {
            return Err(cx.err(
                &format!("{k}.name"),
                Some(c.name.span()),
                format!("duplicate check name {:?} (each check needs its own name)", c.name.get_ref()),
            ));
        }
        checks.push(CustomCheck { name: c.name.get_ref().clone(), sql: c.sql.get_ref().clone(), expect });
    }
    Ok(ValidatorsConfig {
        enabled,
        timeout: dur("timeout", v.and_then(|v| v.timeout.as_ref()), 1800)?,
        statement_timeout: dur("statement_timeout", v.and_then(|v| v.statement_timeout.as_ref()), 60)?,
        primary_concurrency: count("primary_concurrency", v.and_then(|v| v.primary_concurrency.as_ref()), 2, 16)?
            as u32,
        checksum_chunk_rows: count(
            "checksum_chunk_rows",
            v.and_then(|v| v.checksum_chunk_rows.as_ref()),
            100_000,
            100_000_000,
        )?,
        checksum_sample_rows: count(
            "checksum_sample_rows",
            v.and_then(|v| v.checksum_sample_rows.as_ref()),
            5_000_000,
            i64::MAX,
        )?,
        exclude: v.and_then(|v| v.exclude.clone()).unwrap_or_default(),
        as_of,
        checks,
    })
}

/// `"8MiB"` → 8388608. Units: B, KiB, MiB, GiB (and KB, MB, GB as powers of 1000).
fn parse_size(s: &str) -> Result<u64, String> {
    let expected = || format!("expected a size like \"8MiB\", got {s:?}");
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| expected())?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(expected()),
    };
    n.checked_mul(mult).ok_or_else(expected)
}

/// `"0.1%"` → 0.001.
fn parse_percent(s: &str) -> Result<f64, String> {
    let expected = || format!("expected a percentage like \"0.1%\", got {s:?}");
    let n: f64 = s.trim().strip_suffix('%').ok_or_else(expected)?.trim().parse().map_err(|_| expected())?;
    if !(0.0..=100.0).contains(&n) {
        return Err(format!("expected a percentage between 0% and 100%, got {s:?}"));
    }
    Ok(n / 100.0)
}

#[cfg(test)]
mod tests;
