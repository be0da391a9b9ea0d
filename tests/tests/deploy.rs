//! The deployment files agree with the binary: every metric the alert rules and the
//! dashboard use is one drcheck really exports (read from a real exposition — a daemon
//! that has run a verification and dead-lettered an alert), and the example overlay's
//! generated CronJob is what `drcheck deploy kubernetes` writes today.

use drcheck_e2e::scenario::Scene;
use drcheck_e2e::{Daemon, drcheck, free_port, http_get, http_request, stderr, stdout};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Every `drcheck_…` name in a text.
fn drcheck_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("drcheck_") {
        let name: String = rest[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        // Not a suffix of a longer word (e.g. a label or file name).
        let before = rest[..i].chars().last();
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.') {
            out.insert(name.clone());
        }
        rest = &rest[i + name.len().max(1)..];
    }
    out
}

#[test]
fn every_metric_in_the_rules_and_the_dashboard_is_exported() {
    let scene = Scene::start();
    let port = free_port();
    let mut spec = scene.spec();
    spec.extra_target = format!(
        "[target.as_of]\n\"public.orders\" = \"placed_at\"\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n[api]\ntoken = \"t\"\n\
         [[alert]]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:{}/x\"\nmax_attempts = 1\n",
        free_port()
    );
    // A passing one-shot run first: the daemon picks up the last success from history.
    let passing = scene.config(&spec).display().to_string();
    let (out, _) = drcheck(&["--config", &passing, "verify"], &scene.env(), Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{}", drcheck_e2e::stderr(&out));
    spec.rpo = "1ms".into();
    let config = scene.config(&spec);
    let mut d = Daemon::start(&config, port, &scene.env());
    assert_eq!(
        http_request(port, "POST", "/api/v1/targets/orders/verify", &[("Authorization", "Bearer t")], "").0,
        202
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    let exposition = loop {
        let m = http_get(port, "/metrics");
        if m.contains("drcheck_alerts_dead_lettered_total{") && m.contains("drcheck_validator_success{") {
            break m;
        }
        assert!(Instant::now() < deadline, "the run or its dead letter never showed up:\n{m}");
        std::thread::sleep(Duration::from_millis(300));
    };
    d.terminate(Duration::from_secs(60));
    // Drills are one-shot and push their own metrics: a drill's exposition too.
    let mut drill_spec = scene.spec();
    let textfile = scene.root.path().join("drcheck.prom");
    drill_spec.extra_target = format!("[metrics]\ntextfile = \"{}\"", textfile.display());
    let drill_config = scene.config(&drill_spec).display().to_string();
    let runbook = scene.root.path().join("tiny.yaml");
    std::fs::write(
        &runbook,
        "title: tiny\nobjectives: {rto: 1m}\nsteps:\n  - name: s\n    shell: {command: \"true\"}\n    recovery: true\n",
    )
    .unwrap();
    let report = scene.root.path().join("tiny.html").display().to_string();
    let (out, _) = drcheck(
        &["--config", &drill_config, "drill", "run", &runbook.display().to_string(), "--report", &report],
        &scene.env(),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{}", drcheck_e2e::stderr(&out));
    let exposition = exposition + &std::fs::read_to_string(scene.root.path().join("drcheck-drill-tiny.prom")).unwrap();
    let exported: BTreeSet<String> = exposition
        .lines()
        .filter(|l| l.starts_with("# TYPE "))
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(String::from)
        .collect();
    for file in ["deploy/prometheus/rules.yml", "deploy/grafana/drcheck.json"] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        let used = drcheck_names(&text);
        assert!(!used.is_empty(), "{file} uses no drcheck metric?");
        // Exported only for targets whose backups come from a backup tool's catalog:
        // tests/tests/sources.rs asserts them on a pgBackRest run's textfile and daemon.
        // And only for targets with a heartbeat the daemon writes: tests/tests/live.rs
        // asserts those on its daemon.
        let replay_only = [
            "drcheck_recoverable_point_timestamp_seconds",
            "drcheck_recovery_window_start_timestamp_seconds",
            "drcheck_repository_check_success",
            "drcheck_heartbeat_last_write_timestamp_seconds",
            "drcheck_heartbeat_interval_seconds",
            "drcheck_heartbeat_write_failures_total",
            // Only for targets a follower follows: tests/tests/follow.rs asserts them on
            // its daemon.
            "drcheck_follow_up",
            "drcheck_follow_not_replayable",
            "drcheck_follow_replayed_commit_timestamp_seconds",
            "drcheck_follow_behind_bytes",
            // Only for a backup whose objects are all locked: tests/tests/immutability.rs
            // asserts it on its textfile.
            "drcheck_backup_lock_remaining_seconds",
            // Only after a canary: tests/tests/canary.rs asserts them on its daemon and
            // textfile.
            "drcheck_canary_detected",
            "drcheck_canary_alert_accepted",
            "drcheck_canary_last_success_timestamp_seconds",
            // Only with an RTO forecast breach (5+ restores of a growing database): the
            // forecast tests in daemon/src/verify/mod.rs assert it on the exposition and
            // run this rule on it with promtool.
            "drcheck_rto_forecast_breach_timestamp_seconds",
        ];
        let missing: Vec<&String> =
            used.iter().filter(|n| !exported.contains(*n) && !replay_only.contains(&n.as_str())).collect();
        assert!(missing.is_empty(), "{file} uses metrics drcheck does not export: {missing:?}\nexported: {exported:?}");
    }
}

#[test]
fn the_example_overlay_holds_what_deploy_kubernetes_generates() {
    let dir = root().join("deploy/kubernetes/overlays/example");
    // Issue 48: from an operator's laptop, where only the pod's Secret holds the state
    // URL and the passwords: nothing of them is needed here.
    let env: Vec<(&str, String)> = Vec::new();
    let (out, _) = drcheck(
        &[
            "--config",
            &dir.join("drcheck.toml").display().to_string(),
            "deploy",
            "kubernetes",
            "--target",
            "invoices",
            "--image",
            "registry.example.com/drcheck:0.1.0",
        ],
        &env,
        Duration::from_secs(30),
    );
    assert!(out.status.success());
    let generated = stdout(&out);
    let committed = std::fs::read_to_string(dir.join("cronjob-invoices.yaml")).unwrap();
    let body = |s: &str| s.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n");
    assert_eq!(body(&committed), body(&generated), "regenerate cronjob-invoices.yaml with `drcheck deploy kubernetes`");
    // rto 1h × 2 + the validate phase's default (4 − 2) × 1h − 10m + 10 min of slack:
    // 4× the RTO, and no warning.
    assert!(generated.contains("activeDeadlineSeconds: 14400"), "{generated}");
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    // The scratch volume is the pod's, whatever the machine that generated it.
    assert!(generated.contains("DRCHECK_SCRATCH_DIR") && generated.contains("/var/tmp/drcheck"), "{generated}");
    assert!(generated.contains("schedule: 30 3 * * *") || generated.contains("schedule: '30 3 * * *'"), "{generated}");
    assert!(!generated.contains("{\n"), "YAML, not JSON: {generated}");
}

/// The CloudNativePG example is a config drcheck accepts (a barman-cloud source with a
/// repository check schedule).
#[test]
fn the_cloudnativepg_example_config_is_valid() {
    let config = root().join("deploy/kubernetes/overlays/cloudnativepg/drcheck.toml");
    let env: Vec<(&str, String)> =
        [("DRCHECK_STATE_URL", "postgres://drcheck:x@state/drcheck"), ("DRCHECK_API_TOKEN", "t"), ("PG_MAIN_PW", "p")]
            .iter()
            .map(|(k, v)| (*k, v.to_string()))
            .collect();
    let (out, _) =
        drcheck(&["--config", &config.display().to_string(), "config", "check"], &env, Duration::from_secs(30));
    assert!(out.status.success(), "{}", drcheck_e2e::stderr(&out));
    let shown = stdout(&out);
    assert!(shown.contains("barman-cloud") && shown.contains("integrity_schedule"), "{shown}");
}

/// Any target name makes a valid CronJob: names fit Kubernetes' limits (a long one ends
/// in a stable hash), and two targets that would share one are a usage error naming
/// both — never one file silently overwriting the other.
#[test]
fn generated_cronjobs_fit_kubernetes_and_never_collide() {
    let dir = drcheck_e2e::TempRoot::new();
    let config = dir.path().join("c.toml");
    let long = format!("orders-{}", "x".repeat(53));
    let text = |names: &[&str]| {
        let mut t = drcheck_e2e::pod_ready("[storage.b]\nkind = \"filesystem\"\npath = \"/nonexistent\"\n");
        for n in names {
            t.push_str(&format!("[[target]]\nname = \"{n}\"\nstorage = \"b\"\nrto = \"30m\"\nrpo = \"1d\"\n"));
        }
        t
    };
    std::fs::write(&config, text(&["orders_eu", "orders.eu"])).unwrap();
    let c = config.display().to_string();
    let args = ["--config", &c, "deploy", "kubernetes", "--image", "drcheck:test", "--scratch-size", "10Gi"];
    let (out, _) = drcheck_e2e::drcheck(&args, &[], std::time::Duration::from_secs(60));
    let err = drcheck_e2e::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("orders_eu") && err.contains("orders.eu"), "{err}");
    std::fs::write(&config, text(&[&long])).unwrap();
    let (out, _) = drcheck_e2e::drcheck(&args, &[], std::time::Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", drcheck_e2e::stderr(&out));
    let yaml = drcheck_e2e::stdout(&out);
    let name = yaml.lines().find_map(|l| l.trim().strip_prefix("name: drcheck-")).expect("a name");
    assert!(name.len() + "drcheck-".len() <= 52, "{name}");
    let label = yaml.lines().find_map(|l| l.trim().strip_prefix("drcheck.io/target: ")).expect("a label");
    assert!(label.len() <= 63, "{label}");
    // A target without a schedule gets a default one, and is told so.
    assert!(drcheck_e2e::stderr(&out).contains("no schedule in the config: its CronJob runs daily at 03:00 UTC"));
}

/// Issue 26: the image is the operator's choice, never a silent `drcheck:latest`.
#[test]
fn deploy_kubernetes_requires_an_image() {
    let dir = drcheck_e2e::TempRoot::new();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        drcheck_e2e::pod_ready("[storage.b]\nkind = \"filesystem\"\npath = \"/nonexistent\"\n[[target]]\nname = \"orders\"\nstorage = \"b\"\nrto = \"30m\"\nrpo = \"1d\"\nschedule = \"0 4 * * *\"\n"),
    )
    .unwrap();
    let c = config.display().to_string();
    let (out, _) = drcheck_e2e::drcheck(
        &["--config", &c, "deploy", "kubernetes", "--scratch-size", "10Gi"],
        &[],
        std::time::Duration::from_secs(60),
    );
    let err = drcheck_e2e::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--image"), "{err}");
    assert!(!drcheck_e2e::stdout(&out).contains("drcheck:latest"));
}

/// Issue 34: what cannot work in a pod — a SQLite history (nothing survives a pod), a
/// host scratch directory, a CA file and a key file the pod does not have — is refused,
/// each named by its key; a heartbeat the daemon would write (a CronJob never does) is
/// warned about; and each CronJob can read a Secret of its own.
#[test]
fn deploy_kubernetes_refuses_what_cannot_work_in_a_pod() {
    let dir = drcheck_e2e::TempRoot::new();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\n").unwrap();
    let host = format!(
        "[state]\nurl = \"sqlite://{d}/history.db\"\n[sandbox]\nscratch_dir = \"{d}/scratch\"\n\
         [storage.b]\nkind = \"s3\"\nbucket = \"b\"\nendpoint = \"https://s3.example:9000\"\nca_file = \"{ca}\"\n\
         [[target]]\nname = \"orders\"\nstorage = \"b\"\nrto = \"30m\"\nrpo = \"1d\"\nschedule = \"0 4 * * *\"\n\
         primary = \"postgres://v:pw@db:5432/orders\"\n\
         [target.decrypt]\nage_identity = \"{d}/key.txt\"\n\
         [target.heartbeat]\ntable = \"drcheck.heartbeat\"\nurl = \"postgres://w:pw@db:5432/orders\"\n",
        d = dir.path().display(),
        ca = ca.display()
    );
    let config = dir.path().join("host.toml");
    std::fs::write(&config, &host).unwrap();
    let c = config.display().to_string();
    let args = ["--config", &c, "deploy", "kubernetes", "--image", "drcheck:test", "--scratch-size", "10Gi"];
    let (out, _) = drcheck_e2e::drcheck(&args, &[], std::time::Duration::from_secs(60));
    let err = drcheck_e2e::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for named in ["state.url is a SQLite file", "sandbox.scratch_dir", "storage.b.ca_file", "decrypt.age_identity"] {
        assert!(err.contains(named), "{named:?} not in {err}");
    }
    assert!(err.contains("heartbeat.url") && err.contains("a CronJob never does"), "{err}");
    assert!(drcheck_e2e::stdout(&out).is_empty(), "nothing generated");

    // Made fit for a pod (the CA in the ConfigMap, the key in the Secret): generated, and
    // with --secret-per-target each pod reads its own Secret beside the shared one.
    let fit = drcheck_e2e::pod_ready(&host)
        .replace(&ca.display().to_string(), "/etc/drcheck/ca.pem")
        .replace(&format!("{}/key.txt", dir.path().display()), "${AGE_KEY}")
        .replace("[target.heartbeat]\ntable = \"drcheck.heartbeat\"\nurl = \"postgres://w:pw@db:5432/orders\"\n", "");
    std::fs::write(&config, &fit).unwrap();
    let mut with_own = args.to_vec();
    with_own.push("--secret-per-target");
    let env = [("AGE_KEY", "AGE-SECRET-KEY-1QQQQ".to_string())];
    let (out, _) = drcheck_e2e::drcheck(&with_own, &env, std::time::Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", drcheck_e2e::stderr(&out));
    let yaml = drcheck_e2e::stdout(&out);
    assert!(yaml.contains("name: drcheck-secrets") && yaml.contains("name: drcheck-orders"), "{yaml}");
    assert_eq!(yaml.matches("secretRef:").count(), 2, "{yaml}");
}

/// Issue 36: a target that follows its archive gets a StatefulSet whose volume keeps the
/// follower's copy — so a config whose state_dir is not on that volume, or whose metrics
/// only listen on loopback (the pod is probed on its own address), is refused, naming
/// both.
#[test]
fn a_follower_needs_its_volume_and_a_reachable_metrics_port() {
    let dir = drcheck_e2e::TempRoot::new();
    let config = dir.path().join("c.toml");
    let target = "[[target]]\nname = \"orders\"\nstorage = \"b\"\nrto = \"30m\"\nrpo = \"1d\"\nformat = \"physical\"\n\
                  wal_prefix = \"wal/\"\n[target.follow]\n";
    let base = drcheck_e2e::pod_ready("[storage.b]\nkind = \"filesystem\"\npath = \"/nonexistent\"\n");
    std::fs::write(&config, format!("{base}{target}")).unwrap();
    let c = config.display().to_string();
    let args = ["--config", &c, "deploy", "kubernetes", "--image", "drcheck:test", "--scratch-size", "10Gi"];
    let (out, _) = drcheck(&args, &[], Duration::from_secs(60));
    let err = drcheck_e2e::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("state_dir = \"/var/lib/drcheck\""), "{err}");
    assert!(err.contains("metrics.listen is 127.0.0.1:9187"), "{err}");
    let fixed = base.replace(
        "scratch_dir = \"/var/tmp/drcheck\"\n",
        "scratch_dir = \"/var/tmp/drcheck\"\nstate_dir = \"/var/lib/drcheck\"\n",
    ) + "[metrics]\nlisten = \"0.0.0.0:9187\"\n"
        + target;
    std::fs::write(&config, fixed).unwrap();
    let (out, _) = drcheck(&args, &[], Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", drcheck_e2e::stderr(&out));
    let yaml = stdout(&out);
    assert!(
        yaml.contains("kind: StatefulSet") && yaml.contains("kind: Service") && !yaml.contains("kind: CronJob"),
        "{yaml}"
    );
    assert!(yaml.contains("storage: 10Gi"), "the follower's volume is sized like scratch: {yaml}");
}

/// Issue 47: the image builds without a container engine's daemon (buildah, chroot
/// isolation, a debootstrap base imported locally, this machine's binary for the Rust
/// stage) and verifies a backup inside itself as its non-root user, contained —
/// `deploy/image-check.sh`, which says what it measured.
#[test]
fn the_image_builds_and_verifies_a_backup_inside_itself() {
    let out = std::process::Command::new("bash")
        .arg(root().join("deploy/image-check.sh"))
        .env("DRCHECK_BIN", drcheck_e2e::drcheck_bin())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{text}");
    assert!(out.status.success(), "{text}");
    assert!(text.contains("verify inside the image as uid 10001: passed (exit 0)"), "{text}");
    assert!(text.contains("containment landlock"), "contained inside the image too: {text}");
    assert!(text.contains("drcheck 0.1.0"), "{text}");
}

/// Issue 48: every shipped alert rule is silent for a healthy target with default settings
/// (`select = "latest"`, two backups in the store — the older one proven on its own night,
/// not since). The series are a real daemon's after a passing run, held for 33 hours; the
/// promtool test holds every rule of `deploy/prometheus/rules.yml` to no alert.
#[test]
fn every_shipped_alert_is_silent_for_a_healthy_default_target() {
    let scene = Scene::start();
    // A newer backup beside the one Scene uploaded: the older one stays unproven.
    std::thread::sleep(Duration::from_millis(1100));
    scene.s3.upload(&scene.dump, &scene.bucket, "orders/orders-2.dump");
    let port = free_port();
    let mut spec = scene.spec();
    spec.extra_target = format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n[api]\ntoken = \"t\"\n");
    let config = scene.config(&spec);
    let mut d = Daemon::start(&config, port, &scene.env());
    assert_eq!(
        http_request(port, "POST", "/api/v1/targets/orders/verify", &[("Authorization", "Bearer t")], "").0,
        202
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    let exposition = loop {
        let m = http_get(port, "/metrics");
        if m.contains("drcheck_last_run_success{target=\"orders\"} 1") {
            break m;
        }
        assert!(Instant::now() < deadline, "no passing run:\n{m}");
        std::thread::sleep(Duration::from_millis(300));
    };
    d.terminate(Duration::from_secs(60));
    assert!(exposition.contains("drcheck_backups_unproven{target=\"orders\"} 1"), "the older backup: {exposition}");
    let mut series = String::new();
    for line in exposition.lines().filter(|l| l.starts_with("drcheck_")) {
        let (name_labels, value) = line.rsplit_once(' ').unwrap();
        let with_job = match name_labels.split_once('{') {
            Some((name, rest)) => format!("{name}{{job=\"drcheck\",{rest}"),
            None => format!("{name_labels}{{job=\"drcheck\"}}"),
        };
        series.push_str(&format!("      - series: '{with_job}'\n        values: '{value}x2000'\n"));
    }
    let rules = root().join("deploy/prometheus/rules.yml");
    let alerts: Vec<String> = std::fs::read_to_string(&rules)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: ").map(str::to_string))
        .collect();
    assert!(alerts.len() >= 20, "{alerts:?}");
    let mut checks = String::new();
    for a in &alerts {
        for at in ["1h", "27h", "33h"] {
            checks.push_str(&format!("      - eval_time: {at}\n        alertname: {a}\n        exp_alerts: []\n"));
        }
    }
    let test = format!(
        "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n{series}    alert_rule_test:\n{checks}",
        rules.display()
    );
    let file = scene.root.path().join("healthy_test.yml");
    std::fs::write(&file, test).unwrap();
    let out = std::process::Command::new("promtool").args(["test", "rules"]).arg(&file).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "an alert fires for a healthy default target:\n{said}");
}
