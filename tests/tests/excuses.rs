//! Issue 46: nothing the backup holds excuses a difference. What changed on the primary
//! since the copy's point is decided from the primary and drcheck's own records only —
//! its journal of the primary's transaction horizon, the primary's catalog and its DDL
//! log — never from the copy's counts, keys, horizon or logs. Each attack here is built
//! from scratch against a primary without commit timestamps (the default) and passed on
//! the binary before this issue (exit 0); each is contained now: failed, or an error
//! where drcheck cannot bound the work — never passed. And what cannot be decided is
//! `inconclusive` (exit 4): never a pass.

use drcheck_e2e::{PgPrimary, S3Server, TempRoot, drcheck, make_world_enterable, only_run, stderr, unique, validator};
use std::path::{Path, PathBuf};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(240);

/// A default primary (no `track_commit_timestamp`) holding `shop`, a bucket, and the
/// dumps and tampered dumps a test makes of it.
struct Lab {
    root: TempRoot,
    primary: PgPrimary,
    s3: S3Server,
    bucket: String,
    password: String,
    scratch: PathBuf,
}

impl Lab {
    fn new(sql: &str) -> Lab {
        let root = TempRoot::new();
        let primary = PgPrimary::start(&root);
        let s3 = S3Server::start(&root);
        let password = unique("pw");
        primary.psql("postgres", "create database shop");
        primary.psql("postgres", &format!("create role verifier login password '{password}'"));
        primary.psql("postgres", "grant pg_read_all_data to verifier");
        primary.psql("shop", sql);
        let bucket = unique("ex");
        s3.make_bucket(&bucket);
        let scratch = root.path().join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        make_world_enterable(&scratch);
        Lab { root, primary, s3, bucket, password, scratch }
    }

    /// A config whose target `shop` reads `prefix`, with `extra` target keys.
    fn config(&self, prefix: &str, extra: &str) -> PathBuf {
        let text = format!(
            "[state]\nurl = \"sqlite://{root}/history.db\"\n[sandbox]\nscratch_dir = \"{scratch}\"\n\
             [metrics]\ntextfile = \"{root}/drcheck.prom\"\n\
             [storage.s3]\nkind = \"s3\"\nbucket = \"{bucket}\"\nendpoint = \"{endpoint}\"\npath_style = true\n\
             [[target]]\nname = \"shop\"\nprimary = \"{primary}\"\nstorage = \"s3\"\nprefix = \"{prefix}\"\n\
             rto = \"10m\"\nrpo = \"30d\"\npin = false\n{extra}\n",
            root = self.root.path().display(),
            scratch = self.scratch.display(),
            bucket = self.bucket,
            endpoint = self.s3.endpoint(),
            primary = self.primary.url("verifier", "${SHOP_PW}", "shop"),
        );
        let path = self.root.path().join(format!("{}.toml", unique("c")));
        std::fs::write(&path, text).unwrap();
        path
    }

    /// An honest `pg_dump -Fc` of `shop` uploaded as `key`.
    fn dump(&self, key: &str) {
        let path = self.root.path().join(unique("d"));
        self.primary.dump("shop", &path, &[]);
        self.s3.upload(&path, &self.bucket, key);
    }

    /// A dump of `shop` as it is now, changed by `sql` first, uploaded as `key`.
    fn tampered(&self, key: &str, sql: &str) {
        let path = self.root.path().join(unique("t"));
        self.primary.tampered_dump("shop", sql, &path);
        self.s3.upload(&path, &self.bucket, key);
    }

    /// `drcheck verify --backup KEY --json`: the exit code, the run, stderr.
    fn verify(&self, config: &Path, key: &str) -> (Option<i32>, serde_json::Value, String) {
        let env = [("SHOP_PW", self.password.clone())];
        let c = config.display().to_string();
        let (out, took) =
            drcheck(&["--config", &c, "verify", "--target", "shop", "--backup", key, "--json"], &env, LIMIT);
        eprintln!("excuses: verify {key} took {:.1}s", took.as_secs_f64());
        (out.status.code(), only_run(&out), stderr(&out))
    }
}

fn detail(run: &serde_json::Value, name: &str) -> String {
    validator(run, name)["detail"].as_str().unwrap_or_default().to_string()
}

