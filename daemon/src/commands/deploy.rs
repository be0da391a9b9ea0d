//! `drcheck deploy kubernetes`: one CronJob per configured target, so a fleet of
//! hundreds of databases needs no hand-copied YAML. Each job runs `drcheck verify
//! --target NAME` under the restricted security context, with `activeDeadlineSeconds`
//! derived from the target's RTO (`rto × abort_factor` plus the validators' time limit),
//! sized and placed by `[target.kubernetes]`: scratch space (an emptyDir, or a generic
//! ephemeral volume of `storage_class`), requests and limits, node selector and
//! tolerations. Scratch not set in the config is derived from the latest backup's size
//! (× `sandbox.expansion_factor` + a quarter, at least 10Gi), else `--scratch-size`.
//!
//! Output: YAML — one stream on stdout, or with `--all --output-dir DIR` one file per
//! target plus a `kustomization.yaml` listing them.

use crate::exit::{CliError, Exit};
use drcheck_config::{Config, TargetConfig};
use serde_json::json;

pub struct Options {
    pub image: String,
    pub secret: String,
    pub config_map: String,
    pub scratch_size: String,
}

/// Scratch derived from a backup of `bytes`: expanded on restore, plus a quarter of
/// headroom, whole GiB, at least 10Gi.
pub fn scratch_for(bytes: u64, expansion_factor: f64) -> String {
    let gib = (bytes as f64 * expansion_factor * 1.25 / (1u64 << 30) as f64).ceil() as u64;
    format!("{}Gi", gib.max(10))
}

/// A Kubernetes object name for a target: lowercase letters, digits and dashes.
pub fn k8s_name(target: &str) -> String {
    let s: String =
        target.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    format!("drcheck-{}", s.trim_matches('-'))
}

/// The CronJob of `t`, with `scratch` (a quantity) for its scratch volume.
pub fn cronjob(t: &TargetConfig, o: &Options, scratch: &str) -> Result<serde_json::Value, String> {
    // The daemon's schedule type says the same instants in Kubernetes' terms (UTC).
    let schedule = match &t.schedule {
        Some(s) => s.to_kubernetes().map_err(|e| format!("target {}: {e}", t.name))?,
        None => "0 3 * * *".to_string(),
    };
    let k = &t.kubernetes;
    let mut requests = serde_json::Map::new();
    requests.insert("cpu".into(), json!(k.cpu_request.as_deref().unwrap_or("500m")));
    requests.insert("memory".into(), json!(k.memory_request.as_deref().unwrap_or("1Gi")));
    let mut limits = serde_json::Map::new();
    if let Some(c) = &k.cpu_limit {
        limits.insert("cpu".into(), json!(c));
    }
    limits.insert("memory".into(), json!(k.memory_limit.as_deref().unwrap_or("4Gi")));
    let scratch_volume = match &k.storage_class {
        // A volume of its own, created with the pod and deleted with it.
        Some(class) => json!({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
            "metadata": {"labels": {"app.kubernetes.io/name": "drcheck"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                     "resources": {"requests": {"storage": scratch}}}
        }}}),
        None => {
            requests.insert("ephemeral-storage".into(), json!(scratch));
            limits.insert("ephemeral-storage".into(), json!(scratch));
            json!({"name": "scratch", "emptyDir": {"sizeLimit": scratch}})
        }
    };
    let deadline = (t.rto.as_secs_f64() * t.abort_factor + t.validators.timeout.as_secs_f64()).ceil() as u64;
    let labels = json!({"app.kubernetes.io/name": "drcheck", "drcheck.io/target": k8s_name(&t.name)});
    let mut job = json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": k8s_name(&t.name), "labels": labels},
        "spec": {
            "schedule": schedule,
            "timeZone": "Etc/UTC",
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 3600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 5,
            "jobTemplate": {"spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": deadline,
                "ttlSecondsAfterFinished": 604800,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "restartPolicy": "Never",
                        "serviceAccountName": "drcheck",
                        "automountServiceAccountToken": false,
                        "securityContext": {
                            "runAsNonRoot": true, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
                            "seccompProfile": {"type": "RuntimeDefault"}
                        },
                        "containers": [{
                            "name": "drcheck",
                            "image": o.image,
                            "args": ["verify", "--target", t.name],
                            "envFrom": [{"secretRef": {"name": o.secret}}],
                            "env": [{"name": "DRCHECK_CONFIG", "value": "/etc/drcheck/drcheck.toml"}],
                            "securityContext": {
                                "allowPrivilegeEscalation": false,
                                "readOnlyRootFilesystem": true,
                                "capabilities": {"drop": ["ALL"]}
                            },
                            "resources": {"requests": requests, "limits": limits},
                            "volumeMounts": [
                                {"name": "config", "mountPath": "/etc/drcheck", "readOnly": true},
                                {"name": "scratch", "mountPath": "/var/tmp/drcheck"},
                                {"name": "tmp", "mountPath": "/tmp"}
                            ]
                        }],
                        "volumes": [
                            {"name": "config", "configMap": {"name": o.config_map}},
                            scratch_volume,
                            {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}
                        ]
                    }
                }
            }}
        }
    });
    let pod = &mut job["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    if !k.node_selector.is_empty() {
        pod["nodeSelector"] = json!(k.node_selector);
    }
    if !k.tolerations.is_empty() {
        pod["tolerations"] = serde_json::to_value(&k.tolerations).map_err(|e| e.to_string())?;
    }
    Ok(job)
}

