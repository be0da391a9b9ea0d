//! End-to-end: honest backups of ordinary databases get true verdicts. One fixture has
//! what real schemas have — every type family (enums and what contains them, domains,
//! composites, arrays, ranges, multiranges), row-level security with a tenant policy, an
//! extension left at an older version, an unlogged table, a sequence set with
//! `is_called = false`, large objects referenced from a table, a `timestamp` `as_of`
//! column in a database whose time zone is America/New_York, and rows deleted on the
//! primary after the backup. Its dumps (custom, `-n public` plain and custom) and its base
//! backup pass; one planted defect per comparison fails naming it.

use drcheck_e2e::scenario::Scene;
use drcheck_e2e::{drcheck, only_run, stderr, validator};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(240);

/// The fixture, created in `orders` next to the scene's sample data.
const FIXTURE: &str = r#"
create type mood as enum ('sad', 'ok', 'happy');
create domain posint as int check (value > 0);
create domain mood_d as mood;
create type pair as (m mood, n int);
create type moodrange as range (subtype = mood);
create table fam_base (id int primary key, n int, t text, b bytea, ts timestamptz);
create table fam_enum (id int primary key, m mood, ms mood[]);
create table fam_domain (id int primary key, n posint, md mood_d);
create table fam_composite (id int primary key, p pair, ps pair[]);
create table fam_range (id int primary key, r moodrange, ir int4range, tr tstzrange);
create table fam_multirange (id int primary key, mr moodmultirange, imr int4multirange);
insert into fam_base select g, g, 't' || g, '\x0102', '2025-01-01'::timestamptz + g * interval '1 hour' from generate_series(1, 300) g;
insert into fam_enum select g, (array['sad','ok','happy']::mood[])[1 + g % 3], array['ok', 'happy']::mood[] from generate_series(1, 300) g;
insert into fam_domain select g, g, 'happy' from generate_series(1, 300) g;
insert into fam_composite select g, row('ok', g)::pair, array[row('sad', 1)::pair, row('happy', g)::pair] from generate_series(1, 300) g;
insert into fam_range select g, moodrange('sad', 'happy'), int4range(g, g + 10), tstzrange('2025-01-01', '2025-02-01') from generate_series(1, 300) g;
insert into fam_multirange select g, moodmultirange(moodrange('sad', 'ok')), int4multirange(int4range(1, g + 1)) from generate_series(1, 300) g;

create table tenant_docs (id int primary key, tenant text not null, body text);
insert into tenant_docs select g, 'tenant' || (g % 4), 'doc ' || g from generate_series(1, 40) g;
alter table tenant_docs enable row level security;
create policy tenant_isolation on tenant_docs using (tenant = current_setting('app.tenant', true));

create extension pg_trgm version '1.5';

create unlogged table scratchpad (id int primary key, note text);
insert into scratchpad select g, 'note ' || g from generate_series(1, 20) g;

create table tickets (id int primary key);
create sequence ticket_no;
select setval('ticket_no', 1000, false);
insert into tickets select g from generate_series(1, 999) g;

create table docs (id int primary key, file oid not null);
insert into docs select g, lo_from_bytea(0, convert_to(repeat('document ' || g || ' ', 500), 'UTF8')) from generate_series(1, 6) g;
"#;

/// Rows of a `timestamp` column written in New York local time a minute before the
/// dump (its own session's zone is the database's).
const LOCAL_TIME: &str = r#"
create table visits (id int primary key, at timestamp not null);
insert into visits select g, localtimestamp - interval '1 minute' from generate_series(1, 10) g;
"#;

const AS_OF: &str = "[target.as_of]\n\"public.visits\" = \"at\"\n";

/// The scene with the fixture: the verifier may read through row-level security; the
/// primary tracks commit timestamps, so what it changes after a dump is told apart.
fn fixture() -> Scene {
    let scene = Scene::start_tracking();
    scene.primary.psql("postgres", "alter database orders set timezone = 'America/New_York'");
    scene.primary.psql("orders", FIXTURE);
    scene.primary.psql("orders", LOCAL_TIME);
    scene.primary.psql("postgres", "alter role verifier bypassrls");
    // Committed a second before the dumps' start (their headers have whole seconds).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    scene
}

/// Dumps `orders` with `args` (after `-Fc`) and uploads it as `key`.
fn upload_dump(scene: &Scene, key: &str, args: &[&str]) {
    let path = scene.root.path().join(key.replace('/', "_"));
    scene.primary.dump("orders", &path, args);
    scene.s3.upload(&path, &scene.bucket, key);
}

