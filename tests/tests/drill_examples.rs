//! The example runbooks in `runbooks/examples/`, run as a user would run them, against
//! PostgreSQL clusters (and moto, and a Pushgateway) that the tests start.

use drcheck_e2e::drills::{PgCtlGuard, journal, psql, run_as, socket_url, step, wait_for};
use drcheck_e2e::scenario::Scene;
use drcheck_e2e::{PG_BIN, PromService, TempRoot, as_pg, drcheck, free_port, sample, stderr, stdout};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(300);

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../runbooks/examples").join(name)
}

fn var(k: &str, v: impl std::fmt::Display) -> String {
    format!("{k}={v}")
}

/// With `DRCHECK_DRILL_REPORTS=DIR`, keeps a copy of a drill's report and journal
/// (the temporary directory goes away with the test) for a person to look at.
fn keep(report: &std::path::Path) {
    if let Ok(dir) = std::env::var("DRCHECK_DRILL_REPORTS") {
        std::fs::create_dir_all(&dir).unwrap();
        for p in [report.to_path_buf(), report.with_extension("json")] {
            std::fs::copy(&p, std::path::Path::new(&dir).join(p.file_name().unwrap())).unwrap();
        }
    }
}

fn all_passed(j: &serde_json::Value) {
    for section in [&j["steady_state"]["before"], &j["steps"], &j["steady_state"]["after"], &j["rollbacks"]] {
        for s in section.as_array().unwrap() {
            assert_eq!(s["status"], "passed", "{s:#}");
        }
    }
}

