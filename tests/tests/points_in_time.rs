//! End-to-end: proving points in time in the recovery window (issue 25) on base backups in objects with
//! a WAL archive under `wal_prefix`. A primary keeps writing — its heartbeat written by
//! `drcheck daemon` through the INSERT-only role `drcheck heartbeat setup` creates, and
//! `events` rows with an `as_of` column — across three base backups; then random
//! points in time, a fixed point between two backups, a WAL gap before the point and a
//! heartbeat that fell silent each get the verdict they deserve.

use drcheck_e2e::{
    Daemon, PgPrimary, S3Server, TempRoot, drcheck, free_port, make_world_enterable, only_run, stderr, stdout, unique,
    validator,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

const LIMIT: Duration = Duration::from_secs(180);

fn sh(cmd: &str) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The primary's clock, now, in RFC 3339.
fn clock(primary: &PgPrimary) -> String {
    primary.psql("orders", "select to_char(clock_timestamp() at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
}

fn at(s: &str) -> SystemTime {
    humantime::parse_rfc3339_weak(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// Rows written over `seconds`, a batch every 200 ms.
fn write_for(primary: &PgPrimary, seconds: f64) {
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < until {
        primary.psql("orders", "insert into events (note) select 'e' || g from generate_series(1, 20) g");
        std::thread::sleep(Duration::from_millis(200));
    }
}

struct Window {
    primary: PgPrimary,
    _s3: S3Server,
    dir: PathBuf,
    base: String,
    /// Each backup's upload: the primary's clock before it started and after it ended.
    uploads: Vec<(SystemTime, SystemTime)>,
    /// A moment between backups 2 and 3, and the WAL file it is in.
    between: String,
    between_segment: String,
    hb_password: String,
    /// Last: removed after the servers in it stopped.
    _root: TempRoot,
}

impl Window {
    fn config(&self, extra: &str, heartbeat_table: &str, wal_prefix: &str) -> String {
        // The daemon's heartbeat table is an as_of table of itself when it is the
        // heartbeat; otherwise say so.
        let other = if heartbeat_table == "drcheck.heartbeat" { "" } else { "\"drcheck.heartbeat\" = \"at\"\n" };
        let text = format!(
            "{base}wal_prefix = \"{wal_prefix}\"\n{extra}\n[target.as_of]\n\"public.events\" = \"at\"\n{other}\
             [target.heartbeat]\ntable = \"{heartbeat_table}\"\ninterval = \"1s\"\n\
             url = \"postgres://drcheck_heartbeat:${{HB_PW}}@127.0.0.1:{port}/orders\"\n",
            base = self.base,
            port = self.primary.port,
        );
        let path = self.dir.join(format!("{}.toml", unique("c")));
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    fn env(&self) -> [(&'static str, String); 1] {
        [("HB_PW", self.hb_password.clone())]
    }

    fn verify(&self, config: &str) -> (Option<i32>, serde_json::Value, String) {
        let (out, _) = drcheck(&["--config", config, "verify", "--json"], &self.env(), LIMIT);
        (out.status.code(), only_run(&out), stderr(&out))
    }
}

fn setup() -> Window {
    let root = TempRoot::new();
    let archive = root.pg_dir("archive");
    let primary = PgPrimary::start_archiving(&root, &archive);
    let s3 = S3Server::start(&root);
    let bucket = unique("window");
    s3.make_bucket(&bucket);
    primary.psql("postgres", "create database orders");
    primary.psql(
        "orders",
        "create table events (id bigserial primary key, at timestamptz not null default clock_timestamp(), note text)",
    );
    let password = unique("pw");
    primary.psql("postgres", &format!("create role verifier login password '{password}'"));
    primary.psql("postgres", "grant pg_read_all_data to verifier");
    let scratch = root.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    make_world_enterable(&scratch);
    let metrics = free_port();
    let base = format!(
        "[state]\nurl = \"sqlite://{root}/history.db\"\n[sandbox]\nscratch_dir = \"{scratch}\"\n\
         [metrics]\nlisten = \"127.0.0.1:{metrics}\"\n\
         [storage.s3]\nkind = \"s3\"\nbucket = \"{bucket}\"\nendpoint = \"{endpoint}\"\npath_style = true\n\
         [[target]]\nname = \"orders\"\nprimary = \"{primary}\"\nstorage = \"s3\"\nprefix = \"phys/\"\n\
         rto = \"10m\"\nrpo = \"1h\"\n",
        root = root.path().display(),
        scratch = scratch.display(),
        endpoint = s3.endpoint(),
        primary = primary.url("verifier", &password, "orders"),
    );
    let dir = root.path().join("configs");
    std::fs::create_dir_all(&dir).unwrap();
    let mut w = Window {
        primary,
        _s3: s3,
        dir,
        base,
        uploads: vec![],
        between: String::new(),
        between_segment: String::new(),
        hb_password: unique("hb"),
        _root: root,
    };
    let root_path = w._root.path().to_path_buf();

    // The heartbeat, set up with drcheck's own SQL, written by drcheck's daemon.
    let config = w.config("", "drcheck.heartbeat", "wal/");
    let (out, _) = drcheck(&["--config", &config, "heartbeat", "setup", "--target", "orders"], &w.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sql = stdout(&out);
    assert!(sql.contains("GRANT INSERT ON \"drcheck\".\"heartbeat\" TO \"drcheck_heartbeat\""), "{sql}");
    assert!(sql.contains("cron.schedule_in_database('drcheck-heartbeat-orders', '1 seconds'"), "{sql}");
    assert!(sql.contains("a schedule in seconds needs pg_cron 1.5 or later"), "{sql}");
    let script = root_path.join("heartbeat.sql");
    std::fs::write(&script, &sql).unwrap();
    make_world_enterable(&root_path);
    let out = w.primary.run_script("orders", &script);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    w.primary.psql("orders", &format!("alter role drcheck_heartbeat password '{}'", w.hb_password));
    // Set up twice: nothing breaks (a re-run during a rollout).
    assert!(w.primary.run_script("orders", &script).status.success());
    // A table the test fills by hand: a heartbeat that falls silent.
    w.primary.psql("orders", "create table public.quiet (at timestamptz primary key default clock_timestamp())");

    let mut daemon = Daemon::start(Path::new(&config), metrics, &w.env());
    let deadline = Instant::now() + Duration::from_secs(20);
    // Four beats before the first backup: the point's check compares the beats up to
    // T − 5 s, and a setup that runs fast must still leave it three (it once left two).
    while w.primary.psql("orders", "select count(*) from drcheck.heartbeat").parse::<u32>().unwrap_or(0) < 4 {
        assert!(Instant::now() < deadline, "the daemon wrote no heartbeat: {}", daemon.stderr_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    // The writer may insert and nothing else.
    let as_writer = |sql: &str| {
        Command::new("psql")
            .arg(format!("postgres://drcheck_heartbeat:{}@127.0.0.1:{}/orders", w.hb_password, w.primary.port))
            .args(["-XAtc", sql])
            .output()
            .unwrap()
    };
    for denied in
        ["select count(*) from drcheck.heartbeat", "delete from drcheck.heartbeat", "select count(*) from events"]
    {
        let out = as_writer(denied);
        assert!(!out.status.success(), "the heartbeat writer could run {denied:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("permission denied"), "{denied}");
    }

    for i in 1..=3 {
        write_for(&w.primary, 1.5);
        if i == 1 {
            // Its last beat a minute before now: long before the point, however fast
            // the steps between run.
            w.primary.psql("orders", "insert into public.quiet values (clock_timestamp() - interval '1 minute')");
        }
        let bb = root_path.join(format!("bb{i}"));
        w.primary.tool(
            "pg_basebackup",
            &["-D", &bb.display().to_string(), "-Ft", "-z", "-X", "stream", "--checkpoint=fast"],
        );
        let before = at(&clock(&w.primary));
        for f in ["base.tar.gz", "pg_wal.tar.gz", "backup_manifest"] {
            w._s3.upload(&bb.join(f), &bucket, &format!("phys/b{i}/{f}"));
        }
        let after = at(&clock(&w.primary));
        w.uploads.push((before, after));
        if i == 2 {
            // A moment between backups 2 and 3, past the upload's second.
            write_for(&w.primary, 2.6);
            w.between = clock(&w.primary);
            w.between_segment = w.primary.psql("orders", "select pg_walfile_name(pg_current_wal_lsn())");
        }
    }
    write_for(&w.primary, 2.0);
    let (status, _) = daemon.terminate(Duration::from_secs(20));
    assert!(status.success(), "{status}");
    w.primary.archive_all(&archive);
    for e in std::fs::read_dir(&archive).unwrap().filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let gz = root_path.join(format!("{name}.gz"));
        sh(&format!("gzip -c {} > {}", e.path().display(), gz.display()));
        w._s3.upload(&gz, &bucket, &format!("wal/{name}.gz"));
        // The same archive with one segment lost.
        if name != w.between_segment {
            w._s3.upload(&gz, &bucket, &format!("walgap/{name}.gz"));
        }
    }
    w
}

#[test]
fn points_in_time_are_proven_by_the_heartbeat_and_failures_say_where_replay_stopped() {
    let w = setup();
    let between = w.between.clone();
    let cutoff = at(&between);

    // A fixed point between backups 2 and 3: backup 2 is restored, replay stops at it
    // (its newest heartbeat within 1 s + 5 s before it), and nothing after it is there.
    let c = w.config(&format!("recovery_target = \"{between}\""), "drcheck.heartbeat", "wal/");
    let (code, run, err) = w.verify(&c);
    assert_eq!(code, Some(0), "{run}\n{err}");
    assert_eq!(run["backup"]["key"], "phys/b2/", "{run}");
    let pit = validator(&run, "point_in_time");
    assert_eq!(pit["status"], "passed", "{run}");
    assert_eq!(pit["measurements"]["rows_after_target"], 0.0, "{pit}");
    assert!(pit["measurements"]["covered_heartbeats"].as_f64().unwrap() >= 3.0, "{pit}");
    assert!(pit["measurements"]["newest_heartbeat_before_target_seconds"].as_f64().unwrap() <= 6.0, "{pit}");
    assert_eq!(validator(&run, "row_counts")["status"], "passed", "{run}");
    assert_eq!(run["restore"]["recovery_target"]["kind"], "time", "{run}");
    assert_eq!(run["restore"]["recovery_target"]["random"], false, "{run}");
    assert_eq!(run["restore"]["target_reached"], true, "{run}");
    let recovered = at(run["restore"]["recovered_to"].as_str().unwrap());
    assert!(recovered <= cutoff, "{run}");
    // Issue 32: the RPO is the archive's (its newest commit, after backup 3 and the
    // writes that followed it), never T's age; T is what the run proved.
    let archive_ends = |run: &serde_json::Value, gap: f64| {
        let reach =
            at(run["rpo"]["recoverable_point"].as_str().unwrap_or_else(|| panic!("no recoverable point: {run}")));
        assert!(reach > w.uploads[2].1, "the recoverable point is the archive's end, after backup 3: {run}");
        let proven = at(run["rpo"]["proven_point"].as_str().unwrap());
        assert_eq!(proven, at(run["restore"]["recovered_to"].as_str().unwrap()), "{run}");
        let measured = at(run["rpo"]["measured_at"].as_str().unwrap());
        let age = run["rpo"]["recoverable_point_age_seconds"].as_f64().unwrap();
        let t_age = measured.duration_since(proven).unwrap().as_secs_f64();
        assert!(age + gap <= t_age, "the RPO judged T's age ({t_age} s), not the archive's ({age} s): {run}");
    };
    // The fixed point is seconds before the archive's end (backup 3 and writes after it).
    archive_ends(&run, 3.0);
    // Issue 34: the window starts at the oldest base backup's end, as with a tool's catalog.
    let start = at(run["rpo"]["recovery_window_start"].as_str().unwrap_or_else(|| panic!("no window start: {run}")));
    // (An object's time is its upload's, in whole seconds.)
    let second = std::time::Duration::from_secs(1);
    assert!(start + second >= w.uploads[0].0 && start <= w.uploads[0].1, "{run}");

    // The same point with the WAL file it lies in lost: failed (the backup's), naming
    // the file, target not reached.
    let c = w.config(&format!("recovery_target = \"{between}\""), "drcheck.heartbeat", "walgap/");
    let (code, run, err) = w.verify(&c);
    assert_eq!(code, Some(1), "{run}\n{err}");
    assert_eq!(run["result"], "failed", "{run}");
    let message = run["error"]["message"].as_str().unwrap();
    assert!(message.contains(&w.between_segment), "{message}");
    assert!(message.contains("recovery ended before reaching its target"), "{message}");
    assert_eq!(run["restore"]["target_reached"], false, "{run}");
    assert_eq!(run["restore"]["recovery_target"]["value"], between.as_str(), "{run}");

    // Issue 32: a heartbeat table made after the point (a `heartbeat setup` since) is
    // neither side's at T: nothing to prove with — skipped, never the backup's failure.
    w.primary.psql(
        "orders",
        "create table public.late (at timestamptz primary key default clock_timestamp()); \
                              insert into public.late default values",
    );
    let c = w.config(&format!("recovery_target = \"{between}\""), "public.late", "wal/");
    let (code, run, err) = w.verify(&c);
    let pit = validator(&run, "point_in_time");
    assert_eq!(pit["status"], "skipped", "{run}\n{err}");
    assert!(pit["detail"].as_str().unwrap().contains("the heartbeat began later"), "{pit}");
    assert_eq!(code, Some(0), "{run}");
    w.primary.psql("orders", "drop table public.late");

    // A heartbeat that fell silent long before the point proves nothing: never passed.
    let c = w.config(&format!("recovery_target = \"{between}\""), "public.quiet", "wal/");
    let (code, run, err) = w.verify(&c);
    let pit = validator(&run, "point_in_time");
    assert_eq!(pit["status"], "error", "{run}\n{err}");
    assert!(pit["detail"].as_str().unwrap().contains("heartbeat writer running"), "{pit}");
    assert_eq!(code, Some(3), "{run}");

    // Random points: drawn in the window, restored from the newest backup that ended
    // by then, replayed there and proven by the heartbeat.
    let c = w.config("recovery_target = \"random\"", "drcheck.heartbeat", "wal/");
    let mut drawn = Vec::new();
    for _ in 0..2 {
        let (code, run, err) = w.verify(&c);
        assert_eq!(code, Some(0), "{run}\n{err}");
        let target = &run["restore"]["recovery_target"];
        assert_eq!(target["random"], true, "{run}");
        assert_eq!(target["kind"], "time", "{run}");
        let t = at(target["value"].as_str().unwrap());
        assert!(t >= w.uploads[0].0, "drawn {t:?} before the first backup: {run}");
        assert_eq!(validator(&run, "point_in_time")["status"], "passed", "{run}");
        assert_eq!(run["restore"]["target_reached"], true, "{run}");
        archive_ends(&run, 0.0);
        // Never a backup whose upload began after T; the newest one surely done by T.
        let key = run["backup"]["key"].as_str().unwrap();
        let chosen: usize = key.trim_start_matches("phys/b").trim_end_matches('/').parse().unwrap();
        assert!(w.uploads[chosen - 1].0 <= t, "backup {chosen} began uploading after {t:?}: {run}");
        let surely = (0..3).rev().find(|i| w.uploads[*i].1 + Duration::from_secs(1) <= t).map(|i| i + 1);
        if let Some(s) = surely {
            assert!(chosen >= s, "backup {chosen} chosen for {t:?}, {s} was newer and done: {run}");
        }
        drawn.push(t);
    }
    assert_ne!(drawn[0], drawn[1], "two draws gave the same moment");

    // The evidence lists the points in time proven (the random ones and the fixed one).
    let (out, _) = drcheck(&["--config", &c, "report", "--since", "1d", "--format", "json"], &w.env(), LIMIT);
    let evidence: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let points = evidence["evidence"]["targets"][0]["coverage"]["points_in_time"].as_array().unwrap();
    let passed = points.iter().filter(|p| p["result"] == "passed").count();
    assert!(passed >= 3, "{evidence}");
}

#[test]
fn random_targets_need_an_archive_and_heartbeats_need_a_sane_table() {
    let root = TempRoot::new();
    let path = root.path().join("c.toml");
    let base = "[state]\nurl = \"sqlite:///tmp/x.db\"\n[storage.s3]\nkind = \"s3\"\nbucket = \"b\"\n\
                [[target]]\nname = \"orders\"\nstorage = \"s3\"\nrto = \"1h\"\nrpo = \"1d\"\n";
    std::fs::write(&path, format!("{base}recovery_target = \"random\"\n")).unwrap();
    let (out, _) = drcheck(&["--config", &path.display().to_string(), "config", "check"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("target[0].recovery_target") && stderr(&out).contains("wal_prefix"),
        "{}",
        stderr(&out)
    );
    // `heartbeat setup` without a heartbeat says what to add.
    std::fs::write(&path, base).unwrap();
    let (out, _) = drcheck(&["--config", &path.display().to_string(), "heartbeat", "setup"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("[target.heartbeat]"), "{}", stderr(&out));
}

/// A logical dump's newest heartbeat is its data's true time: how far the copy is behind
/// the primary (`rpo.data_lag_seconds`) comes from it, not from the upload.
#[test]
fn a_dumps_newest_heartbeat_says_how_far_its_data_is_behind() {
    use drcheck_e2e::scenario::Scene;
    let scene = Scene::start();
    let dump = scene.root.path().join("orders-2.dump");
    let dumped = scene.primary.with_heartbeat("orders", || {
        std::thread::sleep(Duration::from_millis(1500));
        scene.primary.dump("orders", &dump, &[]);
        let dumped = at(&clock(&scene.primary));
        // The primary goes on beating for a while after the dump.
        std::thread::sleep(Duration::from_millis(3000));
        dumped
    });
    scene.s3.upload(&dump, &scene.bucket, "orders/orders-2.dump");
    let mut spec = scene.spec();
    spec.extra_target = "[target.heartbeat]\ntable = \"drcheck.heartbeat\"\ninterval = \"1s\"\n".into();
    let config = scene.config(&spec).display().to_string();
    let (out, _) = drcheck(&["--config", &config, "verify", "--json"], &scene.env(), LIMIT);
    let run = only_run(&out);
    assert_eq!(out.status.code(), Some(0), "{run}\n{}", stderr(&out));
    assert_eq!(run["backup"]["key"], "orders/orders-2.dump", "{run}");
    let pit = validator(&run, "point_in_time");
    assert_eq!(pit["status"], "passed", "{run}");
    // The dump's newest heartbeat is from before it was taken, within the interval.
    let data_time = pit["measurements"]["data_time"].as_f64().expect("data_time");
    let dumped_s = dumped.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!(data_time <= dumped_s && data_time > dumped_s - 3.0, "data_time {data_time}, dumped {dumped_s}: {pit}");
    // ~3 s of beats after the dump: that is what a restore of it would lose.
    let lag = run["rpo"]["data_lag_seconds"].as_f64().expect("data_lag_seconds");
    assert!((2.0..10.0).contains(&lag), "data lag {lag}: {run}");
    // The heartbeat table is compared up to the dump's time like any as_of table.
    assert_eq!(validator(&run, "row_counts")["status"], "passed", "{run}");
    // No time target: the report says nothing about a target reached.
    assert!(run["restore"]["target_reached"].is_null(), "{run}");

    // Issue 32: a heartbeat outside the dump's scope errored every run; the backup does
    // not hold it: skipped, and the run passes on what it does hold.
    let partial = scene.root.path().join("orders-3.dump");
    std::thread::sleep(Duration::from_millis(1100));
    scene.primary.dump("orders", &partial, &["-n", "public"]);
    scene.s3.upload(&partial, &scene.bucket, "orders/orders-3.dump");
    spec.extra_target =
        "dump_scope = [\"public\"]\n[target.heartbeat]\ntable = \"drcheck.heartbeat\"\ninterval = \"1s\"\n".into();
    let config = scene.config(&spec).display().to_string();
    let (out, _) = drcheck(&["--config", &config, "verify", "--json"], &scene.env(), LIMIT);
    let run = only_run(&out);
    assert_eq!(out.status.code(), Some(0), "{run}\n{}", stderr(&out));
    let pit = validator(&run, "point_in_time");
    assert_eq!(pit["status"], "skipped", "{pit}");
    assert!(pit["detail"].as_str().unwrap().contains("outside the dump's scope"), "{pit}");
}

/// The pg_cron lines `heartbeat setup` prints (for fleets that run drcheck only as a
/// CronJob) are pg_cron's own: a primary with pg_cron loaded (Debian's
/// postgresql-15-cron) takes both jobs as printed, for the target's database, and the
/// heartbeat job's command, run there, writes a heartbeat.
#[test]
fn the_printed_pg_cron_jobs_are_taken_by_pg_cron_and_write_the_heartbeat() {
    let root = TempRoot::new();
    let primary = PgPrimary::start_with(
        &root,
        &[
            ("shared_preload_libraries", "pg_cron"),
            ("cron.database_name", "postgres"),
            ("cron.use_background_workers", "on"),
        ],
    );
    primary.psql("postgres", "create database orders");
    let store = root.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    let config = root.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[state]\nurl = \"sqlite://{root}/history.db\"\n\
             [storage.local]\nkind = \"filesystem\"\npath = \"{store}\"\n\
             [[target]]\nname = \"orders\"\nprimary = \"{primary}\"\nstorage = \"local\"\nrto = \"10m\"\nrpo = \"1h\"\n\
             [target.heartbeat]\ntable = \"drcheck.heartbeat\"\ninterval = \"1m\"\n",
            root = root.path().display(),
            store = store.display(),
            primary = primary.url("postgres", "unused", "orders"),
        ),
    )
    .unwrap();
    let (out, _) =
        drcheck(&["--config", &config.display().to_string(), "heartbeat", "setup", "--target", "orders"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sql = stdout(&out);
    assert!(!sql.contains("pg_cron 1.5"), "a schedule in minutes suits every pg_cron: {sql}");
    let script = root.path().join("heartbeat.sql");
    std::fs::write(&script, &sql).unwrap();
    make_world_enterable(root.path());
    let applied = primary.run_script("orders", &script);
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    // The jobs are printed commented out (pg_cron is optional): taken as printed.
    primary.psql("postgres", "create extension pg_cron");
    let jobs: Vec<&str> = sql.lines().filter_map(|l| l.strip_prefix("-- SELECT cron.")).collect();
    assert_eq!(jobs.len(), 2, "{sql}");
    for job in &jobs {
        primary.psql("postgres", &format!("SELECT cron.{job}"));
    }
    let listed = primary.psql(
        "postgres",
        "select jobname || ' | ' || schedule || ' | ' || database || ' | ' || active from cron.job order by jobname",
    );
    assert_eq!(
        listed,
        "drcheck-heartbeat-orders | * * * * * | orders | true\ndrcheck-heartbeat-trim-orders | 17 3 * * * | orders | true"
    );
    // What pg_cron runs, run where it would: in the target's database.
    let count = || primary.psql("orders", "select count(*) from drcheck.heartbeat").parse::<u64>().unwrap();
    let before = count();
    for command in primary.psql("postgres", "select command from cron.job order by jobname").lines() {
        primary.psql("orders", command);
    }
    assert!(count() > before, "the heartbeat job's command wrote nothing");
    let newest = primary.psql("orders", "select extract(epoch from now() - max(at)) < 5 from drcheck.heartbeat");
    assert_eq!(newest, "t");
}
