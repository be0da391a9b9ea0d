//! `full_read`: every table read end to end — `pg_dump --data-only` to nowhere —
//! so an unreadable page or TOAST chunk anywhere fails the check.

use crate::amcheck::{tail, tool};
use crate::{Context, Finding, Status, Validator};
use async_trait::async_trait;

pub struct FullRead;

#[async_trait]
impl Validator for FullRead {
    fn name(&self) -> &'static str {
        "full_read"
    }

    fn self_check(&self) -> bool {
        true
    }

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        let name = self.name();
        let mut cmd = tool(&cx.access, "pg_dump");
        cmd.args(["--data-only", "--no-sync", "-Fc", "-Z0", "-f", "/dev/null", "-d", &cx.access.database]);
        // What pg_dump --data-only reads: every table and materialized view with storage.
        let tables: Result<i64, _> = sqlx::query_scalar(
            "select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace
              where c.relkind in ('r', 'm') and n.nspname not in ('pg_catalog', 'information_schema')
                and n.nspname not like 'pg_toast%'",
        )
        .fetch_one(&cx.restored)
        .await;
        let tables = match tables {
            Ok(n) => n.max(0) as u64,
            Err(e) => return vec![Finding::new(name, Status::Error, format!("counting tables: {e}"))],
        };
        match cmd.output().await {
            Ok(out) if out.status.success() => vec![
                Finding::new(name, Status::Passed, format!("all {tables} tables read end to end"))
                    .covered("tables", tables),
            ],
            Ok(out) => vec![Finding::new(
                name,
                Status::Failed,
                format!("reading the data failed: {}", tail(&out.stderr, 3000)),
            )],
            Err(e) => vec![Finding::new(name, Status::Error, format!("cannot run pg_dump: {e}"))],
        }
    }
}