#[test]
fn restore_from_backup_example_drill() {
    let scene = Scene::start();
    let gateway = PromService::start(&scene.root, "prometheus-pushgateway", &[]);
    let textfile = scene.root.path().join("drcheck.prom");
    let mut spec = scene.spec();
    // The application writes orders during the drill: compare only what the backup holds.
    spec.extra_target = format!(
        "[target.as_of]\n\"public.orders\" = \"placed_at\"\n[metrics]\npushgateway = \"{}\"\ntextfile = \"{}\"",
        gateway.url(),
        textfile.display()
    );
    let config = scene.config(&spec);
    let app_conf = scene.root.path().join("database.url");
    let original = format!("{}\n", socket_url(&scene.primary.sock, scene.primary.port, "orders"));
    std::fs::write(&app_conf, &original).unwrap();
    let dir = scene.root.pg_dir("restored");
    let new_data = dir.join("data");
    let guard = PgCtlGuard::default();
    guard.watch(&new_data);
    let report = scene.root.path().join("restore-drill.html");
    let vars = [
        var("new_data", new_data.display()),
        var("socket_dir", dir.display()),
        var("new_port", free_port()),
        var("run_as", run_as()),
        var("app_conf", app_conf.display()),
        var("work_dir", scene.root.path().join("work").display()),
    ];
    let (c, f, r) = (config.display().to_string(), example("restore-from-backup.yaml"), report.display().to_string());
    let f = f.display().to_string();
    let mut args = vec!["--config", c.as_str(), "drill", "run", f.as_str(), "--report", r.as_str()];
    for v in &vars {
        args.extend(["--var", v.as_str()]);
    }
    let (out, took) = drcheck(&args, &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "stdout: {}\nstderr: {}", stdout(&out), stderr(&out));
    keep(&report);
    let j = journal(&report);
    assert_eq!(j["result"], "completed", "{j:#}");
    assert_eq!(j["hypothesis_held"], true);
    all_passed(&j);
    assert_eq!(j["rto"]["complete"], true);
    assert_eq!(j["rto"]["met"], true);
    let rto = j["rto"]["measured_seconds"].as_f64().unwrap();
    assert!(rto > 0.0 && rto < took.as_secs_f64(), "rto {rto}");
    assert_eq!(j["rpo"]["met"], true);
    assert_eq!(step(&j, "verify the latest backup before betting on it")["verification"]["result"], "passed");
    assert!(
        step(&j, "writes work through the application's config")["output_tail"].as_str().unwrap().contains("written")
    );
    // The drill wrote only to a temporary table of its own (the application's orders are
    // untouched), and the rollbacks removed everything it made: the config is back, the
    // restored cluster stopped and its directory removed — so it runs again.
    assert_eq!(std::fs::read_to_string(&app_conf).unwrap(), original);
    assert_eq!(scene.primary.psql("orders", "select count(*) from orders"), "5000");
    assert!(!new_data.exists(), "the rollback removes the restored cluster");
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(
        html.contains("<svg") && html.contains("RTO budget 15m runs on past the drill") && html.contains("COMPLETED")
    );
    // The drill's metrics went to the Pushgateway and the textfile directory.
    let pushed = gateway.get("/metrics");
    assert!(!pushed.contains(r#"job="drcheck","#), "only the drill pushed to this gateway: {pushed}");
    let label = r#"runbook="restore-from-backup""#;
    let completed = r#"result="completed",runbook="restore-from-backup""#;
    assert_eq!(sample(&pushed, "drcheck_drill_runs_total", completed), Some(1.0), "{pushed}");
    assert_eq!(sample(&pushed, "drcheck_drill_rto_met", label), Some(1.0));
    assert!(sample(&pushed, "drcheck_drill_duration_seconds", label).unwrap() > rto);
    let drill_textfile = scene.root.path().join("drcheck-drill-restore-from-backup.prom");
    let exposition = std::fs::read_to_string(&drill_textfile).unwrap();
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    promtool.stdin.take().unwrap().write_all(exposition.as_bytes()).unwrap();
    let checked = promtool.wait_with_output().unwrap();
    assert!(checked.status.success(), "promtool: {}{}", stdout(&checked), stderr(&checked));
}

/// A primary with a `ledger` table and a streaming replica built by `pg_basebackup -R`,
/// both managed with `pg_ctl`, and an application config file pointing at the primary.
struct FailoverScene {
    root: TempRoot,
    _guard: PgCtlGuard,
    url1: String,
    url2: String,
    app_conf: PathBuf,
    report: PathBuf,
    vars: Vec<String>,
}

fn failover_scene() -> FailoverScene {
    let root = TempRoot::new();
    let dir = root.pg_dir("cluster");
    let (primary, replica) = (dir.join("primary"), dir.join("replica"));
    let (p1, p2) = (free_port(), free_port());
    let guard = PgCtlGuard::default();
    let url1 = guard.init_and_start(&primary, &dir, p1, &dir.join("primary.log"));
    psql(&url1, "create table ledger (id bigserial primary key, note text not null)");
    psql(&url1, "insert into ledger (note) select 'row ' || g from generate_series(1, 1000) g");
    let out = as_pg(&mut Command::new(format!("{PG_BIN}/pg_basebackup")))
        .args(["-d", &url1, "-D", &replica.display().to_string(), "-R", "-X", "stream", "-c", "fast"])
        .output()
        .unwrap();
    assert!(out.status.success(), "pg_basebackup: {}", stderr(&out));
    let url2 = guard.start(&replica, &dir, p2, &dir.join("replica.log"));
    wait_for(&url1, "select count(*) from pg_stat_replication where state = 'streaming'", "1", Duration::from_secs(30));
    let app_conf = root.path().join("database.url");
    std::fs::write(&app_conf, format!("{url1}\n")).unwrap();
    let report = root.path().join("failover-drill.html");
    let vars = vec![
        var("socket_dir", dir.display()),
        var("primary_data", primary.display()),
        var("primary_port", p1),
        var("replica_data", replica.display()),
        var("replica_port", p2),
        var("log_dir", dir.display()),
        var("run_as", run_as()),
        var("app_conf", app_conf.display()),
    ];
    FailoverScene { root, _guard: guard, url1, url2, app_conf, report, vars }
}

impl FailoverScene {
    /// Runs the example with the scene's variables, then `extra` ones (later wins).
    fn drill(&self, extra: &[String]) -> (std::process::Output, serde_json::Value) {
        let (f, r) = (example("primary-failover.yaml").display().to_string(), self.report.display().to_string());
        let mut args = vec!["drill", "run", f.as_str(), "--report", r.as_str()];
        for v in self.vars.iter().chain(extra) {
            args.extend(["--var", v.as_str()]);
        }
        let (out, _) = drcheck(&args, &[], LIMIT);
        keep(&self.report);
        let j = journal(&self.report);
        (out, j)
    }
}

#[test]
fn primary_failover_example_drill() {
    let scene = failover_scene();
    let (url1, url2, app_conf) = (&scene.url1, &scene.url2, &scene.app_conf);
    let (out, j) = scene.drill(&[]);
    assert_eq!(out.status.code(), Some(0), "stdout: {}\nstderr: {}", stdout(&out), stderr(&out));
    assert_eq!(j["result"], "completed", "{j:#}");
    assert_eq!(j["hypothesis_held"], true);
    all_passed(&j);
    // 1000 rows, the steady-state write, the marker: every committed row survived.
    let kept = step(&j, "no committed row was lost");
    assert!(kept["detail"].as_str().unwrap().contains("1002 rows"), "{kept:#}");
    let rto = j["rto"]["measured_seconds"].as_f64().unwrap();
    assert!(rto > 0.0 && rto < 60.0, "time to writes after promotion: {rto}");
    assert_eq!(j["rto"]["met"], true);
    // The application now writes to the promoted replica…
    assert_eq!(std::fs::read_to_string(app_conf).unwrap().trim(), url2);
    assert_eq!(psql(url2, "select pg_is_in_recovery()"), "f");
    // …and the rollback rebuilt the old primary as its streaming replica.
    assert_eq!(psql(url1, "select pg_is_in_recovery()"), "t");
    assert_eq!(psql(url2, "select count(*) from pg_stat_replication where state = 'streaming'"), "1");
    psql(url2, "insert into ledger (note) values ('replicated after the drill')");
    wait_for(
        url1,
        "select count(*) from ledger where note = 'replicated after the drill'",
        "1",
        Duration::from_secs(30),
    );
    let html = std::fs::read_to_string(&scene.report).unwrap();
    assert!(html.contains("promote the replica") && html.contains("RTO measured"));
    // Self-contained: nothing to fetch, nothing to run.
    for outside in ["<script", "src=", "href=", "@import", "url("] {
        assert!(!html.contains(outside), "the report refers to something outside itself: {outside}");
    }
}

#[test]
fn primary_failover_example_rolls_back_when_the_promotion_fails() {
    // The promotion fails (a wrong data directory): the drill stops, and the rollback
    // brings the old primary back, which its replica follows again.
    let scene = failover_scene();
    let missing = scene.root.path().join("no-such-data-directory");
    let (out, j) = scene.drill(&[var("replica_data", missing.display())]);
    assert_eq!(out.status.code(), Some(1), "stdout: {}\nstderr: {}", stdout(&out), stderr(&out));
    assert_eq!(j["result"], "failed");
    assert_eq!(step(&j, "the primary fails")["status"], "passed");
    assert_eq!(step(&j, "promote the replica")["status"], "failed");
    assert_eq!(step(&j, "point the application at the new primary")["status"], "skipped");
    assert_eq!(j["rto"]["complete"], false);
    assert_eq!(j["rto"]["met"], false);
    for r in j["rollbacks"].as_array().unwrap() {
        assert_eq!(r["status"], "passed", "{r:#}");
    }
    assert!(
        step(&j, "re-attach the old primary as a replica of the new one")["output_tail"]
            .as_str()
            .unwrap()
            .contains("no failover happened")
    );
    // The old primary serves writes again, the application still points at it, and the
    // replica streams from it.
    assert_eq!(psql(&scene.url1, "select pg_is_in_recovery()"), "f");
    assert_eq!(std::fs::read_to_string(&scene.app_conf).unwrap().trim(), scene.url1);
    psql(&scene.url1, "insert into ledger (note) values ('after the rollback')");
    wait_for(
        &scene.url2,
        "select count(*) from ledger where note = 'after the rollback'",
        "1",
        Duration::from_secs(30),
    );
}

/// Issue 26: the example drill runs against the demo exactly as the demo prints it —
/// its dry run, then the real run — and the demo's one stop command ends it all.
#[test]
fn the_example_drill_runs_against_the_kept_demo_as_printed() {
    struct Stop(PathBuf);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = Command::new("bash").arg(self.0.join("stop.sh")).output();
        }
    }
    let root = TempRoot::new();
    let demo_dir = root.path().join("demo");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/demo.sh");
    let out = Command::new("bash")
        .arg(&script)
        .env("DRCHECK_BIN", drcheck_e2e::drcheck_bin())
        .env("DEMO_KEEP", "1")
        .env("DEMO_DIR", &demo_dir)
        .output()
        .unwrap();
    let _stop = Stop(demo_dir.clone());
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}");
    let printed = text
        .lines()
        .find_map(|l| l.strip_prefix("demo: a DR drill against it (add --dry-run to see its plan first): "))
        .expect("the demo prints the drill's command")
        .to_string();
    let run = |extra: &str| {
        // From a directory of the test's: a drill writes its report where it runs.
        let out =
            Command::new("bash").arg("-c").arg(format!("{printed}{extra}")).current_dir(root.path()).output().unwrap();
        (out.status.code(), format!("{}{}", stdout(&out), stderr(&out)))
    };
    let (code, plan) = run(" --dry-run");
    assert_eq!(code, Some(0), "{plan}");
    assert!(plan.contains("pg_restore") && plan.contains(&demo_dir.display().to_string()), "{plan}");
    let (code, done) = run("");
    assert_eq!(code, Some(0), "{done}");
    assert!(done.to_lowercase().contains("completed"), "{done}");
    assert!(!demo_dir.join("restored/data").exists(), "the drill's rollback removes its cluster");

    // Again, twice in a row, on the store's newest backup: a gzip'd dump, then one
    // gzip'd and age-encrypted (the demo's config given the age identity). Each is
    // fetched decoded, restored, checked, and cleaned up for the next run.
    let config = std::fs::read_to_string(demo_dir.join("drcheck.toml")).unwrap();
    let endpoint = config.lines().find_map(|l| l.strip_prefix("endpoint = ")).unwrap().trim_matches('"').to_string();
    let sh = |cmd: &str| {
        let out = Command::new("bash").arg("-c").arg(cmd).output().unwrap();
        assert!(out.status.success(), "{cmd}: {}", stderr(&out));
        stdout(&out)
    };
    let identity = sh("age-keygen 2>/dev/null");
    let identity = identity.lines().find(|l| l.starts_with("AGE-SECRET-KEY-")).unwrap().to_string();
    let recipient = sh(&format!("printf '%s' '{identity}' | age-keygen -y")).trim().to_string();
    let dump = demo_dir.join("orders.dump").display().to_string();
    let gzipped = sh(&format!("gzip -c {dump} | base64 -w0"));
    let encrypted = sh(&format!("gzip -c {dump} | age -r {recipient} | base64 -w0"));
    let bytes = |b64: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.decode(b64.trim()).unwrap()
    };
    let (gzipped, encrypted) = (bytes(&gzipped), bytes(&encrypted));
    std::fs::write(demo_dir.join("drcheck.toml"), format!("{config}[target.decrypt]\nage_identity = \"{identity}\"\n"))
        .unwrap();
    for (name, bytes, layers) in
        [("z1.dump.gz", gzipped, "gzip undone"), ("z2.dump.gz.age", encrypted, "age, gzip undone")]
    {
        let file = root.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        let up = Command::new("aws")
            .args(["--endpoint-url", &endpoint, "s3", "cp", &file.display().to_string()])
            .arg(format!("s3://demo-backups/orders/{name}"))
            .envs([
                ("AWS_ACCESS_KEY_ID", "demo"),
                ("AWS_SECRET_ACCESS_KEY", "demo"),
                ("AWS_DEFAULT_REGION", "us-east-1"),
            ])
            .output()
            .unwrap();
        assert!(up.status.success(), "{}", stderr(&up));
        std::thread::sleep(Duration::from_millis(1100));
        let (code, done) = run("");
        assert_eq!(code, Some(0), "{name}: {done}");
        assert!(done.to_lowercase().contains("completed"), "{name}: {done}");
        let mut journals: Vec<PathBuf> = std::fs::read_dir(root.path())
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        journals.sort_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap());
        let j: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(journals.last().unwrap()).unwrap()).unwrap();
        let fetched = step(&j, "fetch the latest backup, decompressed and decrypted");
        assert!(fetched["output_tail"].as_str().unwrap_or_default().contains(layers), "{name}: {fetched:#}");
        assert!(!demo_dir.join("restored/data").exists(), "{name}: the rollback removes its cluster");
    }
    let reports = std::fs::read_dir(root.path()).unwrap().filter_map(Result::ok);
    assert!(reports.into_iter().any(|e| e.file_name().to_string_lossy().starts_with("drill-restore-from-backup-")));
}
