//! Verdicts that blame the right party: the backup (exit 1), the world or drcheck's own
//! limits (exit 3). Each test here pins a case that once blamed the wrong one.

use drcheck_e2e::hostile::{Lab, sh};
use std::time::Duration;

/// A plain dump big enough that half of it, compressed, is a truncated stream.
fn dump_text() -> String {
    let mut s = String::from(
        "--\n-- PostgreSQL database dump\n--\n\n-- Dumped from database version 15.18\n\n\
         create table t (id int, v text);\ncopy t (id, v) from stdin;\n",
    );
    for i in 0..100_000 {
        s.push_str(&format!("{i}\tvalue number {i} with some text to compress {}\n", i * 7919 % 10007));
    }
    s.push_str("\\.\n");
    s
}

/// A compressed backup cut short is the backup's fault (exit 1, "truncated"), not a
/// failed download (exit 3) — for gzip, zstd and lz4 alike. The whole file passes.
#[test]
fn a_truncated_compressed_backup_is_the_backups_fault() {
    let lab = Lab::new();
    let sql = lab.root.path().join("d.sql");
    std::fs::write(&sql, dump_text()).unwrap();
    let config = lab.config("", "");
    for (ext, cmd) in [("gz", "gzip -c"), ("zst", "zstd -q -c"), ("lz4", "lz4 -q -c")] {
        let whole = lab.root.path().join(format!("d.sql.{ext}"));
        sh(&format!("{cmd} {} > {}", sql.display(), whole.display()));
        let bytes = std::fs::read(&whole).unwrap();
        lab.put(&format!("whole.sql.{ext}"), &bytes);
        lab.put(&format!("half.sql.{ext}"), &bytes[..bytes.len() / 2]);

        let (code, run, all) = lab.verify(&config, &format!("whole.sql.{ext}"));
        assert_eq!(code, Some(0), "{ext}: the whole backup: {run}\n{all}");

        let (code, run, all) = lab.verify(&config, &format!("half.sql.{ext}"));
        assert_eq!(code, Some(1), "{ext}: {run}\n{all}");
        assert_eq!(run["result"], "failed", "{ext}: {run}");
        let msg = run["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("truncated") || msg.contains("corrupt"), "{ext}: {msg}");
        assert!(!msg.contains("download failed"), "{ext}: blamed the store: {msg}");
    }
}

/// Runs `drcheck --config CONFIG ARGS head -1` (ARGS ends in the pipe, and says which
/// streams go into it); returns what the shell printed, with drcheck's exit status as
/// `status=N`.
fn into_head(config: &std::path::Path, args: &str) -> String {
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{} --config {} {args} head -1 >/dev/null; echo \"status=${{PIPESTATUS[0]}}\"",
            drcheck_e2e::drcheck_bin().display(),
            config.display()
        ))
        .output()
        .unwrap();
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A reader that stops early (`| head -1`) ends the command quietly: no panic, exit 0.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let lab = Lab::new();
    for i in 0..3000 {
        lab.put(&format!("orders/{i:05}-a-backup-with-a-rather-long-name-to-fill-the-pipe.dump"), b"PGDMP");
    }
    let config = lab.config("", "prefix = \"orders/\"");
    let text = into_head(&config, "backups list --target t |");
    assert!(text.contains("status=0"), "{text}");
    assert!(!text.contains("panicked") && !text.contains("Broken pipe"), "{text}");
}

/// A reader of the log that stops early (`verify -v 2>&1 | head -1`) does not stop the
/// verification: no panic half-way, the verdict's exit code, the lease released (the next
/// run does not have to take it over) and no sandbox left behind.
#[test]
fn a_closed_stderr_does_not_stop_a_verification() {
    let lab = Lab::new();
    lab.put("d.sql", dump_text().as_bytes());
    let config = lab.config("", "");
    let text = into_head(&config, "verify -v --target t --backup d.sql 2>&1 |");
    assert!(text.contains("status=0"), "{text}");
    let left = std::fs::read_dir(lab.private_dir()).map(|d| d.count()).unwrap_or(0);
    assert_eq!(left, 0, "a sandbox was left behind");
    let (code, run, all) = lab.verify(&config, "d.sql");
    assert_eq!(code, Some(0), "{run}\n{all}");
    assert!(!all.contains("took over the lease"), "the first run did not release its lease: {all}");
}

