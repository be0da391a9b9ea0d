//! `checksums`: an order-independent content hash of every table — the count and the
//! sum of `hashtextextended(row::text, 0)` — computed on both sides (with identical
//! session settings, so row text is identical) and compared. Rows written after the
//! backup are left out where the table has an `as_of` column. Tables with a
//! single-column integer key are hashed in key ranges of about `checksum_chunk_rows`
//! rows, so no query on the primary runs long; tables larger than
//! `checksum_sample_rows` are sampled in whole chunks spread over the key range, and
//! the detail says how many rows were compared.
//!
//! Rows are hashed by value (`hash_record_extended`) where every column is of a built-in
//! type with a hash function, else by their text (types the database defines, whose
//! hash the restored copy would compute with its own functions, and enums, whose hash
//! is an OID that a logical restore reassigns); both sides run each chunk at the same
//! time, and a table's chunks run up to `primary_concurrency` at once. Built-ins are
//! called schema-qualified with exact argument types.
//!
//! Tables without such a key (UUID or composite keys, no key) are hashed in block
//! ranges (`ctid`) of about `checksum_chunk_rows` rows on each side: the two copies lay
//! rows out differently, but count and hash sum add up, so each side's totals are
//! compared. Past `checksum_sample_rows`, both sides keep the same rows — those whose
//! own hash falls in a slice of the hash space — so the sample is comparable too.

use crate::{Context, Cut, Finding, Status, TableName, Validator, catalog, some_of};
use async_trait::async_trait;
use drcheck_config::quote_ident;
use futures::stream::{self, StreamExt};
use sqlx::PgPool;

pub struct Checksums;

/// One query's worth of a table: all of it, or keys in `[lo, hi)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Range {
    Whole,
    Keys(i64, i64),
}

/// Splits `[min, max]` into chunks of about `chunk_rows` rows, and keeps an evenly
/// spread subset when the table holds more than `sample_rows`.
pub(crate) fn plan(min: i64, max: i64, rows: f64, chunk_rows: u64, sample_rows: u64) -> (Vec<Range>, bool) {
    let span = (max as i128 - min as i128 + 1).max(1);
    // A table never analyzed has no estimate: assume its keys are dense.
    let rows = if rows >= 1.0 { rows } else { span as f64 };
    let density = if rows >= 1.0 { rows / span as f64 } else { 1.0 };
    let width = ((chunk_rows as f64 / density.max(1e-9)).ceil() as i128).clamp(1, span);
    let chunks = (span + width - 1) / width;
    let all: Vec<Range> = (0..chunks)
        .map(|i| {
            let lo = min as i128 + i * width;
            let hi = (lo + width).min(max as i128 + 1);
            Range::Keys(lo as i64, hi as i64)
        })
        .collect();
    if rows <= sample_rows as f64 {
        return (all, false);
    }
    let keep = (sample_rows as f64 / rows * all.len() as f64).ceil().max(1.0) as usize;
    let step = all.len() as f64 / keep as f64;
    let sampled: Vec<Range> = (0..keep).map(|i| all[((i as f64 * step) as usize).min(all.len() - 1)]).collect();
    (sampled, true)
}

struct Query {
    sql: String,
    binds: Vec<String>,
}

/// How a row is hashed: by its values (`hash_record_extended`: each column's own hash
/// function, no text rendering — about twice as fast), or by its text
/// (`hashtextextended(row::text)`) for tables with a column type that has no hash
/// function (json, xml, point, …). Both sides always use the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hash {
    Record,
    Text,
}

impl Hash {
    fn expr(self) -> &'static str {
        match self {
            // Schema-qualified, with exact argument types: no overload the restored copy
            // defines elsewhere can be chosen instead (and `catalog` checks pg_catalog).
            Hash::Record => "pg_catalog.hash_record_extended(drcheck_row.*, 0::pg_catalog.int8)",
            Hash::Text => "pg_catalog.hashtextextended((drcheck_row.*)::pg_catalog.text, 0::pg_catalog.int8)",
        }
    }
}

