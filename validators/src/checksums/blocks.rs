//! Tables without a single-column integer key (UUID or composite keys, no key), hashed
//! in block ranges (`ctid`) of about `checksum_chunk_rows` rows on each side: the two
//! copies lay rows out differently, but counts and hash sums add up, so each side's
//! totals are compared. Past `checksum_sample_rows`, both sides keep the same rows —
//! those whose own hash falls in a slice of the hash space.
//!
//! As of T, the primary adds up only its rows unchanged since T, and counts the others.
//! Rows cannot be matched by key, so: the copy holding exactly those rows proves the
//! table — or those rows and some the primary changed since, told by their hashes (a
//! dump's first second, rows the primary appended since); the primary having changed
//! nothing since T and the copy then holding fewer rows, or other ones, is a failure —
//! deletions, which leave no trace, only ever make the copy hold *more*; anything else
//! cannot be told from a change since T: inconclusive.

use super::Tally;
use super::plan::{BlockPlan, Hash};
use crate::Said;
use crate::asof::{self, Bind, Since};
use crate::primary::PrimaryDb;
use crate::{Context, TableName};
use sqlx::PgPool;

/// Rows changed since T whose hashes are asked of the copy, at most.
const MAX_CHANGED: i64 = 10_000;

/// Totals of one side: rows unchanged since T (count, sum) and rows changed since.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Totals {
    count: i64,
    sum: i128,
    changed: i64,
}

/// The block ranges a side is read in: about `chunk_rows` rows each, and one more past
/// the end (rows of pages added since the size was read).
async fn ranges(
    pool: &PgPool,
    primary: Option<&PrimaryDb>,
    t: &TableName,
    chunk_rows: u64,
) -> Result<Vec<(i64, i64)>, sqlx::Error> {
    let size = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select (pg_catalog.pg_relation_size('{0}'::pg_catalog.regclass) / \
                 pg_catalog.current_setting('block_size')::pg_catalog.int4)::pg_catalog.int8,
                greatest(c.reltuples, 0)::pg_catalog.float8
           from pg_catalog.pg_class c where c.oid = '{0}'::pg_catalog.regclass",
        t.quoted().replace('\'', "''")
    )))
    .fetch_one(pool);
    let (blocks, tuples): (i64, f64) = match primary {
        Some(p) => p.timed(size).await?,
        None => size.await?,
    };
    let per_block = if blocks > 0 && tuples >= 1.0 { tuples / blocks as f64 } else { 100.0 };
    let step = ((chunk_rows as f64 / per_block.max(1.0)).ceil() as i64).max(1);
    let mut out = Vec::new();
    let mut lo = 0i64;
    while lo <= blocks {
        let hi = if lo + step > blocks { i64::from(u32::MAX) } else { lo + step };
        out.push((lo, hi));
        lo = hi;
    }
    Ok(out)
}

/// The rows of one block range a plan reads (the range, the cut, the sample), as
/// `select {h} as h, {extra} from … where …`; binds from `$1`.
fn rows_sql(
    t: &TableName,
    plan: &BlockPlan<'_>,
    (lo, hi): (i64, i64),
    extra: &str,
    since: Option<&Since>,
) -> (String, Vec<Bind>) {
    let mut conds = vec!["ctid >= $1::pg_catalog.tid and ctid < $2::pg_catalog.tid".to_string()];
    let mut binds = vec![Bind::Text(format!("({lo},0)")), Bind::Text(format!("({hi},0)"))];
    if let Some(c) = plan.cut {
        conds.push(c.condition(binds.len() + 1));
        binds.extend(c.binds().into_iter().map(Bind::Text));
    }
    if let Some(k) = plan.slice {
        conds.push(format!(
            "(pg_catalog.hashtextextended(({})::pg_catalog.text, 42::pg_catalog.int8) & 1023) < {k}",
            plan.row.0
        ));
    }
    let changed = match since.and_then(|s| s.changed("drcheck_row", binds.len() + 1)) {
        Some((sql, b)) => {
            binds.extend(b);
            sql
        }
        None => "false".into(),
    };
    let extra = extra.replace("{changed}", &changed);
    (
        format!(
            "select {h} as h{extra} from {t} drcheck_row where {c}",
            h = plan.hash.expr(plan.row),
            t = t.quoted(),
            c = conds.join(" and ")
        ),
        binds,
    )
}

async fn totals(
    pool: &PgPool,
    primary: Option<&PrimaryDb>,
    t: &TableName,
    plan: &BlockPlan<'_>,
    since: Option<&Since>,
) -> Result<Totals, sqlx::Error> {
    let mut total = Totals::default();
    for range in ranges(pool, primary, t, plan.chunk_rows).await? {
        let (rows, binds) = rows_sql(t, plan, range, ", {changed} as new", since);
        let sql = format!(
            "select pg_catalog.count(*) filter (where not s.new), \
                    coalesce(pg_catalog.sum(s.h) filter (where not s.new), 0)::pg_catalog.text, \
                    pg_catalog.count(*) filter (where s.new) from ({rows}) s"
        );
        let q =
            asof::bind_all(sqlx::query_as::<_, (i64, String, i64)>(sqlx::AssertSqlSafe(sql)), &binds).persistent(false);
        let (c, s, n) = match primary {
            Some(p) => p.timed(q.fetch_one(pool)).await?,
            None => q.fetch_one(pool).await?,
        };
        total.count += c;
        total.sum += s.parse::<i128>().unwrap_or(0);
        total.changed += n;
    }
    Ok(total)
}

