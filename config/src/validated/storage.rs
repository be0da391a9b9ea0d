//! `[storage.NAME]`: S3 or a filesystem directory, each with only its own keys.

use super::ctx::{Ctx, parse_size};
use crate::error::ConfigError;
use crate::model::*;
use crate::raw::RawStorage;
use std::path::PathBuf;
use std::time::Duration;

/// `retry_window` when none is set: a nightly run survives two minutes of its store being down.
pub const DEFAULT_RETRY_WINDOW: Duration = Duration::from_secs(120);

pub(super) fn validate_storage(cx: &Ctx<'_>, name: &str, s: &RawStorage) -> Result<StorageConfig, ConfigError> {
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
            reject("kubernetes_claim", s.kubernetes_claim.is_some(), "s3")?;
            reject("kubernetes_read_group", s.kubernetes_read_group.is_some(), "s3")?;
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
                None => 16 << 20,
                Some(v) => parse_size(v.get_ref()).map_err(|m| cx.err(&key("part_size"), Some(v.span()), m))?,
            };
            if part_size < 64 << 10 {
                let span = s.part_size.as_ref().map(|v| v.span());
                return Err(cx.err(&key("part_size"), span, "must be at least 64KiB"));
            }
            let concurrency = cx.whole_in(&key("concurrency"), s.concurrency.as_ref(), 8, 1, 64)? as usize;
            let ca_file = cx.opt_string(&key("ca_file"), &s.ca_file)?.map(PathBuf::from);
            if let (Some(path), Some(span)) = (&ca_file, &s.ca_file)
                && cx.here
                && !path.is_file()
            {
                return Err(cx.err(
                    &key("ca_file"),
                    Some(span.span()),
                    format!("{} is not a readable file (expected a PEM CA certificate)", path.display()),
                ));
            }
            let retry_window = match &s.retry_window {
                None => DEFAULT_RETRY_WINDOW,
                Some(v) => cx.duration(&key("retry_window"), v)?,
            };
            if retry_window > Duration::from_secs(3600) {
                let span = s.retry_window.as_ref().map(|v| v.span());
                return Err(cx.err(
                    &key("retry_window"),
                    span,
                    "must be at most 1h (a run waits this long on a store that is down)",
                ));
            }
            let require_lock = match &s.require_lock {
                None => None,
                Some(v) => Some(match cx.string(&key("require_lock"), v)?.as_str() {
                    "compliance" => LockMode::Compliance,
                    "governance" => LockMode::Governance,
                    other => {
                        return Err(cx.err(
                            &key("require_lock"),
                            Some(v.span()),
                            format!("expected \"compliance\" or \"governance\", got {other:?}"),
                        ));
                    }
                }),
            };
            let retain_until_at_least = match &s.retain_until_at_least {
                None => None,
                Some(v) => Some(cx.duration(&key("retain_until_at_least"), v)?),
            };
            if retain_until_at_least.is_some() && require_lock.is_none() {
                let span = s.retain_until_at_least.as_ref().map(|v| v.span());
                return Err(cx.err(
                    &key("retain_until_at_least"),
                    span,
                    "only with require_lock (the mode the backup's objects must be locked in)",
                ));
            }
            Ok(StorageConfig::S3(S3Storage {
                require_lock,
                retain_until_at_least,
                probe_write: s.probe_write.unwrap_or(false),
                retry_window,
                ca_file,
                verify_tls: s.verify_tls.unwrap_or(true),
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
                ("ca_file", s.ca_file.is_some()),
                ("verify_tls", s.verify_tls.is_some()),
                ("retry_window", s.retry_window.is_some()),
                ("require_lock", s.require_lock.is_some()),
                ("retain_until_at_least", s.retain_until_at_least.is_some()),
                ("probe_write", s.probe_write.is_some()),
            ] {
                reject(k, present, "filesystem")?;
            }
            let path = s.path.as_ref().ok_or_else(|| {
                cx.err(&key("path"), Some(s.kind.span()), "missing: kind = \"filesystem\" needs a path")
            })?;
            let kubernetes_claim = match &s.kubernetes_claim {
                None => None,
                Some(c) => {
                    let v = cx.string(&key("kubernetes_claim"), c)?;
                    let ok = !v.is_empty()
                        && v.len() <= 253
                        && v.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
                        && v.starts_with(|c: char| c.is_ascii_alphanumeric())
                        && v.ends_with(|c: char| c.is_ascii_alphanumeric());
                    if !ok {
                        return Err(cx.err(
                            &key("kubernetes_claim"),
                            Some(c.span()),
                            format!(
                                "{v:?} is not a PersistentVolumeClaim name (lowercase letters, digits, '-' and '.')"
                            ),
                        ));
                    }
                    Some(v)
                }
            };
            let kubernetes_read_group = match &s.kubernetes_read_group {
                None => None,
                Some(g) => match u32::try_from(*g.get_ref()) {
                    Ok(n) if n > 0 => Some(n),
                    _ => {
                        return Err(cx.err(
                            &key("kubernetes_read_group"),
                            Some(g.span()),
                            format!("expected a group id above 0, got {}", g.get_ref()),
                        ));
                    }
                },
            };
            Ok(StorageConfig::Filesystem {
                path: PathBuf::from(cx.string(&key("path"), path)?),
                kubernetes_claim,
                kubernetes_read_group,
            })
        }
        other => {
            Err(cx.err(&key("kind"), Some(s.kind.span()), format!("expected \"s3\" or \"filesystem\", got {other:?}")))
        }
    }
}
