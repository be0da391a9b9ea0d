//! End-to-end: `drcheck verify` against a real primary, moto's S3 server and real
//! pg_dump/pg_restore. Each test builds its own scene and tears it down.

use drcheck_e2e::scenario::{ConfigSpec, Scene};
use drcheck_e2e::{
    TempRoot, Throttle, assert_all_validators_pass, drcheck, free_port, only_run, processes_mentioning, stderr, stdout,
    validator,
};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(120);

/// `sha256sum FILE`, the way a backup job writes a sidecar.
fn sha256sum(path: &std::path::Path) -> Vec<u8> {
    let out = std::process::Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success());
    out.stdout
}

fn cfg(path: &std::path::Path) -> String {
    path.display().to_string()
}

#[test]
fn a_good_backup_passes_is_recorded_and_listed() {
    let scene = Scene::start();
    // A checksum sidecar uploaded after the dump must not be mistaken for the backup,
    // and is checked against it.
    let sidecar = scene.root.path().join("orders-1.dump.sha256");
    std::fs::write(&sidecar, sha256sum(&scene.dump)).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    scene.s3.upload(&sidecar, &scene.bucket, "orders/orders-1.dump.sha256");
    let config = scene.config(&scene.spec());
    let c = cfg(&config);

    let (out, _) = drcheck(&["--config", &c, "verify", "--target", "orders", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "stdout: {}\nstderr: {}", stdout(&out), stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["result"], "passed");
    assert_eq!(run["target"], "orders");
    assert_eq!(run["backup"]["key"], "orders/orders-1.dump");
    assert_eq!(run["backup"]["format"], "custom");
    assert_eq!(run["backup"]["size_bytes"], std::fs::metadata(&scene.dump).unwrap().len());
    assert!(run["started_at"].as_str().unwrap().ends_with('Z'));
    let phases: Vec<&str> = run["phases"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(phases, ["sandbox", "fetch", "restore", "validate"]);
    assert_eq!(run["restore"]["profile"], "production");
    assert_eq!(run["restore"]["server_major"], 15);
    // Issue 36: what the restore wrote against what the scratch disk can write.
    let restore = &run["restore"];
    assert!(restore["bytes_written"].as_u64().unwrap() > std::fs::metadata(&scene.dump).unwrap().len(), "{run}");
    assert!(restore["disk_write_bps"].as_f64().unwrap() > 1e6, "{run}");
    let fraction = restore["disk_fraction"].as_f64().unwrap();
    let bps = restore["write_bps"].as_f64().unwrap() / restore["disk_write_bps"].as_f64().unwrap();
    assert!((fraction - bps).abs() < 1e-9, "{run}");
    assert!(
        ["disk", "network or decompression", "restore"].contains(&restore["limited_by"].as_str().unwrap()),
        "{run}"
    );
    assert_eq!(run["rto"]["met"], true);
    assert!(run["rto"]["measured_seconds"].as_f64().unwrap() > 0.0);
    assert_eq!(run["rto"]["target_seconds"], 600.0);
    // One restore: no RTO forecast yet, and the report says what it needs (issue 50).
    let forecast = &run["rto"]["forecast"];
    assert_eq!(forecast["outlook"], "insufficient", "{run}");
    assert_eq!(forecast["runs"], 1, "{run}");
    assert!(forecast.get("breach_at").is_none(), "{run}");
    assert_eq!(run["rpo"]["met"], true);
    assert!(run["rpo"]["backup_age_seconds"].as_f64().unwrap() < 600.0);
    assert_all_validators_pass(&run);
    assert!(validator(&run, "schema")["detail"].as_str().unwrap().contains("(3 tables)"), "{run}");
    assert!(validator(&run, "checksums")["detail"].as_str().unwrap().contains("6500 rows"), "{run}");
    assert!(run["primary_queries"]["count"].as_u64().unwrap() > 5, "{run}");
    assert!(run.get("error").is_none());
    assert!(scene.leftover_sandboxes().is_empty());

    // The human summary says the same.
    let (out, _) = drcheck(&["--config", &c, "verify"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("orders: PASSED"), "{text}");
    assert!(text.contains("RTO") && text.contains("met"), "{text}");

    // Both runs are in the history, newest first.
    let (out, _) = drcheck(&["--config", &c, "history", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let hist: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = hist["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1]["run_id"], run["run_id"]);
    // The validators and the store's two findings (immutability, pinned).
    assert_eq!(runs[1]["validators"].as_array().unwrap().len(), 13);
    let (out, _) = drcheck(&["--config", &c, "history", "--target", "orders"], &scene.env(), LIMIT);
    assert!(stdout(&out).contains(run["run_id"].as_str().unwrap()), "{}", stdout(&out));

    // The store listing shows the backup as latest and hides the sidecar.
    let (out, _) = drcheck(&["--config", &c, "backups", "list", "--target", "orders"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("latest orders/orders-1.dump"), "{text}");
    assert!(!text.contains(".sha256"), "{text}");

    // The concurrent fetcher delivers the exact bytes.
    let copy = scene.root.path().join("fetched.dump");
    let (out, _) = drcheck(
        &["--config", &c, "backups", "fetch", "--target", "orders", "--output", &copy.display().to_string()],
        &scene.env(),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(std::fs::read(&copy).unwrap() == std::fs::read(&scene.dump).unwrap(), "fetched bytes differ");
}

#[test]
fn an_explicit_backup_key_is_verified() {
    let scene = Scene::start();
    // An order placed after the first backup: with `as_of`, counts and checksums only
    // look at rows written at or before the verified backup's time.
    std::thread::sleep(Duration::from_millis(1100));
    scene.primary.psql("orders", "insert into orders (customer_id, total) values (1, 1)");
    let newer = scene.root.path().join("newer.dump");
    scene.primary.dump("orders", &newer, &[]);
    scene.s3.upload(&newer, &scene.bucket, "orders/orders-2.dump");
    let mut spec = scene.spec();
    spec.extra_target = "[target.as_of]\n\"public.orders\" = \"placed_at\"".into();
    let c = cfg(&scene.config(&spec));
    let (out, _) = drcheck(
        &["--config", &c, "verify", "--target", "orders", "--backup", "orders/orders-1.dump", "--json"],
        &scene.env(),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(only_run(&out)["backup"]["key"], "orders/orders-1.dump");
    let (out, _) = drcheck(
        &["--config", &c, "verify", "--target", "orders", "--backup", "orders/nope.dump", "--json"],
        &scene.env(),
        LIMIT,
    );
    // A key the store does not hold is the caller's mistake (exit 2), not a failed run.
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--backup \"orders/nope.dump\": no such backup"), "{}", stderr(&out));
}

#[test]
fn rows_the_backup_lacks_fail_row_counts_and_rows_added_since_are_counted() {
    // A primary that tracks commit timestamps: what it wrote after a dump is told apart.
    let scene = Scene::start_tracking();
    // Issue 32: rows added after the dump are the primary's changes since — counted,
    // never a failure (this failed with "primary 600, restored 500").
    scene.primary.psql("orders", "insert into customers select g, 'new' from generate_series(501, 600) g");
    let c = cfg(&scene.config(&scene.spec()));
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    let run = only_run(&out);
    assert_eq!(out.status.code(), Some(0), "{run}\n{}", stderr(&out));
    let counts = validator(&run, "row_counts");
    assert_eq!(counts["status"], "passed", "{counts}");
    assert_eq!(counts["measurements"]["rows_changed_since"], 100.0, "{counts}");
    // A dump that lacks rows the primary held, unchanged, when it was taken: failed.
    let lacking = scene.root.path().join("lacking.dump");
    scene.primary.tampered_dump("orders", "delete from customers where id > 500", &lacking);
    std::thread::sleep(Duration::from_millis(1100));
    scene.s3.upload(&lacking, &scene.bucket, "orders/orders-2.dump");
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["result"], "failed");
    assert_eq!(validator(&run, "schema")["status"], "passed", "{run}");
    assert_eq!(validator(&run, "row_counts")["status"], "failed");
    let detail = validator(&run, "row_counts")["detail"].as_str().unwrap();
    assert!(
        detail.contains("public.customers: the primary holds 600 rows unchanged since the copy's point, the copy 500"),
        "{detail}"
    );
    assert!(!detail.contains("public.orders"), "{detail}");
}

#[test]
fn a_backup_that_does_not_match_its_sha256_sidecar_fails_at_fetch() {
    let scene = Scene::start();
    let other = scene.root.path().join("other");
    std::fs::write(&other, b"something else").unwrap();
    let sidecar = scene.root.path().join("sidecar");
    std::fs::write(&sidecar, sha256sum(&other)).unwrap();
    scene.s3.upload(&sidecar, &scene.bucket, "orders/orders-1.dump.sha256");
    let c = cfg(&scene.config(&scene.spec()));
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["error"]["stage"], "fetch", "{run}");
    assert!(run["error"]["message"].as_str().unwrap().contains("sha256 mismatch"), "{run}");
}

#[test]
fn a_truncated_dump_fails_at_restore() {
    let scene = Scene::start();
    let bytes = std::fs::read(&scene.dump).unwrap();
    let truncated = scene.root.path().join("truncated.dump");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    scene.s3.upload(&truncated, &scene.bucket, "orders/orders-2.dump");
    let c = cfg(&scene.config(&scene.spec()));
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["result"], "failed");
    assert_eq!(run["backup"]["key"], "orders/orders-2.dump");
    assert_eq!(run["error"]["stage"], "restore");
    let msg = run["error"]["message"].as_str().unwrap();
    assert!(msg.contains("pg_restore failed"), "{msg}");
    assert!(msg.contains("pg_restore: error"), "the tail of pg_restore's stderr: {msg}");
    assert_eq!(run["rto"]["met"], serde_json::Value::Null);
    assert!(scene.leftover_sandboxes().is_empty());
}

#[test]
fn a_file_that_is_not_a_dump_fails_naming_what_it_is() {
    let scene = Scene::start();
    let fake = scene.root.path().join("fake.dump");
    std::fs::write(&fake, b"this is a text file, not a PostgreSQL backup\n".repeat(20)).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    scene.s3.upload(&fake, &scene.bucket, "orders/orders-2.dump");
    let c = cfg(&scene.config(&scene.spec()));
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["error"]["stage"], "restore");
    assert!(run["error"]["message"].as_str().unwrap().contains("found unknown data"), "{run}");
    assert_eq!(run["backup"]["format"], "unknown");
}

#[test]
fn a_backup_older_than_the_rpo_fails() {
    let scene = Scene::start();
    let mut spec = scene.spec();
    // An RPO every backup is older than, set rather than waited for.
    spec.rpo = "1ms".into();
    let c = cfg(&scene.config(&spec));
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["result"], "failed");
    assert_eq!(run["rpo"]["met"], false);
    assert!(run["rpo"]["backup_age_seconds"].as_f64().unwrap() > 0.001, "{run}");
    assert_eq!(run["rpo"]["target_seconds"], 0.001);
    // The restore still ran and was checked: the backup is restorable, just stale.
    assert_eq!(run["rto"]["met"], true);
    assert_eq!(validator(&run, "schema")["status"], "passed");
}

#[test]
fn a_restore_slower_than_the_rto_misses_it() {
    let scene = Scene::start();
    let mut spec = scene.spec();
    // abort_factor 100000 keeps the deadline far away; only the objective is missed.
    spec.rto = "1ms".into();
    spec.extra_target = "abort_factor = 100000.0".into();
    let c = cfg(&scene.config(&spec));
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["rto"]["met"], false);
    assert!(run["rto"]["measured_seconds"].as_f64().unwrap() > 0.001);
    assert!(run.get("error").is_none(), "an objective miss is not an error: {run}");
}

#[test]
fn a_restore_past_the_deadline_is_cancelled() {
    let scene = Scene::start();
    // 20 KB/s makes the ~150 KB download take seconds; rto 1s × abort_factor 1 cancels it.
    let slow = Throttle::start(scene.s3.port, 20_000);
    let mut spec = scene.spec();
    spec.endpoint = slow.endpoint();
    spec.rto = "1s".into();
    spec.extra_target = "abort_factor = 1.0".into();
    let c = cfg(&scene.config(&spec));
    let (out, took) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["result"], "failed");
    assert_eq!(run["rto"]["met"], false);
    assert_eq!(run["error"]["stage"], "restore");
    assert!(run["error"]["message"].as_str().unwrap().contains("cancelled"), "{run}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(scene.leftover_sandboxes().is_empty());
}

#[test]
fn a_primary_that_is_down_skips_comparisons_but_still_verifies_the_restore() {
    let mut scene = Scene::start();
    scene.primary.stop();
    // A verdict says what ran: without its comparisons the run is incomplete…
    let c = cfg(&scene.config(&scene.spec()));
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["result"], "error", "{run}");
    assert!(run["error"]["message"].as_str().unwrap().contains("could not run"), "{run}");
    // …unless the target accepts best-effort comparisons, which the report then says.
    let mut spec = scene.spec();
    spec.extra_target.push_str("comparisons = \"best-effort\"\n");
    let c = cfg(&scene.config(&spec));
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["result"], "passed");
    assert!(run["degraded"].as_str().unwrap().contains("best-effort"), "{run}");
    assert_eq!(run["rto"]["met"], true);
    for name in ["schema", "row_counts", "checksums"] {
        let v = validator(&run, name);
        assert_eq!(v["status"], "skipped", "{v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(detail.contains("primary unavailable") && detail.contains("127.0.0.1"), "{detail}");
    }
    for name in ["amcheck", "full_read", "sequences", "indexes"] {
        assert_eq!(validator(&run, name)["status"], "passed", "self-checks need no primary: {run}");
    }
}