/// The value of `metric{target="…"}` in a text exposition.
fn sample(text: &str, metric: &str, target: &str) -> Option<f64> {
    drcheck_e2e::sample(text, metric, &format!("target=\"{target}\""))
}

/// The textfile keeps every target's last success across runs and `--target`: after
/// pass → fail → fail (and a run of another target) the last success is still the
/// first run's, and promtool shows `DrcheckVerificationStale` firing on that exposition.
#[test]
fn the_textfile_keeps_last_success_and_the_stale_alert_fires() {
    let lab = Lab::new();
    let prom = lab.root.path().join("drcheck.prom");
    let text = format!(
        "[state]\nurl = \"sqlite://{root}/history.db\"\n[sandbox]\nscratch_dir = \"{scratch}\"\n\
         [metrics]\ntextfile = \"{prom}\"\n\
         [storage.local]\nkind = \"filesystem\"\npath = \"{store}\"\n\
         [[target]]\nname = \"a\"\nstorage = \"local\"\nprefix = \"a/\"\nrto = \"10m\"\nrpo = \"3650d\"\n\
         [[target]]\nname = \"b\"\nstorage = \"local\"\nprefix = \"b/\"\nrto = \"10m\"\nrpo = \"3650d\"\n",
        root = lab.root.path().display(),
        scratch = lab.scratch.display(),
        prom = prom.display(),
        store = lab.store.display(),
    );
    let config = lab.root.path().join("two.toml");
    std::fs::write(&config, text).unwrap();
    let c = config.display().to_string();
    let good =
        "--\n-- PostgreSQL database dump\n--\n\ncreate table t (id int primary key);\ninsert into t values (1);\n";
    lab.put("a/1.sql", good.as_bytes());
    lab.put("b/1.sql", good.as_bytes());
    let verify = |target: &str| {
        let (out, _) =
            drcheck_e2e::drcheck(&["--config", &c, "verify", "--target", target], &[], Duration::from_secs(120));
        out.status.code()
    };
    assert_eq!(verify("a"), Some(0));
    let exposition = std::fs::read_to_string(&prom).unwrap();
    let first = sample(&exposition, "drcheck_last_success_timestamp_seconds", "a").expect("a's last success");

    std::thread::sleep(Duration::from_millis(1100));
    lab.put("a/2.sql", b"--\n-- PostgreSQL database dump\n--\n\nthis is not sql;\n");
    assert_eq!(verify("a"), Some(1));
    assert_eq!(verify("a"), Some(1));
    assert_eq!(verify("b"), Some(0));
    let exposition = std::fs::read_to_string(&prom).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert_eq!(sample(&exposition, "drcheck_last_success_timestamp_seconds", "a"), Some(first), "{exposition}");
    assert_eq!(sample(&exposition, "drcheck_last_run_success", "a"), Some(0.0), "{exposition}");
    assert!(sample(&exposition, "drcheck_last_success_timestamp_seconds", "b").is_some(), "{exposition}");

    // promtool's clock starts at 0: shift the series so that its age now is its age then.
    let age = (now - first).round() as i64;
    let at = 40 * 3600 + age; // what `time() - last` is at eval_time 40h
    let human = format!("{}d {}h {}m {}s", at / 86400, at % 86400 / 3600, at % 3600 / 60, at % 60);
    let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus/rules.yml");
    let test = format!(
        "rule_files: [{rules}]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n\
         \x20     - series: 'drcheck_last_success_timestamp_seconds{{target=\"a\"}}'\n        values: '{v}x2500'\n\
         \x20   alert_rule_test:\n      - eval_time: 35h\n        alertname: DrcheckVerificationStale\n        exp_alerts: []\n\
         \x20     - eval_time: 40h\n        alertname: DrcheckVerificationStale\n        exp_alerts:\n\
         \x20         - exp_labels: {{severity: critical, target: a}}\n            exp_annotations:\n\
         \x20             summary: \"No successful backup verification of a for 36h\"\n\
         \x20             description: \"a last passed {human} ago.\"\n",
        rules = rules.display(),
        v = -age,
    );
    let file = lab.root.path().join("stale_test.yml");
    std::fs::write(&file, test).unwrap();
    let out = std::process::Command::new("promtool").args(["test", "rules"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

/// `keep_runs` prunes a PostgreSQL history store too (PostgreSQL 15 wants an alias on
/// every subquery), and a pruning failure would show on stderr.
#[test]
fn pruning_works_on_a_postgresql_history_store() {
    let lab = Lab::new();
    let primary = drcheck_e2e::PgPrimary::start(&lab.root);
    let pw = drcheck_e2e::unique("statepw");
    primary.psql("postgres", &format!("create role drcheck_state login password '{pw}'"));
    primary.psql("postgres", "create database drcheck_state owner drcheck_state");
    lab.put("ok.sql", b"--\n-- PostgreSQL database dump\n--\n\ncreate table t (id int primary key);\n");
    let config = lab.config("", "");
    let text = std::fs::read_to_string(&config).unwrap();
    let start = text.find("url = \"sqlite").unwrap();
    let end = start + text[start..].find('\n').unwrap();
    let text = format!(
        "{}url = \"{}\"\nkeep_runs = 2{}",
        &text[..start],
        primary.url("drcheck_state", &pw, "drcheck_state"),
        &text[end..]
    );
    std::fs::write(&config, text).unwrap();
    let c = config.display().to_string();
    for _ in 0..3 {
        let (out, _) =
            drcheck_e2e::drcheck(&["--config", &c, "verify", "--target", "t"], &[], Duration::from_secs(120));
        let err = drcheck_e2e::stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(!err.contains("pruning"), "{err}");
    }
    let kept = primary.psql("drcheck_state", "select count(*) from runs");
    assert_eq!(kept, "2", "keep_runs = 2 kept {kept} runs");
}

/// A sink that answers a permanent 4xx (here 400) is not retried: each alert is tried
/// once and dead-lettered at once with the reason; the sink's breaker stays closed.
#[test]
fn a_permanent_sink_error_dead_letters_at_once() {
    let lab = Lab::new();
    let hook = drcheck_e2e::recorder::Recorder::start(400);
    lab.put("bad.sql", b"--\n-- PostgreSQL database dump\n--\n\nthis is not sql;\n");
    let config = lab.config("", "");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!("[[alert]]\nkind = \"webhook\"\nurl = \"{}\"\nmax_attempts = 5\n", hook.url()));
    std::fs::write(&config, text).unwrap();
    let c = config.display().to_string();
    let (out, _) = drcheck_e2e::drcheck(&["--config", &c, "verify", "--target", "t"], &[], Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(1), "{}", drcheck_e2e::stderr(&out));
    let (out, _) = drcheck_e2e::drcheck(&["--config", &c, "alerts", "list"], &[], Duration::from_secs(60));
    let l: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let dead = l["dead_letters"].as_array().unwrap();
    assert!(!dead.is_empty(), "{l}");
    assert_eq!(l["pending"].as_array().unwrap().len(), 0, "nothing waits for a retry: {l}");
    for d in dead {
        assert_eq!(d["attempts"], 1, "tried once: {l}");
        assert!(d.to_string().contains("permanent"), "{d}");
    }
    assert_eq!(hook.requests().len(), dead.len(), "one request per alert");
}

/// `drill check` without a config checks everything else, lists the target references
/// it could not resolve and exits 0; with a config an unknown target is an error.
#[test]
fn drill_check_without_a_config_lists_unresolved_targets() {
    let lab = Lab::new();
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../runbooks/examples/restore-from-backup.yaml");
    let e = example.display().to_string();
    let (out, _) = drcheck_e2e::drcheck(&["drill", "check", &e], &[], Duration::from_secs(60));
    let text = drcheck_e2e::stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", drcheck_e2e::stderr(&out));
    assert!(text.contains(": ok") && text.contains("target \"orders\" not checked"), "{text}");
    // With a config that has no `orders`, the same reference is an error naming the line.
    let config = lab.config("", "");
    let c = config.display().to_string();
    let (out, _) = drcheck_e2e::drcheck(&["--config", &c, "drill", "check", &e], &[], Duration::from_secs(60));
    let err = drcheck_e2e::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no target \"orders\""), "{err}");
}

