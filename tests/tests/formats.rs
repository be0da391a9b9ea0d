//! End-to-end: every common backup format, made by the real tools, restores from
//! moto's S3 server — detected by content, never by name.

use drcheck_e2e::scenario::Scene;
use drcheck_e2e::{
    PgPrimary, S3Server, TempRoot, assert_all_validators_pass, drcheck, make_world_enterable, only_run, stderr, unique,
    validator,
};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

fn sh(cmd: &str) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
}

fn verify_key(scene: &Scene, config: &Path, key: &str) -> serde_json::Value {
    let c = config.display().to_string();
    let (out, _) =
        drcheck(&["--config", &c, "verify", "--backup", key, "--target", "orders", "--json"], &scene.env(), LIMIT);
    let run = only_run(&out);
    assert_eq!(out.status.code(), Some(0), "{key}: {run}\n{}", stderr(&out));
    assert_all_validators_pass(&run);
    run
}

#[test]
fn every_logical_format_restores_and_validates() {
    let scene = Scene::start();
    let dir = scene.root.path();
    let p = |n: &str| dir.join(n).display().to_string();
    let sock = scene.primary.sock.display().to_string();
    let port = scene.primary.port.to_string();
    let dump =
        |args: &str, out: &str| sh(&format!("pg_dump -h {sock} -p {port} -U postgres {args} -f {} orders", p(out)));
    dump("-Fc -Z0", "custom-z0.dump");
    dump("-Ft", "dump.tar");
    dump("-Fd", "dirdump");
    sh(&format!("tar -C {} -cf {} dirdump", dir.display(), p("dir.tar")));
    sh(&format!("gzip -c {} > {}", p("dir.tar"), p("dir.tar.gz")));
    dump("-Fp", "plain.sql");
    sh(&format!("gzip -c {} > {}", p("plain.sql"), p("plain.sql.gz")));
    sh(&format!("zstd -q -c {} > {}", p("plain.sql"), p("plain.sql.zst")));
    sh(&format!("gzip -c {} > {}", scene.dump.display(), p("custom.dump.gz")));
    // A custom dump named like compressed SQL: the content decides.
    sh(&format!("cp {} {}", scene.dump.display(), p("mislabelled.sql.gz")));

    let cases = [
        ("custom-z0.dump", "custom"),
        ("dump.tar", "tar"),
        ("dir.tar", "directory"),
        ("dir.tar.gz", "directory+gzip"),
        ("plain.sql", "plain"),
        ("plain.sql.gz", "plain+gzip"),
        ("plain.sql.zst", "plain+zstd"),
        ("custom.dump.gz", "custom+gzip"),
        ("mislabelled.sql.gz", "custom"),
    ];
    for (file, _) in &cases {
        scene.s3.upload(&dir.join(file), &scene.bucket, &format!("orders/{file}"));
    }
    let config = scene.config(&scene.spec());
    for (file, format) in cases {
        let run = verify_key(&scene, &config, &format!("orders/{file}"));
        assert_eq!(run["backup"]["format"], format, "{file}: {run}");
    }

    // Parallel pg_restore (staged to a file) of custom and directory dumps.
    let mut spec = scene.spec();
    spec.extra_target = "restore_jobs = 2".into();
    let parallel = scene.config(&spec);
    for key in ["orders/orders-1.dump", "orders/dir.tar.gz"] {
        let run = verify_key(&scene, &parallel, key);
        assert_eq!(run["restore"]["jobs"], 2);
    }
}

#[test]
fn a_backup_that_is_not_the_configured_format_fails_naming_both() {
    let scene = Scene::start();
    let mut spec = scene.spec();
    spec.extra_target = "format = \"plain\"".into();
    let c = scene.config(&spec).display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["error"]["stage"], "restore");
    let msg = run["error"]["message"].as_str().unwrap();
    assert!(msg.contains("format is plain") && msg.contains("custom backup"), "{msg}");
}

