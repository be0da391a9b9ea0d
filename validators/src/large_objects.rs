//! `large_objects`: the copy holds the primary's large objects as of the copy's point T
//! ([`crate::asof`]) — the same objects (pg_dump keeps their OIDs) with the same bytes —
//! and nothing in it refers to a large object it lacks.
//!
//! - **Against the primary**, in bounded ranges of OIDs (never one statement over
//!   `pg_largeobject`, each range read through its index; sampled in whole ranges above
//!   `checksum_sample_rows` pages; under `primary_read_budget` the rotation's slice of the
//!   ranges, dealt evenly, so a run reads its share and says what it read): each
//!   object's pages counted and hashed (`md5` of each page, with its number) on both
//!   sides and compared object by object. An object the primary created, wrote or
//!   unlinked since T is counted, not compared; an object the primary held unchanged at T
//!   must be in the copy with the same bytes — where changes since T cannot be told (a
//!   dump without commit times), a difference is inconclusive. Owners and ACLs are not
//!   compared (a restore may map roles). Reading `pg_largeobject` takes
//!   `pg_read_all_data` (or superuser); without it the finding is `error`, naming the grant.
//! - **On the copy alone**: columns of type `lo` (the `lo` extension's domain) and `oid`
//!   columns that hold large-object OIDs — on the copy or, when it has none, on the
//!   primary — must name objects the copy has. A reference that dangles on the primary
//!   the same way is the primary's, not the backup's: a note. A dump taken with `-t` or
//!   `-n` leaves large objects out (pg_dump's default): every such reference dangles.
//!
//! A deliberate partial dump (`[target] dump_scope`) without large objects is not
//! compared (the objects were never meant to be in it); its references still have to
//! resolve. A sparse object (written with holes) is stored page by page differently
//! after a restore and would differ — a documented limit.

use crate::asof::{self, Bind};
use crate::checksums::plan::{Range, plan};
use crate::context::{Context, Validator};
use crate::finding::Said;
use crate::finding::{Failure, Finding, INSUFFICIENT_PRIVILEGE, Status, some_of};
use crate::primary::PrimaryDb;
use async_trait::async_trait;
use drcheck_config::quote_ident;
use sqlx::PgPool;
use std::collections::{BTreeMap, BTreeSet};

pub struct LargeObjects;

/// A large object's page: `LOBLKSIZE`, PostgreSQL's default (BLCKSZ / 4).
const LOBLKSIZE: f64 = 2048.0;

/// The name the rotation deals large objects' OID ranges under.
const LO_RANGES: &str = "pg_catalog.pg_largeobject";

/// OIDs named one by one in a finding, at most.
const NAMED: usize = 10;

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

/// Distinct non-null values of a column, how many of them name a large object, and up
/// to 100 of those that do not.
fn references_sql(schema: &str, table: &str, column: &str) -> String {
    format!(
        "select pg_catalog.count(*), pg_catalog.count(m.oid), \
                (pg_catalog.array_agg(d.v::pg_catalog.int8) filter (where m.oid is null))[1:100] \
           from (select distinct {c}::pg_catalog.oid as v from {s}.{t} where {c} is not null) d \
           left join pg_catalog.pg_largeobject_metadata m on m.oid operator(pg_catalog.=) d.v",
        c = quote_ident(column),
        s = quote_ident(schema),
        t = quote_ident(table),
    )
}

async fn references(
    pool: &PgPool,
    schema: &str,
    table: &str,
    column: &str,
) -> Result<(i64, i64, Vec<i64>), sqlx::Error> {
    let (n, present, missing): (i64, i64, Option<Vec<i64>>) =
        sqlx::query_as(sqlx::AssertSqlSafe(references_sql(schema, table, column))).fetch_one(pool).await?;
    Ok((n, present, missing.unwrap_or_default()))
}

/// One side's objects in an OID range: OID → (pages, hash sum, changed since T).
type Objects = BTreeMap<i64, (i64, i128, bool)>;

