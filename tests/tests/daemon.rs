//! End-to-end: `drcheck daemon` — health, metrics and the trigger API; SIGTERM during a
//! scheduled run; two daemons sharing one history store; SIGHUP reloads.

use drcheck_e2e::scenario::Scene;
use drcheck_e2e::{Daemon, Throttle, free_port, http_get, http_request, processes_mentioning};
use std::time::{Duration, Instant};

fn daemon_config(scene: &Scene, port: u16, endpoint: Option<String>, target_extra: &str) -> std::path::PathBuf {
    let mut spec = scene.spec();
    if let Some(e) = endpoint {
        spec.endpoint = e;
    }
    spec.extra_target =
        format!("{target_extra}\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n[api]\ntoken = \"tok-123\"\n");
    scene.config(&spec)
}

fn runs(port: u16) -> Vec<serde_json::Value> {
    // With a token configured, every API route needs it.
    let (status, body) = drcheck_e2e::http_request(
        port,
        "GET",
        "/api/v1/runs?target=orders&limit=100",
        &[("Authorization", "Bearer tok-123")],
        "",
    );
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["runs"].as_array().unwrap().clone()
}

#[test]
fn the_daemon_serves_health_metrics_and_the_trigger_api() {
    let scene = Scene::start();
    let port = free_port();
    let config = daemon_config(&scene, port, None, "");
    let mut d = Daemon::start(&config, port, &scene.env());
    assert_eq!(http_request(port, "GET", "/healthz", &[], "").0, 200);
    assert_eq!(http_request(port, "GET", "/readyz", &[], "").0, 200);
    let metrics = http_get(port, "/metrics");
    assert!(metrics.contains("drcheck_build_info{"), "{metrics}");

    let path = "/api/v1/targets/orders/verify";
    assert_eq!(http_request(port, "POST", path, &[], "").0, 401, "no token");
    assert_eq!(http_request(port, "POST", path, &[("Authorization", "Bearer wrong")], "").0, 401, "wrong token");
    let auth = [("Authorization", "Bearer tok-123")];
    assert_eq!(http_request(port, "POST", "/api/v1/targets/nope/verify", &auth, "").0, 404);
    let (status, body) = http_request(port, "POST", path, &auth, "");
    assert_eq!(status, 202, "{body}");
    let run_id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["run_id"].as_str().unwrap().to_string();
    assert_eq!(http_request(port, "POST", path, &auth, "").0, 409, "the target is already running");
    // The run id the trigger returned can be looked up: running (202), then recorded (200).
    let by_id = format!("/api/v1/runs/{run_id}");
    assert_eq!(http_request(port, "GET", &by_id, &[], "").0, 401, "the API needs the token");
    let (status, body) = http_request(port, "GET", &by_id, &auth, "");
    // Not started yet (queued behind the bulkhead) or started: both 202, each saying which.
    assert!(
        status == 202 && (body.contains("\"running\"") || body.contains("\"queued\"")) || status == 200,
        "{status} {body}"
    );
    let (status, body) = http_request(port, "GET", "/api/v1/runs/no-such-run", &auth, "");
    assert_eq!(status, 404, "{body}");

    let deadline = Instant::now() + Duration::from_secs(90);
    let run = loop {
        let (status, body) = http_request(port, "GET", &by_id, &auth, "");
        if status == 200 {
            break serde_json::from_str::<serde_json::Value>(&body).unwrap();
        }
        assert_eq!(status, 202, "{body}");
        assert!(Instant::now() < deadline, "run {run_id} never recorded");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(run["run_id"], run_id.as_str(), "{run}");
    assert!(runs(port).into_iter().any(|r| r["run_id"] == run_id.as_str()));
    assert_eq!(run["result"], "passed", "{run}");
    let metrics = http_get(port, "/metrics");
    assert_eq!(drcheck_e2e::sample(&metrics, "drcheck_last_run_success", "target=\"orders\""), Some(1.0), "{metrics}");
    // The target is free again once the run has finished its bookkeeping (lease, pruning).
    let deadline = Instant::now() + Duration::from_secs(10);
    while http_request(port, "POST", path, &auth, "").0 != 202 {
        assert!(Instant::now() < deadline, "the target never became free again after its run");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, took) = d.terminate(Duration::from_secs(60));
    assert!(status.success(), "{status}: {}", d.stderr_text());
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[test]
fn sigterm_during_a_scheduled_run_records_it_aborted_and_leaves_nothing() {
    let scene = Scene::start();
    scene.upload_big_backup();
    let slow = Throttle::start(scene.s3.port, 500_000);
    let port = free_port();
    let config = daemon_config(&scene, port, Some(slow.endpoint()), "schedule = \"* * * * * *\"");
    // Small parts: the restore starts streaming after the first 64 KiB.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("path_style = true", "path_style = true\npart_size = \"64KiB\"");
    std::fs::write(&config, text).unwrap();
    let mut d = Daemon::start(&config, port, &scene.env());
    let sock = scene.wait_for_pg_restore(Duration::from_secs(60)).expect("a scheduled restore started");
    let (status, took) = d.terminate(Duration::from_secs(40));
    assert!(status.success(), "exit 0 after a clean shutdown: {status}: {}", d.stderr_text());
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(scene.leftover_sandboxes().is_empty(), "{:?}", scene.leftover_sandboxes());
    assert!(processes_mentioning(&sock).is_empty());
    assert!(processes_mentioning(&scene.scratch.display().to_string()).is_empty());
    let c = config.display().to_string();
    let (out, _) = drcheck_e2e::drcheck(&["--config", &c, "history", "--json"], &scene.env(), Duration::from_secs(30));
    let h: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(h["runs"][0]["result"], "aborted", "{h}\n{}", d.stderr_text());
}

#[test]
fn two_daemons_on_one_history_store_never_verify_a_target_at_once() {
    let scene = Scene::start();
    let (p1, p2) = (free_port(), free_port());
    // Both fire every two seconds; a run takes longer than that.
    let c1 = daemon_config(&scene, p1, None, "schedule = \"*/2 * * * * *\"");
    let c2 = daemon_config(&scene, p2, None, "schedule = \"*/2 * * * * *\"");
    let mut d1 = Daemon::start(&c1, p1, &scene.env());
    let mut d2 = Daemon::start(&c2, p2, &scene.env());
    let deadline = Instant::now() + Duration::from_secs(90);
    while runs(p1).iter().filter(|r| r["result"] == "passed").count() < 3 {
        assert!(Instant::now() < deadline, "fewer than 3 runs in 90 s");
        std::thread::sleep(Duration::from_millis(500));
    }
    d1.terminate(Duration::from_secs(60));
    d2.terminate(Duration::from_secs(60));
    let c = c1.display().to_string();
    let (out, _) = drcheck_e2e::drcheck(
        &["--config", &c, "history", "--json", "--limit", "100"],
        &scene.env(),
        Duration::from_secs(30),
    );
    let h: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut spans: Vec<(String, String)> = h["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["started_at"].as_str().unwrap().to_string(), r["finished_at"].as_str().unwrap().to_string()))
        .collect();
    spans.sort();
    assert!(spans.len() >= 3, "{spans:?}");
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "runs overlap: {:?} and {:?}", w[0], w[1]);
    }
}

#[test]
fn sighup_reloads_the_config_and_keeps_the_old_one_if_the_new_one_is_bad() {
    let scene = Scene::start();
    let port = free_port();
    let config = daemon_config(&scene, port, None, "");
    let good = std::fs::read_to_string(&config).unwrap();
    let mut d = Daemon::start(&config, port, &scene.env());
    let auth = [("Authorization", "Bearer tok-123")];
    assert_eq!(http_request(port, "POST", "/api/v1/targets/renamed/verify", &auth, "").0, 404);

    let reloaded = |port| -> Option<f64> {
        let m = drcheck_e2e::http_get(port, "/metrics");
        m.lines().find_map(|l| l.strip_prefix("drcheck_config_last_reload_successful ")?.parse().ok())
    };
    assert_eq!(reloaded(port), Some(1.0));
    std::fs::write(&config, good.replace("rpo = ", "rpoo = ")).unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while reloaded(port) != Some(0.0) {
        assert!(Instant::now() < deadline, "a failed reload is not in the metrics");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(http_request(port, "GET", "/healthz", &[], "").0, 200, "still serving on the old config");
    assert_eq!(http_request(port, "POST", "/api/v1/targets/renamed/verify", &auth, "").0, 404);

    std::fs::write(&config, good.replace("name = \"orders\"", "name = \"renamed\"")).unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while http_request(port, "POST", "/api/v1/targets/renamed/verify", &auth, "").0 != 202 {
        assert!(Instant::now() < deadline, "the new config was not loaded");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(reloaded(port), Some(1.0), "a good reload sets it back");
    let (status, _) = d.terminate(Duration::from_secs(60));
    assert!(status.success());
    // The failure said in one line, with why.
    let text = d.stderr_text();
    let line = text.lines().find(|l| l.contains("config reload failed")).expect("a line");
    assert!(line.contains("rpoo"), "one line says why: {text}");
}

#[test]
fn a_target_without_a_success_goes_stale_and_a_passing_run_resolves_it() {
    let scene = Scene::start();
    let hook = drcheck_e2e::recorder::Recorder::start(200);
    let port = free_port();
    let config = daemon_config(&scene, port, None, "stale_after = \"2s\"");
    let text = std::fs::read_to_string(&config).unwrap()
        + &format!("[[alert]]\nkind = \"webhook\"\nurl = \"{}\"\n", hook.url());
    std::fs::write(&config, text).unwrap();
    let mut d = Daemon::start(&config, port, &scene.env());
    let stale = |state: &str| {
        hook.requests().iter().any(|r| {
            let b: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
            b["alertname"] == "DrcheckVerificationStale" && b["state"] == state
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stale("firing") {
        assert!(Instant::now() < deadline, "no stale alert: {:?}", hook.requests().len());
        std::thread::sleep(Duration::from_millis(200));
    }
    let auth = [("Authorization", "Bearer tok-123")];
    assert_eq!(http_request(port, "POST", "/api/v1/targets/orders/verify", &auth, "").0, 202);
    let deadline = Instant::now() + Duration::from_secs(90);
    while !stale("resolved") {
        assert!(Instant::now() < deadline, "the stale alert was never resolved");
        std::thread::sleep(Duration::from_millis(200));
    }
    d.terminate(Duration::from_secs(60));
}

/// Tearing sandboxes down (stopping a server, deleting its cluster) is blocking work: it
/// runs off the async runtime, so on two cores `/healthz` still answers within a second
/// while two sandboxes of a larger backup are torn down at once.
#[test]
fn healthz_answers_within_a_second_while_two_sandboxes_are_torn_down() {
    let scene = Scene::start();
    scene.upload_big_backup();
    let port = free_port();
    let config = daemon_config(&scene, port, None, "");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "\n[daemon]\nmax_concurrent_restores = 2\n[[target]]\nname = \"orders-copy\"\nprimary = \"{}\"\nstorage = \"backups\"\nprefix = \"orders/\"\nrto = \"10m\"\nrpo = \"26h\"\n",
        scene.spec().primary
    ));
    std::fs::write(&config, text).unwrap();
    let mut d = Daemon::start(&config, port, &scene.env());
    let auth = [("Authorization", "Bearer tok-123")];
    for t in ["orders", "orders-copy"] {
        let (status, body) = http_request(port, "POST", &format!("/api/v1/targets/{t}/verify"), &auth, "");
        assert_eq!(status, 202, "{t}: {body}");
    }
    // Probe /healthz every 50 ms until both runs are recorded and their sandboxes gone.
    let mut worst = Duration::ZERO;
    let mut probes = 0;
    let mut saw_teardown = false;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let t0 = Instant::now();
        let (status, _) = http_request(port, "GET", "/healthz", &[], "");
        let took = t0.elapsed();
        assert_eq!(status, 200);
        worst = worst.max(took);
        probes += 1;
        let left = scene.leftover_sandboxes().len();
        let recorded = ["orders", "orders-copy"]
            .iter()
            .filter(|t| {
                let (s, body) = http_request(port, "GET", &format!("/api/v1/runs?target={t}&limit=5"), &auth, "");
                s == 200 && body.contains("\"result\"")
            })
            .count();
        if left > 0 && recorded > 0 {
            saw_teardown = true;
        }
        if recorded == 2 && left == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "runs not finished in 180 s: {}", d.stderr_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("healthz: {probes} probes, worst {worst:?}, saw a teardown: {saw_teardown}");
    assert!(probes > 20, "only {probes} probes: the runs were not observed");
    assert!(
        worst < Duration::from_secs(1),
        "/healthz took {worst:?} during the teardowns (saw teardown: {saw_teardown})"
    );
    let (status, _) = d.terminate(Duration::from_secs(60));
    assert!(status.success(), "{status}: {}", d.stderr_text());
    let c = config.display().to_string();
    let (out, _) = drcheck_e2e::drcheck(&["--config", &c, "history", "--json"], &scene.env(), Duration::from_secs(30));
    let h: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let passed = h["runs"].as_array().unwrap().iter().filter(|r| r["result"] == "passed").count();
    assert_eq!(passed, 2, "{h}");
}

/// Issue 26: at its default log level the daemon says what it is doing — start-up
/// (version, config, listen address, each target's next run), each run's start and
/// verdict, a reload, the shutdown — at INFO, and WARN is for what needs a person.
#[test]
fn the_daemon_speaks_at_info_by_default() {
    let scene = Scene::start();
    let port = free_port();
    let config = daemon_config(&scene, port, None, "schedule = \"0 3 * * *\"");
    let mut d = Daemon::start_default_logging(&config, port, &scene.env());
    let auth = [("Authorization", "Bearer tok-123")];
    let (status, body) = http_request(port, "POST", "/api/v1/targets/orders/verify", &auth, "");
    assert_eq!(status, 202, "{body}");
    let run_id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["run_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(90);
    while http_request(port, "GET", &format!("/api/v1/runs/{run_id}"), &auth, "").0 != 200 {
        assert!(Instant::now() < deadline, "run {run_id} never recorded");
        std::thread::sleep(Duration::from_millis(200));
    }
    d.signal(nix::sys::signal::Signal::SIGHUP);
    std::thread::sleep(Duration::from_millis(500));
    let (status, _) = d.terminate(Duration::from_secs(60));
    assert!(status.success());
    let log = d.stderr_text();
    let line = |needle: &str| {
        log.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no {needle:?} line in:\n{log}")).to_string()
    };
    let start = line("daemon listening");
    assert!(start.contains("INFO") && start.contains(&format!("127.0.0.1:{port}")), "{start}");
    assert!(start.contains(env!("CARGO_PKG_VERSION")) && start.contains(&config.display().to_string()), "{start}");
    assert!(line("scheduled").contains("next_run="), "{log}");
    assert!(line("verification started").contains(&run_id), "{log}");
    let finished = line("verification finished");
    assert!(finished.contains("INFO") && finished.contains("result=\"passed\""), "{finished}");
    // Logs and findings agree: a pass over nothing is logged as the skip it is recorded as.
    let lo = log.lines().find(|l| l.contains("validator finished") && l.contains("validator=large_objects"));
    assert!(lo.is_some_and(|l| l.contains("status=\"skipped\"") || l.contains("status=skipped")), "{log}");
    for needle in ["config reloaded", "shutting down"] {
        assert!(line(needle).contains("INFO"), "{log}");
    }
    assert!(!log.contains("WARN"), "nothing here needs a person:\n{log}");
}
