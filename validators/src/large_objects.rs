//! `large_objects`: the copy holds the primary's large objects — the same number, the
//! same OIDs (pg_dump keeps them) and the same bytes — and nothing in it refers to a large
//! object it lacks.
//!
//! - Against the primary: the count and an order-independent hash of
//!   `pg_largeobject_metadata`'s OIDs, then of every data page (`pg_largeobject`: object,
//!   page number, the page's MD5). Owners and ACLs are not compared (a restore may map
//!   roles). Reading `pg_largeobject` takes `pg_read_all_data` (or superuser); without it
//!   the finding is `error`, naming the grant.
//! - On the copy alone: columns of type `lo` (the `lo` extension's domain) and `oid`
//!   columns that hold large-object OIDs — on the copy or, when it has none, on the
//!   primary — must name objects the copy has. A dump taken with `-t` or `-n` leaves
//!   large objects out (pg_dump's default): every such reference dangles, and that
//!   backup could not bring those rows' documents back.
//!
//! A deliberate partial dump (`[target] dump_scope`) without large objects is not
//! compared by count (the objects were never meant to be in it); its references still
//! have to resolve. A sparse object (written with holes) is stored page by page
//! differently after a restore and would differ — a documented limit.

use crate::{Context, Finding, Status, Validator, some_of};
use async_trait::async_trait;
use drcheck_config::quote_ident;
use sqlx::PgPool;

pub struct LargeObjects;

/// Count and OID hash of the large objects.
const METADATA: &str = "select pg_catalog.count(*), coalesce(pg_catalog.sum(pg_catalog.hashint8extended(\
     oid::pg_catalog.int8, 0::pg_catalog.int8)), 0)::pg_catalog.text from pg_catalog.pg_largeobject_metadata";

/// Count and hash of the data pages.
const DATA: &str = "select pg_catalog.count(*), coalesce(pg_catalog.sum(pg_catalog.hashtextextended(\
     pg_catalog.concat_ws(' ', loid, pageno, pg_catalog.md5(data)), 0::pg_catalog.int8)), 0)::pg_catalog.text \
     from pg_catalog.pg_largeobject";

/// User tables' columns that can hold a large object's OID: `oid`, or a domain over it
/// (the `lo` extension's `lo`); whether the type is `lo`.
const REFERENCE_COLUMNS: &str = "select n.nspname::text, c.relname::text, a.attname::text, ty.typname = 'lo'
       from pg_catalog.pg_attribute a
       join pg_catalog.pg_class c on c.oid = a.attrelid
       join pg_catalog.pg_namespace n on n.oid = c.relnamespace
       join pg_catalog.pg_type ty on ty.oid = a.atttypid
      where c.relkind = 'r' and a.attnum > 0 and not a.attisdropped
        and n.nspname not in ('pg_catalog', 'information_schema') and n.nspname !~ '^pg_toast'
        and (a.atttypid = 'pg_catalog.oid'::pg_catalog.regtype
             or (ty.typtype = 'd' and ty.typbasetype = 'pg_catalog.oid'::pg_catalog.regtype))
      order by 1, 2, 3";

/// Distinct non-null values of a column, and how many of them name a large object.
fn references_sql(schema: &str, table: &str, column: &str) -> String {
    format!(
        "select pg_catalog.count(*), pg_catalog.count(m.oid) from (select distinct {c}::pg_catalog.oid as v \
           from {s}.{t} where {c} is not null) d \
           left join pg_catalog.pg_largeobject_metadata m on m.oid operator(pg_catalog.=) d.v",
        c = quote_ident(column),
        s = quote_ident(schema),
        t = quote_ident(table),
    )
}

async fn totals(pool: &PgPool, sql: &'static str) -> Result<(i64, String), sqlx::Error> {
    sqlx::query_as(sql).fetch_one(pool).await
}

async fn references(pool: &PgPool, schema: &str, table: &str, column: &str) -> Result<(i64, i64), sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(references_sql(schema, table, column))).fetch_one(pool).await
}

/// What the comparison with the primary found.
enum Compared {
    /// Objects and pages match: how many of each.
    Same(i64, i64),
    Differs(String),
    /// Not compared with the primary: why (none, a partial dump without objects).
    Unmatched(String),
    Error(String),
}

