//! Raw config → validated config, in one step, with errors that name the key and line.
//! The types are `model`'s; this is the top-level step, `ctx` holds the shared checks,
//! `storage` and `target` the checks of their sections.

mod ctx;
mod storage;
mod target;

use ctx::Ctx;
use storage::validate_storage;
use target::validate_target;

use crate::error::ConfigError;
use crate::model::*;
use crate::raw::RawConfig;
use crate::schedule::Schedule;
use crate::secret::Secret;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) fn validate(
    raw: RawConfig,
    text: &str,
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    here: bool,
) -> Result<Config, ConfigError> {
    let cx = Ctx { path, text, env, here };

    let mut url = cx.opt_string("state.url", &raw.state.url)?.unwrap_or_else(|| DEFAULT_STATE_URL.to_string());
    // Read for somewhere else (`deploy kubernetes` on an operator's laptop): a URL that
    // is all one variable only the pod's Secret holds is the pod's PostgreSQL store.
    if !cx.here
        && let Some(name) = url.strip_prefix("unset-")
        && raw.state.url.as_ref().is_some_and(|v| v.get_ref().trim() == format!("${{{name}}}"))
    {
        url = format!("postgres://unset-{name}");
    }
    if !(url.starts_with("sqlite:") || url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        let span = raw.state.url.as_ref().map(|v| v.span());
        return Err(cx.err("state.url", span, "expected a `sqlite://PATH` or `postgres://…` URL"));
    }

    let scratch_dir = cx
        .opt_string("sandbox.scratch_dir", &raw.sandbox.scratch_dir)?
        .map(PathBuf::from)
        .unwrap_or_else(default_scratch_dir);
    let pg_bindir = cx.opt_string("sandbox.pg_bindir", &raw.sandbox.pg_bindir)?.map(PathBuf::from);
    let mut pg_bindirs = BTreeMap::new();
    for (major, dir) in raw.sandbox.pg_bindirs.iter().flatten() {
        let key = format!("sandbox.pg_bindirs.{major}");
        let m: u32 = match major.parse() {
            Ok(m) if (10..=99).contains(&m) => m,
            _ => {
                return Err(cx.err(
                    &key,
                    Some(dir.span()),
                    format!("expected a PostgreSQL major version (10 to 99) as the key, got {major:?}"),
                ));
            }
        };
        let path = PathBuf::from(cx.string(&key, dir)?);
        if !path.is_absolute() {
            return Err(cx.err(&key, Some(dir.span()), format!("expected an absolute path, got {:?}", dir.get_ref())));
        }
        pg_bindirs.insert(m, path);
    }
    let state_dir = cx
        .opt_string("sandbox.state_dir", &raw.sandbox.state_dir)?
        .map(PathBuf::from)
        .unwrap_or_else(|| scratch_dir.clone());
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
    let expansion_factor =
        cx.number_at_least("sandbox.expansion_factor", raw.sandbox.expansion_factor.as_ref(), 5.0, 0.0)?;
    let require_containment = raw.sandbox.require_containment.unwrap_or(true);
    let max_expansion = cx.number_at_least("sandbox.max_expansion", raw.sandbox.max_expansion.as_ref(), 200.0, 1.0)?;
    let sandbox_user = cx.opt_string("sandbox.user", &raw.sandbox.user)?.unwrap_or_else(|| "drcheck-sandbox".into());
    let memory_limit = match &raw.sandbox.memory_limit {
        None => DEFAULT_SANDBOX_MEMORY,
        Some(v) => {
            let n = ctx::parse_size(v.get_ref()).map_err(|m| cx.err("sandbox.memory_limit", Some(v.span()), m))?;
            if n < 512 << 20 {
                return Err(cx.err(
                    "sandbox.memory_limit",
                    Some(v.span()),
                    format!("{:?} is too little for a PostgreSQL server: at least 512MiB", v.get_ref()),
                ));
            }
            n
        }
    };
    if sandbox_user.is_empty() || sandbox_user == "root" || sandbox_user == "postgres" {
        let span = raw.sandbox.user.as_ref().map(|v| v.span());
        return Err(cx.err(
            "sandbox.user",
            span,
            format!("{sandbox_user:?} cannot run restored backups: name a user that owns nothing else (default drcheck-sandbox)"),
        ));
    }

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

    let keep_runs = cx.whole_in("state.keep_runs", raw.state.keep_runs.as_ref(), 1000, 1, 10_000_000)? as u32;
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
        max_concurrent_restores: cx.whole_in(
            "daemon.max_concurrent_restores",
            raw.daemon.max_concurrent_restores.as_ref(),
            1,
            1,
            64,
        )? as usize,
        alert_resend_interval: match &raw.daemon.alert_resend_interval {
            None => Duration::from_secs(3600),
            Some(v) => {
                let d = cx.duration("daemon.alert_resend_interval", v)?;
                if d.is_zero() || d > Duration::from_secs(24 * 3600) {
                    return Err(cx.err(
                        "daemon.alert_resend_interval",
                        Some(v.span()),
                        "must be more than 0 and at most 24h (firing alerts are sent with an endsAt 48h ahead)",
                    ));
                }
                d
            }
        },
        canary: match &raw.daemon.canary {
            None => None,
            Some(s) => {
                Some(Schedule::parse("canary", s.get_ref()).map_err(|m| cx.err("daemon.canary", Some(s.span()), m))?)
            }
        },
        canary_alert_within: match &raw.daemon.canary_alert_within {
            None => Duration::from_secs(120),
            Some(v) => {
                let d = cx.duration("daemon.canary_alert_within", v)?;
                if d.is_zero() || d > Duration::from_secs(3600) {
                    return Err(cx.err(
                        "daemon.canary_alert_within",
                        Some(v.span()),
                        "must be more than 0 and at most 1h",
                    ));
                }
                d
            }
        },
        journal_interval: match &raw.daemon.journal_interval {
            None => Duration::from_secs(60),
            Some(v) => {
                let d = cx.duration("daemon.journal_interval", v)?;
                if d > Duration::from_secs(3600) {
                    return Err(cx.err(
                        "daemon.journal_interval",
                        Some(v.span()),
                        "must be at most 1h (0s turns the journal's samples off)",
                    ));
                }
                d
            }
        },
    };
    let signing_key = cx.opt_string("evidence.signing_key", &raw.evidence.signing_key)?;
    if let (Some(k), Some(span)) = (&signing_key, &raw.evidence.signing_key)
        && !k.trim_start().starts_with("-----BEGIN")
        && cx.here
        && !std::path::Path::new(k).is_file()
    {
        return Err(cx.err(
            "evidence.signing_key",
            Some(span.span()),
            format!("{k:?} is neither a PEM key nor a file that exists"),
        ));
    }
    let controls_file = cx.opt_string("evidence.controls_file", &raw.evidence.controls_file)?.map(PathBuf::from);
    let file_span = raw.evidence.controls_file.as_ref().map(|v| v.span());
    let mapping = match &controls_file {
        // Read where the config is used (a manifest describes another machine).
        Some(path) if cx.here => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                cx.err("evidence.controls_file", file_span.clone(), format!("cannot read {}: {e}", path.display()))
            })?;
            crate::controls::parse(&text, &path.display().to_string())
                .map_err(|m| cx.err("evidence.controls_file", file_span.clone(), m))?
        }
        Some(_) => crate::controls::Mapping::new(),
        None => crate::controls::parse(crate::controls::DEFAULT, "deploy/controls.toml")
            .map_err(|m| cx.err("evidence.controls", None, m))?,
    };
    let controls = raw.evidence.controls.as_ref().map(|v| v.get_ref().clone()).unwrap_or_default();
    if let Some(unknown) = controls.iter().find(|c| !mapping.is_empty() && !mapping.contains_key(*c)) {
        let known: Vec<&str> = mapping.keys().map(String::as_str).collect();
        return Err(cx.err(
            "evidence.controls",
            raw.evidence.controls.as_ref().map(|v| v.span()),
            format!("unknown framework {unknown:?} (known: {})", known.join(", ")),
        ));
    }
    let evidence = EvidenceConfig { signing_key: signing_key.map(Secret::new), controls, controls_file, mapping };
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
            max_attempts: cx.whole_in(&key("max_attempts"), a.max_attempts.as_ref(), 8, 1, 1000)? as u32,
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
        evidence,
        alerts,
        path: path.to_path_buf(),
        state: StateConfig { url: Secret::new(url), keep_runs },
        sandbox: SandboxConfig {
            scratch_dir,
            pg_bindir,
            pg_bindirs,
            scratch_dir_set: raw.sandbox.scratch_dir.is_some(),
            profile,
            expansion_factor,
            require_containment,
            user: sandbox_user,
            max_expansion,
            memory_limit,
            state_dir,
        },
        storage,
        targets,
    })
}

#[cfg(test)]
mod tests;