#[test]
fn a_config_typo_exits_2_naming_the_key_and_line() {
    let root = TempRoot::new();
    let path = root.path().join("drcheck.toml");
    std::fs::write(
        &path,
        "[storage.b]\nkind = \"filesystem\"\npath = \"/srv\"\n[[target]]\nname = \"orders\"\nstorage = \"b\"\nrto = \"30m\"\nrpoo = \"26h\"\n",
    )
    .unwrap();
    let (out, _) = drcheck(&["--config", &cfg(&path), "verify"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("rpoo") && err.contains("line 8"), "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");

    std::fs::write(&path, "[storage.b]\nkind = \"filesystem\"\npath = \"/srv\"\n[[target]]\nname = \"orders\"\nstorage = \"b\"\nrto = \"30 minutes-ish\"\nrpo = \"26h\"\n").unwrap();
    let (out, _) = drcheck(&["--config", &cfg(&path), "config", "check"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("target[0].rto") && err.contains(":7"), "{err}");

    let (out, _) = drcheck(&["--config", &cfg(&root.path().join("missing.toml")), "verify"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("missing.toml"), "{}", stderr(&out));
}

#[test]
fn an_unknown_target_is_a_usage_error() {
    let root = TempRoot::new();
    let path = root.path().join("drcheck.toml");
    std::fs::write(&path, "[storage.b]\nkind = \"filesystem\"\npath = \"/srv\"\n[[target]]\nname = \"orders\"\nstorage = \"b\"\nrto = \"30m\"\nrpo = \"26h\"\n").unwrap();
    let (out, _) = drcheck(&["--config", &cfg(&path), "verify", "--target", "ordrs"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("\"ordrs\"") && stderr(&out).contains("orders"), "{}", stderr(&out));
}

#[test]
fn a_dead_s3_endpoint_exits_3_in_bounded_time() {
    let scene = Scene::start();
    let mut spec = scene.spec();
    let dead = free_port();
    spec.endpoint = format!("http://127.0.0.1:{dead}");
    // Bounded by the storage's retry_window (issue 34: a blip must not fail a nightly run,
    // so the default waits two minutes); a short one here.
    let c = cfg(&scene.config(&spec));
    let text =
        std::fs::read_to_string(&c).unwrap().replace("path_style = true", "path_style = true\nretry_window = \"5s\"");
    std::fs::write(&c, text).unwrap();
    let (out, took) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let run = only_run(&out);
    assert_eq!(run["result"], "error");
    assert_eq!(run["error"]["stage"], "select");
    let msg = run["error"]["message"].as_str().unwrap();
    assert!(msg.contains(&format!("127.0.0.1:{dead}")), "{msg}");
    assert!(msg.contains("(retry_window = 5s)"), "{msg}");
    let (out, took) = drcheck(&["--config", &c, "backups", "list"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(stderr(&out).contains(&format!("127.0.0.1:{dead}")), "{}", stderr(&out));
}

/// Issue 26: a bucket that does not exist and a primary role without its grant — errors
/// a new install meets first — each say what to fix, in one line, without Rust's debug
/// formatting.
#[test]
fn a_wrong_bucket_and_a_missing_grant_say_what_to_fix() {
    let scene = Scene::start();
    let good = scene.config(&scene.spec());
    let text = std::fs::read_to_string(&good)
        .unwrap()
        .replace(&format!("bucket = \"{}\"", scene.bucket), "bucket = \"no-such-bucket-26\"");
    let wrong = scene.root.path().join("wrong-bucket.toml");
    std::fs::write(&wrong, text).unwrap();
    let (out, _) = drcheck(&["--config", &cfg(&wrong), "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let run = only_run(&out);
    let msg = run["error"]["message"].as_str().unwrap();
    assert!(msg.contains("NoSuchBucket") && msg.contains("check the storage's `bucket`"), "{msg}");
    assert!(!msg.contains("Some(") && !msg.contains("{ "), "no debug formatting: {msg}");

    scene.primary.psql("postgres", "revoke pg_read_all_data from verifier");
    let (out, _) = drcheck(&["--config", &cfg(&good), "verify", "--json"], &scene.env(), LIMIT);
    let run = only_run(&out);
    let errors: Vec<String> = run["validators"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["status"] == "error")
        .map(|v| v["detail"].as_str().unwrap().to_string())
        .collect();
    assert!(!errors.is_empty(), "{run}");
    assert!(
        errors.iter().any(|d| d.contains("permission denied") && d.contains("GRANT pg_read_all_data")),
        "{errors:#?}"
    );
    // PostgreSQL's words with their SQLSTATE — never the line of its C source sqlx appends.
    assert!(errors.iter().any(|d| d.contains("(SQLSTATE 42501)")), "{errors:#?}");
    assert!(errors.iter().all(|d| !d.contains(" at line ")), "{errors:#?}");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));

    // Issue 34: with comparisons = "best-effort" a missing grant is what it documents —
    // the comparisons skipped, the verdict degraded — not exit 3.
    let mut spec = scene.spec();
    spec.extra_target.push_str("comparisons = \"best-effort\"\n");
    let best = scene.config(&spec);
    let (out, _) = drcheck(&["--config", &cfg(&best), "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stdout(&out), stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["result"], "passed", "{run}");
    assert!(run["degraded"].as_str().unwrap_or_default().contains("refused to drcheck's role"), "{run}");
    let skipped = run["validators"].as_array().unwrap().iter().filter(|v| v["status"] == "skipped").count();
    assert!(skipped >= errors.len(), "{run}");
    assert!(run["validators"].as_array().unwrap().iter().all(|v| v["status"] != "error"), "{run}");
}

/// Issue 26: a one-shot run whose store keeps failing opens the circuit for the targets
/// after — and says it gave up, not that a next attempt (which never comes) is due.
#[test]
fn a_one_shot_run_with_an_open_circuit_says_it_gave_up() {
    let scene = Scene::start();
    let mut spec = scene.spec();
    spec.endpoint = format!("http://127.0.0.1:{}", free_port());
    for i in 2..=7 {
        spec.extra_target.push_str(&format!(
            "[[target]]\nname = \"orders{i}\"\nstorage = \"backups\"\nprefix = \"orders/\"\nrto = \"10m\"\nrpo = \"26h\"\n"
        ));
    }
    let c = cfg(&scene.config(&spec));
    let text =
        std::fs::read_to_string(&c).unwrap().replace("path_style = true", "path_style = true\nretry_window = \"3s\"");
    std::fs::write(&c, text).unwrap();
    let (out, took) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // Once the window has passed for the store, the targets after give up at once.
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let messages: Vec<String> = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["error"]["message"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(messages.len(), 7, "{report}");
    assert!(messages.iter().any(|m| m.contains("retry_window = 3s")), "{messages:#?}");
    assert!(messages.iter().any(|m| m.contains("times in a row over")), "{messages:#?}");
    assert!(messages.iter().all(|m| !m.contains("next attempt")), "{messages:#?}");
}

#[test]
fn sigterm_during_a_restore_exits_promptly_and_leaves_nothing() {
    let scene = Scene::start();
    // A bigger dump behind a slow link keeps drcheck inside fetch+restore long enough.
    scene.upload_big_backup();
    let slow = Throttle::start(scene.s3.port, 500_000);
    let mut spec = scene.spec();
    spec.endpoint = slow.endpoint();
    let c = cfg(&scene.config(&spec));

    let mut cmd = std::process::Command::new(drcheck_e2e::drcheck_bin());
    cmd.args(["--config", &c, "verify", "--json"])
        .envs(drcheck_e2e::AWS_ENV)
        .env("ORDERS_PW", &scene.password)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let out_t = drcheck_e2e::proc::drain(child.stdout.take().unwrap());
    let err_t = drcheck_e2e::proc::drain(child.stderr.take().unwrap());

    // Wait until pg_restore is running against this run's sandbox.
    let Some(socket_dir) = scene.wait_for_pg_restore(Duration::from_secs(60)) else {
        let _ = child.kill();
        panic!("pg_restore never started; stderr: {}", String::from_utf8_lossy(&err_t.join().unwrap()));
    };
    let sent = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if sent.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("drcheck did not exit within 20s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = sent.elapsed();
    let out = std::process::Output { status, stdout: out_t.join().unwrap(), stderr: err_t.join().unwrap() };
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(took < Duration::from_secs(10), "exit took {took:?}");
    let run = only_run(&out);
    assert_eq!(run["result"], "aborted");
    assert!(run["error"]["message"].as_str().unwrap().contains("interrupted"), "{run}");
    assert!(scene.leftover_sandboxes().is_empty(), "{:?}", scene.leftover_sandboxes());
    assert!(!std::path::Path::new(&socket_dir).exists(), "socket dir {socket_dir} left behind");
    let scratch = scene.scratch.display().to_string();
    assert!(processes_mentioning(&scratch).is_empty(), "{:?}", processes_mentioning(&scratch));
    assert!(processes_mentioning(&socket_dir).is_empty(), "{:?}", processes_mentioning(&socket_dir));

    // The aborted run is on record.
    let (out, _) = drcheck(&["--config", &c, "history", "--json"], &scene.env(), LIMIT);
    let hist: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hist["runs"][0]["result"], "aborted");
}

#[test]
fn the_primary_password_appears_in_no_output_report_or_history_row() {
    let scene = Scene::start();
    let pw = scene.password.clone();
    let c = cfg(&scene.config(&scene.spec()));
    let mut outputs = Vec::new();
    for args in [
        vec!["--config", &c, "-vv", "verify", "--json"],
        vec!["--config", &c, "-vv", "verify"],
        vec!["--config", &c, "config", "check"],
        vec!["--config", &c, "history", "--json"],
        vec!["--config", &c, "history"],
        vec!["--config", &c, "backups", "list", "--json"],
    ] {
        let (out, _) = drcheck(&args, &scene.env(), LIMIT);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        outputs.push((args.join(" "), stdout(&out) + &stderr(&out)));
    }
    // A wrong password must not leak either: it is refused, and the comparisons say so.
    let wrong = drcheck_e2e::unique("wrongpw");
    let (out, _) = drcheck(&["--config", &c, "-vv", "verify", "--json"], &[("ORDERS_PW", wrong.clone())], LIMIT);
    let run = only_run(&out);
    assert_eq!(validator(&run, "schema")["status"], "skipped");
    assert!(validator(&run, "schema")["detail"].as_str().unwrap().contains("password authentication failed"), "{run}");
    outputs.push(("verify with a wrong password".into(), stdout(&out) + &stderr(&out)));

    for (what, text) in &outputs {
        assert!(!text.contains(&pw), "{what} shows the password:\n{text}");
        assert!(!text.contains(&wrong), "{what} shows the wrong password:\n{text}");
    }
    // config check shows the password as the file writes it: a reference, never its value.
    assert!(outputs[2].1.contains("verifier:${ORDERS_PW}@127.0.0.1"), "config check: {}", outputs[2].1);
    for entry in std::fs::read_dir(scene.root.path()).unwrap().filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("history.db") {
            let bytes = std::fs::read(entry.path()).unwrap();
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains(&pw) && !text.contains(&wrong), "{name} holds a password");
        }
    }
}

#[test]
fn a_dump_from_a_server_version_without_binaries_names_the_version() {
    let scene = Scene::start();
    let mut bytes = std::fs::read(&scene.dump).unwrap();
    // Rewrite the dumped server's version in the archive header (same length).
    let at =
        bytes.windows(5).position(|w| w == b"15.18" || w.starts_with(b"15.")).expect("a 15.x version in the header");
    bytes[at..at + 2].copy_from_slice(b"99");
    let odd = scene.root.path().join("v99.dump");
    std::fs::write(&odd, bytes).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    scene.s3.upload(&odd, &scene.bucket, "orders/orders-2.dump");
    let c = cfg(&scene.config(&scene.spec()));
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let msg = only_run(&out)["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("PostgreSQL 99") && msg.contains("postgresql-99"), "{msg}");
}

#[test]
fn too_little_scratch_space_is_refused_before_fetching() {
    let scene = Scene::start();
    let c = scene.config(&scene.spec());
    let text = std::fs::read_to_string(&c).unwrap().replace("[sandbox]\n", "[sandbox]\nexpansion_factor = 1e15\n");
    std::fs::write(&c, text).unwrap();
    let (out, _) = drcheck(&["--config", &cfg(&c), "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["error"]["stage"], "sandbox");
    assert!(run["error"]["message"].as_str().unwrap().contains("not enough space"), "{run}");
}

#[test]
fn the_fast_profile_is_reported_and_leftovers_of_a_crashed_run_are_reaped() {
    let scene = Scene::start();
    // What a crashed run leaves: a sandbox directory in drcheck's private directory
    // whose owner process is gone.
    let private = scene.private_dir();
    std::fs::create_dir_all(&private).unwrap();
    std::fs::set_permissions(&private, std::os::unix::fs::PermissionsExt::from_mode(0o711)).unwrap();
    let leftover = private.join("sandbox-crashed");
    std::fs::create_dir_all(leftover.join("data")).unwrap();
    std::fs::write(private.join("sandbox-crashed.owner"), "999999999 12345\n\n").unwrap();
    let c = scene.config(&scene.spec());
    let text = std::fs::read_to_string(&c).unwrap().replace("[sandbox]\n", "[sandbox]\nprofile = \"fast\"\n");
    std::fs::write(&c, text).unwrap();
    let (out, _) = drcheck(&["--config", &cfg(&c), "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(only_run(&out)["restore"]["profile"], "fast");
    assert!(!leftover.exists(), "the crashed run's sandbox is still there");
}

#[test]
fn the_history_keeps_only_keep_runs_per_target() {
    let scene = Scene::start();
    let c = scene.config(&scene.spec());
    let text = std::fs::read_to_string(&c)
        .unwrap()
        .replace("[sandbox]\n", "[sandbox]\nexpansion_factor = 1.0\n")
        .replace("[state]\n", "[state]\nkeep_runs = 2\n");
    std::fs::write(&c, text).unwrap();
    let c = cfg(&c);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        ids.push(only_run(&out)["run_id"].as_str().unwrap().to_string());
    }
    let (out, _) = drcheck(&["--config", &c, "history", "--json"], &scene.env(), LIMIT);
    let h: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kept: Vec<&str> = h["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap()).collect();
    assert_eq!(kept, [ids[2].as_str(), ids[1].as_str()], "the two newest runs, newest first");
}

#[test]
fn the_history_store_can_be_a_shared_postgresql() {
    let scene = Scene::start();
    let pw = drcheck_e2e::unique("statepw");
    scene.primary.psql("postgres", &format!("create role drcheck_state login password '{pw}'"));
    scene.primary.psql("postgres", "create database drcheck_state owner drcheck_state");
    let hook = drcheck_e2e::recorder::Recorder::start(200);
    let mut spec = scene.spec();
    spec.extra_target = format!("[[alert]]\nkind = \"webhook\"\nurl = \"{}\"", hook.url());
    let c = scene.config(&spec);
    let state = scene.primary.url("drcheck_state", &pw, "drcheck_state");
    let text = std::fs::read_to_string(&c).unwrap();
    let text = text.replace(
        &text[text.find("url = \"sqlite").unwrap()..text.find("\n[sandbox]").unwrap()],
        &format!("url = \"{state}\""),
    );
    std::fs::write(&c, text).unwrap();
    let c = cfg(&c);

    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let first = only_run(&out)["run_id"].as_str().unwrap().to_string();
    // A failing run raises alerts through the same store.
    let failing = cfg(&scene.config(&ConfigSpec { rpo: "1ms".into(), ..spec }));
    let text = std::fs::read_to_string(&failing).unwrap();
    let text = text.replace(
        &text[text.find("url = \"sqlite").unwrap()..text.find("\n[sandbox]").unwrap()],
        &format!("url = \"{state}\""),
    );
    std::fs::write(&failing, text).unwrap();
    let (out, _) = drcheck(&["--config", &failing, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        hook.requests().iter().any(|r| String::from_utf8_lossy(&r.body).contains("DrcheckRPOMissed")),
        "alert delivered"
    );

    let (out, _) = drcheck(&["--config", &c, "history", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let h: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(h["runs"].as_array().unwrap().len(), 2, "{h}");
    assert_eq!(h["runs"][1]["run_id"], first.as_str());
    assert_eq!(h["runs"][0]["result"], "failed");
    let rows = scene.primary.psql("drcheck_state", "select count(*) from runs");
    assert_eq!(rows, "2", "the runs live in PostgreSQL");
    let (out, _) = drcheck(&["--config", &c, "config", "check"], &scene.env(), LIMIT);
    assert!(!drcheck_e2e::stdout(&out).contains(&pw), "the state password is redacted");
}

/// Issue 26: `--version` names the commit the binary was built from.
#[test]
fn the_version_names_the_commit() {
    let (out, _) = drcheck(&["--version"], &[], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0));
    let shown = stdout(&out);
    let commit = shown.split("(commit ").nth(1).and_then(|r| r.split(')').next()).unwrap_or_else(|| panic!("{shown}"));
    assert!(commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit()), "{shown}");
    let git = std::process::Command::new("git")
        .args(["cat-file", "-t", commit])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&git.stdout).trim(), "commit", "{commit} is a commit of this checkout");
}

/// Issue 26: no AWS credentials at all — one line that says what to set, no pages of
/// credential-provider warnings, no Rust debug formatting, no retries of what cannot
/// change, and exit 3.
#[test]
fn missing_aws_credentials_say_what_to_set() {
    let scene = Scene::start();
    let c = cfg(&scene.config(&scene.spec()));
    let home = scene.root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let bare = || {
        let mut cmd = std::process::Command::new(drcheck_e2e::drcheck_bin());
        cmd.args(["--config", &c, "backups", "list"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("ORDERS_PW", &scene.password);
        cmd
    };
    let (out, took) = drcheck_e2e::run_with_timeout(bare(), LIMIT);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("no AWS credentials") && err.contains("AWS_ACCESS_KEY_ID"), "{err}");
    assert!(!err.contains("ProviderError(") && !err.contains("DispatchFailure(") && !err.contains(" { "), "{err}");
    assert!(!err.contains("WARN"), "{err}");
    assert!(took < Duration::from_secs(20), "not retried: {took:?}");

    // Issue 34: an AWS_CONFIG_FILE that does not exist (the SDK warned of it at every
    // client, dozens of lines before the one that says what to set) and no instance
    // metadata: one line, naming the file, not retried for the storage's retry window.
    let mut cmd = bare();
    cmd.env("AWS_CONFIG_FILE", home.join("no-such-config")).env("AWS_EC2_METADATA_DISABLED", "true");
    let (out, took) = drcheck_e2e::run_with_timeout(cmd, LIMIT);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("no AWS credentials") && err.contains("no-such-config does not exist"), "{err}");
    assert!(!err.contains("WARN") && err.trim().lines().count() == 1, "{err}");
    assert!(took < Duration::from_secs(20), "not retried: {took:?}");
}

/// Issue 34: the validate phase has one deadline for all its validators
/// (`validators.phase_timeout`): a run's budget — its lease's TTL and a CronJob's
/// deadline — is made of it, so no number of validators or databases can outlast it.
#[test]
fn the_validate_phase_stops_at_its_deadline() {
    let scene = Scene::start();
    let mut spec = scene.spec();
    spec.extra_target =
        "[target.validators]\ntimeout = \"3s\"\nphase_timeout = \"3s\"\n[[target.check]]\nname = \"slow\"\n\
        sql = \"select pg_catalog.pg_sleep(5)::text || 'x'\"\nexpect = \"x\"\n"
            .into();
    let c = cfg(&scene.config(&spec));
    let (out, took) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let run = only_run(&out);
    let stopped: Vec<&serde_json::Value> = run["validators"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| {
            v["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("validate phase's deadline (validators.phase_timeout = 3s)")
        })
        .collect();
    assert!(!stopped.is_empty(), "{run}");
    assert!(stopped.iter().all(|v| v["status"] == "error"), "{run}");
    assert!(took < Duration::from_secs(40), "took {took:?}");
}

/// Issue 26: a wrong primary password names the primary's database (the URL's, not the
/// restored copy's) and says what to check.
#[test]
fn a_wrong_primary_password_says_what_to_check() {
    let scene = Scene::start();
    let mut spec = scene.spec();
    spec.primary = scene.primary.url("verifier", "not-the-password", "orders");
    spec.extra_target = "[target.validators]\nenabled = [\"row_counts\"]\n".into();
    let c = cfg(&scene.config(&spec));
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let run = only_run(&out);
    let msg = run["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("database \"orders\""), "{msg}");
    assert!(msg.contains("check the user and password in the target's primary URL"), "{msg}");
    assert!(!msg.contains("not-the-password") && !stderr(&out).contains("not-the-password"), "{msg}");
}

/// Issue 26: shell completions and a manual page come from the CLI itself, so they
/// cover every command and option there is.
#[test]
fn completions_and_the_manual_page_come_from_the_cli() {
    let root = TempRoot::new();
    let (out, _) = drcheck(&["completions", "bash"], &[], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let script = root.path().join("drcheck.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    let syntax = std::process::Command::new("bash").arg("-n").arg(&script).output().unwrap();
    assert!(syntax.status.success(), "{}", String::from_utf8_lossy(&syntax.stderr));
    let text = stdout(&out);
    for word in ["verify", "daemon", "backups", "--target", "--integrity-only", "completions"] {
        assert!(text.contains(word), "{word} missing from the bash completions");
    }
    for shell in ["zsh", "fish"] {
        let (out, _) = drcheck(&["completions", shell], &[], Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        assert!(stdout(&out).contains("verify"), "{shell}");
    }
    // No config is needed (and none is read) for either.
    let (out, _) = drcheck(&["--config", "/nonexistent.toml", "man"], &[], Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let man = stdout(&out);
    assert!(man.starts_with(".ie") || man.contains(".TH drcheck"), "{man}");
    for word in ["verify", "daemon", "DRCHECK_CONFIG"] {
        assert!(man.contains(word), "{word} missing from the manual page");
    }
    // Issue 34: every page a page names exists (`drcheck-verify(1)` was named, never made).
    let dir = root.path().join("man1");
    std::fs::create_dir_all(&dir).unwrap();
    let (out, _) = drcheck(
        &["--config", "/nonexistent.toml", "man", "--dir", &dir.display().to_string()],
        &[],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let pages: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(
        pages.contains(&"drcheck.1".to_string()) && pages.contains(&"drcheck-backups-fetch.1".to_string()),
        "{pages:?}"
    );
    let mut named = 0;
    for page in &pages {
        let text = std::fs::read_to_string(dir.join(page)).unwrap();
        for line in text.lines().filter(|l| l.starts_with("drcheck\\-") && l.ends_with("(1)")) {
            let file = format!("{}.1", line.trim_end_matches("(1)").replace("\\-", "-"));
            assert!(pages.contains(&file), "{page} names {line}, and there is no {file}");
            named += 1;
        }
    }
    assert!(named > 10, "the pages name their commands' pages: {named}");
}
