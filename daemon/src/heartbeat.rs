//! The primary's heartbeat (`[target.heartbeat]`): a row in a table every `interval`,
//! the clock `point_in_time` reads to prove where replay stopped.
//!
//! - `drcheck heartbeat setup` prints the DDL and GRANTs (and a pg_cron line for fleets
//!   that run drcheck only as a CronJob);
//! - `drcheck daemon` writes the rows itself through the target's `heartbeat.url` — its
//!   own INSERT-only credential, never the verifier's.

use drcheck_config::{Config, HeartbeatConfig, TargetConfig, quote_ident};
use drcheck_validators::Said;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The SQL that sets the heartbeat of `target` up on its primary: the table, an
/// INSERT-only writer role, and the pg_cron job that writes it without the daemon.
pub(crate) fn setup_sql(target: &TargetConfig, hb: &HeartbeatConfig, writer: &str) -> String {
    let table = hb.quoted();
    let schema = quote_ident(&hb.schema);
    let role = quote_ident(writer);
    let database = target
        .primary
        .as_ref()
        .and_then(|p| crate::verify::database_of(p.expose()))
        .unwrap_or_else(|| "postgres".into());
    let cron = cron_schedule(hb.interval);
    let db_literal = database.replace('\'', "''");
    format!(
        "-- drcheck heartbeat for target {name}: run once on the primary, in database {database},\n\
         -- as a superuser (the DDL log's event triggers need one).\n\
         CREATE SCHEMA IF NOT EXISTS {schema};\n\
         CREATE TABLE IF NOT EXISTS {table} (at timestamptz PRIMARY KEY DEFAULT pg_catalog.clock_timestamp());\n\
         COMMENT ON TABLE {table} IS 'drcheck: heartbeat (as_of at)';\n\
         -- Each beat carries the primary's transaction horizon (every transaction below it had\n\
         -- ended): drcheck's journal, read from the primary, tells what changed after a backup\n\
         -- without commit timestamps. Added without a default first, so rows of earlier beats\n\
         -- stay without one (a horizon of today on a beat of yesterday would be false).\n\
         ALTER TABLE {table} ADD COLUMN IF NOT EXISTS horizon xid8;\n\
         ALTER TABLE {table} ALTER COLUMN horizon SET DEFAULT pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot());\n\
         \n\
         -- The DDL log: each DDL command with its time and object, written by an event trigger,\n\
         -- so drcheck tells a migration after a backup from a schema the backup lost.\n\
         CREATE TABLE IF NOT EXISTS {log} (\n  \
           id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n  \
           at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),\n  \
           xid xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),\n  \
           tag text NOT NULL,\n  \
           object_type text,\n  \
           identity text\n\
         );\n\
         COMMENT ON TABLE {log} IS 'drcheck: ddl log (as_of at)';\n\
         ALTER TABLE {log} ADD COLUMN IF NOT EXISTS id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY;\n\
         CREATE OR REPLACE FUNCTION {schema}.log_ddl() RETURNS event_trigger\n  \
           LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$\n\
         DECLARE r record;\n\
         BEGIN\n  \
           IF TG_EVENT = 'sql_drop' THEN\n    \
             FOR r IN SELECT * FROM pg_catalog.pg_event_trigger_dropped_objects() LOOP\n      \
               INSERT INTO {log} (tag, object_type, identity) VALUES (TG_TAG, r.object_type, r.object_identity);\n    \
             END LOOP;\n  \
           ELSE\n    \
             FOR r IN SELECT * FROM pg_catalog.pg_event_trigger_ddl_commands() LOOP\n      \
               INSERT INTO {log} (tag, object_type, identity) VALUES (r.command_tag, r.object_type, r.object_identity);\n    \
             END LOOP;\n  \
           END IF;\n\
         END $f$;\n\
         REVOKE ALL ON FUNCTION {schema}.log_ddl() FROM PUBLIC;\n\
         DROP EVENT TRIGGER IF EXISTS drcheck_ddl_log_end;\n\
         CREATE EVENT TRIGGER drcheck_ddl_log_end ON ddl_command_end EXECUTE FUNCTION {schema}.log_ddl();\n\
         DROP EVENT TRIGGER IF EXISTS drcheck_ddl_log_drop;\n\
         CREATE EVENT TRIGGER drcheck_ddl_log_drop ON sql_drop EXECUTE FUNCTION {schema}.log_ddl();\n\
         \n\
         -- The writer: may insert heartbeats and nothing else (set its password yourself,\n\
         -- and give it to drcheck as [target.heartbeat] url = \"postgres://{writer}:${{HB_PW}}@…/{database}\").\n\
         DO $$ BEGIN\n  \
           IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '{writer_lit}') THEN\n    \
             CREATE ROLE {role} LOGIN;\n  \
           END IF;\n\
         END $$;\n\
         GRANT USAGE ON SCHEMA {schema} TO {role};\n\
         GRANT INSERT ON {table} TO {role};\n\
         \n\
         -- drcheck's verifier role reads both like every table (pg_read_all_data, or):\n\
         -- GRANT USAGE ON SCHEMA {schema} TO <verifier>; GRANT SELECT ON {table}, {log} TO <verifier>;\n\
         \n\
         -- Without `drcheck daemon` (CronJob fleets), pg_cron writes it every {every}{seconds_note}:\n\
         -- SELECT cron.schedule_in_database('drcheck-heartbeat-{name}', '{cron}', $$INSERT INTO {table} DEFAULT VALUES$$, '{db_literal}');\n\
         \n\
         -- Keep a retention's worth (older rows prove nothing a backup still needs):\n\
         -- SELECT cron.schedule_in_database('drcheck-heartbeat-trim-{name}', '17 3 * * *', $$DELETE FROM {table} WHERE at < now() - interval '60 days'$$, '{db_literal}');\n",
        name = target.name,
        log = format!("{schema}.{}", quote_ident("ddl_log")),
        writer_lit = writer.replace('\'', "''"),
        every = drcheck_config::format_duration(hb.interval),
        seconds_note = if hb.interval < Duration::from_secs(60) {
            "\n-- (a schedule in seconds needs pg_cron 1.5 or later; with an older one, schedule\n\
             -- '* * * * *' and set [target.heartbeat] interval = \"1m\")"
        } else {
            ""
        },
    )
}

