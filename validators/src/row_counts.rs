//! `row_counts`: each table has as many rows in the restored copy as the primary had at
//! the copy's point T — cheap counts, as of T ([`crate::asof`]):
//!
//! - where changes since T can be told (transaction ids, commit times, drcheck's journal),
//!   every row the primary holds unchanged since T must be in the copy: the copy may hold
//!   more (rows updated or deleted since), never fewer — and every row that existed at T
//!   and was *updated* since must be there too: of the rows written since (old enough for
//!   the primary's statistics to have counted them, `stats_settle`), those the primary
//!   did not insert — its own `n_tup_ins` since the journal's sample before T says how
//!   many it did — were in the table at T. Without those counters a copy that holds fewer
//!   is undecided, never passed;
//! - where nothing tells, a table with an `as_of` column counts its rows up to T less
//!   `as_of_grace` exactly (fewer in the copy: lost; more: deleted on the primary since);
//!   other tables must be within a relative tolerance, and a difference beyond it cannot
//!   be told from the primary's own changes since: inconclusive, with what would prove it.

use crate::asof::{self, Bind};
use crate::context::{Context, Validator};
use crate::finding::Failure;
use crate::finding::Said;
use crate::finding::{Finding, Status, TableName, some_of};
use async_trait::async_trait;
use futures::stream::{self, StreamExt};

pub struct RowCounts;

/// Whether `restored` is within `tolerance` (a fraction) of `primary`.
pub(crate) fn within(primary: i64, restored: i64, tolerance: f64) -> bool {
    let allowed = (primary as f64 * tolerance).floor() as i64;
    (primary - restored).abs() <= allowed
}

/// How one table was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    /// Rows unchanged since T (by transaction ids, commit times or the journal).
    AsOf,
    /// Rows written up to T less the grace band (`as_of`).
    Cut,
    /// All rows, within the tolerance.
    Tolerance,
    /// Not counted on the primary: a whole count would read more of it than one slice
    /// of `primary_read_budget` allows (`checksums` compares it slice by slice).
    OverBudget,
}

/// One table's counts: the primary's (unchanged since T, or cut), its rows changed since
/// T (and of those, the ones old enough for its insert counters), the copy's, and the
/// rows the primary inserted since the journal's counters from before T (`None`: no
/// usable counters).
#[derive(Debug, Clone, Copy)]
struct Counted {
    how: How,
    primary: i64,
    changed: i64,
    settled: i64,
    copy: i64,
    inserted: Option<i64>,
}

/// The primary's statistics now: its database, when they were reset, each partition's
/// relid and `n_tup_ins`.
type StatsNow = (String, Option<String>, Option<Vec<i64>>, Option<Vec<i64>>);