/// The README's first command works from a checkout the postgres user cannot enter
/// (a clone in a 0700 directory, like root's home): the demo's cluster files live
/// elsewhere.
#[test]
fn the_demo_runs_from_a_checkout_in_a_private_directory() {
    let root = drcheck_e2e::TempRoot::new();
    let private = root.path().join("home");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let checkout = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let clone = private.join("drcheck");
    sh(&format!("git clone -q {} {}", checkout.display(), clone.display()));
    let demo_dir = root.path().join("demo");
    // Issue 26: the demo installs only what it uses. A PATH on which the tests' tools
    // (chromium, cargo-nextest) do not exist, and installers that only record a call:
    // the demo must neither miss them nor try to install anything.
    let farm = root.path().join("path");
    std::fs::create_dir(&farm).unwrap();
    let calls = root.path().join("installer-calls");
    for stub in ["apt-get", "cargo", "pip", "pip3"] {
        let p = farm.join(stub);
        std::fs::write(&p, format!("#!/bin/sh\necho \"{stub} $*\" >> {}\nexit 1\n", calls.display())).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let path = std::env::var("PATH").unwrap_or_default();
    for dir in path.split(':') {
        for e in std::fs::read_dir(dir).into_iter().flatten().filter_map(Result::ok) {
            let name = e.file_name();
            if ["chromium", "cargo-nextest"].contains(&name.to_string_lossy().as_ref()) || farm.join(&name).exists() {
                continue;
            }
            let _ = std::os::unix::fs::symlink(e.path(), farm.join(&name));
        }
    }
    let out = std::process::Command::new("bash")
        .arg(clone.join("scripts/demo.sh"))
        .env("DRCHECK_BIN", drcheck_e2e::drcheck_bin())
        .env("DEMO_DIR", &demo_dir)
        .env("PATH", &farm)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("orders: PASSED"), "{text}");
    assert!(!clone.join(".demo").exists(), "the demo wrote into the checkout");
    let installed = std::fs::read_to_string(&calls).unwrap_or_default();
    assert!(installed.is_empty(), "the demo tried to install: {installed}\n{text}");
    assert!(!text.contains("chromium") && !text.contains("nextest"), "{text}");
}

