//! Every verdict on the right clock, with the right blame (issue 22): each test pins one
//! finding of a review, reproduced against real parts, and fails on the code before.

use drcheck_e2e::hostile::{Lab, assert_ran};
use drcheck_e2e::{PgPrimary, TempRoot, drcheck, stderr, unique, validator};
use std::time::{Duration, Instant};

fn plain(body: &str) -> Vec<u8> {
    format!("--\n-- PostgreSQL database dump\n--\n\n-- Dumped from database version 15.18\n\n{body}").into_bytes()
}

/// A primary with a verifier role, a database `shop` and its URL for that role.
fn shop(lab: &Lab) -> (PgPrimary, String) {
    let primary = PgPrimary::start(&lab.root);
    let pw = unique("pw");
    primary.psql("postgres", &format!("create role verifier login password '{pw}'"));
    primary.psql("postgres", "grant pg_read_all_data to verifier");
    primary.psql("postgres", "create database shop");
    let url = primary.url("verifier", &pw, "shop");
    (primary, url)
}

/// Rows written after pg_dump's snapshot and before the file landed in the store are
/// on the primary and rightly not in the dump: the `as_of` cut-off is the dump's own
/// time (its header), not the object's upload time.
#[test]
fn rows_written_between_the_dump_and_its_upload_are_not_missing() {
    let lab = Lab::new();
    let (primary, url) = shop(&lab);
    primary.psql("shop", "create table orders (id serial primary key, at timestamptz not null default now())");
    primary.psql("shop", "insert into orders (at) select now() from generate_series(1, 100)");
    std::thread::sleep(Duration::from_millis(1100));
    let dump = lab.root.path().join("shop.dump");
    primary.dump("shop", &dump, &[]);
    std::thread::sleep(Duration::from_millis(1100));
    primary.psql("shop", "insert into orders (at) select now() from generate_series(1, 50)");
    std::thread::sleep(Duration::from_millis(1100));
    lab.put("shop.dump", &std::fs::read(&dump).unwrap());
    let config = lab.config("", &format!("primary = \"{url}\"\n[target.as_of]\n\"public.orders\" = \"at\"\n"));
    let (code, run, all) = lab.verify(&config, "shop.dump");
    assert_ran(&run, code, 0, &all);
    assert_eq!(validator(&run, "row_counts")["status"], "passed", "{run}");
    assert_eq!(validator(&run, "checksums")["status"], "passed", "{run}");
    let b = &run["backup"];
    assert_eq!(b["created_at_source"], "dump header", "{b}");
    assert!(b["created_at"].as_str().unwrap() < b["uploaded_at"].as_str().unwrap(), "{b}");
}

/// A `--backup` that names nothing in the store is the caller's mistake: exit 2, and
/// no run is recorded (the status page, evidence and alerts never count it).
#[test]
fn a_mistyped_backup_key_is_a_usage_error_not_a_failed_run() {
    let lab = Lab::new();
    lab.put("ok.sql", &plain("create table t (id int);\n"));
    let config = lab.config("", "");
    let c = config.display().to_string();
    let (out, _) =
        drcheck(&["--config", &c, "verify", "--target", "t", "--backup", "okk.sql"], &[], Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--backup \"okk.sql\": no such backup"), "{}", stderr(&out));
    let (out, _) = drcheck(&["--config", &c, "history", "--json"], &[], Duration::from_secs(60));
    let h: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(h["runs"].as_array().unwrap().len(), 0, "{h}");
}

