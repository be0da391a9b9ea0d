//! `sql`: one query on a DSN or a target's primary. The value is the first column of
//! the first row, as PostgreSQL prints it (the simple query protocol returns text).

use super::{Outcome, Raced, StepCtx, race};
use crate::format::RawSql;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, Row};
use std::str::FromStr;
use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn run(s: &RawSql, ctx: &StepCtx<'_>) -> Result<Outcome, Outcome> {
    let query = ctx.resolve("query", &s.query)?;
    let (dsn, shown) = match (&s.dsn, &s.target) {
        (Some(d), _) => {
            let d = ctx.resolve("dsn", d)?;
            let shown = crate::scope::redact_urls(&d);
            (d, shown)
        }
        (None, Some(t)) => {
            let t = ctx.resolve("target", t)?;
            let primary = ctx
                .env
                .config
                .and_then(|c| c.target(&t))
                .and_then(|t| t.primary.clone())
                .ok_or_else(|| Outcome::failed(format!("target {t:?} has no primary in drcheck's config")))?;
            (primary.expose().to_string(), format!("the primary of {t}"))
        }
        (None, None) => return Err(Outcome::failed("sql needs `dsn` or `target`")),
    };
    let opts = PgConnectOptions::from_str(&dsn)
        .map_err(|_| Outcome::failed(format!("{shown} is not a valid postgres:// URL")))?;
    let budget = ctx.deadline.saturating_duration_since(tokio::time::Instant::now());
    let opts = opts
        .application_name("drcheck-drill")
        .options([("statement_timeout", format!("{}", budget.as_millis().max(1)))]);
    let connect = tokio::time::timeout(CONNECT_TIMEOUT.min(budget), sqlx::PgConnection::connect_with(&opts));
    let mut conn = match race(ctx, connect).await {
        Raced::Done(Ok(Ok(c))) => c,
        Raced::Done(Ok(Err(e))) => {
            return Err(Outcome::failed(format!("cannot connect to {shown}: {}", ctx.scrub(&e.to_string()))));
        }
        Raced::Done(Err(_)) => return Err(Outcome::failed(format!("cannot connect to {shown}: timed out"))),
        Raced::TimedOut => return Err(super::timed_out(ctx)),
        Raced::Cancelled => return Err(super::aborted()),
    };
    let result = race(ctx, sqlx::raw_sql(sqlx::AssertSqlSafe(query)).fetch_all(&mut conn)).await;
    let rows = match result {
        Raced::Done(Ok(rows)) => rows,
        Raced::Done(Err(e)) => return Err(Outcome::failed(format!("query failed: {}", ctx.scrub(&e.to_string())))),
        Raced::TimedOut => return Err(super::timed_out(ctx)),
        Raced::Cancelled => return Err(super::aborted()),
    };
    let _ = conn.close().await;
    let value = rows.first().map(|row| {
        row.try_get_raw(0)
            .ok()
            .and_then(|v| {
                if sqlx::ValueRef::is_null(&v) { Some(String::new()) } else { v.as_str().ok().map(str::to_string) }
            })
            .unwrap_or_default()
    });
    let shown_value = value.as_deref().map(|v| format!("{:?}", ctx.scrub(v))).unwrap_or_else(|| "no rows".into());
    let mut o = match (&s.expect, &value) {
        (Some(expect), Some(v)) => {
            let expect = ctx.resolve("expect", expect)?;
            if v.trim() == expect.trim() {
                Outcome::passed(format!("returned {shown_value}"))
            } else {
                Outcome::failed(format!("returned {shown_value}, expected {:?}", ctx.scrub(&expect)))
            }
        }
        (Some(expect), None) => Outcome::failed(format!("returned no rows, expected {:?}", ctx.scrub(expect))),
        (None, _) if s.capture.is_some() && value.is_none() => Outcome::failed("returned no rows to capture"),
        (None, _) => Outcome::passed(format!("returned {shown_value} ({} row(s))", rows.len())),
    };
    o.output = ctx.scrub(value.as_deref().unwrap_or(""));
    o.value = value.map(|v| v.trim().to_string());
    Ok(o)
}