/// The objects of one OID range, with their pages' count and hash; on the primary,
/// whether the object (its metadata row or any page) was written since T.
async fn objects_in(
    pool: &PgPool,
    primary: Option<&PrimaryDb>,
    since: &asof::Since,
    range: Range,
) -> Result<Objects, sqlx::Error> {
    let Range::Keys(lo, hi) = range;
    let (mchanged, pchanged, extra) = match primary.and_then(|_| since.changed("m", 3)) {
        Some((m, b)) => {
            let (p, _) = since.changed("p", 3).expect("same mode");
            (m, p, b)
        }
        None => ("false".into(), "false".into(), vec![]),
    };
    let sql = format!(
        "select m.oid::pg_catalog.int8, coalesce(d.pages, 0), coalesce(d.h, '0'), ({mchanged}) or coalesce(d.changed, false)
           from pg_catalog.pg_largeobject_metadata m
           left join (select p.loid, pg_catalog.count(*) as pages,
                             pg_catalog.sum(pg_catalog.hashtextextended(
                                 pg_catalog.concat_ws(' ', p.pageno, pg_catalog.md5(p.data)), 0::pg_catalog.int8))::pg_catalog.text as h,
                             pg_catalog.bool_or({pchanged}) as changed
                        from pg_catalog.pg_largeobject p
                       where p.loid operator(pg_catalog.>=) $1::pg_catalog.int8::pg_catalog.oid
                         and p.loid operator(pg_catalog.<=) $2::pg_catalog.int8::pg_catalog.oid
                       group by p.loid) d on d.loid operator(pg_catalog.=) m.oid
          where m.oid operator(pg_catalog.>=) $1::pg_catalog.int8::pg_catalog.oid
            and m.oid operator(pg_catalog.<=) $2::pg_catalog.int8::pg_catalog.oid"
    );
    // Compared as OIDs, not as int8: a cast column uses no index, and every range's
    // statement read the whole of pg_largeobject (issue 50). The range is [lo, hi).
    let mut binds = vec![Bind::Int(lo), Bind::Int(hi - 1)];
    binds.extend(extra);
    let q = asof::bind_all(sqlx::query_as::<_, (i64, i64, String, bool)>(sqlx::AssertSqlSafe(sql)), &binds)
        .persistent(false);
    let rows = match primary {
        Some(p) => p.timed(q.fetch_all(pool)).await?,
        None => q.fetch_all(pool).await?,
    };
    Ok(rows.into_iter().map(|(oid, pages, h, changed)| (oid, (pages, h.parse().unwrap_or(0), changed))).collect())
}

/// What the comparison with the primary found.
#[derive(Default)]
struct Compared {
    objects: u64,
    pages: u64,
    /// Created, written or unlinked on the primary since T.
    created: u64,
    written: u64,
    unlinked: u64,
    lost: Vec<i64>,
    differs: Vec<i64>,
    /// Differences nothing tells from a change since T.
    unknown: Vec<i64>,
    sampled: bool,
    /// Under a rotation: the OID ranges, and how many this run compared.
    ranges: Option<(usize, usize)>,
    /// The primary's pages this run read (what its reads of `pg_largeobject` cost).
    primary_pages: u64,
}