/// Issue 26: two demos at once each work in a directory of their own and verify their
/// own backup; a kept demo leaves one command that stops everything it left, and a demo
/// into a DEMO_DIR another demo holds is refused.
#[test]
fn two_demos_at_once_verify_their_own_backups_and_a_kept_one_stops_with_one_command() {
    let root = drcheck_e2e::TempRoot::new();
    let tmp = root.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/demo.sh");
    let demo = |envs: &[(&str, String)]| {
        let mut cmd = std::process::Command::new("bash");
        cmd.arg(&script).env("DRCHECK_BIN", drcheck_e2e::drcheck_bin()).env("TMPDIR", &tmp);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        cmd.spawn().unwrap()
    };
    let text = |out: std::process::Output| {
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    let (a, b) = (demo(&[]), demo(&[]));
    let ((ok_a, a), (ok_b, b)) = (text(a.wait_with_output().unwrap()), text(b.wait_with_output().unwrap()));
    assert!(ok_a && a.contains("orders: PASSED"), "{a}");
    assert!(ok_b && b.contains("orders: PASSED"), "{b}");
    let key = |t: &str| t.lines().find(|l| l.contains("uploaded s3://")).unwrap().to_string();
    let dir = |t: &str| t.lines().find(|l| l.starts_with("demo: in ")).unwrap().split(' ').nth(2).unwrap().to_string();
    assert_ne!(dir(&a), dir(&b), "{a}\n{b}");
    // Each verified the backup it uploaded (its own store), nothing of the other.
    for (t, other) in [(&a, &b), (&b, &a)] {
        let k = key(t).split("s3://demo-backups/").nth(1).unwrap().split(' ').next().unwrap().to_string();
        assert!(t.contains(&format!("verify of s3://demo-backups/{k} exited 0")), "{t}");
        assert!(!t.contains(&dir(other)), "one demo touched the other's directory: {t}");
    }
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().filter_map(Result::ok).map(|e| e.file_name()).collect();
    assert!(left.iter().all(|n| !n.to_string_lossy().starts_with("drcheck-demo-")), "{left:?}");

    // Kept: one printed command stops the primary and the S3 server and removes the rest.
    let kept_dir = root.path().join("kept");
    let (ok, kept) = text(
        demo(&[("DEMO_KEEP", "1".into()), ("DEMO_DIR", kept_dir.display().to_string())]).wait_with_output().unwrap(),
    );
    assert!(ok, "{kept}");
    let stop =
        kept.lines().find_map(|l| l.strip_prefix("demo: stop everything with: ")).expect("a stop command").to_string();
    let moto_pid: i32 = std::fs::read_to_string(kept_dir.join("moto.pid")).unwrap().trim().parse().unwrap();
    assert!(kept_dir.join("data/postmaster.pid").exists(), "the primary was left running");
    // While it is kept, another demo into the same directory… runs after stopping it
    // (the kept one holds no lock); one running now would be refused:
    let lock = std::fs::File::create(kept_dir.with_extension("lock")).unwrap();
    nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map(|held| {
            let (ok, refused) = text(demo(&[("DEMO_DIR", kept_dir.display().to_string())]).wait_with_output().unwrap());
            assert!(!ok && refused.contains("another demo is using"), "{refused}");
            drop(held);
        })
        .unwrap_or_else(|_| panic!("the kept demo still holds its directory's lock"));
    sh(&stop);
    assert!(!kept_dir.exists(), "stop.sh removes the kept demo");
    let alive = || {
        std::path::Path::new(&format!("/proc/{moto_pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{moto_pid}/stat")).unwrap_or_default().contains(") Z ")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!alive(), "the kept S3 server still runs");
}

/// A physical backup is checked on every database it holds, not just `postgres`: the
/// self-checks cover both application databases, and each finding says so.
#[test]
fn a_physical_backup_is_checked_on_every_database() {
    let lab = Lab::new();
    let primary = drcheck_e2e::PgPrimary::start(&lab.root);
    for (db, n) in [("orders", 3), ("billing", 2)] {
        primary.psql("postgres", &format!("create database {db}"));
        for i in 0..n {
            primary.psql(
                db,
                &format!("create table t{i} (id serial primary key, v text); insert into t{i} (v) values ('x')"),
            );
        }
    }
    let bb = lab.root.pg_dir("bb").join("b");
    primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "stream", "--checkpoint=fast"]);
    lab.put("phys/b1/base.tar", &std::fs::read(bb.join("base.tar")).unwrap());
    lab.put("phys/b1/pg_wal.tar", &std::fs::read(bb.join("pg_wal.tar")).unwrap());
    let config = lab.config("", "");
    let (code, run, all) = lab.verify(&config, "phys/b1/");
    assert_eq!(code, Some(0), "{run}\n{all}");
    let finding = |name: &str| {
        run["validators"].as_array().unwrap().iter().find(|v| v["name"] == name).cloned().unwrap_or_default()
    };
    let full_read = finding("full_read");
    assert_eq!(full_read["status"], "passed", "{full_read}");
    let detail = full_read["detail"].as_str().unwrap();
    assert!(detail.contains("orders: passed") && detail.contains("billing: passed"), "{detail}");
    assert_eq!(full_read["measurements"]["covered_tables"], 5.0, "{full_read}");
    assert!(full_read["measurements"]["covered_databases"].as_f64().unwrap() >= 2.0, "{full_read}");
    let sequences = finding("sequences");
    assert_eq!(sequences["measurements"]["covered_sequences"], 5.0, "{sequences}");
    // No backup_manifest was uploaded: the report says the check was not done.
    assert_eq!(run["restore"]["manifest"], "not checked: the backup has no backup_manifest", "{run}");
}

