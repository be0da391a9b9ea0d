//! `schema`: a fingerprint of schemas, tables (and their row security), columns and
//! their types, defaults, generated expressions and identity, indexes, constraints (as
//! defined: `NOT VALID` included), views, functions, sequences, triggers (and whether
//! they fire), rules, row security policies, extensions, types (enum labels,
//! domains, ranges, base types' I/O functions) and operators — and of anything added to
//! `pg_catalog` or `information_schema` — taken on both sides and compared **as of the
//! copy's point**: a difference that the primary's DDL log ([`crate::ddl`]) shows was
//! made after it is a note naming the command, never a failure; drcheck's own tables
//! (the heartbeat, the DDL log) are never "missing" from a copy made before them. Without
//! a DDL log a difference is a failure that says how to install one.

use crate::context::{Context, Validator};
use crate::finding::Said;
use crate::finding::{Finding, Status, some_of};
use async_trait::async_trait;
use sqlx::PgPool;
use std::collections::{BTreeMap, BTreeSet};

pub struct Schema;

const FINGERPRINT: &str = r#"
with ns as (
  select oid, nspname, xmin as x from pg_namespace
   where nspname not in ('pg_catalog', 'information_schema')
     and nspname not like 'pg\_toast%' and nspname not like 'pg\_temp%'
     and obj_description(oid, 'pg_namespace') is distinct from 'drcheck: temporary, for amcheck'
),
sys as (select oid, nspname from pg_namespace where nspname in ('pg_catalog', 'information_schema')),
ext as (select classid, objid from pg_depend where deptype = 'e'),
rels as (
  select c.*, c.xmin as x from pg_class c join ns on ns.oid = c.relnamespace
   where not exists (select 1 from ext where ext.classid = 'pg_class'::regclass and ext.objid = c.oid)
)
select 'schema', nspname::text, '', ns.x
  from ns where not exists (select 1 from ext where ext.classid = 'pg_namespace'::regclass and ext.objid = ns.oid)
union all
select case c.relkind when 'r' then 'table' when 'p' then 'partitioned table' when 'v' then 'view'
                      when 'm' then 'materialized view' when 'S' then 'sequence' else 'foreign table' end,
       n.nspname || '.' || c.relname,
       case when c.relkind in ('v', 'm') then pg_get_viewdef(c.oid)
            when c.relkind = 'S' then (select format_type(s.seqtypid, null) || ' increment ' || s.seqincrement
                                              || ' min ' || s.seqmin || ' max ' || s.seqmax
                                              || case when s.seqcycle then ' cycle' else '' end
                                         from pg_sequence s where s.seqrelid = c.oid)
            else coalesce(pg_get_partkeydef(c.oid), '')
                 || case when c.relrowsecurity then ' row security' else '' end
                 || case when c.relforcerowsecurity then ' forced' else '' end end, c.x
  from rels c join ns n on n.oid = c.relnamespace
 where c.relkind in ('r', 'p', 'v', 'm', 'S', 'f')
union all
select 'column', n.nspname || '.' || c.relname || '.' || a.attname,
       format_type(a.atttypid, a.atttypmod)
       || case when a.attnotnull then ' not null' else '' end
       || case when a.attgenerated = 's' then ' generated always as ' || pg_get_expr(d.adbin, d.adrelid) || ' stored'
               when a.attgenerated = 'v' then ' generated always as ' || pg_get_expr(d.adbin, d.adrelid) || ' virtual'
               else '' end
       || case when a.attidentity <> '' then ' identity ' || a.attidentity::text else '' end
       || case when a.attgenerated = '' and d.adbin is not null then ' default ' || pg_get_expr(d.adbin, d.adrelid)
               else '' end, a.xmin
  from pg_attribute a join rels c on c.oid = a.attrelid join ns n on n.oid = c.relnamespace
  left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
 where a.attnum > 0 and not a.attisdropped and c.relkind in ('r', 'p', 'v', 'm', 'f')
union all
select 'index', n.nspname || '.' || t.relname || '.' || ci.relname, pg_get_indexdef(i.indexrelid), i.xmin
  from pg_index i join pg_class ci on ci.oid = i.indexrelid join ns n on n.oid = ci.relnamespace
  join rels t on t.oid = i.indrelid
