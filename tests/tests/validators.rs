//! End-to-end: the validators on real restores. A hard schema restores and validates
//! cleanly; deliberate corruption is caught with a precise finding.

use drcheck_e2e::scenario::Scene;
use drcheck_e2e::{PgPrimary, S3Server, TempRoot, drcheck, make_world_enterable, only_run, stderr, unique, validator};
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

/// Everything that tends to break restores and naive validators.
const HARD_SCHEMA: &str = r#"
create extension pgcrypto;
create extension hstore;
create schema billing;
create schema "Ünïcødé";
create schema "MixedCase";
create table "Ünïcødé"."Tä bel" ("Ïd" int primary key, "naMe" text not null, "quote""d" text);
insert into "Ünïcødé"."Tä bel" select g, 'nåme ' || g, 'q"' || g from generate_series(1, 300) g;
create table "MixedCase"."Orders" ("ID" int generated always as identity primary key, "Total" numeric(10,2),
                                   tags text[], attrs hstore, doc jsonb, blob bytea, at timestamptz default now());
insert into "MixedCase"."Orders" ("Total", tags, attrs, doc, blob, at)
  select g / 3.0, array['a' || g, 'b'], hstore('k', g::text), jsonb_build_object('n', g, 'l', jsonb_build_array(g, null)),
         gen_random_bytes(16), now() - g * interval '1 second'
    from generate_series(1, 2000) g;
create table billing.items (id serial primary key, price numeric not null, qty int not null,
                            total numeric generated always as (price * qty) stored);
insert into billing.items (price, qty) select g * 1.25, g % 7 from generate_series(1, 1500) g;
create table billing.logs (line text, n int);
insert into billing.logs select 'line ' || g, g from generate_series(1, 700) g;
create table billing.events (id bigint not null, at timestamptz not null, payload jsonb) partition by range (at);
create table billing.events_2025 partition of billing.events for values from ('2025-01-01') to ('2026-01-01');
create table billing.events_2026 partition of billing.events for values from ('2026-01-01') to ('2027-01-01');
insert into billing.events select g, timestamptz '2025-06-01' + g * interval '1 hour', '{"x": 1}' from generate_series(1, 9000) g;
create index on billing.events (at);
create materialized view billing.item_totals as select qty, sum(total) as total from billing.items group by qty;
create view billing.big_items as select * from billing.items where total > 100;
create function billing.touch() returns trigger language plpgsql as $$ begin new.qty := coalesce(new.qty, 0); return new; end $$;
create trigger items_touch before insert on billing.items for each row execute function billing.touch();
select lo_from_bytea(0, convert_to('a large object', 'UTF8'));
"#;