fn verify(scene: &Scene, key: &str, extra_target: &str) -> (Option<i32>, serde_json::Value, String) {
    let mut spec = scene.spec();
    spec.extra_target = extra_target.to_string();
    let c = scene.config(&spec).display().to_string();
    let (out, _) =
        drcheck(&["--config", &c, "verify", "--target", "orders", "--backup", key, "--json"], &scene.env(), LIMIT);
    let run = only_run(&out);
    let all = format!("{run:#}\n{}", stderr(&out));
    (out.status.code(), run, all)
}

fn detail(run: &serde_json::Value, name: &str) -> String {
    validator(run, name)["detail"].as_str().unwrap_or_default().to_string()
}

/// The whole fixture in a custom dump, with rows deleted on the primary after it: every
/// validator passes, saying what it could not compare and why.
#[test]
fn an_ordinary_database_passes_every_validator() {
    let scene = fixture();
    upload_dump(&scene, "orders/fixture.dump", &[]);
    scene.primary.psql("orders", "delete from visits where id <= 3");
    let (code, run, all) = verify(&scene, "orders/fixture.dump", AS_OF);
    for name in [
        "amcheck",
        "full_read",
        "sequences",
        "indexes",
        "schema",
        "row_counts",
        "checksums",
        "large_objects",
        "freshness",
    ] {
        assert_eq!(validator(&run, name)["status"], "passed", "{name}: {all}");
    }
    assert_eq!(code, Some(0), "{all}");
    // Every type family hashed alike (enums by text), every table covered.
    let sums = validator(&run, "checksums");
    assert_eq!(
        sums["measurements"]["covered_tables"].as_f64().unwrap() as usize,
        // customers, orders, Invoices, 6 families, tenant_docs, scratchpad, tickets, docs,
        // visits (its rows the primary deleted since: counted, the rest compared)
        14,
        "{all}"
    );
    assert_eq!(sums["measurements"]["rows_deleted_since"], 3.0, "{all}");
    let sums = detail(&run, "checksums");
    assert!(sums.contains("3 rows only the copy holds") && sums.contains("public.visits: 3"), "{all}");
    assert!(!sums.contains("rows changed on the primary since"), "none changed: {all}");
    assert!(detail(&run, "row_counts").contains("as of the copy's point"), "{all}");
    // The extension is there; its version differs and is said so.
    let schema = detail(&run, "schema");
    assert!(schema.contains("pg_trgm") && schema.contains("1.5") && schema.contains("1.6"), "{schema}");
    // setval(…, 1000, false): the next value is 1000, which no row has (passed above).
    // Large objects: 6 objects and their pages; the docs column resolves.
    let lo = validator(&run, "large_objects");
    assert_eq!(lo["measurements"]["covered_large_objects"], 6.0, "{lo}");
    assert_eq!(lo["measurements"]["covered_reference_columns"], 1.0, "{lo}");
    // New York local time, read as such: the newest visit is a minute before the dump,
    // not five hours.
    let fresh = validator(&run, "freshness");
    let behind = fresh["measurements"]["newest_row_behind_backup_seconds"].as_f64().unwrap_or(f64::MAX);
    assert!(behind < 600.0, "the newest visit is {behind} s before the backup: {fresh}");
}

/// Partial dumps: PostgreSQL 15's `pg_dump -n public` writes `CREATE SCHEMA public`, in
/// a plain script and in a custom archive; both restore and pass. With `dump_scope` the
/// comparisons keep to the schema dumped, and the large objects such a dump leaves out
/// by design are not compared (nothing refers to them here).
#[test]
fn a_dump_of_the_public_schema_restores_and_compares_its_scope() {
    let scene = fixture();
    scene
        .primary
        .psql("orders", "select lo_unlink(file) from docs; drop table docs; select lo_from_bytea(0, 'unreferenced')");
    upload_dump(&scene, "orders/public.sql", &["-Fp", "-n", "public"]);
    upload_dump(&scene, "orders/public.dump", &["-n", "public"]);
    for key in ["orders/public.sql", "orders/public.dump"] {
        let (code, run, all) = verify(&scene, key, &format!("dump_scope = [\"public\"]\n{AS_OF}"));
        assert_eq!(run["result"], "passed", "{key}: {all}");
        assert_eq!(code, Some(0), "{key}: {all}");
        for name in ["schema", "row_counts", "checksums"] {
            assert_eq!(validator(&run, name)["status"], "passed", "{key} {name}: {all}");
        }
        // "Sales"."Invoices" is outside the scope: not compared, not failed.
        assert!(detail(&run, "schema").contains("within the dump's scope (public)"), "{all}");
        assert_eq!(validator(&run, "checksums")["measurements"]["covered_tables"], 12.0, "{all}");
        let lo = validator(&run, "large_objects");
        assert_eq!(lo["status"], "skipped", "{key}: {lo}");
        assert!(detail(&run, "large_objects").contains("a partial dump (dump_scope) leaves them out"), "{lo}");
    }
}

