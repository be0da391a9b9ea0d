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

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        let name = self.name();
        let mut cmd = tool(&cx.access, "pg_dump");
        cmd.args(["--data-only", "--no-sync", "-Fc", "-Z0", "-f", "/dev/null", "-d", &cx.access.database]);
        match cmd.output().await {
            Ok(out) if out.status.success() => vec![Finding::new(name, Status::Passed, "every table read end to end")],
            Ok(out) => vec![Finding::new(
                name,
                Status::Failed,
                format!("reading the data failed: {}", tail(&out.stderr, 3000)),
            )],
            Err(e) => vec![Finding::new(name, Status::Error, format!("cannot run pg_dump: {e}"))],
        }
    }
}