fn sh(cmd: &str) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_hard_schema_restores_and_validates_cleanly() {
    let scene = Scene::start();
    scene.primary.psql("orders", HARD_SCHEMA);
    let dump = scene.root.path().join("hard.dump");
    scene.primary.dump("orders", &dump, &[]);
    std::thread::sleep(Duration::from_millis(1100));
    scene.s3.upload(&dump, &scene.bucket, "orders/hard.dump");
    let mut spec = scene.spec();
    spec.extra_target = r#"[target.validators]
checksum_chunk_rows = 400
checksum_sample_rows = 1500
[target.as_of]
"MixedCase.Orders" = "at"
[[target.check]]
name = "items have totals"
sql = "select count(*) from billing.items where total is null"
expect = "0"
[[target.check]]
name = "same unicode rows"
sql = 'select count(*), max("naMe") from "Ünïcødé"."Tä bel"'
compare = "primary"
"#
    .into();
    let c = scene.config(&spec).display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    let run = only_run(&out);
    assert_eq!(out.status.code(), Some(0), "{run:#}\n{}", stderr(&out));
    for v in run["validators"].as_array().unwrap() {
        // The store's findings (issue 37) are notes here: no lock is required, nothing
        // was pinned before.
        if v["name"] == "immutability" || v["name"] == "pinned" {
            assert_eq!(v["status"], "skipped", "{v}");
            continue;
        }
        assert_eq!(v["status"], "passed", "{v}");
    }
    let names: Vec<&str> = run["validators"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    for expected in [
        "amcheck",
        "full_read",
        "sequences",
        "indexes",
        "schema",
        "row_counts",
        "checksums",
        "freshness",
        "check: items have totals",
        "check: same unicode rows",
    ] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
    let checksums = validator(&run, "checksums")["detail"].as_str().unwrap().to_string();
    assert!(checksums.contains("sampled"), "the 2000-row table is sampled: {checksums}");
    assert!(validator(&run, "schema")["detail"].as_str().unwrap().contains("objects match"), "{run}");
    assert!(run["rpo"]["data_lag_seconds"].is_number(), "{run}");
}

#[test]
fn corruption_against_the_primary_is_caught_precisely() {
    let scene = Scene::start_tracking();
    // A backup that lacks a row the primary holds unchanged (an old order) and holds
    // another value for one (customer 250); after it, the primary changes customer 300
    // (its own change: counted, not failed) and gains an index the backup lacks.
    let bad = scene.root.path().join("bad.dump");
    scene.primary.tampered_dump(
        "orders",
        "delete from orders where id = 17; update customers set name = 'changed' where id = 250",
        &bad,
    );
    std::thread::sleep(Duration::from_millis(1100));
    scene.s3.upload(&bad, &scene.bucket, "orders/orders-2.dump");
    scene.primary.psql("orders", "update customers set name = 'renamed' where id = 300");
    scene.primary.psql("orders", "create index orders_total_idx on orders (total)");
    let mut spec = scene.spec();
    spec.extra_target = r#"[target.as_of]
"public.orders" = "placed_at"
[[target.check]]
name = "customer count"
sql = "select count(*) from customers"
expect = "499"
"#
    .into();
    let c = scene.config(&spec).display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["result"], "failed");
    let detail = |n: &str| {
        let v = validator(&run, n);
        assert_eq!(v["status"], "failed", "{v}");
        v["detail"].as_str().unwrap().to_string()
    };
    let counts = detail("row_counts");
    assert!(
        counts.contains("public.orders: the primary holds 5000 rows unchanged since the copy's point, the copy 4999"),
        "{counts}"
    );
    let sums = detail("checksums");
    assert!(sums.contains("public.customers: id=250 differs"), "{sums}");
    assert!(sums.contains("public.orders: id=17 is missing from the copy"), "{sums}");
    assert!(!sums.contains("id=300"), "the primary's own change since is not the backup's: {sums}");
    assert!(sums.contains("1 rows changed on the primary since the copy's point"), "{sums}");
    assert!(!sums.contains("rows only the copy holds"), "{sums}");
    // The index made on the primary after the dump: its catalog row says so (issue 46) —
    // a note, not a difference, without any DDL log.
    let schema = validator(&run, "schema");
    assert_eq!(schema["status"], "passed", "{schema}");
    let schema = schema["detail"].as_str().unwrap();
    assert!(
        schema.contains("index public.orders.orders_total_idx missing from the restored copy")
            && schema.contains("made or altered on the primary since the copy's point (its catalog)"),
        "{schema}"
    );
    let custom = detail("check: customer count");
    assert!(custom.contains("expected \"499\", got \"500\""), "{custom}");
    // Self-checks are unaffected.
    assert_eq!(validator(&run, "amcheck")["status"], "passed");
    // Issue 34: the run's own log line says why it failed, check by check.
    let log = stderr(&out);
    let line = log.lines().find(|l| l.contains("verification finished")).unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains("WARN") && line.contains("result=\"failed\""), "{line}");
    for named in ["row_counts failed: ", "checksums failed: ", "check: customer count failed"] {
        assert!(line.contains(named), "{named:?} not in {line}");
    }
}