/// The rows the primary inserted into `t` (all its partitions) since the journal's
/// counters: `None` when they cannot say (no sample, another database, statistics
/// reset or gone backwards since).
async fn inserted_since(
    cx: &Context,
    primary: &crate::primary::PrimaryDb,
    t: &TableName,
) -> Result<Option<i64>, sqlx::Error> {
    let Some(counters) = cx.journal.counted.as_ref().and_then(|s| s.counters.clone()) else { return Ok(None) };
    // The table itself, or a partitioned one's leaves (`pg_partition_tree` lists nothing
    // for a table that is not partitioned).
    let q = t.quoted().replace('\'', "''");
    let leaves = format!(
        "(s.relid operator(pg_catalog.=) '{q}'::pg_catalog.regclass \
          or s.relid in (select p.relid from pg_catalog.pg_partition_tree('{q}'::pg_catalog.regclass) p \
                          where p.isleaf))"
    );
    let sql = format!(
        "select pg_catalog.current_database()::pg_catalog.text,
                (select pg_catalog.to_char(pg_catalog.timezone('UTC', d.stats_reset), 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
                   from pg_catalog.pg_stat_database d where d.datname operator(pg_catalog.=) pg_catalog.current_database()),
                (select pg_catalog.array_agg(s.relid::pg_catalog.int8 order by s.relid)
                   from pg_catalog.pg_stat_user_tables s where {leaves}),
                (select pg_catalog.array_agg(s.n_tup_ins::pg_catalog.int8 order by s.relid)
                   from pg_catalog.pg_stat_user_tables s where {leaves})"
    );
    let (db, reset, relids, ins): StatsNow =
        primary.timed(sqlx::query_as(sqlx::AssertSqlSafe(sql)).fetch_one(&primary.pool)).await?;
    if db != counters.database || reset != counters.stats_reset {
        return Ok(None);
    }
    let (relids, ins) = (relids.unwrap_or_default(), ins.unwrap_or_default());
    // No counters for it: they cannot say (never read as "nothing inserted").
    if relids.is_empty() || relids.len() != ins.len() {
        return Ok(None);
    }
    let mut total = 0i64;
    for (relid, ins) in relids.into_iter().zip(ins) {
        // A partition made since the sample held nothing then.
        let then = counters.inserted.get(&relid).copied().unwrap_or(0);
        if ins < then {
            return Ok(None);
        }
        total += ins - then;
    }
    Ok(Some(total))
}

/// Counts of one table (see [`Counted`]).
async fn count(cx: &Context, primary: &crate::primary::PrimaryDb, t: &TableName) -> Result<Counted, Failure> {
    if let Some(r) = &cx.rotation {
        let sql = format!(
            "select pg_catalog.pg_total_relation_size('{}'::pg_catalog.regclass)::pg_catalog.int8",
            t.quoted().replace('\'', "''")
        );
        let q = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql));
        let size = primary.timed(q.fetch_one(&primary.pool)).await?;
        if size as u64 > r.share_bytes {
            return Ok(Counted {
                how: How::OverBudget,
                primary: size,
                changed: 0,
                settled: 0,
                copy: 0,
                inserted: None,
            });
        }
    }
    let (how, filter, mut binds, changed) = match cx.since.changed("drcheck_row", 1) {
        Some((changed, binds)) => (How::AsOf, None, binds, Some(changed)),
        None => match cx.settled_cut(t).await? {
            Some(cut) => (How::Cut, Some(cut.condition(1)), cut.binds().into_iter().map(Bind::Text).collect(), None),
            None => (How::Tolerance, None, vec![], None),
        },
    };
    let where_ = filter.as_deref().map(|c| format!(" where {c}")).unwrap_or_default();
    let table = t.quoted();
    let primary_sql = match &changed {
        Some(c) => {
            // Rows changed since T and written before the settled horizon: the primary's
            // insert counters hold them by now.
            let settled = match &cx.journal.settled {
                Some(s) => {
                    let h = asof::Since::Journal { horizon: asof::Horizon::settled(s) };
                    let (after, b) = h.changed("drcheck_row", binds.len() + 1).expect("a journal tells");
                    binds.extend(b);
                    format!("({c}) and not ({after})")
                }
                None => "false".into(),
            };
            format!(
                "select pg_catalog.count(*) filter (where not ({c})), pg_catalog.count(*) filter (where {c}), \
                        pg_catalog.count(*) filter (where {settled}) \
                   from {table} drcheck_row"
            )
        }
        None => format!(
            "select pg_catalog.count(*), 0::pg_catalog.int8, 0::pg_catalog.int8 from {table} drcheck_row{where_}"
        ),
    };
    let q = asof::bind_all(sqlx::query_as::<_, (i64, i64, i64)>(sqlx::AssertSqlSafe(primary_sql)), &binds)
        .persistent(false);
    let (p, p_changed, p_settled) = match primary.timed(q.fetch_one(&primary.pool)).await {
        Ok(v) => v,
        Err(e) => return Err(crate::context::primary_error(primary, t, e).await.into()),
    };
    let copy_sql = format!("select pg_catalog.count(*) from {table} drcheck_row{where_}");
    let copy_binds = if how == How::Cut { binds } else { vec![] };
    let r = asof::bind_scalar(sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(copy_sql)), &copy_binds)
        .fetch_one(&cx.restored)
        .await
        .map_err(|e| e.said())?;
    let inserted = if how == How::AsOf && p_settled > 0 {
        inserted_since(cx, primary, t).await.map_err(|e| e.said())?
    } else {
        None
    };
    Ok(Counted { how, primary: p, changed: p_changed, settled: p_settled, copy: r, inserted })
}

/// What a table's counts say (see the module's documentation).
#[derive(Debug, PartialEq)]
enum Verdict {
    Match,
    /// The copy lacks rows: why.
    Lacks(String),
    /// Cannot be decided: why.
    Undecided(String),
    /// Matches; rows deleted on the primary since (an `as_of` table).
    MatchDeleted(i64),
}