async fn compare(cx: &Context, restored: (i64, String)) -> Compared {
    let primary = match cx.primary_or_skip("large_objects") {
        Ok(p) => p,
        Err(f) => return Compared::Unmatched(f.detail),
    };
    let p = match primary.timed(totals(&primary.pool, METADATA)).await {
        Ok(p) => p,
        Err(e) => return Compared::Error(format!("reading the primary's large objects: {e}")),
    };
    if !cx.settings.dump_scope.is_empty() && restored.0 == 0 {
        return Compared::Unmatched(format!(
            "the primary has {} large objects; a partial dump (dump_scope) leaves them out unless taken with --blobs",
            p.0
        ));
    }
    if p.0 != restored.0 {
        return Compared::Differs(format!("primary {} large objects, restored {}", p.0, restored.0));
    }
    if p.1 != restored.1 {
        return Compared::Differs(format!("same {} large objects, different OIDs", p.0));
    }
    let (pd, rd) = tokio::join!(primary.timed(totals(&primary.pool, DATA)), totals(&cx.restored, DATA));
    match (pd, rd) {
        (Ok(p), Ok(r)) if p == r => Compared::Same(restored.0, p.0),
        (Ok(p), Ok(r)) if p.0 != r.0 => Compared::Differs(format!(
            "same {} large objects, primary {} data pages, restored {}",
            restored.0, p.0, r.0
        )),
        (Ok(p), Ok(_)) => {
            Compared::Differs(format!("same {} large objects and {} pages, different bytes", restored.0, p.0))
        }
        (Err(e), _) if e.to_string().contains("permission denied") => Compared::Error(format!(
            "the primary refuses to show large objects' data to drcheck's role ({e}): grant it pg_read_all_data"
        )),
        (Err(e), _) => Compared::Error(format!("reading the primary's large-object data: {e}")),
        (_, Err(e)) => Compared::Error(format!("reading the copy's large-object data: {e}")),
    }
}

/// References on the copy to large objects it does not have: `(checked columns, dangling
/// descriptions)`.
async fn dangling(cx: &Context) -> Result<(usize, Vec<String>), String> {
    let columns: Vec<(String, String, String, bool)> =
        sqlx::query_as(REFERENCE_COLUMNS).fetch_all(&cx.restored).await.map_err(|e| format!("listing columns: {e}"))?;
    let mut checked = 0;
    let mut found = Vec::new();
    for (schema, table, column, is_lo) in columns {
        let t = crate::TableName { schema: schema.clone(), name: table.clone() };
        if cx.excluded(&t) || !cx.in_scope(&t) {
            continue;
        }
        let (values, present) =
            references(&cx.restored, &schema, &table, &column).await.map_err(|e| format!("{t}.{column}: {e}"))?;
        // An `oid` column is a reference when its values name large objects — here or,
        // if none here, on the primary (a copy without its objects names none).
        let mut is_reference = is_lo || present > 0;
        if !is_reference
            && values > 0
            && let crate::Primary::Available(p) = &cx.primary
        {
            is_reference = matches!(p.timed(references(&p.pool, &schema, &table, &column)).await, Ok((_, n)) if n > 0);
        }
        if !is_reference {
            continue;
        }
        checked += 1;
        if present < values {
            found.push(format!("{t}.{column}: {} of {values} large objects it names are missing", values - present));
        }
    }
    Ok((checked, found))
}

#[async_trait]
impl Validator for LargeObjects {
    fn name(&self) -> &'static str {
        "large_objects"
    }

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        let name = self.name();
        let restored = match totals(&cx.restored, METADATA).await {
            Ok(r) => r,
            Err(e) => return vec![Finding::new(name, Status::Error, format!("reading the copy's large objects: {e}"))],
        };
        let compared = compare(cx, restored.clone()).await;
        let refs = dangling(cx).await;
        let mut how = Vec::new();
        let (objects, pages) = match &compared {
            Compared::Same(o, p) => (*o as u64, *p as u64),
            _ => (0, 0),
        };
        if let Compared::Same(o, p) = &compared {
            how.push(format!("{o} large objects and {p} data pages match the primary"));
        }
        if let Compared::Unmatched(why) = &compared {
            how.push(format!("not compared with the primary: {why}"));
        }
        let columns = match &refs {
            Ok((n, _)) => *n as u64,
            Err(_) => 0,
        };
        how.push(format!("{columns} referencing columns resolve"));
        let mut failures = Vec::new();
        if let Compared::Differs(d) = &compared {
            failures.push(d.clone());
        }
        if let Ok((_, d)) = &refs
            && !d.is_empty()
        {
            failures.push(format!("dangling references: {}", some_of(d, 10)));
        }
        if !failures.is_empty() {
            return vec![Finding::new(name, Status::Failed, failures.join("; "))];
        }
        let errors: Vec<String> = [
            if let Compared::Error(e) = &compared { Some(e.clone()) } else { None },
            refs.as_ref().err().map(|e| format!("checking references: {e}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !errors.is_empty() {
            return vec![Finding::new(name, Status::Error, errors.join("; "))];
        }
        // Nothing compared and no reference checked: enforce_coverage makes it skipped.
        vec![
            Finding::new(name, Status::Passed, how.join("; "))
                .covered("large_objects", objects)
                .covered("large_object_pages", pages)
                .covered("reference_columns", columns),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_queries_quote_every_identifier() {
        let sql = references_sql("we\"ird", "Docs", "file id");
        assert!(sql.contains("\"we\"\"ird\".\"Docs\""), "{sql}");
        assert!(sql.contains("\"file id\"::pg_catalog.oid"), "{sql}");
        assert!(sql.contains("operator(pg_catalog.=)"), "{sql}");
    }
}