#[test]
fn a_sequence_behind_its_column_is_caught() {
    let scene = Scene::start();
    scene.primary.psql("orders", "select setval('orders_id_seq', 10)");
    let dump = scene.root.path().join("seq.dump");
    scene.primary.dump("orders", &dump, &[]);
    std::thread::sleep(Duration::from_millis(1100));
    scene.s3.upload(&dump, &scene.bucket, "orders/seq.dump");
    let c = scene.config(&scene.spec()).display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let run = only_run(&out);
    let v = validator(&run, "sequences");
    assert_eq!(v["status"], "failed", "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("public.orders_id_seq is at 10 (used), but max(public.orders.id) is 5000"),
        "{v}"
    );
}

#[test]
fn an_overwritten_page_in_a_physical_backup_is_caught() {
    let root = TempRoot::new();
    let primary = PgPrimary::start(&root);
    let s3 = S3Server::start(&root);
    let bucket = unique("pg");
    s3.make_bucket(&bucket);
    primary.psql("postgres", "create database orders");
    primary.psql("orders", "create table t (id int primary key, v text not null)");
    primary.psql("orders", "insert into t select g, repeat(md5(g::text), 4) from generate_series(1, 20000) g");
    primary.psql("orders", "checkpoint");
    let file = primary.psql("orders", "select pg_relation_filepath('t')");
    let bb = root.path().join("bb");
    primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "fetch", "--checkpoint=fast"]);
    // Unpack, overwrite the header of the table's second page, pack again.
    let unpacked = root.path().join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    sh(&format!("tar -C {} -xf {}", unpacked.display(), bb.join("base.tar").display()));
    let mut bytes = std::fs::read(unpacked.join(&file)).unwrap();
    assert!(bytes.len() > 3 * 8192, "the table spans several pages");
    bytes[8192..8192 + 64].fill(0xA5);
    std::fs::write(unpacked.join(&file), bytes).unwrap();
    let corrupt = root.path().join("base.tar");
    sh(&format!("tar -C {} -cf {} .", unpacked.display(), corrupt.display()));
    s3.upload(&corrupt, &bucket, "phys/b1/base.tar");

    let scratch = root.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    make_world_enterable(&scratch);
    let config = root.path().join("drcheck.toml");
    std::fs::write(
        &config,
        format!(
            "[state]\nurl = \"sqlite://{r}/h.db\"\n[sandbox]\nscratch_dir = \"{s}\"\n[storage.s3]\nkind = \"s3\"\nbucket = \"{bucket}\"\n\
             endpoint = \"{e}\"\npath_style = true\n[[target]]\nname = \"orders\"\nstorage = \"s3\"\nprefix = \"phys/\"\n\
             primary = \"postgres://nobody@127.0.0.1:1/orders\"\nrto = \"10m\"\nrpo = \"1h\"\n",
            r = root.path().display(),
            s = scratch.display(),
            e = s3.endpoint()
        ),
    )
    .unwrap();
    // Named: a directory with base.tar alone, written seconds ago, is otherwise taken
    // for an upload still under way.
    let c = config.display().to_string();
    let (out, _) =
        drcheck(&["--config", &c, "verify", "--target", "orders", "--backup", "phys/b1/", "--json"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}\n{}", drcheck_e2e::stdout(&out), stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["backup"]["format"], "physical");
    // Corruption outranks the primary being unreachable: failed (exit 1, above), and
    // the report says the comparisons did not run.
    assert!(run["degraded"].as_str().is_some_and(|d| d.contains("could not run")), "{run}");
    for name in ["amcheck", "full_read"] {
        let v = validator(&run, name);
        assert_eq!(v["status"], "failed", "{v}");
        assert!(v["detail"].as_str().unwrap().contains("invalid page in block 1"), "{v}");
    }
    // full_read names the table it could not read, and only that one.
    let detail = validator(&run, "full_read")["detail"].as_str().unwrap().to_string();
    assert!(detail.contains("in 1 of ") && detail.contains("public.t: "), "{detail}");
}