async fn compare(cx: &Context, primary: &PrimaryDb) -> Result<Compared, Failure> {
    let bounds =
        "select pg_catalog.min(oid::pg_catalog.int8), pg_catalog.max(oid::pg_catalog.int8), pg_catalog.count(*)
                    from pg_catalog.pg_largeobject_metadata";
    // Its size on disk, not `reltuples`: a catalog never analyzed says -1, which once
    // made one range of every object — every page of the primary's in one statement.
    let pages =
        "select pg_catalog.pg_relation_size('pg_catalog.pg_largeobject'::pg_catalog.regclass)::pg_catalog.float8";
    let (pb, cb, est) = tokio::join!(
        primary.timed(sqlx::query_as::<_, (Option<i64>, Option<i64>, i64)>(bounds).fetch_one(&primary.pool)),
        sqlx::query_as::<_, (Option<i64>, Option<i64>, i64)>(bounds).fetch_one(&cx.restored),
        primary.timed(sqlx::query_scalar::<_, f64>(pages).fetch_one(&primary.pool)),
    );
    let (pb, cb) = (pb.map_err(Failure::from)?, cb.map_err(Failure::from)?);
    let mut out = Compared::default();
    // The OID ranges are the primary's alone: objects the copy holds beyond them are
    // counted (not on the primary now) and never open ranges of their own.
    let (Some(lo), Some(hi)) = (pb.0, pb.1) else {
        out.unlinked += cb.2.max(0) as u64;
        return Ok(out);
    };
    let outside: i64 = sqlx::query_scalar(
        "select pg_catalog.count(*) from pg_catalog.pg_largeobject_metadata
          where oid::pg_catalog.int8 < $1::pg_catalog.int8 or oid::pg_catalog.int8 > $2::pg_catalog.int8",
    )
    .bind(lo)
    .bind(hi)
    .fetch_one(&cx.restored)
    .await
    .map_err(Failure::from)?;
    out.unlinked += outside.max(0) as u64;
    // Ranges of about `checksum_chunk_rows` pages, by the objects' average size (pages
    // counted as LOBLKSIZE bytes of the relation: an overestimate, so ranges err small).
    let objects = pb.2.max(cb.2).max(1) as f64;
    let per_object = (est.unwrap_or(0.0) / LOBLKSIZE / objects).max(1.0);
    let mut chunk = (cx.settings.checksum_chunk_rows as f64 / per_object).max(1.0) as u64;
    let sample = (cx.settings.checksum_sample_rows as f64 / per_object).max(1.0) as u64;
    let (ranges, sampled) = match &cx.rotation {
        // Under primary_read_budget: the rotation's slice of ranges small enough that the
        // slice is its share (at least four ranges a slice), whatever their count.
        Some(r) if r.slices > 1 => {
            chunk = chunk.min((objects / (4.0 * f64::from(r.slices))).max(1.0) as u64);
            let (all, _) = plan(lo, hi, objects, chunk, u64::MAX);
            let n = all.len();
            let mine: Vec<Range> =
                all.into_iter().enumerate().filter(|(i, _)| r.takes_evenly(LO_RANGES, *i)).map(|(_, x)| x).collect();
            out.ranges = Some((n, mine.len()));
            (mine, false)
        }
        _ => plan(lo, hi, objects, chunk, sample),
    };
    out.sampled = sampled;
    let known = cx.since.known();
    let mut suspects: Vec<i64> = Vec::new();
    for range in ranges {
        let (p, c) = tokio::join!(
            objects_in(&primary.pool, Some(primary), &cx.since, range),
            objects_in(&cx.restored, None, &cx.since, range)
        );
        let (p, c) = (p.map_err(Failure::from)?, c.map_err(Failure::from)?);
        out.primary_pages += p.values().map(|(pages, _, _)| *pages as u64).sum::<u64>();
        for (oid, (pages, h, changed)) in &p {
            match (c.get(oid), changed) {
                (None, true) => out.created += 1,
                (Some(_), true) => out.written += 1,
                (None, false) if known => suspects.push(*oid),
                (None, false) => out.unknown.push(*oid),
                (Some((cp, ch, _)), false) if (cp, ch) == (pages, h) => {
                    out.objects += 1;
                    out.pages += *pages as u64;
                }
                (Some(_), false) if known => out.differs.push(*oid),
                (Some(_), false) => out.unknown.push(*oid),
            }
        }
        out.unlinked += c.keys().filter(|o| !p.contains_key(o)).count() as u64;
    }
    // An object the copy lacks whose creating transaction had not committed at T (in
    // flight then) was created since.
    if !suspects.is_empty() {
        let xmins: Vec<(i64, i64)> = primary
            .timed(
                sqlx::query_as(
                    "select m.oid::pg_catalog.int8, ((m.xmin)::pg_catalog.text)::pg_catalog.int8
                       from pg_catalog.pg_largeobject_metadata m
                      where m.oid::pg_catalog.int8 operator(pg_catalog.=) any($1::pg_catalog.int8[])",
                )
                .bind(&suspects)
                .fetch_all(&primary.pool),
            )
            .await
            .map_err(Failure::from)?;
        let ids: Vec<i64> = xmins.iter().map(|(_, x)| *x).collect::<BTreeSet<_>>().into_iter().collect();
        let committed =
            asof::committed_at_point(&cx.since, &cx.restored, primary, &ids).await.map_err(Failure::from)?;
        for (oid, x) in xmins {
            match committed.get(&x).copied().flatten() {
                Some(true) => out.lost.push(oid),
                Some(false) => out.created += 1,
                None => out.unknown.push(oid),
            }
        }
    }
    Ok(out)
}

