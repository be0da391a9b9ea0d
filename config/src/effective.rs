//! `drcheck config check`'s output: the config as it will run — the file itself, its
//! defaults filled in — in the file's own shape, so that it loads back as a config that
//! means the same. Secrets stay what the file says: a `${VAR}` reference is printed as
//! the reference (it reveals nothing); a secret written literally is printed `***`.

use crate::duration::format_duration;
use crate::error::ConfigError;
use crate::model::{Config, StorageConfig};
use std::path::Path;
use toml::Value;

/// How much of a literal secret is hidden.
#[derive(Clone, Copy)]
enum Hide {
    /// All of it (a token, a passphrase, a key).
    Whole,
    /// A URL's password (a database URL).
    Password,
    /// A URL's user and password (an endpoint, a webhook).
    Userinfo,
}

/// The effective config of `text` (already validated as `config`).
pub fn render(text: &str, path: &Path, config: &Config) -> Result<String, ConfigError> {
    let mut doc: toml::Table =
        toml::from_str(text).map_err(|e| ConfigError::Parse { path: path.to_path_buf(), message: e.to_string() })?;
    let table = |doc: &mut toml::Table, name: &str| -> toml::Table {
        match doc.remove(name) {
            Some(Value::Table(t)) => t,
            _ => toml::Table::new(),
        }
    };
    let default = |t: &mut toml::Table, key: &str, v: Value| {
        t.entry(key.to_string()).or_insert(v);
    };
    let s = |v: &str| Value::String(v.to_string());

    let mut state = table(&mut doc, "state");
    hide(&mut state, "url", Hide::Password);
    default(&mut state, "url", s(config.state.url.expose()));
    default(&mut state, "keep_runs", Value::Integer(i64::from(config.state.keep_runs)));
    doc.insert("state".into(), Value::Table(state));

    let mut sandbox = table(&mut doc, "sandbox");
    let sb = &config.sandbox;
    default(&mut sandbox, "scratch_dir", s(&sb.scratch_dir.display().to_string()));
    default(&mut sandbox, "profile", s(sb.profile.as_str()));
    default(&mut sandbox, "expansion_factor", Value::Float(sb.expansion_factor));
    default(&mut sandbox, "require_containment", Value::Boolean(sb.require_containment));
    default(&mut sandbox, "max_expansion", Value::Float(sb.max_expansion));
    default(&mut sandbox, "user", s(&sb.user));
    default(&mut sandbox, "memory_limit", s(&size(sb.memory_limit)));
    doc.insert("sandbox".into(), Value::Table(sandbox));

    if let Some(Value::Table(storage)) = doc.get_mut("storage") {
        for (name, st) in storage.iter_mut() {
            let (Some(Value::Table(st)), Some(StorageConfig::S3(s3))) = (Some(st), config.storage.get(name)) else {
                continue;
            };
            hide(st, "endpoint", Hide::Userinfo);
            default(st, "region", s(&s3.region));
            default(st, "path_style", Value::Boolean(s3.path_style));
            default(st, "part_size", s(&size(s3.part_size)));
            default(st, "concurrency", Value::Integer(s3.concurrency as i64));
            default(st, "verify_tls", Value::Boolean(s3.verify_tls));
            default(st, "retry_window", s(&format_duration(s3.retry_window)));
            default(st, "probe_write", Value::Boolean(s3.probe_write));
        }
    }

    if let Some(Value::Table(m)) = doc.get_mut("metrics") {
        hide(m, "pushgateway", Hide::Userinfo);
    }
    if let Some(Value::Table(api)) = doc.get_mut("api") {
        hide(api, "token", Hide::Whole);
    }
    if let Some(Value::Array(alerts)) = doc.get_mut("alert") {
        for a in alerts.iter_mut().filter_map(Value::as_table_mut) {
            hide(a, "secret", Hide::Whole);
            hide(a, "url", Hide::Userinfo);
        }
    }
    if let Some(Value::Table(e)) = doc.get_mut("evidence") {
        hide(e, "signing_key", Hide::Whole);
    }

    if let Some(Value::Array(targets)) = doc.get_mut("target") {
        for (t, tc) in targets.iter_mut().filter_map(Value::as_table_mut).zip(&config.targets) {
            hide(t, "primary", Hide::Password);
            hide(t, "cipher_pass", Hide::Whole);
            if let Some(Value::Table(h)) = t.get_mut("heartbeat") {
                hide(h, "url", Hide::Password);
                if let Some(hb) = &tc.heartbeat {
                    default(h, "interval", s(&format_duration(hb.interval)));
                }
            }
            if let Some(Value::Table(d)) = t.get_mut("decrypt") {
                for k in ["age_identity", "age_passphrase", "gpg_passphrase", "gpg_secret_key", "signed_by"] {
                    hide(d, k, Hide::Whole);
                }
            }
            default(t, "row_count_tolerance", s(&format!("{}%", tc.row_count_tolerance * 100.0)));
            default(t, "abort_factor", Value::Float(tc.abort_factor));
            default(t, "restore_jobs", Value::Integer(i64::from(tc.restore_jobs)));
            if !tc.jitter.is_zero() {
                default(t, "jitter", s(&format_duration(tc.jitter)));
            }
            default(t, "prove_within", s(&format_duration(tc.prove_within)));
            default(t, "rto_warn_ahead", s(&format_duration(tc.rto_warn_ahead)));
            default(t, "max_undecided", s(&format!("{}%", tc.max_undecided * 100.0)));
            default(t, "pin", Value::Boolean(tc.pin));
            if !t.contains_key("recovery_target") && tc.recovery_target == crate::model::RecoveryTarget::Latest {
                t.insert("recovery_target".into(), s("latest"));
            }
            if !t.contains_key("select") && tc.select == crate::model::Selection::Latest {
                t.insert("select".into(), s("latest"));
            }
            let objects = tc.source == crate::model::SourceConfig::Objects;
            if objects && !t.contains_key("format") && tc.format == crate::model::FormatSetting::Auto {
                t.insert("format".into(), s("auto"));
            }
            if !t.contains_key("comparisons") && tc.comparisons == crate::model::Comparisons::Required {
                t.insert("comparisons".into(), s("required"));
            }
            let mut v = match t.remove("validators") {
                Some(Value::Table(v)) => v,
                _ => toml::Table::new(),
            };
            let vc = &tc.validators;
            default(&mut v, "enabled", Value::Array(vc.enabled.iter().map(|e| s(e)).collect()));
            default(&mut v, "timeout", s(&format_duration(vc.timeout)));
            default(&mut v, "phase_timeout", s(&format_duration(vc.phase_timeout)));
            default(&mut v, "statement_timeout", s(&format_duration(vc.statement_timeout)));
            default(&mut v, "primary_concurrency", Value::Integer(i64::from(vc.primary_concurrency)));
            default(&mut v, "checksum_chunk_rows", Value::Integer(vc.checksum_chunk_rows as i64));
            default(&mut v, "checksum_sample_rows", Value::Integer(vc.checksum_sample_rows as i64));
            default(&mut v, "as_of_grace", s(&format_duration(vc.as_of_grace)));
            default(&mut v, "checksum_drill_rows", Value::Integer(vc.checksum_drill_rows as i64));
            default(&mut v, "stats_settle", s(&format_duration(vc.stats_settle)));
            t.insert("validators".into(), Value::Table(v));
        }
    }
    let body = toml::to_string_pretty(&doc).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: format!("cannot render the effective config: {e}"),
    })?;
    Ok(body)
}