/// pg_cron's schedule for `interval`: `N seconds` below a minute (pg_cron 1.5+), else a
/// cron expression in whole minutes, or whole hours from an hour on.
pub(crate) fn cron_schedule(interval: Duration) -> String {
    let s = interval.as_secs().max(1);
    match s {
        0..60 => format!("{s} seconds"),
        60..120 => "* * * * *".into(),
        120..3600 => format!("*/{} * * * *", s / 60),
        3600..7200 => "0 * * * *".into(),
        _ => format!("0 */{} * * *", (s / 3600).min(23)),
    }
}

/// One target's writer: its pool, the URL it was made from, and when it last wrote.
struct Writer {
    url: String,
    pool: sqlx::PgPool,
    last: Option<Instant>,
    failing: bool,
}

/// What a failed write says, with the URL and its password masked — and nothing else:
/// the reason (refused, a wrong password, no such table) is what the operator needs.
pub(crate) fn reason(error: &str, url: &str) -> String {
    let mut m = drcheck_validators::primary::scrub(error, url);
    if let Ok(u) = url::Url::parse(url)
        && let Some(pw) = u.password()
        && let Ok(decoded) = percent_encoding::percent_decode_str(pw).decode_utf8()
        && !decoded.is_empty()
    {
        m = m.replace(decoded.as_ref(), "***");
    }
    m
}