fn query_for(t: &TableName, key: Option<&str>, cut: Option<&Cut>, range: Range, hash: Hash) -> Query {
    let mut conds = Vec::new();
    let mut binds = Vec::new();
    if let (Range::Keys(lo, hi), Some(k)) = (range, key) {
        binds.push(lo.to_string());
        binds.push(hi.to_string());
        conds.push(format!("{0} >= $1::pg_catalog.int8 and {0} < $2::pg_catalog.int8", quote_ident(k)));
    }
    if let Some(c) = cut {
        conds.push(c.condition(binds.len() + 1));
        binds.extend(c.binds());
    }
    let filter = if conds.is_empty() { String::new() } else { format!(" where {}", conds.join(" and ")) };
    Query {
        sql: format!(
            "select pg_catalog.count(*), coalesce(pg_catalog.sum({}), 0)::pg_catalog.text from {} drcheck_row{filter}",
            hash.expr(),
            t.quoted()
        ),
        binds,
    }
}

/// Whether every column of `t` can be hashed by value: asked of the primary's catalog.
/// Only built-in types (directly, or as the element of an array, the base of a domain
/// or the subtype of a range) whose default hash operator class exists: a type the
/// database defines hashes through functions the restored copy defines too, and an
/// enum's hash is its label's OID, which a logical restore reassigns. Those tables are
/// hashed by their text.
async fn hash_for(primary: &crate::primary::PrimaryDb, t: &TableName) -> Result<Hash, sqlx::Error> {
    let sql = format!(
        "with recursive parts(t) as (
           select a.atttypid from pg_attribute a
            where a.attrelid = '{table}'::regclass and a.attnum > 0 and not a.attisdropped
           union
           select coalesce(nullif(ty.typbasetype, 0),
                           case when ty.typcategory = 'A' then nullif(ty.typelem, 0) end,
                           (select r.rngsubtype from pg_range r where r.rngtypid = ty.oid))
             from parts p join pg_type ty on ty.oid = p.t
            where ty.typtype in ('d', 'r') or ty.typcategory = 'A')
         select coalesce(bool_and(
                  case when ty.typtype in ('d', 'r') or ty.typcategory = 'A' then true
                       else ty.typtype = 'b' and ty.oid < {first} and exists (
                              select 1 from pg_opclass c join pg_am am on am.oid = c.opcmethod
                               where am.amname = 'hash' and c.opcdefault and c.opcintype = ty.oid) end), true)
           from parts join pg_type ty on ty.oid = parts.t",
        table = t.quoted().replace('\'', "''"),
        first = crate::guard::FIRST_NORMAL_OID,
    );
    let by_value: bool = primary.timed(sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(&primary.pool)).await?;
    Ok(if by_value { Hash::Record } else { Hash::Text })
}

async fn run(pool: &PgPool, q: &Query) -> Result<(i64, String), sqlx::Error> {
    let mut query = sqlx::query_as::<_, (i64, String)>(sqlx::AssertSqlSafe(q.sql.clone()));
    for b in &q.binds {
        query = query.bind(b.clone());
    }
    query.fetch_one(pool).await
}

/// What comparing one table found.
enum Outcome {
    Match {
        rows: i64,
        sampled: bool,
        estimated: f64,
    },
    /// Rows up to the cut-off the copy has and the primary no longer does: deleted
    /// after the backup, not a loss — but those ranges could not be compared.
    Deleted(String),
    Differs(String),
    Failed(String),
}

/// Rows per 1024 kept when sampling a table of `rows` rows down to `sample_rows`.
pub(crate) fn sample_slice(rows: f64, sample_rows: u64) -> Option<u32> {
    (rows > sample_rows as f64).then(|| ((sample_rows as f64 / rows * 1024.0).ceil() as u32).clamp(1, 1024))
}

/// Count and hash sum of `t` on one side, in block ranges of about `chunk_rows` rows.
/// On the primary (`primary` given) each query is counted and timed.
/// How a keyless table is hashed: the same on both sides.
#[derive(Clone, Copy)]
struct BlockPlan<'a> {
    cut: Option<&'a Cut>,
    chunk_rows: u64,
    /// Rows per 1024 kept (sampling), if sampled.
    slice: Option<u32>,
    hash: Hash,
}