/// The verdict of one table's counts, pure logic.
fn judge(c: &Counted, tolerance: f64, counters_at: Option<&str>) -> Verdict {
    let (p, r) = (c.primary, c.copy);
    match c.how {
        How::OverBudget => Verdict::Match,
        // Every row unchanged since T must be there; more are rows changed since.
        How::AsOf if r < p => {
            Verdict::Lacks(format!("the primary holds {p} rows unchanged since the copy's point, the copy {r}"))
        }
        // And every row that existed at T and was updated since: of the rows written since
        // (and settled in the counters), those the primary did not insert were there at T.
        How::AsOf if c.settled > 0 && r < p + c.settled => match c.inserted {
            Some(ins) if r < p + c.settled - ins => Verdict::Lacks(format!(
                "the copy holds {r} rows; the primary holds {p} unchanged since the copy's point and {} written \
                 since, of which it inserted at most {ins} (its insert counters since {}): at least {} rows that \
                 existed at the copy's point, updated since, are missing",
                c.settled,
                counters_at.unwrap_or("the sample"),
                p + c.settled - ins - r
            )),
            Some(_) => Verdict::Match,
            None => Verdict::Undecided(format!(
                "the copy holds {r} rows, the primary {p} unchanged since the copy's point and {} written since: \
                 without the primary's insert counters from before the copy's point, rows updated since cannot be \
                 told from rows inserted since",
                c.settled
            )),
        },
        How::AsOf => Verdict::Match,
        How::Cut if r < p => Verdict::Lacks(format!(
            "primary {p}, restored {r} rows written at or before the backup time (less as_of_grace)"
        )),
        How::Cut if r > p => Verdict::MatchDeleted(r - p),
        How::Cut => Verdict::Match,
        How::Tolerance if within(p, r, tolerance) => Verdict::Match,
        How::Tolerance => Verdict::Undecided(format!(
            "primary {p} rows, restored {r} — beyond {}%, and changes since the dump cannot be told from lost rows",
            tolerance * 100.0
        )),
    }
}