/// A primary drcheck cannot log in to (a wrong password) leaves every comparison
/// undone: the run is `error`, exit 3, with the restore and self-checks kept and the
/// reason named — unless the target accepts that (`comparisons = "best-effort"`), which
/// the report then says.
#[test]
fn comparisons_that_could_not_run_leave_the_run_incomplete() {
    let lab = Lab::new();
    let (primary, _) = shop(&lab);
    primary.psql("shop", "create table t (id int primary key)");
    let dump = lab.root.path().join("shop.dump");
    primary.dump("shop", &dump, &[]);
    lab.put("shop.dump", &std::fs::read(&dump).unwrap());
    let wrong = primary.url("verifier", "not-the-password", "shop");
    let config = lab.config("", &format!("primary = \"{wrong}\"\n"));
    let (code, run, all) = lab.verify(&config, "shop.dump");
    assert_ran(&run, code, 3, &all);
    assert_eq!(run["result"], "error", "{run}");
    assert_eq!(run["error"]["stage"], "validate", "{run}");
    assert!(run["error"]["message"].as_str().unwrap().contains("comparisons with the primary could not run"), "{run}");
    assert_eq!(validator(&run, "amcheck")["status"], "passed", "the self-checks are kept: {run}");
    assert!(!all.contains("not-the-password"), "the password was shown");
    let best_effort = lab.config("", &format!("primary = \"{wrong}\"\ncomparisons = \"best-effort\"\n"));
    let (code, run, all) = lab.verify(&best_effort, "shop.dump");
    assert_ran(&run, code, 0, &all);
    assert!(run["degraded"].as_str().unwrap().contains("best-effort"), "{run}");
}

/// The restore tool killed by a signal (the OOM killer, an operator) says nothing about
/// the backup: exit 3, not 1.
#[test]
fn a_restore_tool_killed_by_a_signal_is_not_the_backups_fault() {
    let lab = Lab::new();
    lab.put("slow.sql", &plain("create table t (id int);\nselect pg_sleep(30);\n"));
    let config = lab.config("", "");
    let child = lab.spawn_verify(&config, "slow.sql");
    let private = lab.private_dir();
    let deadline = Instant::now() + Duration::from_secs(60);
    let psql = loop {
        assert!(Instant::now() < deadline, "psql never started");
        let found = std::fs::read_dir("/proc").unwrap().filter_map(Result::ok).find_map(|p| {
            let exe = std::fs::read_link(p.path().join("exe")).ok()?;
            let cwd = std::fs::read_link(p.path().join("cwd")).ok()?;
            (exe.ends_with("psql") && cwd.starts_with(&private))
                .then(|| p.file_name().to_string_lossy().parse::<i32>().ok())?
        });
        if let Some(pid) = found {
            break pid;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(500));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(psql), nix::sys::signal::Signal::SIGKILL).unwrap();
    let out = child.wait_with_output().unwrap();
    let run = drcheck_e2e::only_run(&out);
    assert_eq!(out.status.code(), Some(3), "{run}");
    assert!(run["error"]["message"].as_str().unwrap().contains("signal"), "{run}");
}

