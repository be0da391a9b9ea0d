//! The dispatcher: delivers due alerts from the outbox, at least once. A failed
//! delivery is retried later with capped exponential backoff and full jitter; a sink
//! whose circuit breaker is open is skipped without spending an attempt; after the
//! sink's `max_attempts` the alert moves to the dead letters and a metric counts it.

use crate::alerts::{Alert, sinks};
use crate::history::{History, OutboxRow};
use crate::metrics::Metrics;
use drcheck_config::{AlertConfig, AlertKind};
use drcheck_restore::breaker;
use drcheck_restore::retry::Backoff;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

pub(crate) struct Dispatcher<'a> {
    pub history: &'a History,
    pub sinks: &'a [AlertConfig],
    pub metrics: Option<&'a Metrics>,
    client: reqwest::Client,
    backoff: Backoff,
    /// This dispatcher's name on the rows it claims.
    holder: String,
    /// Re-send firing alerts to Alertmanager sinks this often (the daemon's loop).
    resend: Option<Duration>,
}

/// Alerts for a sink no dispatcher knows are left for one that does; after this long
/// they move to the dead letters.
pub(crate) const UNKNOWN_SINK_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Round {
    pub delivered: usize,
    pub failed: usize,
    pub dead: usize,
    pub pending: usize,
}

impl<'a> Dispatcher<'a> {
    pub(crate) fn new(history: &'a History, sinks: &'a [AlertConfig], metrics: Option<&'a Metrics>) -> Self {
        let client = reqwest::Client::builder().connect_timeout(Duration::from_secs(5)).build().unwrap_or_default();
        Self {
            history,
            sinks,
            metrics,
            client,
            backoff: Backoff {
                base: Duration::from_millis(500),
                cap: Duration::from_secs(300),
                attempts: u32::MAX,
                window: Duration::ZERO,
            },
            holder: crate::history::lease_holder_name("dispatcher"),
            resend: None,
        }
    }

    /// Also re-sends firing alerts to Alertmanager sinks every `every`.
    pub(crate) fn resending(mut self, every: Duration) -> Self {
        self.resend = Some(every);
        self
    }

    /// Tries every due alert of the sinks it knows once. Alerts for other sinks are
    /// left for a dispatcher that knows them (dead letters only after
    /// [`UNKNOWN_SINK_MAX_AGE`]).
    pub(crate) async fn round(&self) -> anyhow::Result<Round> {
        let mut round = Round::default();
        if let Some(every) = self.resend {
            let am: Vec<String> =
                self.sinks.iter().filter(|s| s.kind == AlertKind::Alertmanager).map(|s| s.name.clone()).collect();
            let n = self.history.resend_firing(&am, every).await?;
            if n > 0 {
                tracing::info!(alerts = n, "firing alerts queued again for Alertmanager");
            }
        }
        for sink_name in self.history.outbox_sinks().await? {
            if self.sinks.iter().all(|s| s.name != sink_name) {
                let before = SystemTime::now() - UNKNOWN_SINK_MAX_AGE;
                let why = format!(
                    "no dispatcher configured with sink {sink_name:?} delivered it within {}",
                    drcheck_config::format_duration(UNKNOWN_SINK_MAX_AGE)
                );
                round.dead += self.history.dead_letter_sink(&sink_name, Some(before), &why).await? as usize;
            }
        }
        for sink in self.sinks {
            let br = breaker::for_dependency(&format!("alert {}", sink.name));
            if br.admit().is_err() {
                continue;
            }
            for row in self.history.claim_due(&self.holder, &sink.name, SystemTime::now()).await? {
                self.deliver(sink, &br, row, &mut round).await?;
            }
        }
        // Pending: what this dispatcher could still deliver (another's sinks are theirs).
        for sink in self.sinks {
            round.pending += self.history.outbox_depth_of(&sink.name).await? as usize;
        }
        if let Some(m) = self.metrics {
            m.alert_outbox_depth.set(self.history.outbox_depth().await?);
        }
        Ok(round)
    }

    async fn deliver(
        &self,
        sink: &AlertConfig,
        br: &breaker::Breaker,
        row: OutboxRow,
        round: &mut Round,
    ) -> anyhow::Result<()> {
        let alert: Alert = match serde_json::from_str(&row.payload) {
            Ok(a) => a,
            Err(e) => {
                self.history.dead_letter(&row, &self.holder, &format!("unreadable payload: {e}")).await?;
                round.dead += 1;
                return Ok(());
            }
        };
        match sinks::deliver(&self.client, sink, &alert).await {
            Ok(()) => {
                br.success();
                self.history.mark_delivered(&row, &self.holder).await?;
                if let Some(m) = self.metrics {
                    m.alerts_sent_total.with_label_values(&[&sink.name]).inc();
                }
                round.delivered += 1;
            }
            Err(err) => {
                let permanent = matches!(err, sinks::SinkError::Permanent(_));
                let e = err.message().to_string();
                // A sink that answered (even "no") is up: only transient failures
                // count against its breaker.
                if permanent {
                    br.success();
                } else {
                    br.failure();
                }
                if permanent || row.attempts + 1 >= sink.max_attempts as i64 {
                    let why = if permanent { format!("{e} (permanent: not retried)") } else { e.clone() };
                    tracing::warn!(sink = %sink.name, alert = %alert.alertname, attempt = row.attempts + 1, "alert dead-lettered: {why}");
                    self.history.dead_letter(&row, &self.holder, &why).await?;
                    if let Some(m) = self.metrics {
                        m.alerts_dead_lettered_total.with_label_values(&[&sink.name]).inc();
                    }
                    round.dead += 1;
                } else {
                    let delay = self.backoff.delay(row.attempts.clamp(0, 30) as u32);
                    tracing::warn!(
                        sink = %sink.name,
                        alert = %alert.alertname,
                        attempt = row.attempts + 1,
                        delay_seconds = delay.as_secs_f64(),
                        "alert delivery failed, will retry: {e}"
                    );
                    let next = SystemTime::now() + delay;
                    self.history.mark_failed(&row, &self.holder, &e, next).await?;
                    round.failed += 1;
                }
            }
        }
        Ok(())
    }

    /// Delivers until the outbox is empty, `budget` runs out, or `cancel` fires.
    pub(crate) async fn drain(&self, budget: Duration, cancel: &CancellationToken) -> anyhow::Result<Round> {
        let deadline = tokio::time::Instant::now() + budget;
        let mut total = Round::default();
        loop {
            let r = self.round().await?;
            total.delivered += r.delivered;
            total.failed += r.failed;
            total.dead += r.dead;
            total.pending = r.pending;
            if r.pending == 0 || tokio::time::Instant::now() >= deadline || cancel.is_cancelled() {
                return Ok(total);
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                _ = cancel.cancelled() => return Ok(total),
            }
        }
    }
}