/// At most [`NAMED`] OIDs, then how many more.
fn oids(list: &[i64]) -> String {
    some_of(&list.iter().map(i64::to_string).collect::<Vec<_>>(), NAMED)
}

/// References on the copy to large objects it does not have: `(checked columns, dangling
/// descriptions, notes of references that dangle on the primary too)`.
async fn dangling(cx: &Context) -> Result<(usize, Vec<String>, Vec<String>), Failure> {
    let columns: Vec<(String, String, String, bool)> = sqlx::query_as(REFERENCE_COLUMNS)
        .fetch_all(&cx.restored)
        .await
        .map_err(|e| Failure::from(e).doing("listing columns"))?;
    let mut checked = 0;
    let (mut found, mut notes) = (Vec::new(), Vec::new());
    let primary = match &cx.primary {
        crate::context::Primary::Available(p) => Some(p),
        crate::context::Primary::Unavailable(_) => None,
    };
    for (schema, table, column, is_lo) in columns {
        let t = crate::finding::TableName { schema: schema.clone(), name: table.clone() };
        if cx.excluded(&t) || !cx.in_scope(&t) {
            continue;
        }
        let (values, present, missing) = references(&cx.restored, &schema, &table, &column)
            .await
            .map_err(|e| Failure::from(e).doing(format_args!("{t}.{column}")))?;
        // An `oid` column is a reference when its values name large objects — here or,
        // if none here, on the primary (a copy without its objects names none).
        let mut is_reference = is_lo || present > 0;
        // Reading the column on the primary reads its table whole: under a read budget,
        // only a table within one slice's share (issue 50).
        let within_budget = match (&cx.rotation, primary) {
            (Some(r), Some(p)) if !is_reference && values > 0 && r.slices > 1 => {
                let size = p
                    .timed(
                        sqlx::query_scalar::<_, i64>(
                            "select pg_catalog.pg_table_size(c.oid) from pg_catalog.pg_class c
                               join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) c.relnamespace
                              where n.nspname operator(pg_catalog.=) $1 and c.relname operator(pg_catalog.=) $2",
                        )
                        .bind(&schema)
                        .bind(&table)
                        .fetch_optional(&p.pool),
                    )
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or(i64::MAX);
                let fits = size.max(0) as u64 <= r.share_bytes;
                if !fits {
                    notes.push(format!(
                        "{t}.{column}: not looked up on the primary (the table is larger than one slice of primary_read_budget)"
                    ));
                }
                fits
            }
            _ => true,
        };
        if !is_reference
            && values > 0
            && within_budget
            && let Some(p) = primary
        {
            is_reference =
                matches!(p.timed(references(&p.pool, &schema, &table, &column)).await, Ok((_, n, _)) if n > 0);
        }
        if !is_reference {
            continue;
        }
        checked += 1;
        if present >= values {
            continue;
        }
        // Missing on the primary as well: the primary dangles the same way.
        let also: BTreeSet<i64> = match primary {
            Some(p) => p
                .timed(
                    sqlx::query_scalar::<_, i64>(
                        "select v from pg_catalog.unnest($1::pg_catalog.int8[]) v
                          where not exists (select 1 from pg_catalog.pg_largeobject_metadata m
                                             where m.oid::pg_catalog.int8 operator(pg_catalog.=) v)",
                    )
                    .bind(&missing)
                    .fetch_all(&p.pool),
                )
                .await
                .map_err(|e| format!("{t}.{column} on the primary: {}", e.said()))?
                .into_iter()
                .collect(),
            None => BTreeSet::new(),
        };
        let ours: Vec<i64> = missing.iter().copied().filter(|v| !also.contains(v)).collect();
        if !also.is_empty() {
            notes.push(format!("{t}.{column}: {} references dangle on the primary too (not the backup's)", also.len()));
        }
        if !ours.is_empty() || (missing.len() as i64) < values - present {
            let n = (values - present) - also.len() as i64;
            if n > 0 {
                found.push(format!(
                    "{t}.{column}: {n} of {values} large objects it names are missing ({})",
                    oids(&ours)
                ));
            }
        }
    }
    Ok((checked, found, notes))
}