async fn block_totals(
    pool: &PgPool,
    primary: Option<&crate::primary::PrimaryDb>,
    t: &TableName,
    plan: &BlockPlan<'_>,
) -> Result<(i64, i128), sqlx::Error> {
    let BlockPlan { cut, chunk_rows, slice, hash } = *plan;
    let size = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select (pg_relation_size('{0}'::regclass) / current_setting('block_size')::int)::bigint,
                greatest(reltuples, 0)::float8 from pg_class where oid = '{0}'::regclass",
        t.quoted().replace('\'', "''")
    )))
    .fetch_one(pool);
    let (blocks, tuples): (i64, f64) = match primary {
        Some(p) => p.timed(size).await?,
        None => size.await?,
    };
    let per_block = if blocks > 0 && tuples >= 1.0 { tuples / blocks as f64 } else { 100.0 };
    let step = ((chunk_rows as f64 / per_block.max(1.0)).ceil() as i64).max(1);
    let (mut count, mut sum) = (0i64, 0i128);
    let mut lo = 0i64;
    // One more range past the end: rows of pages added since the size was read.
    while lo <= blocks {
        let hi = if lo + step > blocks { i64::from(u32::MAX) } else { lo + step };
        let mut conds = vec!["ctid >= $1::pg_catalog.tid and ctid < $2::pg_catalog.tid".to_string()];
        let mut binds = vec![format!("({lo},0)"), format!("({hi},0)")];
        if let Some(c) = cut {
            conds.push(c.condition(binds.len() + 1));
            binds.extend(c.binds());
        }
        if let Some(k) = slice {
            conds.push(format!(
                "(pg_catalog.hashtextextended((drcheck_row.*)::pg_catalog.text, 42::pg_catalog.int8) & 1023) < {k}"
            ));
        }
        let q = Query {
            sql: format!(
                "select pg_catalog.count(*), coalesce(pg_catalog.sum({}), 0)::pg_catalog.text from {} drcheck_row where {}",
                hash.expr(),
                t.quoted(),
                conds.join(" and ")
            ),
            binds,
        };
        let (c, s) = match primary {
            Some(p) => p.timed(run(pool, &q)).await?,
            None => run(pool, &q).await?,
        };
        count += c;
        sum += s.parse::<i128>().unwrap_or(0);
        lo = hi;
    }
    Ok((count, sum))
}

/// A table without an integer key: each side's totals over its own block ranges.
async fn compare_by_blocks(
    cx: &Context,
    primary: &crate::primary::PrimaryDb,
    t: &TableName,
    estimated: f64,
    hash: Hash,
) -> Outcome {
    let cut = match as_of_cutoff(cx, t).await {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(format!("{t}: {e}")),
    };
    let slice = sample_slice(estimated, cx.settings.checksum_sample_rows);
    let plan = BlockPlan { cut: cut.as_ref(), chunk_rows: cx.settings.checksum_chunk_rows, slice, hash };
    let (p, r) =
        tokio::join!(block_totals(&primary.pool, Some(primary), t, &plan), block_totals(&cx.restored, None, t, &plan));
    match (p, r) {
        (Ok(p), Ok(r)) if p == r => {
            Outcome::Match { rows: p.0, sampled: slice.is_some(), estimated: estimated.max(p.0 as f64) }
        }
        // More rows up to the cut-off in the copy: the primary deleted some since.
        (Ok(p), Ok(r)) if cut.is_some() && r.0 > p.0 => Outcome::Deleted(format!(
            "{t}: {} rows deleted on the primary since the backup (not comparable by hash)",
            r.0 - p.0
        )),
        (Ok(p), Ok(r)) if p.0 != r.0 => Outcome::Differs(format!("{t}: primary {} rows, restored {}", p.0, r.0)),
        (Ok(p), Ok(_)) => Outcome::Differs(format!("{t}: same {} rows, different content", p.0)),
        (Err(e), _) | (_, Err(e)) => Outcome::Failed(format!("{t}: {e}")),
    }
}

async fn compare_table(cx: &Context, primary: &crate::primary::PrimaryDb, t: &TableName) -> Outcome {
    let hash = match hash_for(primary, t).await {
        Ok(h) => h,
        Err(e) => return Outcome::Failed(format!("{t}: {e}")),
    };
    match compare_table_with(cx, primary, t, hash).await {
        // A type the catalog check let through without a usable hash: by text, then.
        Outcome::Failed(e) if hash == Hash::Record && e.contains("hash function for type") => {
            compare_table_with(cx, primary, t, Hash::Text).await
        }
        Outcome::Failed(e) if e.contains("row-level security") => {
            Outcome::Failed(crate::explain_primary_error(primary, t, &e).await)
        }
        other => other,
    }
}

/// The table's `as_of` cut-off (none when the table has no `as_of` column, or no
/// cut-off is known).
async fn as_of_cutoff(cx: &Context, t: &TableName) -> Result<Option<Cut>, sqlx::Error> {
    match cx.as_of(t) {
        Some(col) => cx.as_of_cut(t, col).await,
        None => Ok(None),
    }
}