#[async_trait]
impl Validator for RowCounts {
    fn weighs_undecided(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        "row_counts"
    }

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        let name = self.name();
        let (primary, common, note) = match cx.common_tables(name).await {
            Ok(v) => v,
            Err(finding) => return vec![finding],
        };
        let mut results: Vec<(TableName, Result<Counted, Failure>)> = stream::iter(common)
            .map(|t| async move {
                let r = count(cx, primary, &t).await;
                (t, r)
            })
            .buffer_unordered(cx.settings.primary_concurrency.max(1) as usize)
            .collect()
            .await;
        results.sort_by(|a, b| a.0.cmp(&b.0));
        let counters_at = cx.journal.counted.as_ref().map(|s| humantime::format_rfc3339_seconds(s.at).to_string());
        let (mut mismatches, mut errors, mut since, mut inconclusive) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut as_of, mut cut, mut tolerance) = (0u64, 0u64, 0u64);
        let mut over_budget = Vec::new();
        let mut changed_total = 0i64;
        let mut weighed = 0u64;
        for (t, r) in &results {
            let c = match r {
                Ok(v) => *v,
                Err(e) => {
                    errors.push(format!("{t}: {e}"));
                    continue;
                }
            };
            changed_total += c.changed;
            weighed += u64::from(c.inserted.is_some());
            match (c.how, judge(&c, cx.row_count_tolerance, counters_at.as_deref())) {
                (How::OverBudget, _) => over_budget.push(format!("{t} ({} MiB)", c.primary >> 20)),
                (_, Verdict::Lacks(why)) => mismatches.push(format!("{t}: {why}")),
                (_, Verdict::Undecided(why)) => {
                    inconclusive.push(format!("{t}: {why}; to prove it, {}", cx.since.how_to_prove()))
                }
                (How::AsOf, _) => as_of += 1,
                (How::Cut, v) => {
                    cut += 1;
                    if let Verdict::MatchDeleted(n) = v {
                        since.push(format!("{t}: {n} rows deleted on the primary since the backup"));
                    }
                }
                (How::Tolerance, _) => tolerance += 1,
            }
        }
        let mut how = Vec::new();
        if as_of > 0 {
            how.push(format!(
                "{as_of} as of the copy's point ({changed_total} rows changed on the primary since, counted{})",
                if weighed > 0 {
                    format!("; {weighed} tables weighed against the primary's insert counters")
                } else {
                    String::new()
                }
            ));
        }
        if cut > 0 {
            how.push(format!("{cut} exact by as_of"));
        }
        if tolerance > 0 {
            how.push(format!("{tolerance} within {}%", cx.row_count_tolerance * 100.0));
        }
        if !over_budget.is_empty() {
            how.push(format!(
                "not counted on the primary, a whole count being more than one slice of primary_read_budget reads \
                 (checksums compares them slice by slice): {}",
                some_of(&over_budget, 10)
            ));
        }
        how.extend(since);
        how.extend(note);
        if as_of > 0 {
            how.push(cx.since.describe());
        }
        let how = how.join("; ");
        let finding = if !mismatches.is_empty() {
            Finding::new(
                name,
                Status::Failed,
                format!(
                    "{} of {} tables differ ({how}): {}{}",
                    mismatches.len(),
                    results.len(),
                    some_of(&mismatches, 20),
                    crate::finding::also_could_not("count", &errors)
                ),
            )
        } else if !errors.is_empty() {
            Finding::new(name, Status::Error, format!("could not count: {}", some_of(&errors, 10)))
        } else {
            let matched = as_of + cut + tolerance;
            Finding::new(name, Status::Passed, format!("{matched} tables match ({how})")).covered("tables", matched)
        };
        vec![
            finding
                .with("rows_changed_since", changed_total as f64)
                .with(crate::finding::UNDECIDED_TABLES, inconclusive.len() as f64)
                .inconclusive(inconclusive),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(how: How, primary: i64, settled: i64, copy: i64, inserted: Option<i64>) -> Counted {
        Counted { how, primary, changed: settled, settled, copy, inserted }
    }

    /// Issue 46: a dump with a hot table emptied — every row updated since the dump —
    /// passed: the copy held no fewer rows than the primary's unchanged ones (none).
    #[test]
    fn rows_updated_since_must_still_be_in_the_copy() {
        // 1000 rows, all updated since T, none inserted: the copy must hold all 1000.
        let v = judge(&counted(How::AsOf, 0, 1000, 0, Some(0)), 0.001, Some("2026-12-01T00:00:00Z"));
        assert!(matches!(&v, Verdict::Lacks(w) if w.contains("at least 1000 rows")), "{v:?}");
        let v = judge(&counted(How::AsOf, 0, 1000, 1000, Some(0)), 0.001, None);
        assert_eq!(v, Verdict::Match, "an honest copy: every updated row there");
        // 40 inserted since T: those may be missing, no more.
        assert_eq!(judge(&counted(How::AsOf, 500, 100, 560, Some(40)), 0.001, None), Verdict::Match);
        assert!(matches!(judge(&counted(How::AsOf, 500, 100, 559, Some(40)), 0.001, None), Verdict::Lacks(_)));
        // Without counters: not decided, never passed.
        assert!(matches!(judge(&counted(How::AsOf, 500, 100, 550, None), 0.001, None), Verdict::Undecided(_)));
        assert_eq!(judge(&counted(How::AsOf, 500, 100, 600, None), 0.001, None), Verdict::Match);
        // Unchanged rows missing: lacking whatever the counters say.
        assert!(matches!(judge(&counted(How::AsOf, 500, 0, 499, Some(0)), 0.001, None), Verdict::Lacks(_)));
        // Nothing tells changes: beyond the tolerance is undecided.
        assert!(matches!(judge(&counted(How::Tolerance, 1000, 0, 990, None), 0.001, None), Verdict::Undecided(_)));
        assert_eq!(judge(&counted(How::Tolerance, 1000, 0, 999, None), 0.001, None), Verdict::Match);
    }

    #[test]
    fn tolerance_is_relative_to_the_primary() {
        assert!(within(1000, 999, 0.001));
        assert!(!within(1000, 998, 0.001));
        assert!(within(0, 0, 0.001));
        assert!(!within(0, 1, 0.001));
        assert!(!within(10, 11, 0.05));
    }
}
