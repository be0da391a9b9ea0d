//! The restored copy is hostile input that happens to speak SQL: whoever wrote the
//! backup was a superuser inside it, and could have defined functions, operators,
//! casts, settings, triggers and catalog rows meant to change what drcheck's queries
//! compute. drcheck asks the copy for bytes, never for judgements, and this module is
//! what makes that hold:
//!
//! - [`restored_session`]: every connection to the copy pins its settings
//!   (`search_path = pg_catalog, pg_temp`, `row_security = off`, no preloaded
//!   libraries, `$libdir` as the only library path, no timeouts the copy chose, and
//!   the canonical output settings), overriding whatever the copy set for its
//!   database or roles;
//! - [`neutralize`]: before validating, on a session of its own that closes before any
//!   validator connects, the copy's event triggers are disabled and its database, role
//!   and `ALTER SYSTEM` settings reset (the copy is disposable) — after [`structure`]
//!   refused what would make the reset a no-op (a rule or trigger on a system catalog);
//! - [`check_catalog`] (the `catalog` finding, always first): the copy's built-in
//!   catalog is PostgreSQL's own — no user objects in `pg_catalog` or
//!   `information_schema`, no C function loading a library from outside the
//!   installation, the login still a superuser, a backup's own `amcheck` made of
//!   amcheck's C functions, and the rows of built-in functions, operators, casts,
//!   operator classes and families, access methods, types, languages, conversions and
//!   system views — and every row of every catalog the build made, by construction —
//!   equal to those of a pristine `initdb` of the same major
//!   ([`builtin_fingerprint`], computed once per installed major by the binary and
//!   cached). A copy that fails it is `failed` — the backup's fault — naming what was
//!   changed, and no other validator runs on it.
//!
//! Validator queries call built-ins schema-qualified with exact argument types, so an
//! overload in another schema cannot win resolution even without the pinned path.

use crate::finding::Said;
use crate::finding::{Finding, Status, some_of};
use crate::primary::canonical_session;
use drcheck_config::quote_ident;
use sqlx::PgPool;
use sqlx::postgres::PgConnectOptions;
use std::collections::BTreeMap;

/// The finding's name.
pub const CATALOG: &str = "catalog";

/// Objects with OIDs below this were made by `initdb` (FirstNormalObjectId).
pub const FIRST_NORMAL_OID: u32 = 16384;

/// The comment that marks what drcheck itself adds to a copy (amcheck's schema and
/// extension), so `schema` never counts it as part of the backup.
pub const DRCHECK_TEMPORARY: &str = "drcheck: temporary, for amcheck";

/// Settings of every session on the restored copy: the canonical output settings of
/// both sides plus what keeps the copy's own definitions out of drcheck's queries.
/// Settings in the connection request override the copy's `ALTER DATABASE`/`ALTER
/// ROLE … SET` and its configuration files.
pub fn restored_session(opts: PgConnectOptions) -> PgConnectOptions {
    canonical_session(opts).options(RESTORED_SETTINGS.iter().copied())
}

/// The settings [`restored_session`] pins besides the canonical ones (`search_path =
/// pg_catalog, pg_temp`, `row_security = off`, output formats).
pub const RESTORED_SETTINGS: &[(&str, &str)] = &[
    ("session_preload_libraries", ""),
    ("local_preload_libraries", ""),
    ("dynamic_library_path", "$libdir"),
    ("statement_timeout", "0"),
    ("lock_timeout", "0"),
    ("idle_in_transaction_session_timeout", "0"),
    ("default_transaction_read_only", "off"),
    ("standard_conforming_strings", "on"),
    ("transform_null_equals", "off"),
    ("array_nulls", "on"),
    ("xmloption", "content"),
    ("jit", "off"),
    // What a database setting, role setting or configuration file could use to change
    // what a read returns: damaged pages zeroed or checksum failures ignored (the copy
    // then reads as fewer or other rows), catalogs edited, triggers and rules skipped,
    // indexes preferred to the heap (an index-only scan answers from a tampered index).
    ("zero_damaged_pages", "off"),
    ("ignore_checksum_failure", "off"),
    ("ignore_system_indexes", "off"),
    ("allow_system_table_mods", "off"),
    ("session_replication_role", "origin"),
    ("enable_seqscan", "on"),
    ("enable_indexscan", "on"),
    ("enable_indexonlyscan", "on"),
    ("enable_bitmapscan", "on"),
];

