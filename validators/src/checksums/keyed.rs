//! Tables with a single-column integer key, hashed in key ranges on both sides at once,
//! as of the copy's point T.
//!
//! Where changes since T can be told ([`Since::changed`]), the primary hashes only its
//! rows unchanged since T and names the keys of the others; the copy hashes its rows but
//! those keys. A range whose totals still differ is *drilled*: both sides' rows of the
//! range, key by key — a key only in the copy was deleted on the primary since; a row of
//! the primary's that the copy lacks or holds otherwise is a failure only if its
//! transaction had committed at T ([`asof::committed_at_point`]: the copy's own commit
//! log, or the primary's commit times), a change since T if it had not, inconclusive if
//! nothing says.
//!
//! Where nothing tells (a dump without commit times), a table with an `as_of` column is
//! compared on its rows written up to T less `as_of_grace` (an append-only table: a row
//! there that differs or is missing is a failure, found by the same drill) and other
//! tables range by range: a range that differs cannot be told from an update since T —
//! inconclusive.

use super::Tally;
use super::plan::{Hash, Range};
use crate::Said;
use crate::asof::{self, Bind, Since};
use crate::primary::PrimaryDb;
use crate::{Context, Cut, TableName};
use drcheck_config::quote_ident;
use futures::stream::{self, StreamExt};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Keys changed since T a range may name; past it the range counts as rewritten since
/// T (its rows changed, none compared).
const MAX_CHANGED_KEYS: i64 = 50_000;

/// Ranges of one table drilled row by row, at most.
const MAX_DRILLED: usize = 16;

/// Failures named one by one per table, at most.
const NAMED: usize = 5;

/// One table's plan: what both sides hash, and how changes since T are told.
pub(crate) struct Keyed<'a> {
    pub t: &'a TableName,
    pub key: &'a str,
    pub hash: Hash,
    /// The row both sides hash.
    pub row: &'a super::plan::Row,
    pub since: &'a Since,
    /// Where nothing tells changes: the `as_of` cut-off, less the grace band.
    pub cut: Option<&'a Cut>,
}

impl Keyed<'_> {
    fn range_condition(&self) -> String {
        let k = quote_ident(self.key);
        format!("{k} >= $1::pg_catalog.int8 and {k} < $2::pg_catalog.int8")
    }

    /// The range, and the as_of cut (from `$3`) where one applies.
    fn filter(&self) -> (String, Vec<Bind>) {
        let mut conds = vec![self.range_condition()];
        let mut binds = Vec::new();
        if let Some(c) = self.cut {
            conds.push(c.condition(3));
            binds.extend(c.binds().into_iter().map(Bind::Text));
        }
        (conds.join(" and "), binds)
    }

    fn rows(&self, extra: &str, filter: &str) -> String {
        format!(
            "select ({k})::pg_catalog.int8 as k, {h} as h{extra} from {t} drcheck_row where {filter}",
            k = quote_ident(self.key),
            h = self.hash.expr(self.row),
            t = self.t.quoted()
        )
    }
}

fn bounds(range: Range) -> (i64, i64) {
    match range {
        Range::Keys(lo, hi) => (lo, hi),
        Range::Whole => (i64::MIN, i64::MAX),
    }
}

/// Totals of a range on the primary, as of T: rows unchanged (count, hash sum) and the
/// keys of the changed ones (`None`: too many to name).
async fn primary_totals(
    primary: &PrimaryDb,
    plan: &Keyed<'_>,
    range: Range,
) -> Result<(i64, i128, i64, Option<Vec<i64>>), sqlx::Error> {
    let (lo, hi) = bounds(range);
    let (filter, mut binds) = plan.filter();
    let (changed, changed_binds) =
        plan.since.changed("drcheck_row", 3 + binds.len()).unwrap_or_else(|| ("false".into(), vec![]));
    binds.extend(changed_binds);
    let sql = format!(
        "select pg_catalog.count(*) filter (where not s.new), \
                coalesce(pg_catalog.sum(s.h) filter (where not s.new), 0)::pg_catalog.text, \
                pg_catalog.count(*) filter (where s.new), \
                case when pg_catalog.count(*) filter (where s.new) <= {MAX_CHANGED_KEYS} \
                     then coalesce(pg_catalog.array_agg(s.k) filter (where s.new), '{{}}') end \
           from ({rows}) s",
        rows = plan.rows(&format!(", {changed} as new"), &filter)
    );
    let mut all = vec![Bind::Int(lo), Bind::Int(hi)];
    all.extend(binds);
    let q = asof::bind_all(sqlx::query_as::<_, (i64, String, i64, Option<Vec<i64>>)>(sqlx::AssertSqlSafe(sql)), &all)
        .persistent(false);
    let (n, sum, changed, keys) = primary.timed(q.fetch_one(&primary.pool)).await?;
    Ok((n, sum.parse().unwrap_or(0), changed, keys))
}