/// The sample data: a keyed table, a composite-key table, a keyless one, a hot table
/// every row of which the primary updates after the backup, a sparse ledger, and an
/// append-only `as_of` table without a key.
const SHOP: &str = "
create table accounts (id int primary key, balance int not null);
insert into accounts select g, g * 10 from generate_series(1, 1000) g;
create table pairs (a int, b int, v text, primary key (a, b));
insert into pairs select g / 10, g % 10, md5(g::text) from generate_series(1, 300) g;
create table notes (v text);
insert into notes select 'note ' || g from generate_series(1, 300) g;
create table hot (id int primary key, n int not null);
insert into hot select g, 0 from generate_series(1, 200) g;
create table ledger (id int primary key, amount int not null);
insert into ledger select g * 10, g from generate_series(1, 3000) g;
create table events (at timestamptz not null, what text);
insert into events select now() - interval '1 hour' + g * interval '1 second', 'e' || g from generate_series(1, 300) g;
analyze";

/// Everything about a dump of a default primary, in one scene (each verification is a
/// restore; the dumps are shared).
#[test]
fn a_default_primary_proves_dumps_and_no_backup_excuses_its_own_defects() {
    let lab = Lab::new(SHOP);
    // No sample of the primary yet: both dumps are older than anything drcheck saw.
    lab.tampered("d/0-changed.dump", "update accounts set balance = -1 where id = 500");
    lab.tampered(
        "d/0-events.dump",
        "delete from events where what = 'e5';
         insert into events values (now() - interval '2 hours', 'invented 1'), (now() - interval '2 hours', 'invented 2')",
    );
    let config = lab.config(
        "d/",
        "[target.as_of]\n\"public.events\" = \"at\"\n\
         [target.validators]\nas_of_grace = \"1s\"\nstats_settle = \"1s\"\nchecksum_chunk_rows = 100\n",
    );

    // 1. Nothing tells a change since the dump from a defect: not a pass — inconclusive,
    //    exit 4, the table named with what would prove it.
    let (code, run, all) = lab.verify(&config, "d/0-changed.dump");
    assert_eq!(run["result"], "inconclusive", "{run:#}\n{all}");
    assert_eq!(code, Some(4), "{all}");
    let sums = validator(&run, "checksums");
    let undecided: Vec<&str> = sums["inconclusive"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    assert!(undecided.iter().any(|i| i.starts_with("public.accounts:") && i.contains("sample the primary")), "{sums}");
    assert!(run["content"]["proven_percent"].as_f64().unwrap() < 100.0, "{}", run["content"]);
    assert_eq!(run["content"]["tables_undecided"], 1, "{}", run["content"]);
    // Its own verdict everywhere: the metrics (not a failing backup, not a success), the
    // status table, the evidence — and never a proof of the backup.
    let prom = std::fs::read_to_string(lab.root.path().join("drcheck.prom")).unwrap();
    for (series, value) in [
        ("drcheck_last_run_inconclusive{target=\"shop\"}", "1"),
        ("drcheck_last_run_success{target=\"shop\"}", "0"),
        ("drcheck_verification_runs_total{result=\"inconclusive\",target=\"shop\"}", "1"),
    ] {
        assert!(prom.lines().any(|l| l == format!("{series} {value}")), "{series} {value} not in {prom}");
    }
    assert!(prom.contains("drcheck_content_proven_ratio{target=\"shop\"} 0."), "{prom}");
    assert!(!prom.contains("drcheck_last_success_timestamp_seconds{target=\"shop\"}"), "no success: {prom}");
    let env = [("SHOP_PW", lab.password.clone())];
    let c = config.display().to_string();
    let (out, _) = drcheck(&["--config", &c, "status", "--json"], &env, LIMIT);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["targets"][0]["verdict"], "inconclusive", "{status}");
    assert!(status["targets"][0]["content_proven"].as_str().unwrap().ends_with('%'), "{status}");
    let (out, _) = drcheck(&["--config", &c, "backups", "list", "--json"], &env, LIMIT);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let changed = listed["targets"][0]["backups"].as_array().unwrap().iter().find(|b| b["key"] == "d/0-changed.dump");
    assert_eq!(changed.unwrap()["last_proven_at"], serde_json::Value::Null, "not a proof: {listed}");
    let (out, _) = drcheck(&["--config", &c, "report", "--format", "json", "--since", "1d"], &env, LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let evidence: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let summary = &evidence["evidence"]["targets"][0]["summary"];
    assert_eq!((summary["inconclusive"].as_u64(), summary["passed"].as_u64()), (Some(1), Some(0)), "{summary}");
    assert!(summary["content_proven_percent"].as_f64().unwrap() < 100.0, "{summary}");

    // 2. An append-only as_of table (no key) with a row deleted and two invented ones:
    //    the invented rows do not stand in for the lost one.
    let (code, run, all) = lab.verify(&config, "d/0-events.dump");
    assert_eq!(code, Some(1), "{run:#}\n{all}");
    let d = detail(&run, "checksums");
    assert!(d.contains("public.events: 1 rows the primary held unchanged") && d.contains("e5"), "{d}");

    // Both runs sampled the primary: dumps taken from now on are judged by the journal.
    std::thread::sleep(Duration::from_millis(2100));
    lab.dump("d/1-honest.dump");
    lab.tampered(
        "d/1-tampered.dump",
        "update accounts set balance = 999999 where id = 510;
         delete from accounts where id = 520;
         update pairs set v = 'forged' where a = 3 and b = 3;
         insert into pairs values (999, 1, 'padding');
         update notes set v = 'forged' where v = 'note 7';
         insert into notes values ('padding');
         delete from hot;
         -- A mark of drcheck's own tables, forged on a user table: only the primary's marks count.
         comment on table accounts is 'drcheck: heartbeat (as_of balance)';
         update ledger set amount = -5 where id = 500;
         delete from ledger where id in (1000, 2000);
         insert into ledger select g * 1000 + 5, 0 from generate_series(1, 17) g;
         insert into ledger select 100000 + g, 0 from generate_series(1, 17) g",
    );
    // The primary after the dumps: every hot row updated, rows updated, inserted and
    // deleted, and a migration.
    lab.primary.psql(
        "shop",
        "update hot set n = n + 1;
         insert into hot select g, 0 from generate_series(201, 210) g;
         update accounts set balance = balance + 1 where id <= 50;
         insert into accounts select g, 0 from generate_series(1001, 1050) g;
         delete from accounts where id = 900;
         insert into notes values ('after');
         alter table accounts add column note text;
         create table audit (id int primary key);
         create index accounts_balance on accounts (balance)",
    );

    // 3. The honest dump passes: the primary's changes since are counted, its migration a note.
    let (code, run, all) = lab.verify(&config, "d/1-honest.dump");
    assert_eq!(run["result"], "passed", "{run:#}\n{all}");
    assert_eq!(code, Some(0), "{all}");
    let d = detail(&run, "checksums");
    assert!(d.contains("told by the primary's horizon") && d.contains("drcheck's journal"), "{d}");
    assert!(d.contains("rows changed on the primary since the copy's point"), "{d}");
    assert_eq!(run["content"]["proven_percent"], 100.0, "{}", run["content"]);
    let s = detail(&run, "schema");
    for made in ["column public.accounts.note", "index public.accounts.accounts_balance"] {
        assert!(s.contains(made) && s.contains("made or altered on the primary since the copy's point"), "{made}: {s}");
    }
    assert_eq!(validator(&run, "row_counts")["status"], "passed", "{run:#}");

    // 4. The tampered dump fails, every defect named — whatever rows it invented.
    let (code, run, all) = lab.verify(&config, "d/1-tampered.dump");
    assert_eq!(run["result"], "failed", "{run:#}\n{all}");
    assert_eq!(code, Some(1), "{all}");
    let d = detail(&run, "checksums");
    for named in [
        "public.accounts: id=510 differs",
        "id=520 is missing from the copy",
        "public.pairs: 1 rows the primary held unchanged",
        "(a, b)=(3,3)",
        "public.notes: 1 rows the primary held unchanged",
        "note 7",
        "public.ledger:",
        "id=500 differs",
        "id=1000 is missing from the copy",
        "id=2000 is missing from the copy",
    ] {
        assert!(d.contains(named), "{named:?} not in {d}");
    }
    assert!(d.contains("rows only the copy holds"), "the padding counted, not compared: {d}");
    let counts = detail(&run, "row_counts");
    assert!(counts.contains("public.hot") && counts.contains("at least 200 rows that existed"), "{counts}");

    // 5. A limit of drcheck's own is never a pass: past checksum_drill_rows, an error
    //    that names it (exit 3).
    let bounded = lab.config(
        "d/",
        "[target.validators]\nas_of_grace = \"1s\"\nchecksum_chunk_rows = 100\nchecksum_drill_rows = 50\n\
         enabled = [\"checksums\"]\nexclude = [\"public.accounts\", \"public.pairs\", \"public.notes\", \"public.hot\", \
         \"public.events\"]\n",
    );
    let (code, run, all) = lab.verify(&bounded, "d/1-tampered.dump");
    assert_eq!(run["result"], "error", "{run:#}\n{all}");
    assert_eq!(code, Some(3), "{all}");
    let sums = validator(&run, "checksums");
    assert_eq!(sums["status"], "error", "{sums}");
    assert!(
        sums["detail"].as_str().unwrap().contains("public.ledger")
            && sums["detail"].as_str().unwrap().contains("checksum_drill_rows"),
        "{sums}"
    );
}

/// A base backup of the primary's own cluster (same system identifier) whose clone burnt
/// transaction ids before the backup and changed a row: its horizon is ahead of the
/// primary's. It once downgraded the comparison to "nothing tells" (and passed); it is
/// the backup's defect.
#[test]
fn a_clone_that_burnt_transaction_ids_is_not_this_primarys_backup() {
    let lab = Lab::new(
        "create table accounts (id int primary key, balance int not null);
         insert into accounts select g, g from generate_series(1, 500) g",
    );
    let clone = lab.primary.clone_running(&lab.root, "clone");
    clone.psql(
        "shop",
        "do $$ begin for i in 1..5000 loop perform pg_catalog.pg_current_xact_id(); commit; end loop; end $$",
    );
    clone.psql("shop", "update accounts set balance = -1 where id = 7");
    let bb = lab.root.path().join("bb");
    clone.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "fetch", "--checkpoint=fast"]);
    for f in ["base.tar", "backup_manifest"] {
        lab.s3.upload(&bb.join(f), &lab.bucket, &format!("bb/1/{f}"));
    }
    let config = lab.config("bb/", "");
    let (code, run, all) = lab.verify(&config, "bb/1/");
    assert_eq!(run["backup"]["format"], "physical", "{all}");
    assert_eq!(run["result"], "failed", "{run:#}\n{all}");
    assert_eq!(code, Some(1), "{all}");
    let p = validator(&run, "provenance");
    assert_eq!(p["status"], "failed", "{p}");
    assert!(p["detail"].as_str().unwrap().contains("claims transactions this primary never ran"), "{p}");

    // A base backup of another cluster (another system identifier) holding the same rows:
    // not a backup of this primary — unless the target says so on purpose.
    let mut other = PgPrimary::start_opts(
        &lab.root,
        &drcheck_e2e::ClusterOptions {
            name: "other",
            local_auth: "trust",
            host_auth: "scram-sha-256",
            open_socket: false,
            settings: &[],
        },
    );
    other.psql("postgres", "create database shop");
    other.psql(
        "shop",
        "create table accounts (id int primary key, balance int not null);
         insert into accounts select g, g from generate_series(1, 500) g",
    );
    let bb = lab.root.path().join("bb2");
    other.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "fetch", "--checkpoint=fast"]);
    other.stop();
    lab.s3.upload(&bb.join("base.tar"), &lab.bucket, "bb/2/base.tar");
    let (code, run, all) = lab.verify(&config, "bb/2/");
    assert_eq!(code, Some(1), "{run:#}\n{all}");
    let p = validator(&run, "provenance");
    assert!(p["detail"].as_str().unwrap().contains("not a backup of this primary"), "{p}");
    let on_purpose = lab.config("bb/", "other_cluster = true\n");
    let (code, run, all) = lab.verify(&on_purpose, "bb/2/");
    assert_eq!(code, Some(0), "the same rows, compared: {run:#}\n{all}");
    assert!(run["validators"].as_array().unwrap().iter().all(|v| v["name"] != "provenance"), "{run:#}");
}

