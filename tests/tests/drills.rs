//! `drcheck drill`: every step kind against real parts (PostgreSQL, moto, an HTTP
//! server, processes), timeouts, on_failure modes, rollbacks after a failure and after
//! SIGINT, malformed runbooks, and a dry run that executes nothing.

use drcheck_e2e::drills::{group_members, journal, runbook, spawn_drill, step, wait_for_file};
use drcheck_e2e::recorder::Recorder;
use drcheck_e2e::scenario::Scene;
use drcheck_e2e::{TempRoot, drcheck, stderr, stdout};
use std::path::Path;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(180);

fn run(
    root: &TempRoot,
    file: &Path,
    extra: &[&str],
    env: &[(&str, String)],
) -> (std::process::Output, serde_json::Value) {
    let report = root.path().join(format!("{}.html", file.file_stem().unwrap().to_string_lossy()));
    let mut args = vec!["drill", "run"];
    let f = file.display().to_string();
    let r = report.display().to_string();
    args.extend([f.as_str(), "--report", r.as_str()]);
    args.extend(extra);
    let (out, _) = drcheck(&args, env, LIMIT);
    let j = journal(&report);
    (out, j)
}

#[test]
fn every_step_kind_runs_against_real_parts_and_is_journaled() {
    let scene = Scene::start();
    let api = Recorder::start(200);
    api.set_body(r#"{"status": "ok", "count": 3}"#);
    let config = scene.config(&scene.spec());
    let marker = scene.root.path().join("marker");
    let yaml = format!(
        r#"
title: Every kind
objectives: {{rto: 10m, rpo: 26h}}
variables:
  dsn: "postgres://verifier:${{ORDERS_PW}}@127.0.0.1:{port}/orders"
  api: "http://127.0.0.1:{api}"
  marker: "{marker}"
steady_state:
  - name: api healthy
    http: {{url: "${{api}}/health", expect_status: 200, body_contains: ok, expect_json: {{"/status": ok, "/count": 3}}}}
steps:
  - name: count orders on the primary
    sql: {{target: orders, query: "select count(*) from orders", expect: 5000, capture: orders}}
  - name: restore the latest backup
    verify: {{target: orders}}
    recovery: true
  - name: compare through a DSN
    sql: {{dsn: "${{dsn}}", query: "select count(*) from orders", expect: "${{orders}}"}}
    recovery: true
  - name: shell with env and workdir
    shell:
      command: 'echo "$GREETING from $(pwd)"; echo ${{orders}} > ${{marker}}'
      env: {{GREETING: hello}}
      workdir: /tmp
      expect_output: "hello from /tmp"
      reject_output: "ERROR"
  - name: short pause
    wait: {{for: 1s}}
  - name: poll until the marker file has the count
    wait: {{until: {{shell: {{command: "grep -qx 5000 ${{marker}}"}}}}, every: 100ms}}
    timeout: 10s
  - name: poll the api by name
    wait: {{until_step: api healthy}}
    timeout: 10s
  - name: operator looks at the dashboard
    manual: {{instruction: "Check the orders dashboard"}}
rollbacks:
  - name: remove the marker
    shell: {{command: "rm -f ${{marker}}"}}
"#,
        port = scene.primary.port,
        api = api.port,
        marker = marker.display(),
    );
    let file = runbook(&scene.root, "every-kind.yaml", &yaml);
    let c = config.display().to_string();
    let (out, j) = run(&scene.root, &file, &["--yes", "--config", &c], &scene.env());
    assert_eq!(out.status.code(), Some(0), "stdout: {}\nstderr: {}", stdout(&out), stderr(&out));
    assert_eq!(j["result"], "completed", "{j:#}");
    assert_eq!(j["hypothesis_held"], true);
    let kinds: std::collections::BTreeSet<&str> =
        j["steps"].as_array().unwrap().iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.into_iter().collect::<Vec<_>>(), ["manual", "shell", "sql", "verify", "wait"]);
    assert_eq!(j["steady_state"]["before"][0]["kind"], "http");
    assert_eq!(j["steady_state"]["after"][0]["status"], "passed");
    for s in j["steps"].as_array().unwrap() {
        assert_eq!(s["status"], "passed", "{s:#}");
        assert!(s["duration_seconds"].as_f64().unwrap() >= 0.0);
    }
    assert_eq!(step(&j, "count orders on the primary")["captured"], "orders");
    assert!(step(&j, "compare through a DSN")["detail"].as_str().unwrap().contains("\"5000\""));
    let v = &step(&j, "restore the latest backup")["verification"];
    assert_eq!(v["result"], "passed", "{v:#}");
    assert_eq!(v["target"], "orders");
    assert!(step(&j, "short pause")["duration_seconds"].as_f64().unwrap() >= 1.0);
    assert_eq!(step(&j, "operator looks at the dashboard")["confirmation"]["how"], "--yes");
    assert!(step(&j, "shell with env and workdir")["output_tail"].as_str().unwrap().contains("hello from /tmp"));
    // The RTO clock covers the two recovery steps; the RPO is the restored backup's age.
    let rto = j["rto"]["measured_seconds"].as_f64().unwrap();
    let recovery: f64 = ["restore the latest backup", "compare through a DSN"]
        .iter()
        .map(|n| step(&j, n)["duration_seconds"].as_f64().unwrap())
        .sum();
    assert!(rto >= recovery && rto < recovery + 1.0, "rto {rto}, recovery steps {recovery}");
    assert_eq!(j["rto"]["met"], true);
    assert!(j["rpo"]["backup_age_seconds"].as_f64().unwrap() < 3600.0);
    assert_eq!(j["rpo"]["met"], true);
    // The manual step confirmed by --yes is an action item; nothing else is.
    let items = j["action_items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    assert!(items[0].as_str().unwrap().contains("--yes"));
    // The rollbacks ran after the completed drill.
    assert_eq!(j["rollbacks"][0]["status"], "passed");
    assert!(!marker.exists());
    // The HTTP check really went out, twice for the steady state plus the poll.
    assert!(api.requests().iter().filter(|r| r.path == "/health").count() >= 3);
    // The verification is in the history like any other run.
    let (h, _) = drcheck(&["--config", &c, "history", "--json"], &scene.env(), LIMIT);
    assert!(stdout(&h).contains(v["run_id"].as_str().unwrap()), "{}", stdout(&h));
    // The password reached the steps but no output, journal or report.
    let report = std::fs::read_to_string(scene.root.path().join("every-kind.html")).unwrap();
    for text in [stdout(&out), stderr(&out), j.to_string(), report.clone()] {
        assert!(!text.contains(&scene.password), "the password leaked");
    }
    assert!(report.contains("<svg") && report.contains("RTO budget") && report.contains("restore the latest backup"));
}

#[test]
fn on_failure_continue_abort_and_rollback() {
    let root = TempRoot::new();
    let dir = root.path().display().to_string();
    let yaml = |mode: &str| {
        format!(
            r#"
title: on_failure {mode}
steps:
  - name: breaks
    shell: {{command: "echo about to fail; exit 4"}}
    on_failure: {mode}
  - name: after
    shell: {{command: "touch {dir}/after-{mode}"}}
rollbacks:
  - name: undo
    shell: {{command: "touch {dir}/rolled-back-{mode}"}}
"#
        )
    };
    let p = |name: &str| root.path().join(name);

    let (out, j) = run(&root, &runbook(&root, "continue.yaml", &yaml("continue")), &["--json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(j["result"], "completed");
    // --json prints the journal; the live output (on stderr) streams each step's output.
    let printed: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("--json prints the journal");
    assert_eq!(printed["drill_id"], j["drill_id"]);
    let live = stderr(&out);
    assert!(live.contains("│ about to fail") && live.contains("failed in") && live.contains("== rollbacks"), "{live}");
    assert_eq!(step(&j, "breaks")["status"], "failed");
    assert_eq!(step(&j, "breaks")["detail"], "exit 4, expected 0");
    assert!(p("after-continue").exists() && p("rolled-back-continue").exists());
    assert!(j["action_items"][0].as_str().unwrap().contains("\"breaks\""), "{j:#}");

    let (out, j) = run(&root, &runbook(&root, "abort.yaml", &yaml("abort")), &[], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(j["result"], "failed");
    assert_eq!(step(&j, "after")["status"], "skipped");
    assert_eq!(j["rollbacks_ran"], false);
    assert!(!p("after-abort").exists() && !p("rolled-back-abort").exists(), "abort leaves everything as it is");

    let (out, j) = run(&root, &runbook(&root, "rollback.yaml", &yaml("rollback")), &[], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(j["result"], "failed");
    assert_eq!(j["hypothesis_held"], false);
    assert_eq!(step(&j, "after")["status"], "skipped");
    assert_eq!(step(&j, "undo")["status"], "passed");
    assert!(!p("after-rollback").exists() && p("rolled-back-rollback").exists());
    assert!(j["reasons"][0].as_str().unwrap().contains("on_failure: rollback"), "{j:#}");
}

#[test]
fn failed_checks_say_why_and_a_broken_steady_state_changes_nothing() {
    let root = TempRoot::new();
    let api = Recorder::start(503);
    let dead = drcheck_e2e::free_port();
    let touched = root.path().join("touched");
    let yaml = format!(
        r#"
title: Broken steady state
steady_state:
  - name: api answers
    http: {{url: "http://127.0.0.1:{api}/health"}}
  - name: database answers
    sql: {{dsn: "postgres://app:pw-not-shown@127.0.0.1:{dead}/app", query: "select 1", expect: 1}}
    timeout: 5s
  - name: operator agrees
    manual: {{instruction: "Is everything green?"}}
steps:
  - name: change something
    shell: {{command: "touch {touched}"}}
rollbacks:
  - name: undo
    shell: {{command: "rm -f {touched}"}}
"#,
        api = api.port,
        touched = touched.display()
    );
    let (out, j) = run(&root, &runbook(&root, "broken.yaml", &yaml), &[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(j["result"], "failed");
    assert_eq!(j["hypothesis_held"], false);
    assert_eq!(step(&j, "api answers")["detail"], "HTTP 503, expected 2xx");
    let db = step(&j, "database answers")["detail"].as_str().unwrap().to_string();
    assert!(db.contains("cannot connect") && !db.contains("pw-not-shown"), "{db}");
    let manual = step(&j, "operator agrees")["detail"].as_str().unwrap().to_string();
    assert!(manual.contains("--yes"), "without a terminal and --yes a manual step fails: {manual}");
    assert_eq!(step(&j, "change something")["status"], "skipped");
    assert_eq!(j["rollbacks_ran"], false);
    assert!(!touched.exists());
    assert!(j["reasons"][0].as_str().unwrap().contains("nothing was changed"));
    assert!(!j.to_string().contains("pw-not-shown") && !stderr(&out).contains("pw-not-shown"));
}

#[test]
fn a_step_past_its_timeout_is_stopped_with_everything_it_started() {
    let root = TempRoot::new();
    let pgid_file = root.path().join("pgid");
    let yaml = format!(
        r#"
title: Timeouts
steps:
  - name: hangs
    shell: {{command: "echo $$$$ > {pgid}; sleep 300 & sleep 300"}}
    timeout: 1s
    on_failure: continue
  - name: never true
    wait: {{until: {{shell: {{command: "false"}}}}, every: 100ms}}
    timeout: 1s
rollbacks:
  - name: undo
    shell: {{command: "echo undone"}}
"#,
        pgid = pgid_file.display()
    );
    let started = Instant::now();
    let (out, j) = run(&root, &runbook(&root, "timeouts.yaml", &yaml), &[], &[]);
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(step(&j, "hangs")["status"], "timed_out");
    assert!(step(&j, "hangs")["duration_seconds"].as_f64().unwrap() < 10.0);
    let w = step(&j, "never true");
    assert_eq!(w["status"], "timed_out");
    assert!(w["detail"].as_str().unwrap().contains("attempt"), "{w:#}");
    assert_eq!(step(&j, "undo")["status"], "passed");
    let pgid: i32 = std::fs::read_to_string(&pgid_file).unwrap().trim().parse().unwrap();
    assert!(group_members(pgid).is_empty(), "the step's processes outlived its timeout: {:?}", group_members(pgid));
}

#[test]
fn sigint_stops_the_running_step_then_runs_the_rollbacks() {
    let root = TempRoot::new();
    let pgid_file = root.path().join("pgid");
    let undone = root.path().join("undone");
    let report = root.path().join("sigint.html");
    let yaml = format!(
        r#"
title: Interrupted
steps:
  - name: long step
    shell: {{command: "echo $$$$ > {pgid}.tmp && mv {pgid}.tmp {pgid}; sleep 300"}}
  - name: next step
    shell: {{command: "echo never"}}
rollbacks:
  - name: undo
    shell: {{command: "touch {undone}"}}
"#,
        pgid = pgid_file.display(),
        undone = undone.display()
    );
    let file = runbook(&root, "sigint.yaml", &yaml);
    let child = spawn_drill(&["drill", "run", &file.display().to_string(), "--report", &report.display().to_string()]);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let guard = drcheck_e2e::proc::KillOnDrop::new(child);
    wait_for_file(&pgid_file, Duration::from_secs(30));
    let stopped_at = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let out = guard.wait_with_output(Duration::from_secs(30));
    assert!(stopped_at.elapsed() < Duration::from_secs(15), "{:?}", stopped_at.elapsed());
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let j = journal(&report);
    assert_eq!(j["result"], "aborted");
    assert_eq!(j["interrupted_by"], "SIGINT");
    assert_eq!(step(&j, "long step")["status"], "aborted");
    assert_eq!(step(&j, "next step")["status"], "skipped");
    assert_eq!(step(&j, "undo")["status"], "passed");
    assert!(undone.exists());
    let pgid: i32 = std::fs::read_to_string(&pgid_file).unwrap().trim().parse().unwrap();
    assert!(group_members(pgid).is_empty(), "the step's processes survived SIGINT");
}

#[test]
fn malformed_runbooks_are_refused_with_their_line() {
    let root = TempRoot::new();
    let cases = [
        (
            "unknown-key.yaml",
            "title: t\nsteps:\n  - name: a\n    shell: {command: ls}\n    timout: 5s\n",
            "line 5",
            "unknown field `timout`",
        ),
        (
            "wrong-type.yaml",
            "title: t\nsteps:\n  - name: a\n    shell: {command: ls}\n    recovery: sometimes\n",
            "line 5",
            "boolean",
        ),
        (
            "missing-field.yaml",
            "title: t\nsteps:\n  - name: a\n    shell: {expect_exit: 0}\n",
            "line 4",
            "missing field `command`",
        ),
        (
            "bad-duration.yaml",
            "title: t\nsteps:\n  - name: a\n    shell: {command: ls}\n    timeout: forever\n",
            ":5:",
            "timeout",
        ),
    ];
    for (name, yaml, line, what) in cases {
        let file = runbook(&root, name, yaml);
        for cmd in ["check", "run"] {
            let (out, _) = drcheck(&["drill", cmd, &file.display().to_string()], &[], LIMIT);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{name}: {err}");
            assert!(err.contains(name) && err.contains(line) && err.contains(what), "{name} ({cmd}): {err}");
        }
    }
}

#[test]
fn a_dry_run_prints_the_plan_and_executes_nothing() {
    let root = TempRoot::new();
    let marker = root.path().join("marker");
    let yaml = format!(
        r#"
title: Dry
variables: {{marker: "{}", db_password: hunter2hunter2}}
steady_state:
  - name: check
    shell: {{command: "touch ${{marker}}-steady"}}
steps:
  - name: act
    shell: {{command: "touch ${{marker}} # ${{db_password}}"}}
    recovery: true
rollbacks:
  - name: undo
    shell: {{command: "touch ${{marker}}-rollback"}}
"#,
        marker.display()
    );
    let file = runbook(&root, "dry.yaml", &yaml);
    let (out, _) = drcheck(
        &["drill", "run", &file.display().to_string(), "--dry-run", "--var", &format!("marker={}", marker.display())],
        &[],
        LIMIT,
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(text.contains(&format!("$ touch {} # ***", marker.display())), "{text}");
    assert!(text.contains("nothing was executed") && !text.contains("hunter2hunter2"), "{text}");
    for suffix in ["", "-steady", "-rollback"] {
        assert!(!root.path().join(format!("marker{suffix}")).exists(), "the dry run executed something");
    }
    assert!(
        std::fs::read_dir(root.path()).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().ends_with(".html"))
    );
}

#[test]
fn a_manual_step_is_confirmed_at_a_terminal_and_records_who_and_when() {
    // `script` gives drcheck a terminal; the answers are typed into it.
    let root = TempRoot::new();
    let yaml = r#"
title: Manual
steps:
  - name: flip the switch
    manual: {instruction: "Point the DNS name at the standby"}
    timeout: 30s
  - name: refuse
    manual: {instruction: "Answer no"}
    timeout: 30s
    on_failure: continue
"#;
    let file = runbook(&root, "manual.yaml", yaml);
    let report = root.path().join("manual.html");
    let cmd =
        format!("{} drill run {} --report {}", drcheck_e2e::drcheck_bin().display(), file.display(), report.display());
    let mut child = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("USER", "alice")
        .env_remove("SUDO_USER")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let guard = drcheck_e2e::proc::KillOnDrop::new(child);
    use std::io::Write;
    // Each answer once its prompt can have appeared; "maybe" is asked again.
    for answer in ["yes\n", "maybe\n", "no\n"] {
        std::thread::sleep(Duration::from_millis(700));
        stdin.write_all(answer.as_bytes()).unwrap();
    }
    let out = guard.wait_with_output(Duration::from_secs(60));
    drop(stdin);
    let shown = stdout(&out);
    assert!(shown.contains("OPERATOR ACTION") && shown.contains("Point the DNS name at the standby"), "{shown}");
    let j = journal(&report);
    let flip = step(&j, "flip the switch");
    assert_eq!(flip["status"], "passed", "{flip:#}");
    assert_eq!(flip["confirmation"]["by"], "alice");
    assert_eq!(flip["confirmation"]["how"], "terminal");
    assert!(flip["confirmation"]["at"].as_str().unwrap().starts_with("20"));
    let refuse = step(&j, "refuse");
    assert_eq!(refuse["status"], "failed");
    assert_eq!(refuse["detail"], "alice answered no");
}

#[test]
fn a_verify_step_past_its_timeout_cancels_the_verification_and_leaves_no_sandbox() {
    let scene = Scene::start();
    // A bigger dump behind a slow link: the verification would take ~30 s.
    scene.upload_big_backup();
    let slow = drcheck_e2e::Throttle::start(scene.s3.port, 500_000);
    let mut spec = scene.spec();
    spec.endpoint = slow.endpoint();
    let config = scene.config(&spec).display().to_string();
    let yaml = "title: Slow verify\nsteps:\n  - name: verify\n    verify: {target: orders}\n    timeout: 4s\n";
    let file = runbook(&scene.root, "slow-verify.yaml", yaml);
    let started = Instant::now();
    let (out, j) = run(&scene.root, &file, &["--config", &config], &scene.env());
    assert!(started.elapsed() < Duration::from_secs(25), "{:?}", started.elapsed());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v = step(&j, "verify");
    assert_eq!(v["status"], "timed_out", "{v:#}");
    assert!(v["duration_seconds"].as_f64().unwrap() < 15.0);
    assert!(scene.leftover_sandboxes().is_empty(), "{:?}", scene.leftover_sandboxes());
    let scratch = scene.scratch.display().to_string();
    assert!(
        drcheck_e2e::processes_mentioning(&scratch).is_empty(),
        "{:?}",
        drcheck_e2e::processes_mentioning(&scratch)
    );
    // The cancelled verification is in the history, as `aborted`.
    let (h, _) = drcheck(&["--config", &config, "history", "--json"], &scene.env(), LIMIT);
    assert!(stdout(&h).contains("\"aborted\""), "{}", stdout(&h));
}

#[test]
fn sigterm_is_a_kill_switch_too_and_a_second_signal_stops_the_rollbacks() {
    let root = TempRoot::new();
    let started_file = root.path().join("started");
    let rollback_file = root.path().join("rollback-started");
    let report = root.path().join("twice.html");
    let yaml = format!(
        r#"
title: Twice
steps:
  - name: long step
    shell: {{command: "touch {started}; sleep 300"}}
rollbacks:
  - name: slow rollback
    shell: {{command: "touch {rb}; sleep 300"}}
  - name: later rollback
    shell: {{command: "echo never"}}
"#,
        started = started_file.display(),
        rb = rollback_file.display()
    );
    let file = runbook(&root, "twice.yaml", &yaml);
    let child = spawn_drill(&["drill", "run", &file.display().to_string(), "--report", &report.display().to_string()]);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let guard = drcheck_e2e::proc::KillOnDrop::new(child);
    wait_for_file(&started_file, Duration::from_secs(30));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    wait_for_file(&rollback_file, Duration::from_secs(30));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = guard.wait_with_output(Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let j = journal(&report);
    assert_eq!(j["result"], "aborted");
    assert_eq!(j["interrupted_by"], "SIGTERM");
    assert_eq!(step(&j, "long step")["status"], "aborted");
    assert_eq!(step(&j, "slow rollback")["status"], "aborted");
    assert_eq!(step(&j, "later rollback")["status"], "skipped");
}

/// Issue 26: the dry run shows the command that will run, byte for byte — quotes,
/// semicolons and a URL's query included — with only a URL's password masked; and the
/// real run executes exactly that.
#[test]
fn the_dry_run_shows_the_command_that_runs() {
    let root = TempRoot::new();
    let out_file = root.path().join("out.txt");
    let command = format!(
        r#"printf '%s\n' "postgres://app:pw-secret@db:5432/orders?sslmode=require" "a;b" 'c "d"' > {}"#,
        out_file.display()
    );
    let yaml = format!(
        "title: Exact\nsteps:\n  - name: write\n    shell: {{command: {}}}\n    recovery: true\n",
        serde_json::to_string(&command).unwrap()
    );
    let file = runbook(&root, "exact.yaml", &yaml);
    let (out, _) = drcheck(&["drill", "run", &file.display().to_string(), "--dry-run"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let shown = command.replace("app:pw-secret@", "app:***@");
    assert!(stdout(&out).contains(&format!("$ {shown}\n")), "{}", stdout(&out));
    let (out, _) = run(&root, &file, &[], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let written = std::fs::read_to_string(&out_file).unwrap();
    assert_eq!(written, "postgres://app:pw-secret@db:5432/orders?sslmode=require\na;b\nc \"d\"\n");
}

/// Issue 26: `drill check` reads only the config's targets — it does not demand the
/// secrets (`${ORDERS_PW}`) a drill host may not hold, yet still names a target the
/// config lacks; `drill run` still needs them.
#[test]
fn drill_check_does_not_demand_the_configs_secrets() {
    let root = TempRoot::new();
    let config = root.path().join("drcheck.toml");
    std::fs::write(
        &config,
        "[storage.b]\nkind = \"filesystem\"\npath = \"/srv\"\n[[target]]\nname = \"orders\"\n\
         primary = \"postgres://verifier:${DRILL_TEST_UNSET_PW_26}@db:5432/orders\"\nstorage = \"b\"\nrto = \"30m\"\nrpo = \"26h\"\n",
    )
    .unwrap();
    let c = config.display().to_string();
    let good = runbook(&root, "good.yaml", "title: t\nsteps:\n  - name: v\n    verify: {target: orders}\n");
    let (out, _) = drcheck(&["--config", &c, "drill", "check", &good.display().to_string()], &[], LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("ok"), "{}", stdout(&out));
    let typo = runbook(&root, "typo.yaml", "title: t\nsteps:\n  - name: v\n    verify: {target: ordrs}\n");
    let (out, _) = drcheck(&["--config", &c, "drill", "check", &typo.display().to_string()], &[], LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stderr(&out).contains("\"ordrs\"") && stderr(&out).contains("orders"), "{}", stderr(&out));
    let (out, _) = drcheck(&["--config", &c, "drill", "run", &good.display().to_string()], &[], LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("DRILL_TEST_UNSET_PW_26"), "a run still needs it: {}", stderr(&out));
}
