//! `[[target]]` and its `[target.validators]`, `[target.as_of]`, `[[target.check]]`.

use super::ctx::{Ctx, parse_percent, parse_size};
use crate::error::ConfigError;
use crate::model::*;
use crate::raw::RawTarget;
use crate::schedule::Schedule;
use crate::secret::Secret;
use std::collections::BTreeMap;
use std::time::Duration;
use toml::Spanned;

pub(super) fn validate_target(
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
    let abort_factor = cx.number_at_least(&key("abort_factor"), t.abort_factor.as_ref(), 2.0, 1.0)?;
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
    let restore_jobs = cx.whole_in(&key("restore_jobs"), t.restore_jobs.as_ref(), 1, 1, 64)? as u32;
    let recovery_target = match &t.recovery_target {
        None => RecoveryTarget::Latest,
        Some(v) => match v.get_ref().as_str() {
            "latest" => RecoveryTarget::Latest,
            "immediate" => RecoveryTarget::Immediate,
            lsn if lsn.strip_prefix("lsn:").is_some_and(is_lsn) => RecoveryTarget::Lsn(lsn[4..].to_string()),
            ts if humantime::parse_rfc3339_weak(ts).is_ok() => RecoveryTarget::Time(ts.to_string()),
            "random" => RecoveryTarget::Random(None),
            other => match other.strip_prefix("random:").map(crate::duration::parse_duration) {
                Some(Ok(d)) if !d.is_zero() => RecoveryTarget::Random(Some(d)),
                _ => {
                    return Err(cx.err(
                        &key("recovery_target"),
                        Some(v.span()),
                        format!("expected \"latest\", \"immediate\", \"random\", \"random:7d\" (a window), a timestamp like \"2026-11-30T03:00:00Z\" or \"lsn:0/3000028\", got {other:?}"),
                    ));
                }
            },
        },
    };
    let heartbeat = validate_heartbeat(cx, i, t)?;
    // The validate phase's default keeps a run within 4× the RTO (the rule `config check`
    // and `deploy kubernetes` warn by): rto × abort_factor + phase + 10m.
    let rto = cx.duration(&key("rto"), &t.rto)?;
    let four = rto.mul_f64((4.0 - abort_factor).max(0.0));
    let default_phase = four.saturating_sub(Duration::from_secs(600)).max(Duration::from_secs(300));
    let mut validators = validate_validators(cx, i, t, default_phase)?;
    // `point_in_time` runs by default only where it has something to check: a heartbeat
    // table, or replay to a moment.
    // The heartbeat says when each of its rows was written: its `at` is an `as_of`
    // column (rows up to the replayed point compared exactly, none expected after).
    if let Some(h) = &heartbeat
        && !validators.as_of.iter().any(|(s, n, _)| *s == h.schema && *n == h.table)
    {
        validators.as_of.push((h.schema.clone(), h.table.clone(), "at".into()));
    }
    let defaulted = t.validators.as_ref().and_then(|v| v.enabled.as_ref()).is_none();
    if defaulted && heartbeat.is_none() && !recovery_target.is_time() {
        validators.enabled.retain(|v| v != "point_in_time");
    }
    let schedule = match &t.schedule {
        None => None,
        Some(s) => Some(Schedule::parse(&name, s.get_ref()).map_err(|m| cx.err(&key("schedule"), Some(s.span()), m))?),
    };
    let jitter = match &t.jitter {
        None => Duration::ZERO,
        Some(j) => cx.duration(&key("jitter"), j)?,
    };
    let stale_after = t.stale_after.as_ref().map(|s| cx.duration(&key("stale_after"), s)).transpose()?;
    let source = validate_source(cx, i, t, &storage[storage_name])?;
    let select = match &t.select {
        None => Selection::Latest,
        Some(v) => match v.get_ref().as_str() {
            "latest" => Selection::Latest,
            "least-proven" => Selection::LeastProven,
            "random" => Selection::Random(Duration::from_secs(7 * 86400)),
            other => match other.strip_prefix("random:").map(crate::duration::parse_duration) {
                Some(Ok(d)) if !d.is_zero() => Selection::Random(d),
                _ => {
                    return Err(cx.err(
                        &key("select"),
                        Some(v.span()),
                        format!(
                            "expected \"latest\", \"least-proven\", \"random\" or \"random:7d\" (a window), got {other:?}"
                        ),
                    ));
                }
            },
        },
    };
    let prove_within = match &t.prove_within {
        None => Duration::from_secs(30 * 86400),
        Some(p) => cx.duration(&key("prove_within"), p)?,
    };
    let rto_warn_ahead = match &t.rto_warn_ahead {
        None => Duration::from_secs(30 * 86400),
        Some(p) => cx.duration(&key("rto_warn_ahead"), p)?,
    };
    let integrity_schedule = match &t.integrity_schedule {
        None => None,
        Some(s) if source == SourceConfig::Objects => {
            return Err(cx.err(
                &key("integrity_schedule"),
                Some(s.span()),
                "needs a backup tool's repository (source = \"pgbackrest\" or \"barman-cloud\")",
            ));
        }
        Some(s) => Some(
            Schedule::parse(&name, s.get_ref()).map_err(|m| cx.err(&key("integrity_schedule"), Some(s.span()), m))?,
        ),
    };
    let kubernetes = validate_kubernetes(cx, i, t)?;
    let comparisons = match &t.comparisons {
        None => Comparisons::Required,
        Some(v) => match v.get_ref().as_str() {
            "required" => Comparisons::Required,
            "best-effort" => Comparisons::BestEffort,
            other => {
                return Err(cx.err(
                    &key("comparisons"),
                    Some(v.span()),
                    format!("expected \"required\" or \"best-effort\", got {other:?}"),
                ));
            }
        },
    };
    let decrypt = validate_decrypt(cx, i, t)?;
    if let (RecoveryTarget::Random(_), SourceConfig::Objects, None) = (&recovery_target, &source, &t.wal_prefix) {
        let span = t.recovery_target.as_ref().map(|v| v.span());
        return Err(cx.err(
            &key("recovery_target"),
            span,
            "a random point in time needs a WAL archive: set wal_prefix (physical backups), or read a backup \
             tool's repository (source = \"pgbackrest\" or \"barman-cloud\")",
        ));
    }
    let follow = validate_follow(cx, i, t, &source)?;
    let delta_restore = match &t.delta_restore {
        Some(d) if *d.get_ref() && !matches!(source, SourceConfig::Pgbackrest { .. }) => {
            return Err(cx.err(
                &key("delta_restore"),
                Some(d.span()),
                format!(
                    "a delta restore is pgBackRest's (`restore --delta`): this target's source is {}",
                    source.name()
                ),
            ));
        }
        d => d.as_ref().is_some_and(|d| *d.get_ref()),
    };
    let primary_read_budget = match &t.primary_read_budget {
        None => None,
        Some(v) => {
            let n = parse_size(v.get_ref()).map_err(|m| cx.err(&key("primary_read_budget"), Some(v.span()), m))?;
            if n < 1 << 20 {
                return Err(cx.err(
                    &key("primary_read_budget"),
                    Some(v.span()),
                    format!("must be at least 1MiB, got {:?}", v.get_ref()),
                ));
            }
            Some(n)
        }
    };
    let max_undecided = match &t.max_undecided {
        None => 0.01,
        Some(v) => parse_percent(v.get_ref()).map_err(|m| cx.err(&key("max_undecided"), Some(v.span()), m))?,
    };
    Ok(TargetConfig {
        max_undecided,
        other_cluster: t.other_cluster.unwrap_or(false),
        primary_read_budget,
        delta_restore,
        pin: t.pin.unwrap_or(true),
        follow,
        heartbeat,
        decrypt,
        kubernetes,
        comparisons,
        integrity_schedule,
        source,
        select,
        prove_within,
        rto_warn_ahead,
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

/// `[target.decrypt]`: each key present must hold something; an age identity given
/// inline must look like one (a typo is caught here, not at 3 a.m.).
fn validate_decrypt(cx: &Ctx<'_>, i: usize, t: &RawTarget) -> Result<DecryptConfig, ConfigError> {
    let Some(d) = &t.decrypt else { return Ok(DecryptConfig::default()) };
    let key = |k: &str| format!("target[{i}].decrypt.{k}");
    let secret = |name: &str, v: &Option<Spanned<String>>| -> Result<Option<Secret>, ConfigError> {
        let Some(s) = cx.opt_string(&key(name), v)? else { return Ok(None) };
        if s.trim().is_empty() {
            let span = v.as_ref().map(|v| v.span());
            // Usually an environment variable that is set but empty.
            return Err(cx.err(&key(name), span, "is empty (expected a key, a passphrase or a file's path)"));
        }
        Ok(Some(Secret::new(s)))
    };
    let age_identity = secret("age_identity", &d.age_identity)?;
    if let (Some(id), Some(v)) = (&age_identity, &d.age_identity) {
        let s = id.expose().trim();
        // Inline: an identity, or an identity file's text (comments and keys); else a path.
        let inline = s.contains('\n') || s.to_ascii_uppercase().starts_with("AGE-");
        if inline && !s.contains("AGE-SECRET-KEY-1") {
            // The value itself is never echoed.
            return Err(cx.err(
                &key("age_identity"),
                Some(v.span()),
                "expected an age X25519 identity (AGE-SECRET-KEY-1…), an identity file's text, or its path",
            ));
        }
    }
    Ok(DecryptConfig {
        age_identity,
        age_passphrase: secret("age_passphrase", &d.age_passphrase)?,
        gpg_passphrase: secret("gpg_passphrase", &d.gpg_passphrase)?,
        gpg_secret_key: secret("gpg_secret_key", &d.gpg_secret_key)?,
        signed_by: secret("signed_by", &d.signed_by)?,
    })
}

/// `[target.heartbeat]`: `table` as `schema.table` (`public` when bare), `interval` at
/// least a second (default 1m), `url` a secret (a database URL).
fn validate_heartbeat(cx: &Ctx<'_>, i: usize, t: &RawTarget) -> Result<Option<HeartbeatConfig>, ConfigError> {
    let Some(h) = &t.heartbeat else { return Ok(None) };
    let key = |k: &str| format!("target[{i}].heartbeat.{k}");
    let table = h.table.get_ref().trim();
    let (schema, name) = table.split_once('.').unwrap_or(("public", table));
    if schema.is_empty() || name.is_empty() || name.contains('.') {
        return Err(cx.err(
            &key("table"),
            Some(h.table.span()),
            format!("expected \"schema.table\" (e.g. \"drcheck.heartbeat\"), got {table:?}"),
        ));
    }
    let interval = match &h.interval {
        None => Duration::from_secs(60),
        Some(v) => {
            let d = cx.duration(&key("interval"), v)?;
            if d < Duration::from_secs(1) {
                return Err(cx.err(
                    &key("interval"),
                    Some(v.span()),
                    format!("must be at least 1s, got {:?}", v.get_ref()),
                ));
            }
            d
        }
    };
    let url = match cx.opt_string(&key("url"), &h.url)? {
        Some(u) if !(u.starts_with("postgres://") || u.starts_with("postgresql://")) => {
            let span = h.url.as_ref().map(|v| v.span());
            // The URL holds a password: never echoed.
            return Err(cx.err(&key("url"), span, "expected a postgres:// URL"));
        }
        u => u.map(Secret::new),
    };
    Ok(Some(HeartbeatConfig { schema: schema.to_string(), table: name.to_string(), interval, url }))
}

/// `[target.follow]`: `interval` at least 1s (default 1m), `reseed_after` at least an
/// hour (default 7d); objects need a WAL archive (`wal_prefix`), a backup tool's
/// repository has its own.
fn validate_follow(
    cx: &Ctx<'_>,
    i: usize,
    t: &RawTarget,
    source: &SourceConfig,
) -> Result<Option<FollowConfig>, ConfigError> {
    let Some(f) = &t.follow else { return Ok(None) };
    let key = |k: &str| format!("target[{i}].follow.{k}");
    // A backup tool's repository always has its archive; objects need `wal_prefix`.
    if matches!(source, SourceConfig::Objects) && t.wal_prefix.is_none() {
        return Err(cx.err(
            &format!("target[{i}].follow"),
            None,
            "following needs a WAL archive: set wal_prefix (physical base backups), or use source = \
             \"pgbackrest\" / \"barman-cloud\""
                .to_string(),
        ));
    }
    let at_least = |name: &str, v: &Option<Spanned<String>>, default: Duration, min: Duration| {
        let Some(v) = v else { return Ok(default) };
        let d = cx.duration(&key(name), v)?;
        if d < min {
            return Err(cx.err(
                &key(name),
                Some(v.span()),
                format!("must be at least {}, got {:?}", crate::duration::format_duration(min), v.get_ref()),
            ));
        }
        Ok(d)
    };
    let interval = at_least("interval", &f.interval, Duration::from_secs(60), Duration::from_secs(1))?;
    let reseed_after =
        at_least("reseed_after", &f.reseed_after, Duration::from_secs(7 * 86400), Duration::from_secs(3600))?;
    Ok(Some(FollowConfig { interval, reseed_after }))
}

fn validate_kubernetes(cx: &Ctx<'_>, i: usize, t: &RawTarget) -> Result<KubernetesConfig, ConfigError> {
    let key = |k: &str| format!("target[{i}].kubernetes.{k}");
    let Some(k) = &t.kubernetes else { return Ok(KubernetesConfig::default()) };
    let quantity = |name: &str, v: &Option<Spanned<String>>| -> Result<Option<String>, ConfigError> {
        let Some(s) = cx.opt_string(&key(name), v)? else { return Ok(None) };
        if !is_quantity(&s) {
            let span = v.as_ref().map(|v| v.span());
            return Err(cx.err(
                &key(name),
                span,
                format!("expected a Kubernetes quantity like \"500m\", \"4Gi\" or \"2\", got {s:?}"),
            ));
        }
        Ok(Some(s))
    };
    let mut tolerations = Vec::new();
    for (j, tol) in k.tolerations.iter().enumerate() {
        let tk = |f: &str| format!("target[{i}].kubernetes.tolerations[{j}].{f}");
        let operator = tol.operator.as_ref().map(|o| o.get_ref().clone()).unwrap_or_else(|| "Equal".into());
        if !["Equal", "Exists"].contains(&operator.as_str()) {
            return Err(cx.err(
                &tk("operator"),
                tol.operator.as_ref().map(|o| o.span()),
                format!("expected Equal or Exists, got {operator:?}"),
            ));
        }
        if let Some(e) = &tol.effect
            && !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&e.get_ref().as_str())
        {
            return Err(cx.err(
                &tk("effect"),
                Some(e.span()),
                format!("expected NoSchedule, PreferNoSchedule or NoExecute, got {:?}", e.get_ref()),
            ));
        }
        tolerations.push(Toleration {
            key: tol.key.clone(),
            operator,
            value: tol.value.clone(),
            effect: tol.effect.as_ref().map(|e| e.get_ref().clone()),
            toleration_seconds: tol.toleration_seconds,
        });
    }
    Ok(KubernetesConfig {
        scratch: quantity("scratch", &k.scratch)?,
        storage_class: cx.opt_string(&key("storage_class"), &k.storage_class)?,
        cpu_request: quantity("cpu_request", &k.cpu_request)?,
        cpu_limit: quantity("cpu_limit", &k.cpu_limit)?,
        memory_request: quantity("memory_request", &k.memory_request)?,
        memory_limit: quantity("memory_limit", &k.memory_limit)?,
        node_selector: k.node_selector.clone().unwrap_or_default(),
        tolerations,
    })
}

fn validate_validators(
    cx: &Ctx<'_>,
    i: usize,
    t: &RawTarget,
    default_phase: Duration,
) -> Result<ValidatorsConfig, ConfigError> {
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
    let count = |k: &str, f: Option<&Spanned<i64>>, default: u64, max: i64| {
        cx.whole_in(&key(k), f, default as i64, 1, max).map(|n| n as u64)
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
    let mut dump_scope = Vec::new();
    for entry in t.dump_scope.iter().flatten() {
        let e = entry.get_ref();
        let parts: Vec<&str> = e.split('.').collect();
        if e.is_empty() || parts.len() > 2 || parts.iter().any(|p| p.is_empty()) {
            return Err(cx.err(
                &format!("target[{i}].dump_scope"),
                Some(entry.span()),
                format!("expected a schema (\"public\") or a table (\"sales.invoices\"), got {e:?}"),
            ));
        }
        dump_scope.push(e.clone());
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
    let timeout_set = v.and_then(|v| v.timeout.as_ref()).is_some();
    let phase_set = v.and_then(|v| v.phase_timeout.as_ref()).is_some();
    let timeout = dur("timeout", v.and_then(|v| v.timeout.as_ref()), 1800)?;
    // Unset, each validator may take the whole phase, at most 30 minutes.
    let timeout = if timeout_set || phase_set { timeout } else { timeout.min(default_phase) };
    let phase_timeout = match v.and_then(|v| v.phase_timeout.as_ref()) {
        // Unset: the RTO's share (see validate_target), at least the one validator's.
        None if timeout_set => default_phase.max(timeout),
        None => default_phase,
        Some(s) => {
            let d = cx.duration(&key("phase_timeout"), s)?;
            if d < timeout {
                return Err(cx.err(
                    &key("phase_timeout"),
                    Some(s.span()),
                    format!(
                        "{} is shorter than validators.timeout ({}): the phase holds every validator",
                        crate::duration::format_duration(d),
                        crate::duration::format_duration(timeout)
                    ),
                ));
            }
            d
        }
    };
    Ok(ValidatorsConfig {
        enabled,
        timeout,
        phase_timeout,
        phase_timeout_set: phase_set,
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
        as_of_grace: dur("as_of_grace", v.and_then(|v| v.as_of_grace.as_ref()), 300)?,
        checksum_drill_rows: count(
            "checksum_drill_rows",
            v.and_then(|v| v.checksum_drill_rows.as_ref()),
            1_000_000,
            i64::MAX,
        )?,
        stats_settle: dur("stats_settle", v.and_then(|v| v.stats_settle.as_ref()), 120)?,
        exclude: v.and_then(|v| v.exclude.clone()).unwrap_or_default(),
        dump_scope,
        as_of,
        checks,
    })
}

/// `0/3000028`: two hex numbers, the WAL position syntax of `pg_lsn`.
fn is_lsn(s: &str) -> bool {
    let hex = |p: &str| !p.is_empty() && p.len() <= 8 && p.chars().all(|c| c.is_ascii_hexdigit());
    s.split_once('/').is_some_and(|(a, b)| hex(a) && hex(b))
}

/// `source` and the keys that belong to it; keys of another source are errors.
fn validate_source(
    cx: &Ctx<'_>,
    i: usize,
    t: &RawTarget,
    storage: &StorageConfig,
) -> Result<SourceConfig, ConfigError> {
    let key = |k: &str| format!("target[{i}].{k}");
    let kind = t.source.as_ref().map(|s| s.get_ref().as_str()).unwrap_or("objects");
    let span = t.source.as_ref().map(|s| s.span()).or(Some(t.name.span()));
    let own: &[&str] = match kind {
        "objects" => &[],
        "pgbackrest" => &["stanza", "repo_path", "cipher_pass"],
        "barman-cloud" => &["server_name"],
        other => {
            return Err(cx.err(
                &key("source"),
                span,
                format!("expected \"objects\", \"pgbackrest\" or \"barman-cloud\", got {other:?}"),
            ));
        }
    };
    for (k, present) in [
        ("stanza", t.stanza.is_some()),
        ("repo_path", t.repo_path.is_some()),
        ("cipher_pass", t.cipher_pass.is_some()),
        ("server_name", t.server_name.is_some()),
    ] {
        if present && !own.contains(&k) {
            return Err(cx.err(&key(k), span, format!("not a key of source = {kind:?}")));
        }
    }
    if kind != "objects" {
        // pgBackRest reads a posix repository (a filesystem storage: its path is the
        // repository) as well as S3; barman-cloud reads object stores only.
        let fits = matches!(storage, StorageConfig::S3(_))
            || (kind == "pgbackrest" && matches!(storage, StorageConfig::Filesystem { .. }));
        if !fits {
            return Err(cx.err(
                &key("storage"),
                Some(t.storage.span()),
                if kind == "pgbackrest" {
                    format!("source = {kind:?} needs an s3 or a filesystem storage (a posix repository)")
                } else {
                    format!("source = {kind:?} needs an s3 storage")
                },
            ));
        }
        for (k, present) in [("wal_prefix", t.wal_prefix.is_some()), ("format", t.format.is_some())] {
            if present {
                return Err(cx.err(&key(k), span, format!("not a key of source = {kind:?} (the tool's catalog says)")));
            }
        }
    }
    let required = |k: &str, v: &Option<Spanned<String>>| -> Result<String, ConfigError> {
        match v {
            Some(v) if !v.get_ref().trim().is_empty() => cx.string(&key(k), v),
            _ => Err(cx.err(&key(k), span, format!("missing: source = {kind:?} needs {k}"))),
        }
    };
    Ok(match kind {
        "pgbackrest" => SourceConfig::Pgbackrest {
            stanza: required("stanza", &t.stanza)?,
            // On S3 the repository's prefix in the bucket; in a filesystem storage its
            // directory inside the storage's path (default: the path itself).
            repo_path: cx.opt_string(&key("repo_path"), &t.repo_path)?.unwrap_or_else(|| {
                if matches!(storage, StorageConfig::Filesystem { .. }) { "/" } else { "/var/lib/pgbackrest" }.into()
            }),
            cipher_pass: cx.opt_string(&key("cipher_pass"), &t.cipher_pass)?.filter(|p| !p.is_empty()).map(Secret::new),
        },
        "barman-cloud" => SourceConfig::BarmanCloud { server_name: required("server_name", &t.server_name)? },
        _ => SourceConfig::Objects,
    })
}
