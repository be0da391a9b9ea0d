//! Forged verdicts: a dump that changes one balance (100.00 → 999999.00) and dresses
//! the change up so that the restored copy hashes like the primary. Each attack is
//! first shown to forge the hash on an unprotected cluster (and the bare tampering to
//! be caught); drcheck then fails the backup.

use drcheck_e2e::attack::{Bank, QUALIFIED_HASH, UNQUALIFIED_HASH, unprotected};
use drcheck_e2e::hostile::{Lab, assert_contained, assert_ran};
use drcheck_e2e::validator;

/// The tampered dump alone: caught by `checksums`, naming the table — so any attack
/// below that passes would be a forgery, not a blind spot.
fn bare_tampering_is_caught(lab: &Lab, bank: &Bank, config: &std::path::Path) {
    lab.put("bare.sql", bank.tampered("").as_bytes());
    let (code, run, all) = lab.verify(config, "bare.sql");
    assert_ran(&run, code, 1, &all);
    let c = validator(&run, "checksums");
    assert_eq!(c["status"], "failed", "{run}");
    assert!(c["detail"].as_str().unwrap().contains("public.accounts"), "{c}");
}

/// An overload of the hash function in `pg_catalog`, taking the table's own row type
/// and a `bigint` — an exact match for drcheck's schema-qualified call, so it wins
/// resolution even there. The `catalog` check names it, and nothing else runs.
#[test]
fn a_hash_overload_in_pg_catalog_fails_the_backup() {
    let lab = Lab::new();
    let bank = Bank::start(&lab, "");
    let overload = "CREATE FUNCTION pg_catalog.hash_record_extended(r public.accounts, s bigint) RETURNS bigint \
        LANGUAGE sql IMMUTABLE AS $$ SELECT pg_catalog.hash_record_extended(ROW(r.id, CASE WHEN r.balance = 999999.00 \
        THEN 100.00 ELSE r.balance END), s) $$;";
    let evil = bank.tampered(overload);
    // Unprotected, the overload forges even the qualified hash.
    let copy = unprotected(&lab, &evil);
    assert_eq!(Bank::hash(&copy, QUALIFIED_HASH), Bank::hash(&bank.primary, QUALIFIED_HASH), "the forgery works");

    let config = lab.config("", &bank.target());
    bare_tampering_is_caught(&lab, &bank, &config);
    lab.put("evil.sql", evil.as_bytes());
    let (code, run, all) = lab.verify(&config, "evil.sql");
    assert_ran(&run, code, 1, &all);
    assert_contained(&run);
    let catalog = validator(&run, "catalog");
    assert_eq!(catalog["status"], "failed", "{run}");
    let detail = catalog["detail"].as_str().unwrap();
    assert!(detail.contains("hash_record_extended(public.accounts,bigint) added to a system schema"), "{detail}");
    assert_eq!(validator(&run, "checksums")["status"], "skipped", "nothing runs on a forged catalog: {run}");
}

/// The same forgery in a schema of its own (the primary has that schema and function
/// too, so the schema comparison matches), put first on the restored database's search
/// path with `ALTER DATABASE … SET`: drcheck's sessions pin their path and qualify their
/// calls, so the tampered row is caught.
#[test]
fn an_overload_on_the_databases_search_path_changes_nothing() {
    let lab = Lab::new();
    let overload = "create schema evil; create function evil.hash_record_extended(r public.accounts, s integer) \
        returns bigint language sql immutable as $$ select pg_catalog.hash_record_extended(row(r.id, case when \
        r.balance = 999999.00 then 100.00 else r.balance end), s) $$";
    let bank = Bank::start(&lab, overload);
    let evil = bank.tampered(
        "DO $$ BEGIN EXECUTE pg_catalog.format('ALTER DATABASE %I SET search_path = evil, pg_catalog, public', \
         pg_catalog.current_database()); END $$;",
    );
    // Unprotected, a new session of the database runs the overload for the old query.
    let copy = unprotected(&lab, &evil);
    assert_eq!(Bank::hash(&copy, UNQUALIFIED_HASH), Bank::hash(&bank.primary, UNQUALIFIED_HASH), "the forgery works");

    let config = lab.config("", &bank.target());
    lab.put("evil.sql", evil.as_bytes());
    let (code, run, all) = lab.verify(&config, "evil.sql");
    assert_ran(&run, code, 1, &all);
    assert_eq!(validator(&run, "catalog")["status"], "passed", "{run}");
    assert_eq!(validator(&run, "schema")["status"], "passed", "the same objects on both sides: {run}");
    let c = validator(&run, "checksums");
    assert_eq!(c["status"], "failed", "{run}");
    assert!(c["detail"].as_str().unwrap().contains("public.accounts"), "{c}");
}