/// The DDL log the backup holds once decided which migrations counted as "after the
/// copy's point": delete the entry of a constraint added before T, drop the constraint,
/// and any logged `ALTER TABLE` of the table after T excused it. Only the primary's log
/// is read, and only a command naming the object itself explains it; a migration after
/// the backup is a note.
#[test]
fn the_ddl_log_the_backup_holds_excuses_nothing() {
    let lab = Lab::new(
        "create table orders (id int primary key, qty int not null, memo text);
         insert into orders select g, g from generate_series(1, 100) g",
    );
    let setup = lab.config("d/", "[target.heartbeat]\ntable = \"drcheck.heartbeat\"\n");
    let env = [("SHOP_PW", lab.password.clone())];
    let (out, _) =
        drcheck(&["--config", &setup.display().to_string(), "heartbeat", "setup", "--target", "shop"], &env, LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let script = lab.root.path().join("heartbeat.sql");
    std::fs::write(&script, drcheck_e2e::stdout(&out)).unwrap();
    make_world_enterable(lab.root.path());
    let done = lab.primary.run_script("shop", &script);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    lab.primary.psql("shop", "alter table orders add constraint qty_positive check (qty > 0)");
    let config = lab.config("d/", "[target.validators]\nas_of_grace = \"1s\"\n");
    // A first run samples the primary.
    lab.dump("d/0.dump");
    let (code, run, all) = lab.verify(&config, "d/0.dump");
    assert_eq!(code, Some(0), "{run:#}\n{all}");
    std::thread::sleep(Duration::from_millis(2100));
    lab.dump("d/1-honest.dump");
    lab.tampered(
        "d/1-forged-log.dump",
        "alter table orders drop constraint qty_positive;
         alter table orders drop column memo;
         delete from drcheck.ddl_log where identity like '%orders%' or identity like '%qty%'",
    );
    // After the backups: a migration of the same table.
    lab.primary.psql("shop", "alter table orders add column note text");

    let (code, run, all) = lab.verify(&config, "d/1-honest.dump");
    assert_eq!(code, Some(0), "{run:#}\n{all}");
    let s = detail(&run, "schema");
    assert!(s.contains("column public.orders.note missing from the restored copy"), "{s}");

    let (code, run, all) = lab.verify(&config, "d/1-forged-log.dump");
    assert_eq!(code, Some(1), "{run:#}\n{all}");
    let schema = validator(&run, "schema");
    assert_eq!(schema["status"], "failed", "{schema}");
    let s = schema["detail"].as_str().unwrap();
    assert!(s.contains("constraint public.orders.qty_positive missing from the restored copy"), "{s}");
    assert!(s.contains("column public.orders.memo missing from the restored copy"), "{s}");
    assert!(!s.contains("qty_positive missing from the restored copy (CHECK ((qty > 0))) —"), "not excused: {s}");
}

/// Copies the tar `from` into `to` with transaction `xid` marked aborted in `pg_xact/0000`
/// (two bits a transaction: 01 committed, 10 aborted) — what a backup's writer can do to
/// every byte of it.
fn with_aborted(from: &Path, to: &Path, xid: u64) {
    use std::io::Read;
    let mut archive = tar::Archive::new(std::fs::File::open(from).unwrap());
    let mut out = tar::Builder::new(std::fs::File::create(to).unwrap());
    let mut flipped = false;
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let mut header = entry.header().clone();
        let path = entry.path().unwrap().into_owned();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        if path == Path::new("pg_xact/0000") {
            let (byte, shift) = ((xid / 4) as usize, (xid % 4) * 2);
            assert_eq!((data[byte] >> shift) & 0b11, 0b01, "transaction {xid} committed in the backup's own log");
            data[byte] = (data[byte] & !(0b11 << shift)) | (0b10 << shift);
            flipped = true;
        }
        out.append_data(&mut header, &path, &data[..]).unwrap();
    }
    out.finish().unwrap();
    assert!(flipped, "no pg_xact/0000 in {}", from.display());
}