/// Totals of a range on the copy, leaving out `except` (keys the primary changed since T).
async fn copy_totals(cx: &Context, plan: &Keyed<'_>, range: Range, except: &[i64]) -> Result<(i64, i128), sqlx::Error> {
    let (lo, hi) = bounds(range);
    let (filter, binds) = plan.filter();
    let except_at = 3 + binds.len();
    let sql = format!(
        "select pg_catalog.count(*), coalesce(pg_catalog.sum(s.h), 0)::pg_catalog.text from ({rows}) s \
          where not (s.k operator(pg_catalog.=) any(${except_at}::pg_catalog.int8[]))",
        rows = plan.rows("", &filter)
    );
    let mut all = vec![Bind::Int(lo), Bind::Int(hi)];
    all.extend(binds);
    all.push(Bind::Ints(except.to_vec()));
    // Not a cached statement: the key list is then planned as a constant (hashed).
    let q = asof::bind_all(sqlx::query_as::<_, (i64, String)>(sqlx::AssertSqlSafe(sql)), &all).persistent(false);
    let (n, sum) = q.fetch_one(&cx.restored).await?;
    Ok((n, sum.parse().unwrap_or(0)))
}

/// What drilling a range found.
#[derive(Default)]
struct Drilled {
    compared: i64,
    changed: i64,
    deleted: i64,
    differs: Vec<String>,
    unproven: i64,
}

/// Both sides' rows of a range, key by key (see the module's documentation).
async fn drill(cx: &Context, primary: &PrimaryDb, plan: &Keyed<'_>, range: Range) -> Result<Drilled, sqlx::Error> {
    let (lo, hi) = bounds(range);
    let (filter, binds) = plan.filter();
    let (changed, changed_binds) =
        plan.since.changed("drcheck_row", 3 + binds.len()).unwrap_or_else(|| ("false".into(), vec![]));
    let mut pbinds = vec![Bind::Int(lo), Bind::Int(hi)];
    pbinds.extend(binds.clone());
    pbinds.extend(changed_binds);
    let psql =
        plan.rows(&format!(", {changed} as new, ((drcheck_row.xmin)::pg_catalog.text)::pg_catalog.int8 as x"), &filter);
    let pq = asof::bind_all(sqlx::query_as::<_, (i64, i64, bool, i64)>(sqlx::AssertSqlSafe(psql)), &pbinds)
        .persistent(false);
    let mut cbinds = vec![Bind::Int(lo), Bind::Int(hi)];
    cbinds.extend(binds);
    let csql = plan.rows("", &filter);
    let cq = asof::bind_all(sqlx::query_as::<_, (i64, i64)>(sqlx::AssertSqlSafe(csql)), &cbinds).persistent(false);
    let (p, c) = tokio::join!(primary.timed(pq.fetch_all(&primary.pool)), cq.fetch_all(&cx.restored));
    let (p, c) = (p?, c?);
    let copy: HashMap<i64, i64> = c.into_iter().collect();
    let mut out = Drilled::default();
    let mut seen = 0usize;
    // Rows of the primary's that the copy disagrees with: (key, xmin, missing).
    let mut suspects: Vec<(i64, i64, bool)> = Vec::new();
    for (k, h, new, x) in &p {
        let theirs = copy.get(k);
        seen += usize::from(theirs.is_some());
        match (new, theirs) {
            (true, _) => out.changed += 1,
            (false, Some(ch)) if ch == h => out.compared += 1,
            (false, Some(_)) => suspects.push((*k, *x, false)),
            (false, None) => suspects.push((*k, *x, true)),
        }
    }
    out.deleted = (copy.len() - seen) as i64;
    if suspects.is_empty() {
        return Ok(out);
    }
    let committed = if plan.since.known() {
        let xids: Vec<i64> =
            suspects.iter().map(|s| s.1).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        asof::committed_at_point(plan.since, &cx.restored, primary, &xids).await?
    } else {
        // An append-only (as_of) table up to T less the grace band: every row was there.
        suspects.iter().map(|s| (s.1, Some(true))).collect()
    };
    let key = plan.key;
    for (k, x, missing) in suspects {
        match committed.get(&x).copied().flatten() {
            Some(true) if missing => out.differs.push(format!("{key}={k} is missing from the copy")),
            Some(true) => out.differs.push(format!("{key}={k} differs")),
            Some(false) => out.changed += 1,
            None => out.unproven += 1,
        }
    }
    Ok(out)
}

