//! `row_counts`: each table has as many rows in the restored copy as the primary had at
//! the copy's point T — cheap counts, as of T ([`crate::asof`]):
//!
//! - where changes since T can be told (transaction ids, commit times), every row the
//!   primary holds unchanged since T must be in the copy: the copy may hold more (rows
//!   updated or deleted since), never fewer;
//! - where nothing tells, a table with an `as_of` column counts its rows up to T less
//!   `as_of_grace` exactly (fewer in the copy: lost; more: deleted on the primary since);
//!   other tables must be within a relative tolerance, and a difference beyond it cannot
//!   be told from the primary's own changes since: inconclusive, with what would prove it.

use crate::Said;
use crate::asof::{self, Bind};
use crate::{Context, Finding, Status, TableName, Validator, some_of};
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
    /// Rows unchanged since T (by transaction ids or commit times).
    AsOf,
    /// Rows written up to T less the grace band (`as_of`).
    Cut,
    /// All rows, within the tolerance.
    Tolerance,
    /// Not counted on the primary: a whole count would read more of it than one slice
    /// of `primary_read_budget` allows (`checksums` compares it slice by slice).
    OverBudget,
}

/// Counts of one table: the primary's (unchanged since T, or cut), its rows changed
/// since T, the copy's.
async fn count(
    cx: &Context,
    primary: &crate::primary::PrimaryDb,
    t: &TableName,
) -> Result<(How, i64, i64, i64), String> {
    if let Some(r) = &cx.rotation {
        let sql = format!(
            "select pg_catalog.pg_total_relation_size('{}'::pg_catalog.regclass)::pg_catalog.int8",
            t.quoted().replace('\'', "''")
        );
        let q = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql));
        let size = primary.timed(q.fetch_one(&primary.pool)).await.map_err(|e| e.said())?;
        if size as u64 > r.share_bytes {
            return Ok((How::OverBudget, size, 0, 0));
        }
    }
    let (how, filter, binds, changed) = match cx.since.changed("drcheck_row", 1) {
        Some((changed, binds)) => (How::AsOf, None, binds, Some(changed)),
        None => match cx.settled_cut(t).await.map_err(|e| e.said())? {
            Some(cut) => (How::Cut, Some(cut.condition(1)), cut.binds().into_iter().map(Bind::Text).collect(), None),
            None => (How::Tolerance, None, vec![], None),
        },
    };
    let where_ = filter.as_deref().map(|c| format!(" where {c}")).unwrap_or_default();
    let table = t.quoted();
    let primary_sql = match &changed {
        Some(c) => format!(
            "select pg_catalog.count(*) filter (where not ({c})), pg_catalog.count(*) filter (where {c}) \
               from {table} drcheck_row"
        ),
        None => format!("select pg_catalog.count(*), 0::pg_catalog.int8 from {table} drcheck_row{where_}"),
    };
    let q = asof::bind_all(sqlx::query_as::<_, (i64, i64)>(sqlx::AssertSqlSafe(primary_sql)), &binds).persistent(false);
    let (p, p_changed) = match primary.timed(q.fetch_one(&primary.pool)).await {
        Ok(v) => v,
        Err(e) => return Err(crate::primary_error(primary, t, &e).await),
    };
    let copy_sql = format!("select pg_catalog.count(*) from {table} drcheck_row{where_}");
    let copy_binds = if how == How::Cut { binds } else { vec![] };
    let r = asof::bind_scalar(sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(copy_sql)), &copy_binds)
        .fetch_one(&cx.restored)
        .await
        .map_err(|e| e.said())?;
    Ok((how, p, p_changed, r))
}

#[async_trait]
impl Validator for RowCounts {
    fn name(&self) -> &'static str {
        "row_counts"
    }

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        let name = self.name();
        let (primary, common, note) = match cx.common_tables(name).await {
            Ok(v) => v,
            Err(finding) => return vec![finding],
        };
        let mut results: Vec<(TableName, Result<(How, i64, i64, i64), String>)> = stream::iter(common)
            .map(|t| async move {
                let r = count(cx, primary, &t).await;
                (t, r)
            })
            .buffer_unordered(cx.settings.primary_concurrency.max(1) as usize)
            .collect()
            .await;
        results.sort_by(|a, b| a.0.cmp(&b.0));
        let (mut mismatches, mut errors, mut since, mut inconclusive) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut as_of, mut cut, mut tolerance) = (0u64, 0u64, 0u64);
        let mut over_budget = Vec::new();
        let mut changed_total = 0i64;
        for (t, r) in &results {
            let (how, p, changed, r) = match r {
                Ok(v) => *v,
                Err(e) => {
                    errors.push(format!("{t}: {e}"));
                    continue;
                }
            };
            changed_total += changed;
            match how {
                How::OverBudget => over_budget.push(format!("{t} ({} MiB)", p >> 20)),
                // Every row unchanged since T must be there; more are rows changed since.
                How::AsOf if r < p => mismatches
                    .push(format!("{t}: the primary holds {p} rows unchanged since the copy's point, the copy {r}")),
                How::AsOf => as_of += 1,
                How::Cut if r < p => mismatches.push(format!(
                    "{t}: primary {p}, restored {r} rows written at or before the backup time (less as_of_grace)"
                )),
                How::Cut => {
                    cut += 1;
                    if r > p {
                        since.push(format!("{t}: {} rows deleted on the primary since the backup", r - p));
                    }
                }
                How::Tolerance if within(p, r, cx.row_count_tolerance) => tolerance += 1,
                How::Tolerance => inconclusive.push(format!(
                    "{t}: primary {p} rows, restored {r} — beyond {}%, and changes since the dump cannot be told \
                     from lost rows; to prove it, {}",
                    cx.row_count_tolerance * 100.0,
                    cx.since.how_to_prove()
                )),
            }
        }
        let mut how = Vec::new();
        if as_of > 0 {
            how.push(format!(
                "{as_of} as of the copy's point ({changed_total} rows changed on the primary since, counted)"
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
                    crate::also_could_not("count", &errors)
                ),
            )
        } else if !errors.is_empty() {
            Finding::new(name, Status::Error, format!("could not count: {}", some_of(&errors, 10)))
        } else {
            let matched = as_of + cut + tolerance;
            Finding::new(name, Status::Passed, format!("{matched} tables match ({how})")).covered("tables", matched)
        };
        vec![finding.with("rows_changed_since", changed_total as f64).inconclusive(inconclusive)]
    }
}

#[cfg(test)]
mod tests {
    use super::within;

    #[test]
    fn tolerance_is_relative_to_the_primary() {
        assert!(within(1000, 999, 0.001));
        assert!(!within(1000, 998, 0.001));
        assert!(within(0, 0, 0.001));
        assert!(!within(0, 1, 0.001));
        assert!(!within(10, 11, 0.05));
    }
}
