//! `drcheck deploy kubernetes`: one CronJob per configured target, so a fleet of
//! hundreds of databases needs no hand-copied YAML. Each job runs `drcheck verify
//! --target NAME` under the restricted security context, with `activeDeadlineSeconds`
//! derived from the target's RTO (`rto × abort_factor` plus `validators.phase_timeout`),
//! sized and placed by `[target.kubernetes]`: scratch space (an emptyDir, or a generic
//! ephemeral volume of `storage_class`), requests and limits, node selector and
//! tolerations. Scratch not set in the config is derived from the latest backup's size
//! (× `sandbox.expansion_factor` + a quarter, at least 10Gi), else `--scratch-size`.
//!
//! Output: YAML — one stream on stdout, or with `--all --output-dir DIR` one file per
//! target plus a `kustomization.yaml` listing them.

use crate::exit::{CliError, Exit};
use clap::Subcommand;
use drcheck_config::{Config, TargetConfig};
use serde_json::json;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub(crate) enum DeployCommand {
    /// One CronJob per target (or --target), as YAML on stdout.
    Kubernetes {
        /// Only this target's CronJob (default: every target, as one YAML stream).
        #[arg(long, conflicts_with = "all")]
        target: Option<String>,
        /// Every target, one file each plus a kustomization.yaml, into --output-dir.
        #[arg(long, requires = "output_dir")]
        all: bool,
        /// Where --all writes its files.
        #[arg(long)]
        output_dir: Option<PathBuf>,
        /// The drcheck image the CronJobs run (required: a tag you built and pushed,
        /// e.g. registry.example.com/drcheck:0.1.0).
        #[arg(long)]
        image: String,
        /// The Secret holding the environment (${VAR}s of the config, AWS credentials).
        #[arg(long, default_value = "drcheck-secrets")]
        secret: String,
        /// Each CronJob also reads a Secret of its own, named like the CronJob
        /// (drcheck-TARGET): put each target's credentials there and only what all share
        /// in --secret, so no pod holds another target's password.
        #[arg(long)]
        secret_per_target: bool,
        /// The ConfigMap holding drcheck.toml.
        #[arg(long, default_value = "drcheck-config")]
        config_map: String,
        /// Scratch size where [target.kubernetes] scratch is not set and no backup can
        /// be listed to size it from.
        #[arg(long, default_value = "50Gi")]
        scratch_size: String,
    },
}

pub(crate) struct Options {
    pub image: String,
    pub secret: String,
    /// Each CronJob also reads the Secret named like it (`drcheck-TARGET`).
    pub secret_per_target: bool,
    pub config_map: String,
    pub scratch_size: String,
    /// Filesystem storages by name: mounted in the pods from their claims.
    pub stores: std::collections::BTreeMap<String, StoreMount>,
}

/// A filesystem storage in the pods: its PersistentVolumeClaim, mounted read-only at the
/// storage's path, and the group that may read it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoreMount {
    pub claim: String,
    pub path: std::path::PathBuf,
    pub group: Option<u32>,
}

/// The filesystem storages of `config` that name a claim.
pub(crate) fn store_mounts(config: &Config) -> std::collections::BTreeMap<String, StoreMount> {
    config
        .storage
        .iter()
        .filter_map(|(name, s)| match s {
            drcheck_config::StorageConfig::Filesystem {
                path,
                kubernetes_claim: Some(claim),
                kubernetes_read_group,
            } => Some((
                name.clone(),
                StoreMount { claim: claim.clone(), path: path.clone(), group: *kubernetes_read_group },
            )),
            _ => None,
        })
        .collect()
}

/// Scratch derived from a backup of `bytes`: expanded on restore, plus a quarter of
/// headroom, whole GiB, at least 10Gi.
pub(crate) fn scratch_for(bytes: u64, expansion_factor: f64) -> String {
    let gib = (bytes as f64 * expansion_factor * 1.25 / (1u64 << 30) as f64).ceil() as u64;
    format!("{}Gi", gib.max(10))
}

/// The longest CronJob name Kubernetes takes (its Jobs get an 11-character suffix).
pub(crate) const MAX_CRONJOB_NAME: usize = 52;

