//! Tables without a single-column integer key (composite or UUID keys, no key), hashed in
//! block ranges (`ctid`) of about `checksum_chunk_rows` rows on each side: the two copies
//! lay rows out differently, but counts and hash sums add up, so each side's totals are
//! compared. Past `checksum_sample_rows`, both sides keep the same rows — those whose own
//! hash falls in a slice of the hash space.
//!
//! As of T the primary adds up only its rows unchanged since T. Equal totals prove the
//! table. Otherwise **every primary row unchanged since T must be in the copy**, whatever
//! else the copy holds: a multiset inclusion by row hash. Both sides' rows are bucketed by
//! their hash (one grouped pass each); the buckets whose totals differ are read row hash
//! by row hash, and each unchanged primary row must find its copy. A row the copy lacks
//! is a failure, named by its key (a composite key's values) or its content. Rows the
//! copy holds beyond them — versions of rows changed since T, rows deleted since, or
//! invented ones — are counted, never a reason to stop comparing the rest. Reading past
//! `checksum_drill_rows` is an error naming the setting, never a pass.
//!
//! Where nothing tells changes since T, an `as_of` table is compared the same way on its
//! rows up to T less `as_of_grace`; any other difference is undecided.

use super::Tally;
use super::plan::{BlockPlan, Hash};
use crate::asof::{self, Bind, Since};
use crate::context::Context;
use crate::finding::Failure;
use crate::finding::TableName;
use crate::primary::PrimaryDb;
use drcheck_config::quote_ident;
use sqlx::PgPool;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Rows per bucket aimed at when a table's totals differ.
const BUCKET_ROWS: i64 = 64;

/// Rows missing from the copy that are named, at most.
const NAMED: usize = 5;

/// Rows the primary wrote since T whose hashes screen the copy's buckets, at most.
const MAX_NEW_HASHES: i64 = 200_000;

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
/// `select {h} as h, {extra} from … where …`; binds from `$1`. `{changed}` in `extra`
/// becomes the primary's "changed since T" condition (false without `since`).
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

/// Runs `q` on the primary (timed) or on the copy.
macro_rules! on_side {
    ($primary:expr, $pool:expr, $q:expr) => {
        match $primary {
            Some(p) => p.timed($q.fetch_all($pool)).await?,
            None => $q.fetch_all($pool).await?,
        }
    };
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
        for (c, s, n) in on_side!(primary, pool, q) {
            total.count += c;
            total.sum += s.parse::<i128>().unwrap_or(0);
            total.changed += n;
        }
    }
    Ok(total)
}

/// Each bucket's (count, sum) of one side's rows (the primary's unchanged since T).
async fn buckets(
    pool: &PgPool,
    primary: Option<&PrimaryDb>,
    t: &TableName,
    plan: &BlockPlan<'_>,
    since: Option<&Since>,
    mask: i64,
    except: &[i64],
) -> Result<BTreeMap<i64, (i64, i128)>, sqlx::Error> {
    let mut out: BTreeMap<i64, (i64, i128)> = BTreeMap::new();
    for range in ranges(pool, primary, t, plan.chunk_rows).await? {
        let (rows, mut binds) = rows_sql(t, plan, range, ", {changed} as new", since);
        let at = binds.len() + 1;
        binds.push(Bind::Ints(except.to_vec()));
        let sql = format!(
            "select s.h & {mask}::pg_catalog.int8, pg_catalog.count(*), pg_catalog.sum(s.h)::pg_catalog.text \
               from ({rows}) s where not s.new and not (s.h operator(pg_catalog.=) any(${at}::pg_catalog.int8[])) \
              group by 1"
        );
        let q =
            asof::bind_all(sqlx::query_as::<_, (i64, i64, String)>(sqlx::AssertSqlSafe(sql)), &binds).persistent(false);
        for (b, c, s) in on_side!(primary, pool, q) {
            let e = out.entry(b).or_default();
            e.0 += c;
            e.1 += s.parse::<i128>().unwrap_or(0);
        }
    }
    Ok(out)
}

