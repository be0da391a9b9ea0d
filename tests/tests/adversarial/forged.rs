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

/// What the bank's primary has besides `accounts`, for the round-4 attacks: a ledger
/// with a default and a check, an audit trigger, a view over a copy of the balances and
/// one over an empty table shaped like `pg_largeobject`.
const ROUND4: &str = "create table public.ledger (id int primary key, amount numeric(12,2) not null default 0 \
    check (amount >= 0)); insert into public.ledger select g, 5 from generate_series(1, 20) g; \
    create function public.audit() returns trigger language plpgsql as $$ begin return new; end $$; \
    create trigger audit_t before update on public.accounts for each row execute function public.audit(); \
    create table public.shadow (id int, balance numeric(12,2)); insert into public.shadow select * from public.accounts; \
    create view public.fake as select id, balance from public.shadow; \
    create table public.lo_shadow (loid oid, pageno int, data bytea); \
    create view public.lo_fake as select loid, pageno, data from public.lo_shadow";

/// Issue 33: catalog state that no list of rows covered. A flag takes `ledger` out of the
/// table list (`relispartition` with no parent); a view's SELECT rule moved onto
/// `accounts` makes it read as the view (the heap holds the tampered balance); the same
/// onto `pg_largeobject` hides every large object from SQL; a rule on
/// `pg_db_role_setting` makes the settings reset a no-op; an index flagged temporary is
/// one `pg_amcheck` skips. Each is shown to work unprotected; drcheck names every one.
/// Then a built-in aggregate's row edited (`sum(bigint)` finishing as an average) and
/// three built-ins' `probin` made 64 MiB each: named by the rows compared by
/// construction, in a report that stays small.
#[test]
fn catalog_state_outside_any_list_fails_the_backup() {
    let lab = Lab::new();
    let bank = Bank::start(&lab, ROUND4);
    let structure = bank.tampered(
        "SET allow_system_table_mods = on;
         UPDATE pg_catalog.pg_class SET relispartition = true WHERE oid = 'public.ledger'::pg_catalog.regclass;
         UPDATE pg_catalog.pg_rewrite SET ev_class = 'public.accounts'::pg_catalog.regclass
          WHERE ev_class = 'public.fake'::pg_catalog.regclass;
         UPDATE pg_catalog.pg_class SET relhasrules = true WHERE oid = 'public.accounts'::pg_catalog.regclass;
         SELECT pg_catalog.lo_from_bytea(0, '\\x0102'::bytea);
         UPDATE pg_catalog.pg_rewrite SET ev_class = 'pg_catalog.pg_largeobject'::pg_catalog.regclass
          WHERE ev_class = 'public.lo_fake'::pg_catalog.regclass;
         UPDATE pg_catalog.pg_class SET relhasrules = true WHERE oid = 'pg_catalog.pg_largeobject'::pg_catalog.regclass;
         CREATE RULE keep AS ON DELETE TO pg_catalog.pg_db_role_setting DO INSTEAD NOTHING;
         DO $$ BEGIN EXECUTE pg_catalog.format('ALTER DATABASE %I SET work_mem = %L', pg_catalog.current_database(), '77kB'); END $$;
         CREATE INDEX ledger_amount ON public.ledger (amount);
         UPDATE pg_catalog.pg_class SET relpersistence = 't' WHERE oid = 'public.ledger_amount'::pg_catalog.regclass;",
    );
    // Unprotected, each payload works.
    let copy = unprotected(&lab, &structure);
    let listed =
        "select count(*) from pg_class where relname = 'ledger' and relkind in ('r', 'p') and not relispartition";
    assert_eq!(copy.psql("bank", listed), "0", "the flag takes ledger out of the old table list");
    assert_eq!(copy.psql("bank", "select balance from accounts where id = 7"), "100.00", "accounts reads as the view");
    assert_eq!(copy.psql("bank", "select count(*) from pg_largeobject"), "0", "SQL sees no large object");
    assert_eq!(copy.psql("bank", "select count(*) from pg_largeobject_metadata"), "1");
    copy.psql("bank", "delete from pg_db_role_setting");
    assert_eq!(copy.psql("bank", "select count(*) from pg_db_role_setting"), "1", "the reset is a no-op");
    assert_eq!(copy.psql("bank", "select relpersistence from pg_class where relname = 'ledger_amount'"), "t");

    let config = lab.config("", &bank.target());
    lab.put("structure.sql", structure.as_bytes());
    let (code, run, all) = lab.verify(&config, "structure.sql");
    assert_ran(&run, code, 1, &all);
    assert_contained(&run);
    let catalog = validator(&run, "catalog");
    assert_eq!(catalog["status"], "failed", "{run}");
    let detail = catalog["detail"].as_str().unwrap();
    for named in [
        "relation public.ledger marked as a partition without a partitioned parent",
        "a SELECT rule (_RETURN) on public.accounts, which is not a view",
        "rule _RETURN on system relation pg_largeobject",
        "rule keep on system relation pg_db_role_setting",
        "relation public.ledger_amount marked temporary outside a temporary schema",
    ] {
        assert!(detail.contains(named), "{named:?} not in {detail}");
    }
    assert_eq!(validator(&run, "checksums")["status"], "skipped", "{run}");

    let mib = 64 * 1024 * 1024;
    let rows = bank.tampered(&format!(
        "UPDATE pg_catalog.pg_aggregate SET aggfinalfn = 'pg_catalog.numeric_poly_avg'::pg_catalog.regproc
          WHERE aggfnoid = 'pg_catalog.sum(pg_catalog.int8)'::pg_catalog.regprocedure;
         UPDATE pg_catalog.pg_proc SET probin = pg_catalog.repeat('x', {mib})
          WHERE oid IN ('pg_catalog.now()'::pg_catalog.regprocedure, 'pg_catalog.random()'::pg_catalog.regprocedure,
                        'pg_catalog.version()'::pg_catalog.regprocedure);"
    ));
    let copy = unprotected(&lab, &rows);
    assert_eq!(
        copy.psql("bank", "select sum(x) from (values (1::int8), (3::int8)) v(x)"),
        "2.0000000000000000",
        "an average"
    );
    lab.put("rows.sql", rows.as_bytes());
    let (code, run, all) = lab.verify(&config, "rows.sql");
    assert_ran(&run, code, 1, &all);
    let catalog = validator(&run, "catalog");
    assert_eq!(catalog["status"], "failed", "{run}");
    let detail = catalog["detail"].as_str().unwrap();
    assert!(detail.contains("row pg_aggregate (pg_catalog.sum,n,0,int8_avg_accum,numeric_poly_avg,"), "{detail}");
    assert!(detail.contains("function now() changed"), "{detail}");
    assert!(all.len() < 256 * 1024, "the output holds the backup's 64 MiB values: {} bytes", all.len());
}