/// A table without an integer key (text key) is hashed in bounded block ranges on each
/// side, not in one full-table query, and a changed row is still caught.
#[test]
fn keyless_tables_are_checksummed_in_bounded_chunks() {
    let lab = Lab::new();
    let primary = drcheck_e2e::PgPrimary::start_with(&lab.root, &[("track_commit_timestamp", "on")]);
    let pw = drcheck_e2e::unique("pw");
    primary.psql("postgres", &format!("create role verifier login password '{pw}'"));
    primary.psql("postgres", "grant pg_read_all_data to verifier");
    primary.psql("postgres", "create database shop");
    primary.psql("shop", "create table items (sku text primary key, qty int)");
    primary.psql("shop", "insert into items select 'sku-' || g, g from generate_series(1, 3000) g");
    primary.psql("shop", "analyze items");
    // A second before the dump's start (whole seconds): its commit times tell them apart.
    std::thread::sleep(Duration::from_millis(1100));
    let dump = lab.root.path().join("shop.dump");
    primary.dump("shop", &dump, &[]);
    lab.put("shop.dump", &std::fs::read(&dump).unwrap());
    let target = format!(
        "primary = \"{}\"\n[target.validators]\nenabled = [\"checksums\"]\nchecksum_chunk_rows = 500\n",
        primary.url("verifier", &pw, "shop")
    );
    let config = lab.config("", &target);
    let (code, run, all) = lab.verify(&config, "shop.dump");
    assert_eq!(code, Some(0), "{run}\n{all}");
    let f = drcheck_e2e::validator(&run, "checksums");
    assert_eq!(f["status"], "passed", "{f}");
    assert_eq!(f["measurements"]["covered_rows"], 3000.0, "{f}");
    let queries = run["primary_queries"]["count"].as_f64().unwrap();
    assert!(queries >= 6.0, "3000 rows in chunks of 500 take several queries, not one: {queries}");

    // A backup whose row differs from the primary's, which did not change since: the
    // table has no integer key, but nothing changed on the primary to explain it.
    let bad = lab.root.path().join("bad.dump");
    primary.tampered_dump("shop", "update items set qty = qty + 1 where sku = 'sku-1234'", &bad);
    lab.put("bad.dump", &std::fs::read(&bad).unwrap());
    let (code, run, _) = lab.verify(&config, "bad.dump");
    assert_eq!(code, Some(1), "{run}");
    let detail = drcheck_e2e::validator(&run, "checksums")["detail"].as_str().unwrap().to_string();
    assert!(
        detail.contains("public.items: 1 rows the primary held unchanged") && detail.contains("(sku)=(sku-1234)"),
        "{detail}"
    );
    // The primary's own update since the backup, on the same table: the row changed since
    // is counted, every other row of the primary's found in the copy — decided, passed.
    primary.psql("shop", "update items set qty = qty + 1 where sku = 'sku-1234'");
    let (code, run, all) = lab.verify(&config, "shop.dump");
    assert_eq!(code, Some(0), "{run}\n{all}");
    let f = drcheck_e2e::validator(&run, "checksums");
    assert!(f["inconclusive"].as_array().is_none(), "decided: {f}");
    assert_eq!(f["measurements"]["covered_rows"], 2999.0, "{f}");
    assert!(f["detail"].as_str().unwrap().contains("1 rows changed on the primary since the copy's point"), "{f}");
}