/// Unmounts a tmpfs however the test ends.
struct Tmpfs(std::path::PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A scratch directory too small for a backup that is fine (it expands a lot, but no
/// more than its size explains): the disk's shortfall, exit 3 — not the backup's.
#[test]
fn a_full_scratch_disk_is_not_the_backups_fault() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("needs root to mount a small file system; skipped");
        return;
    }
    let lab = Lab::new();
    let (primary, _) = shop(&lab);
    primary.psql("shop", "create table big as select g, repeat('x', 2000) as pad from generate_series(1, 200000) g");
    let dump = lab.root.path().join("shop.dump");
    primary.dump("shop", &dump, &[]);
    let small = lab.root.path().join("small-scratch");
    std::fs::create_dir_all(&small).unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=160m,mode=1777", "tmpfs"])
        .arg(&small)
        .status();
    assert!(ok.unwrap().success(), "mount tmpfs");
    let _mounted = Tmpfs(small.clone());
    lab.put("shop.dump", &std::fs::read(&dump).unwrap());
    let text = std::fs::read_to_string(lab.config("", "")).unwrap().replace(
        &format!("scratch_dir = \"{}\"", lab.scratch.display()),
        &format!("scratch_dir = \"{}\"\nexpansion_factor = 0.5", small.display()),
    );
    let config = lab.root.path().join("small.toml");
    std::fs::write(&config, text).unwrap();
    let (code, run, all) = lab.verify(&config, "shop.dump");
    assert_eq!(code, Some(3), "{run}\n{all}");
    let msg = run["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("room") || msg.contains("No space left"), "{msg}");
}

/// A base-backup directory still being uploaded (its base.tar there, pg_wal.tar and the
/// manifest not yet) is not a backup: the newest complete one is verified.
#[test]
fn a_base_backup_still_uploading_is_not_chosen() {
    let lab = Lab::new();
    let primary = PgPrimary::start(&lab.root);
    primary.psql("postgres", "create table t as select g from generate_series(1, 100) g");
    let bb = lab.root.pg_dir("bb").join("b");
    primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "stream", "--checkpoint=fast"]);
    lab.put("phys/b1/base.tar", &std::fs::read(bb.join("base.tar")).unwrap());
    lab.put("phys/b1/pg_wal.tar", &std::fs::read(bb.join("pg_wal.tar")).unwrap());
    std::thread::sleep(Duration::from_millis(1100));
    // The next one: its first part landed, the rest is on its way.
    lab.put("phys/b2/base.tar", &std::fs::read(bb.join("base.tar")).unwrap());
    let config = lab.config("", "prefix = \"phys/\"");
    let c = config.display().to_string();
    let (out, _) = drcheck(&["-v", "--config", &c, "verify", "--target", "t", "--json"], &[], Duration::from_secs(180));
    let run = drcheck_e2e::only_run(&out);
    assert_eq!(out.status.code(), Some(0), "{run}\n{}", stderr(&out));
    assert_eq!(run["backup"]["key"], "phys/b1/", "{run}");
    assert!(stderr(&out).contains("still being uploaded"), "{}", stderr(&out));
    // Issue 34: when it is the only one, the run says it may still be uploading, when it
    // counts as whole and how to name it now (exit 3) — not "none a backup".
    let config = lab.config("", "prefix = \"phys/b2/\"");
    let c = config.display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify", "--target", "t", "--json"], &[], Duration::from_secs(180));
    let run = drcheck_e2e::only_run(&out);
    assert_eq!(out.status.code(), Some(3), "{run}\n{}", stderr(&out));
    let msg = run["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("may still be uploading") && msg.contains("--backup phys/b2/"), "{msg}");

    // Issue 48: a one-file backup (`-Ft -X fetch --no-manifest`: backup_label and its WAL
    // inside) uploaded a moment ago is whole by its own contents — verified at once; the
    // same tar cut short (still being written: no end marker) still waits.
    let one = lab.root.pg_dir("bb").join("one");
    primary.tool(
        "pg_basebackup",
        &["-D", &one.display().to_string(), "-Ft", "-X", "fetch", "--no-manifest", "--checkpoint=fast"],
    );
    let tar = std::fs::read(one.join("base.tar")).unwrap();
    lab.put("phys/b3/base.tar", &tar);
    lab.put("phys/b4/base.tar", &tar[..tar.len() - 8192]);
    let config = lab.config("", "prefix = \"phys/b3/\"");
    let c = config.display().to_string();
    let (out, _) = drcheck(&["-v", "--config", &c, "verify", "--target", "t", "--json"], &[], Duration::from_secs(180));
    let run = drcheck_e2e::only_run(&out);
    assert_eq!(out.status.code(), Some(0), "{run}\n{}", stderr(&out));
    assert_eq!(run["backup"]["key"], "phys/b3/", "{run}");
    assert!(stderr(&out).contains("taken as complete by its contents"), "{}", stderr(&out));
    let config = lab.config("", "prefix = \"phys/b4/\"");
    let c = config.display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify", "--target", "t", "--json"], &[], Duration::from_secs(180));
    let run = drcheck_e2e::only_run(&out);
    assert_eq!(out.status.code(), Some(3), "{run}\n{}", stderr(&out));
    assert!(run["error"]["message"].as_str().unwrap_or_default().contains("may still be uploading"), "{run}");
}

/// A never-analyzed table without a key (its `reltuples` is −1) of 60,000 rows, with
/// `checksum_sample_rows = 5000`: sampled, not hashed whole.
#[test]
fn a_never_analyzed_table_is_sampled_within_the_bound() {
    let lab = Lab::new();
    let (primary, url) = shop(&lab);
    primary.psql(
        "shop",
        "create table events (kind text, body text) with (autovacuum_enabled = false);
         insert into events select 'k' || (g % 7), md5(g::text) from generate_series(1, 60000) g",
    );
    assert_eq!(primary.psql("shop", "select reltuples from pg_class where relname = 'events'"), "-1");
    let dump = lab.root.path().join("shop.dump");
    primary.dump("shop", &dump, &[]);
    lab.put("shop.dump", &std::fs::read(&dump).unwrap());
    let config = lab.config(
        "",
        &format!("primary = \"{url}\"\n[target.validators]\nenabled = [\"checksums\"]\nchecksum_sample_rows = 5000\n"),
    );
    let (code, run, all) = lab.verify(&config, "shop.dump");
    assert_ran(&run, code, 0, &all);
    let c = validator(&run, "checksums");
    assert!(c["detail"].as_str().unwrap().contains("sampled"), "{c}");
    let rows = c["measurements"]["covered_rows"].as_f64().unwrap();
    assert!(rows < 20_000.0, "hashed {rows} rows of 60000: {c}");
}

