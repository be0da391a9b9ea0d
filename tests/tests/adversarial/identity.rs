//! The sandbox shares no identity with the host: no connection leaves it (not over a
//! pathname unix socket either, which Landlock does not govern), it runs as a user that
//! owns nothing else, it has no `/dev/shm`, and nothing it writes can be loaded as
//! native code. Each payload is first shown to work from an unprotected server.

use drcheck_e2e::attack::{script_file, unprotected};
use drcheck_e2e::hostile::{Lab, assert_contained, assert_ran, drcheck_user};
use drcheck_e2e::{PgPrimary, unique};
use std::time::{Duration, Instant};

fn plain(body: &str) -> Vec<u8> {
    format!("--\n-- PostgreSQL database dump\n--\n\n-- Dumped from database version 15.18\n\ncreate table t (id int);\n{body}\n")
        .into_bytes()
}

/// dblink, postgres_fdw and psql's `\c` from a restored backup to the host's clusters:
/// one owned by `postgres` taking peer logins (every Debian cluster), one taking any
/// local login (trust). Unprotected, each reaches both; from drcheck's sandbox none
/// does, and the run fails.
#[test]
fn a_restored_backup_reaches_no_cluster_on_the_host() {
    let lab = Lab::new();
    let peer = PgPrimary::start_victim(&lab.root, "victim-peer", "peer");
    let trust = PgPrimary::start_victim(&lab.root, "victim-trust", "trust");
    for v in [&peer, &trust] {
        v.psql("postgres", "create table pwned (x int)");
    }
    let payloads = |v: &PgPrimary| -> Vec<(&'static str, String)> {
        let (sock, port) = (v.sock.display().to_string(), v.port);
        vec![
            (
                "dblink",
                format!(
                    "create extension if not exists dblink;\nselect dblink_exec('host={sock} port={port} user=postgres \
                     dbname=postgres', 'insert into pwned values (1)');"
                ),
            ),
            (
                "postgres_fdw",
                format!(
                    "create extension if not exists postgres_fdw;\ncreate server victim foreign data wrapper \
                     postgres_fdw options (host '{sock}', port '{port}', dbname 'postgres');\ncreate user mapping \
                     for current_user server victim options (user 'postgres');\ncreate foreign table ft (x int) \
                     server victim options (table_name 'pwned');\ninsert into ft values (1);"
                ),
            ),
            (
                "psql",
                format!("\\c \"host={sock} port={port} user=postgres dbname=postgres\"\ninsert into pwned values (1);"),
            ),
        ]
    };
    let config = lab.config("", "");
    for (victim_name, victim) in [("peer", &peer), ("trust", &trust)] {
        for (what, payload) in payloads(victim) {
            // Unprotected: the server (dblink, postgres_fdw) or psql itself, as the
            // `postgres` user, gets in.
            if what == "psql" {
                // psql connected to another server follows the script's `\c`.
                let elsewhere = unprotected(&lab, "select 1;\n");
                let file = script_file(&lab, &format!("{payload}\n"));
                let mut psql = std::process::Command::new("psql");
                psql.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h"])
                    .arg(&elsewhere.sock)
                    .args(["-p", &elsewhere.port.to_string(), "-U", "postgres", "-d", "bank", "-f"])
                    .arg(&file);
                let out = drcheck_e2e::as_pg(&mut psql).output().unwrap();
                assert!(out.status.success(), "{victim_name}/{what} proof: {}", String::from_utf8_lossy(&out.stderr));
            } else {
                drop(unprotected(&lab, &format!("{payload}\n")));
            }
            assert_eq!(
                victim.psql("postgres", "select count(*) from pwned"),
                "1",
                "{victim_name}/{what}: the payload works"
            );
            victim.psql("postgres", "delete from pwned");

            let key = format!("{victim_name}-{what}.sql");
            lab.put(&key, &plain(&payload));
            let (code, run, all) = lab.verify(&config, &key);
            assert_eq!(
                victim.psql("postgres", "select count(*) from pwned"),
                "0",
                "{victim_name}/{what} got in: {all}"
            );
            assert_ran(&run, code, 1, &all);
            assert_contained(&run);
        }
    }
}