/// A base backup with a tablespace (pg_basebackup -Ft writes one more tar, OID.tar)
/// restores: the tablespace is remapped into the run's own directory, and its table is
/// read and checked like any other.
#[test]
fn a_base_backup_with_a_tablespace_restores() {
    let lab = Lab::new();
    let primary = drcheck_e2e::PgPrimary::start(&lab.root);
    let ts = lab.root.pg_dir("ts");
    primary.psql("postgres", &format!("create tablespace extra location '{}'", ts.display()));
    primary.psql("postgres", "create table t (id int primary key) tablespace extra");
    primary.psql("postgres", "insert into t select generate_series(1, 500)");
    let bb = lab.root.pg_dir("bb").join("b");
    primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "stream", "--checkpoint=fast"]);
    let mut names = Vec::new();
    for e in std::fs::read_dir(&bb).unwrap().filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        lab.put(&format!("phys/b1/{name}"), &std::fs::read(e.path()).unwrap());
        names.push(name);
    }
    assert!(names.iter().any(|n| n.ends_with(".tar") && n.chars().next().unwrap().is_ascii_digit()), "{names:?}");
    let config = lab.config("", "");
    let (code, run, all) = lab.verify(&config, "phys/b1/");
    assert_eq!(code, Some(0), "{run}\n{all}");
    let full_read = run["validators"].as_array().unwrap().iter().find(|v| v["name"] == "full_read").unwrap().clone();
    assert_eq!(full_read["status"], "passed", "{full_read}");
    assert!(full_read["measurements"]["covered_tables"].as_f64().unwrap() >= 1.0, "{full_read}");
    assert_eq!(run["restore"]["manifest"], "verified with pg_verifybackup against backup_manifest", "{run}");
    // Nothing was written where the primary keeps its tablespace.
    assert!(lab.leftovers().is_empty(), "{:?}", lab.leftovers());
}

