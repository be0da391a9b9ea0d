//! End-to-end: alerts through the outbox to a real Alertmanager and to webhooks —
//! firing then resolved, delivered once per state after a sink comes back, dead
//! letters for a sink that never does, signed and idempotent webhooks.

use drcheck_e2e::recorder::Recorder;
use drcheck_e2e::scenario::{ConfigSpec, Scene};
use drcheck_e2e::{PromService, drcheck, free_port, stderr, stdout};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

/// A config whose run fails (the backup is older than a 1s RPO) or passes.
fn spec(scene: &Scene, failing: bool, alerts: &str) -> ConfigSpec {
    let mut s = scene.spec();
    if failing {
        // Older than a millisecond: every backup misses it, at once — no waiting.
        s.rpo = "1ms".into();
    }
    s.extra_target = alerts.to_string();
    s
}

fn verify(scene: &Scene, spec: &ConfigSpec) -> std::process::Output {
    let c = scene.config(spec).display().to_string();
    drcheck(&["--config", &c, "verify"], &scene.env(), LIMIT).0
}

fn listing(scene: &Scene, spec: &ConfigSpec) -> serde_json::Value {
    let c = scene.config(spec).display().to_string();
    let (out, _) = drcheck(&["--config", &c, "alerts", "list"], &scene.env(), LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Active alerts at Alertmanager for target orders: (alertname, fingerprint, state).
fn am_alerts(am: &PromService) -> Vec<(String, String, String)> {
    let v: serde_json::Value = serde_json::from_str(&am.get("/api/v2/alerts")).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .filter(|a| a["labels"]["target"] == "orders")
        .map(|a| {
            (
                a["labels"]["alertname"].as_str().unwrap().to_string(),
                a["fingerprint"].as_str().unwrap().to_string(),
                a["status"]["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn alertmanager_gets_the_firing_alert_then_its_resolution() {
    let scene = Scene::start();
    let am = PromService::alertmanager(&scene.root, free_port());
    let sinks = format!("[[alert]]\nkind = \"alertmanager\"\nurl = \"{}\"", am.url());
    let out = verify(&scene, &spec(&scene, true, &sinks));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let firing = am_alerts(&am);
    let names: Vec<&str> = firing.iter().map(|(n, _, _)| n.as_str()).collect();
    assert!(names.contains(&"DrcheckRPOMissed") && names.contains(&"DrcheckVerificationFailed"), "{firing:?}");
    assert!(firing.iter().all(|(_, _, s)| s == "active"), "{firing:?}");

    let passing = spec(&scene, false, &sinks);
    let out = verify(&scene, &passing);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let l = listing(&scene, &passing);
    let after = am_alerts(&am);
    assert!(
        after.iter().all(|(_, _, s)| s != "active"),
        "resolved alerts are no longer active: {after:?}\n{l}\n{}",
        am.get("/api/v2/alerts")
    );
    assert_eq!(l["pending"].as_array().unwrap().len(), 0, "{l}");
    assert_eq!(l["delivered"], 4, "two firing and two resolved: {l}");
}

#[test]
fn a_sink_that_is_down_gets_each_alert_once_per_state_after_it_comes_back() {
    let scene = Scene::start();
    let port = free_port();
    let sinks = format!("[[alert]]\nkind = \"alertmanager\"\nurl = \"http://127.0.0.1:{port}\"");
    let failing = spec(&scene, true, &sinks);
    let out = verify(&scene, &failing);
    assert_eq!(out.status.code(), Some(1), "the verdict stands when alerting fails: {}", stderr(&out));
    assert!(stderr(&out).contains("not delivered yet"), "{}", stderr(&out));
    assert_eq!(listing(&scene, &failing)["pending"].as_array().unwrap().len(), 2);

    // The sink comes back; the pending alerts go out.
    let am = PromService::alertmanager(&scene.root, port);
    let c = scene.config(&failing).display().to_string();
    let (out, _) = drcheck(&["--config", &c, "alerts", "deliver", "--seconds", "60"], &scene.env(), LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((r["delivered"].as_u64(), r["pending"].as_u64()), (Some(2), Some(0)), "{r}");
    let first = am_alerts(&am);
    assert_eq!(first.len(), 2, "{first:?}");

    // Still failing: the alerts are re-sent, and Alertmanager still holds one of each.
    let out = verify(&scene, &failing);
    assert_eq!(out.status.code(), Some(1));
    let again = am_alerts(&am);
    assert_eq!(again.len(), 2, "{again:?}");
    let mut a = first.clone();
    let mut b = again.clone();
    a.sort();
    b.sort();
    assert_eq!(a, b, "same labels, same fingerprints");
}

#[test]
fn a_sink_that_never_recovers_ends_in_the_dead_letters() {
    let scene = Scene::start();
    let prom = scene.root.path().join("m.prom");
    let sinks = format!(
        "[[alert]]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:{}/hook\"\nmax_attempts = 2\n[metrics]\ntextfile = \"{}\"",
        free_port(),
        prom.display()
    );
    let failing = spec(&scene, true, &sinks);
    let out = verify(&scene, &failing);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let l = listing(&scene, &failing);
    assert_eq!(l["pending"].as_array().unwrap().len(), 0, "{l}");
    let dead = l["dead_letters"].as_array().unwrap();
    assert_eq!(dead.len(), 2, "{l}");
    assert_eq!(dead[0]["attempts"], 2, "{l}");
    let text = std::fs::read_to_string(&prom).unwrap();
    assert_eq!(
        drcheck_e2e::sample(&text, "drcheck_alerts_dead_lettered_total", "sink=\"webhook\""),
        Some(2.0),
        "{text}"
    );
}

#[test]
fn webhooks_are_signed_and_idempotent_per_alert_and_state() {
    use hmac::{Hmac, Mac};
    let scene = Scene::start();
    let hook = Recorder::start(200);
    let sinks = format!("[[alert]]\nkind = \"webhook\"\nurl = \"{}\"\nsecret = \"s3cr3t\"", hook.url());
    let failing = spec(&scene, true, &sinks);
    assert_eq!(verify(&scene, &failing).status.code(), Some(1));
    assert_eq!(verify(&scene, &failing).status.code(), Some(1));
    let out = verify(&scene, &spec(&scene, false, &sinks));
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    let reqs = hook.requests();
    let rpo: Vec<(serde_json::Value, String)> = reqs
        .iter()
        .map(|r| {
            let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"s3cr3t").unwrap();
            mac.update(&r.body);
            let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
            assert_eq!(r.header("X-Drcheck-Signature"), Some(expected.as_str()), "signed");
            (serde_json::from_slice(&r.body).unwrap(), r.header("Idempotency-Key").unwrap().to_string())
        })
        .filter(|(b, _): &(serde_json::Value, String)| b["alertname"] == "DrcheckRPOMissed")
        .collect();
    let states: Vec<&str> = rpo.iter().map(|(b, _)| b["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["firing", "firing", "resolved"], "{rpo:?}");
    assert_eq!(rpo[0].1, rpo[1].1, "a re-sent firing alert keeps its key");
    assert_ne!(rpo[1].1, rpo[2].1, "the resolution has its own key");
    assert_eq!(rpo[2].0["target"], "orders");
}