union all
select 'constraint', n.nspname || '.' || coalesce(r.relname, ty.typname) || '.' || con.conname, pg_get_constraintdef(con.oid),
       con.xmin
  from pg_constraint con join ns n on n.oid = con.connamespace
  left join pg_class r on r.oid = con.conrelid left join pg_type ty on ty.oid = con.contypid
 where not exists (select 1 from ext where ext.classid = 'pg_class'::regclass and ext.objid = con.conrelid)
union all
select case p.prokind when 'p' then 'procedure' when 'a' then 'aggregate' when 'w' then 'window function' else 'function' end,
       n.nspname || '.' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
       case when p.prokind in ('f', 'p') then 'body md5 ' || md5(pg_get_functiondef(p.oid)) else '' end, p.xmin
  from pg_proc p join ns n on n.oid = p.pronamespace
 where not exists (select 1 from ext where ext.classid = 'pg_proc'::regclass and ext.objid = p.oid)
union all
select 'trigger', n.nspname || '.' || c.relname || '.' || tg.tgname,
       pg_get_triggerdef(tg.oid) || case tg.tgenabled when 'O' then '' when 'D' then ' (disabled)'
                                      when 'R' then ' (enabled on replica)' when 'A' then ' (enabled always)' end,
       tg.xmin
  from pg_trigger tg join rels c on c.oid = tg.tgrelid join ns n on n.oid = c.relnamespace
 where not tg.tgisinternal
union all
select 'rule', n.nspname || '.' || c.relname || '.' || r.rulename,
       pg_get_ruledef(r.oid) || case r.ev_enabled when 'O' then '' when 'D' then ' (disabled)'
                                  when 'R' then ' (enabled on replica)' when 'A' then ' (enabled always)' end,
       r.xmin
  from pg_rewrite r join rels c on c.oid = r.ev_class join ns n on n.oid = c.relnamespace
 where not (r.rulename = '_RETURN' and c.relkind in ('v', 'm'))
union all
select 'policy', n.nspname || '.' || c.relname || '.' || p.polname,
       concat_ws(' ', case p.polcmd when 'r' then 'select' when 'a' then 'insert' when 'w' then 'update'
                                    when 'd' then 'delete' else 'all' end,
                 case when p.polpermissive then 'permissive' else 'restrictive' end,
                 'to ' || (select string_agg(case when rl = 0 then 'public' else rl::regrole::text end, ',' order by rl)
                             from unnest(p.polroles) rl),
                 'using ' || pg_get_expr(p.polqual, p.polrelid), 'check ' || pg_get_expr(p.polwithcheck, p.polrelid)),
       p.xmin
  from pg_policy p join rels c on c.oid = p.polrelid join ns n on n.oid = c.relnamespace
union all
select 'extension', e.extname::text, e.extversion, e.xmin from pg_extension e
 where obj_description(e.oid, 'pg_extension') is distinct from 'drcheck: temporary, for amcheck'
union all
select 'type', n.nspname || '.' || t.typname,
       case t.typtype
         when 'e' then 'enum (' || (select string_agg(quote_literal(e.enumlabel), ', ' order by e.enumsortorder)
                                      from pg_enum e where e.enumtypid = t.oid) || ')'
         when 'r' then 'range of ' || (select format_type(r.rngsubtype, null) from pg_range r where r.rngtypid = t.oid)
         when 'd' then 'domain over ' || format_type(t.typbasetype, t.typtypmod)
         when 'b' then 'base, input ' || t.typinput::oid::regprocedure::text || ', output '
                       || t.typoutput::oid::regprocedure::text || ', send ' || t.typsend::oid::regprocedure::text
         else t.typtype::text end,
       -- An enum gains labels without its type's row changing: the youngest label's.
       coalesce((select e.xmin from pg_enum e where e.enumtypid = t.oid order by age(e.xmin) limit 1), t.xmin)
  from pg_type t join ns n on n.oid = t.typnamespace
 where t.typtype in ('b', 'd', 'e', 'r')
   and not exists (select 1 from ext where ext.classid = 'pg_type'::regclass and ext.objid = t.oid)
   and not (t.typcategory = 'A' and t.typelem <> 0)
union all
select 'operator', n.nspname || '.' || o.oid::regoperator::text, o.oprcode::oid::regprocedure::text, o.xmin
  from pg_operator o join ns n on n.oid = o.oprnamespace
 where not exists (select 1 from ext where ext.classid = 'pg_operator'::regclass and ext.objid = o.oid)