/// `/dev/shm` is every local process's: a backup could leave files there, overwrite
/// another cluster's segments or read them. Unprotected, a server writes there and reads
/// the segments; from the sandbox both fail (and its own segments live in its directory).
#[test]
fn dev_shm_is_neither_written_nor_read() {
    let lab = Lab::new();
    let marker = format!("/dev/shm/{}", unique("drcheck-e2e-"));
    let write = format!("copy (select 'x') to '{marker}';");
    // missing_ok: another test's cluster may remove a segment between listing and reading.
    let read = "create table leak as select pg_catalog.encode(pg_catalog.pg_read_binary_file('/dev/shm/' || f, 0, 65536, true), 'hex') \
                as seg from pg_catalog.pg_ls_dir('/dev/shm') f where f like 'PostgreSQL.%';";
    let cluster = unprotected(&lab, &format!("{write}\n{read}\n"));
    assert!(std::path::Path::new(&marker).exists(), "unprotected, the server writes to /dev/shm");
    std::fs::remove_file(&marker).unwrap();
    let segments: u32 = cluster.psql("bank", "select count(*) from leak where seg <> ''").parse().unwrap();
    assert!(segments >= 1, "unprotected, the server reads the host's segments");

    let config = lab.config("", "");
    for (name, body) in [("write", write.as_str()), ("read", read)] {
        let key = format!("shm-{name}.sql");
        lab.put(&key, &plain(body));
        let (code, run, all) = lab.verify(&config, &key);
        assert!(!std::path::Path::new(&marker).exists(), "the sandbox wrote to /dev/shm");
        assert_ran(&run, code, 1, &all);
        let msg = run["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("Permission denied") && msg.contains("/dev/shm"), "{name}: {msg}");
        assert_contained(&run);
    }
}

/// The processes that read a backup run as a user of their own: as root, the
/// configured sandbox user (never `postgres`, never root); a config naming `postgres`
/// is refused. Checked on the live server of a slow restore.
#[test]
fn the_sandbox_runs_as_a_user_that_owns_nothing_else() {
    let lab = Lab::new();
    lab.put("slow.sql", &plain("insert into t values (1);\nselect pg_sleep(4);"));
    let config = lab.config("", "");
    let child = lab.spawn_verify(&config, "slow.sql");
    let private = lab.private_dir();
    let deadline = Instant::now() + Duration::from_secs(60);
    let postgres_uid = nix::unistd::User::from_name("postgres").unwrap().unwrap().uid.as_raw();
    let mut seen = Vec::new();
    while seen.is_empty() {
        assert!(Instant::now() < deadline, "no sandbox process appeared");
        for p in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
            // PostgreSQL's processes working in the sandbox (the containment helper that
            // starts them runs as drcheck until it drops to the sandbox user and execs).
            let in_sandbox = std::fs::read_link(p.path().join("cwd")).is_ok_and(|c| c.starts_with(&private))
                && std::fs::read_link(p.path().join("exe")).is_ok_and(|e| e.starts_with("/usr/lib/postgresql"));
            let uid = std::fs::read_to_string(p.path().join("status"))
                .ok()
                .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(String::from))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|u| u.parse::<u32>().ok()));
            if let (true, Some(uid)) = (in_sandbox, uid) {
                seen.push(uid);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let expected = if drcheck_user().0 == 0 {
        nix::unistd::User::from_name("drcheck-sandbox").unwrap().unwrap().uid.as_raw()
    } else {
        drcheck_user().0
    };
    assert!(seen.iter().all(|u| *u == expected && *u != 0 && *u != postgres_uid), "{seen:?}, expected {expected}");

    let shared = lab.config("user = \"postgres\"", "");
    let (out, _) = drcheck_e2e::drcheck(
        &["--config", &shared.display().to_string(), "verify", "--target", "t"],
        &[],
        Duration::from_secs(60),
    );
    let err = drcheck_e2e::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("sandbox.user") && err.contains("owns nothing else"), "{err}");
}

/// A library the backup writes into its own directory (here a copy of one of
/// PostgreSQL's, taken with lo_import/lo_export) and then loads: native code, against
/// which no check inside the server could stand. Unprotected it loads; in the sandbox's
/// namespaces the run directory is mounted noexec and it does not.
#[test]
fn native_code_the_backup_writes_cannot_be_loaded() {
    let lab = Lab::new();
    let lib = "/usr/lib/postgresql/15/lib/pg_trgm.so";
    let body = format!(
        "select pg_catalog.lo_import('{lib}', 4242424);\n\
         select pg_catalog.lo_export(4242424, pg_catalog.current_setting('data_directory') || '/evil.so');\n\
         do $$ begin execute pg_catalog.format('load %L', pg_catalog.current_setting('data_directory') || '/evil.so'); end $$;"
    );
    drop(unprotected(&lab, &format!("{body}\n")));

    let config = lab.config("", "");
    lab.put("native.sql", &plain(&body));
    let (code, run, all) = lab.verify(&config, "native.sql");
    let containment = run["restore"]["containment"].as_str().unwrap_or_default().to_string();
    // As root, namespaces are always there to be had; unprivileged, only where the
    // system allows user namespaces.
    assert!(drcheck_user().0 != 0 || containment.split('+').any(|l| l == "ns"), "{run}");
    if !containment.split('+').any(|l| l == "ns") {
        eprintln!("no namespaces on this machine ({containment}): the noexec layer is not there to test");
        return;
    }
    assert_ran(&run, code, 1, &all);
    let msg = run["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("evil.so") && msg.contains("failed to map segment"), "{msg}");
    assert_contained(&run);
}
