//! Tables with a single-column integer key, hashed in key ranges on both sides at once,
//! as of the copy's point T.
//!
//! The ranges are laid out from **the primary's keys only**: rows the copy holds outside
//! them are counted as not on the primary now (deleted since T, or invented) and can
//! never open ranges of their own. Where changes since T can be told
//! ([`Since::changed`]), the primary hashes only its rows unchanged since T and names the
//! keys of the others; the copy hashes its rows but those keys. A range whose totals
//! still differ is *drilled*: both sides' rows of the range, key by key — a key only in
//! the copy is counted (not on the primary now); a row of the primary's that the copy
//! lacks or holds otherwise is a failure if its transaction had committed at T
//! ([`asof::committed_at_point`]), a change since T if it had not, undecided if nothing
//! says. Every differing range is drilled: past `checksum_drill_rows` read, the table is
//! an error that names the setting — a limit of drcheck's is never a pass.
//!
//! Where nothing tells (no journal sample before T, no commit times), a table with an
//! `as_of` column is compared on its rows written up to T less `as_of_grace` (an
//! append-only table: a row there that differs or is missing is a failure, found by the
//! same drill) and other tables range by range: a range that differs is undecided.

use super::Tally;
use super::plan::{Hash, Range};
use crate::asof::{self, Bind, Since};
use crate::context::{Context, Cut};
use crate::finding::Failure;
use crate::finding::TableName;
use crate::primary::PrimaryDb;
use drcheck_config::quote_ident;
use futures::stream::{self, StreamExt};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Keys changed since T a range may name; past it the range is drilled row by row.
const MAX_CHANGED_KEYS: i64 = 50_000;

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

    /// Whether a range that differs can be decided row by row.
    fn decidable(&self) -> bool {
        self.since.known() || self.cut.is_some()
    }
}

fn bounds(range: Range) -> (i64, i64) {
    let Range::Keys(lo, hi) = range;
    (lo, hi)
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

/// Rows the copy holds outside `[lo, hi)` — keys the primary does not have at all (and,
/// for an `as_of` table, within the cut): not on the primary now.
pub(crate) async fn copy_outside(cx: &Context, plan: &Keyed<'_>, lo: i64, hi: i64) -> Result<i64, sqlx::Error> {
    let k = quote_ident(plan.key);
    let mut conds = vec![format!("not ({k} >= $1::pg_catalog.int8 and {k} < $2::pg_catalog.int8)")];
    let mut binds = vec![Bind::Int(lo), Bind::Int(hi)];
    if let Some(c) = plan.cut {
        conds.push(c.condition(3));
        binds.extend(c.binds().into_iter().map(Bind::Text));
    }
    let sql = format!("select pg_catalog.count(*) from {} drcheck_row where {}", plan.t.quoted(), conds.join(" and "));
    asof::bind_scalar(sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql)), &binds)
        .persistent(false)
        .fetch_one(&cx.restored)
        .await
}

/// What drilling a range found.
#[derive(Default)]
struct Drilled {
    compared: i64,
    changed: i64,
    extra: i64,
    differs: Vec<String>,
    undecided: i64,
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
    out.extra = (copy.len() - seen) as i64;
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
            None => out.undecided += 1,
        }
    }
    Ok(out)
}

/// Compares a keyed table range by range (see the module's documentation); `Err` is the
/// table's error (a query failed, or deciding it would read past `checksum_drill_rows`).
pub(crate) async fn compare(
    cx: &Context,
    primary: &PrimaryDb,
    plan: &Keyed<'_>,
    ranges: Vec<Range>,
    tally: &mut Tally,
) -> Result<(), Failure> {
    let drilled_rows = AtomicU64::new(0);
    let limit = cx.settings.checksum_drill_rows;
    let known = plan.since.known();
    let mut chunks = stream::iter(ranges)
        .map(|range| {
            let drilled_rows = &drilled_rows;
            async move {
                let mut part = Tally::default();
                let (old, old_sum, changed, keys) = if known {
                    primary_totals(primary, plan, range).await.map_err(Failure::from)?
                } else {
                    let (n, sum, _, _) = primary_totals(primary, plan, range).await.map_err(Failure::from)?;
                    (n, sum, 0, Some(Vec::new()))
                };
                // Too many rows changed to name: decided row by row.
                let (n, sum) = match &keys {
                    Some(keys) => copy_totals(cx, plan, range, keys).await.map_err(Failure::from)?,
                    None => (-1, 0),
                };
                if keys.is_some() && (n, sum) == (old, old_sum) {
                    part.compared += old;
                    part.changed += changed;
                    return Ok::<_, Failure>(part);
                }
                let (lo, hi) = bounds(range);
                let at = format!(" for {} in [{lo}, {hi})", plan.key);
                if !plan.decidable() {
                    part.undecided_rows += old;
                    part.unproven.push(format!("rows{at} differ: primary {old}, copy {n}"));
                    return Ok(part);
                }
                // Drilled within the bound: the rows both sides read.
                let cost = (old + changed).max(0) as u64 + n.max(old).max(0) as u64;
                let before = drilled_rows.fetch_add(cost, Ordering::Relaxed);
                if before + cost > limit {
                    return Err(Failure::from(format!(
                        "deciding its differing key ranges row by row would read more than checksum_drill_rows \
                         ({limit}) rows — raise [target.validators] checksum_drill_rows (a limit of drcheck's, never \
                         a pass)"
                    )));
                }
                let d = drill(cx, primary, plan, range).await.map_err(Failure::from)?;
                part.compared += d.compared;
                part.changed += d.changed;
                part.deleted += d.extra;
                part.differs.extend(d.differs);
                if d.undecided > 0 {
                    part.undecided_rows += d.undecided;
                    part.unproven
                        .push(format!("{} rows{at} differ whose commit time the primary no longer knows", d.undecided));
                }
                Ok(part)
            }
        })
        .buffered(cx.settings.primary_concurrency.max(1) as usize);
    while let Some(part) = chunks.next().await {
        tally.add(part?);
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
        let since = Since::Unknown { why: "a dump".into(), commit_ts: Some(false) };
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
        assert!(plan.decidable(), "an as_of table decides its rows up to the cut");
        // A zone-less column: read in the primary's zone, bound after the band.
        let zoned = Cut::test("\"at\"", "2026-11-30T00:00:00Z", Some("America/New_York"))
            .less(std::time::Duration::from_secs(60));
        assert_eq!(
            zoned.condition(3),
            r#""at" <= (($3::pg_catalog.timestamptz - $4::pg_catalog.interval) at time zone $5::pg_catalog.text)"#
        );
        assert_eq!(zoned.binds(), ["2026-11-30T00:00:00Z", "60 seconds", "America/New_York"]);
        // As of T by transaction ids: no cut, the changed rows named by the primary.
        let xid = Since::Xid { next: 1000, aborted: Arc::new(vec![]), from: 3, floor: None };
        let plan = Keyed { t: &t, key: "id", hash: Hash::Text, row: &whole, since: &xid, cut: None };
        let (filter, binds) = plan.filter();
        assert_eq!(filter, r#""id" >= $1::pg_catalog.int8 and "id" < $2::pg_catalog.int8"#);
        assert!(binds.is_empty());
        let unknown = Since::Unknown { why: "a dump".into(), commit_ts: Some(false) };
        let plan = Keyed { t: &t, key: "id", hash: Hash::Text, row: &whole, since: &unknown, cut: None };
        assert!(!plan.decidable(), "nothing tells a difference from a change since T");
    }
}
