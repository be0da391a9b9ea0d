//! End-to-end: drcheck talks to moto's S3 server through a fault-injecting proxy.
//! Transient faults are retried and the run passes; persistent faults end in a clear
//! error in bounded time; 403 and 404 are never retried.

use drcheck_e2e::faults::{Fault, FaultProxy, Match, Rule};
use drcheck_e2e::scenario::Scene;
use drcheck_e2e::{drcheck, only_run, stderr};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

fn rule(when: Match, fault: Fault, times: Option<u32>) -> Rule {
    Rule { when, fault, times }
}

/// Small parts, so one backup is many ranged GETs.
fn config(scene: &Scene, proxy: &FaultProxy) -> String {
    let mut spec = scene.spec();
    spec.endpoint = proxy.endpoint();
    let path = scene.config(&spec);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("path_style = true", "path_style = true\npart_size = \"64KiB\"\nconcurrency = 3");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// A store that gives up after 4 s of failures (the default is 2 minutes).
fn short_window(path: String) -> String {
    let text =
        std::fs::read_to_string(&path).unwrap().replace("concurrency = 3", "concurrency = 3\nretry_window = \"4s\"");
    std::fs::write(&path, text).unwrap();
    path
}

fn object_gets(proxy: &FaultProxy) -> usize {
    proxy.requests().iter().filter(|r| r.starts_with("GET ") && r.contains("/orders/")).count()
}

#[test]
fn transient_faults_are_retried_and_the_run_passes() {
    let scene = Scene::start();
    let proxy = FaultProxy::start(
        scene.s3.port,
        vec![
            rule(Match::Any, Fault::Status(503, "SlowDown"), Some(2)),
            rule(Match::ObjectGet, Fault::Status(503, "SlowDown"), Some(2)),
            rule(Match::ObjectGet, Fault::ResetMidBody, Some(1)),
            rule(Match::ObjectGet, Fault::TruncateBody, Some(1)),
            rule(Match::ObjectGet, Fault::Delay(Duration::from_millis(700)), Some(1)),
        ],
    );
    let c = config(&scene, &proxy);
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", drcheck_e2e::stdout(&out), stderr(&out));
    assert_eq!(only_run(&out)["result"], "passed");
    assert_eq!(proxy.injected(), 7, "every planned fault was injected: {:?}", proxy.requests());
    // Every retry is logged, with the attempt and the delay.
    let err = stderr(&out);
    assert!(
        err.contains("transient failure, retrying") && err.contains("attempt") && err.contains("delay_ms"),
        "{err}"
    );
    let size = std::fs::metadata(&scene.dump).unwrap().len() as usize;
    assert!(object_gets(&proxy) > size.div_ceil(65536), "faulted parts were fetched again: {:?}", proxy.requests());

    // The store down for 20 s in the middle of the download (every connection reset):
    // asked again within the storage's retry_window (2 minutes by default), the run passes.
    let proxy =
        FaultProxy::start(scene.s3.port, vec![rule(Match::ObjectGet, Fault::DownFor(Duration::from_secs(20)), None)]);
    let c = config(&scene, &proxy);
    let (out, took) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", drcheck_e2e::stdout(&out), stderr(&out));
    assert!(took >= Duration::from_secs(20), "the outage was waited out: {took:?}");
    assert!(proxy.injected() >= 5, "the outage was met: {}", proxy.injected());
    let err = stderr(&out);
    assert!(err.contains("retry_window_s=120") && err.contains("elapsed_s="), "{err}");
}

#[test]
fn persistent_faults_end_in_a_clear_error_in_bounded_time() {
    let scene = Scene::start();
    let proxy = FaultProxy::start(scene.s3.port, vec![rule(Match::ObjectGet, Fault::Status(503, "SlowDown"), None)]);
    let c = short_window(config(&scene, &proxy));
    let (out, took) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(took < Duration::from_secs(60), "took {took:?}");
    let run = only_run(&out);
    assert_eq!(run["result"], "error");
    assert_eq!(run["error"]["stage"], "fetch");
    let msg = run["error"]["message"].as_str().unwrap();
    assert!(msg.contains("503") && msg.contains("SlowDown"), "{msg}");
    assert!(msg.contains(&format!("127.0.0.1:{}", proxy.port)), "names the endpoint: {msg}");
    // How long it tried, against the window it was given.
    assert!(msg.contains("gave up after") && msg.contains("(retry_window = 4s)"), "{msg}");
    // One retry layer: 6 attempts a part at least, the breaker (open after 5 failures in a
    // row) keeping the rest from the store; the SDK's own retries stay off.
    let gets = object_gets(&proxy);
    assert!(gets <= 3 * 12, "{gets} object GETs: {:?}", proxy.requests());

    // Truncated bodies every time: also transient, also bounded.
    let proxy = FaultProxy::start(scene.s3.port, vec![rule(Match::ObjectGet, Fault::TruncateBody, None)]);
    let c = short_window(config(&scene, &proxy));
    let (out, took) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(took < Duration::from_secs(60), "took {took:?}");
    assert_eq!(only_run(&out)["error"]["stage"], "fetch");
}

#[test]
fn forbidden_and_missing_objects_are_not_retried() {
    let scene = Scene::start();
    for (code, s3code) in [(403, "AccessDenied"), (404, "NoSuchKey")] {
        let proxy = FaultProxy::start(scene.s3.port, vec![rule(Match::ObjectGet, Fault::Status(code, s3code), None)]);
        let mut spec = scene.spec();
        spec.endpoint = proxy.endpoint();
        let c = scene.config(&spec).display().to_string();
        let (out, took) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
        assert!(took < Duration::from_secs(20), "{code}: took {took:?}");
        let msg = only_run(&out)["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains(&code.to_string()) && msg.contains(s3code), "{msg}");
        // The whole backup fits in one part: one GET, never repeated.
        assert_eq!(object_gets(&proxy), 1, "{code} was retried: {:?}", proxy.requests());
    }
}