#[test]
fn owners_are_kept_when_a_globals_file_brings_the_roles() {
    let scene = Scene::start();
    scene.primary.psql("postgres", "create role app_owner nologin");
    scene.primary.psql("orders", "alter table customers owner to app_owner");
    let dir = scene.root.path();
    let dump = dir.join("owned.dump");
    scene.primary.dump("orders", &dump, &[]);
    let globals = dir.join("globals.sql");
    scene.primary.tool("pg_dumpall", &["--globals-only", "-f", &globals.display().to_string()]);
    std::thread::sleep(Duration::from_millis(1100));
    scene.s3.upload(&dump, &scene.bucket, "orders/owned.dump");
    scene.s3.upload(&globals, &scene.bucket, "globals/globals.sql");
    let empty = dir.join("empty.sql");
    std::fs::write(&empty, "-- no roles here\n").unwrap();
    scene.s3.upload(&empty, &scene.bucket, "globals/empty.sql");

    let mut spec = scene.spec();
    spec.extra_target = "globals_key = \"globals/globals.sql\"".into();
    let c = scene.config(&spec).display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}\n{}", drcheck_e2e::stdout(&out), stderr(&out));

    // Owners are restored, so without the role the restore must fail — proof that
    // ownership is kept rather than silently dropped.
    spec.extra_target = "globals_key = \"globals/empty.sql\"".into();
    let c = scene.config(&spec).display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let msg = only_run(&out)["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("app_owner"), "{msg}");

    // Issue 32: a plain dump of a database that grants to an application role stopped at
    // `role "appuser" does not exist` (exit 1). Without the roles its ownership and
    // privilege statements are left out, counted, as an archive's are — and only they:
    // a function whose body holds the same words keeps its body (`schema` compares it).
    scene.primary.psql("postgres", "create role appuser nologin");
    scene.primary.psql(
        "orders",
        "grant select on orders to appuser; grant usage on schema \"Sales\" to appuser;
         create function public.grants() returns text language sql as $_$
select 'x'::text
-- GRANT SELECT ON orders TO appuser;
$_$;
         alter function public.grants() owner to appuser;",
    );
    let plain = dir.join("grants.sql");
    scene.primary.tool("pg_dump", &["-Fp", "-f", &plain.display().to_string(), "orders"]);
    let text = std::fs::read_to_string(&plain).unwrap();
    assert!(text.contains("TO appuser;") && text.contains("OWNER TO app_owner;"), "the dump grants and owns");
    scene.s3.upload(&plain, &scene.bucket, "orders/grants.sql");
    let c = scene.config(&scene.spec()).display().to_string();
    let (out, _) = drcheck(
        &["--config", &c, "verify", "--backup", "orders/grants.sql", "--target", "orders", "--json"],
        &scene.env(),
        LIMIT,
    );
    let run = only_run(&out);
    assert_eq!(out.status.code(), Some(0), "{run}\n{}", stderr(&out));
    assert_eq!(run["backup"]["format"], "plain", "{run}");
    let skipped = run["restore"]["privileges_skipped"].as_u64().unwrap_or(0);
    assert!(skipped >= 5, "owners and grants of app_owner and appuser, and public's: {run}");
    assert_all_validators_pass(&run);
    // With the roles (globals_key), they are restored instead, and nothing is skipped.
    scene.primary.tool("pg_dumpall", &["--globals-only", "-f", &globals.display().to_string()]);
    scene.s3.upload(&globals, &scene.bucket, "globals/globals2.sql");
    spec.extra_target = "globals_key = \"globals/globals2.sql\"".into();
    let c = scene.config(&spec).display().to_string();
    let (out, _) = drcheck(
        &["--config", &c, "verify", "--backup", "orders/grants.sql", "--target", "orders", "--json"],
        &scene.env(),
        LIMIT,
    );
    let run = only_run(&out);
    assert_eq!(out.status.code(), Some(0), "{run}\n{}", stderr(&out));
    assert!(run["restore"].get("privileges_skipped").is_none(), "{run}");
}