union all
select case p.prokind when 'a' then 'aggregate' else 'function' end, n.nspname || '.' || p.proname || '('
       || pg_get_function_identity_arguments(p.oid) || ')', 'added to a system schema', p.xmin
  from pg_proc p join sys n on n.oid = p.pronamespace
 where p.oid >= 16384
   and not exists (select 1 from ext where ext.classid = 'pg_proc'::regclass and ext.objid = p.oid)
union all
select 'relation', n.nspname || '.' || c.relname, 'added to a system schema', c.xmin
  from pg_class c join sys n on n.oid = c.relnamespace
 where c.oid >= 16384
   and not exists (select 1 from ext where ext.classid = 'pg_class'::regclass and ext.objid = c.oid)
union all
select 'operator', n.nspname || '.' || o.oid::regoperator::text, 'added to a system schema', o.xmin
  from pg_operator o join sys n on n.oid = o.oprnamespace
 where o.oid >= 16384
   and not exists (select 1 from ext where ext.classid = 'pg_operator'::regclass and ext.objid = o.oid)
"#;

/// `kind name` → definition.
pub(crate) async fn fingerprint(pool: &PgPool) -> Result<BTreeMap<String, String>, sqlx::Error> {
    let sql = format!("select f.kind, f.name, f.def from ({FINGERPRINT}) f(kind, name, def, x)");
    let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(sqlx::AssertSqlSafe(sql)).fetch_all(pool).await?;
    Ok(rows.into_iter().map(|(kind, name, def)| (format!("{kind} {name}"), def.unwrap_or_default())).collect())
}

/// The primary's fingerprint, and the entries whose defining catalog row the primary
/// wrote since the copy's point (created or altered since: [`crate::asof::Since`] on
/// the row's `xmin`) — the primary's own record, never the copy's.
pub(crate) async fn primary_fingerprint(
    primary: &crate::primary::PrimaryDb,
    since: &crate::asof::Since,
) -> Result<(BTreeMap<String, String>, BTreeSet<String>), sqlx::Error> {
    let (changed, binds) = since.changed_xid("f.x", 1).unwrap_or_else(|| ("false".into(), vec![]));
    let sql =
        format!("select f.kind, f.name, f.def, coalesce({changed}, false) from ({FINGERPRINT}) f(kind, name, def, x)");
    let q = crate::asof::bind_all(
        sqlx::query_as::<_, (String, String, Option<String>, bool)>(sqlx::AssertSqlSafe(sql)),
        &binds,
    )
    .persistent(false);
    let rows = primary.timed(q.fetch_all(&primary.pool)).await?;
    let mut fp = BTreeMap::new();
    let mut new = BTreeSet::new();
    for (kind, name, def, changed) in rows {
        let key = format!("{kind} {name}");
        if changed {
            new.insert(key.clone());
        }
        fp.insert(key, def.unwrap_or_default());
    }
    Ok((fp, new))
}

/// Tables of the primary with a column dropped since the copy's point (a dropped
/// column's catalog row stays, renamed, with the drop's `xmin`): `schema.table`.
async fn dropped_columns_since(
    primary: &crate::primary::PrimaryDb,
    since: &crate::asof::Since,
) -> Result<BTreeSet<String>, sqlx::Error> {
    let Some((changed, binds)) = since.changed("a", 1) else { return Ok(BTreeSet::new()) };
    let sql = format!(
        "select distinct n.nspname || '.' || c.relname from pg_attribute a
           join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace
          where a.attisdropped and {changed}"
    );
    let q = crate::asof::bind_all(sqlx::query_as::<_, (String,)>(sqlx::AssertSqlSafe(sql)), &binds).persistent(false);
    Ok(primary.timed(q.fetch_all(&primary.pool)).await?.into_iter().map(|(t,)| t).collect())
}

fn short(def: &str) -> String {
    let one_line = def.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > 160 {
        format!("{}…", one_line.chars().take(160).collect::<String>())
    } else {
        one_line
    }
}