/// Writes every target's heartbeat (those with a `heartbeat.url`) every `interval`
/// until `stop`; reads the config each tick, so a reload takes effect. A failed write
/// is logged once when it starts failing (with the reason, secrets masked) and once when
/// it recovers; each write and each failure is a metric.
pub(crate) async fn writer_loop(
    config: impl Fn() -> std::sync::Arc<Config>,
    stop: CancellationToken,
    metrics: crate::metrics::HeartbeatMetrics,
) {
    let mut writers: HashMap<String, Writer> = HashMap::new();
    while !stop.is_cancelled() {
        let config = config();
        writers.retain(|name, _| {
            config.target(name).is_some_and(|t| t.heartbeat.as_ref().is_some_and(|h| h.url.is_some()))
        });
        for t in &config.targets {
            let Some(hb) = &t.heartbeat else { continue };
            let Some(url) = &hb.url else { continue };
            let url = url.expose().to_string();
            if writers.get(&t.name).is_none_or(|w| w.url != url) {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect_lazy(&url);
                match pool {
                    Ok(pool) => {
                        writers.insert(t.name.clone(), Writer { url, pool, last: None, failing: false });
                    }
                    Err(e) => {
                        tracing::warn!(target = %t.name, "heartbeat.url: {}", reason(&e.said(), &url));
                        continue;
                    }
                }
            }
            let w = writers.get_mut(&t.name).expect("inserted above");
            if w.last.is_some_and(|l| l.elapsed() < hb.interval) {
                continue;
            }
            w.last = Some(Instant::now());
            let sql = format!("insert into {} (at) values (pg_catalog.clock_timestamp())", hb.quoted());
            let wrote =
                tokio::time::timeout(Duration::from_secs(10), sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&w.pool))
                    .await;
            let failure = match wrote {
                Ok(Ok(_)) => {
                    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                    metrics.last_write.with_label_values(&[&t.name]).set(now.as_secs_f64());
                    if std::mem::take(&mut w.failing) {
                        tracing::info!(target = %t.name, table = %hb.quoted(), "heartbeat written again");
                    }
                    None
                }
                Ok(Err(e)) => Some(reason(&e.said(), &w.url)),
                Err(_) => Some("no answer within 10s".to_string()),
            };
            if let Some(why) = failure {
                metrics.failures_total.with_label_values(&[&t.name]).inc();
                if !std::mem::replace(&mut w.failing, true) {
                    tracing::warn!(target = %t.name, table = %hb.quoted(), "cannot write the heartbeat: {why}");
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = stop.cancelled() => {}
        }
    }
    for (_, w) in writers {
        w.pool.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 32: a wrong heartbeat password logged `cannot write the heartbeat: ***` —
    /// the whole reason masked. Only the URL and its password are.
    #[test]
    fn a_failed_writes_reason_is_kept_and_only_secrets_are_masked() {
        let url = "postgres://drcheck_heartbeat:s3cr%40t@db.internal:5432/orders";
        for error in [
            "error returned from database: password authentication failed for user \"drcheck_heartbeat\"",
            "error with configuration: postgres://drcheck_heartbeat:s3cr%40t@db.internal:5432/orders is bad",
            "echoed s3cr@t and s3cr%40t",
        ] {
            let shown = reason(error, url);
            assert!(!shown.contains("s3cr"), "{shown}");
        }
        let shown =
            reason("error returned from database: password authentication failed for user \"drcheck_heartbeat\"", url);
        assert!(shown.contains("password authentication failed for user"), "{shown}");
    }

    #[test]
    fn pg_cron_schedules_follow_the_interval() {
        assert_eq!(cron_schedule(Duration::from_secs(10)), "10 seconds");
        assert_eq!(cron_schedule(Duration::from_secs(60)), "* * * * *");
        assert_eq!(cron_schedule(Duration::from_secs(300)), "*/5 * * * *");
        assert_eq!(cron_schedule(Duration::from_secs(3600)), "0 * * * *");
        assert_eq!(cron_schedule(Duration::from_secs(6 * 3600)), "0 */6 * * *");
    }
}