/// A base backup (`pg_basebackup -Ft -z -X stream`) and archived WAL, replayed to the
/// latest point and to a timestamp between two batches of rows.
#[test]
fn a_physical_backup_replays_archived_wal_to_a_timestamp() {
    let root = TempRoot::new();
    let archive = root.pg_dir("archive");
    let primary = PgPrimary::start_archiving(&root, &archive);
    let s3 = S3Server::start(&root);
    let bucket = unique("phys");
    s3.make_bucket(&bucket);
    primary.psql("postgres", "create database orders");
    primary.psql("orders", "create table t (id int primary key, batch text not null)");
    primary.psql("orders", "insert into t select g, 'A' from generate_series(1, 100) g");

    let bb = root.path().join("bb");
    primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-z", "-X", "stream", "--checkpoint=fast"]);
    // Uploaded as it is taken, before the target time: a fixed target restores the
    // newest backup that was complete in the store by then.
    for f in ["base.tar.gz", "pg_wal.tar.gz", "backup_manifest"] {
        s3.upload(&bb.join(f), &bucket, &format!("phys/b1/{f}"));
    }
    std::thread::sleep(Duration::from_millis(1200));
    primary.psql("orders", "insert into t select g, 'B' from generate_series(101, 300) g");
    std::thread::sleep(Duration::from_millis(1200));
    let target_time = primary
        .psql("orders", "select to_char(clock_timestamp() at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')");
    std::thread::sleep(Duration::from_millis(1200));
    primary.psql("orders", "insert into t select g, 'C' from generate_series(301, 700) g");
    primary.archive_all(&archive);
    for e in std::fs::read_dir(&archive).unwrap().filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let gz = root.path().join(format!("{name}.gz"));
        sh(&format!("gzip -c {} > {}", e.path().display(), gz.display()));
        s3.upload(&gz, &bucket, &format!("wal/{name}.gz"));
    }

    let password = unique("pw");
    primary.psql("postgres", &format!("create role verifier login password '{password}'"));
    primary.psql("postgres", "grant pg_read_all_data to verifier");
    let scratch = root.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    make_world_enterable(&scratch);
    let config = |recovery_target: &str| {
        let text = format!(
            "[state]\nurl = \"sqlite://{root}/history.db\"\n[sandbox]\nscratch_dir = \"{scratch}\"\n\
             [storage.s3]\nkind = \"s3\"\nbucket = \"{bucket}\"\nendpoint = \"{endpoint}\"\npath_style = true\n\
             [[target]]\nname = \"orders\"\nprimary = \"{primary}\"\nstorage = \"s3\"\nprefix = \"phys/\"\n\
             rto = \"10m\"\nrpo = \"1h\"\nwal_prefix = \"wal/\"\nrecovery_target = \"{recovery_target}\"\n",
            root = root.path().display(),
            scratch = scratch.display(),
            endpoint = s3.endpoint(),
            primary = primary.url("verifier", &password, "orders"),
        );
        let path = root.path().join(format!("{}.toml", unique("c")));
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };

    // Latest: every batch is back, so the row counts match the primary (700 rows).
    let c = config("latest");
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &[], LIMIT);
    let run = only_run(&out);
    assert_eq!(out.status.code(), Some(0), "{run}\n{}", stderr(&out));
    assert_eq!(run["backup"]["key"], "phys/b1/");
    assert_eq!(run["backup"]["format"], "physical");
    assert_eq!(validator(&run, "row_counts")["status"], "passed", "{run}");
    let recovered = run["restore"]["recovered_to"].as_str().unwrap();
    assert!(recovered > target_time.as_str(), "{run}");
    assert_eq!(run["restore"]["recovery_target"]["kind"], "latest", "{run}");
    assert!(run["restore"]["recovery_target"]["value"].is_null(), "{run}");
    assert!(run["restore"]["limited_by"].is_string() && run["restore"]["disk_fraction"].is_f64(), "{run}");
    // What a restore now would lose: the time since the last replayed commit.
    let at = humantime::parse_rfc3339_weak(recovered).unwrap();
    let lost = std::time::SystemTime::now().duration_since(at).unwrap().as_secs_f64();
    let age = run["rpo"]["recoverable_point_age_seconds"].as_f64().expect("recoverable_point_age_seconds");
    assert!(age <= lost + 0.5 && age > lost - 60.0, "age {age}, since the recovered point {lost}");

    // To the timestamp: batch C is not there. With C deleted on the primary too, the
    // counts match only if the replay stopped in the right place.
    primary.psql("orders", "delete from t where batch = 'C'");
    let c = config(&target_time);
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &[], LIMIT);
    let run = only_run(&out);
    assert_eq!(out.status.code(), Some(0), "{run}\n{}", stderr(&out));
    assert_eq!(validator(&run, "row_counts")["status"], "passed", "{run}");
    let recovered = run["restore"]["recovered_to"].as_str().unwrap();
    assert!(recovered <= target_time.as_str(), "recovered to {recovered}, target {target_time}");
    // Issue 25: the report says which point replay was asked for.
    assert_eq!(run["restore"]["recovery_target"]["kind"], "time", "{run}");
    assert_eq!(run["restore"]["recovery_target"]["value"], target_time.as_str(), "{run}");
    assert_eq!(run["restore"]["recovery_target"]["random"], false, "{run}");
    // …and the evidence lists both points proven (latest, then the time).
    let (out, _) = drcheck(&["--config", &c, "report", "--since", "1d", "--format", "json"], &[], LIMIT);
    let evidence: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = evidence["evidence"]["targets"][0]["runs"].as_array().unwrap();
    let targets: Vec<&str> = runs.iter().filter_map(|r| r["recovery_target"].as_str()).collect();
    assert_eq!(targets, ["latest", target_time.as_str()], "{evidence}");
    let private = scratch.join(format!("drcheck-{}", nix::unistd::Uid::effective().as_raw()));
    let left: Vec<_> = std::fs::read_dir(&private).unwrap().filter_map(Result::ok).map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "sandbox left behind: {left:?}");
}