/// The part of a fingerprint a partial dump holds (`dump_scope`): a schema entry keeps
/// everything in that schema, a `schema.table` entry the table and what hangs off it
/// (columns, indexes, constraints, triggers). Extensions are not part of a partial dump.
pub(crate) fn in_scope(fp: BTreeMap<String, String>, scope: &[String]) -> BTreeMap<String, String> {
    if scope.is_empty() {
        return fp;
    }
    fp.into_iter()
        .filter(|(k, _)| {
            let Some((kind, name)) = k.split_once(' ') else { return false };
            // `partitioned table`, `materialized view`, … : the name follows the last space
            // of the kind, and names never start with one.
            let name = if kind == "partitioned" || kind == "materialized" || kind == "foreign" || kind == "window" {
                name.split_once(' ').map(|(_, n)| n).unwrap_or(name)
            } else {
                name
            };
            if kind == "extension" {
                return false;
            }
            scope.iter().any(|e| name == e || name.starts_with(&format!("{e}.")))
        })
        .collect()
}

/// Extensions are compared by presence: pg_dump writes `CREATE EXTENSION` without a
/// version, so a restore installs the server's default. Returns the fingerprints with
/// extensions present on both sides made equal, and a note of the versions that differ.
pub(crate) fn extension_versions(
    primary: &mut BTreeMap<String, String>,
    restored: &mut BTreeMap<String, String>,
) -> Option<String> {
    let mut differ = Vec::new();
    for (k, v) in primary.iter_mut() {
        if !k.starts_with("extension ") {
            continue;
        }
        if let Some(r) = restored.get_mut(k) {
            if r != v {
                differ.push(format!("{} {v} on the primary, {r} restored", &k["extension ".len()..]));
            }
            v.clear();
            r.clear();
        }
    }
    (!differ.is_empty()).then(|| {
        format!("extension versions differ (a dump does not keep them; not a difference): {}", some_of(&differ, 10))
    })
}

/// Which side an entry of a difference is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The primary has it, the copy does not.
    Missing,
    /// Both have it, defined otherwise.
    Differs,
    /// Only the copy has it.
    Extra,
}

/// The differences between two fingerprints, readable, each with its entry's key.
#[cfg(test)]
pub(crate) fn diff(primary: &BTreeMap<String, String>, restored: &BTreeMap<String, String>) -> Vec<(String, String)> {
    diff_sides(primary, restored).into_iter().map(|(k, m, _)| (k, m)).collect()
}

/// [`diff`], with the side of each.
pub(crate) fn diff_sides(
    primary: &BTreeMap<String, String>,
    restored: &BTreeMap<String, String>,
) -> Vec<(String, String, Side)> {
    let mut out = Vec::new();
    for (k, def) in primary {
        match restored.get(k) {
            None if def.is_empty() => {
                out.push((k.clone(), format!("{k} missing from the restored copy"), Side::Missing))
            }
            None => {
                out.push((k.clone(), format!("{k} missing from the restored copy ({})", short(def)), Side::Missing))
            }
            Some(r) if r != def => out.push((
                k.clone(),
                format!("{k} differs: primary {}, restored {}", short(def), short(r)),
                Side::Differs,
            )),
            Some(_) => {}
        }
    }
    for k in restored.keys().filter(|k| !primary.contains_key(*k)) {
        out.push((k.clone(), format!("{k} not on the primary"), Side::Extra));
    }
    out
}

/// A fingerprint key's kind and name (`partitioned table` and the like are two words).
pub(crate) fn kind_and_name(key: &str) -> (&str, &str) {
    for two in ["partitioned table ", "materialized view ", "foreign table ", "window function "] {
        if let Some(name) = key.strip_prefix(two) {
            return (two.trim_end().rsplit(' ').next().unwrap_or("table"), name);
        }
    }
    key.split_once(' ').unwrap_or((key, ""))
}

