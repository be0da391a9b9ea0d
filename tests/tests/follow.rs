//! End-to-end: following a WAL archive (issue 36). A primary archives its WAL; the test
//! ships each archived file to the bucket the way an archiver would, and `drcheck
//! daemon` keeps a follower of the target: seeded from the base backup, replaying each
//! segment as it lands, resumed without a new seed after a restart, and firing
//! `DrcheckArchiveNotReplayable` — naming the segment — for a gap and for a corrupt
//! segment, long before any nightly verification.

use drcheck_e2e::{Daemon, PgPrimary, S3Server, TempRoot, free_port, http_get, make_world_enterable, unique};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

thread_local! {
    /// The follower's server log, shown when a wait fails.
    static FOLLOWER_LOG: std::cell::RefCell<Option<PathBuf>> = const { std::cell::RefCell::new(None) };
}

/// The follow interval the test runs at.
const INTERVAL: Duration = Duration::from_secs(1);
/// What a loaded machine (the suite runs three tests at once) adds to two intervals
/// before a segment shipped is seen replayed or named: the daemon's own log says when it
/// happened.
const SLACK: Duration = Duration::from_secs(30);

struct Archive {
    dir: PathBuf,
    bucket: String,
    shipped: BTreeSet<String>,
}

impl Archive {
    /// Uploads every archived file not shipped yet, except `holding` back.
    fn ship(&mut self, s3: &S3Server, holding: &[&str]) {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            if self.shipped.contains(&name) || holding.contains(&name.as_str()) {
                continue;
            }
            s3.upload(&self.dir.join(&name), &self.bucket, &format!("wal/{name}"));
            self.shipped.insert(name);
        }
    }
}

/// Switches WAL and waits until the file it closed is archived — the archiver says so
/// once its `cp` finished (the file exists as soon as it starts); returns its name.
fn close_segment(primary: &PgPrimary, archive: &Path) -> String {
    let last = primary.psql("postgres", "select pg_walfile_name(pg_current_wal_lsn())");
    primary.psql("postgres", "select pg_switch_wal()");
    let deadline = Instant::now() + Duration::from_secs(30);
    let done = || {
        primary.psql("postgres", &format!("select coalesce(last_archived_wal, '') >= '{last}' from pg_stat_archiver"))
            == "t"
    };
    while !(done() && archive.join(&last).exists()) {
        assert!(Instant::now() < deadline, "WAL {last} was never archived");
        std::thread::sleep(Duration::from_millis(50));
    }
    last
}

/// A commit on the primary; returns its time (the primary's clock, Unix seconds).
fn commit(primary: &PgPrimary, note: &str) -> f64 {
    primary
        .psql("orders", &format!("insert into beats (note) values ('{note}') returning extract(epoch from at)::float8"))
        .parse()
        .unwrap()
}

/// The value of the series `name{target="orders"...}` in the daemon's metrics, if any.
fn metric(port: u16, name: &str, labels: &str) -> Option<f64> {
    let text = http_get(port, "/metrics");
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains("target=\"orders\"") && l.contains(labels))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