/// A Kubernetes object name (and label value) for a target: lowercase letters, digits
/// and dashes, at most [`MAX_CRONJOB_NAME`] characters; a longer one keeps its start
/// and ends in a short stable hash of the whole name, so two long names stay apart.
pub(crate) fn k8s_name(target: &str) -> String {
    let s: String =
        target.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    let mut collapsed = String::with_capacity(s.len());
    for c in s.chars() {
        if !(c == '-' && collapsed.ends_with('-')) {
            collapsed.push(c);
        }
    }
    let name = format!("drcheck-{}", collapsed.trim_matches('-'));
    if name.len() <= MAX_CRONJOB_NAME {
        return name.trim_end_matches('-').to_string();
    }
    let hash = fnv1a(target.as_bytes());
    let keep = MAX_CRONJOB_NAME - 9;
    format!("{}-{:08x}", name[..keep].trim_end_matches('-'), hash as u32)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

/// Targets whose names become the same Kubernetes name: each pair named.
pub(crate) fn collisions<'a>(targets: &[&'a TargetConfig]) -> Vec<(&'a str, &'a str, String)> {
    let mut seen: std::collections::BTreeMap<String, &str> = std::collections::BTreeMap::new();
    let mut out = Vec::new();
    for t in targets {
        let k = k8s_name(&t.name);
        match seen.get(&k) {
            Some(first) => out.push((*first, t.name.as_str(), k)),
            None => {
                seen.insert(k, &t.name);
            }
        }
    }
    out
}

/// A schedule a Kubernetes CronJob cannot keep, and whose it is.
#[derive(Debug, thiserror::Error)]
#[error("{whose}: {why}")]
pub(crate) struct NotForKubernetes {
    whose: String,
    why: drcheck_config::ValueError,
}

