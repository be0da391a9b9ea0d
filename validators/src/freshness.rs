//! `freshness`: the newest `as_of` value in the restored copy, against the backup's
//! time and the primary's newest. The gap to the primary is the data a restore right
//! now would lose (`data_lag_seconds`); data much older than the backup's own time
//! (beyond the RPO) means the backup was taken from a stale source.

use crate::context::{Context, Validator};
use crate::finding::Said;
use crate::finding::{Finding, Status, TableName};
use async_trait::async_trait;
use drcheck_config::quote_ident;
use std::time::UNIX_EPOCH;

pub struct Freshness;

fn newer(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    }
}

/// The newest value of `col` as seconds since the epoch; a zone-less column's values
/// are local times of the zone bound as `$1` (the primary's own).
fn newest_sql(t: &TableName, col: &str, zoneless: bool) -> String {
    let newest = format!("pg_catalog.max({})", quote_ident(col));
    let instant = if zoneless { format!("({newest} at time zone $1::pg_catalog.text)") } else { newest };
    format!("select pg_catalog.date_part('epoch', {instant})::pg_catalog.float8 from {}", t.quoted())
}

#[async_trait]
impl Validator for Freshness {
    fn name(&self) -> &'static str {
        "freshness"
    }

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        let name = self.name();
        if cx.settings.as_of.is_empty() {
            return vec![Finding::new(name, Status::Skipped, "no as_of columns configured for this target")];
        }
        let backup_epoch = cx.backup_time.map(|t| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64());
        let (mut restored_newest, mut primary_newest) = (None::<f64>, None::<f64>);
        let mut absent = Vec::new();
        let mut checked = 0u64;
        for (schema, table, col) in &cx.settings.as_of {
            let t = TableName { schema: schema.clone(), name: table.clone() };
            // A table outside the dump's scope, or made after the copy's point, is not
            // the copy's to hold.
            if !cx.in_scope(&t) {
                continue;
            }
            checked += 1;
            let zoneless = match crate::catalog::zoneless_column(&cx.restored, &t, col).await {
                Ok(z) => z,
                Err(e) => {
                    return vec![Finding::new(name, Status::Error, format!("the type of {t}.{col}: {}", e.said()))];
                }
            };
            let sql = newest_sql(&t, col, zoneless);
            let zone = cx.primary_zone().to_string();
            let q = || {
                let q = sqlx::query_scalar::<_, Option<f64>>(sqlx::AssertSqlSafe(sql.clone()));
                if zoneless { q.bind(zone.clone()) } else { q }
            };
            match q().fetch_one(&cx.restored).await {
                Ok(v) => restored_newest = newer(restored_newest, v),
                Err(e) if crate::point_in_time::undefined_table(&e) => {
                    absent.push(t.to_string());
                    checked -= 1;
                    continue;
                }
                Err(e) => {
                    return vec![Finding::new(
                        name,
                        Status::Error,
                        format!("newest {t}.{col} in the restored copy: {}", e.said()),
                    )];
                }
            }
            if let crate::context::Primary::Available(p) = &cx.primary {
                match p.timed(q().fetch_one(&p.pool)).await {
                    Ok(v) => primary_newest = newer(primary_newest, v),
                    Err(e) => {
                        return vec![Finding::new(
                            name,
                            Status::Error,
                            format!("newest {t}.{col} on the primary: {}", e.said()),
                        )];
                    }
                }
            }
        }
        let absent = if absent.is_empty() {
            String::new()
        } else {
            format!("; not in the copy (made after its point): {}", absent.join(", "))
        };
        let Some(restored) = restored_newest else {
            return vec![Finding::new(
                name,
                Status::Skipped,
                format!("the as_of columns hold no rows in the restored copy{absent}"),
            )];
        };
        let behind_backup = backup_epoch.map(|b| (b - restored).max(0.0));
        let mut f = Finding::new(name, Status::Passed, "").covered("tables", checked);
        if let Some(b) = behind_backup {
            f = f.with("newest_row_behind_backup_seconds", (b * 1000.0).round() / 1000.0);
        }
        let mut detail = match behind_backup {
            Some(b) => format!("newest row in the backup is {b:.0}s older than the backup itself"),
            None => "the backup records no time of its own to compare its newest row with".to_string(),
        };
        if let Some(p) = primary_newest {
            let lag = (p - restored).max(0.0);
            detail.push_str(&format!(
                "; the primary has {lag:.0}s of newer data (the data-loss window of a restore now)"
            ));
            f = f.with("data_lag_seconds", (lag * 1000.0).round() / 1000.0);
        } else if let crate::context::Primary::Unavailable(why) = &cx.primary {
            detail.push_str(&format!("; data lag unknown: primary unavailable: {why}"));
        }
        if behind_backup.is_some_and(|b| b > cx.rpo.as_secs_f64()) {
            f.status = Status::Failed;
            detail = format!("the backup's newest data is older than the RPO allows: {detail}");
        }
        f.detail = detail + &absent;
        vec![f]
    }
}