/// The row hashes of one side in `chosen` buckets (the primary's unchanged since T),
/// with how many times each occurs.
async fn hashes_in(
    pool: &PgPool,
    primary: Option<&PrimaryDb>,
    t: &TableName,
    plan: &BlockPlan<'_>,
    since: Option<&Since>,
    mask: i64,
    chosen: &[i64],
) -> Result<HashMap<i64, i64>, sqlx::Error> {
    let mut out: HashMap<i64, i64> = HashMap::new();
    for range in ranges(pool, primary, t, plan.chunk_rows).await? {
        let (rows, mut binds) = rows_sql(t, plan, range, ", {changed} as new", since);
        let at = binds.len() + 1;
        binds.push(Bind::Ints(chosen.to_vec()));
        let sql = format!(
            "select s.h from ({rows}) s where not s.new \
                and (s.h & {mask}::pg_catalog.int8) operator(pg_catalog.=) any(${at}::pg_catalog.int8[])"
        );
        let q = asof::bind_all(sqlx::query_as::<_, (i64,)>(sqlx::AssertSqlSafe(sql)), &binds).persistent(false);
        for (h,) in on_side!(primary, pool, q) {
            *out.entry(h).or_default() += 1;
        }
    }
    Ok(out)
}

/// The hashes of the primary's rows written since T.
async fn new_hashes(
    primary: &PrimaryDb,
    t: &TableName,
    plan: &BlockPlan<'_>,
    since: &Since,
) -> Result<Vec<i64>, sqlx::Error> {
    let mut out = Vec::new();
    for range in ranges(&primary.pool, Some(primary), t, plan.chunk_rows).await? {
        let (rows, binds) = rows_sql(t, plan, range, ", {changed} as new", Some(since));
        let sql = format!("select s.h from ({rows}) s where s.new");
        let q = asof::bind_all(sqlx::query_as::<_, (i64,)>(sqlx::AssertSqlSafe(sql)), &binds).persistent(false);
        out.extend(primary.timed(q.fetch_all(&primary.pool)).await?.into_iter().map(|(h,)| h));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// How the primary's rows whose hash is in `missing` read: by their primary key's values
/// where the table has one, else by their content (cut) — at most [`NAMED`].
async fn name_rows(
    primary: &PrimaryDb,
    t: &TableName,
    plan: &BlockPlan<'_>,
    since: &Since,
    missing: &[i64],
) -> Result<Vec<String>, sqlx::Error> {
    let key = primary.timed(crate::catalog::primary_key(&primary.pool, t)).await?;
    let shown = if key.is_empty() {
        "pg_catalog.left((drcheck_row.*)::pg_catalog.text, 120)".to_string()
    } else {
        let cols: Vec<String> = key.iter().map(|c| format!("drcheck_row.{}", quote_ident(c))).collect();
        format!("'({})=' || (ROW({}))::pg_catalog.text", key.join(", "), cols.join(", "))
    };
    let mut out = Vec::new();
    for range in ranges(&primary.pool, Some(primary), t, plan.chunk_rows).await? {
        let (rows, mut binds) =
            rows_sql(t, plan, range, &format!(", {shown} as shown, {{changed}} as new"), Some(since));
        let at = binds.len() + 1;
        binds.push(Bind::Ints(missing.to_vec()));
        let sql = format!(
            "select s.shown from ({rows}) s where not s.new \
                and s.h operator(pg_catalog.=) any(${at}::pg_catalog.int8[]) limit {NAMED}"
        );
        let q = asof::bind_all(sqlx::query_as::<_, (String,)>(sqlx::AssertSqlSafe(sql)), &binds).persistent(false);
        out.extend(primary.timed(q.fetch_all(&primary.pool)).await?.into_iter().map(|(s,)| s));
        if out.len() >= NAMED {
            break;
        }
    }
    out.truncate(NAMED);
    Ok(out)
}

/// The bucket mask for a table of about `rows` rows: buckets of ~[`BUCKET_ROWS`].
fn mask_for(rows: i64) -> i64 {
    let wanted = (rows / BUCKET_ROWS).max(1) as u64;
    (wanted.next_power_of_two().min(1 << 20) as i64) - 1
}

/// Every unchanged primary row in the copy (see the module's documentation): the
/// rows that are not, and how many the copy holds beyond them.
async fn inclusion(
    cx: &Context,
    primary: &PrimaryDb,
    t: &TableName,
    plan: &BlockPlan<'_>,
    since: Option<&Since>,
    (p, r): (Totals, Totals),
    tally: &mut Tally,
) -> Result<(), Failure> {
    let mask = mask_for(p.count.max(r.count));
    // The copy holds the rows the primary wrote between the journal's sample and T as
    // the primary holds them now: left out of the copy's buckets, they do not make them
    // differ (only a screen — a differing bucket is still read whole, and decided by
    // exact counts).
    let except = match since {
        Some(s) if (1..=MAX_NEW_HASHES).contains(&p.changed) => {
            new_hashes(primary, t, plan, s).await.map_err(Failure::from)?
        }
        _ => Vec::new(),
    };
    let (pb, rb) = tokio::join!(
        buckets(&primary.pool, Some(primary), t, plan, since, mask, &[]),
        buckets(&cx.restored, None, t, plan, None, mask, &except)
    );
    let (pb, rb) = (pb.map_err(Failure::from)?, rb.map_err(Failure::from)?);
    let differing: Vec<i64> = pb
        .keys()
        .chain(rb.keys())
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|b| pb.get(b) != rb.get(b))
        .collect();
    // Buckets only the copy has hold nothing of the primary's: counted, not read.
    let chosen: Vec<i64> = differing.iter().copied().filter(|b| pb.contains_key(b)).collect();
    let cost: i64 = chosen.iter().map(|b| pb[b].0 + rb.get(b).map_or(0, |c| c.0)).sum();
    let limit = cx.settings.checksum_drill_rows;
    if cost as u64 > limit {
        return Err(Failure::from(format!(
            "deciding which of its rows the copy holds would read {cost} rows, more than checksum_drill_rows \
             ({limit}) — raise [target.validators] checksum_drill_rows (a limit of drcheck's, never a pass)"
        )));
    }
    let (ph, rh) = if chosen.is_empty() {
        (HashMap::new(), HashMap::new())
    } else {
        let (ph, rh) = tokio::join!(
            hashes_in(&primary.pool, Some(primary), t, plan, since, mask, &chosen),
            hashes_in(&cx.restored, None, t, plan, None, mask, &chosen)
        );
        (ph.map_err(Failure::from)?, rh.map_err(Failure::from)?)
    };
    let mut missing: Vec<i64> = Vec::new();
    let mut lacking = 0i64;
    for (h, n) in &ph {
        let have = rh.get(h).copied().unwrap_or(0);
        if have < *n {
            lacking += n - have;
            missing.push(*h);
        }
    }
    let matched = p.count - lacking;
    tally.compared += matched;
    // Beyond the matched rows and those the primary holds as it wrote them since: rows
    // only the copy holds.
    let screened = r.count - rb.values().map(|(c, _)| c).sum::<i64>();
    tally.deleted += (r.count - matched - screened).max(0);
    if lacking == 0 {
        return Ok(());
    }
    missing.sort_unstable();
    let named = match since {
        Some(s) => name_rows(primary, t, plan, s, &missing).await.map_err(Failure::from)?,
        None => {
            let never = Since::Unknown { why: String::new(), commit_ts: None };
            name_rows(primary, t, plan, &never, &missing).await.map_err(Failure::from)?
        }
    };
    let shown = if named.is_empty() { String::new() } else { format!(": {}", named.join("; ")) };
    tally.differs.push(format!(
        "{lacking} rows the primary held unchanged since the copy's point are missing from the copy, or differ{shown}"
    ));
    Ok(())
}

/// Compares a table without a single-column integer key (see the module's
/// documentation).
pub(crate) async fn compare(
    cx: &Context,
    primary: &PrimaryDb,
    t: &TableName,
    plan: &BlockPlan<'_>,
    since: &Since,
    tally: &mut Tally,
) -> Result<(), Failure> {
    let known = since.known();
    let (p, r) = tokio::join!(
        totals(&primary.pool, Some(primary), t, plan, known.then_some(since)),
        totals(&cx.restored, None, t, plan, None)
    );
    let (p, r) = (p.map_err(Failure::from)?, r.map_err(Failure::from)?);
    tally.changed += p.changed;
    if (p.count, p.sum) == (r.count, r.sum) {
        tally.compared += p.count;
        return Ok(());
    }
    // Changes since T told, or an append-only (as_of) table cut before it: every
    // unchanged row of the primary's must be in the copy.
    if known || plan.cut.is_some() {
        return inclusion(cx, primary, t, plan, known.then_some(since), (p, r), tally).await;
    }
    tally.undecided_rows += p.count;
    tally.unproven.push(format!(
        "primary {} rows, copy {}: with nothing to tell the primary's changes since the copy's point from the \
         backup's, the difference cannot be placed",
        p.count, r.count
    ));
    Ok(())
}

impl Hash {
    /// The plan of a keyless table hashed with this hash.
    pub(crate) fn blocks<'a>(
        self,
        row: &'a super::plan::Row,
        cut: Option<&'a crate::context::Cut>,
        chunk_rows: u64,
        slice: Option<u32>,
    ) -> BlockPlan<'a> {
        BlockPlan { row, cut, chunk_rows, slice, hash: self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_a_few_dozen_rows() {
        assert_eq!(mask_for(0), 0);
        assert_eq!(mask_for(64), 0);
        assert_eq!(mask_for(1000), 15);
        assert_eq!(mask_for(1_000_000), 16383);
        assert_eq!(mask_for(i64::MAX), (1 << 20) - 1, "bounded");
    }
}