/// The CronJob of `t`, with `scratch` (a quantity) for its scratch volume.
pub(crate) fn cronjob(t: &TargetConfig, o: &Options, scratch: &str) -> Result<serde_json::Value, NotForKubernetes> {
    // The daemon's schedule type says the same instants in Kubernetes' terms (UTC).
    let schedule = match &t.schedule {
        Some(s) => s.to_kubernetes().map_err(|why| NotForKubernetes { whose: format!("target {}", t.name), why })?,
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
    // The same budget the run's lease gets: Kubernetes never kills a run its lease allows.
    let deadline = crate::verify::run_budget(t).as_secs();
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
                            "envFrom": env_from(t, o),
                            "env": [
                                {"name": "DRCHECK_CONFIG", "value": "/etc/drcheck/drcheck.toml"},
                                {"name": "DRCHECK_SCRATCH_DIR", "value": POD_SCRATCH_DIR}
                            ],
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
    // A directory store (a posix repository): its volume, read-only, where the config says.
    if let Some(m) = o.stores.get(&t.storage) {
        if let Some(v) = pod["volumes"].as_array_mut() {
            v.push(json!({"name": "store", "persistentVolumeClaim": {"claimName": m.claim, "readOnly": true}}));
        }
        if let Some(v) = pod["containers"][0]["volumeMounts"].as_array_mut() {
            v.push(json!({"name": "store", "mountPath": m.path, "readOnly": true}));
        }
        if let Some(g) = m.group {
            pod["securityContext"]["supplementalGroups"] = json!([g]);
        }
    }
    if !k.node_selector.is_empty() {
        pod["nodeSelector"] = json!(k.node_selector);
    }
    if !k.tolerations.is_empty() {
        pod["tolerations"] = json!(k.tolerations);
    }
    Ok(job)
}

/// The canary's CronJob of `t` (`[daemon] canary`: a cluster without the daemon runs it
/// as a CronJob too): the target's pod, `drcheck canary --target NAME` on the canary's
/// schedule, named `drcheck-canary-…`.
pub(crate) fn canary_cronjob(
    t: &TargetConfig,
    o: &Options,
    scratch: &str,
    schedule: &drcheck_config::Schedule,
) -> Result<serde_json::Value, NotForKubernetes> {
    let mut job = cronjob(t, o, scratch)?;
    let name = k8s_name(&format!("canary-{}", t.name));
    job["metadata"]["name"] = json!(name);
    job["metadata"]["labels"]["drcheck.io/canary"] = json!("true");
    job["spec"]["schedule"] =
        json!(schedule.to_kubernetes().map_err(|why| NotForKubernetes { whose: "daemon.canary".into(), why })?);
    let template = &mut job["spec"]["jobTemplate"]["spec"]["template"];
    template["metadata"]["labels"]["drcheck.io/canary"] = json!("true");
    template["spec"]["containers"][0]["args"] = json!(["canary", "--target", t.name]);
    Ok(job)
}

/// Where a follower's StatefulSet mounts its volume (the copy it keeps: `state_dir`).
const POD_STATE_DIR: &str = "/var/lib/drcheck";

/// The StatefulSet of a target that follows its archive (`[target.follow]`): one
/// replica running `drcheck daemon --target NAME` — the follower, the target's schedule
/// (validations on the follower, the rotation's full restores) and its metrics — with a
/// volume of its own for the follower's copy, sized like the scratch volume (the copy is
/// a restored database), that outlives the pod. It takes the place of the target's
/// CronJob: both would run the same schedule (the lease would let only one through).
pub(crate) fn statefulset(
    t: &TargetConfig,
    o: &Options,
    scratch: &str,
    port: u16,
) -> Result<serde_json::Value, NotForKubernetes> {
    let job = cronjob(t, o, scratch)?;
    let mut template = job["spec"]["jobTemplate"]["spec"]["template"].clone();
    let pod = &mut template["spec"];
    pod["restartPolicy"] = json!("Always");
    // A follower's server stops cleanly (its copy resumes where replay stopped).
    pod["terminationGracePeriodSeconds"] = json!(120);
    let container = &mut pod["containers"][0];
    container["args"] = json!(["daemon", "--target", t.name]);
    container["ports"] = json!([{"name": "metrics", "containerPort": port}]);
    container["readinessProbe"] = json!({"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 10});
    container["livenessProbe"] =
        json!({"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 30, "failureThreshold": 5});
    if let Some(mounts) = container["volumeMounts"].as_array_mut() {
        mounts.push(json!({"name": "state", "mountPath": POD_STATE_DIR}));
    }
    let mut claim = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": scratch}}});
    if let Some(class) = &t.kubernetes.storage_class {
        claim["storageClassName"] = json!(class);
    }
    let name = k8s_name(&t.name);
    let labels = job["metadata"]["labels"].clone();
    Ok(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": labels},
            // The old pod stops before the new one starts: never two followers.
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": {"type": "RollingUpdate"},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"},
            "template": template,
            "volumeClaimTemplates": [{"metadata": {"name": "state", "labels": labels}, "spec": claim}]
        }
    }))
}

/// The headless Service a StatefulSet names, through which its metrics are scraped.
fn service(t: &TargetConfig, port: u16) -> serde_json::Value {
    let name = k8s_name(&t.name);
    let labels = json!({"app.kubernetes.io/name": "drcheck", "drcheck.io/target": name});
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"clusterIP": "None", "selector": labels, "ports": [{"name": "metrics", "port": port, "targetPort": "metrics"}]}
    })
}

/// The Secrets a target's pod reads its environment from: the shared one, and with
/// `--secret-per-target` its own (named like its CronJob).
fn env_from(t: &TargetConfig, o: &Options) -> serde_json::Value {
    let mut from = vec![json!({"secretRef": {"name": o.secret}})];
    if o.secret_per_target {
        from.push(json!({"secretRef": {"name": k8s_name(&t.name)}}));
    }
    json!(from)
}

/// Where the generated pod mounts the config (a ConfigMap) and its scratch volume.
const POD_CONFIG_DIR: &str = "/etc/drcheck";
const POD_SCRATCH_DIR: &str = "/var/tmp/drcheck";

