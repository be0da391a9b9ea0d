//! The reliability patterns pushed where production pushes them (issue 23): two
//! dispatchers on one outbox, a dispatcher that knows other sinks, alerts in order and
//! re-sent while they fire, reloads during a jitter window, a shutdown with queued runs,
//! drills that print bytes, time out, get three signals or SIGKILL, and SQLite
//! histories opened by two processes at once. Each test fails on the code before.

use drcheck_e2e::drills::{group_members, journal, runbook, spawn_drill, step, wait_for_file};
use drcheck_e2e::recorder::Recorder;
use drcheck_e2e::{Daemon, TempRoot, drcheck, free_port, http_get, http_request, make_world_enterable, sample, stderr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(120);

fn plain(body: &str) -> Vec<u8> {
    format!("--\n-- PostgreSQL database dump\n--\n\n-- Dumped from database version 15.18\n\n{body}").into_bytes()
}

/// A directory store, a scratch directory and a config writer over them.
struct Site {
    root: TempRoot,
    store: PathBuf,
    scratch: PathBuf,
}

impl Site {
    fn new() -> Site {
        let root = TempRoot::new();
        let store = root.path().join("store");
        let scratch = root.path().join("scratch");
        std::fs::create_dir_all(&store).unwrap();
        std::fs::create_dir_all(&scratch).unwrap();
        make_world_enterable(&scratch);
        Site { root, store, scratch }
    }

    fn history(&self) -> PathBuf {
        self.root.path().join("history.db")
    }

    fn put(&self, key: &str, bytes: &[u8]) {
        std::fs::write(self.store.join(key), bytes).unwrap();
    }

    /// A config: `global` lines (sections of their own), then `targets` (each a name and
    /// its extra lines; the backup is `<name>.sql`).
    fn config(&self, file: &str, global: &str, targets: &[(&str, &str)]) -> PathBuf {
        let mut text = format!(
            "[state]\nurl = \"sqlite://{}\"\n[sandbox]\nscratch_dir = \"{}\"\n[storage.local]\nkind = \"filesystem\"\npath = \"{}\"\n{global}\n",
            self.history().display(),
            self.scratch.display(),
            self.store.display()
        );
        for (name, extra) in targets {
            text.push_str(&format!(
                "[[target]]\nname = \"{name}\"\nstorage = \"local\"\nprefix = \"{name}.\"\nrto = \"10m\"\nrpo = \"3650d\"\n{extra}\n"
            ));
        }
        let path = self.root.path().join(file);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn run(&self, config: &Path, args: &[&str]) -> std::process::Output {
        let c = config.display().to_string();
        let mut all = vec!["--config", &c];
        all.extend_from_slice(args);
        drcheck(&all, &[], LIMIT).0
    }

    fn listing(&self, config: &Path) -> serde_json::Value {
        let out = self.run(config, &["alerts", "list"]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Rows straight into the outbox (columns every version of it has): `(sink,
    /// target, alertname, state, created_at, next_attempt_at, attempts)`.
    fn queue(&self, rows: &[(&str, &str, &str, &str, &str, &str, i64)]) {
        let mut script = String::from("import sqlite3, json, sys, uuid\ncon = sqlite3.connect(sys.argv[1])\n");
        for (sink, target, name, state, created, next, attempts) in rows {
            let key = format!("{target}-{name}-{state}");
            let payload = serde_json::json!({
                "alertname": name, "target": target, "severity": "critical", "state": state,
                "summary": format!("{name} for {target}"), "description": "queued by the test", "run_id": null,
                "starts_at": "2026-12-01T00:00:00.000Z",
                "ends_at": if *state == "resolved" { serde_json::json!("2026-12-01T00:10:00.000Z") } else { serde_json::Value::Null },
                "dedup_key": key,
            });
            script.push_str(&format!(
                "con.execute(\"insert into alert_outbox (id, sink, target, alertname, state, dedup_key, run_id, payload, attempts, next_attempt_at, created_at) values (?, ?, ?, ?, ?, ?, null, ?, ?, ?, ?)\", (str(uuid.uuid4()), {sink:?}, {target:?}, {name:?}, {state:?}, {key:?}, {payload:?}, {attempts}, {next:?}, {created:?}))\n",
                payload = payload.to_string()
            ));
        }
        script.push_str("con.commit()\n");
        let out = std::process::Command::new("python3").args(["-c", &script]).arg(self.history()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

fn ts(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn webhook(name: &str, url: &str) -> String {
    format!("[[alert]]\nkind = \"webhook\"\nname = \"{name}\"\nurl = \"{url}\"\nmax_attempts = 50\n")
}

/// (state, dedup key) of each request a webhook receiver got, in order.
fn received(r: &Recorder) -> Vec<(String, String)> {
    r.requests()
        .iter()
        .map(|q| {
            let v: serde_json::Value = serde_json::from_slice(&q.body).unwrap_or_default();
            (v["state"].as_str().unwrap_or_default().to_string(), q.header("Idempotency-Key").unwrap_or("").to_string())
        })
        .collect()
}

/// Two `alerts deliver` at once on one history: each of 80 alerts reaches the sink
/// once, both finish cleanly, and the history records 80 deliveries.
#[test]
fn two_dispatchers_deliver_each_alert_once() {
    let site = Site::new();
    let hook = Recorder::start(200);
    let config = site.config("c.toml", &webhook("hook", &format!("http://127.0.0.1:{}/", hook.port)), &[("t", "")]);
    assert!(site.run(&config, &["history"]).status.success());
    let now = ts(std::time::SystemTime::now());
    let targets: Vec<String> = (0..80).map(|i| format!("db{i:02}")).collect();
    let rows: Vec<_> = targets
        .iter()
        .map(|t| ("hook", t.as_str(), "DrcheckVerificationFailed", "firing", now.as_str(), now.as_str(), 0))
        .collect();
    site.queue(&rows);
    let c = config.display().to_string();
    let spawn = || {
        std::process::Command::new(drcheck_e2e::drcheck_bin())
            .args(["--config", &c, "alerts", "deliver", "--seconds", "20"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (drcheck_e2e::proc::KillOnDrop::new(spawn()), drcheck_e2e::proc::KillOnDrop::new(spawn()));
    let (a, b) = (a.wait_with_output(LIMIT), b.wait_with_output(LIMIT));
    assert!(a.status.success() && b.status.success(), "{}\n{}", stderr(&a), stderr(&b));
    let got = received(&hook);
    let mut keys: Vec<&str> = got.iter().map(|(_, k)| k.as_str()).collect();
    keys.sort();
    let before = keys.len();
    keys.dedup();
    assert_eq!((before, keys.len()), (80, 80), "each alert once: {before} requests, {} alerts", keys.len());
    let l = site.listing(&config);
    assert_eq!(l["delivered"], 80, "{l}");
    assert!(l["dead_letters"].as_array().unwrap().is_empty(), "{l}");
}

/// A dispatcher configured with other sinks leaves their alerts for a dispatcher that
/// knows them; `alerts dead-letter --sink` clears a sink removed for good.
#[test]
fn alerts_for_sinks_a_dispatcher_does_not_know_are_left_alone() {
    let site = Site::new();
    let hook = Recorder::start(200);
    let config = site.config("c.toml", &webhook("hook", &format!("http://127.0.0.1:{}/", hook.port)), &[("t", "")]);
    assert!(site.run(&config, &["history"]).status.success());
    let now = ts(std::time::SystemTime::now());
    site.queue(&[
        ("pager", "db1", "DrcheckVerificationFailed", "firing", &now, &now, 0),
        ("pager", "db2", "DrcheckRPOMissed", "firing", &now, &now, 0),
        ("hook", "db1", "DrcheckVerificationFailed", "firing", &now, &now, 0),
    ]);
    let out = site.run(&config, &["alerts", "deliver", "--seconds", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let l = site.listing(&config);
    assert_eq!(l["delivered"], 1, "{l}");
    let pending: Vec<&str> = l["pending"].as_array().unwrap().iter().map(|p| p["sink"].as_str().unwrap()).collect();
    assert_eq!(pending, ["pager", "pager"], "{l}");
    assert!(l["dead_letters"].as_array().unwrap().is_empty(), "{l}");

    let out = site.run(&config, &["alerts", "dead-letter", "--sink", "pager"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let l = site.listing(&config);
    assert!(l["pending"].as_array().unwrap().is_empty(), "{l}");
    assert_eq!(l["dead_letters"].as_array().unwrap().len(), 2, "{l}");
}

/// A firing backing off and its resolution due: the sink gets the firing, then the
/// resolution — never the resolution first (which would re-open the alert).
#[test]
fn one_alerts_states_reach_a_sink_in_order() {
    let site = Site::new();
    let hook = Recorder::start(200);
    let config = site.config("c.toml", &webhook("hook", &format!("http://127.0.0.1:{}/", hook.port)), &[("t", "")]);
    assert!(site.run(&config, &["history"]).status.success());
    let now = std::time::SystemTime::now();
    let (t0, t1, later) =
        (ts(now - Duration::from_secs(2)), ts(now - Duration::from_secs(1)), ts(now + Duration::from_secs(3)));
    site.queue(&[
        ("hook", "db1", "DrcheckVerificationFailed", "firing", &t0, &later, 1),
        ("hook", "db1", "DrcheckVerificationFailed", "resolved", &t1, &t1, 0),
    ]);
    let out = site.run(&config, &["alerts", "deliver", "--seconds", "20"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let states: Vec<String> = received(&hook).into_iter().map(|(s, _)| s).collect();
    assert_eq!(states, ["firing", "resolved"]);
}

/// A run fails while its sink is down (the firing waits), the next run passes: the
/// firing is superseded by the resolution, and the sink — never having heard of the
/// alert — gets neither.
#[test]
fn a_firing_superseded_by_its_resolution_is_never_sent() {
    let site = Site::new();
    let hook = Recorder::start(503);
    let config = site.config("c.toml", &webhook("hook", &format!("http://127.0.0.1:{}/", hook.port)), &[("t", "")]);
    site.put("t.sql", &plain("select 1/0;\n"));
    let out = site.run(&config, &["verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let refused = hook.requests().len();
    assert!(refused > 0, "the firing was tried");
    site.put("t.sql", &plain("create table ok (id int);\n"));
    let out = site.run(&config, &["verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    hook.set_status(200);
    let out = site.run(&config, &["alerts", "deliver", "--seconds", "5"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let after: Vec<_> = received(&hook).into_iter().skip(refused).collect();
    assert!(after.is_empty(), "the sink heard of an alert it never saw fire: {after:?}");
    assert!(site.listing(&config)["pending"].as_array().unwrap().is_empty());
}

/// A daemon re-sends a firing alert to Alertmanager before its endsAt, for as long as
/// it fires — the stale alert included.
#[test]
fn firing_alerts_are_sent_to_alertmanager_again_while_they_fire() {
    let site = Site::new();
    let am = Recorder::start(200);
    let port = free_port();
    let config = site.config(
        "c.toml",
        &format!(
            "[metrics]\nlisten = \"127.0.0.1:{port}\"\n[daemon]\nalert_resend_interval = \"2s\"\n[[alert]]\nkind = \"alertmanager\"\nurl = \"http://127.0.0.1:{}\"\n",
            am.port
        ),
        &[("t", "stale_after = \"1s\"")],
    );
    let mut d = Daemon::start(&config, port, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let stale_posts = || {
        am.requests().iter().filter(|q| String::from_utf8_lossy(&q.body).contains("DrcheckVerificationStale")).count()
    };
    while stale_posts() < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    d.terminate(Duration::from_secs(30));
    assert!(stale_posts() >= 3, "the stale alert was sent {} time(s) in 30 s, re-sending every 2 s", stale_posts());
    for q in am.requests() {
        let v: serde_json::Value = serde_json::from_slice(&q.body).unwrap();
        let ends = humantime::parse_rfc3339_weak(v[0]["endsAt"].as_str().unwrap()).unwrap();
        assert!(ends > std::time::SystemTime::now() + Duration::from_secs(24 * 3600), "{v}");
    }
}

/// SIGHUP every 3 s while a target fires every 10 s with 9 s of jitter: the firings
/// still happen (a reload keeps each unchanged target's pending instant).
#[test]
fn reloads_during_the_jitter_window_lose_no_firing() {
    let site = Site::new();
    site.put("t.sql", &plain("create table ok (id int);\n"));
    let port = free_port();
    let config = site.config(
        "c.toml",
        &format!("[metrics]\nlisten = \"127.0.0.1:{port}\""),
        &[("t", "schedule = \"*/10 * * * * *\"\njitter = \"9s\"")],
    );
    let mut d = Daemon::start(&config, port, &[]);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(45) {
        std::thread::sleep(Duration::from_secs(3));
        d.signal(nix::sys::signal::Signal::SIGHUP);
    }
    let started_runs =
        sample(&http_get(port, "/metrics"), "drcheck_scheduled_runs_total", "target=\"t\"").unwrap_or(0.0);
    d.terminate(Duration::from_secs(60));
    // A firing while the previous run still goes (a slow, loaded machine) is skipped and
    // says so; either way the firing happened.
    let skipped = d.stderr_text().matches("scheduled run skipped").count() as f64;
    let fired = started_runs + skipped;
    // Firings at :10, :20, :30 (each + up to 9 s) are all due within 45 s.
    assert!(
        fired >= 3.0,
        "{started_runs} scheduled runs and {skipped} skipped in 45 s of `*/10 * * * * *` with a reload every 3 s"
    );
}

/// A reload drops the series of a removed target (its last success must not age into a
/// stale alert) and of a removed sink.
#[test]
fn a_reload_drops_the_series_of_removed_targets_and_sinks() {
    let site = Site::new();
    let port = free_port();
    let global = format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n");
    let both = format!("{global}{}", webhook("gone", "http://127.0.0.1:9/"));
    let config = site.config("c.toml", &both, &[("kept", ""), ("removed", "")]);
    let mut d = Daemon::start(&config, port, &[]);
    let m = http_get(port, "/metrics");
    assert!(m.contains("target=\"removed\"") && m.contains("sink=\"gone\""), "{m}");
    site.config("c.toml", &global, &[("kept", "")]);
    d.signal(nix::sys::signal::Signal::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut m = http_get(port, "/metrics");
    while m.contains("target=\"removed\"") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        m = http_get(port, "/metrics");
    }
    d.terminate(Duration::from_secs(30));
    assert!(!m.contains("target=\"removed\""), "{m}");
    assert!(!m.contains("sink=\"gone\""), "{m}");
    assert!(m.contains("target=\"kept\""), "{m}");
}

/// SIGTERM with one run going and one queued behind the bulkhead: the queued run is
/// dropped (never started, never recorded); the interrupted one is recorded aborted and
/// leaves the target's last verdict as it was — also after a restart.
#[test]
fn shutdown_drops_queued_runs_and_an_abort_keeps_the_last_verdict() {
    let site = Site::new();
    site.put("slow.sql", &plain("create table ok (id int);\n"));
    site.put("queued.sql", &plain("create table ok (id int);\n"));
    let port = free_port();
    let token = drcheck_e2e::unique("tok");
    let config = site.config(
        "c.toml",
        &format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n[api]\ntoken = \"{token}\"\n[daemon]\nmax_concurrent_restores = 1"),
        &[("slow", ""), ("queued", "")],
    );
    let auth = format!("Bearer {token}");
    // Accepted — once the target's previous run has wholly finished (409 until then).
    let trigger = |t: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (code, body) =
                http_request(port, "POST", &format!("/api/v1/targets/{t}/verify"), &[("Authorization", &auth)], "");
            if code == 409 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            assert_eq!(code, 202, "{body}");
            return;
        }
    };
    let mut d = Daemon::start(&config, port, &[]);
    trigger("slow");
    let deadline = Instant::now() + LIMIT;
    while sample(&http_get(port, "/metrics"), "drcheck_last_run_success", "target=\"slow\"") != Some(1.0) {
        assert!(Instant::now() < deadline, "the first run did not pass");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Now a restore that takes a minute, and a run queued behind it.
    site.put("slow.sql", &plain("create table ok (id int);\nselect pg_sleep(60);\n"));
    trigger("slow");
    std::thread::sleep(Duration::from_secs(4));
    trigger("queued");
    std::thread::sleep(Duration::from_secs(1));
    d.terminate(Duration::from_secs(60));
    let runs = |t: &str| -> Vec<String> {
        let out = site.run(&config, &["history", "--target", t, "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["runs"].as_array().unwrap().iter().map(|r| r["result"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(runs("queued"), Vec::<String>::new(), "the queued run was started");
    assert_eq!(runs("slow"), ["aborted", "passed"]);
    let mut again = Daemon::start(&config, port, &[]);
    let m = http_get(port, "/metrics");
    again.terminate(Duration::from_secs(30));
    assert_eq!(sample(&m, "drcheck_last_run_success", "target=\"slow\""), Some(1.0), "{m}");
}

/// Two processes opening one fresh SQLite history at once, ten times: both open it.
#[test]
fn fresh_sqlite_histories_open_concurrently() {
    let site = Site::new();
    for i in 0..10 {
        let db = site.root.path().join(format!("h{i}.db"));
        let config = site.root.path().join(format!("c{i}.toml"));
        std::fs::write(
            &config,
            format!(
                "[state]\nurl = \"sqlite://{}\"\n[storage.b]\nkind = \"filesystem\"\npath = \"{}\"\n",
                db.display(),
                site.store.display()
            ),
        )
        .unwrap();
        let c = config.display().to_string();
        let spawn = || {
            std::process::Command::new(drcheck_e2e::drcheck_bin())
                .args(["--config", &c, "history"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn(), spawn());
        for out in [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()] {
            assert!(out.status.success(), "attempt {i}: {}", stderr(&out));
        }
    }
}

fn drill(root: &TempRoot, name: &str, yaml: &str, extra: &[&str]) -> (std::process::Output, PathBuf) {
    let file = runbook(root, &format!("{name}.yaml"), yaml);
    let report = root.path().join(format!("{name}.html"));
    let (f, r) = (file.display().to_string(), report.display().to_string());
    let mut args = vec!["drill", "run", f.as_str(), "--report", r.as_str()];
    args.extend_from_slice(extra);
    (drcheck(&args, &[], LIMIT).0, report)
}

/// A shell step printing bytes that are not UTF-8 is read to its end: no SIGPIPE, the
/// step's own exit decides.
#[test]
fn a_step_printing_bytes_that_are_not_utf8_is_read_to_the_end() {
    let root = TempRoot::new();
    let yaml = "title: Latin-1\nsteps:\n  - name: latin1\n    shell: {command: \"seq 1 20000; printf 'caf\\\\351\\\\n'; echo done\", expect_output: \"^done$\"}\n";
    let (out, report) = drill(&root, "latin1", yaml, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let j = journal(&report);
    assert_eq!(j["result"], "completed", "{j}");
    assert!(step(&j, "latin1")["output_tail"].as_str().unwrap().contains("caf\u{fffd}"), "{j}");
}

/// A manual gate that timed out does not swallow the answer typed for the next gate.
#[test]
fn a_timed_out_gate_leaves_the_next_answer_to_the_next_gate() {
    let root = TempRoot::new();
    let yaml = r#"
title: Gates
steps:
  - name: first gate
    manual: {instruction: "Nobody answers this one"}
    timeout: 1s
    on_failure: continue
  - name: second gate
    manual: {instruction: "Answer yes"}
    timeout: 20s
"#;
    let file = runbook(&root, "gates.yaml", yaml);
    let report = root.path().join("gates.html");
    let cmd =
        format!("{} drill run {} --report {}", drcheck_e2e::drcheck_bin().display(), file.display(), report.display());
    let mut child = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let guard = drcheck_e2e::proc::KillOnDrop::new(child);
    // The first gate times out after 1 s; the answer comes after it.
    std::thread::sleep(Duration::from_millis(3000));
    use std::io::Write;
    stdin.write_all(b"yes\n").unwrap();
    let out = guard.wait_with_output(Duration::from_secs(60));
    drop(stdin);
    let j = journal(&report);
    assert_eq!(step(&j, "first gate")["status"], "timed_out", "{j}");
    assert_eq!(step(&j, "second gate")["status"], "passed", "{j}\n{}", drcheck_e2e::stdout(&out));
}

/// Three signals: the drill exits at once — and takes the running step's processes
/// (which ignore SIGTERM) along, leaving a journal that says it was aborted.
#[test]
fn a_third_signal_kills_the_running_step_and_keeps_the_journal() {
    let root = TempRoot::new();
    let pgid_file = root.path().join("pgid");
    let yaml = format!(
        r#"
title: Stubborn
steps:
  - name: stubborn step
    shell: {{command: "trap '' TERM INT; echo $$$$ > {p}.tmp && mv {p}.tmp {p}; sleep 300"}}
rollbacks:
  - name: stubborn rollback
    shell: {{command: "trap '' TERM INT; sleep 300"}}
"#,
        p = pgid_file.display()
    );
    let file = runbook(&root, "stubborn.yaml", &yaml);
    let report = root.path().join("stubborn.html");
    let child = spawn_drill(&["drill", "run", &file.display().to_string(), "--report", &report.display().to_string()]);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let guard = drcheck_e2e::proc::KillOnDrop::new(child);
    wait_for_file(&pgid_file, Duration::from_secs(30));
    let pgid: i32 = std::fs::read_to_string(&pgid_file).unwrap().trim().parse().unwrap();
    for _ in 0..3 {
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
        std::thread::sleep(Duration::from_millis(300));
    }
    let out = guard.wait_with_output(Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    std::thread::sleep(Duration::from_millis(300));
    assert!(group_members(pgid).is_empty(), "the step's processes outlived the drill");
    let j = journal(&report);
    assert_eq!(j["result"], "aborted", "{j}");
}

/// SIGKILL mid-drill: the journal holds every step that finished.
#[test]
fn a_drill_killed_outright_leaves_a_readable_journal() {
    let root = TempRoot::new();
    let marker = root.path().join("second-started");
    let yaml = format!(
        "title: Killed\nsteps:\n  - name: first\n    shell: {{command: \"echo one\"}}\n  - name: second\n    shell: {{command: \"touch {}; sleep 300\"}}\n",
        marker.display()
    );
    let file = runbook(&root, "killed.yaml", &yaml);
    let report = root.path().join("killed.html");
    let mut child =
        spawn_drill(&["drill", "run", &file.display().to_string(), "--report", &report.display().to_string()]);
    wait_for_file(&marker, Duration::from_secs(30));
    child.kill().unwrap();
    child.wait().unwrap();
    let j = journal(&report);
    assert_eq!(j["result"], "running", "{j}");
    assert_eq!(step(&j, "first")["status"], "passed", "{j}");
}

/// A signal while the rollbacks run: the drill is aborted, not completed.
#[test]
fn a_signal_during_the_rollbacks_aborts_the_drill() {
    let root = TempRoot::new();
    let marker = root.path().join("rolling-back");
    let yaml = format!(
        "title: Rollback\nsteps:\n  - name: change\n    shell: {{command: \"true\"}}\nrollbacks:\n  - name: undo\n    shell: {{command: \"touch {}; sleep 3\"}}\n",
        marker.display()
    );
    let file = runbook(&root, "rollback.yaml", &yaml);
    let report = root.path().join("rollback.html");
    let child = spawn_drill(&["drill", "run", &file.display().to_string(), "--report", &report.display().to_string()]);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let guard = drcheck_e2e::proc::KillOnDrop::new(child);
    wait_for_file(&marker, Duration::from_secs(30));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = guard.wait_with_output(Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let j = journal(&report);
    assert_eq!(j["result"], "aborted", "{j}");
    assert_eq!(j["interrupted_by"], "SIGTERM", "{j}");
}

/// A variable named `*_key` is masked in the dry run, the journal and the report; a
/// secret-named value from the environment is scrubbed from the output.
#[test]
fn keys_and_secret_environment_values_are_masked() {
    let root = TempRoot::new();
    let key = drcheck_e2e::unique("sshkeyvalue");
    let pw = drcheck_e2e::unique("envpassword");
    let yaml = format!(
        "title: Masks\nvariables:\n  ssh_key: {key}\nsteps:\n  - name: show\n    shell: {{command: \"echo ${{ssh_key}}; echo $DRILL_DB_PASSWORD\"}}\n"
    );
    let file = runbook(&root, "masks.yaml", &yaml);
    let report = root.path().join("masks.html");
    let f = file.display().to_string();
    let (plan, _) = drcheck(&["drill", "run", &f, "--dry-run"], &[], LIMIT);
    let (out, _) = drcheck(
        &["drill", "run", &f, "--report", &report.display().to_string()],
        &[("DRILL_DB_PASSWORD", pw.clone())],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let texts = [
        drcheck_e2e::stdout(&plan),
        drcheck_e2e::stdout(&out),
        stderr(&out),
        std::fs::read_to_string(&report).unwrap(),
        std::fs::read_to_string(report.with_extension("json")).unwrap(),
    ];
    for t in &texts {
        assert!(!t.contains(&key), "the key shows: {t}");
        assert!(!t.contains(&pw), "the password from the environment shows: {t}");
    }
}

/// A drill's `verify` step takes the target's lease: with another drcheck verifying the
/// target, the step does not restore it too.
#[test]
fn a_drill_verify_step_waits_its_turn_for_the_target() {
    let site = Site::new();
    site.put("t.sql", &plain("create table ok (id int);\n"));
    let config = site.config("c.toml", "", &[("t", "")]);
    assert!(site.run(&config, &["history"]).status.success());
    // Another machine's drcheck holds the lease for an hour.
    let until = ts(std::time::SystemTime::now() + Duration::from_secs(3600));
    let script = format!(
        "import sqlite3, sys\ncon = sqlite3.connect(sys.argv[1])\ncon.execute(\"insert into leases (target, holder, expires_at) values ('t', 'drcheck daemon pid 1 (elsewhere)', '{until}')\")\ncon.commit()\n"
    );
    let ok = std::process::Command::new("python3").args(["-c", &script]).arg(site.history()).status().unwrap();
    assert!(ok.success());
    let yaml = "title: Verify\nsteps:\n  - name: verify\n    verify: {target: t}\n    timeout: 60s\n";
    let file = runbook(&site.root, "verify.yaml", yaml);
    let report = site.root.path().join("verify.html");
    let c = config.display().to_string();
    let (out, _) = drcheck(
        &["--config", &c, "drill", "run", &file.display().to_string(), "--report", &report.display().to_string()],
        &[],
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let j = journal(&report);
    let s = step(&j, "verify");
    assert_eq!(s["status"], "failed", "{s}");
    assert!(s["detail"].as_str().unwrap().contains("another drcheck"), "{s}");
    let runs = site.run(&config, &["history", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    assert!(v["runs"].as_array().unwrap().is_empty(), "the drill restored the target anyway: {v}");
}

/// Two drills of one runbook: the exported counter says 2.
#[test]
fn drill_counters_accumulate_across_drills() {
    let site = Site::new();
    let textfile = site.root.path().join("drcheck.prom");
    let config = site.config("c.toml", &format!("[metrics]\ntextfile = \"{}\"", textfile.display()), &[("t", "")]);
    let file = runbook(&site.root, "count.yaml", "title: Count\nsteps:\n  - name: a\n    shell: {command: \"true\"}\n");
    let c = config.display().to_string();
    for i in 0..2 {
        let report = site.root.path().join(format!("count-{i}.html"));
        let (out, _) = drcheck(
            &["--config", &c, "drill", "run", &file.display().to_string(), "--report", &report.display().to_string()],
            &[],
            LIMIT,
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let prom = std::fs::read_to_string(site.root.path().join("drcheck-drill-count.prom")).unwrap();
    assert_eq!(sample(&prom, "drcheck_drill_runs_total", "result=\"completed\""), Some(2.0), "{prom}");
}

/// `run_id=…` of every "verification started" line in a daemon's log.
fn started_ids(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("verification started"))
        .filter_map(|l| l.split("run_id=").nth(1)?.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Two daemons on one PostgreSQL history for 75 s: three targets every 10 s (one always
/// failing, one flipping between failing and passing), reloads every 7 s (one of them
/// resizing the bulkhead), one daemon SIGKILLed and started again. Then: no target was
/// ever verified twice at once; every run a daemon started is recorded, except those the
/// killed one had in flight; the webhook got exactly what the history says it delivered,
/// each alert's states in order, each resolution once and none before its firing; no
/// dead letters, nothing left pending.
#[test]
fn two_daemons_on_one_postgresql_history_keep_every_guarantee() {
    let site = Site::new();
    let pg = drcheck_e2e::PgPrimary::start(&site.root);
    pg.psql("postgres", "create role hist login password 'hist'");
    pg.psql("postgres", "create database history owner hist");
    let url = pg.url("hist", "hist", "history");
    let hook = Recorder::start(200);
    site.put("steady.sql", &plain("create table ok (id int);\n"));
    site.put("broken.sql", &plain("select 1/0;\n"));
    let good = plain("create table ok (id int);\n");
    let bad = plain("select 1/0;\n");
    site.put("flip.sql", &bad);
    let ports = [free_port(), free_port(), free_port()];
    let schedule = "schedule = \"*/10 * * * * *\"";
    let write = |file: &str, port: u16, restores: u32| {
        let path = site.config(
            file,
            &format!(
                "[metrics]\nlisten = \"127.0.0.1:{port}\"\n[daemon]\nmax_concurrent_restores = {restores}\n{}",
                webhook("hook", &format!("http://127.0.0.1:{}/", hook.port))
            ),
            &[("steady", schedule), ("broken", schedule), ("flip", schedule)],
        );
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace(&format!("url = \"sqlite://{}\"", site.history().display()), &format!("url = \"{url}\""));
        std::fs::write(&path, text).unwrap();
        path
    };
    let (ca, cb, cc) = (write("a.toml", ports[0], 2), write("b.toml", ports[1], 2), write("c.toml", ports[2], 2));
    let mut a = Daemon::start(&ca, ports[0], &[]);
    let mut b = Daemon::start(&cb, ports[1], &[]);
    let mut b2: Option<Daemon> = None;
    let t0 = Instant::now();
    let mut flipped_good = false;
    let mut reloads = 0;
    while t0.elapsed() < Duration::from_secs(75) {
        std::thread::sleep(Duration::from_secs(7));
        reloads += 1;
        // Every 7 s a reload; the third one shrinks the bulkhead, the sixth grows it back.
        if reloads == 3 || reloads == 6 {
            write("a.toml", ports[0], if reloads == 3 { 1 } else { 2 });
        }
        a.signal(nix::sys::signal::Signal::SIGHUP);
        // The flipping target changes every 14 s.
        if reloads % 2 == 0 {
            flipped_good = !flipped_good;
            site.put("flip.sql", if flipped_good { &good } else { &bad });
        }
        let at = t0.elapsed();
        if b2.is_none() && at > Duration::from_secs(35) && at < Duration::from_secs(45) {
            b.kill();
        }
        if b2.is_none() && at >= Duration::from_secs(45) {
            b2 = Some(Daemon::start(&cc, ports[2], &[]));
        }
    }
    a.terminate(Duration::from_secs(60));
    let mut b2 = b2.expect("the second daemon was started again");
    b2.terminate(Duration::from_secs(60));
    let out = site.run(&ca, &["alerts", "deliver", "--seconds", "20"]);
    assert!(out.status.success(), "{}", stderr(&out));

    // Runs: never two of one target at once; all recorded but the killed daemon's.
    let out = site.run(&ca, &["history", "--json", "--limit", "1000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = v["runs"].as_array().unwrap().clone();
    assert!(runs.len() >= 12, "{} runs recorded in 75 s of three targets every 10 s", runs.len());
    for t in ["steady", "broken", "flip"] {
        let mut spans: Vec<(String, String)> = runs
            .iter()
            .filter(|r| r["target"] == t)
            .map(|r| (r["started_at"].as_str().unwrap().into(), r["finished_at"].as_str().unwrap().into()))
            .collect();
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "{t} verified twice at once: {w:?}");
        }
    }
    let recorded: std::collections::HashSet<String> =
        runs.iter().map(|r| r["run_id"].as_str().unwrap().to_string()).collect();
    let (la, lb, lc) = (a.stderr_text(), b.stderr_text(), b2.stderr_text());
    for id in started_ids(&la).iter().chain(&started_ids(&lc)) {
        let said: Vec<&str> = la.lines().chain(lc.lines()).filter(|l| l.contains(id.as_str())).collect();
        assert!(recorded.contains(id), "run {id} of a daemon stopped with SIGTERM is not recorded: {said:#?}");
    }
    let lost: Vec<String> = started_ids(&lb).into_iter().filter(|id| !recorded.contains(id)).collect();
    assert!(lost.len() <= 2, "the killed daemon (2 restores at once) lost {} runs", lost.len());
    // The runs it lost are recorded as aborted by whoever took their leases over (issue
    // 34), under run ids of their own: at most one per lost run.
    // A killed run whose start was written (`run_starts`) is recorded under its own id;
    // one that died before that, under a new id: at most one per lost run. Which of the
    // two happens depends on where the kill lands.
    let b_started: std::collections::HashSet<String> = started_ids(&lb).into_iter().collect();
    let (died_own, died_new): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) = runs
        .iter()
        .filter(|r| {
            let msg = r["error"]["message"].as_str().or(r["error_message"].as_str()).unwrap_or_default();
            r["result"] == "aborted" && msg.contains("died without recording")
        })
        .partition(|r| b_started.contains(r["run_id"].as_str().unwrap_or_default()));
    assert!(
        died_new.len() <= lost.len(),
        "{} runs recorded as died under new ids, {} lost",
        died_new.len(),
        lost.len()
    );
    assert!(died_own.len() + lost.len() <= 2, "the killed daemon had at most 2 runs in flight: {died_own:?} {lost:?}");
    let started: usize = [&la, &lb, &lc].iter().map(|l| started_ids(l).len()).sum();
    assert_eq!(started, recorded.len() - died_new.len() + lost.len(), "every started run recorded once");

    // Alerts: what the webhook got is what the history delivered, in order per alert.
    let l = site.listing(&ca);
    assert!(l["pending"].as_array().unwrap().is_empty(), "{l}");
    assert!(l["dead_letters"].as_array().unwrap().is_empty(), "{l}");
    let got = hook.requests();
    assert_eq!(l["delivered"].as_u64(), Some(got.len() as u64), "deliveries recorded vs received");
    type States = Vec<(String, String, String)>;
    let mut by_alert: std::collections::BTreeMap<(String, String), States> = Default::default();
    for q in &got {
        let p: serde_json::Value = serde_json::from_slice(&q.body).unwrap();
        by_alert
            .entry((p["target"].as_str().unwrap().into(), p["alertname"].as_str().unwrap().into()))
            .or_default()
            .push((
                p["state"].as_str().unwrap().into(),
                p["starts_at"].as_str().unwrap().into(),
                q.header("Idempotency-Key").unwrap().into(),
            ));
    }
    assert!(by_alert.contains_key(&("broken".into(), "DrcheckVerificationFailed".into())), "{by_alert:?}");
    let mut resolutions = std::collections::HashSet::new();
    for (alert, states) in &by_alert {
        assert_eq!(states[0].0, "firing", "{alert:?} began with a resolution: {states:?}");
        for w in states.windows(2) {
            let ((s0, e0, _), (s1, e1, _)) = (&w[0], &w[1]);
            match (s0.as_str(), s1.as_str()) {
                ("firing", "firing") | ("firing", "resolved") => assert_eq!(e0, e1, "{alert:?}: {states:?}"),
                ("resolved", "firing") => assert_ne!(e0, e1, "{alert:?} fired again in a resolved episode"),
                _ => panic!("{alert:?}: two resolutions in a row: {states:?}"),
            }
        }
        for (s, _, key) in states {
            if s == "resolved" {
                assert!(resolutions.insert(key.clone()), "{alert:?}: a resolution delivered twice");
            }
        }
    }
    {
        assert!(
            by_alert
                .get(&("flip".into(), "DrcheckVerificationFailed".into()))
                .is_some_and(|s| s.iter().any(|x| x.0 == "resolved")),
            "the flipping target's failure never resolved: {by_alert:?}"
        );
    }
}
