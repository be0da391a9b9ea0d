//! `point_in_time`: where replay actually stopped, proven by the data. The primary
//! writes a heartbeat row (`at timestamptz`) every `interval` (`[target.heartbeat]`);
//! after a restore replayed to a moment T:
//!
//! - the newest heartbeat in the copy is at or before T (replay did not overshoot) and
//!   within `interval` + 5 s of it (it did not stop early) — when the primary itself
//!   wrote nothing in that span, the heartbeat fell silent and nothing can be proven:
//!   `error`, never `passed`;
//! - the primary and the copy hold the same heartbeats written up to T − 5 s (over the span
//!   both keep; one written just before T may commit after it);
//! - no row of an `as_of` table is newer than T (rows up to T are compared exactly by
//!   `row_counts` and `checksums`, cut at the replayed point).
//!
//! Without a time target (the latest point, a logical dump) it reads the copy's newest
//! heartbeat: the data's true time, and its lag behind the primary's newest
//! (`data_lag_seconds`).
//!
//! Values are read as numbers (epoch seconds) through `pg_catalog` functions only: the
//! copy's own functions or operators cannot change what is compared.

use crate::context::{Context, Validator};
use crate::finding::Said;
use crate::finding::{Finding, Status, TableName};
use async_trait::async_trait;
use drcheck_config::quote_ident;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub struct PointInTime;

/// Slack on top of the heartbeat's interval: commit and clock jitter.
pub const SLACK: Duration = Duration::from_secs(5);

/// Heartbeats compared one by one (the newest up to T); older ones are compared by count.
const COMPARED: i64 = 1000;

fn epoch(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

fn stamp(secs: f64) -> String {
    let t = UNIX_EPOCH + Duration::from_secs_f64(secs.max(0.0));
    humantime::format_rfc3339_millis(t).to_string()
}

fn rfc(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

/// What one side holds of the heartbeat.
#[derive(Debug, Default)]
struct Beats {
    /// Every heartbeat, and the newest and oldest of them.
    newest: Option<f64>,
    oldest: Option<f64>,
    /// At or before T (or all, without T): how many from `from` on, and the newest few.
    count: i64,
    recent: Vec<f64>,
}

async fn read_beats(
    pool: &sqlx::PgPool,
    table: &str,
    upto: Option<&str>,
    from: Option<f64>,
) -> Result<Beats, sqlx::Error> {
    let at = "pg_catalog.date_part('epoch', at)::pg_catalog.float8";
    let (newest, oldest): (Option<f64>, Option<f64>) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "select pg_catalog.max({at}), pg_catalog.min({at}) from only {table}"
    )))
    .fetch_one(pool)
    .await?;
    let bound = match upto {
        Some(_) => "at <= $1::pg_catalog.timestamptz",
        None => "$1::pg_catalog.text is null",
    };
    let from_cond = "($2::pg_catalog.float8 is null or pg_catalog.date_part('epoch', at)::pg_catalog.float8 >= $2)";
    let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "select pg_catalog.count(*) from only {table} where {bound} and {from_cond}"
    )))
    .bind(upto)
    .bind(from)
    .fetch_one(pool)
    .await?;
    let recent: Vec<f64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "select {at} from only {table} where {bound} and {from_cond} order by at desc limit {COMPARED}"
    )))
    .bind(upto)
    .bind(from)
    .fetch_all(pool)
    .await?;
    Ok(Beats { newest, oldest, count, recent })
}

/// Whether a query failed because its table does not exist (SQLSTATE 42P01).
pub(crate) fn undefined_table(e: &sqlx::Error) -> bool {
    e.as_database_error().and_then(|d| d.code()).is_some_and(|c| c == "42P01")
}