#[async_trait]
impl Validator for LargeObjects {
    fn weighs_undecided(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        "large_objects"
    }

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        let name = self.name();
        let restored_count: Result<i64, _> =
            sqlx::query_scalar("select pg_catalog.count(*) from pg_catalog.pg_largeobject_metadata")
                .fetch_one(&cx.restored)
                .await;
        let restored_count = match restored_count {
            Ok(n) => n,
            Err(e) => {
                return vec![Finding::new(
                    name,
                    Status::Error,
                    format!("reading the copy's large objects: {}", e.said()),
                )];
            }
        };
        let mut how = Vec::new();
        let (mut failures, mut errors, mut inconclusive) = (Vec::new(), Vec::new(), Vec::new());
        let mut compared = Compared::default();
        match cx.primary_or_skip(name) {
            Err(f) => how.push(format!("not compared with the primary: {}", f.detail)),
            Ok(_) if !cx.settings.dump_scope.is_empty() && restored_count == 0 => how.push(
                "not compared with the primary: a partial dump (dump_scope) leaves them out unless taken with --blobs"
                    .into(),
            ),
            Ok(primary) => match compare(cx, primary).await {
                Ok(c) => compared = c,
                Err(e) if e.is(INSUFFICIENT_PRIVILEGE) => errors.push(format!(
                    "the primary refuses to show large objects' data to drcheck's role ({e}): grant it pg_read_all_data"
                )),
                Err(e) => errors.push(format!("comparing large objects: {e}")),
            },
        }
        let c = &compared;
        if c.objects > 0 || c.created + c.written + c.unlinked > 0 {
            how.push(format!(
                "{} large objects and {} data pages match the primary{}",
                c.objects,
                c.pages,
                if c.sampled { " (sampled in whole OID ranges)" } else { "" }
            ));
        }
        if let (Some((all, mine)), Some(r)) = (c.ranges, &cx.rotation) {
            how.push(format!(
                "{mine} of {all} OID ranges compared this run, {} of the primary's large objects read ({})",
                crate::finding::human_bytes(c.primary_pages * LOBLKSIZE as u64),
                r.describe()
            ));
        }
        if c.created + c.written + c.unlinked > 0 {
            how.push(format!(
                "since the copy's point the primary created {}, wrote {} and unlinked {} (counted, not compared)",
                c.created, c.written, c.unlinked
            ));
        }
        if !c.lost.is_empty() {
            failures.push(format!(
                "{} large objects the primary held unchanged at the copy's point are missing: {}",
                c.lost.len(),
                oids(&c.lost)
            ));
        }
        if !c.differs.is_empty() {
            failures.push(format!(
                "{} large objects differ from the primary's, which did not change them since: {}",
                c.differs.len(),
                oids(&c.differs)
            ));
        }
        if !c.unknown.is_empty() {
            inconclusive.push(format!(
                "{} large objects differ or are missing, and {}: {} — to prove them, {}",
                c.unknown.len(),
                cx.since.describe(),
                oids(&c.unknown),
                cx.since.how_to_prove()
            ));
        }
        let columns = match dangling(cx).await {
            Ok((n, found, notes)) => {
                if !found.is_empty() {
                    failures.push(format!("dangling references: {}", some_of(&found, 10)));
                }
                how.extend(notes);
                n as u64
            }
            Err(e) => {
                errors.push(format!("checking references: {e}"));
                0
            }
        };
        how.push(format!("{columns} referencing columns resolve"));
        let finding = if !failures.is_empty() {
            Finding::new(
                name,
                Status::Failed,
                format!("{}{}", failures.join("; "), crate::finding::also_could_not("check", &errors)),
            )
        } else if !errors.is_empty() {
            Finding::new(name, Status::Error, errors.join("; "))
        } else {
            // Nothing compared and no reference checked: enforce_coverage makes it skipped.
            Finding::new(name, Status::Passed, how.join("; "))
                .covered("large_objects", c.objects)
                .covered("large_object_pages", c.pages)
                .covered("reference_columns", columns)
        };
        // What it read of the primary's large objects: their pages' bytes (issue 50).
        let finding = finding.with("primary_read_bytes", (c.primary_pages as f64) * LOBLKSIZE);
        let undecided = u64::from(!c.unknown.is_empty());
        vec![finding.with(crate::finding::UNDECIDED_TABLES, undecided as f64).inconclusive(inconclusive)]
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
