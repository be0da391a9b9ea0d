//! The alert outbox: alerts enqueued with the run that raised them, claimed, delivered
//! or retried by one sender at a time, dead-lettered, and re-sent while firing.

use super::History;
use super::{CLAIM_TTL, ts};
use crate::alerts::AlertState;
use crate::alerts::{self, Alert};
use crate::run_report::RunReport;
use sqlx::AnyConnection;
use std::time::{Duration, SystemTime};

/// An alert waiting in the outbox.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct OutboxRow {
    pub id: String,
    pub sink: String,
    pub dedup_key: String,
    pub payload: String,
    pub attempts: i64,
    pub created_at: String,
}

/// Moves the outbox rows matching `filter` (over `$3` and `$4`) to the dead letters.
pub(super) async fn dead_letter_rows(
    tx: &mut AnyConnection,
    filter: &str,
    a: &str,
    b: &str,
    error: &str,
) -> anyhow::Result<u64> {
    let copy = format!(
        "insert into alert_dead_letters (id, sink, target, alertname, state, dedup_key, run_id, payload, attempts,
                                         created_at, dead_at, last_error)
         select id, sink, target, alertname, state, dedup_key, run_id, payload, attempts + 1, created_at, $1, $2
           from alert_outbox where {filter}"
    );
    sqlx::query(sqlx::AssertSqlSafe(copy))
        .bind(ts(SystemTime::now()))
        .bind(error)
        .bind(a)
        .bind(b)
        .execute(&mut *tx)
        .await?;
    let delete = format!("delete from alert_outbox where {}", filter.replace("$3", "$1").replace("$4", "$2"));
    let r = sqlx::query(sqlx::AssertSqlSafe(delete)).bind(a).bind(b).execute(&mut *tx).await?;
    Ok(r.rows_affected())
}

/// Queues `a` for each of `sinks`. A firing of the same alert still waiting there (not
/// being delivered) is superseded — dropped, never sent. A resolution goes only where
/// its firing (`firing_key`) was delivered or is being delivered: resolving what a sink
/// never saw is noise.
pub(super) async fn enqueue(
    tx: &mut AnyConnection,
    a: &Alert,
    sinks: &[String],
    firing_key: Option<&str>,
) -> anyhow::Result<()> {
    let payload = serde_json::to_string(a)?;
    let now = ts(SystemTime::now());
    for sink in sinks {
        sqlx::query(
            "delete from alert_outbox where sink = $1 and target = $2 and alertname = $3 and state = 'firing'
                and (claim_expires_at is null or claim_expires_at < $4)",
        )
        .bind(sink)
        .bind(&a.target)
        .bind(&a.alertname)
        .bind(&now)
        .execute(&mut *tx)
        .await?;
        if let Some(key) = firing_key.filter(|_| a.state == AlertState::Resolved) {
            let seen: i64 = sqlx::query_scalar(
                "select (select count(*) from alerts_delivered where sink = $1 and dedup_key = $2)
                      + (select count(*) from alert_outbox where sink = $1 and dedup_key = $2)",
            )
            .bind(sink)
            .bind(key)
            .fetch_one(&mut *tx)
            .await?;
            if seen == 0 {
                continue;
            }
        }
        sqlx::query(
            "insert into alert_outbox (id, sink, target, alertname, state, dedup_key, run_id, payload, attempts,
                                       next_attempt_at, created_at)
             values ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, $10)",
        )
        .bind(uuid::Uuid::new_v4().to_string())
        .bind(sink)
        .bind(&a.target)
        .bind(&a.alertname)
        .bind(a.state.as_str())
        .bind(&a.dedup_key)
        .bind(&a.run_id)
        .bind(&payload)
        .bind(&now)
        .bind(&now)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// Remembers what a firing alert says and that it was queued now (re-sends start from