/// `money` renders per the session's `lc_monetary`: a primary whose database sets a German
/// money format must still hash like the restored copy (C). Needs the `de_DE.UTF-8`
/// locale, which `scripts/setup.sh` generates.
#[test]
fn money_hashes_alike_whatever_the_primarys_lc_monetary() {
    let have = Command::new("locale").arg("-a").output().unwrap();
    assert!(
        String::from_utf8_lossy(&have.stdout).to_lowercase().contains("de_de.utf8"),
        "the de_DE.UTF-8 locale is missing: run scripts/setup.sh"
    );
    let scene = Scene::start();
    scene.primary.psql(
        "orders",
        "create table prices (id int primary key, amount money not null);
         insert into prices select g, (g * 1234.5)::numeric::money from generate_series(1, 300) g;",
    );
    let dump = scene.root.path().join("money.dump");
    scene.primary.dump("orders", &dump, &[]);
    // Set after the dump: only the primary's sessions see it.
    scene.primary.psql("postgres", "alter database orders set lc_monetary = 'de_DE.UTF-8'");
    let shown = scene.primary.psql("orders", "select 1234.5::numeric::money::text");
    assert!(shown.contains('€') || shown.contains("1.234,50"), "the primary does not render German money: {shown}");
    std::thread::sleep(Duration::from_millis(1100));
    scene.s3.upload(&dump, &scene.bucket, "orders/money.dump");
    let c = scene.config(&scene.spec()).display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    let run = only_run(&out);
    let sums = validator(&run, "checksums");
    assert_eq!(sums["status"], "passed", "{sums}\n{}", stderr(&out));
    // customers, orders, "Sales"."Invoices" and prices: 500 + 5000 + 1000 + 300 rows.
    assert_eq!(sums["measurements"]["covered_rows"], 6800.0, "{sums}");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// Every column counts in the hash, whatever the columns are called or typed: a table
/// with a column named like the query's row alias (`t`) and one hashed by text (a json
/// column has no hash function) each get one value changed on the primary after the
/// backup; `checksums` names both.
#[test]
fn checksums_cover_every_column_by_value_or_by_text() {
    let scene = Scene::start_tracking();
    scene.primary.psql(
        "orders",
        "create table alias_clash (id int primary key, t text, v int);
         insert into alias_clash select g, 'same', g from generate_series(1, 200) g;
         create table by_text (id int primary key, doc json, n int);
         insert into by_text select g, json_build_object('g', g), g from generate_series(1, 200) g;",
    );
    // The backup holds other values than the primary, which never changed them (since a
    // second before it: the dump's header time has whole seconds).
    std::thread::sleep(Duration::from_millis(1100));
    let dump = scene.root.path().join("cols.dump");
    scene.primary.tampered_dump(
        "orders",
        "update alias_clash set v = -1 where id = 7; update by_text set n = -1 where id = 9",
        &dump,
    );
    std::thread::sleep(Duration::from_millis(1100));
    scene.s3.upload(&dump, &scene.bucket, "orders/cols.dump");
    let c = scene.config(&scene.spec()).display().to_string();
    let (out, _) = drcheck(&["--config", &c, "verify", "--json"], &scene.env(), LIMIT);
    let run = only_run(&out);
    let sums = validator(&run, "checksums");
    assert_eq!(sums["status"], "failed", "{sums}\n{}", stderr(&out));
    let detail = sums["detail"].as_str().unwrap();
    assert!(
        detail.contains("public.alias_clash: id=7 differs") && detail.contains("public.by_text: id=9 differs"),
        "{detail}"
    );
    assert!(detail.starts_with("2 of "), "{detail}");
}

/// Issue 33: `checksums` cannot be balanced. A table's checksum is the sum of each row's
/// hash; were a row's hash linear in its columns' hashes (as the record hash alone is),
/// two rows exchanging one column's values would keep the sum. Random exchanges — one
/// column's values between two rows, of every column type, and two columns' values
/// within a row — each change drcheck's sum, while the plain record hash is shown to be
/// balanced by every exchange between rows (so the property is not vacuous).
#[test]
fn no_exchange_of_values_balances_the_checksum() {
    let root = TempRoot::new();
    let primary = PgPrimary::start(&root);
    primary.psql(
        "postgres",
        "create table t (id int primary key, a int, b int, c numeric(12,2), d text);
         insert into t select g, (g * 7919) % 1000, (g * 104729) % 1000, ((g * 31) % 977) / 4.0, md5(g::text)
           from generate_series(1, 400) g",
    );
    let a = |g: u64| (g * 7919) % 1000;
    let b = |g: u64| (g * 104729) % 1000;
    let c = |g: u64| (g * 31) % 977;
    let ours = drcheck_validators::record_hash_sql();
    let linear = "pg_catalog.hash_record_extended(drcheck_row.*, 0::pg_catalog.int8)";
    // The record hash combines its columns' hashes linearly modulo 2^64: so does its sum.
    // drcheck's sum is compared modulo 2^64 too — a stronger claim than of the whole sum,
    // and one the linear hash alone fails for every exchange between rows.
    let m = "18446744073709551616::numeric";
    let sums = format!(
        "select ((pg_catalog.sum({ours}) % {m} + {m}) % {m})::text || '|' \
         || ((pg_catalog.sum({linear}) % {m} + {m}) % {m})::text from public.t drcheck_row;\n"
    );
    let mut seed: u64 =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n + 1
    };
    let mut script = format!("\\set ON_ERROR_STOP on\n{sums}");
    let mut swaps = Vec::new();
    while swaps.len() < 300 {
        let (x, y) = (next(400), next(400));
        let (col, within) = match next(5) {
            1 => ("a", false),
            2 => ("b", false),
            3 => ("c", false),
            4 => ("d", false),
            _ => ("a", true),
        };
        let same = match (col, within) {
            (_, true) => a(x) == b(x),
            ("a", _) => x == y || a(x) == a(y),
            ("b", _) => x == y || b(x) == b(y),
            ("c", _) => x == y || c(x) == c(y),
            _ => x == y,
        };
        if same {
            continue;
        }
        let update = if within {
            format!("update t set a = b, b = a where id = {x};")
        } else {
            format!(
                "update t set {col} = case id when {x} then (select {col} from t where id = {y}) \
                 else (select {col} from t where id = {x}) end where id in ({x}, {y});"
            )
        };
        script.push_str(&format!("begin;\n{update}\n{sums}rollback;\n"));
        swaps.push((update, within));
    }
    let file = root.path().join("swaps.sql");
    std::fs::write(&file, script).unwrap();
    let out = primary.run_script("postgres", &file);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<(&str, &str)> = text.lines().filter_map(|l| l.split_once('|')).collect();
    assert_eq!(lines.len(), swaps.len() + 1, "{text}");
    let (base_ours, base_linear) = lines[0];
    let mut balanced_linear = 0;
    for ((update, within), (ours, linear)) in swaps.iter().zip(&lines[1..]) {
        assert_ne!(*ours, base_ours, "the exchange `{update}` keeps drcheck's checksum");
        if !within {
            assert_eq!(*linear, base_linear, "the linear hash is not balanced by `{update}`: the test shows nothing");
            balanced_linear += 1;
        }
    }
    assert!(balanced_linear > 100, "{balanced_linear}");
}