/// Issue 33: `schema` compares behaviour, not only names and types. A copy that keeps
/// every object but adds a rule that swallows inserts, changes a column default,
/// disables a trigger, un-validates a check and hides a row behind a forced row
/// security policy: each works unprotected, and `schema` names each. Then settings the
/// copy applies to its database (`zero_damaged_pages`, an index-only planner) never
/// reach a validator's session; and a row the backup invents cannot hide a tampered one.
#[test]
fn schema_compares_what_changes_behaviour_and_settings_never_reach_validators() {
    let lab = Lab::new();
    let bank = Bank::start(&lab, ROUND4);
    let behaviour = format!(
        "{}\nCREATE RULE vanish AS ON INSERT TO public.accounts DO INSTEAD NOTHING;
         ALTER TABLE public.ledger ALTER COLUMN amount SET DEFAULT 1000000;
         ALTER TABLE public.accounts DISABLE TRIGGER audit_t;
         UPDATE pg_catalog.pg_constraint SET convalidated = false WHERE conname = 'ledger_amount_check';
         ALTER TABLE public.shadow ENABLE ROW LEVEL SECURITY; ALTER TABLE public.shadow FORCE ROW LEVEL SECURITY;
         CREATE POLICY hide ON public.shadow USING (id <> 7);\n",
        bank.plain
    );
    let copy = unprotected(&lab, &behaviour);
    copy.psql("bank", "insert into accounts values (1000, 1)");
    assert_eq!(copy.psql("bank", "select count(*) from accounts where id = 1000"), "0", "the insert vanished");
    copy.psql("bank", "insert into ledger (id) values (1000)");
    assert_eq!(copy.psql("bank", "select amount from ledger where id = 1000"), "1000000.00");
    assert_eq!(copy.psql("bank", "select tgenabled from pg_trigger where tgname = 'audit_t'"), "D");
    assert_eq!(copy.psql("bank", "select convalidated from pg_constraint where conname = 'ledger_amount_check'"), "f");

    let config = lab.config("", &bank.target());
    lab.put("behaviour.sql", behaviour.as_bytes());
    let (code, run, all) = lab.verify(&config, "behaviour.sql");
    assert_ran(&run, code, 1, &all);
    assert_eq!(validator(&run, "catalog")["status"], "passed", "{run}");
    let schema = validator(&run, "schema");
    assert_eq!(schema["status"], "failed", "{run}");
    let detail = schema["detail"].as_str().unwrap();
    for named in [
        "rule public.accounts.vanish",
        "column public.ledger.amount",
        "trigger public.accounts.audit_t",
        "constraint public.ledger.ledger_amount_check",
        "policy public.shadow.hide",
        "table public.shadow",
    ] {
        assert!(detail.contains(named), "{named:?} not in {detail}");
    }

    // Settings the copy gives its database: unprotected, a new session has them; a
    // validator's session (a `custom` check) never does.
    let settings = bank.tampered(
        "DO $$ BEGIN EXECUTE pg_catalog.format('ALTER DATABASE %I SET zero_damaged_pages = on', \
         pg_catalog.current_database()); EXECUTE pg_catalog.format('ALTER DATABASE %I SET enable_seqscan = off', \
         pg_catalog.current_database()); END $$;",
    );
    let copy = unprotected(&lab, &settings);
    assert_eq!(copy.psql("bank", "show zero_damaged_pages"), "on");
    let check = "[[target.check]]\nname = \"pins\"\n\
        sql = \"select current_setting('zero_damaged_pages') || current_setting('enable_seqscan')\"\nexpect = \"offon\"\n";
    let config = lab.config("", &format!("{}{check}", bank.target()));
    lab.put("settings.sql", settings.as_bytes());
    let (code, run, all) = lab.verify(&config, "settings.sql");
    assert_ran(&run, code, 1, &all);
    assert_eq!(validator(&run, "check: pins")["status"], "passed", "{run}");
    let c = validator(&run, "checksums");
    assert_eq!(c["status"], "failed", "{run}");
    assert!(c["detail"].as_str().unwrap().contains("public.accounts"), "{c}");

    // A row the primary never had, beside the tampered one, cannot hide it: the range's
    // totals differ, it is drilled key by key, only the invented key counts as deleted
    // since, and every key both sides hold is compared.
    let config = lab.config("", &bank.target());
    lab.put("invented.sql", bank.tampered("INSERT INTO public.accounts VALUES (51, 1.00);").as_bytes());
    let (code, run, all) = lab.verify(&config, "invented.sql");
    assert_ran(&run, code, 1, &all);
    let c = validator(&run, "checksums");
    assert_eq!(c["status"], "failed", "{run}");
    assert!(c["detail"].as_str().unwrap().contains("id=7 differs"), "{c}");
}