async fn compare_table_with(cx: &Context, primary: &crate::primary::PrimaryDb, t: &TableName, hash: Hash) -> Outcome {
    let cut = match as_of_cutoff(cx, t).await {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(format!("{t}: {e}")),
    };
    let key = match primary.timed(catalog::integer_key(&primary.pool, t)).await {
        Ok(k) => k,
        Err(e) => return Outcome::Failed(format!("{t}: {e}")),
    };
    let estimated = primary.timed(catalog::estimated_rows(&primary.pool, t)).await.unwrap_or(0.0);
    let (ranges, sampled) = match &key {
        None => return compare_by_blocks(cx, primary, t, estimated, hash).await,
        Some(k) => {
            // The key range of both sides: rows only the copy has (deleted on the
            // primary since, or made up) fall inside a chunk too.
            let sql = format!("select min({0})::bigint, max({0})::bigint from {1}", quote_ident(k), t.quoted());
            let q = || sqlx::query_as::<_, (Option<i64>, Option<i64>)>(sqlx::AssertSqlSafe(sql.clone()));
            let (p, r) = tokio::join!(primary.timed(q().fetch_one(&primary.pool)), q().fetch_one(&cx.restored));
            match (p, r) {
                (Ok(p), Ok(r)) => match (p.0.into_iter().chain(r.0).min(), p.1.into_iter().chain(r.1).max()) {
                    (Some(lo), Some(hi)) => {
                        plan(lo, hi, estimated, cx.settings.checksum_chunk_rows, cx.settings.checksum_sample_rows)
                    }
                    _ => (vec![Range::Whole], false),
                },
                (Err(e), _) | (_, Err(e)) => return Outcome::Failed(format!("{t}: {e}")),
            }
        }
    };
    // Chunks in order, several at a time (the pools bound the connections on each side:
    // the primary's is `primary_concurrency`); each chunk hashed on both sides at once.
    let mut chunks = stream::iter(ranges)
        .map(|range| {
            let q = query_for(t, key.as_deref(), cut.as_ref(), range, hash);
            async move {
                let (p, r) = tokio::join!(primary.timed(run(&primary.pool, &q)), run(&cx.restored, &q));
                (range, p, r)
            }
        })
        .buffered(cx.settings.primary_concurrency.max(1) as usize);
    let mut rows = 0;
    let mut deleted = 0;
    while let Some((range, p, r)) = chunks.next().await {
        match (p, r) {
            (Ok(p), Ok(r)) if p == r => rows += p.0,
            // More rows up to the cut-off in the copy: the primary deleted some since
            // (a range that lost rows *and* gained deletions still shows as fewer).
            (Ok(p), Ok(r)) if cut.is_some() && r.0 > p.0 => deleted += r.0 - p.0,
            (Ok(p), Ok(r)) => {
                let at = match range {
                    Range::Whole => String::new(),
                    Range::Keys(lo, hi) => format!(" for {} in [{lo}, {hi})", key.as_deref().unwrap_or("key")),
                };
                let what = if p.0 != r.0 {
                    format!("primary {} rows, restored {}", p.0, r.0)
                } else {
                    format!("same {} rows, different content", p.0)
                };
                return Outcome::Differs(format!("{t}{at}: {what}"));
            }
            (Err(e), _) | (_, Err(e)) => return Outcome::Failed(format!("{t}: {e}")),
        }
    }
    if deleted > 0 {
        return Outcome::Deleted(format!(
            "{t}: {deleted} rows deleted on the primary since the backup (their key ranges not comparable by hash)"
        ));
    }
    let estimated = if estimated >= 1.0 { estimated } else { rows as f64 };
    Outcome::Match { rows, sampled, estimated }
}