#[async_trait]
impl Validator for Schema {
    fn weighs_undecided(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        "schema"
    }

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        let name = self.name();
        let primary = match cx.primary_or_skip(name) {
            Ok(p) => p,
            Err(skip) => return vec![skip],
        };
        let (mut p, new_on_primary, mut r) =
            match (primary_fingerprint(primary, &cx.since).await, fingerprint(&cx.restored).await) {
                (Ok((p, new)), Ok(r)) => (in_scope(p, &cx.settings.dump_scope), new, r),
                (Err(e), _) => {
                    return vec![Finding::new(
                        name,
                        Status::Error,
                        format!("fingerprinting the primary: {}", e.said()),
                    )];
                }
                (_, Err(e)) => {
                    return vec![Finding::new(
                        name,
                        Status::Error,
                        format!("fingerprinting the restored copy: {}", e.said()),
                    )];
                }
            };
        if !cx.settings.dump_scope.is_empty() {
            r.retain(|k, _| !k.starts_with("extension "));
        }
        let versions = extension_versions(&mut p, &mut r);
        // drcheck's own tables (by their mark on the primary) are never a difference.
        let marked = match primary.timed(crate::ddl::marked(&primary.pool)).await {
            Ok(m) => m,
            Err(e) => {
                return vec![Finding::new(
                    name,
                    Status::Error,
                    format!("reading drcheck's tables on the primary: {}", e.said()),
                )];
            }
        };
        let differences: Vec<(String, String, Side)> = diff_sides(&p, &r)
            .into_iter()
            .filter(|(k, _, _)| {
                let (kind, n) = kind_and_name(k);
                !marked.owns(kind, n)
            })
            .collect();
        let (after, dropped) = if differences.is_empty() {
            (None, BTreeSet::new())
        } else {
            let after = match crate::ddl::after_point(primary, &marked, cx.backup_time, cx.settings.as_of_grace).await {
                Ok(a) => a,
                Err(e) => {
                    return vec![Finding::new(
                        name,
                        Status::Error,
                        format!("reading the primary's DDL log: {}", e.said()),
                    )];
                }
            };
            let dropped = match dropped_columns_since(primary, &cx.since).await {
                Ok(d) => d,
                Err(e) => {
                    return vec![Finding::new(
                        name,
                        Status::Error,
                        format!("reading the primary's dropped columns: {}", e.said()),
                    )];
                }
            };
            (Some(after), dropped)
        };
        let commands: &[crate::ddl::Logged] = match &after {
            Some(crate::ddl::After::Logged { commands, .. }) => commands,
            _ => &[],
        };
        let (mut explained, mut unexplained, mut undecided) = (Vec::new(), Vec::new(), Vec::new());
        for (k, message, side) in &differences {
            let (kind, n) = kind_and_name(k);
            match excuse(*side, k, kind, n, &new_on_primary, &dropped, commands, cx.since.known()) {
                Excuse::Catalog => explained.push(format!(
                    "{message} — {} on the primary since the copy's point (its catalog)",
                    if *side == Side::Extra { "dropped" } else { "made or altered" }
                )),
                Excuse::Logged(c) => {
                    explained.push(format!("{message} — {} {} at {} (after the copy's point)", c.tag, c.identity, c.at))
                }
                Excuse::Relation(c) => undecided.push(format!(
                    "{message}: {} {} at {} may have made it (the DDL log names the table, not this object), and \
                     nothing else tells what changed since the copy's point",
                    c.tag, c.identity, c.at
                )),
                Excuse::None => unexplained.push(message.clone()),
            }
        }
        let scope = if cx.settings.dump_scope.is_empty() {
            String::new()
        } else {
            format!(" within the dump's scope ({})", cx.settings.dump_scope.join(", "))
        };
        let mut note = versions.map(|v| format!("; {v}")).unwrap_or_default();
        if !explained.is_empty() {
            note.push_str(&format!(
                "; {} changed on the primary since the copy's point: {}",
                explained.len(),
                some_of(&explained, 10)
            ));
        }
        if unexplained.is_empty() {
            let tables = r.keys().filter(|k| k.starts_with("table ") || k.starts_with("partitioned table ")).count();
            return vec![
                Finding::new(
                    name,
                    Status::Passed,
                    format!("{} objects match the primary{scope} ({tables} tables){note}", r.len()),
                )
                .covered("objects", r.len() as u64)
                .covered("tables", tables as u64)
                .with(crate::finding::UNDECIDED_TABLES, undecided.len() as f64)
                .inconclusive(undecided),
            ];
        }
        let hint = match &after {
            Some(crate::ddl::After::NoLog) | None => "; if a migration changed the primary after the backup, drcheck \
                 cannot tell a dropped object from an invented one without its DDL log: `drcheck heartbeat setup` \
                 installs it (an event trigger recording each DDL command)"
                .to_string(),
            Some(crate::ddl::After::Logged { begins: Some(b), .. }) => {
                format!("; the primary's DDL log names no command after the copy's point for these (it begins {b})")
            }
            Some(crate::ddl::After::Logged { begins: None, .. }) => {
                "; the primary's DDL log names no command after the copy's point for these".to_string()
            }
        };
        vec![
            Finding::new(
                name,
                Status::Failed,
                format!("{} differences{scope}: {}{note}{hint}", unexplained.len(), some_of(&unexplained, 20)),
            )
            .inconclusive(undecided),
        ]
    }
}

