//! `row_counts`: each table has as many rows in the restored copy as on the primary,
//! within a relative tolerance (the primary keeps changing after the backup).

use crate::{Context, Finding, Primary, Status, TableName, Validator, catalog};
use async_trait::async_trait;
use futures::stream::{self, StreamExt};
use sqlx::PgPool;
use std::collections::BTreeSet;

pub struct RowCounts;

async fn count(pool: &PgPool, t: &TableName) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("select count(*) from {}", t.quoted()))).fetch_one(pool).await
}

/// Whether `restored` is within `tolerance` (a fraction) of `primary`.
pub(crate) fn within(primary: i64, restored: i64, tolerance: f64) -> bool {
    let allowed = (primary as f64 * tolerance).floor() as i64;
    (primary - restored).abs() <= allowed
}

#[async_trait]
impl Validator for RowCounts {
    fn name(&self) -> &'static str {
        "row_counts"
    }

    async fn validate(&self, cx: &Context) -> Finding {
        let name = self.name();
        let primary = match &cx.primary {
            Primary::Available(p) => p,
            Primary::Unavailable(why) => {
                return Finding::new(name, Status::Skipped, format!("primary unavailable: {why}"));
            }
        };
        let (on_primary, restored) = match (catalog::tables(primary).await, catalog::tables(&cx.restored).await) {
            (Ok(p), Ok(r)) => (p, r.into_iter().collect::<BTreeSet<_>>()),
            (Err(e), _) | (_, Err(e)) => {
                return Finding::new(name, Status::Error, format!("listing tables: {e}"));
            }
        };
        let common: Vec<TableName> = on_primary.into_iter().filter(|t| restored.contains(t)).collect();
        // The primary pool's size caps how many counts run there at once.
        let results: Vec<(TableName, Result<(i64, i64), sqlx::Error>)> = stream::iter(common)
            .map(|t| async move {
                let r = async { Ok((count(primary, &t).await?, count(&cx.restored, &t).await?)) }.await;
                (t, r)
            })
            .buffer_unordered(2)
            .collect()
            .await;
        let mut results = results;
        results.sort_by(|a, b| a.0.cmp(&b.0));
        let mut mismatches = Vec::new();
        let mut errors = Vec::new();
        for (t, r) in &results {
            match r {
                Ok((p, r)) if !within(*p, *r, cx.row_count_tolerance) => {
                    mismatches.push(format!("{t}: primary {p}, restored {r}"));
                }
                Ok(_) => {}
                Err(e) => errors.push(format!("{t}: {e}")),
            }
        }
        let tolerance = format!("{}%", cx.row_count_tolerance * 100.0);
        if !mismatches.is_empty() {
            Finding::new(
                name,
                Status::Failed,
                format!(
                    "{} of {} tables differ beyond {tolerance}: {}",
                    mismatches.len(),
                    results.len(),
                    mismatches.join("; ")
                ),
            )
        } else if !errors.is_empty() {
            Finding::new(name, Status::Error, format!("could not count: {}", errors.join("; ")))
        } else {
            Finding::new(name, Status::Passed, format!("{} tables match within {tolerance}", results.len()))
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