/// Comparing databases that have no table on either side compared nothing: `row_counts`
/// and `checksums` are skipped ("covered nothing"), never passed.
#[test]
fn comparisons_over_no_tables_are_skipped_not_passed() {
    let lab = Lab::new();
    let primary = drcheck_e2e::PgPrimary::start(&lab.root);
    let pw = drcheck_e2e::unique("pw");
    primary.psql("postgres", &format!("create role verifier login password '{pw}'"));
    primary.psql("postgres", "create database empty");
    let dump = lab.root.path().join("empty.dump");
    primary.dump("empty", &dump, &[]);
    lab.put("empty.dump", &std::fs::read(&dump).unwrap());
    let target = format!(
        "primary = \"{}\"\n[target.validators]\nenabled = [\"row_counts\", \"checksums\", \"schema\"]\n",
        primary.url("verifier", &pw, "empty")
    );
    let config = lab.config("", &target);
    let (_, run, all) = lab.verify(&config, "empty.dump");
    for name in ["row_counts", "checksums"] {
        let f = run["validators"].as_array().unwrap().iter().find(|v| v["name"] == name).unwrap().clone();
        assert_eq!(f["status"], "skipped", "{name}: {f}\n{all}");
        assert!(f["detail"].as_str().unwrap().contains("covered nothing"), "{f}");
    }
    // The schema still compared something (the database's objects): that one passed.
    let schema = run["validators"].as_array().unwrap().iter().find(|v| v["name"] == "schema").unwrap().clone();
    assert_eq!(schema["status"], "passed", "{schema}");
}

/// SIGTERM during a physical restore (a base backup streaming in over a slow link and
/// being unpacked): drcheck exits within 10 s, as `aborted`/incomplete, and leaves no
/// sandbox, no file and no process behind.
#[test]
fn sigterm_during_a_physical_restore_exits_within_seconds_leaving_nothing() {
    let lab = Lab::new();
    let primary = drcheck_e2e::PgPrimary::start(&lab.root);
    primary.psql("postgres", "create table filler as select g, md5(g::text) as t from generate_series(1, 200000) g");
    let bb = lab.root.pg_dir("bb").join("b");
    primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "stream", "--checkpoint=fast"]);
    let s3 = drcheck_e2e::S3Server::start(&lab.root);
    let bucket = drcheck_e2e::unique("phys");
    s3.make_bucket(&bucket);
    for f in ["base.tar", "pg_wal.tar"] {
        s3.upload(&bb.join(f), &bucket, &format!("phys/b1/{f}"));
    }
    let slow = drcheck_e2e::Throttle::start(s3.port, 2_000_000);
    let text = format!(
        "[state]\nurl = \"sqlite://{root}/history.db\"\n[sandbox]\nscratch_dir = \"{scratch}\"\n\
         [storage.s3]\nkind = \"s3\"\nbucket = \"{bucket}\"\nendpoint = \"{endpoint}\"\npath_style = true\n\
         [[target]]\nname = \"t\"\nstorage = \"s3\"\nprefix = \"phys/\"\nrto = \"10m\"\nrpo = \"1d\"\n",
        root = lab.root.path().display(),
        scratch = lab.scratch.display(),
        endpoint = slow.endpoint(),
    );
    let config = lab.root.path().join("phys.toml");
    std::fs::write(&config, text).unwrap();
    let mut child = std::process::Command::new(drcheck_e2e::drcheck_bin())
        .args(["--config", &config.display().to_string(), "verify", "--json"])
        .envs(drcheck_e2e::AWS_ENV)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the base backup is being unpacked into the sandbox.
    let private = lab.private_dir();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let unpacking = std::fs::read_dir(&private).ok().is_some_and(|d| {
            d.filter_map(Result::ok)
                .any(|e| std::fs::read_dir(e.path().join("data")).is_ok_and(|mut f| f.next().is_some()))
        });
        if unpacking {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the physical restore never started unpacking");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let sandbox: Vec<_> =
        std::fs::read_dir(&private).unwrap().filter_map(Result::ok).map(|e| e.path().display().to_string()).collect();
    let status = drcheck_e2e::proc::signal_and_wait(
        &mut child,
        nix::sys::signal::Signal::SIGTERM,
        Duration::from_secs(10),
        "drcheck",
    );
    assert_eq!(status.code(), Some(3), "an interrupted run is incomplete");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert!(out.contains("\"aborted\""), "{out}");
    std::thread::sleep(Duration::from_secs(1));
    assert!(lab.leftovers().is_empty(), "left behind: {:?}", lab.leftovers());
    for dir in sandbox {
        assert!(drcheck_e2e::processes_mentioning(&dir).is_empty(), "a process of {dir} is still running");
    }
}