/// Issue 33: blame and the sandbox's memory. A dump that raises "disk full" (SQLSTATE
/// 53100) itself, and one whose rule on `pg_amproc` makes every new backend of the
/// restored server crash, are the backup's (exit 1) — not the host's (exit 3): the host
/// has room, and the server's own processes crash on what the backup holds. A statement
/// holding 2.4 GB in one backend meets `[sandbox] memory_limit` (2 GiB by default) and
/// fails as the backup's. Each is first shown to do that to a plain server.
#[test]
fn what_the_backup_raises_or_crashes_is_blamed_on_the_backup() {
    let lab = Lab::new();
    let raise = "create table t (id int);\ninsert into t values (1);\n\
        DO $$ BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = '53100'; END $$;\n";
    let crash = "create table t (id int);\ninsert into t values (1);\nSET allow_system_table_mods = on;\n\
        CREATE RULE r AS ON INSERT TO pg_catalog.pg_amproc DO INSTEAD NOTHING;\n";
    let copy = unprotected(&lab, "select 1;");
    let raised = copy.run_script("bank", &drcheck_e2e::attack::script_file(&lab, raise));
    assert!(String::from_utf8_lossy(&raised.stderr).contains("No space left on device"), "{raised:?}");
    // One statement that holds 2.4 GB in a backend: unbounded, it completes.
    let hog = "create table t (id int);\ninsert into t values (1);\nselect pg_catalog.length(a)::pg_catalog.int8 \
        + pg_catalog.length(b) + pg_catalog.length(c) from (select pg_catalog.repeat('a', 800000000) a, pg_catalog.repeat('b', 800000000) b, \
        pg_catalog.repeat('c', 800000000) c) s;\n";
    assert_eq!(
        copy.psql("bank", hog.lines().last().unwrap()),
        "2400000000",
        "the statement holds 2.4 GB where nothing bounds it"
    );

    copy.psql("postgres", "create database crash");
    let made = copy.run_script("crash", &drcheck_e2e::attack::script_file(&lab, crash));
    assert!(made.status.success(), "{made:?}");
    let after = std::process::Command::new("psql")
        .args(["-X", "-h"])
        .arg(&copy.sock)
        .args(["-p", &copy.port.to_string(), "-U", "postgres", "-d", "crash", "-c", "select 1"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&after.stderr).contains("terminated abnormally"), "{after:?}");

    let config = lab.config("", "");
    for (key, script, says) in [
        ("raise.sql", raise, "No space left on device"),
        ("crash.sql", crash, "crash"),
        ("hog.sql", hog, "out of memory"),
    ] {
        lab.put(key, format!("--\n-- PostgreSQL database dump\n--\n\n{script}").as_bytes());
        let (code, run, all) = lab.verify(&config, key);
        assert_eq!(code, Some(1), "{key}: {all}");
        assert_eq!(run["result"], "failed", "{key}: {run}");
        let msg = run["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(says), "{key}: {msg}");
    }
    assert!(lab.leftovers().is_empty(), "{:?}", lab.leftovers());
}

/// Issue 34: a table that fails does not hide another table's error. `accounts` is
/// tampered (failed) and the primary refuses to show `vault` to drcheck's role (a row
/// security policy): the finding names both, so the policy is fixed in the same round.
#[test]
fn a_failed_table_does_not_hide_another_tables_error() {
    let lab = Lab::new();
    let bank = Bank::start(
        &lab,
        "create table vault (id int primary key); insert into vault values (1); \
         alter table vault enable row level security; create policy only_owner on vault using (false);",
    );
    let config = lab.config("", &bank.target());
    lab.put("tampered.sql", bank.tampered("").as_bytes());
    let (code, run, all) = lab.verify(&config, "tampered.sql");
    assert_ran(&run, code, 1, &all);
    let c = validator(&run, "checksums");
    assert_eq!(c["status"], "failed", "{run}");
    let detail = c["detail"].as_str().unwrap();
    assert!(detail.contains("public.accounts") && detail.contains("id=7 differs"), "{detail}");
    assert!(detail.contains("could not hash 1: public.vault") && detail.contains("only_owner"), "{detail}");
}
