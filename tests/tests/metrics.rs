//! End-to-end: metrics from one-shot runs, checked by the real Prometheus tools —
//! `promtool check metrics` on the exposition, a real Pushgateway receiving pushes.

use drcheck_e2e::scenario::Scene;
use drcheck_e2e::{PromService, drcheck, sample, stderr};
use std::process::{Command, Stdio};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// The contract's metric names (DESIGN.md).
const CONTRACT: [&str; 11] = [
    "drcheck_verification_runs_total",
    "drcheck_last_run_success",
    "drcheck_last_success_timestamp_seconds",
    "drcheck_restore_duration_seconds",
    "drcheck_phase_duration_seconds",
    "drcheck_rto_target_seconds",
    "drcheck_rpo_target_seconds",
    "drcheck_backup_timestamp_seconds",
    "drcheck_backup_size_bytes",
    "drcheck_validator_success",
    "drcheck_build_info",
];

fn promtool_check(exposition: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (run scripts/setup.sh)");
    child.stdin.take().unwrap().write_all(exposition.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn the_textfile_exposition_has_the_contract_and_satisfies_promtool() {
    let scene = Scene::start();
    let prom = scene.root.path().join("drcheck.prom");
    let mut spec = scene.spec();
    spec.extra_target = format!("[metrics]\ntextfile = \"{}\"", prom.display());
    let c = scene.config(&spec).display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = std::fs::read_to_string(&prom).unwrap();
    for name in CONTRACT {
        assert!(
            text.contains(&format!("\n{name}{{")) || text.contains(&format!("\n{name} ")),
            "{name} missing:\n{text}"
        );
    }
    assert_eq!(sample(&text, "drcheck_last_run_success", "target=\"orders\""), Some(1.0));
    assert_eq!(sample(&text, "drcheck_validator_success", "validator=\"checksums\""), Some(1.0));
    // Skipped is neither a pass nor a failure (issue 34: it was exported as 0, a failure).
    assert_eq!(sample(&text, "drcheck_validator_success", "validator=\"freshness\""), None, "skipped is not 0 nor 1");
    assert_eq!(sample(&text, "drcheck_validator_skipped", "validator=\"freshness\""), Some(1.0), "{text}");
    assert_eq!(sample(&text, "drcheck_validator_skipped", "validator=\"checksums\""), Some(0.0));
    assert_eq!(sample(&text, "drcheck_restore_profile_info", "profile=\"production\""), Some(1.0), "{text}");
    let (ok, problems) = promtool_check(&text);
    assert!(ok && problems.trim().is_empty(), "promtool check metrics: {problems}\n{text}");
}

#[test]
fn the_pushgateway_gets_each_run_and_a_failure_keeps_the_last_success() {
    let scene = Scene::start();
    let gateway = PromService::start(&scene.root, "prometheus-pushgateway", &[]);
    let mut spec = scene.spec();
    spec.extra_target = format!("[metrics]\npushgateway = \"{}\"", gateway.url());
    let c = scene.config(&spec).display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let pushed = gateway.get("/metrics");
    let label = "target=\"orders\"";
    assert_eq!(sample(&pushed, "drcheck_last_run_success", label), Some(1.0), "{pushed}");
    assert!(pushed.contains("job=\"drcheck\""), "{pushed}");
    let success = sample(&pushed, "drcheck_last_success_timestamp_seconds", label).expect("last success pushed");

    // A failing run (every backup is older than a 1ms RPO) is pushed too, but the
    // last success stays what it was.
    spec.rpo = "1ms".into();
    let c = scene.config(&spec).display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let pushed = gateway.get("/metrics");
    assert_eq!(sample(&pushed, "drcheck_last_run_success", label), Some(0.0), "{pushed}");
    assert_eq!(sample(&pushed, "drcheck_last_success_timestamp_seconds", label), Some(success), "{pushed}");
    assert_eq!(sample(&pushed, "drcheck_rpo_target_seconds", label), Some(0.001), "{pushed}");
}

#[test]
fn an_unreachable_pushgateway_warns_but_keeps_the_verdict() {
    let scene = Scene::start();
    let mut spec = scene.spec();
    spec.extra_target = format!("[metrics]\npushgateway = \"http://127.0.0.1:{}\"", drcheck_e2e::free_port());
    let c = scene.config(&spec).display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning: pushing metrics"), "{}", stderr(&out));
}