/// here).
pub(super) async fn remember_firing(tx: &mut AnyConnection, a: &Alert) -> anyhow::Result<()> {
    sqlx::query("update alert_state set payload = $1, last_sent_at = $2 where target = $3 and alertname = $4")
        .bind(serde_json::to_string(a)?)
        .bind(ts(SystemTime::now()))
        .bind(&a.target)
        .bind(&a.alertname)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Fires (again) every alert the run raises, resolves those that stopped firing.
pub(super) async fn enqueue_run_alerts(tx: &mut AnyConnection, r: &RunReport, sinks: &[String]) -> anyhow::Result<()> {
    let now_firing = alerts::firing(r);
    let names = alerts::RUN_ALERTS.iter().chain(std::iter::once(&alerts::STALE));
    for &name in names {
        let prev: Option<(String, String)> =
            sqlx::query_as("select episode, since from alert_state where target = $1 and alertname = $2")
                .bind(&r.target)
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?;
        let fires = now_firing.iter().find(|(n, _, _)| *n == name);
        let (state, episode, since, severity, description) = match (fires, prev) {
            (Some((_, sev, desc)), Some((episode, since))) => (AlertState::Firing, episode, since, *sev, desc.clone()),
            (Some((_, sev, desc)), None) => {
                sqlx::query("insert into alert_state (target, alertname, episode, since) values ($1, $2, $3, $4)")
                    .bind(&r.target)
                    .bind(name)
                    .bind(&r.run_id)
                    .bind(&r.started_at)
                    .execute(&mut *tx)
                    .await?;
                (AlertState::Firing, r.run_id.clone(), r.started_at.clone(), *sev, desc.clone())
            }
            // The stale alert resolves only with a passing run.
            (None, Some(_)) if name == alerts::STALE && r.result != crate::run_report::RunResult::Passed => continue,
            (None, Some((episode, since))) => {
                sqlx::query("delete from alert_state where target = $1 and alertname = $2")
                    .bind(&r.target)
                    .bind(name)
                    .execute(&mut *tx)
                    .await?;
                (
                    AlertState::Resolved,
                    episode,
                    since,
                    alerts::severity_of(name),
                    format!("{name} resolved by run {}", r.run_id),
                )
            }
            (None, None) => continue,
        };
        let alert = Alert {
            alertname: name.to_string(),
            target: r.target.clone(),
            severity: severity.to_string(),
            state,
            summary: format!("{name} for {}", r.target),
            description,
            run_id: Some(r.run_id.clone()),
            starts_at: since,
            ends_at: (state == AlertState::Resolved).then(|| r.finished_at.clone()),
            dedup_key: alerts::dedup_key(&r.target, name, &episode, state),
            canary: false,
        };
        if state == AlertState::Firing {
            remember_firing(tx, &alert).await?;
        }
        let firing_key = alerts::dedup_key(&r.target, name, &episode, AlertState::Firing);
        enqueue(tx, &alert, sinks, Some(&firing_key)).await?;
    }
    Ok(())
}

impl History {
    /// Claims the alerts of `sink` that are due, for `holder`, until [`CLAIM_TTL`]:
    /// of each alert (sink, target, alert name) only the oldest row — so one alert's
    /// states reach a sink in order, the next only once the one before is delivered or
    /// dead — and no row another dispatcher holds. Oldest first.
    pub(crate) async fn claim_due(&self, holder: &str, sink: &str, now: SystemTime) -> anyhow::Result<Vec<OutboxRow>> {
        let lock = if self.postgres { "for update skip locked" } else { "" };
        let sql = format!(
            "update alert_outbox set claimed_by = $1, claim_expires_at = $2
              where id in (
                  select a.id from alert_outbox a
                   where a.sink = $3 and a.next_attempt_at <= $4
                     and (a.claim_expires_at is null or a.claim_expires_at < $4)
                     and not exists (
                         select 1 from alert_outbox o
                          where o.sink = a.sink and o.target = a.target and o.alertname = a.alertname
                            and (o.created_at < a.created_at or (o.created_at = a.created_at and o.id < a.id)))
                   order by a.created_at, a.id limit 200 {lock})
                and (claim_expires_at is null or claim_expires_at < $4)
             returning id, sink, target, alertname, state, dedup_key, run_id, payload, attempts, created_at"
        );
        let mut rows: Vec<OutboxRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(holder)
            .bind(ts(now + CLAIM_TTL))
            .bind(sink)
            .bind(ts(now))
            .fetch_all(&self.pool)
            .await?;
        rows.sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
        Ok(rows)
    }

    /// The sinks that have alerts waiting, delivered or not.
    pub(crate) async fn outbox_sinks(&self) -> anyhow::Result<Vec<String>> {
        let rows: Vec<(String,)> =
            sqlx::query_as("select distinct sink from alert_outbox order by sink").fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(|(s,)| s).collect())
    }

    /// Records a delivery by `holder`: the row leaves the outbox, the delivery is
    /// recorded once (a second record of the same row is no error).
    pub(crate) async fn mark_delivered(&self, row: &OutboxRow, holder: &str) -> anyhow::Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("delete from alert_outbox where id = $1 and claimed_by = $2")
            .bind(&row.id)
            .bind(holder)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "insert into alerts_delivered (id, sink, dedup_key, delivered_at) values ($1, $2, $3, $4)
             on conflict (id) do nothing",
        )
        .bind(&row.id)
        .bind(&row.sink)
        .bind(&row.dedup_key)
        .bind(ts(SystemTime::now()))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A failed attempt by `holder`: counted, the claim released, due again at `next`.
    pub(crate) async fn mark_failed(
        &self,
        row: &OutboxRow,
        holder: &str,
        error: &str,
        next: SystemTime,
    ) -> anyhow::Result<()> {
        sqlx::query(
            "update alert_outbox set attempts = attempts + 1, last_error = $1, next_attempt_at = $2,
                    claimed_by = null, claim_expires_at = null
              where id = $3 and claimed_by = $4",
        )
        .bind(error)
        .bind(ts(next))
        .bind(&row.id)
        .bind(holder)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Moves an alert `holder` has claimed to the dead letters, in one transaction.
    pub(crate) async fn dead_letter(&self, row: &OutboxRow, holder: &str, error: &str) -> anyhow::Result<()> {
        self.dead_letter_where("id = $3 and claimed_by = $4", &row.id, holder, error).await.map(|_| ())
    }

    /// Moves to the dead letters every unclaimed alert of `sink` (all of them with
    /// `older_than` None, else those created before it): `drcheck alerts dead-letter`,
    /// and a dispatcher's clean-up of sinks no dispatcher has delivered for that long.
    pub(crate) async fn dead_letter_sink(
        &self,
        sink: &str,
        older_than: Option<SystemTime>,
        why: &str,
    ) -> anyhow::Result<u64> {
        let before = older_than.map(ts).unwrap_or_else(|| "9999".into());
        let now = ts(SystemTime::now());
        let filter = format!(
            "sink = $3 and created_at < $4 and (claim_expires_at is null or claim_expires_at < '{}')",
            now.replace('\'', "")
        );
        let mut tx = self.pool.begin().await?;
        let moved = dead_letter_rows(&mut tx, &filter, sink, &before, why).await?;
        tx.commit().await?;
        Ok(moved)
    }

    pub(super) async fn dead_letter_where(&self, filter: &str, a: &str, b: &str, error: &str) -> anyhow::Result<u64> {
        let mut tx = self.pool.begin().await?;
        let moved = dead_letter_rows(&mut tx, filter, a, b, error).await?;
        tx.commit().await?;
        Ok(moved)
    }

    pub(crate) async fn outbox_depth_of(&self, sink: &str) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar("select count(*) from alert_outbox where sink = $1")
            .bind(sink)
            .fetch_one(&self.pool)
            .await?)
    }

    pub(crate) async fn outbox_depth(&self) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar("select count(*) from alert_outbox").fetch_one(&self.pool).await?)
    }

    /// Every alert not yet delivered and every dead letter, for `drcheck alerts`.
    pub(crate) async fn alert_listing(&self) -> anyhow::Result<serde_json::Value> {
        let pending: Vec<(String, String, String, String, i64, Option<String>)> = sqlx::query_as(
            "select sink, target, alertname, state, attempts, last_error from alert_outbox order by created_at",
        )
        .fetch_all(&self.pool)
        .await?;
        let dead: Vec<(String, String, String, String, i64, Option<String>)> = sqlx::query_as(
            "select sink, target, alertname, state, attempts, last_error from alert_dead_letters order by dead_at",
        )
        .fetch_all(&self.pool)
        .await?;
        let delivered: i64 = sqlx::query_scalar("select count(*) from alerts_delivered").fetch_one(&self.pool).await?;
        let rows = |v: Vec<(String, String, String, String, i64, Option<String>)>| -> Vec<serde_json::Value> {
            v.into_iter()
                .map(|(sink, target, alertname, state, attempts, last_error)| {
                    serde_json::json!({"sink": sink, "target": target, "alertname": alertname, "state": state,
                                       "attempts": attempts, "last_error": last_error})
                })
                .collect()
        };
        Ok(serde_json::json!({"pending": rows(pending), "dead_letters": rows(dead), "delivered": delivered}))
    }

    /// Raises the stale alert for `target` (no success for too long) unless it fires already.
    pub(crate) async fn raise_stale(&self, target: &str, description: &str, sinks: &[String]) -> anyhow::Result<bool> {
        self.raise(target, alerts::STALE, description, sinks).await
    }

    /// Fires `alertname` for `target` unless it already fires: a new episode, queued for
    /// `sinks`. Returns whether it was raised now.
    pub(crate) async fn raise(
        &self,
        target: &str,
        alertname: &str,
        description: &str,
        sinks: &[String],
    ) -> anyhow::Result<bool> {
        let mut tx = self.pool.begin().await?;
        let firing: Option<(String,)> =
            sqlx::query_as("select episode from alert_state where target = $1 and alertname = $2")
                .bind(target)
                .bind(alertname)
                .fetch_optional(&mut *tx)
                .await?;
        if firing.is_some() {
            return Ok(false);
        }
        let now = ts(SystemTime::now());
        let episode = uuid::Uuid::new_v4().to_string();
        sqlx::query("insert into alert_state (target, alertname, episode, since) values ($1, $2, $3, $4)")
            .bind(target)
            .bind(alertname)
            .bind(&episode)
            .bind(&now)
            .execute(&mut *tx)
            .await?;
        let alert = Alert {
            alertname: alertname.into(),
            target: target.into(),
            severity: alerts::severity_of(alertname).into(),
            state: AlertState::Firing,
            summary: format!("{alertname} for {target}"),
            description: description.into(),
            run_id: None,
            starts_at: now.clone(),
            ends_at: None,
            dedup_key: alerts::dedup_key(target, alertname, &episode, AlertState::Firing),
            canary: false,
        };
        remember_firing(&mut tx, &alert).await?;
        enqueue(&mut tx, &alert, sinks, None).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Resolves `alertname` for `target` if it fires. Returns whether it did.
    pub(crate) async fn resolve(
        &self,
        target: &str,
        alertname: &str,
        description: &str,
        sinks: &[String],
    ) -> anyhow::Result<bool> {
        let mut tx = self.pool.begin().await?;
        let firing: Option<(String, String)> =
            sqlx::query_as("select episode, since from alert_state where target = $1 and alertname = $2")
                .bind(target)
                .bind(alertname)
                .fetch_optional(&mut *tx)
                .await?;
        let Some((episode, since)) = firing else { return Ok(false) };
        sqlx::query("delete from alert_state where target = $1 and alertname = $2")
            .bind(target)
            .bind(alertname)
            .execute(&mut *tx)
            .await?;
        let alert = Alert {
            alertname: alertname.into(),
            target: target.into(),
            severity: alerts::severity_of(alertname).into(),
            state: AlertState::Resolved,
            summary: format!("{alertname} for {target}"),
            description: description.into(),
            run_id: None,
            starts_at: since,
            ends_at: Some(ts(SystemTime::now())),
            dedup_key: alerts::dedup_key(target, alertname, &episode, AlertState::Resolved),
            canary: false,
        };
        let firing_key = alerts::dedup_key(target, alertname, &episode, AlertState::Firing);
        enqueue(&mut tx, &alert, sinks, Some(&firing_key)).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Queues again, for `sinks`, every alert that fires and was last queued more than
    /// `every` ago — so Alertmanager hears it before its `endsAt` for as long as it
    /// fires. Each alert is taken by one dispatcher only (its last-queued time is
    /// compared and set in one statement). Returns how many were queued.
    pub(crate) async fn resend_firing(&self, sinks: &[String], every: Duration) -> anyhow::Result<usize> {
        if sinks.is_empty() {
            return Ok(0);
        }
        let now = SystemTime::now();
        let due: Vec<(String, String, String, Option<String>)> = sqlx::query_as(
            "select target, alertname, payload, last_sent_at from alert_state
              where payload is not null and (last_sent_at is null or last_sent_at < $1)",
        )
        .bind(ts(now - every))
        .fetch_all(&self.pool)
        .await?;
        let mut queued = 0;
        for (target, alertname, payload, last) in due {
            let Ok(alert) = serde_json::from_str::<Alert>(&payload) else { continue };
            let mut tx = self.pool.begin().await?;
            let taken = sqlx::query(
                "update alert_state set last_sent_at = $1
                  where target = $2 and alertname = $3 and coalesce(last_sent_at, '') = $4",
            )
            .bind(ts(now))
            .bind(&target)
            .bind(&alertname)
            .bind(last.unwrap_or_default())
            .execute(&mut *tx)
            .await?;
            if taken.rows_affected() == 1 {
                enqueue(&mut tx, &alert, sinks, None).await?;
                queued += 1;
            }
            tx.commit().await?;
        }
        Ok(queued)
    }
}