/// What excuses a schema difference as a change on the primary since the copy's point.
#[derive(Debug, PartialEq)]
enum Excuse<'a> {
    /// The primary's catalog row for the object was written since T.
    Catalog,
    /// The primary's DDL log names the object, at or after T less the grace.
    Logged(&'a crate::ddl::Logged),
    /// Only a command on the object's table is logged, and nothing else tells: undecided.
    Relation(&'a crate::ddl::Logged),
    None,
}

/// Decides one difference from the primary's records only: its catalog rows' `xmin`
/// (when changes since T can be told), its DDL log's commands naming the object itself.
#[allow(clippy::too_many_arguments)]
fn excuse<'a>(
    side: Side,
    key: &str,
    kind: &str,
    name: &str,
    new_on_primary: &BTreeSet<String>,
    dropped: &BTreeSet<String>,
    commands: &'a [crate::ddl::Logged],
    since_known: bool,
) -> Excuse<'a> {
    let relation = || name.splitn(3, '.').take(2).collect::<Vec<_>>().join(".");
    if side != Side::Extra && new_on_primary.contains(key) {
        return Excuse::Catalog;
    }
    if side == Side::Extra && kind == "column" && dropped.contains(&relation()) {
        return Excuse::Catalog;
    }
    if let Some(c) = crate::ddl::names(commands, kind, name) {
        return Excuse::Logged(c);
    }
    // The log names an ALTER TABLE's table, not the columns or constraints it added:
    // without the catalog's word, that cannot decide it either way.
    if !since_known
        && side != Side::Extra
        && matches!(kind, "column" | "constraint")
        && let Some(c) = crate::ddl::on_relation(commands, &relation())
    {
        return Excuse::Relation(c);
    }
    Excuse::None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn extensions_compare_by_presence_and_versions_are_a_note() {
        let mut p = fp(&[("extension pg_trgm", "1.5"), ("extension plpgsql", "1.0"), ("extension gone", "1.0")]);
        let mut r = fp(&[("extension pg_trgm", "1.6"), ("extension plpgsql", "1.0")]);
        let note = extension_versions(&mut p, &mut r).unwrap();
        assert!(note.contains("pg_trgm 1.5 on the primary, 1.6 restored"), "{note}");
        let d: Vec<String> = diff(&p, &r).into_iter().map(|(_, m)| m).collect();
        assert_eq!(d, ["extension gone missing from the restored copy (1.0)"]);
    }

    #[test]
    fn a_partial_dump_is_compared_within_its_scope() {
        let p = fp(&[
            ("schema public", ""),
            ("schema sales", ""),
            ("table public.a", ""),
            ("column public.a.x", "integer"),
            ("index public.a.a_pkey", "…"),
            ("table sales.invoices", ""),
            ("index sales.invoices.invoices_pkey", "…"),
            ("table sales.other", ""),
            ("function sales.f()", "…"),
            ("partitioned table sales.parts", ""),
            ("extension pg_trgm", "1.5"),
        ]);
        let kept: Vec<String> = in_scope(p.clone(), &["public".into()]).into_keys().collect();
        assert_eq!(kept, ["column public.a.x", "index public.a.a_pkey", "schema public", "table public.a"]);
        let kept: Vec<String> = in_scope(p.clone(), &["sales.invoices".into()]).into_keys().collect();
        assert_eq!(kept, ["index sales.invoices.invoices_pkey", "table sales.invoices"]);
        assert_eq!(in_scope(p.clone(), &[]).len(), p.len(), "no scope: everything");
    }

    #[test]
    fn diff_names_missing_extra_and_changed() {
        let p: BTreeMap<String, String> = [
            ("index public.a.a_idx".to_string(), "CREATE INDEX a_idx ON public.a USING btree (x)".to_string()),
            ("column public.a.x".to_string(), "integer".to_string()),
        ]
        .into();
        let r: BTreeMap<String, String> =
            [("column public.a.x".to_string(), "bigint".to_string()), ("table public.b".to_string(), String::new())]
                .into();
        let d: Vec<String> = diff(&p, &r).into_iter().map(|(_, m)| m).collect();
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(d[0].contains("column public.a.x differs: primary integer, restored bigint"), "{d:?}");
        assert!(d[1].contains("index public.a.a_idx missing") && d[1].contains("USING btree"), "{d:?}");
        assert!(d[2].contains("table public.b not on the primary"), "{d:?}");
    }
}