/// What in the config cannot work in the generated pod, each naming its key: refused
/// (the first list) or warned about (the second). A pod keeps no file between runs,
/// mounts only the ConfigMap and its scratch volume, and a CronJob writes no heartbeat.
pub(crate) fn pod_problems(config: &Config, targets: &[&TargetConfig]) -> (Vec<String>, Vec<String>) {
    use drcheck_config::StorageConfig;
    let (mut refused, mut warned) = (Vec::new(), Vec::new());
    let in_dir = |p: &std::path::Path, dir: &str| p.starts_with(dir);
    if config.state.url.expose().starts_with("sqlite:") {
        refused.push(format!(
            "state.url is a SQLite file ({}): a CronJob's pod keeps no file between runs, so leases, proofs and \
             freshness would be lost each night — use a PostgreSQL history store (postgres://…)",
            config.state.url.redacted()
        ));
    }
    // Left at its default, the pod's own (`DRCHECK_SCRATCH_DIR`, set in the pod).
    if config.sandbox.scratch_dir_set && !in_dir(&config.sandbox.scratch_dir, POD_SCRATCH_DIR) {
        refused.push(format!(
            "sandbox.scratch_dir is {}: the pod's scratch volume is mounted at {POD_SCRATCH_DIR} — set \
             scratch_dir = \"{POD_SCRATCH_DIR}\"",
            config.sandbox.scratch_dir.display()
        ));
    }
    let mut storages: Vec<&str> = targets.iter().map(|t| t.storage.as_str()).collect();
    storages.sort();
    storages.dedup();
    for name in storages {
        if let Some(StorageConfig::S3(s3)) = config.storage.get(name)
            && let Some(ca) = &s3.ca_file
            && !in_dir(ca, POD_CONFIG_DIR)
        {
            refused.push(format!(
                "storage.{name}.ca_file is {}: the pod has no such file — add the CA to the ConfigMap and point \
                 ca_file under {POD_CONFIG_DIR}/",
                ca.display()
            ));
        }
    }
    for t in targets {
        if let Some(StorageConfig::Filesystem { path, kubernetes_claim: None, .. }) = config.storage.get(&t.storage) {
            refused.push(format!(
                "storage.{} is a directory of this machine ({}): the pod has no such directory — set \
                 storage.{}.kubernetes_claim to the PersistentVolumeClaim that holds it (mounted read-only there; \
                 kubernetes_read_group for a group that may read it)",
                t.storage,
                path.display(),
                t.storage
            ));
        }
        for (key, value) in [("age_identity", &t.decrypt.age_identity), ("gpg_secret_key", &t.decrypt.gpg_secret_key)] {
            let Some(v) = value else { continue };
            let v = v.expose();
            let is_path = !(v.starts_with("AGE-SECRET-KEY-") || v.starts_with("-----BEGIN"));
            if is_path && !in_dir(std::path::Path::new(v), POD_CONFIG_DIR) {
                refused.push(format!(
                    "target {:?}: decrypt.{key} is a file of this machine: the pod has no such file — put the key \
                     itself in the Secret and write {key} = \"${{VAR}}\"",
                    t.name
                ));
            } else if is_path {
                warned.push(format!(
                    "target {:?}: decrypt.{key} is read from the ConfigMap: anyone who may read ConfigMaps holds \
                     the key — put it in the Secret as {key} = \"${{VAR}}\"",
                    t.name
                ));
            }
        }
        if t.follow.is_some() {
            if !in_dir(&config.sandbox.state_dir, POD_STATE_DIR) {
                refused.push(format!(
                    "target {:?} follows its archive: its StatefulSet keeps the copy on the volume mounted at \
                     {POD_STATE_DIR}, but sandbox.state_dir is {} — set state_dir = \"{POD_STATE_DIR}\"",
                    t.name,
                    config.sandbox.state_dir.display()
                ));
            }
            if config.metrics.listen.parse::<std::net::SocketAddr>().is_ok_and(|a| a.ip().is_loopback()) {
                refused.push(format!(
                    "target {:?} follows its archive: its StatefulSet is probed and scraped on the pod's address, \
                     but metrics.listen is {} — listen on 0.0.0.0:PORT",
                    t.name, config.metrics.listen
                ));
            }
        }
        if t.heartbeat.as_ref().is_some_and(|h| h.url.is_some()) && t.follow.is_none() {
            warned.push(format!(
                "target {:?}: heartbeat.url makes `drcheck daemon` write the heartbeat, and a CronJob never does: \
                 write it with pg_cron (`drcheck heartbeat setup --target {}`) or run the daemon",
                t.name, t.name
            ));
        }
    }
    (refused, warned)
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
            let listed = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                crate::verify::list_backups(crate::ids::Settings::of(config, t), t),
            )
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
pub(crate) fn file_name(t: &TargetConfig) -> String {
    format!("{}.yaml", k8s_name(&t.name))
}

