//! `row_counts`: each table has as many rows in the restored copy as on the primary —
//! exactly, counting rows written at or before the backup time, where the table has an
//! `as_of` column; otherwise within a relative tolerance (the primary keeps changing).

use crate::{Context, Finding, Status, TableName, Validator, some_of};
use async_trait::async_trait;
use drcheck_config::quote_ident;
use futures::stream::{self, StreamExt};

pub struct RowCounts;

/// Whether `restored` is within `tolerance` (a fraction) of `primary`.
pub(crate) fn within(primary: i64, restored: i64, tolerance: f64) -> bool {
    let allowed = (primary as f64 * tolerance).floor() as i64;
    (primary - restored).abs() <= allowed
}

/// `select count(*)`, restricted to rows at or before `$1` when `as_of` is given.
fn count_sql(t: &TableName, as_of: Option<&str>) -> String {
    match as_of {
        Some(col) => format!(
            "select pg_catalog.count(*) from {} where {} <= $1::pg_catalog.timestamptz",
            t.quoted(),
            quote_ident(col)
        ),
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
        let (primary, common) = match cx.common_tables(name).await {
            Ok(v) => v,
            Err(finding) => return vec![finding],
        };
        let results: Vec<(TableName, bool, Result<(i64, i64), sqlx::Error>)> = stream::iter(common)
            .map(|t| async move {
                let r = async {
                    let cutoff = match cx.as_of(&t) {
                        Some(col) => cx.cutoff(&t, col).await?.map(|c| (col, c)),
                        None => None,
                    };
                    let sql = count_sql(&t, cutoff.as_ref().map(|(col, _)| *col));
                    let q = || {
                        let q = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.clone()));
                        match &cutoff {
                            Some((_, c)) => q.bind(c.clone()),
                            None => q,
                        }
                    };
                    let p = primary.timed(q().fetch_one(&primary.pool)).await?;
                    let r = q().fetch_one(&cx.restored).await?;
                    Ok((cutoff.is_some(), p, r))
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
        let mut exact = 0;
        for (t, has_as_of, r) in &results {
            exact += *has_as_of as usize;
            match r {
                Ok((p, r)) if *has_as_of && p != r => {
                    mismatches.push(format!("{t}: primary {p}, restored {r} rows written at or before the backup time"))
                }
                Ok((p, r)) if !*has_as_of && !within(*p, *r, cx.row_count_tolerance) => {
                    mismatches.push(format!("{t}: primary {p}, restored {r}"))
                }
                Ok(_) => {}
                Err(e) => errors.push(format!("{t}: {e}")),
            }
        }
        let tolerance = format!("{}%", cx.row_count_tolerance * 100.0);
        let how = format!("{exact} exact by as_of, {} within {tolerance}", results.len() - exact);
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