/// An event trigger (the primary has it too) that repairs the tampered row when DDL
/// runs — and drcheck's validation runs DDL (it installs amcheck). drcheck disables the
/// copy's event triggers before validating, so the row stays as the backup holds it.
#[test]
fn an_event_trigger_cannot_repair_the_copy_during_validation() {
    let lab = Lab::new();
    let trigger = "create function public.fixup() returns event_trigger language plpgsql as $$ begin \
        update public.accounts set balance = 100.00 where balance = 999999.00; end $$; \
        create event trigger fixup on ddl_command_end execute function public.fixup()";
    let bank = Bank::start(&lab, trigger);
    let evil = bank.tampered("");
    // Unprotected: the row is still tampered after the restore, and DDL repairs it.
    let copy = unprotected(&lab, &evil);
    assert_eq!(copy.psql("bank", "select balance from accounts where id = 7"), "999999.00");
    copy.psql("bank", "create extension amcheck");
    assert_eq!(copy.psql("bank", "select balance from accounts where id = 7"), "100.00", "the trigger repairs it");

    let config = lab.config("", &bank.target());
    lab.put("evil.sql", evil.as_bytes());
    let (code, run, all) = lab.verify(&config, "evil.sql");
    assert_ran(&run, code, 1, &all);
    assert_eq!(validator(&run, "amcheck")["status"], "passed", "amcheck's DDL ran: {run}");
    let c = validator(&run, "checksums");
    assert_eq!(c["status"], "failed", "{run}");
    assert!(c["detail"].as_str().unwrap().contains("public.accounts"), "{c}");
}

/// A superuser dump edits a built-in catalog row: numeric's hash support function
/// becomes one of the dump's own (the primary has that function too, unused).
/// Unprotected, the copy's catalog then decides what drcheck's hash computes — the same
/// data no longer hashes like the primary's. The copy's built-in rows differ from a
/// pristine cluster's, and `catalog` fails the backup naming the row.
#[test]
fn an_edited_catalog_row_fails_the_backup() {
    let lab = Lab::new();
    let helper = "create function public.forged_hash(n numeric, s bigint) returns bigint language sql immutable \
        strict as $$ select pg_catalog.hash_numeric_extended(n, s) $$";
    let bank = Bank::start(&lab, helper);
    let edit = "UPDATE pg_catalog.pg_amproc SET amproc = 'public.forged_hash(numeric,bigint)'::pg_catalog.regprocedure::\
        pg_catalog.oid::pg_catalog.regproc WHERE amprocnum = 2 AND amprocfamily = (SELECT opcfamily FROM \
        pg_catalog.pg_opclass WHERE opcname = 'numeric_ops' AND opcmethod = (SELECT oid FROM pg_catalog.pg_am \
        WHERE amname = 'hash'));";
    let edited = format!("{}\n{edit}\n", bank.plain);
    let pristine = unprotected(&lab, &bank.plain);
    let copy = unprotected(&lab, &edited);
    assert_eq!(Bank::hash(&pristine, QUALIFIED_HASH), Bank::hash(&bank.primary, QUALIFIED_HASH));
    assert_ne!(
        Bank::hash(&copy, QUALIFIED_HASH),
        Bank::hash(&bank.primary, QUALIFIED_HASH),
        "the edited row decides what the hash computes"
    );

    let config = lab.config("", &bank.target());
    lab.put("edited.sql", edited.as_bytes());
    let (code, run, all) = lab.verify(&config, "edited.sql");
    assert_ran(&run, code, 1, &all);
    let catalog = validator(&run, "catalog");
    assert_eq!(catalog["status"], "failed", "{run}");
    let detail = catalog["detail"].as_str().unwrap();
    assert!(detail.contains("support function hash numeric_ops numeric numeric 2 changed"), "{detail}");
    assert!(detail.contains("public.forged_hash(numeric,bigint)"), "{detail}");
    // The untouched dump of the same database passes the check.
    lab.put("plain.sql", bank.plain.as_bytes());
    let (code, run, all) = lab.verify(&config, "plain.sql");
    assert_ran(&run, code, 0, &all);
    assert_eq!(validator(&run, "catalog")["status"], "passed", "{run}");
}