fn wait_for<T>(what: &str, limit: Duration, daemon: &mut Daemon, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            daemon.kill();
            let server = FOLLOWER_LOG
                .with(|l| l.borrow().clone())
                .and_then(|p| std::fs::read_to_string(p).ok())
                .map(|t| t.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n"))
                .unwrap_or_default();
            let dir = FOLLOWER_LOG.with(|l| l.borrow().clone()).and_then(|p| p.parent().map(|p| p.to_path_buf()));
            let ls = |d: Option<PathBuf>| -> Vec<String> {
                d.and_then(|d| std::fs::read_dir(d).ok())
                    .map(|r| {
                        r.filter_map(Result::ok)
                            .map(|e| {
                                use std::os::unix::fs::MetadataExt;
                                let m = e.metadata().ok();
                                format!(
                                    "{} {} {:o} {}",
                                    e.file_name().to_string_lossy(),
                                    m.as_ref().map_or(0, |m| m.len()),
                                    m.as_ref().map_or(0, |m| m.mode()),
                                    m.as_ref().map_or(0, |m| m.uid())
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let (spool, wal) = (ls(dir.as_ref().map(|d| d.join("wal-spool"))), ls(dir.map(|d| d.join("data/pg_wal"))));
            panic!(
                "{what}: not within {limit:?}\n{}\nthe follower's server said:\n{server}\nspool: {spool:?}\npg_wal: {wal:?}",
                daemon.stderr_text()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Triggers a verification of orders and waits for its record.
fn run_now(port: u16, daemon: &mut Daemon) -> serde_json::Value {
    run_target(port, daemon, "orders")
}

/// Triggers a verification of `target` and waits for its record.
fn run_target(port: u16, daemon: &mut Daemon, target: &str) -> serde_json::Value {
    use drcheck_e2e::http_request;
    let auth = [("Authorization", "Bearer tok-follow")];
    // The target is free once the previous run's bookkeeping (lease, pruning) is done.
    let (_, body) = wait_for("the trigger is accepted", Duration::from_secs(20), daemon, || {
        let (status, body) = http_request(port, "POST", &format!("/api/v1/targets/{target}/verify"), &auth, "");
        assert!(status == 202 || status == 409, "{status} {body}");
        (status == 202).then_some((status, body))
    });
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["run_id"].as_str().unwrap().to_string();
    wait_for("the triggered run is recorded", Duration::from_secs(180), daemon, || {
        let (status, body) = http_request(port, "GET", &format!("/api/v1/runs/{id}"), &auth, "");
        (status == 200).then(|| serde_json::from_str::<serde_json::Value>(&body).unwrap())
    })
}

/// The bodies of the alerts the webhook received, as text.
fn alerts(hook: &drcheck_e2e::recorder::Recorder) -> Vec<String> {
    hook.requests().into_iter().map(|r| String::from_utf8_lossy(&r.body).into_owned()).collect()
}

#[test]
fn a_follower_replays_the_archive_as_it_grows_and_names_the_segment_it_cannot_replay() {
    let root = TempRoot::new();
    let archive_dir = root.pg_dir("archive");
    let primary = PgPrimary::start_archiving(&root, &archive_dir);
    let s3 = S3Server::start(&root);
    let bucket = unique("follow");
    s3.make_bucket(&bucket);
    primary.psql("postgres", "create database orders");
    primary.psql(
        "orders",
        "create table beats (id bigserial primary key, at timestamptz not null default clock_timestamp(), note text)",
    );
    commit(&primary, "before the backup");
    let watcher = unique("pw");
    primary.psql("postgres", &format!("create role watcher login password '{watcher}'"));
    primary.psql("postgres", "grant pg_read_all_data to watcher");
    let bb = root.path().join("bb");
    primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-z", "-X", "stream", "--checkpoint=fast"]);
    for f in ["base.tar.gz", "pg_wal.tar.gz", "backup_manifest"] {
        s3.upload(&bb.join(f), &bucket, &format!("phys/b1/{f}"));
    }
    // A second target the daemon serves beside the follower: a dump of the same database.
    let dump = root.path().join("orders.dump");
    primary.tool("pg_dump", &["-Fc", "-f", &dump.display().to_string(), "orders"]);
    s3.upload(&dump, &bucket, "dumps/orders.dump");
    let mut archive = Archive { dir: archive_dir.clone(), bucket: bucket.clone(), shipped: BTreeSet::new() };
    close_segment(&primary, &archive_dir);
    archive.ship(&s3, &[]);

    let hook = drcheck_e2e::recorder::Recorder::start(200);
    let (scratch, state) = (root.path().join("scratch"), root.path().join("state"));
    for d in [&scratch, &state] {
        std::fs::create_dir_all(d).unwrap();
        make_world_enterable(d);
    }
    make_world_enterable(root.path());
    let port = free_port();
    let config = root.path().join("drcheck.toml");
    std::fs::write(
        &config,
        format!(
            "[state]\nurl = \"sqlite://{root}/history.db\"\n[sandbox]\nscratch_dir = \"{scratch}\"\nstate_dir = \"{state}\"\n\
             [metrics]\nlisten = \"127.0.0.1:{port}\"\n[api]\ntoken = \"tok-follow\"\n\
             [[alert]]\nkind = \"webhook\"\nurl = \"{hook}/hook\"\n\
             [storage.s3]\nkind = \"s3\"\nbucket = \"{bucket}\"\nendpoint = \"{endpoint}\"\npath_style = true\n\
             [[target]]\nname = \"orders\"\nprimary = \"{primary}\"\nstorage = \"s3\"\nprefix = \"phys/\"\n\
             wal_prefix = \"wal/\"\nrto = \"10m\"\nrpo = \"1h\"\n\
             [target.follow]\ninterval = \"{interval}s\"\n\
             [[target]]\nname = \"spare\"\nprimary = \"{primary}\"\nstorage = \"s3\"\nprefix = \"dumps/\"\n\
             rto = \"10m\"\nrpo = \"30d\"\ncomparisons = \"best-effort\"\n\
             # A dump of a primary that keeps changing, taken before any sample of it: its
             # content is undecided (inconclusive); this target is here to be served.
             max_undecided = \"100%\"\n",
            root = root.path().display(),
            scratch = scratch.display(),
            state = state.display(),
            hook = hook.url(),
            endpoint = s3.endpoint(),
            primary = primary.url("watcher", &watcher, "orders"),
            interval = INTERVAL.as_secs(),
        ),
    )
    .unwrap();

    // Seeded from the base backup, then following.
    let mut daemon = Daemon::start(&config, port, &[]);
    wait_for("the follower is up", Duration::from_secs(120), &mut daemon, || {
        (metric(port, "drcheck_follow_up", "") == Some(1.0)).then_some(())
    });
    let state_file = std::fs::read_dir(state.join(format!("drcheck-follow-{}", nix::unistd::Uid::effective())))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path().join("follow.json"))
        .find(|p| p.is_file())
        .expect("the follower keeps its state in state_dir");
    let seeded: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    assert_eq!(seeded["backup"], "phys/b1/", "{seeded}");
    // Contained like every sandbox: the follower's server runs as a user of its own
    // (never drcheck's, never postgres), as long as it runs.
    FOLLOWER_LOG.with(|l| *l.borrow_mut() = Some(state_file.parent().unwrap().join("postgres.log")));
    let data = state_file.parent().unwrap().join("data");
    let servers = drcheck_e2e::processes_mentioning(&data.display().to_string());
    assert!(!servers.is_empty(), "the follower's server runs on {}", data.display());
    for (pid, cmd) in &servers {
        use std::os::unix::fs::MetadataExt;
        let uid = std::fs::metadata(format!("/proc/{pid}")).unwrap().uid();
        assert_ne!(uid, nix::unistd::Uid::effective().as_raw(), "{cmd} runs as drcheck's own user");
        let postgres = nix::unistd::User::from_name("postgres").unwrap().map(|u| u.uid.as_raw());
        assert_ne!(Some(uid), postgres, "{cmd} runs as postgres");
    }

    // Each segment is replayed as it lands: the commit in it within two intervals (and
    // the fetch and replay) of its upload.
    let replayed = |daemon: &mut Daemon, at: f64, what: &str| {
        wait_for(what, INTERVAL * 2 + SLACK, daemon, || {
            metric(port, "drcheck_follow_replayed_commit_timestamp_seconds", "").filter(|t| *t >= at - 0.001)
        })
    };
    let t1 = commit(&primary, "first");
    close_segment(&primary, &archive_dir);
    let shipped = Instant::now();
    archive.ship(&s3, &[]);
    replayed(&mut daemon, t1, "the first commit is replayed");
    let took = shipped.elapsed();
    assert!(took <= INTERVAL * 2 + SLACK, "replayed {took:?} after the upload");
    assert!(metric(port, "drcheck_follow_segments_replayed_total", "").unwrap_or(0.0) >= 1.0);
    assert!(metric(port, "drcheck_follow_fetched_bytes_total", "").unwrap_or(0.0) > 0.0);
    // The primary is at or past what was replayed.
    assert!(metric(port, "drcheck_follow_behind_bytes", "").is_some_and(|b| b >= 0.0), "behind_bytes is measured");
    let status = drcheck_e2e::http_request(port, "GET", "/", &[("Authorization", "Bearer tok-follow")], "").1;
    assert!(
        status.contains("id=\"follower-orders\" data-state=\"following\""),
        "the status page shows the follower: {status}"
    );

    // A second daemon on the same config never starts a second server on the copy: it
    // stands by (the directory's lock, the history's lease).
    let port2 = free_port();
    let config2 = root.path().join("drcheck2.toml");
    let text =
        std::fs::read_to_string(&config).unwrap().replace(&format!("127.0.0.1:{port}"), &format!("127.0.0.1:{port2}"));
    std::fs::write(&config2, text).unwrap();
    let mut second = Daemon::start(&config2, port2, &[]);
    wait_for("the second daemon stands by", Duration::from_secs(20), &mut second, || {
        metric(port2, "drcheck_follow_up", "").filter(|v| *v == 0.0)
    });
    let postmasters = drcheck_e2e::processes_mentioning(&format!("-D {}", data.display()));
    assert_eq!(postmasters.len(), 1, "one server on the copy: {postmasters:?}");
    assert_eq!(metric(port, "drcheck_follow_up", ""), Some(1.0), "the first follows on");
    let (code, _) = second.terminate(Duration::from_secs(30));
    assert!(code.success(), "{code}");
    let said = second.stderr_text();
    assert!(said.contains("another drcheck process on this machine follows orders"), "{said}");

    // A restart resumes where replay stopped: no new seed.
    let (code, _) = daemon.terminate(Duration::from_secs(30));
    assert!(code.success(), "{code}");
    let log = daemon.stderr_text();
    assert!(
        !state_file.parent().unwrap().join("data").join("postmaster.pid").exists(),
        "the follower's server stopped with the daemon"
    );
    let mut daemon = Daemon::start(&config, port, &[]);
    let t2 = commit(&primary, "after the restart");
    close_segment(&primary, &archive_dir);
    archive.ship(&s3, &[]);
    replayed(&mut daemon, t2, "replay goes on after a restart");
    let again: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    assert_eq!(again["seeded_at"], seeded["seeded_at"], "a restart must not seed again ({log})");

    // Verifications: the base backup is unproven, so the first restores it (amcheck and
    // all); with every backup proven, the next validates on the follower, paused at a
    // commit, and replay goes on after.
    let first = run_now(port, &mut daemon);
    assert_eq!(first["mode"], "restore", "{first}");
    assert_eq!(first["result"], "passed", "{first}");
    let second = run_now(port, &mut daemon);
    assert_eq!(second["mode"], "follow", "{second}");
    assert_eq!(second["result"], "passed", "{second}");
    let commit_at = second["follow"]["commit"].as_str().expect("the point validated is reported");
    assert!(humantime::parse_rfc3339_weak(commit_at).is_ok(), "{second}");
    assert_eq!(second["rto"]["measured_seconds"], serde_json::Value::Null, "no restore, no RTO: {second}");
    let names: Vec<&str> = second["validators"].as_array().unwrap().iter().filter_map(|v| v["name"].as_str()).collect();
    assert!(!names.contains(&"amcheck"), "amcheck writes: it runs on restores only ({names:?})");
    for v in ["catalog", "checksums", "row_counts"] {
        assert_eq!(drcheck_e2e::validator(&second, v)["status"], "passed", "{second}");
    }
    let t = commit(&primary, "after the paused validation");
    close_segment(&primary, &archive_dir);
    archive.ship(&s3, &[]);
    replayed(&mut daemon, t, "replay resumes after a validation");

    // A forged segment: a row's bytes changed in the archived WAL, its record's CRC made
    // good again — replay takes it; the validation on the follower catches the row.
    let marker = unique("MARKER");
    let forgery = marker.replace("MARKER", "FORGED");
    commit(&primary, &marker);
    let forged_segment = close_segment(&primary, &archive_dir);
    let t = commit(&primary, "after the forgery");
    close_segment(&primary, &archive_dir);
    let forged = drcheck_e2e::hostile::forge_wal(
        &archive_dir.join(&forged_segment),
        drcheck_e2e::PG_BIN,
        marker.as_bytes(),
        forgery.as_bytes(),
    );
    let path = root.path().join("forged");
    std::fs::write(&path, forged).unwrap();
    s3.upload(&path, &bucket, &format!("wal/{forged_segment}"));
    archive.shipped.insert(forged_segment.clone());
    archive.ship(&s3, &[]);
    replayed(&mut daemon, t, "the forged segment replays");
    let third = run_now(port, &mut daemon);
    assert_eq!(third["mode"], "follow", "{third}");
    assert_eq!(third["result"], "failed", "{third}");
    let checksums = drcheck_e2e::validator(&third, "checksums");
    assert_eq!(checksums["status"], "failed", "{third}");
    assert!(checksums["detail"].as_str().unwrap().contains("public.beats"), "{checksums}");

    // A segment missing from the archive while a later one is there: named at once.
    commit(&primary, "in the lost segment");
    let lost = close_segment(&primary, &archive_dir);
    commit(&primary, "after the lost segment");
    close_segment(&primary, &archive_dir);
    archive.ship(&s3, &[&lost]);
    wait_for("a gap is named", INTERVAL * 2 + SLACK, &mut daemon, || {
        metric(port, "drcheck_follow_not_replayable", &format!("segment=\"{lost}\"")).filter(|v| *v == 1.0)
    });
    assert!(
        http_get(port, "/metrics")
            .contains(&format!("drcheck_follow_not_replayable{{reason=\"gap\",segment=\"{lost}\"")),
        "the gap is said to be a gap"
    );
    wait_for("the gap is alerted", Duration::from_secs(15), &mut daemon, || {
        alerts(&hook).into_iter().find(|a| a.contains("DrcheckArchiveNotReplayable") && a.contains(&lost))
    });
    // Issue 48: the operator acknowledges the segment lost, through the API: the follower
    // names it so, and it no longer pages (its alert resolves).
    let decision =
        format!("{{\"from\":\"{lost}\",\"to\":\"{lost}\",\"reason\":\"lost with the old archiver\",\"by\":\"ada\"}}");
    let json = [("Authorization", "Bearer tok-follow"), ("Content-Type", "application/json")];
    let (status, said) =
        drcheck_e2e::http_request(port, "POST", "/api/v1/targets/orders/archive/acknowledge-gap", &json, &decision);
    assert_eq!(status, 201, "{said}");
    assert!(said.contains("\"by\":\"ada\"") && said.contains("lost with the old archiver"), "{said}");
    let (status, _) = drcheck_e2e::http_request(
        port,
        "POST",
        "/api/v1/targets/orders/archive/acknowledge-gap",
        &[("Content-Type", "application/json")],
        &decision,
    );
    assert_eq!(status, 401, "a decision needs the token");
    wait_for("the acknowledged gap is named", INTERVAL * 2 + SLACK, &mut daemon, || {
        metric(port, "drcheck_follow_not_replayable", &format!("reason=\"acknowledged_gap\",segment=\"{lost}\""))
            .filter(|v| *v == 1.0)
    });
    wait_for("the acknowledged gap no longer pages", Duration::from_secs(15), &mut daemon, || {
        alerts(&hook).into_iter().find(|a| a.contains("DrcheckArchiveNotReplayable") && a.contains("resolved"))
    });
    // The segment arrives late: replay moves on, the alert resolves.
    let t3 = commit(&primary, "after the gap was filled");
    close_segment(&primary, &archive_dir);
    archive.ship(&s3, &[]);
    replayed(&mut daemon, t3, "replay passes the filled gap");
    wait_for("the gap's alert resolves", Duration::from_secs(15), &mut daemon, || {
        alerts(&hook).into_iter().find(|a| a.contains("DrcheckArchiveNotReplayable") && a.contains("resolved"))
    });

    // A segment longer than a segment (PostgreSQL would refuse it fatally): drcheck
    // refuses it first, naming it, and goes on once the archive holds the real one.
    commit(&primary, "in the oversized segment");
    let oversized = close_segment(&primary, &archive_dir);
    let t = commit(&primary, "after the oversized segment");
    close_segment(&primary, &archive_dir);
    let mut bytes = std::fs::read(archive_dir.join(&oversized)).unwrap();
    bytes.extend(std::iter::repeat_n(0u8, 1 << 20));
    let path = root.path().join("oversized");
    std::fs::write(&path, bytes).unwrap();
    s3.upload(&path, &bucket, &format!("wal/{oversized}"));
    archive.shipped.insert(oversized.clone());
    archive.ship(&s3, &[]);
    wait_for("the oversized segment is named", INTERVAL * 2 + SLACK, &mut daemon, || {
        metric(port, "drcheck_follow_not_replayable", &format!("reason=\"unreadable\",segment=\"{oversized}\""))
    });
    s3.upload(&archive_dir.join(&oversized), &bucket, &format!("wal/{oversized}"));
    replayed(&mut daemon, t, "replay goes on once the segment is whole");

    // A crafted timeline history kills the follower's server (PostgreSQL reads it at every
    // retry and stops on a line it cannot parse). The daemon names it crashed, alerts,
    // keeps serving its other targets, and the follower recovers once the archive no
    // longer holds the forgery.
    let history = root.path().join("forged.history");
    std::fs::write(&history, "this is not a timeline history\n").unwrap();
    s3.upload(&history, &bucket, "wal/00000002.history");
    wait_for("the crash is named", INTERVAL * 2 + SLACK, &mut daemon, || {
        metric(port, "drcheck_follow_not_replayable", "reason=\"crashed\"")
    });
    wait_for("the crash is alerted", Duration::from_secs(30), &mut daemon, || {
        alerts(&hook)
            .into_iter()
            .find(|a| a.contains("DrcheckArchiveNotReplayable") && a.contains("history file") && a.contains("firing"))
    });
    assert_eq!(metric(port, "drcheck_follow_up", ""), Some(0.0));
    let spare = run_target(port, &mut daemon, "spare");
    assert_eq!(spare["result"], "passed", "the other target is served meanwhile: {spare}");
    assert_eq!(http_get(port, "/healthz"), "ok\n");
    s3.delete(&bucket, "wal/00000002.history");
    let t = commit(&primary, "after the forged history");
    close_segment(&primary, &archive_dir);
    archive.ship(&s3, &[]);
    replayed(&mut daemon, t, "the follower recovers once the forged history is gone");

    // A corrupt segment: its records do not check out; replay stops in it and says so.
    commit(&primary, "in the corrupt segment");
    let corrupt = close_segment(&primary, &archive_dir);
    let after_corrupt = commit(&primary, "after the corrupt segment");
    close_segment(&primary, &archive_dir);
    let bad = root.path().join(&corrupt);
    let mut bytes = std::fs::read(archive_dir.join(&corrupt)).unwrap();
    // Past the segment's long page header (40 bytes): its first records.
    for b in &mut bytes[64..160] {
        *b ^= 0x5A;
    }
    std::fs::write(&bad, &bytes).unwrap();
    s3.upload(&bad, &bucket, &format!("wal/{corrupt}"));
    archive.shipped.insert(corrupt.clone());
    archive.ship(&s3, &[]);
    let named = wait_for("a corrupt segment is named", INTERVAL * 2 + SLACK, &mut daemon, || {
        let text = http_get(port, "/metrics");
        text.lines()
            .find(|l| l.starts_with("drcheck_follow_not_replayable{") && l.contains(&format!("segment=\"{corrupt}\"")))
            .map(str::to_string)
    });
    eprintln!("named: {named}");
    assert!(named.contains("reason=\"corrupt\"") || named.contains("reason=\"stuck\""), "{named}");
    assert_eq!(metric(port, "drcheck_follow_up", ""), Some(0.0));
    wait_for("the corrupt segment is alerted", Duration::from_secs(15), &mut daemon, || {
        alerts(&hook)
            .into_iter()
            .find(|a| a.contains("DrcheckArchiveNotReplayable") && a.contains(&corrupt) && a.contains("firing"))
    });
    // The archive repaired (the segment uploaded again, whole): followed on, no new seed.
    s3.upload(&archive_dir.join(&corrupt), &bucket, &format!("wal/{corrupt}"));
    replayed(&mut daemon, after_corrupt, "replay goes on once the corrupt segment is replaced");
    let now: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    assert_eq!(now["seeded_at"], seeded["seeded_at"], "a repaired archive needs no new seed");
    let since = SystemTime::now();
    let (code, _) = daemon.terminate(Duration::from_secs(30));
    assert!(code.success(), "{code}: {:?}", since.elapsed());
    let log = daemon.stderr_text();
    // A segment that arrives late is replayed, not called stuck: no false page.
    assert!(!log.contains("reason=\"stuck\""), "{log}");
}

/// The database both tool tests follow: `orders` with a `beats` table and one commit.
fn beats_database(primary: &PgPrimary) {
    primary.psql("postgres", "create database orders");
    primary.psql(
        "orders",
        "create table beats (id bigserial primary key, at timestamptz not null default clock_timestamp(), note text)",
    );
    commit(primary, "before the backup");
}

/// The config lines that make a tool scene's target follow, with metrics on `port`.
fn follow_lines(port: u16) -> String {
    format!("[target.follow]\ninterval = \"{}s\"\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n", INTERVAL.as_secs())
}

/// Waits until the follower of `orders` (kept under `scratch`) is up; its directory and
/// `follow.json`.
fn seeded(scratch: &Path, port: u16, daemon: &mut Daemon, what: &str) -> (PathBuf, serde_json::Value) {
    wait_for(what, Duration::from_secs(120), daemon, || {
        (metric(port, "drcheck_follow_up", "") == Some(1.0)).then_some(())
    });
    let dir = scratch.join(format!("drcheck-follow-{}", nix::unistd::Uid::effective())).join("orders");
    FOLLOWER_LOG.with(|l| *l.borrow_mut() = Some(dir.join("postgres.log")));
    let state = serde_json::from_str(&std::fs::read_to_string(dir.join("follow.json")).unwrap()).unwrap();
    (dir, state)
}

/// A backup tool's repository, followed through the tool's own CLI: seeded by its
/// restore, each archived segment fetched by it (contained, into the follower's spool).
/// What the repository cannot replay — a segment deleted from it — is named as for
/// objects, after a restart that resumes without a new seed.
#[test]
fn a_pgbackrest_repository_is_followed_through_its_own_tool() {
    let scene = drcheck_e2e::repos::PgbrScene::start(None);
    let primary = &scene.primary;
    beats_database(primary);
    scene.backup("full");
    let info = scene.info();
    let label = info[0]["backup"].as_array().and_then(|b| b.last()).map(|b| b["label"].as_str().unwrap().to_string());
    let label = label.expect("a backup in the catalog");
    make_world_enterable(scene.root.path());
    let port = free_port();
    let config = scene.config(&follow_lines(port));
    let mut daemon = Daemon::start(&config, port, &scene.env());
    let (dir, seeded) = seeded(&scene.scratch, port, &mut daemon, "the follower is seeded by pgbackrest restore");
    assert_eq!(seeded["backup"], label.as_str(), "seeded from the repository's newest backup: {seeded}");

    let replayed = |daemon: &mut Daemon, at: f64, what: &str| {
        wait_for(what, INTERVAL * 2 + SLACK, daemon, || {
            metric(port, "drcheck_follow_replayed_commit_timestamp_seconds", "").filter(|t| *t >= at - 0.001)
        })
    };
    let t1 = commit(primary, "first");
    scene.archive_now();
    replayed(&mut daemon, t1, "a segment pgBackRest archived is replayed");
    assert!(metric(port, "drcheck_follow_fetched_bytes_total", "").unwrap_or(0.0) > 0.0);

    // Stopped; one segment removed from the repository after it was pushed, a later one
    // pushed: the follower, resumed, names the missing one.
    let (code, _) = daemon.terminate(Duration::from_secs(30));
    assert!(code.success(), "{code}");
    commit(primary, "in the lost segment");
    let lost = scene.archive_now();
    let keys = scene.keys(&format!("{}/archive/", scene.repo_path));
    let key = keys.iter().find(|k| k.contains(&format!("/{lost}-"))).unwrap_or_else(|| panic!("{lost} in {keys:?}"));
    scene.s3.delete(&scene.bucket, key);
    commit(primary, "after the lost segment");
    scene.archive_now();
    let mut daemon = Daemon::start(&config, port, &scene.env());
    let named = wait_for("the deleted segment is named a gap", INTERVAL * 2 + SLACK + SLACK, &mut daemon, || {
        metric(port, "drcheck_follow_not_replayable", &format!("reason=\"gap\",segment=\"{lost}\""))
    });
    assert_eq!(named, 1.0);
    let again: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("follow.json")).unwrap()).unwrap();
    assert_eq!(again["seeded_at"], seeded["seeded_at"], "resumed, not seeded again");
    let (code, _) = daemon.terminate(Duration::from_secs(30));
    assert!(code.success(), "{code}");
}

/// barman-cloud (the layout CloudNativePG writes): seeded by `barman-cloud-restore`,
/// each segment fetched by `barman-cloud-wal-restore`.
#[test]
fn a_barman_cloud_archive_is_followed_through_its_own_tool() {
    let scene = drcheck_e2e::repos::BarmanScene::start();
    let primary = &scene.primary;
    beats_database(primary);
    let id = scene.backup();
    make_world_enterable(scene.root.path());
    let port = free_port();
    let config = scene.config(&follow_lines(port));
    let mut daemon = Daemon::start(&config, port, &[]);
    let (_, seeded) = seeded(&scene.scratch, port, &mut daemon, "the follower is seeded by barman-cloud-restore");
    assert_eq!(seeded["backup"], id.as_str(), "{seeded}");
    let t1 = commit(primary, "first");
    scene.archive_now();
    wait_for("a segment barman-cloud archived is replayed", INTERVAL * 2 + SLACK, &mut daemon, || {
        metric(port, "drcheck_follow_replayed_commit_timestamp_seconds", "").filter(|t| *t >= t1 - 0.001)
    });
    let (code, _) = daemon.terminate(Duration::from_secs(30));
    assert!(code.success(), "{code}");
}