/// Issue 33: every database of a physical backup. The primary has `orders`, `billing`
/// and `ledger`; the backup holds `billing` made unconnectable (as it was when the
/// backup ran; the primary opens it again since) and `ledger` without its directory.
/// `databases` fails naming both; the target's own database is still validated.
#[test]
fn a_physical_backup_is_validated_on_every_database() {
    let root = TempRoot::new();
    let primary = PgPrimary::start(&root);
    let s3 = S3Server::start(&root);
    let bucket = unique("pg");
    s3.make_bucket(&bucket);
    let password = unique("pw");
    primary.psql("postgres", &format!("create role verifier login password '{password}'"));
    primary.psql("postgres", "grant pg_read_all_data to verifier");
    for db in ["orders", "billing", "ledger"] {
        primary.psql("postgres", &format!("create database {db}"));
        primary.psql(db, "create table t (id int primary key); insert into t select generate_series(1, 100)");
    }
    let ledger = primary.psql("postgres", "select oid from pg_database where datname = 'ledger'");
    primary.psql("postgres", "alter database billing allow_connections false");
    let bb = root.path().join("bb");
    primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "fetch", "--checkpoint=fast"]);
    primary.psql("postgres", "alter database billing allow_connections true");
    let unpacked = root.path().join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    sh(&format!("tar -C {} -xf {}", unpacked.display(), bb.join("base.tar").display()));
    std::fs::remove_dir_all(unpacked.join("base").join(&ledger)).unwrap();
    let tampered = root.path().join("base.tar");
    sh(&format!("tar -C {} -cf {} .", unpacked.display(), tampered.display()));
    s3.upload(&tampered, &bucket, "phys/b1/base.tar");

    let scratch = root.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    make_world_enterable(&scratch);
    let config = root.path().join("drcheck.toml");
    std::fs::write(
        &config,
        format!(
            "[state]\nurl = \"sqlite://{r}/h.db\"\n[sandbox]\nscratch_dir = \"{s}\"\n[storage.s3]\nkind = \"s3\"\nbucket = \"{bucket}\"\n\
             endpoint = \"{e}\"\npath_style = true\n[[target]]\nname = \"orders\"\nstorage = \"s3\"\nprefix = \"phys/\"\n\
             primary = \"{p}\"\nrto = \"10m\"\nrpo = \"3650d\"\n",
            r = root.path().display(),
            s = scratch.display(),
            e = s3.endpoint(),
            p = primary.url("verifier", &password, "orders"),
        ),
    )
    .unwrap();
    let c = config.display().to_string();
    let (out, _) =
        drcheck(&["--config", &c, "verify", "--target", "orders", "--backup", "phys/b1/", "--json"], &[], LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}\n{}", drcheck_e2e::stdout(&out), stderr(&out));
    let run = only_run(&out);
    assert_eq!(run["backup"]["format"], "physical");
    let d = validator(&run, "databases");
    assert_eq!(d["status"], "failed", "{run}");
    let detail = d["detail"].as_str().unwrap();
    assert!(detail.contains("\"billing\" is in the backup but takes no connections"), "{detail}");
    assert!(detail.contains("\"ledger\" is in the backup but cannot be opened"), "{detail}");
    assert_eq!(validator(&run, "checksums")["status"], "passed", "orders itself is intact: {run}");
}