/// Our own attack in the same spirit: a base backup of the primary itself whose commit
/// log says a transaction that committed before the backup was aborted. The copy then
/// does not show that transaction's row, and "in flight at the copy's point" excused its
/// absence — the copy's commit log decided what changed since. Ids below the horizon
/// drcheck's journal recorded before the backup had ended on the primary's word: the
/// row is missing, and named.
#[test]
fn a_commit_log_that_calls_a_committed_transaction_aborted_hides_no_row() {
    let lab = Lab::new(
        "create table accounts (id int primary key, balance int not null) with (autovacuum_enabled = off);
         insert into accounts select g, g from generate_series(1, 500) g",
    );
    // The row to hide, in a transaction of its own, never read since (its page carries no
    // hint that it committed: the copy asks its commit log).
    let xid: u64 = lab
        .primary
        .psql("shop", "begin; insert into accounts values (1000, 1); select pg_catalog.pg_current_xact_id(); commit")
        .parse()
        .unwrap();
    // A run samples the primary for drcheck's journal (there is nothing to restore yet).
    let config = lab.config("bb/", "[target.validators]\nas_of_grace = \"1s\"\n");
    let env = [("SHOP_PW", lab.password.clone())];
    let (out, _) = drcheck(&["--config", &config.display().to_string(), "verify", "--target", "shop"], &env, LIMIT);
    assert_eq!(out.status.code(), Some(1), "no backup yet: {}", stderr(&out));
    std::thread::sleep(Duration::from_millis(2100));
    let bb = lab.root.path().join("bb");
    lab.primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "fetch", "--checkpoint=fast"]);
    let forged = lab.root.path().join("forged.tar");
    with_aborted(&bb.join("base.tar"), &forged, xid);
    lab.s3.upload(&forged, &lab.bucket, "bb/1/base.tar");
    let (code, run, all) = lab.verify(&config, "bb/1/");
    assert_eq!(run["result"], "failed", "{run:#}\n{all}");
    assert_eq!(code, Some(1), "{all}");
    let d = detail(&run, "checksums");
    assert!(d.contains("public.accounts: id=1000 is missing from the copy"), "{d}");
}
