//! End-to-end: the recovery window is proven backup by backup. With `select =
//! "least-proven"` each run restores the restorable backup whose last pass is oldest
//! (never-proven ones first, newest of those first); the report's `coverage`, the
//! `drcheck_backups_*` gauges and `backups list`'s `last_proven_at` say how much of the
//! retention has been proven within `prove_within`.

use drcheck_e2e::scenario::Scene;
use drcheck_e2e::{Daemon, drcheck, free_port, http_get, only_run, stderr, stdout};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

fn sample(exposition: &str, name: &str) -> Option<f64> {
    exposition
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains("target=\"orders\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn least_proven_proves_every_backup_in_turn_and_says_how_much_is_proven() {
    let scene = Scene::start();
    // Three backups: the scene's (orders-1) and two newer ones, a second apart.
    for n in [2, 3] {
        std::thread::sleep(Duration::from_millis(1100));
        scene.primary.psql("orders", &format!("insert into customers values ({}, 'newer')", 1000 + n));
        let dump = scene.root.path().join(format!("orders-{n}.dump"));
        scene.primary.dump("orders", &dump, &[]);
        scene.s3.upload(&dump, &scene.bucket, &format!("orders/orders-{n}.dump"));
    }
    let textfile = scene.root.path().join("drcheck.prom");
    let port = free_port();
    let mut spec = scene.spec();
    spec.extra_target = format!(
        "select = \"least-proven\"\nprove_within = \"30d\"\n[target.validators]\nenabled = [\"amcheck\"]\n\
         [metrics]\ntextfile = \"{}\"\nlisten = \"127.0.0.1:{port}\"\n",
        textfile.display()
    );
    let path = scene.config(&spec);
    // Issue 32: proofs outlive run history — two runs kept, three backups proven in turn.
    let text = std::fs::read_to_string(&path).unwrap().replacen("[state]\n", "[state]\nkeep_runs = 2\n", 1);
    std::fs::write(&path, text).unwrap();
    let c = path.display().to_string();
    let mut chosen = Vec::new();
    let mut newest_backup_at = None;
    for run_no in 1..=4u64 {
        let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
        assert_eq!(out.status.code(), Some(0), "run {run_no}: {}", stderr(&out));
        let run = only_run(&out);
        chosen.push(run["backup"]["key"].as_str().unwrap().to_string());
        assert_eq!(run["coverage"]["restorable"], 3, "run {run_no}: {run}");
        assert_eq!(run["coverage"]["proven"], run_no.min(3), "run {run_no}: {run}");
        assert_eq!(run["coverage"]["prove_within_seconds"], 30.0 * 86400.0, "{run}");
        let exposition = std::fs::read_to_string(&textfile).unwrap();
        assert_eq!(sample(&exposition, "drcheck_backups_restorable"), Some(3.0), "{exposition}");
        assert_eq!(sample(&exposition, "drcheck_backups_proven"), Some(run_no.min(3) as f64), "{exposition}");
        assert_eq!(sample(&exposition, "drcheck_backups_unproven"), Some(3.0 - run_no.min(3) as f64), "{exposition}");
        // Issue 32: proving an older backup never moves the freshness gauge back (it moved
        // back, and DrcheckRPOMissed fired, on the second run).
        let at = sample(&exposition, "drcheck_backup_timestamp_seconds").expect("backup timestamp");
        let first = *newest_backup_at.get_or_insert(at);
        assert_eq!(at, first, "run {run_no} ({}) moved the newest backup's time", chosen[run_no as usize - 1]);
    }
    assert_eq!(
        chosen,
        ["orders/orders-3.dump", "orders/orders-2.dump", "orders/orders-1.dump", "orders/orders-3.dump"],
        "each backup once, newest first, then the one proven longest ago"
    );

    let (out, _) = drcheck(&["--config", &c, "backups", "list", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let backups = listing["targets"][0]["backups"].as_array().unwrap();
    let proven =
        |key: &str| backups.iter().find(|b| b["key"] == key).unwrap()["last_proven_at"].as_str().map(str::to_string);
    let (p1, p3) = (proven("orders/orders-1.dump").unwrap(), proven("orders/orders-3.dump").unwrap());
    assert!(proven("orders/orders-2.dump").is_some(), "{listing}");
    assert!(p3 > p1, "orders-3 was proven again last: {listing}");
    let (out, _) = drcheck(&["--config", &c, "backups", "list"], &scene.env(), LIMIT);
    assert!(stdout(&out).contains("proven 20"), "{}", stdout(&out));

    // The daemon's status page and metrics say it too, from the history.
    let mut d = Daemon::start(std::path::Path::new(&c), port, &scene.env());
    let page = http_get(port, "/");
    let metrics = http_get(port, "/metrics");
    d.terminate(Duration::from_secs(30));
    assert!(page.contains("3 of 3 within 30days"), "{page}");
    assert_eq!(sample(&metrics, "drcheck_backups_unproven"), Some(0.0), "{metrics}");

    // The evidence report: per target, N of M proven and each backup's last pass.
    let (out, _) = drcheck(&["--config", &c, "report", "--since", "1d", "--format", "json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let evidence: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cov = &evidence["evidence"]["targets"][0]["coverage"];
    assert_eq!((cov["restorable"].as_u64(), cov["proven"].as_u64()), (Some(3), Some(3)), "{evidence}");
    let listed = cov["backups"].as_array().unwrap();
    assert_eq!(listed.len(), 3, "{cov}");
    assert!(listed.iter().all(|b| b["last_proven_at"].is_string() && b["stopped_at"].is_string()), "{cov}");
    let (out, _) = drcheck(&["--config", &c, "report", "--since", "1d", "--format", "markdown"], &scene.env(), LIMIT);
    assert!(stdout(&out).contains("Recovery window: 3 of 3 backups proven within 30days"), "{}", stdout(&out));
}

/// With `select = "latest"` the coverage still counts: one backup of three proven, the
/// others taken on faith — the gauge that `DrcheckBackupsUnproven` watches.
#[test]
fn latest_alone_leaves_older_backups_unproven_and_says_so() {
    let scene = Scene::start();
    std::thread::sleep(Duration::from_millis(1100));
    let dump = scene.root.path().join("orders-2.dump");
    scene.primary.dump("orders", &dump, &[]);
    scene.s3.upload(&dump, &scene.bucket, "orders/orders-2.dump");
    let mut spec = scene.spec();
    spec.extra_target = "[target.validators]\nenabled = [\"amcheck\"]\n".into();
    let c = scene.config(&spec).display().to_string();
    for _ in 0..2 {
        let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let run = only_run(&out);
        assert_eq!(run["backup"]["key"], "orders/orders-2.dump");
        assert_eq!(run["coverage"]["restorable"], 2, "{run}");
        assert_eq!(run["coverage"]["proven"], 1, "{run}");
    }
    let (out, _) = drcheck(&["--config", &c, "backups", "list"], &scene.env(), LIMIT);
    let text = stdout(&out);
    assert!(text.contains("orders/orders-1.dump") && text.contains("never proven"), "{text}");
}
