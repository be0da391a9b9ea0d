//! End-to-end (issue 32): every verdict true on a live primary. A primary under
//! continuous `pgbench` (accounts, tellers and branches updated in place, history
//! appended to a keyless table), an application table written by transactions of 0–5 s
//! with `as_of` defaults, large objects created and unlinked, a migration mid-run, the
//! heartbeat written by `drcheck daemon` and the DDL log `drcheck heartbeat setup`
//! installs; base backups with their WAL archived, and `pg_dump`s taken while it all runs.
//!
//! Verifications of every kind — the latest point, random and fixed points in time,
//! least-proven backups, dumps judged by commit times and, after the primary restarts
//! without `track_commit_timestamp`, dumps nothing can judge — all pass: 0 failed, 0
//! error. Defects planted in backups (a row the primary never updated, rows lost before
//! the `as_of` band, a large object, a WAL segment before T, a table) each fail the run
//! and are named. `DRCHECK_LIVE_ROUNDS` repeats the verifications (`tests/bench/live.sh`
//! runs 5 rounds: 50 verifications); every run's inconclusive tables are printed.

use drcheck_e2e::{
    ClusterOptions, Daemon, PgPrimary, S3Server, TempRoot, drcheck, free_port, http_get, make_world_enterable,
    only_run, sample, stderr, stdout, unique, validator,
};
use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

const LIMIT: Duration = Duration::from_secs(240);

fn sh(cmd: &str) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
}

