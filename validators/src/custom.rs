//! `custom`: the user's own SQL checks, each its own finding `check: NAME`. A check
//! either expects a value (the first column of the first row, as text) or must give
//! the same result on the primary (run there read-only, like every primary query).

use crate::context::{Context, Validator};
use crate::finding::Said;
use crate::finding::{Finding, Status};
use async_trait::async_trait;
use sqlx::PgPool;

pub struct Custom;

/// The first column of the first row as text (`NULL` for SQL NULL, `(no rows)` for none).
/// The user's SQL names their own tables, so it runs with PostgreSQL's default search
/// path (pg_catalog first, then `"$user", public`) for its transaction, on both sides.
async fn first_value(pool: &PgPool, sql: &str) -> Result<String, sqlx::Error> {
    // row_to_json keeps the column order; the user's query runs as written inside.
    let wrapped = format!("select pg_catalog.row_to_json(q)::pg_catalog.text from ({sql}) q limit 1");
    let mut tx = pool.begin().await?;
    sqlx::query("set local search_path = pg_catalog, \"$user\", public").execute(&mut *tx).await?;
    let json: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(wrapped)).fetch_optional(&mut *tx).await?;
    tx.rollback().await?;
    let Some(json) = json else { return Ok("(no rows)".into()) };
    Ok(first_of_object(&json))
}

/// The first value of a JSON object, as plain text.
fn first_of_object(json: &str) -> String {
    match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json) {
        Ok(m) => match m.into_iter().next().map(|(_, v)| v) {
            Some(serde_json::Value::String(s)) => s,
            Some(serde_json::Value::Null) | None => "NULL".into(),
            Some(v) => v.to_string(),
        },
        Err(_) => json.to_string(),
    }
}

#[async_trait]
impl Validator for Custom {
    fn name(&self) -> &'static str {
        "custom"
    }

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        if cx.settings.checks.is_empty() {
            return vec![Finding::new(self.name(), Status::Skipped, "no custom checks configured for this target")];
        }
        let mut out = Vec::new();
        for check in &cx.settings.checks {
            let name = format!("check: {}", check.name);
            let restored = match first_value(&cx.restored, &check.sql).await {
                Ok(v) => v,
                Err(e) => {
                    out.push(Finding::new(&name, Status::Error, format!("on the restored copy: {}", e.said())));
                    continue;
                }
            };
            let finding = match &check.expect {
                Some(expected) if restored.trim() == expected.trim() => {
                    Finding::new(&name, Status::Passed, format!("got {restored:?} as expected")).covered("queries", 1)
                }
                Some(expected) => {
                    Finding::new(&name, Status::Failed, format!("expected {expected:?}, got {restored:?}"))
                }
                None => match cx.primary_or_skip(&name) {
                    Err(skip) => skip,
                    Ok(p) => match p.timed(first_value(&p.pool, &check.sql)).await {
                        Ok(pv) if pv == restored => {
                            Finding::new(&name, Status::Passed, format!("{restored:?} on both")).covered("queries", 2)
                        }
                        Ok(pv) => Finding::new(&name, Status::Failed, format!("primary {pv:?}, restored {restored:?}")),
                        Err(e) => Finding::new(&name, Status::Error, format!("on the primary: {}", e.said())),
                    },
                },
            };
            out.push(finding);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn first_value_as_text() {
        assert_eq!(super::first_of_object(r#"{"count":0,"x":1}"#), "0");
        assert_eq!(super::first_of_object(r#"{"s":"abc"}"#), "abc");
        assert_eq!(super::first_of_object(r#"{"n":null}"#), "NULL");
    }
}