/// One planted defect per comparison, each named: a changed enum value and a lost row
/// (checksums, row_counts) in a backup of a primary that changed neither, and a `-t` dump
/// that left the large objects behind (large_objects).
#[test]
fn planted_defects_in_the_fixture_are_named() {
    let scene = fixture();
    let bad = scene.root.path().join("bad.dump");
    scene.primary.tampered_dump(
        "orders",
        "update fam_enum set m = 'sad' where id = 2; delete from visits where id = 5",
        &bad,
    );
    scene.s3.upload(&bad, &scene.bucket, "orders/bad.dump");
    let (code, run, all) = verify(&scene, "orders/bad.dump", AS_OF);
    assert_eq!(code, Some(1), "{all}");
    assert_eq!(validator(&run, "checksums")["status"], "failed", "{all}");
    let sums = detail(&run, "checksums");
    assert!(
        sums.contains("public.fam_enum: id=2 differs") && sums.contains("public.visits: id=5 is missing"),
        "{sums}"
    );
    assert_eq!(validator(&run, "row_counts")["status"], "failed", "{all}");
    assert!(
        detail(&run, "row_counts")
            .contains("public.visits: the primary holds 10 rows unchanged since the copy's point, the copy 9"),
        "{all}"
    );

    upload_dump(&scene, "orders/docs-only.dump", &["-t", "docs"]);
    let (code, run, all) = verify(&scene, "orders/docs-only.dump", "");
    assert_eq!(code, Some(1), "{all}");
    let lo = detail(&run, "large_objects");
    assert_eq!(validator(&run, "large_objects")["status"], "failed", "{all}");
    assert!(lo.contains("6 large objects the primary held unchanged at the copy's point are missing"), "{lo}");
    assert!(lo.contains("public.docs.file: 6 of 6 large objects it names are missing"), "{lo}");
}

/// Without BYPASSRLS the primary would show drcheck a filtered table: the comparison
/// raises instead (row_security = off), and the run is an error (exit 3) naming the
/// table, the policy and the grant — not a backup blamed for rows it has.
#[test]
fn row_level_security_the_verifier_cannot_bypass_is_an_error_naming_the_policy() {
    let scene = fixture();
    scene.primary.psql("postgres", "alter role verifier nobypassrls");
    upload_dump(&scene, "orders/fixture.dump", &[]);
    let (code, run, all) = verify(&scene, "orders/fixture.dump", "");
    assert_eq!(code, Some(3), "{all}");
    for name in ["row_counts", "checksums"] {
        assert_eq!(validator(&run, name)["status"], "error", "{name}: {all}");
        let d = detail(&run, name);
        assert!(d.contains("public.tenant_docs") && d.contains("tenant_isolation") && d.contains("BYPASSRLS"), "{d}");
    }
}

/// A base backup of the fixture: the unlogged table's data is not in it by design — it
/// is listed as not covered, never failed; everything else compares.
#[test]
fn a_base_backup_leaves_unlogged_tables_uncovered_not_failed() {
    let scene = fixture();
    scene.primary.psql("orders", "checkpoint");
    let bb = scene.root.path().join("bb");
    scene.primary.tool("pg_basebackup", &["-D", &bb.display().to_string(), "-Ft", "-X", "fetch", "--checkpoint=fast"]);
    scene.s3.upload(&bb.join("base.tar"), &scene.bucket, "orders/bb1/base.tar");
    let (code, run, all) = verify(&scene, "orders/bb1/", "");
    assert_eq!(run["backup"]["format"], "physical", "{all}");
    for name in ["row_counts", "checksums"] {
        assert_eq!(validator(&run, name)["status"], "passed", "{name}: {all}");
        let d = detail(&run, name);
        assert!(d.contains("unlogged tables not covered") && d.contains("public.scratchpad"), "{name}: {d}");
    }
    assert_eq!(code, Some(0), "{all}");
}
