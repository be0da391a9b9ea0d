//! Canaries (`drcheck canary`): kept apart from runs, so a defective copy's verification
//! is never a verification, a proof or coverage of its target.

use super::History;
use crate::canary_report::CanaryReport;
use anyhow::Context as _;

impl History {
    /// Records a finished canary (once).
    pub(crate) async fn record_canary(&self, r: &CanaryReport) -> anyhow::Result<()> {
        sqlx::query(
            "insert into canaries (canary_id, target, result, started_at, finished_at, report_json)
             values ($1, $2, $3, $4, $5, $6) on conflict (canary_id) do nothing",
        )
        .bind(&r.canary_id)
        .bind(&r.target)
        .bind(r.result.as_str())
        .bind(&r.started_at)
        .bind(&r.finished_at)
        .bind(serde_json::to_string(r)?)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Each configured target's newest canary, in one query.
    pub(crate) async fn latest_canaries(
        &self,
        config: &drcheck_config::Config,
    ) -> anyhow::Result<std::collections::HashMap<String, CanaryReport>> {
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "select c.canary_id, c.finished_at, c.report_json from canaries c
              where c.finished_at = (select max(o.finished_at) from canaries o where o.target = c.target)",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut newest: std::collections::HashMap<String, (String, String, CanaryReport)> = Default::default();
        for (id, finished, json) in rows {
            let r: CanaryReport = serde_json::from_str(&json).context("a canary row holds an unreadable report")?;
            if config.target(&r.target).is_none() {
                continue;
            }
            // Two finished in the same millisecond: the greater id, as `recent_canaries` orders.
            match newest.get(&r.target) {
                Some((f, i, _)) if (f, i) >= (&finished, &id) => {}
                _ => {
                    newest.insert(r.target.clone(), (finished, id, r));
                }
            }
        }
        Ok(newest.into_iter().map(|(t, (_, _, r))| (t, r)).collect())
    }

    /// The newest canaries (of `target`, or of all), newest first.
    pub(crate) async fn recent_canaries(&self, target: Option<&str>, limit: u32) -> anyhow::Result<Vec<CanaryReport>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "select report_json from canaries where ($1 is null or target = $1)
              order by finished_at desc, canary_id desc limit $2",
        )
        .bind(target)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(j,)| serde_json::from_str(&j).context("a canary row holds an unreadable report"))
            .collect()
    }

    /// Every canary that finished in `[from, to)` (RFC 3339), oldest first, without the
    /// defective copies' run reports.
    pub(crate) async fn canaries_between(&self, from: &str, to: &str) -> anyhow::Result<Vec<CanaryReport>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "select report_json from canaries where finished_at >= $1 and finished_at < $2 order by finished_at, canary_id",
        )
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(j,)| {
                let mut r: CanaryReport =
                    serde_json::from_str(&j).context("a canary row holds an unreadable report")?;
                for d in &mut r.defects {
                    d.run = None;
                }
                Ok(r)
            })
            .collect()
    }

    /// Queues the canary alert (firing) for every sink.
    pub(crate) async fn enqueue_canary_alert(
        &self,
        alert: &crate::alerts::Alert,
        sinks: &[String],
    ) -> anyhow::Result<()> {
        let mut tx = self.pool.begin().await?;
        super::outbox::enqueue(&mut tx, alert, sinks, None).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Queues the canary alert's resolution for `sink` (once it took the firing one: a
    /// resolution queued beside its firing would supersede it). Returns its dedup key.
    pub(crate) async fn enqueue_canary_resolution(
        &self,
        alert: &crate::alerts::Alert,
        sink: &str,
    ) -> anyhow::Result<String> {
        let mut resolved = alert.clone();
        resolved.state = crate::alerts::AlertState::Resolved;
        resolved.ends_at = Some(super::ts(std::time::SystemTime::now()));
        let episode = alert.run_id.clone().unwrap_or_default();
        resolved.dedup_key =
            crate::alerts::dedup_key(&alert.target, &alert.alertname, &episode, crate::alerts::AlertState::Resolved);
        let mut tx = self.pool.begin().await?;
        super::outbox::enqueue(&mut tx, &resolved, &[sink.to_string()], Some(&alert.dedup_key)).await?;
        tx.commit().await?;
        Ok(resolved.dedup_key)
    }

    /// Whether `sink` accepted the alert with `dedup_key`.
    pub(crate) async fn delivered(&self, sink: &str, dedup_key: &str) -> anyhow::Result<bool> {
        let n: i64 = sqlx::query_scalar("select count(*) from alerts_delivered where sink = $1 and dedup_key = $2")
            .bind(sink)
            .bind(dedup_key)
            .fetch_one(&self.pool)
            .await?;
        Ok(n > 0)
    }

    /// Why `sink` has not accepted the alert with `dedup_key` (its last error), if said.
    pub(crate) async fn last_delivery_error(&self, sink: &str, dedup_key: &str) -> anyhow::Result<Option<String>> {
        let e: Option<(Option<String>,)> = sqlx::query_as(
            "select last_error from alert_outbox where sink = $1 and dedup_key = $2
             union all select last_error from alert_dead_letters where sink = $1 and dedup_key = $2",
        )
        .bind(sink)
        .bind(dedup_key)
        .fetch_optional(&self.pool)
        .await?;
        Ok(e.and_then(|(e,)| e))
    }

    /// Moves a canary's alerts `sink` did not take to the dead letters: a canary page
    /// delivered hours late would only confuse.
    pub(crate) async fn dead_letter_canary(&self, sink: &str, canary_id: &str, why: &str) -> anyhow::Result<u64> {
        self.dead_letter_where("sink = $3 and run_id = $4 and claim_expires_at is null", sink, canary_id, why).await
    }
}