/// Issue 50: `large_objects` read every page of the primary's `pg_largeobject` on every
/// run, in one statement, under a read budget too (its range size came from the
/// catalog's `reltuples`, -1 until analyzed). Now it compares the rotation's slice of its
/// OID ranges, dealt evenly: what the primary's statistics count it reading of
/// `pg_largeobject` stays near its share — the large objects' size over the slices.
#[test]
fn large_objects_read_at_most_their_share_of_the_budget() {
    let scene = Scene::start();
    // 96 objects of 256 KiB of incompressible bytes: 24 MiB.
    scene.primary.psql(
        "orders",
        "select lo_from_bytea(0, (select string_agg(decode(md5(g::text || random()::text || o::text), 'hex'), ''::bytea) \
           from generate_series(1, 16384) g)) from generate_series(1, 96) o",
    );
    let dump = scene.root.path().join("lo.dump");
    scene.primary.dump("orders", &dump, &[]);
    scene.s3.upload(&dump, &scene.bucket, "orders/orders-lo.dump");
    let size: u64 = scene.primary.psql("orders", "select pg_database_size(current_database())").parse().unwrap();
    let lo_blocks: f64 =
        scene.primary.psql("orders", "select pg_relation_size('pg_largeobject') / 8192").parse().unwrap();
    let mut spec = scene.spec();
    spec.extra_target = format!("primary_read_budget = \"{}\"\n", size / 4 + 1);
    let config = scene.config(&spec).display().to_string();
    let blocks = || -> f64 {
        scene
            .primary
            .psql(
                "orders",
                "select heap_blks_read + heap_blks_hit from pg_statio_sys_tables where relname = 'pg_largeobject'",
            )
            .parse()
            .unwrap()
    };
    // What this test's own reads (and the dump's) added is flushed as their sessions end.
    std::thread::sleep(Duration::from_millis(1500));
    let before = blocks();
    let (out, _) = drcheck(&["--config", &config, "verify", "--json"], &scene.env(), LIMIT);
    let run = only_run(&out);
    assert_eq!(out.status.code(), Some(0), "{run:#}\n{}", stderr(&out));
    // drcheck's connections are gone: their statistics are flushed as they exit.
    std::thread::sleep(Duration::from_millis(1500));
    let read = blocks() - before;
    let lo = validator(&run, "large_objects");
    assert_eq!(lo["status"], "passed", "{lo}");
    let detail = lo["detail"].as_str().unwrap();
    let slices: f64 = detail
        .split("slice ")
        .nth(1)
        .and_then(|s| s.split(" of ").nth(1))
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the rotation is said: {detail}"));
    assert!(slices >= 4.0, "{detail}");
    assert!(detail.contains("OID ranges compared this run"), "{detail}");
    // Blocks of pg_largeobject the primary's statistics count it reading (before this
    // fix: every block, once per range — 16,384 of 4,096 here).
    let share = lo_blocks / slices;
    eprintln!("large_objects read {read} of {lo_blocks} blocks of the primary's pg_largeobject (its share {share})");
    assert!(read > 0.0, "it compared some: {detail}");
    assert!(read <= share * 1.5, "read {read} of {lo_blocks} blocks, its share {share}: {detail}");
    let said = lo["measurements"]["primary_read_bytes"].as_f64().unwrap();
    assert!(said > 0.0 && said <= lo_blocks * 8192.0 / slices * 1.5, "{said}: {lo}");
}