/// `PGOPTIONS` for a client tool (pg_amcheck, pg_dump) connecting to the copy.
pub fn restored_pgoptions() -> String {
    crate::primary::CANONICAL_SETTINGS
        .iter()
        .chain(RESTORED_SETTINGS)
        .map(|(k, v)| format!("-c {k}={}", v.replace('\\', "\\\\").replace(' ', "\\ ")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Disables the copy's event triggers and resets its database, role and system
/// settings, so nothing the backup set up runs or applies while it is validated.
/// Returns what it changed, for the log.
pub async fn neutralize(pool: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    let mut done = Vec::new();
    let triggers: Vec<String> =
        sqlx::query_scalar("select evtname::text from pg_catalog.pg_event_trigger where evtenabled <> 'D'")
            .fetch_all(pool)
            .await?;
    for t in &triggers {
        let sql = format!("alter event trigger {} disable", quote_ident(t));
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(pool).await?;
        done.push(format!("event trigger {t} disabled"));
    }
    let settings = sqlx::query("delete from pg_catalog.pg_db_role_setting").execute(pool).await?.rows_affected();
    if settings > 0 {
        done.push(format!("{settings} database/role settings reset"));
    }
    let left: i64 =
        sqlx::query_scalar("select pg_catalog.count(*) from pg_catalog.pg_db_role_setting").fetch_one(pool).await?;
    if left > 0 {
        return Err(sqlx::Error::Protocol(format!("{left} database/role settings survived their deletion")));
    }
    sqlx::query("alter system reset all").execute(pool).await?;
    sqlx::query("select pg_catalog.pg_reload_conf()").execute(pool).await?;
    Ok(done)
}

/// `kind name` → definition of every object `initdb` makes that drcheck's queries (or
/// the server, on their behalf) rely on: functions, operators, casts between built-in
/// types, operator classes and families with their members, access methods, types,
/// languages, conversions and system views. References are rendered as names, never
/// OIDs, so the fingerprint is the same on every machine for one major version.
const BUILTIN_FINGERPRINT: &str = r#"
select 'function ' || p.oid::regprocedure::text,
       concat_ws(' ', l.lanname, p.prokind, p.provolatile, p.proisstrict, p.prosecdef, p.proretset, p.proparallel,
                 p.prorettype::regtype::text, p.prosupport::oid::regprocedure::text,
                 md5(coalesce(p.prosrc, '')), md5(coalesce(p.probin, '')), md5(coalesce(array_to_string(p.proconfig, ','), '')))
  from pg_proc p join pg_language l on l.oid = p.prolang
 where p.oid < 16384
union all
select 'operator ' || o.oid::regoperator::text,
       concat_ws(' ', o.oprkind, o.oprcanmerge, o.oprcanhash, o.oprresult::regtype::text,
                 o.oprcode::oid::regprocedure::text, o.oprrest::oid::regprocedure::text,
                 o.oprjoin::oid::regprocedure::text, o.oprcom::regoperator::text, o.oprnegate::regoperator::text)
  from pg_operator o
 where o.oid < 16384 or o.oprnamespace = 'pg_catalog'::regnamespace
union all
select 'cast ' || c.castsource::regtype::text || ' as ' || c.casttarget::regtype::text,
       concat_ws(' ', c.castfunc::regprocedure::text, c.castcontext, c.castmethod)
  from pg_cast c
 where c.castsource < 16384 and c.casttarget < 16384
union all
select 'operator class ' || am.amname || ' ' || n.nspname || '.' || oc.opcname,
       concat_ws(' ', oc.opcintype::regtype::text, oc.opcdefault, oc.opckeytype::regtype::text, f.opfname)
  from pg_opclass oc join pg_am am on am.oid = oc.opcmethod join pg_namespace n on n.oid = oc.opcnamespace
  join pg_opfamily f on f.oid = oc.opcfamily
 where oc.oid < 16384 or (oc.opcdefault and oc.opcintype < 16384 and am.amname in ('btree', 'hash'))
union all
select 'operator family ' || am.amname || ' ' || f.opfname, ''
  from pg_opfamily f join pg_am am on am.oid = f.opfmethod
 where f.oid < 16384
union all
select 'support function ' || am.amname || ' ' || f.opfname || ' ' || ap.amproclefttype::regtype::text || ' '
       || ap.amprocrighttype::regtype::text || ' ' || ap.amprocnum,
       ap.amproc::oid::regprocedure::text
  from pg_amproc ap join pg_opfamily f on f.oid = ap.amprocfamily join pg_am am on am.oid = f.opfmethod
 where f.oid < 16384
union all
select 'operator member ' || am.amname || ' ' || f.opfname || ' ' || ao.amoplefttype::regtype::text || ' '
       || ao.amoprighttype::regtype::text || ' ' || ao.amopstrategy,
       concat_ws(' ', ao.amopopr::regoperator::text, ao.amoppurpose, ao.amopsortfamily)
  from pg_amop ao join pg_opfamily f on f.oid = ao.amopfamily join pg_am am on am.oid = f.opfmethod
 where f.oid < 16384
union all
select 'access method ' || a.amname, concat_ws(' ', a.amtype, a.amhandler::oid::regprocedure::text)
  from pg_am a
 where a.oid < 16384 or a.amname in ('btree', 'hash', 'heap')
union all
select 'type ' || t.oid::regtype::text,
       concat_ws(' ', t.typtype, t.typcategory, t.typlen, t.typbyval, t.typalign, t.typstorage, t.typdelim,
                 t.typnotnull, t.typispreferred, t.typinput::oid::regprocedure::text,
                 t.typoutput::oid::regprocedure::text, t.typreceive::oid::regprocedure::text,
                 t.typsend::oid::regprocedure::text, t.typmodin::oid::regprocedure::text,
                 t.typmodout::oid::regprocedure::text, t.typanalyze::oid::regprocedure::text,
                 t.typsubscript::oid::regprocedure::text, t.typelem::regtype::text, t.typarray::regtype::text,
                 t.typbasetype::regtype::text, t.typcollation::regcollation::text)
  from pg_type t
 where t.oid < 16384
union all
select 'language ' || lg.lanname,
       concat_ws(' ', lg.lanispl, lg.lanpltrusted, lg.lanplcallfoid::regprocedure::text,
                 lg.laninline::regprocedure::text, lg.lanvalidator::regprocedure::text)
  from pg_language lg
 where lg.oid < 16384
union all
select 'conversion ' || cv.conname,
       concat_ws(' ', pg_encoding_to_char(cv.conforencoding), pg_encoding_to_char(cv.contoencoding),
                 cv.conproc::oid::regprocedure::text, cv.condefault)
  from pg_conversion cv
 where cv.oid < 16384 or cv.condefault
union all
select 'view ' || c.oid::regclass::text, md5(pg_get_viewdef(c.oid))
  from pg_class c
 where c.relkind = 'v' and c.oid < 16384
"#;

/// Which fingerprint [`builtin_fingerprint`] makes (part of the cached reference's name).
pub const FINGERPRINT_REVISION: u32 = 4;

/// Objects numbered below this were made by the build (genbki), not by `initdb`'s
/// scripts (`FirstUnpinnedObjectId`): catalog rows keyed below it are byte for byte the
/// same on every cluster of one major, whichever machine made it.
pub const FIRST_UNPINNED_OID: u32 = 12000;

/// The `public` schema's OID (`PG_PUBLIC_NAMESPACE`): made by the build, but the user's.
const PUBLIC_NAMESPACE_OID: u32 = 2200;

/// Catalogs whose rows are not built-in behaviour: statistics, large objects' data,
/// dependencies, comments, privileges recorded at `initdb`, security labels (shared
/// catalogs — roles, databases, tablespaces — are left out too: they are the
/// cluster's, not a database's, and the checks above and `databases` judge them).
pub const UNCOVERED_CATALOGS: &[&str] = &[
    "pg_statistic",
    "pg_statistic_ext_data",
    "pg_largeobject",
    "pg_depend",
    "pg_description",
    "pg_init_privs",
    "pg_seclabel",
];

/// Columns that change on every cluster without changing behaviour: sizes and statistics
/// (`VACUUM`, `ANALYZE`; PostgreSQL 18's `relallfrozen` too), the file a relation lives in
/// (`VACUUM FULL`, `REINDEX`), owners and privileges (drcheck's login is a superuser).
const VOLATILE_COLUMNS: &str =
    r"^(relpages|reltuples|relallvisible|relallfrozen|relfrozenxid|relminmxid|relfilenode|indcheckxmin|.*acl|.*owner)$";

/// Every catalog of the database (`pg_catalog`'s tables, made by the build) with the
/// columns its fingerprint reads and its key column (the first: the row's own OID, or the
/// object it describes — `aggfnoid`, `attrelid`, `indexrelid`, …).
const CATALOG_COLUMNS: &str = r#"
select c.relname::text, array_agg(a.attname::text order by a.attnum),
       array_agg(a.atttypid = 'anyarray'::regtype order by a.attnum),
       (select k.attname::text from pg_attribute k where k.attrelid = c.oid and k.attnum = 1)
  from pg_class c join pg_attribute a on a.attrelid = c.oid
 where c.relnamespace = 'pg_catalog'::regnamespace and c.relkind = 'r' and c.oid < $1 and not c.relisshared
   and c.relname <> all($2) and a.attnum > 0 and not a.attisdropped and a.attname !~ $3
 group by c.oid, c.relname
 order by 1
"#;

/// The fingerprint of the built-in catalog of the database behind `pool`: the named
/// objects [`BUILTIN_FINGERPRINT`] renders, and — by construction rather than by list —
/// every row of every catalog that the build made (keyed below [`FIRST_UNPINNED_OID`]),
/// whatever catalog it is in: `row <catalog> <its start> md5 <its hash>`. A row that
/// differs from a pristine cluster's is one removed and one added.
pub async fn builtin_fingerprint(pool: &PgPool) -> Result<BTreeMap<String, String>, sqlx::Error> {
    let rows: Vec<(String, Option<String>)> = sqlx::query_as(BUILTIN_FINGERPRINT).fetch_all(pool).await?;
    let mut out: BTreeMap<String, String> = rows.into_iter().map(|(k, v)| (k, v.unwrap_or_default())).collect();
    // Names are quoted here, not by the copy's own functions.
    let catalogs: Vec<(String, Vec<String>, Vec<bool>, String)> = sqlx::query_as(CATALOG_COLUMNS)
        .bind(FIRST_UNPINNED_OID as i64)
        .bind(UNCOVERED_CATALOGS)
        .bind(VOLATILE_COLUMNS)
        .fetch_all(pool)
        .await?;
    if catalogs.is_empty() {
        return Ok(out);
    }
    // One statement; each row is hashed in the server, only its first 120 characters
    // travel (a backup can make a catalog row of any size).
    let sql = catalogs
        .iter()
        .map(|(name, columns, anyarray, key)| {
            let cols: Vec<String> = columns
                .iter()
                .zip(anyarray)
                .map(|(c, any)| if *any { format!("{}::pg_catalog.text", quote_ident(c)) } else { quote_ident(c) })
                .collect();
            // The `public` schema is the user's: a dump of it (`pg_dump -n public`, restored
            // with `--clean`) drops and recreates it, under a new OID.
            let except =
                if name == "pg_namespace" { format!(" and {key} <> {PUBLIC_NAMESPACE_OID}") } else { String::new() };
            format!(
                "select '{lit}', pg_catalog.md5(t), pg_catalog.left(t, 120) from (select row({cols})::pg_catalog.text \
                 as t from pg_catalog.{name} where {key}::pg_catalog.oid < {FIRST_UNPINNED_OID}{except}) r",
                lit = name.replace('\'', "''"),
                cols = cols.join(", "),
                name = quote_ident(name),
                key = quote_ident(key),
            )
        })
        .collect::<Vec<_>>()
        .join("\nunion all\n");
    let rows: Vec<(String, String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(sql)).fetch_all(pool).await?;
    for (catalog, md5, start) in rows {
        out.insert(format!("row {catalog} {start} md5 {md5}"), String::new());
    }
    Ok(out)
}

/// Catalog state that changes what a relation reads as, or what reading a system catalog
/// does, whatever rows it holds: rules, triggers, policies, indexes or inheritance
/// attached to a system relation (`initdb` attaches none but the system views' own
/// rules); a SELECT rule on anything but a view (the table then reads as the rule's
/// query, not its heap); a relation marked temporary outside a temporary schema
/// (`pg_amcheck` skips temporary relations); a table marked as a partition with no
/// partitioned parent (table lists leave partitions to their parent); a relation of a
/// kind without storage that has a file, or of no kind PostgreSQL knows.
const STRUCTURE: &str = r#"
select 'rule ' || r.rulename::text || ' on system relation ' || r.ev_class::regclass::text
  from pg_rewrite r where r.ev_class < 16384 and r.oid >= 16384
union all
select 'a SELECT rule (' || r.rulename::text || ') on ' || c.oid::regclass::text || ', which is not a view: it reads '
       || 'as the rule''s query, not as what it holds'
  from pg_rewrite r join pg_class c on c.oid = r.ev_class where r.ev_type = '1' and c.relkind not in ('v', 'm')
union all
select 'trigger ' || t.tgname::text || ' on system relation ' || t.tgrelid::regclass::text
  from pg_trigger t where t.tgrelid < 16384
union all
select 'policy ' || p.polname::text || ' on system relation ' || p.polrelid::regclass::text
  from pg_policy p where p.polrelid < 16384
union all
select 'index ' || i.indexrelid::regclass::text || ' on system relation ' || i.indrelid::regclass::text
  from pg_index i where i.indrelid < 16384 and i.indexrelid >= 16384
union all
select 'inheritance between ' || i.inhrelid::regclass::text || ' and system relation ' || i.inhparent::regclass::text
  from pg_inherits i where i.inhrelid < 16384 or i.inhparent < 16384
union all
select 'relation ' || c.oid::regclass::text || ' marked temporary outside a temporary schema'
  from pg_class c join pg_namespace n on n.oid = c.relnamespace
 where c.relpersistence = 't' and n.nspname !~ '^pg_(toast_)?temp_[0-9]+$'
union all
select 'relation ' || c.oid::regclass::text || ' marked as a partition without a partitioned parent'
  from pg_class c
 where c.relispartition and not exists (select 1 from pg_inherits i join pg_class p on p.oid = i.inhparent
                                         where i.inhrelid = c.oid and p.relkind in ('p', 'I'))
union all
select 'relation ' || c.oid::regclass::text || ' of kind ' || c.relkind::text || ' (which has no storage) has a file'
  from pg_class c where c.relkind in ('v', 'c', 'f', 'p', 'I') and c.relfilenode <> 0
union all
select 'relation ' || c.oid::regclass::text || ' of unknown kind ' || c.relkind::text
  from pg_class c where c.relkind not in ('r', 'i', 'S', 't', 'v', 'm', 'c', 'f', 'p', 'I')
order by 1
"#;

/// What [`STRUCTURE`] finds: catalog state no row comparison covers. Checked before
/// anything is neutralized (a rule on `pg_db_role_setting` would make the reset a no-op).
pub async fn structure(pool: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(STRUCTURE).fetch_all(pool).await
}

/// Objects a backup added where only PostgreSQL's own belong (`pg_catalog`,
/// `information_schema`): an overload there wins resolution over a built-in. Objects
/// of an installed extension are allowed (some extensions install there), unless they
/// are functions that are not C code of the installation.
const INTRUDERS: &str = r#"
with sys as (select oid from pg_namespace where nspname in ('pg_catalog', 'information_schema')),
ext as (select classid, objid from pg_depend where deptype = 'e')
select 'function ' || p.oid::regprocedure::text
  from pg_proc p join pg_language l on l.oid = p.prolang
 where p.pronamespace in (select oid from sys) and p.oid >= 16384
   and not (exists (select 1 from ext where ext.classid = 'pg_proc'::regclass and ext.objid = p.oid)
            and l.lanname = 'c' and p.probin like '$libdir/%')
union all
select 'operator ' || o.oid::regoperator::text from pg_operator o
 where o.oprnamespace in (select oid from sys) and o.oid >= 16384
   and not exists (select 1 from ext where ext.classid = 'pg_operator'::regclass and ext.objid = o.oid)
union all
select 'type ' || t.oid::regtype::text from pg_type t
 where t.typnamespace in (select oid from sys) and t.oid >= 16384
   and not exists (select 1 from ext where ext.classid = 'pg_type'::regclass and ext.objid = t.oid)
union all
select 'relation ' || c.oid::regclass::text from pg_class c
 where c.relnamespace in (select oid from sys) and c.oid >= 16384
   and not exists (select 1 from ext where ext.classid = 'pg_class'::regclass and ext.objid = c.oid)
union all
select 'operator class ' || oc.opcname from pg_opclass oc
 where oc.opcnamespace in (select oid from sys) and oc.oid >= 16384
   and not exists (select 1 from ext where ext.classid = 'pg_opclass'::regclass and ext.objid = oc.oid)
union all
select 'operator family ' || f.opfname from pg_opfamily f
 where f.opfnamespace in (select oid from sys) and f.oid >= 16384
   and not exists (select 1 from ext where ext.classid = 'pg_opfamily'::regclass and ext.objid = f.oid)
union all
select 'collation ' || co.collname from pg_collation co
 where co.collnamespace in (select oid from sys) and co.oid >= 16384
   and not exists (select 1 from ext where ext.classid = 'pg_collation'::regclass and ext.objid = co.oid)
union all
select 'conversion ' || cv.conname from pg_conversion cv
 where cv.connamespace in (select oid from sys) and cv.oid >= 16384
   and not exists (select 1 from ext where ext.classid = 'pg_conversion'::regclass and ext.objid = cv.oid)
order by 1
"#;

/// C functions that load a library from anywhere but the PostgreSQL installation
/// (`$libdir`): native code a backup could have written into its own directory.
const FOREIGN_CODE: &str = r#"
select 'function ' || p.oid::regprocedure::text || ' loads ' || coalesce(p.probin, '(nothing)')
  from pg_proc p join pg_language l on l.oid = p.prolang
 where l.lanname = 'c' and p.oid >= 16384
   and not (p.probin like '$libdir/%' and p.probin not like '%..%')
   and not (p.probin like $1 || '/%' and p.probin not like '%..%')
   and not (p.probin !~ '/')
order by 1
"#;

/// A backup's own amcheck extension: each member must be a C function of amcheck's
/// library, or pg_amcheck would ask the backup's functions whether it is corrupt.
const AMCHECK_MEMBERS: &str = r#"
select 'amcheck function ' || p.oid::regprocedure::text || ' is ' || l.lanname || ' ' || coalesce(p.probin, '')
  from pg_extension e
  join pg_depend d on d.refclassid = 'pg_extension'::regclass and d.refobjid = e.oid and d.deptype = 'e'
                  and d.classid = 'pg_proc'::regclass
  join pg_proc p on p.oid = d.objid join pg_language l on l.oid = p.prolang
 where e.extname = 'amcheck'
   and not (l.lanname = 'c' and p.probin = '$libdir/amcheck' and p.prosrc = p.proname::text)
order by 1
"#;

/// Checks that the copy's built-in catalog is PostgreSQL's own (see the module
/// documentation). `reference` is the fingerprint of a pristine cluster of the same
/// major version.
pub async fn check_catalog(pool: &PgPool, reference: &BTreeMap<String, String>) -> Finding {
    match changes(pool, reference).await {
        Err(e) => Finding::new(CATALOG, Status::Error, format!("cannot read the restored catalog: {}", e.said())),
        Ok((changes, checked)) if changes.is_empty() => Finding::new(
            CATALOG,
            Status::Passed,
            format!("the built-in catalog is PostgreSQL's own ({checked} built-in objects checked)"),
        )
        .covered("objects", checked as u64),
        Ok((changes, _)) => changed(&changes),
    }
}

/// The `catalog` finding for catalog state that defeats the checks ([`structure`]).
pub fn structure_finding(found: &[String]) -> Finding {
    changed(found)
}

fn changed(changes: &[String]) -> Finding {
    Finding::new(
        CATALOG,
        Status::Failed,
        format!(
            "the backup changed PostgreSQL's built-in catalog, which could change what validators compute \
             ({} changes): {}",
            changes.len(),
            some_of(changes, 20)
        ),
    )
}

async fn changes(pool: &PgPool, reference: &BTreeMap<String, String>) -> Result<(Vec<String>, usize), sqlx::Error> {
    let mut out = Vec::new();
    let superuser: bool =
        sqlx::query_scalar("select rolsuper from pg_catalog.pg_roles where rolname = pg_catalog.current_user()")
            .fetch_optional(pool)
            .await?
            .unwrap_or(false);
    if !superuser {
        out.push("the role drcheck logs in as is no longer a superuser".to_string());
    }
    out.extend(structure(pool).await?);
    let intruders: Vec<String> = sqlx::query_scalar(INTRUDERS).fetch_all(pool).await?;
    out.extend(intruders.into_iter().map(|o| format!("{o} added to a system schema")));
    let libdir: String = sqlx::query_scalar("select setting from pg_catalog.pg_config() where name = 'PKGLIBDIR'")
        .fetch_optional(pool)
        .await?
        .unwrap_or_else(|| "/nonexistent".into());
    let foreign: Vec<String> = sqlx::query_scalar(FOREIGN_CODE).bind(libdir).fetch_all(pool).await?;
    out.extend(foreign.into_iter().map(|f| format!("{f}, outside the PostgreSQL installation")));
    let amcheck: Vec<String> = sqlx::query_scalar(AMCHECK_MEMBERS).fetch_all(pool).await?;
    out.extend(amcheck.into_iter().map(|a| format!("{a}, not amcheck's own C code")));
    let restored = builtin_fingerprint(pool).await?;
    out.extend(diff_builtin(reference, &restored));
    Ok((out, restored.len()))
}

/// How the copy's built-in rows differ from a pristine cluster's.
pub fn diff_builtin(reference: &BTreeMap<String, String>, restored: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in reference {
        match restored.get(k) {
            None => out.push(format!("{k} removed")),
            Some(r) if r != v => out.push(format!("{k} changed (PostgreSQL's: {v}; the backup's: {r})")),
            Some(_) => {}
        }
    }
    for (k, v) in restored {
        if !reference.contains_key(k) {
            out.push(if v.is_empty() { format!("{k} added") } else { format!("{k} added ({v})") });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_difference_from_the_pristine_catalog_is_named() {
        let reference: BTreeMap<String, String> = [
            ("function hash_numeric_extended(numeric,bigint)".to_string(), "internal f i".to_string()),
            ("support function hash numeric_ops numeric numeric 2".to_string(), "hash_numeric_extended".to_string()),
        ]
        .into();
        let mut restored = reference.clone();
        assert!(diff_builtin(&reference, &restored).is_empty());
        restored.insert(
            "support function hash numeric_ops numeric numeric 2".into(),
            "public.forged(numeric,bigint)".into(),
        );
        restored.insert("cast integer as text".into(), "public.evil(integer) i f".into());
        let d = diff_builtin(&reference, &restored);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d.iter().any(|l| l.contains("numeric_ops") && l.contains("public.forged")), "{d:?}");
        assert!(d.iter().any(|l| l.starts_with("cast integer as text added")), "{d:?}");
    }

    #[test]
    fn client_tools_get_the_same_pins() {
        let o = restored_pgoptions();
        assert!(o.contains("-c search_path=pg_catalog,pg_temp") && o.contains("-c row_security=off"), "{o}");
        assert!(o.contains("-c session_preload_libraries= "), "{o}");
    }
}