/// Compares a keyed table range by range (see the module's documentation).
pub(crate) async fn compare(
    cx: &Context,
    primary: &PrimaryDb,
    plan: &Keyed<'_>,
    ranges: Vec<Range>,
    tally: &mut Tally,
) -> Result<(), String> {
    let drilled = AtomicUsize::new(0);
    let known = plan.since.known();
    let mut chunks = stream::iter(ranges)
        .map(|range| {
            let drilled = &drilled;
            async move {
                let mut part = Tally::default();
                let (old, old_sum, changed, keys) = if known {
                    primary_totals(primary, plan, range).await.map_err(|e| e.said())?
                } else {
                    let (n, sum, _, _) = primary_totals(primary, plan, range).await.map_err(|e| e.said())?;
                    (n, sum, 0, Some(Vec::new()))
                };
                let Some(keys) = keys else {
                    // Rewritten since T: nothing of it is the copy's any more.
                    part.changed += changed;
                    part.unproven.push(format!("{} rows changed since the copy's point", changed));
                    return Ok::<_, String>(part);
                };
                let (n, sum) = copy_totals(cx, plan, range, &keys).await.map_err(|e| e.said())?;
                if (n, sum) == (old, old_sum) {
                    part.compared += old;
                    part.changed += changed;
                    return Ok(part);
                }
                // Differs: drilled where that can decide, within a budget.
                if (known || plan.cut.is_some()) && drilled.fetch_add(1, Ordering::Relaxed) < MAX_DRILLED {
                    let d = drill(cx, primary, plan, range).await.map_err(|e| e.said())?;
                    part.compared += d.compared;
                    part.changed += d.changed;
                    part.deleted += d.deleted;
                    part.differs.extend(d.differs);
                    if d.unproven > 0 {
                        part.unproven
                            .push(format!("{} rows differ whose commit time the primary no longer knows", d.unproven));
                    }
                    return Ok(part);
                }
                let at = match range {
                    Range::Whole => String::new(),
                    Range::Keys(lo, hi) => format!(" for {} in [{lo}, {hi})", plan.key),
                };
                part.unproven.push(if known {
                    format!("rows{at} differ (more ranges than are drilled row by row)")
                } else {
                    format!("rows{at} differ: primary {old}, copy {n}")
                });
                Ok(part)
            }
        })
        .buffered(cx.settings.primary_concurrency.max(1) as usize);
    while let Some(part) = chunks.next().await {
        let part = part?;
        tally.add(part);
    }
    if tally.differs.len() > NAMED {
        let more = tally.differs.len() - NAMED;
        tally.differs.truncate(NAMED);
        tally.differs.push(format!("and {more} more rows"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asof::Since;
    use std::sync::Arc;

    #[test]
    fn queries_quote_bind_and_cut() {
        let t = TableName { schema: "Sales".into(), name: "Inv\"oices".into() };
        let cut = Cut::test("\"at\"", "2026-11-30T00:00:00Z", None).less(std::time::Duration::from_secs(300));
        let since = Since::Unknown { why: "a dump".into() };
        let whole = super::super::plan::Row::whole();
        let plan = Keyed { t: &t, key: "id", hash: Hash::Record, row: &whole, since: &since, cut: Some(&cut) };
        let (filter, binds) = plan.filter();
        assert_eq!(
            filter,
            r#""id" >= $1::pg_catalog.int8 and "id" < $2::pg_catalog.int8 and "at" <= ($3::pg_catalog.timestamptz - $4::pg_catalog.interval)"#
        );
        assert_eq!(binds, vec![Bind::Text("2026-11-30T00:00:00Z".into()), Bind::Text("300 seconds".into())]);
        let rows = plan.rows("", &filter);
        assert!(rows.starts_with(r#"select ("id")::pg_catalog.int8 as k, pg_catalog.hashint8extended(pg_catalog.hash_record_extended(drcheck_row.*"#), "{rows}");
        assert!(rows.contains(r#"from "Sales"."Inv""oices" drcheck_row where"#), "{rows}");
        // A zone-less column: read in the primary's zone, bound after the band.
        let zoned = Cut::test("\"at\"", "2026-11-30T00:00:00Z", Some("America/New_York"))
            .less(std::time::Duration::from_secs(60));
        assert_eq!(
            zoned.condition(3),
            r#""at" <= (($3::pg_catalog.timestamptz - $4::pg_catalog.interval) at time zone $5::pg_catalog.text)"#
        );
        assert_eq!(zoned.binds(), ["2026-11-30T00:00:00Z", "60 seconds", "America/New_York"]);
        // As of T by transaction ids: no cut, the changed rows named by the primary.
        let xid = Since::Xid { next: 1000, aborted: Arc::new(vec![]), from: 3 };
        let plan = Keyed { t: &t, key: "id", hash: Hash::Text, row: &whole, since: &xid, cut: None };
        let (filter, binds) = plan.filter();
        assert_eq!(filter, r#""id" >= $1::pg_catalog.int8 and "id" < $2::pg_catalog.int8"#);
        assert!(binds.is_empty());
    }
}