#[async_trait]
impl Validator for Checksums {
    fn name(&self) -> &'static str {
        "checksums"
    }

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        let name = self.name();
        let (primary, common, note) = match cx.common_tables(name).await {
            Ok(v) => v,
            Err(finding) => return vec![finding],
        };
        let mut outcomes: Vec<(TableName, Outcome)> = stream::iter(common)
            .map(|t| async move {
                let o = compare_table(cx, primary, &t).await;
                (t, o)
            })
            .buffer_unordered(cx.settings.primary_concurrency.max(1) as usize)
            .collect()
            .await;
        outcomes.sort_by(|a, b| a.0.cmp(&b.0));
        let (mut differs, mut failed, mut samples) = (Vec::new(), Vec::new(), Vec::new());
        let mut rows = 0i64;
        let mut matched = 0u64;
        for (t, o) in &outcomes {
            match o {
                Outcome::Deleted(d) => samples.push(d.clone()),
                Outcome::Match { rows: n, sampled, estimated } => {
                    rows += n;
                    matched += 1;
                    if *sampled {
                        samples.push(format!("{t}: sampled {n} of ~{} rows", *estimated as i64));
                    }
                }
                Outcome::Differs(d) => differs.push(d.clone()),
                Outcome::Failed(e) => failed.push(e.clone()),
            }
        }
        samples.extend(note);
        let sampled = if samples.is_empty() { String::new() } else { format!("; {}", some_of(&samples, 10)) };
        if !differs.is_empty() {
            vec![Finding::new(
                name,
                Status::Failed,
                format!("{} of {} tables differ: {}{sampled}", differs.len(), outcomes.len(), some_of(&differs, 20)),
            )]
        } else if !failed.is_empty() {
            vec![Finding::new(name, Status::Error, format!("could not hash: {}", some_of(&failed, 10)))]
        } else {
            vec![
                Finding::new(name, Status::Passed, format!("{matched} tables, {rows} rows hash the same{sampled}"))
                    .with("rows_compared", rows as f64)
                    .covered("tables", matched)
                    .covered("rows", rows as u64),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyless_tables_are_sampled_by_a_slice_of_the_hash_space() {
        assert_eq!(sample_slice(1000.0, 5000), None);
        assert_eq!(sample_slice(10_000_000.0, 5_000_000), Some(512));
        assert_eq!(sample_slice(1e12, 10), Some(1), "never an empty sample");
    }

    #[test]
    fn small_tables_are_chunked_whole() {
        let (r, sampled) = plan(1, 1000, 1000.0, 300, 10_000);
        assert!(!sampled);
        assert_eq!(r, vec![Range::Keys(1, 301), Range::Keys(301, 601), Range::Keys(601, 901), Range::Keys(901, 1001)]);
    }

    #[test]
    fn large_tables_are_sampled_across_the_key_range() {
        let (r, sampled) = plan(1, 10_000_000, 10_000_000.0, 100_000, 1_000_000);
        assert!(sampled);
        assert_eq!(r.len(), 10);
        let Range::Keys(first, _) = r[0] else { panic!() };
        let Range::Keys(_, last) = r[9] else { panic!() };
        assert_eq!(first, 1);
        assert!(last > 9_000_000, "spread to the end: {last}");
    }

    #[test]
    fn sparse_keys_widen_the_chunks() {
        let (r, _) = plan(0, 999_999, 1000.0, 100, 1_000_000);
        assert_eq!(r.len(), 10);
    }

    #[test]
    fn queries_quote_and_bind() {
        let t = TableName { schema: "Sales".into(), name: "Inv\"oices".into() };
        let cut = Cut::test("\"at\"", "2026-11-30T00:00:00Z", None);
        let q = query_for(&t, Some("id"), Some(&cut), Range::Keys(5, 10), Hash::Text);
        assert!(q.sql.contains(r#"from "Sales"."Inv""oices" drcheck_row where "id" >= $1::pg_catalog.int8 and "id" < $2::pg_catalog.int8 and "at" <= $3::pg_catalog.timestamptz"#), "{}", q.sql);
        assert_eq!(q.binds, ["5", "10", "2026-11-30T00:00:00Z"]);
        let cut = Cut::test("\"at\"", "x", None);
        let q = query_for(&t, None, Some(&cut), Range::Whole, Hash::Record);
        assert!(q.sql.ends_with(r#"where "at" <= $1::pg_catalog.timestamptz"#), "{}", q.sql);
        // A zone-less column: read in the primary's zone, bound after the cut-off.
        let cut = Cut::test("\"at\"", "2026-11-30T00:00:00Z", Some("America/New_York"));
        let q = query_for(&t, Some("id"), Some(&cut), Range::Keys(5, 10), Hash::Record);
        assert!(
            q.sql.contains(r#""at" <= ($3::pg_catalog.timestamptz at time zone $4::pg_catalog.text)"#),
            "{}",
            q.sql
        );
        assert_eq!(q.binds, ["5", "10", "2026-11-30T00:00:00Z", "America/New_York"]);
        assert!(
            q.sql.contains("pg_catalog.sum(pg_catalog.hash_record_extended(drcheck_row.*, 0::pg_catalog.int8))"),
            "{}",
            q.sql
        );
    }
}
