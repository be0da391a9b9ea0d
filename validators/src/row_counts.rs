//! `row_counts`: each table has as many rows in the restored copy as on the primary —
//! exactly, counting rows written at or before the backup time, where the table has an
//! `as_of` column; otherwise within a relative tolerance (the primary keeps changing).

use crate::{Context, Finding, Status, TableName, Validator, some_of};
use async_trait::async_trait;
use futures::stream::{self, StreamExt};

pub struct RowCounts;

/// Whether `restored` is within `tolerance` (a fraction) of `primary`.
pub(crate) fn within(primary: i64, restored: i64, tolerance: f64) -> bool {
    let allowed = (primary as f64 * tolerance).floor() as i64;
    (primary - restored).abs() <= allowed
}

/// `select count(*)`, restricted by `condition` (an `as_of` cut-off) when given.
fn count_sql(t: &TableName, condition: Option<&str>) -> String {
    match condition {
        Some(c) => format!("select pg_catalog.count(*) from {} where {c}", t.quoted()),
        None => format!("select pg_catalog.count(*) from {}", t.quoted()),
    }
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
        let results: Vec<(TableName, bool, Result<(i64, i64), String>)> = stream::iter(common)
            .map(|t| async move {
                let r = async {
                    let cut = match cx.as_of(&t) {
                        Some(col) => cx.as_of_cut(&t, col).await.map_err(|e| e.to_string())?,
                        None => None,
                    };
                    let condition = cut.as_ref().map(|c| c.condition(1));
                    let sql = count_sql(&t, condition.as_deref());
                    let q = || {
                        let mut q = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.clone()));
                        for b in cut.iter().flat_map(|c| c.binds()) {
                            q = q.bind(b);
                        }
                        q
                    };
                    let p = match primary.timed(q().fetch_one(&primary.pool)).await {
                        Ok(p) => p,
                        Err(e) => return Err(crate::primary_error(primary, &t, &e).await),
                    };
                    let r = q().fetch_one(&cx.restored).await.map_err(|e| e.to_string())?;
                    Ok((cut.is_some(), p, r))
                }
                .await;
                match r {
                    Ok((exact, p, r)) => (t, exact, Ok((p, r))),
                    Err(e) => (t, false, Err(e)),
                }
            })
            .buffer_unordered(cx.settings.primary_concurrency.max(1) as usize)
            .collect()
            .await;
        let mut results = results;
        results.sort_by(|a, b| a.0.cmp(&b.0));
        let mut mismatches = Vec::new();
        let mut errors = Vec::new();
        let mut deleted_since = Vec::new();
        let mut exact = 0;
        for (t, has_as_of, r) in &results {
            exact += *has_as_of as usize;
            match r {
                // Fewer rows up to the cut-off than the primary: rows the backup lost.
                Ok((p, r)) if *has_as_of && r < p => {
                    mismatches.push(format!("{t}: primary {p}, restored {r} rows written at or before the backup time"))
                }
                // More: rows the primary deleted after the backup — not a loss.
                Ok((p, r)) if *has_as_of && r > p => {
                    deleted_since.push(format!("{t}: {} rows deleted on the primary since the backup", r - p))
                }
                Ok((p, r)) if !*has_as_of && !within(*p, *r, cx.row_count_tolerance) => {
                    mismatches.push(format!("{t}: primary {p}, restored {r}"))
                }
                Ok(_) => {}
                Err(e) => errors.push(format!("{t}: {e}")),
            }
        }
        let tolerance = format!("{}%", cx.row_count_tolerance * 100.0);
        let mut how = format!("{exact} exact by as_of, {} within {tolerance}", results.len() - exact);
        if !deleted_since.is_empty() {
            how.push_str(&format!("; {}", some_of(&deleted_since, 10)));
        }
        if let Some(n) = &note {
            how.push_str(&format!("; {n}"));
        }
        if !mismatches.is_empty() {
            vec![Finding::new(
                name,
                Status::Failed,
                format!(
                    "{} of {} tables differ ({how}): {}",
                    mismatches.len(),
                    results.len(),
                    some_of(&mismatches, 20)
                ),
            )]
        } else if !errors.is_empty() {
            vec![Finding::new(name, Status::Error, format!("could not count: {}", some_of(&errors, 10)))]
        } else {
            vec![
                Finding::new(name, Status::Passed, format!("{} tables match ({how})", results.len()))
                    .covered("tables", results.len() as u64),
            ]
        }
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