pub(crate) async fn run(
    config: &Config,
    target: Option<&str>,
    output_dir: Option<&std::path::Path>,
    o: &Options,
) -> Result<Exit, CliError> {
    let targets = super::select_targets(config, target)?;
    if let Some((a, b, name)) = collisions(&targets).into_iter().next() {
        return Err(CliError::usage(anyhow::anyhow!(
            "targets {a:?} and {b:?} would both be the CronJob {name}: rename one of them"
        )));
    }
    let (refused, warned) = pod_problems(config, &targets);
    for w in &warned {
        crate::errln!("deploy: {w}");
    }
    if !refused.is_empty() {
        return Err(CliError::usage(anyhow::anyhow!(
            "this config cannot work in a Kubernetes pod:\n  - {}",
            refused.join("\n  - ")
        )));
    }
    for t in targets.iter().filter(|t| t.schedule.is_none()) {
        crate::errln!(
            "deploy: {}: no schedule in the config: its CronJob runs daily at 03:00 UTC (\"0 3 * * *\"); set [[target]] schedule to choose",
            t.name
        );
    }
    let scratch = scratch_sizes(config, &targets, o).await;
    let header = format!("# generated by `drcheck deploy kubernetes` from {}", config.path.display());
    let mut docs = Vec::new();
    let port = config.metrics.listen.parse::<std::net::SocketAddr>().map(|a| a.port()).unwrap_or(9187);
    for (t, (size, why)) in targets.iter().zip(&scratch) {
        if t.follow.is_some() {
            let set = statefulset(t, o, size, port).map_err(CliError::usage)?;
            crate::errln!(
                "deploy: {}: follows its archive: a StatefulSet runs its daemon (follower and schedule) instead of a CronJob",
                t.name
            );
            docs.push((
                file_name(t),
                format!(
                    "# {}: follows its archive; scratch and the follower's volume {size}, {why}\n{}---\n{}",
                    t.name,
                    yaml(&set)?,
                    yaml(&service(t, port))?
                ),
            ));
            continue;
        }
        let job = cronjob(t, o, size).map_err(CliError::usage)?;
        let mut doc = format!("# {}: scratch {size}, {why}\n{}", t.name, yaml(&job)?);
        if let Some(schedule) = &config.daemon.canary {
            let canary = canary_cronjob(t, o, size, schedule).map_err(CliError::usage)?;
            doc.push_str(&format!("---\n# {}: the canary ([daemon] canary)\n{}", t.name, yaml(&canary)?));
        }
        docs.push((file_name(t), doc));
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
    crate::errln!("deploy: {} and kustomization.yaml in {}", crate::out::count(names.len(), "file"), dir.display());
    Ok(Exit::Passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_kubernetes_whatever_the_target_is_called() {
        assert_eq!(k8s_name("Orders_EU.1"), "drcheck-orders-eu-1");
        assert_eq!(k8s_name("a__b"), "drcheck-a-b", "one dash for a run of others");
        let long = "x".repeat(60);
        let (a, b) = (k8s_name(&format!("{long}-primary")), k8s_name(&format!("{long}-replica")));
        assert!(a.len() <= MAX_CRONJOB_NAME && b.len() <= MAX_CRONJOB_NAME, "{a} {b}");
        assert_ne!(a, b, "long names keep apart by their hash");
        assert_eq!(a, k8s_name(&format!("{long}-primary")), "stable");
        // RFC 1123 labels: lowercase alphanumerics and dashes, alphanumeric at both ends.
        let dns = |k: &str| {
            k.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !k.starts_with('-')
                && !k.ends_with('-')
        };
        for n in ["orders", "Ünïcødé tablé", "-x-", &"y".repeat(200), "a.b", "1"] {
            let k = k8s_name(n);
            assert!(dns(&k) && k.len() <= MAX_CRONJOB_NAME, "{n:?} → {k:?}");
        }
    }

    /// Issue 48: a posix repository (a filesystem storage) reaches the pods through its
    /// claim, read-only at its path, with the group that may read it; without a claim
    /// deploy refuses, naming the key.
    #[test]
    fn a_directory_store_is_mounted_from_its_claim_or_refused() {
        let text = |claim: &str| {
            format!(
                "[state]\nurl = \"postgres://h/db\"\n[storage.nfs]\nkind = \"filesystem\"\npath = \"/mnt/pgbackrest\"\n{claim}\
                 [[target]]\nname = \"billing\"\nsource = \"pgbackrest\"\nstorage = \"nfs\"\nstanza = \"billing\"\nrto = \"1h\"\nrpo = \"1d\"\n"
            )
        };
        let bare = drcheck_config::parse(&text(""), std::path::Path::new("c.toml")).unwrap();
        let targets: Vec<&TargetConfig> = bare.targets.iter().collect();
        let (refused, _) = pod_problems(&bare, &targets);
        assert!(refused.iter().any(|r| r.contains("storage.nfs.kubernetes_claim")), "{refused:?}");
        let claimed = drcheck_config::parse(
            &text("kubernetes_claim = \"pgbackrest-repo\"\nkubernetes_read_group = 998\n"),
            std::path::Path::new("c.toml"),
        )
        .unwrap();
        let targets: Vec<&TargetConfig> = claimed.targets.iter().collect();
        assert!(pod_problems(&claimed, &targets).0.is_empty());
        let o = Options {
            image: "r/drcheck:1".into(),
            secret: "drcheck".into(),
            secret_per_target: false,
            config_map: "drcheck".into(),
            scratch_size: "10Gi".into(),
            stores: store_mounts(&claimed),
        };
        let job = cronjob(&claimed.targets[0], &o, "10Gi").unwrap();
        let pod = &job["spec"]["jobTemplate"]["spec"]["template"]["spec"];
        assert!(
            pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["persistentVolumeClaim"] == json!({"claimName": "pgbackrest-repo", "readOnly": true})),
            "{pod}"
        );
        assert!(
            pod["containers"][0]["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["mountPath"] == "/mnt/pgbackrest" && m["readOnly"] == true),
            "{pod}"
        );
        assert_eq!(pod["securityContext"]["supplementalGroups"], json!([998]));
        let e = drcheck_config::parse(&text("kubernetes_claim = \"Not_A_Claim\"\n"), std::path::Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("kubernetes_claim") && e.contains("PersistentVolumeClaim"), "{e}");
    }

    #[test]
    fn the_canary_runs_as_a_cronjob_of_its_own() {
        let text = "[storage.s]\nkind = \"filesystem\"\npath = \"/tmp\"\n[[target]]\nname = \"orders\"\nstorage = \"s\"\nprefix = \"p/\"\nrto = \"1h\"\nrpo = \"1d\"\nschedule = \"0 3 * * *\"\n";
        let config = drcheck_config::parse(text, std::path::Path::new("c.toml")).unwrap();
        let o = Options {
            image: "r/drcheck:1".into(),
            secret: "drcheck".into(),
            secret_per_target: false,
            config_map: "drcheck-config".into(),
            scratch_size: String::new(),
            stores: store_mounts(&config),
        };
        let weekly = drcheck_config::Schedule::parse("canary", "0 4 * * 0").unwrap();
        let job = canary_cronjob(&config.targets[0], &o, "10Gi", &weekly).unwrap();
        assert_eq!(job["metadata"]["name"], "drcheck-canary-orders");
        assert_eq!(job["spec"]["schedule"], "0 4 * * 0");
        let pod = &job["spec"]["jobTemplate"]["spec"]["template"];
        assert_eq!(pod["spec"]["containers"][0]["args"], json!(["canary", "--target", "orders"]));
        assert_eq!(pod["metadata"]["labels"]["drcheck.io/canary"], "true");
        assert_eq!(
            cronjob(&config.targets[0], &o, "10Gi").unwrap()["spec"]["schedule"],
            "0 3 * * *",
            "the target's own"
        );
    }

    #[test]
    fn scratch_follows_the_backup_size() {
        assert_eq!(scratch_for(0, 5.0), "10Gi", "at least 10Gi");
        assert_eq!(scratch_for(20 << 30, 5.0), "125Gi", "20 GiB × 5 × 1.25");
        assert_eq!(scratch_for((3 << 30) + 1, 4.0), "16Gi", "rounded up");
    }
}
