//! `drcheck deploy kubernetes`: one CronJob per configured target, so a fleet of
//! hundreds of databases needs no hand-copied YAML. Each job runs `drcheck verify
//! --target NAME` under the restricted security context, with `activeDeadlineSeconds`
//! derived from the target's RTO (`rto × abort_factor` plus the validators' time limit).
//! The output is a multi-document YAML stream (each document in JSON form, which is YAML).

use crate::exit::{CliError, Exit};
use drcheck_config::{Config, TargetConfig};
use serde_json::json;

pub struct Options {
    pub image: String,
    pub secret: String,
    pub config_map: String,
    pub scratch_size: String,
}

/// A Kubernetes object name for a target: lowercase letters, digits and dashes.
pub fn k8s_name(target: &str) -> String {
    let s: String =
        target.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    format!("drcheck-{}", s.trim_matches('-'))
}

/// A 6-field schedule (seconds first) as Kubernetes' 5-field one.
fn five_fields(schedule: &str) -> Result<String, String> {
    if schedule.starts_with('@') {
        return Ok(schedule.to_string());
    }
    let fields: Vec<&str> = schedule.split_whitespace().collect();
    match fields.as_slice() {
        ["0", rest @ ..] if rest.len() == 5 => Ok(rest.join(" ")),
        _ => Err(format!("schedule {schedule:?} has seconds or a year, which a CronJob cannot express")),
    }
}

pub fn cronjob(t: &TargetConfig, o: &Options) -> Result<serde_json::Value, String> {
    let schedule =
        five_fields(t.schedule.as_deref().unwrap_or("0 0 3 * * *")).map_err(|e| format!("target {}: {e}", t.name))?;
    let deadline = (t.rto.as_secs_f64() * t.abort_factor + t.validators.timeout.as_secs_f64()).ceil() as u64;
    let labels = json!({"app.kubernetes.io/name": "drcheck", "drcheck.io/target": k8s_name(&t.name)});
    Ok(json!({
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
                            "resources": {
                                "requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": o.scratch_size},
                                "limits": {"memory": "4Gi", "ephemeral-storage": o.scratch_size}
                            },
                            "volumeMounts": [
                                {"name": "config", "mountPath": "/etc/drcheck", "readOnly": true},
                                {"name": "scratch", "mountPath": "/var/tmp/drcheck"},
                                {"name": "tmp", "mountPath": "/tmp"}
                            ]
                        }],
                        "volumes": [
                            {"name": "config", "configMap": {"name": o.config_map}},
                            {"name": "scratch", "emptyDir": {"sizeLimit": o.scratch_size}},
                            {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}
                        ]
                    }
                }
            }}
        }
    }))
}

pub fn run(config: &Config, target: Option<&str>, o: &Options) -> Result<Exit, CliError> {
    let targets = super::select_targets(config, target)?;
    let mut docs = Vec::new();
    for t in targets {
        let job = cronjob(t, o).map_err(|e| CliError::usage(anyhow::anyhow!(e)))?;
        docs.push(serde_json::to_string_pretty(&job).map_err(CliError::incomplete)?);
    }
    crate::outln!("# generated by `drcheck deploy kubernetes` from {}", config.path.display());
    for d in docs {
        crate::outln!("---\n{d}");
    }
    Ok(Exit::Passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_schedules_fit_kubernetes() {
        assert_eq!(k8s_name("Orders_EU.1"), "drcheck-orders-eu-1");
        assert_eq!(five_fields("0 30 2 * * *").unwrap(), "30 2 * * *");
        assert_eq!(five_fields("@daily").unwrap(), "@daily");
        assert!(five_fields("15 30 2 * * *").is_err());
    }
}