/// Scratch for each target: the config's, else from its latest backup's size, else
/// `--scratch-size`; with why, for the file's header.
async fn scratch_sizes(config: &Config, targets: &[&TargetConfig], o: &Options) -> Vec<(String, String)> {
    use futures::stream::{self, StreamExt};
    stream::iter(targets.iter().copied())
        .map(|t| async move {
            if let Some(s) = &t.kubernetes.scratch {
                return (s.clone(), "from [target.kubernetes] scratch".to_string());
            }
            let listed =
                tokio::time::timeout(std::time::Duration::from_secs(10), crate::pipeline::list_backups(config, t))
                    .await;
            match listed {
                Ok(Ok((_, backups))) => match backups.first() {
                    Some(b) => (
                        scratch_for(b.size, config.sandbox.expansion_factor),
                        format!("from the latest backup ({} bytes) × {}", b.size, config.sandbox.expansion_factor),
                    ),
                    None => (o.scratch_size.clone(), "--scratch-size (no backup found)".into()),
                },
                Ok(Err(e)) => {
                    crate::errln!(
                        "deploy: {}: sizing scratch with --scratch-size: the store could not be listed: {e}",
                        t.name
                    );
                    (o.scratch_size.clone(), "--scratch-size (the store could not be listed)".into())
                }
                Err(_) => (o.scratch_size.clone(), "--scratch-size (listing the store timed out)".into()),
            }
        })
        .buffered(16)
        .collect()
        .await
}

fn yaml(v: &serde_json::Value) -> Result<String, CliError> {
    serde_saphyr::to_string(v).map_err(|e| CliError::incomplete(anyhow::anyhow!("rendering YAML: {e}")))
}

/// The file name of a target's CronJob in `--output-dir`.
pub fn file_name(t: &TargetConfig) -> String {
    format!("{}.yaml", k8s_name(&t.name))
}

pub async fn run(
    config: &Config,
    target: Option<&str>,
    output_dir: Option<&std::path::Path>,
    o: &Options,
) -> Result<Exit, CliError> {
    let targets = super::select_targets(config, target)?;
    let scratch = scratch_sizes(config, &targets, o).await;
    let header = format!("# generated by `drcheck deploy kubernetes` from {}", config.path.display());
    let mut docs = Vec::new();
    for (t, (size, why)) in targets.iter().zip(&scratch) {
        let job = cronjob(t, o, size).map_err(|e| CliError::usage(anyhow::anyhow!(e)))?;
        docs.push((file_name(t), format!("# {}: scratch {size}, {why}\n{}", t.name, yaml(&job)?)));
    }
    let Some(dir) = output_dir else {
        crate::outln!("{header}");
        for (_, d) in docs {
            crate::outln!("---\n{}", d.trim_end());
        }
        return Ok(Exit::Passed);
    };
    let fail = |e: std::io::Error| CliError::incomplete(anyhow::anyhow!("writing into {}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(fail)?;
    let mut names = Vec::new();
    for (name, doc) in &docs {
        std::fs::write(dir.join(name), format!("{header}\n{doc}")).map_err(fail)?;
        names.push(name.clone());
    }
    let kustomization = json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": names,
    });
    std::fs::write(dir.join("kustomization.yaml"), format!("{header}\n{}", yaml(&kustomization)?)).map_err(fail)?;
    crate::errln!("deploy: {} CronJobs and kustomization.yaml in {}", names.len(), dir.display());
    Ok(Exit::Passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_schedules_fit_kubernetes() {
        assert_eq!(k8s_name("Orders_EU.1"), "drcheck-orders-eu-1");
    }

    #[test]
    fn scratch_follows_the_backup_size() {
        assert_eq!(scratch_for(0, 5.0), "10Gi", "at least 10Gi");
        assert_eq!(scratch_for(20 << 30, 5.0), "125Gi", "20 GiB × 5 × 1.25");
        assert_eq!(scratch_for((3 << 30) + 1, 4.0), "16Gi", "rounded up");
    }
}