/// Issue 36: `primary_read_budget` — when the primary's database is larger than the
/// budget, each run compares one slice of every table's ranges, the slice never compared
/// or compared longest ago; within as many runs as there are slices every table was
/// compared, and the next run says when the oldest slice was.
#[test]
fn a_read_budget_rotates_the_comparisons_and_covers_every_table_in_its_runs() {
    let scene = Scene::start();
    let size: u64 = scene.primary.psql("orders", "select pg_database_size(current_database())").parse().unwrap();
    // About a third of the database per run.
    let budget = size / 3 + 1;
    let mut spec = scene.spec();
    spec.extra_target = format!("primary_read_budget = \"{budget}\"\n");
    let config = scene.config(&spec).display().to_string();
    let run = || {
        let (out, _) = drcheck(&["--config", &config, "verify", "--json"], &scene.env(), LIMIT);
        let run = only_run(&out);
        assert_eq!(out.status.code(), Some(0), "{run}\n{}", stderr(&out));
        run
    };
    let first = run();
    let detail = |r: &serde_json::Value| validator(r, "checksums")["detail"].as_str().unwrap().to_string();
    let d = detail(&first);
    let slices: u32 = d
        .split(" of ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the rotation is said: {d}"));
    assert!(slices >= 3 && d.contains("slice 1 of") && d.contains("the oldest slice not compared yet"), "{d}");
    let compared =
        |r: &serde_json::Value| validator(r, "checksums")["measurements"]["covered_tables"].as_f64().unwrap_or(0.0);
    let mut total = compared(&first);
    for k in 2..=slices {
        let r = run();
        let d = detail(&r);
        assert!(d.contains(&format!("slice {k} of {slices}")), "run {k}: {d}");
        total += compared(&r);
    }
    assert_eq!(total, 3.0, "every table compared once over {slices} runs");
    let again = run();
    let d = detail(&again);
    assert!(d.contains(&format!("of {slices} this run")) && d.contains("the oldest slice last compared 20"), "{d}");
}