/// A secret as the file wrote it: a `${VAR}` reference stays (it reveals nothing); a
/// literal is hidden — whole (`whole`), or only a URL's password and userinfo.
fn hide(t: &mut toml::Table, key: &str, how: Hide) {
    let Some(Value::String(v)) = t.get_mut(key) else { return };
    let reference = v.starts_with("${") && v.ends_with('}') && v.matches("${").count() == 1;
    *v = match how {
        Hide::Whole if reference => return,
        Hide::Whole => "***".to_string(),
        Hide::Password if !has_literal_password(v) => return,
        Hide::Password => crate::secret::redact_url(v),
        Hide::Userinfo if !v.contains('@') || v.contains("${") && !has_literal_password(v) => return,
        Hide::Userinfo => crate::secret::redact_userinfo(v),
    };
}

/// A URL whose password is written out (not a `${VAR}`).
fn has_literal_password(v: &str) -> bool {
    let Some(rest) = v.split_once("://").map(|(_, r)| r) else { return false };
    let Some(userinfo) = rest.split('/').next().and_then(|a| a.rsplit_once('@')).map(|(u, _)| u) else {
        return false;
    };
    userinfo.split_once(':').is_some_and(|(_, pw)| !(pw.starts_with("${") && pw.ends_with('}')))
}

/// `16777216` → `"16MiB"`: the largest unit that divides it.
fn size(n: u64) -> String {
    for (unit, m) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= m && n.is_multiple_of(m) {
            return format!("{}{unit}", n / m);
        }
    }
    n.to_string()
}