fn at(s: &str) -> SystemTime {
    humantime::parse_rfc3339_weak(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// The writers that keep the primary busy; stopped (and pgbench killed) on drop.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    pgbench: Option<Child>,
    port: u16,
    sock: PathBuf,
}

impl Load {
    fn start(primary: &PgPrimary) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let psql = |sql: String| {
            let (sock, port) = (primary.sock.clone(), primary.port);
            move || {
                // A failure (the primary restarting) is the load's to shrug off.
                let _ = Command::new("psql")
                    .args(["-X", "-q", "-h"])
                    .arg(&sock)
                    .args(["-p", &port.to_string(), "-U", "postgres", "-d", "shop", "-c", &sql])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        };
        // Application transactions of 0–5 s: `at` defaults to their start, they commit later.
        for _ in 0..2 {
            let write = psql(
                "begin; insert into events (note) values ('a'); select pg_sleep(random() * 5); \
                 insert into events (note) values ('b'); commit"
                    .into(),
            );
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    write();
                }
            }));
        }
        // Large objects created, and the oldest (never document 1) unlinked.
        let create = psql(
            "insert into docs (file) values (lo_from_bytea(0, convert_to(repeat(md5(random()::text), 100), 'UTF8')))"
                .into(),
        );
        let unlink = psql(
            "with d as (delete from docs where id = (select min(id) from docs where id > 1) returning file) \
             select lo_unlink(file) from d"
                .into(),
        );
        let s = stop.clone();
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !s.load(Ordering::Relaxed) {
                create();
                n += 1;
                if n.is_multiple_of(3) {
                    unlink();
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        }));
        let mut load = Load { stop, threads, pgbench: None, port: primary.port, sock: primary.sock.clone() };
        load.start_pgbench();
        load
    }

    /// TPC-B at a gentle rate: accounts, tellers and branches updated in place.
    fn start_pgbench(&mut self) {
        let child = Command::new("pgbench")
            .args(["-n", "-c", "2", "-j", "1", "-R", "15", "-T", "3600", "-h"])
            .arg(&self.sock)
            .args(["-p", &self.port.to_string(), "-U", "postgres", "shop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        self.pgbench = Some(child);
    }

    fn stop_pgbench(&mut self) {
        if let Some(c) = self.pgbench.take() {
            drcheck_e2e::proc::stop_group(c, Duration::from_secs(5));
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.stop_pgbench();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

struct Live {
    // Fields drop in order: the load before the servers it writes to.
    load: Load,
    daemon: Option<Daemon>,
    primary: PgPrimary,
    tamper: PgPrimary,
    s3: S3Server,
    bucket: String,
    archive: PathBuf,
    uploaded: BTreeSet<String>,
    base: String,
    hb_password: String,
    metrics_port: u16,
    backups: u32,
    dumps: u32,
    root: TempRoot,
}

impl Live {
    fn clock(&self) -> String {
        self.primary
            .psql("shop", "select to_char(clock_timestamp() at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
    }

    /// Archives what the primary has written and uploads every WAL file not yet uploaded.
    fn sync_wal(&mut self) {
        self.primary.archive_all(&self.archive);
        // Only what the archiver finished: under load it is copying the next file already.
        let done = self.primary.last_archived();
        let mut names: Vec<String> = std::fs::read_dir(&self.archive)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !self.uploaded.contains(n) && n.as_str() <= done.as_str())
            .collect();
        names.sort();
        for name in names {
            let gz = self.root.path().join(format!("{name}.gz"));
            sh(&format!("gzip -c {} > {}", self.archive.join(&name).display(), gz.display()));
            self.s3.upload(&gz, &self.bucket, &format!("wal/{name}.gz"));
            self.uploaded.insert(name);
        }
    }

    fn base_backup(&mut self) {
        self.backups += 1;
        let bb = self.root.path().join(format!("bb{}", self.backups));
        self.primary.tool(
            "pg_basebackup",
            &["-D", &bb.display().to_string(), "-Ft", "-z", "-X", "stream", "--checkpoint=fast"],
        );
        for f in ["base.tar.gz", "pg_wal.tar.gz", "backup_manifest"] {
            self.s3.upload(&bb.join(f), &self.bucket, &format!("phys/b{}/{f}", self.backups));
        }
    }

    fn dump(&mut self) -> PathBuf {
        self.dumps += 1;
        let path = self.root.path().join(format!("d{}.dump", self.dumps));
        self.primary.dump("shop", &path, &[]);
        self.s3.upload(&path, &self.bucket, &format!("dumps/d{}.dump", self.dumps));
        path
    }

    /// A dump of the database `from` holds, changed by `sql` — restored into a cluster of
    /// its own, changed, dumped again: the backup an attacker or a broken job would leave.
    fn tampered(&self, from: &Path, sql: &str, key: &str) {
        let db = unique("t");
        self.tamper.psql("postgres", &format!("create database {db}"));
        let out = Command::new("pg_restore")
            .args(["--no-owner", "--no-privileges", "-h"])
            .arg(&self.tamper.sock)
            .args(["-p", &self.tamper.port.to_string(), "-U", "postgres", "-d", &db])
            .arg(from)
            .output()
            .unwrap();
        assert!(out.status.success(), "pg_restore: {}", String::from_utf8_lossy(&out.stderr));
        self.tamper.psql(&db, sql);
        let path = self.root.path().join(format!("{db}.dump"));
        self.tamper.dump(&db, &path, &[]);
        self.s3.upload(&path, &self.bucket, key);
    }

    fn config(&self, targets: &str) -> String {
        let path = self.root.path().join(format!("{}.toml", unique("c")));
        std::fs::write(&path, format!("{}{targets}", self.base)).unwrap();
        path.display().to_string()
    }

    fn phys(&self, extra: &str, wal: &str, rpo: &str) -> String {
        format!(
            "[[target]]\nname = \"phys\"\nprimary = \"{primary}\"\nstorage = \"s3\"\nprefix = \"phys/\"\n\
             wal_prefix = \"{wal}\"\nrto = \"10m\"\nrpo = \"{rpo}\"\n{extra}\n{common}\
             [target.heartbeat]\ntable = \"drcheck.heartbeat\"\ninterval = \"1s\"\n\
             url = \"postgres://drcheck_heartbeat:${{HB_PW}}@127.0.0.1:{port}/shop\"\n",
            primary = self.primary_url(),
            common = COMMON,
            port = self.primary.port
        )
    }

    fn dump_target(&self, extra: &str) -> String {
        format!(
            // The test removes the dumps it planted defects in (proven ones among them):
            // their pins would name each removal (tests/tests/immutability.rs does).
            "[[target]]\nname = \"dump\"\nprimary = \"{primary}\"\nstorage = \"s3\"\nprefix = \"dumps/\"\n\
             rto = \"10m\"\nrpo = \"1h\"\npin = false\n{extra}\n{COMMON}",
            primary = self.primary_url()
        )
    }

    fn primary_url(&self) -> String {
        self.primary.url("verifier", "${VERIFIER_PW}", "shop")
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![("HB_PW", self.hb_password.clone()), ("VERIFIER_PW", VERIFIER_PW.to_string())]
    }

    /// Runs `drcheck verify` of `target` with `targets` as the config's targets.
    fn verify(&self, target: &str, targets: &str) -> (Option<i32>, serde_json::Value, String) {
        let c = self.config(targets);
        let (out, took) = drcheck(&["--config", &c, "verify", "--target", target, "--json"], &self.env(), LIMIT);
        eprintln!("live: verify {target} took {:.1}s", took.as_secs_f64());
        (out.status.code(), only_run(&out), stderr(&out))
    }
}

const VERIFIER_PW: &str = "verifier-pw-32";

/// What both targets share: the application table's `as_of` column, its transactions'
/// length as the band where nothing tells (they last 0–5 s), ranges small enough that
/// pgbench_accounts is hashed in several.
const COMMON: &str = "[target.as_of]\n\"public.events\" = \"at\"\n\
                      [target.validators]\nas_of_grace = \"8s\"\nchecksum_chunk_rows = 20000\n";

fn setup() -> Live {
    let root = TempRoot::new();
    let archive = root.pg_dir("archive");
    let primary = PgPrimary::start_archiving_with(
        &root,
        &archive,
        &[("track_commit_timestamp", "on"), ("max_connections", "40")],
    );
    let tamper = PgPrimary::start_opts(
        &root,
        &ClusterOptions {
            name: "tamper",
            local_auth: "trust",
            host_auth: "scram-sha-256",
            open_socket: false,
            settings: &[],
        },
    );
    let s3 = S3Server::start(&root);
    let bucket = unique("live");
    s3.make_bucket(&bucket);
    primary.psql("postgres", "create database shop");
    primary.tool("pgbench", &["-i", "-s", "1", "-q", "shop"]);
    primary.psql(
        "shop",
        "create table events (id bigserial primary key, at timestamptz not null default now(), note text);
         create table docs (id bigserial primary key, file oid);
         insert into docs (file) values (lo_from_bytea(0, 'the document that is never unlinked'));
         insert into events (note) select 'seed' from generate_series(1, 50);
         create table attachments (id int primary key, file oid);
         insert into attachments values (1, lo_from_bytea(0, 'unlinked on the primary, the row left'));
         select lo_unlink(file) from attachments;
         insert into attachments values (2, lo_from_bytea(0, 'an attachment'))",
    );
    primary.psql("postgres", &format!("create role verifier login password '{VERIFIER_PW}'"));
    primary.psql("postgres", "grant pg_read_all_data to verifier");
    let scratch = root.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    make_world_enterable(&scratch);
    let metrics_port = free_port();
    let base = format!(
        "[state]\nurl = \"sqlite://{root}/history.db\"\n[sandbox]\nscratch_dir = \"{scratch}\"\n\
         [metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n\
         [storage.s3]\nkind = \"s3\"\nbucket = \"{bucket}\"\nendpoint = \"{endpoint}\"\npath_style = true\n",
        root = root.path().display(),
        scratch = scratch.display(),
        endpoint = s3.endpoint(),
    );
    let load = Load::start(&primary);
    let mut live = Live {
        load,
        daemon: None,
        primary,
        tamper,
        s3,
        bucket,
        archive,
        uploaded: BTreeSet::new(),
        base,
        hb_password: unique("hb"),
        metrics_port,
        backups: 0,
        dumps: 0,
        root,
    };
    // The heartbeat and the DDL log, set up with drcheck's own SQL.
    let config = live.config(&live.phys("", "wal/", "1h"));
    let (out, _) = drcheck(&["--config", &config, "heartbeat", "setup", "--target", "phys"], &live.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let sql = stdout(&out);
    assert!(sql.contains("CREATE EVENT TRIGGER drcheck_ddl_log_end ON ddl_command_end"), "{sql}");
    let script = live.root.path().join("heartbeat.sql");
    std::fs::write(&script, &sql).unwrap();
    make_world_enterable(live.root.path());
    let out = live.primary.run_script("shop", &script);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    live.primary.psql("shop", &format!("alter role drcheck_heartbeat password '{}'", live.hb_password));
    // The daemon writes the heartbeat; a second target's writer has a wrong password.
    let daemon_config = live.config(&format!(
        "{}{}[[target]]\nname = \"bad_hb\"\nstorage = \"s3\"\nprefix = \"none/\"\nrto = \"1h\"\nrpo = \"1h\"\n\
         [target.heartbeat]\ntable = \"drcheck.heartbeat\"\ninterval = \"1s\"\n\
         url = \"postgres://drcheck_heartbeat:not-the-password@127.0.0.1:{}/shop\"\n",
        live.phys("", "wal/", "1h"),
        live.dump_target(""),
        live.primary.port
    ));
    live.daemon = Some(Daemon::start(Path::new(&daemon_config), live.metrics_port, &live.env()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while live.primary.psql("shop", "select count(*) from drcheck.heartbeat") == "0" {
        assert!(Instant::now() < deadline, "the daemon wrote no heartbeat");
        std::thread::sleep(Duration::from_millis(200));
    }
    live
}

/// Every run of the soak must pass: no validator failed or errored. Returns its
/// inconclusive items (printed for the record).
fn passes(what: &str, (code, run, err): &(Option<i32>, serde_json::Value, String)) -> Vec<String> {
    assert_eq!(run["result"], "passed", "{what}: {run:#}\n{err}");
    assert_eq!(*code, Some(0), "{what}: {run}");
    let mut inconclusive = Vec::new();
    for v in run["validators"].as_array().unwrap() {
        assert!(v["status"] != "failed" && v["status"] != "error", "{what}: {v}");
        for i in v["inconclusive"].as_array().into_iter().flatten() {
            inconclusive.push(format!("{}: {}", v["name"].as_str().unwrap(), i.as_str().unwrap()));
        }
    }
    eprintln!("live: {what}: passed; inconclusive: {inconclusive:?}");
    inconclusive
}

fn fails(what: &str, (code, run, err): &(Option<i32>, serde_json::Value, String), validator_name: &str, named: &str) {
    assert_eq!(*code, Some(1), "{what}: {run:#}\n{err}");
    assert_eq!(run["result"], "failed", "{what}: {run}");
    let detail = if validator_name == "error" {
        run["error"]["message"].as_str().unwrap_or_default().to_string()
    } else {
        let v = validator(run, validator_name);
        assert_eq!(v["status"], "failed", "{what}: {v}");
        v["detail"].as_str().unwrap().to_string()
    };
    assert!(detail.contains(named), "{what}: {named:?} not in {detail}");
    eprintln!("live: {what}: failed, naming {named:?}");
}

#[test]
fn every_verdict_holds_on_a_live_primary() {
    let rounds: u32 = std::env::var("DRCHECK_LIVE_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(1);
    let mut live = setup();
    let metrics_port = live.metrics_port;
    let daemon_metrics = || http_get(metrics_port, "/metrics");
    // Coverage series exist for every target from the daemon's start (its first listing
    // of each), before any run.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = daemon_metrics();
        let missing: Vec<&str> = ["phys", "dump"]
            .into_iter()
            .filter(|t| sample(&m, "drcheck_backups_unproven", &format!("target=\"{t}\"")).is_none())
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "no coverage series for {missing:?} from the daemon's start:\n{m}");
        std::thread::sleep(Duration::from_millis(250));
    }
    // The daemon sampled the primary's horizon when it started (drcheck's journal): the
    // first backups are taken more than as_of_grace (8 s) after it, so that even they are
    // judged by it once the primary runs without commit timestamps.
    std::thread::sleep(Duration::from_secs(9));
    live.base_backup();
    let d1 = live.dump();
    // The fixed point lies in a segment after the first backup's own WAL. Just before it
    // a client whose clock runs 2 s ahead commits a row stamped after it.
    live.sync_wal();
    live.primary
        .psql("shop", "insert into events (at, note) values (clock_timestamp() + interval '2 seconds', 'skewed')");
    std::thread::sleep(Duration::from_millis(1200));
    let fixed = live.clock();
    let fixed_taken = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    // A migration deployed inside the recovery window.
    live.primary.psql(
        "shop",
        "alter table events add column tag text; create table audit (id bigserial primary key, what text);
         insert into audit (what) values ('deployed')",
    );
    std::thread::sleep(Duration::from_secs(2));
    live.base_backup();
    let d2 = live.dump();
    std::thread::sleep(Duration::from_secs(2));
    live.sync_wal();

    // The heartbeat's health, from the daemon.
    let m = daemon_metrics();
    let last = sample(&m, "drcheck_heartbeat_last_write_timestamp_seconds", "target=\"phys\"").expect("heartbeat");
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!(now - last < 30.0, "the heartbeat was last written {} s ago", now - last);
    let failures = sample(&m, "drcheck_heartbeat_write_failures_total", "target=\"bad_hb\"").unwrap_or(0.0);
    assert!(failures > 0.0, "the wrong password's failed writes are counted:\n{m}");

    let mut inconclusive = Vec::new();
    for round in 1..=rounds {
        // Commit times on the primary: dumps judged exactly.
        let r = live.verify("phys", &live.phys("", "wal/", "1h"));
        inconclusive.extend(passes(&format!("round {round}: phys latest"), &r));
        let sums = validator(&r.1, "checksums");
        assert!(sums["detail"].as_str().unwrap().contains("told by transaction ids"), "{sums}");
        let r = live.verify("dump", &live.dump_target(""));
        inconclusive.extend(passes(&format!("round {round}: dump latest (commit times)"), &r));
        assert!(validator(&r.1, "checksums")["detail"].as_str().unwrap().contains("told by commit times"), "{}", r.1);
        let r = live.verify("phys", &live.phys("recovery_target = \"random:7d\"", "wal/", "1h"));
        inconclusive.extend(passes(&format!("round {round}: phys random"), &r));
        // A fixed point older than the RPO: proven, and the RPO is the archive's. (The
        // runs before it usually take longer than the 20 s RPO; on a quick machine the
        // point is let age past it first.)
        if let Some(rest) = Duration::from_secs(22).checked_sub(fixed_taken.elapsed()) {
            std::thread::sleep(rest);
        }
        live.sync_wal();
        let r = live.verify("phys", &live.phys(&format!("recovery_target = \"{fixed}\""), "wal/", "20s"));
        inconclusive.extend(passes(&format!("round {round}: phys fixed point"), &r));
        assert_eq!(validator(&r.1, "point_in_time")["status"], "passed", "the skewed row is within the slack: {}", r.1);
        // A reference that dangles on the primary too is the primary's, not the backup's.
        let lo = validator(&r.1, "large_objects");
        assert!(
            lo["detail"].as_str().unwrap().contains("public.attachments.file: 1 references dangle on the primary too"),
            "{lo}"
        );
        let proven = at(r.1["rpo"]["proven_point"].as_str().unwrap());
        let listed = at(r.1["rpo"]["measured_at"].as_str().unwrap());
        assert!(listed.duration_since(proven).unwrap() > Duration::from_secs(20), "T is older than the RPO: {}", r.1);
        assert_eq!(r.1["rpo"]["met"], true, "{}", r.1);
        let r = live.verify("phys", &live.phys("select = \"least-proven\"", "wal/", "1h"));
        inconclusive.extend(passes(&format!("round {round}: phys least-proven"), &r));
        let r = live.verify("dump", &live.dump_target("select = \"least-proven\""));
        inconclusive.extend(passes(&format!("round {round}: dump least-proven"), &r));
    }
    // A dump from before the migration: the primary's catalog says it was made since.
    live.s3.upload(&d1, &live.bucket, "dumps/d9-before-migration.dump");
    let r = live.verify("dump", &live.dump_target(""));
    inconclusive.extend(passes("dump from before the migration", &r));
    let schema = validator(&r.1, "schema");
    assert!(
        schema["detail"].as_str().unwrap().contains(
            "column public.events.tag missing from the restored copy (text) — made or altered on the primary"
        ),
        "{schema}"
    );

    // Defects planted in backups, each failed and named.
    live.tampered(&d2, "update events set note = 'forged' where id = 1", "dumps/d10-row.dump");
    let r = live.verify("dump", &live.dump_target(""));
    fails("a row the primary never updated, changed in the backup", &r, "checksums", "public.events: id=1 differs");
    live.tampered(&d2, "select lo_unlink(file) from docs where id = 1", "dumps/d11-lo.dump");
    let r = live.verify("dump", &live.dump_target(""));
    fails("a large object missing from the backup", &r, "large_objects", "are missing");
    live.tampered(&d2, "drop table audit", "dumps/d12-table.dump");
    let r = live.verify("dump", &live.dump_target(""));
    fails("a table missing from the backup", &r, "schema", "table public.audit missing from the restored copy");
    // The WAL segment the fixed point lies in, lost.
    for name in live.uploaded.clone() {
        let gz = live.root.path().join(format!("{name}.gz"));
        live.s3.upload(&gz, &live.bucket, &format!("walgap/{name}.gz"));
    }
    let gap = gap_segment(&live, &fixed);
    live.s3.delete(&live.bucket, &format!("walgap/{gap}.gz"));
    let r = live.verify("phys", &live.phys(&format!("recovery_target = \"{fixed}\""), "walgap/", "1h"));
    fails("a WAL segment lost before the point", &r, "error", &gap);
    // Back to the full archive for the rest.
    live.s3.aws(&["rm", "--only-show-errors", "--recursive", &format!("s3://{}/walgap/", live.bucket)]);
    for key in ["d10-row", "d11-lo", "d12-table", "d9-before-migration"] {
        live.s3.delete(&live.bucket, &format!("dumps/{key}.dump"));
    }

    // The primary restarts without commit timestamps: drcheck's journal of its horizon
    // (every run and the daemon sample it) tells what a dump lost from what the primary
    // changed since — every table decided, nothing undecided.
    live.load.stop_pgbench();
    live.primary.restart_with(&[("track_commit_timestamp", "off")]);
    live.load.start_pgbench();
    std::thread::sleep(Duration::from_secs(3));
    let d3 = live.dump();
    std::thread::sleep(Duration::from_secs(3));
    live.sync_wal();
    for round in 1..=rounds {
        let r = live.verify("dump", &live.dump_target(""));
        let found = passes(&format!("round {round}: dump latest (no commit times)"), &r);
        let sums = validator(&r.1, "checksums");
        assert!(sums["detail"].as_str().unwrap().contains("drcheck's journal"), "judged by the journal: {sums}");
        assert!(
            !found.iter().any(|i| i.contains("public.pgbench_accounts")),
            "updated in place since the dump: counted as changed, not undecided: {found:?}"
        );
        assert_eq!(r.1["content"]["proven_percent"], 100.0, "{}", r.1["content"]);
        inconclusive.extend(found);
        let r = live.verify("phys", &live.phys("recovery_target = \"random:7d\"", "wal/", "1h"));
        inconclusive.extend(passes(&format!("round {round}: phys random (no commit times)"), &r));
        live.sync_wal();
        let r = live.verify("phys", &live.phys("", "wal/", "1h"));
        inconclusive.extend(passes(&format!("round {round}: phys latest (no commit times)"), &r));
        let r = live.verify("dump", &live.dump_target("select = \"least-proven\""));
        inconclusive.extend(passes(&format!("round {round}: dump least-proven (no commit times)"), &r));
    }
    // Rows lost from a dump of the primary without commit times: the journal judges it.
    live.tampered(&d3, "delete from events where id <= 5", "dumps/d13-lost.dump");
    let r = live.verify("dump", &live.dump_target(""));
    // (Counts alone no longer tell: the rows the primary wrote between the journal's
    // sample and the dump are counted as changed since, and outnumber the five lost; the
    // checksums find every row unchanged since the sample that the copy lacks.)
    fails("rows lost before the band", &r, "checksums", "public.events: id=1 is missing");

    let mut seen: Vec<String> = inconclusive.into_iter().collect::<BTreeSet<_>>().into_iter().collect();
    seen.truncate(40);
    eprintln!("live: inconclusive over every run:\n  {}", seen.join("\n  "));
    // The wrong heartbeat password said why, and never the password.
    let mut daemon = live.daemon.take().unwrap();
    let (status, _) = daemon.terminate(Duration::from_secs(20));
    assert!(status.success(), "{status}");
    let log = daemon.stderr_text();
    assert!(log.contains("cannot write the heartbeat") && log.contains("password authentication failed"), "{log}");
    assert!(!log.contains("not-the-password") && !log.contains(&live.hb_password), "{log}");
}

/// The WAL file the fixed point lies in: the first archived segment whose newest commit
/// is past it (read with pg_waldump, as drcheck does).
fn gap_segment(live: &Live, fixed: &str) -> String {
    let t = at(fixed);
    let mut names: Vec<String> = live.uploaded.iter().filter(|n| n.len() == 24).cloned().collect();
    names.sort();
    for name in names {
        let out = Command::new(format!("{}/pg_waldump", drcheck_e2e::PG_BIN))
            .args(["--rmgr=Transaction"])
            .arg(live.archive.join(&name))
            .env("TZ", "UTC")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let past = text.lines().filter_map(|l| l.split("COMMIT ").nth(1)).any(|rest| {
            let stamp: String = rest.chars().take(26).collect();
            chrono::NaiveDateTime::parse_from_str(&stamp, "%Y-%m-%d %H:%M:%S%.f")
                .map(|n| std::time::UNIX_EPOCH + Duration::from_micros(n.and_utc().timestamp_micros() as u64) > t)
                .unwrap_or(false)
        });
        if past {
            return name;
        }
    }
    panic!("no archived segment reaches {fixed}")
}
