//! `drcheck storage check`: what the configured credentials may do to a target's
//! backups, and how the bucket protects them. A verifier only reads: credentials that
//! can delete or overwrite backups are a weapon left lying next to them.

use crate::exit::{CliError, Exit};
use clap::Subcommand;
use drcheck_config::{Config, StorageConfig, TargetConfig};

#[derive(Debug, Subcommand)]
pub(crate) enum StorageCommand {
    /// What the target's store credentials may do (list, and — with `[storage]
    /// probe_write = true` only — delete and put, tried on a key of drcheck's own) and
    /// how the bucket protects the backups (versioning, Object Lock). Exits 0 (warnings
    /// included), 3 when the store cannot be listed.
    Check {
        /// Only this target (default: every target).
        #[arg(long)]
        target: Option<String>,
        /// Print JSON (`{"targets": [...]}`).
        #[arg(long)]
        json: bool,
    },
}

/// The least-privilege policy for drcheck's credentials on `bucket`, for AWS: list and
/// read, the bucket's and objects' protection read — nothing that writes.
pub(crate) fn read_only_policy(bucket: &str) -> serde_json::Value {
    serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DrcheckListAndProtection",
                "Effect": "Allow",
                "Action": ["s3:ListBucket", "s3:GetBucketVersioning", "s3:GetBucketObjectLockConfiguration"],
                "Resource": format!("arn:aws:s3:::{bucket}")
            },
            {
                "Sid": "DrcheckRead",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:GetObjectVersion", "s3:GetObjectRetention", "s3:GetObjectLegalHold"],
                "Resource": format!("arn:aws:s3:::{bucket}/*")
            }
        ]
    })
}

pub(crate) async fn check(config: &Config, target: Option<&str>, json: bool) -> Result<Exit, CliError> {
    let targets = super::select_targets(config, target)?;
    let mut out = Vec::new();
    for t in targets {
        out.push(check_one(config, t).await?);
    }
    if json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"targets": out})).map_err(CliError::incomplete)?
        );
        return Ok(Exit::Passed);
    }
    for v in &out {
        crate::outln!(
            "{} — {}",
            crate::out::shown(v["target"].as_str().unwrap_or("")),
            v["store"].as_str().unwrap_or("")
        );
        crate::outln!("  list:       allowed ({} objects under {})", v["listed"], v["prefix"]);
        crate::outln!("  protection: {}", v["protection"].as_str().unwrap_or("none (a directory)"));
        match &v["write"] {
            serde_json::Value::Null => crate::outln!(
                "  write:      not probed (set [storage.{}] probe_write = true to try a delete and a put)",
                v["storage"].as_str().unwrap_or("")
            ),
            w => {
                let said = |k: &str| if w[k] == true { "ALLOWED" } else { "refused" };
                crate::outln!("  delete:     {}", said("delete_allowed"));
                crate::outln!("  put:        {}", said("put_allowed"));
                if let Some(k) = w["left_behind"].as_str() {
                    crate::outln!("  note:       the probe's empty object {k} could not be removed (locked?)");
                }
            }
        }
        for warning in v["warnings"].as_array().into_iter().flatten() {
            crate::outln!("  warning:    {}", warning.as_str().unwrap_or(""));
        }
        if !v["policy"].is_null() {
            crate::outln!(
                "  apply a read-only policy to these credentials (AWS IAM):\n{}",
                serde_json::to_string_pretty(&v["policy"]).unwrap_or_default()
            );
        }
    }
    Ok(Exit::Passed)
}

async fn check_one(config: &Config, t: &TargetConfig) -> Result<serde_json::Value, CliError> {
    let storage = &config.storage[&t.storage];
    let store = drcheck_restore::open_store(&t.storage, storage).await;
    let listed = store.list(&t.prefix).await.map_err(|e| {
        CliError::incomplete(anyhow::Error::new(e).context(format!("listing {:?} for target {}", t.prefix, t.name)))
    })?;
    let protection = match store.protection().await {
        Ok(Some(p)) => Some(p.describe(None)),
        Ok(None) => None,
        Err(e) => Some(format!("cannot be read: {e}")),
    };
    let mut warnings: Vec<String> = Vec::new();
    let mut policy = serde_json::Value::Null;
    let write = match storage {
        StorageConfig::S3(s3) if s3.probe_write => {
            // A key of drcheck's own, hidden from backup listings (a leading dot).
            let key = format!("{}.drcheck-probe/{}", t.prefix, crate::ids::new_run_id());
            match store.probe_write(&key).await {
                Ok(Some(p)) => {
                    if p.delete_allowed {
                        warnings.push(
                            "these credentials may DELETE objects: whoever holds them can destroy the backups".into(),
                        );
                    }
                    if p.put_allowed {
                        warnings.push(
                            "these credentials may PUT objects: whoever holds them can replace the backups".into(),
                        );
                    }
                    if p.delete_allowed || p.put_allowed {
                        policy = read_only_policy(&s3.bucket);
                    }
                    serde_json::json!({
                        "delete_allowed": p.delete_allowed, "put_allowed": p.put_allowed, "left_behind": p.left_behind,
                    })
                }
                Ok(None) => serde_json::Value::Null,
                Err(e) => {
                    warnings.push(format!("the write probe could not finish: {e}"));
                    serde_json::Value::Null
                }
            }
        }
        _ => serde_json::Value::Null,
    };
    if let StorageConfig::S3(s3) = storage
        && s3.require_lock.is_none()
    {
        warnings.push(format!(
            "no lock is required of the backups: set [storage.{}] require_lock (and retain_until_at_least) to fail a run whose backup could be deleted",
            t.storage
        ));
    }
    Ok(serde_json::json!({
        "target": t.name,
        "storage": t.storage,
        "store": store.describe(),
        "prefix": t.prefix,
        "listed": listed.len(),
        "protection": protection,
        "write": write,
        "warnings": warnings,
        "policy": policy,
    }))
}