/// The hashes of the primary's rows changed since T.
async fn changed_hashes(
    primary: &PrimaryDb,
    t: &TableName,
    plan: &BlockPlan<'_>,
    since: &Since,
) -> Result<Vec<i64>, sqlx::Error> {
    let mut out = Vec::new();
    for range in ranges(&primary.pool, Some(primary), t, plan.chunk_rows).await? {
        let (rows, binds) = rows_sql(t, plan, range, ", {changed} as new", Some(since));
        let sql = format!("select s.h from ({rows}) s where s.new");
        let q = asof::bind_scalar(sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql)), &binds).persistent(false);
        out.extend(primary.timed(q.fetch_all(&primary.pool)).await?);
    }
    Ok(out)
}

/// Count and sum of the copy's rows whose hash is one of `hashes`.
async fn matching(
    pool: &PgPool,
    t: &TableName,
    plan: &BlockPlan<'_>,
    hashes: &[i64],
) -> Result<(i64, i128), sqlx::Error> {
    let (mut count, mut sum) = (0i64, 0i128);
    for range in ranges(pool, None, t, plan.chunk_rows).await? {
        let (rows, mut binds) = rows_sql(t, plan, range, "", None);
        let at = binds.len() + 1;
        binds.push(Bind::Ints(hashes.to_vec()));
        let sql = format!(
            "select pg_catalog.count(*), coalesce(pg_catalog.sum(s.h), 0)::pg_catalog.text from ({rows}) s \
              where s.h operator(pg_catalog.=) any(${at}::pg_catalog.int8[])"
        );
        let q = asof::bind_all(sqlx::query_as::<_, (i64, String)>(sqlx::AssertSqlSafe(sql)), &binds).persistent(false);
        let (c, s) = q.fetch_one(pool).await?;
        count += c;
        sum += s.parse::<i128>().unwrap_or(0);
    }
    Ok((count, sum))
}

/// Compares a keyless table (see the module's documentation).
pub(crate) async fn compare(
    cx: &Context,
    primary: &PrimaryDb,
    t: &TableName,
    plan: &BlockPlan<'_>,
    since: &Since,
    tally: &mut Tally,
) -> Result<(), String> {
    let known = since.known();
    let (p, r) = tokio::join!(
        totals(&primary.pool, Some(primary), t, plan, known.then_some(since)),
        totals(&cx.restored, None, t, plan, None)
    );
    let (p, r) = (p.map_err(|e| e.said())?, r.map_err(|e| e.said())?);
    tally.changed += p.changed;
    if (p.count, p.sum) == (r.count, r.sum) {
        tally.compared += p.count;
        return Ok(());
    }
    // More rows in the copy: some may be rows the primary changed since — the copy holds
    // them as they were written (appended rows the copy caught). Told by their hashes.
    if known && r.count > p.count && (1..=MAX_CHANGED).contains(&p.changed) {
        let hashes = changed_hashes(primary, t, plan, since).await.map_err(|e| e.said())?;
        let (m, msum) = matching(&cx.restored, t, plan, &hashes).await.map_err(|e| e.said())?;
        if (r.count - m, r.sum - msum) == (p.count, p.sum) {
            tally.compared += p.count;
            return Ok(());
        }
    }
    // Nothing changed since T, or an append-only (as_of) table cut before it: fewer or
    // other rows in the copy are the backup's.
    let settled = (known && p.changed == 0) || (!known && plan.cut.is_some());
    if settled && r.count < p.count {
        tally.differs.push(format!("primary {} rows, restored {}", p.count, r.count));
    } else if settled && r.count == p.count {
        tally.differs.push(format!("same {} rows, different content", p.count));
    } else if r.count > p.count && settled {
        tally.deleted += r.count - p.count;
        tally.unproven.push(format!(
            "the copy holds {} more rows than the primary's unchanged ones (deleted since?), so the rest cannot be \
             matched without a key",
            r.count - p.count
        ));
    } else if known {
        tally.unproven.push(format!(
            "{} rows unchanged on the primary, {} in the copy, {} changed since the copy's point: without a key the \
             changes cannot be matched row by row",
            p.count, r.count, p.changed
        ));
    } else {
        tally.unproven.push(format!(
            "primary {} rows, copy {}: without a key, and with nothing to tell the primary's changes since from \
             the backup's, the difference cannot be placed",
            p.count, r.count
        ));
    }
    Ok(())
}

impl Hash {
    /// The plan of a keyless table hashed with this hash.
    pub(crate) fn blocks<'a>(
        self,
        row: &'a super::plan::Row,
        cut: Option<&'a crate::Cut>,
        chunk_rows: u64,
        slice: Option<u32>,
    ) -> BlockPlan<'a> {
        BlockPlan { row, cut, chunk_rows, slice, hash: self }
    }
}