#[async_trait]
impl Validator for PointInTime {
    fn name(&self) -> &'static str {
        "point_in_time"
    }

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        let name = self.name();
        let Some(hb) = &cx.heartbeat else {
            return vec![Finding::new(
                name,
                Status::Skipped,
                "no [target.heartbeat] table: where replay stopped cannot be proven from the data",
            )];
        };
        let t = TableName { schema: hb.schema.clone(), name: hb.table.clone() };
        let table = t.quoted();
        let target = cx.target_time;
        let upto = target.map(rfc);
        if !cx.in_scope(&t) {
            return vec![Finding::new(
                name,
                Status::Skipped,
                format!("heartbeat {t} is outside the dump's scope (dump_scope): the backup does not hold it"),
            )];
        }
        let primary = match &cx.primary {
            crate::context::Primary::Available(p) => Some(p),
            crate::context::Primary::Unavailable(_) => None,
        };
        let copy = match read_beats(&cx.restored, &table, None, None).await {
            Ok(b) => b,
            // Not in the copy at all: made after its point (`heartbeat setup` run since).
            Err(e) if undefined_table(&e) => Beats::default(),
            Err(e) => {
                return vec![Finding::new(
                    name,
                    Status::Error,
                    format!("reading heartbeat {t} in the restored copy: {}", e.said()),
                )];
            }
        };
        let Some(copy_newest) = copy.newest else {
            let Some(target) = target else {
                return vec![Finding::new(
                    name,
                    Status::Skipped,
                    format!("the restored copy holds no heartbeat in {t}: nothing says how far its data reaches"),
                )];
            };
            // Empty at T on the primary too (the heartbeat began later): nothing to prove
            // with — the backup is not to blame.
            let settled = rfc(target.checked_sub(SLACK).unwrap_or(target));
            let before = match primary {
                Some(p) => match p.timed(read_beats(&p.pool, &table, Some(&settled), None)).await {
                    // The newest written by then (not the newest of all).
                    Ok(b) => b.recent.first().copied(),
                    Err(e) if undefined_table(&e) => None,
                    Err(e) => {
                        return vec![Finding::new(
                            name,
                            Status::Error,
                            format!("heartbeat {t} on the primary: {}", e.said()),
                        )];
                    }
                },
                None => None,
            };
            return vec![match before {
                Some(at) => Finding::new(
                    name,
                    Status::Failed,
                    format!(
                        "the restored copy holds no heartbeat in {t}, though the primary wrote one at {} before the target {}: replay stopped early, or the backup lost them",
                        stamp(at),
                        rfc(target)
                    ),
                ),
                None => Finding::new(
                    name,
                    Status::Skipped,
                    format!(
                        "neither side holds a heartbeat in {t} written by the target {}{}: the heartbeat began later, nothing to prove where replay stopped with",
                        rfc(target),
                        if primary.is_none() { " (the primary could not be asked)" } else { "" }
                    ),
                ),
            }];
        };
        let Some(target) = target else {
            // The latest point or a logical dump: the heartbeat says how fresh the data is.
            let mut f = Finding::new(name, Status::Passed, "").covered("heartbeats", copy.count.max(0) as u64);
            f = f.with("data_time", copy_newest);
            let mut detail = format!("the copy's newest heartbeat is {}", stamp(copy_newest));
            if let Some(p) = primary {
                match p.timed(read_beats(&p.pool, &table, None, None)).await {
                    Ok(Beats { newest: Some(pn), .. }) => {
                        let lag = (pn - copy_newest).max(0.0);
                        f = f.with("data_lag_seconds", (lag * 1000.0).round() / 1000.0);
                        detail.push_str(&format!("; the primary's is {} ({lag:.0}s newer)", stamp(pn)));
                    }
                    Ok(_) => detail.push_str("; the primary holds no heartbeat"),
                    Err(e) => {
                        return vec![Finding::new(
                            name,
                            Status::Error,
                            format!("reading heartbeat {t} on the primary: {}", e.said()),
                        )];
                    }
                }
            }
            f.detail = detail;
            return vec![f];
        };
        let target_s = epoch(target);
        let allowed = (hb.interval + SLACK).as_secs_f64();
        let mut problems = Vec::new();
        let mut silent = None;
        // Replay overshot: a heartbeat after T.
        if copy_newest > target_s + 1e-6 {
            problems.push(format!(
                "the copy holds a heartbeat at {}, after the target {} (replay went past it)",
                stamp(copy_newest),
                rfc(target)
            ));
        }
        // Both sides' heartbeats written up to T − SLACK, over the span both keep: one
        // written just before T may commit after it, and rightly not be in the copy.
        let settled = rfc(target.checked_sub(SLACK).unwrap_or(target));
        let primary_beats = match primary {
            Some(p) => {
                let read = async {
                    let oldest = p.timed(read_beats(&p.pool, &table, Some(&settled), None)).await?.oldest;
                    let from = match (oldest, copy.oldest) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    };
                    let pr = p.timed(read_beats(&p.pool, &table, Some(&settled), from)).await?;
                    Ok::<_, sqlx::Error>((pr, from))
                };
                let (pr, from) = match read.await {
                    Ok(r) => r,
                    Err(e) => {
                        return vec![Finding::new(
                            name,
                            Status::Error,
                            format!("heartbeat {t} on the primary: {}", e.said()),
                        )];
                    }
                };
                match read_beats(&cx.restored, &table, Some(&settled), from).await {
                    Ok(cr) => Some((pr, cr)),
                    Err(e) => {
                        return vec![Finding::new(
                            name,
                            Status::Error,
                            format!("heartbeat {t} in the copy: {}", e.said()),
                        )];
                    }
                }
            }
            None => None,
        };
        let copy_at_t = match read_beats(&cx.restored, &table, upto.as_deref(), None).await {
            Ok(b) => b.recent.first().copied(),
            Err(e) => {
                return vec![Finding::new(name, Status::Error, format!("heartbeat {t} in the copy: {}", e.said()))];
            }
        };
        if let Some((pr, cr)) = &primary_beats {
            if pr.count != cr.count {
                problems.push(format!(
                    "replay stopped early or diverged: the primary holds {} heartbeats written up to {}s before the target {}, the copy {} (over the span both keep)",
                    pr.count,
                    SLACK.as_secs(),
                    rfc(target),
                    cr.count
                ));
            } else if let Some((p, c)) = pr.recent.iter().zip(&cr.recent).find(|(p, c)| (**p - **c).abs() > 1e-3) {
                problems.push(format!(
                    "the heartbeats up to the target differ: the primary has {}, the copy {}",
                    stamp(*p),
                    stamp(*c)
                ));
            }
        }
        // The copy agrees with the primary; its newest heartbeat must still be close to T,
        // or nothing says where replay stopped.
        let asked = if primary_beats.is_some() {
            "the primary wrote none in between either"
        } else {
            "the primary cannot be asked whether replay stopped early or the heartbeat fell silent"
        };
        match copy_at_t {
            Some(cn) if target_s - cn > allowed && problems.is_empty() => {
                silent = Some(format!(
                    "the copy's newest heartbeat {} is {:.0}s before the target {} (interval {}s + {}s), and {asked}: \
                     where replay stopped cannot be proven — is the heartbeat writer running?",
                    stamp(cn),
                    target_s - cn,
                    rfc(target),
                    hb.interval.as_secs(),
                    SLACK.as_secs()
                ))
            }
            None if problems.is_empty() => {
                silent = Some(format!(
                    "neither side holds a heartbeat at or before the target {}: is the heartbeat writer running?",
                    rfc(target)
                ))
            }
            _ => {}
        }
        // No as_of row after T.
        let mut after = 0u64;
        for (schema, table_name, col) in &cx.settings.as_of {
            let at = TableName { schema: schema.clone(), name: table_name.clone() };
            let zoneless = match crate::catalog::zoneless_column(&cx.restored, &at, col).await {
                Ok(z) => z,
                Err(e) => {
                    return vec![Finding::new(name, Status::Error, format!("the type of {at}.{col}: {}", e.said()))];
                }
            };
            let column = quote_ident(col);
            // Past the target by more than the slack: a client's clock a little ahead
            // writes rows stamped after T that committed before it.
            let cond = if zoneless {
                format!(
                    "{column} > (($1::pg_catalog.timestamptz + $3::pg_catalog.interval) at time zone $2::pg_catalog.text)"
                )
            } else {
                format!(
                    "{column} > ($1::pg_catalog.timestamptz + $3::pg_catalog.interval) and $2::pg_catalog.text is not null"
                )
            };
            let sql = format!("select pg_catalog.count(*) from only {} where {cond}", at.quoted());
            let n: Result<i64, _> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .bind(rfc(target))
                .bind(cx.primary_zone().to_string())
                .bind(format!("{} seconds", SLACK.as_secs()))
                .fetch_one(&cx.restored)
                .await;
            match n {
                Ok(0) => {}
                // A table the copy does not hold (made after its point) holds no row after it.
                Err(e) if undefined_table(&e) => {}
                Ok(n) => {
                    after += n as u64;
                    problems.push(format!(
                        "{at} holds {n} rows whose {col} is more than {}s after the target {}",
                        SLACK.as_secs(),
                        rfc(target)
                    ));
                }
                Err(e) => {
                    return vec![Finding::new(
                        name,
                        Status::Error,
                        format!("rows of {at} after the target: {}", e.said()),
                    )];
                }
            }
        }
        let compared = primary_beats.as_ref().map(|(p, _)| p.count).unwrap_or(copy.count).max(0) as u64;
        // The newest heartbeat at or before T is checked too (within interval + slack of
        // it): a T within seconds of the heartbeat's first row has nothing older to compare.
        let checked = compared + u64::from(copy_at_t.is_some() && silent.is_none());
        let mut f = Finding::new(name, Status::Passed, "")
            .covered("heartbeats", checked)
            .with("target", target_s)
            .with("rows_after_target", after as f64);
        if let Some(cn) = copy_at_t {
            f = f.with("newest_heartbeat_before_target_seconds", ((target_s - cn) * 1000.0).round() / 1000.0);
        }
        if !problems.is_empty() {
            f.status = Status::Failed;
            f.detail = problems.join("; ");
        } else if let Some(why) = silent {
            f.status = Status::Error;
            f.detail = why;
        } else {
            f.detail = format!(
                "replay stopped at the target {}: the copy's newest heartbeat {} is {:.1}s before it (interval {}s + {}s){}; {} tables hold no row after it",
                rfc(target),
                copy_at_t.map(stamp).unwrap_or_default(),
                copy_at_t.map(|c| target_s - c).unwrap_or_default(),
                hb.interval.as_secs(),
                SLACK.as_secs(),
                if primary_beats.is_some() {
                    format!(", and its {compared} heartbeats up to it match the primary's")
                } else {
                    String::new()
                },
                cx.settings.as_of.len()
            );
        }
        vec![f]
    }
}