/// The allocator settings drcheck gives itself reach no program it starts: a drill's
/// shell step (the shipped restore runbook starts a replacement primary) sees none.
#[test]
fn no_allocator_setting_reaches_a_drill_step() {
    let root = TempRoot::new();
    let yaml = "title: Env\nsteps:\n  - name: env\n    shell:\n      command: 'env'\n      capture: env\n";
    let file = root.path().join("env.yaml");
    std::fs::write(&file, yaml).unwrap();
    let report = root.path().join("j.html");
    let journal = root.path().join("j.json");
    let (out, _) = drcheck(
        &["drill", "run", &file.display().to_string(), "--report", &report.display().to_string()],
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let j = std::fs::read_to_string(&journal).unwrap();
    assert!(j.contains("PATH="), "the step's environment was captured: {j}");
    assert!(!j.contains("MALLOC_") && !j.contains("DRCHECK_MALLOC"), "{j}");
}

/// After WAL replay the recoverable point's age is taken when the store was listed,
/// not after the restore: a restore's own duration is no data lost.
#[test]
fn the_recoverable_points_age_excludes_the_restore() {
    let lab = Lab::new();
    let archive = lab.root.pg_dir("archive");
    let primary = PgPrimary::start_archiving(&lab.root, &archive);
    primary.psql("postgres", "create table t as select g from generate_series(1, 100) g");
    let bb = lab.root.pg_dir("bb").join("b");
    primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "stream", "--checkpoint=fast"]);
    primary.psql("postgres", "insert into t select g from generate_series(101, 200) g");
    primary.archive_all(&archive);
    lab.put("phys/b1/base.tar", &std::fs::read(bb.join("base.tar")).unwrap());
    lab.put("phys/b1/pg_wal.tar", &std::fs::read(bb.join("pg_wal.tar")).unwrap());
    for e in std::fs::read_dir(&archive).unwrap().filter_map(Result::ok) {
        lab.put(&format!("wal/{}", e.file_name().to_string_lossy()), &std::fs::read(e.path()).unwrap());
    }
    let config = lab.config("", "prefix = \"phys/\"\nwal_prefix = \"wal/\"");
    let (code, run, all) = lab.verify(&config, "phys/b1/");
    assert_ran(&run, code, 0, &all);
    let recovered = humantime::parse_rfc3339_weak(run["restore"]["recovered_to"].as_str().unwrap()).unwrap();
    let started = humantime::parse_rfc3339_weak(run["started_at"].as_str().unwrap()).unwrap();
    let before_run = started.duration_since(recovered).unwrap_or_default().as_secs_f64();
    let age = run["rpo"]["recoverable_point_age_seconds"].as_f64().unwrap();
    let restore: f64 = run["phases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == "restore")
        .map(|p| p["seconds"].as_f64().unwrap())
        .sum();
    assert!(restore > 0.2, "the restore took long enough to tell: {run}");
    // Listing comes right after the start; the restore after that: half the restore's
    // time tells the two apart however fast the machine is.
    assert!(
        age <= before_run + restore * 0.5,
        "age {age} s includes the restore ({restore} s); {before_run} s passed before the run"
    );
}

/// A fixed recovery time between two base backups restores the older one and replays
/// to it — PostgreSQL refuses to stop before the newer one's end, which the code before
/// chose and then blamed on the backup.
#[test]
fn a_fixed_recovery_time_restores_the_backup_that_ended_before_it() {
    let lab = Lab::new();
    let archive = lab.root.pg_dir("archive");
    let primary = PgPrimary::start_archiving(&lab.root, &archive);
    primary.psql("postgres", "create table t (id int, batch text)");
    primary.psql("postgres", "insert into t select g, 'A' from generate_series(1, 100) g");
    let base = |name: &str| {
        let bb = lab.root.pg_dir(&format!("bb-{name}")).join("b");
        primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "stream", "--checkpoint=fast"]);
        lab.put(&format!("phys/{name}/base.tar"), &std::fs::read(bb.join("base.tar")).unwrap());
        lab.put(&format!("phys/{name}/pg_wal.tar"), &std::fs::read(bb.join("pg_wal.tar")).unwrap());
    };
    base("b1");
    std::thread::sleep(Duration::from_millis(1200));
    primary.psql("postgres", "insert into t select g, 'B' from generate_series(101, 200) g");
    let target = primary
        .psql("postgres", "select to_char(clock_timestamp() at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')");
    std::thread::sleep(Duration::from_millis(1200));
    primary.psql("postgres", "insert into t select g, 'C' from generate_series(201, 300) g");
    base("b2");
    primary.archive_all(&archive);
    for e in std::fs::read_dir(&archive).unwrap().filter_map(Result::ok) {
        lab.put(&format!("wal/{}", e.file_name().to_string_lossy()), &std::fs::read(e.path()).unwrap());
    }
    let config = lab.config("", &format!("prefix = \"phys/\"\nwal_prefix = \"wal/\"\nrecovery_target = \"{target}\""));
    let c = config.display().to_string();
    let (out, _) = drcheck(&["-v", "--config", &c, "verify", "--target", "t", "--json"], &[], Duration::from_secs(180));
    let run = drcheck_e2e::only_run(&out);
    assert_eq!(out.status.code(), Some(0), "{run}\n{}", stderr(&out));
    assert_eq!(run["backup"]["key"], "phys/b1/", "{run}");
    let recovered = run["restore"]["recovered_to"].as_str().unwrap();
    assert!(
        humantime::parse_rfc3339_weak(recovered).unwrap() <= humantime::parse_rfc3339_weak(&target).unwrap(),
        "{run}"
    );
}

/// An object overwritten while it is downloaded (a `latest.dump` key a backup job writes
/// again) is never read as a splice of two versions: the read is pinned to the listed
/// version (If-Match), and the run starts over once from a fresh listing.
#[test]
fn an_object_overwritten_mid_download_is_read_again_whole() {
    let scene = drcheck_e2e::scenario::Scene::start();
    scene.upload_big_backup();
    let big = scene.root.path().join("big.dump");
    scene.s3.upload(&big, &scene.bucket, "orders/latest.dump");
    let slow = drcheck_e2e::Throttle::start(scene.s3.port, 2_000_000);
    let mut spec = scene.spec();
    spec.endpoint = slow.endpoint();
    // Parts of 1 MiB, one at a time: the download is many requests over seconds, and
    // the overwrite lands between two of them.
    let path = scene.config(&spec);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("path_style = true", "path_style = true\npart_size = \"1MiB\"\nconcurrency = 1"),
    )
    .unwrap();
    let config = path.display().to_string();
    let mut child = std::process::Command::new(drcheck_e2e::drcheck_bin())
        .args(["--config", &config, "verify", "--target", "orders", "--backup", "orders/latest.dump", "--json"])
        .envs(drcheck_e2e::AWS_ENV)
        .envs(scene.env())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once the restore reads the stream (a 15 MB download at 2 MB/s: seconds to go)…
    assert!(scene.wait_for_pg_restore(Duration::from_secs(120)).is_some(), "the restore never started");
    // …the next night's backup lands under the same key, mid-download.
    let next = scene.root.path().join("next.dump");
    scene.primary.dump("orders", &next, &[]);
    scene.s3.upload(&next, &scene.bucket, "orders/latest.dump");
    let deadline = Instant::now() + Duration::from_secs(240);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the verification did not finish");
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = child.wait_with_output().unwrap();
    let run = drcheck_e2e::only_run(&out);
    assert_eq!(out.status.code(), Some(0), "{run}\n{}", stderr(&out));
    assert!(stderr(&out).contains("starting over from a fresh listing"), "{run}\n{}", stderr(&out));
    assert_eq!(run["backup"]["size_bytes"].as_u64(), Some(std::fs::metadata(&next).unwrap().len()), "{run}");
}
