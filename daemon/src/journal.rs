//! drcheck's journal of each primary's transaction horizon (issue 46): every run
//! samples its target's primary when it starts, and `drcheck daemon` samples every
//! target's every `journal_interval` — one read-only query that consumes no transaction
//! id and writes nothing on the primary. A later backup at T is judged by the newest
//! sample at or before T − `as_of_grace`: what changed on the primary since T is then
//! known without commit timestamps, from the primary and these records only.

use crate::history::History;
use drcheck_config::{Config, TargetConfig};
use drcheck_validators::primary::{self, PrimaryLimits};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long one sample may take, connection included.
const SAMPLE_WITHIN: Duration = Duration::from_secs(15);

/// Samples `target`'s primary and records it; `Ok(false)` when the target has no primary.
pub(crate) async fn record(history: &History, target: &TargetConfig) -> anyhow::Result<bool> {
    let Some(url) = &target.primary else { return Ok(false) };
    let limits = PrimaryLimits {
        statement_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(10),
        max_concurrency: 1,
    };
    let taken = tokio::time::timeout(SAMPLE_WITHIN, async {
        let p = primary::connect(url.expose(), &limits).await.map_err(|e| anyhow::anyhow!(e))?;
        let s = drcheck_validators::asof::take_sample(&p).await;
        p.close().await;
        s.map_err(|e| anyhow::anyhow!(drcheck_validators::Said::said(&e)))
    })
    .await
    .map_err(|_| anyhow::anyhow!("no answer within {}s", SAMPLE_WITHIN.as_secs()))??;
    history.record_sample(&target.name, &taken).await?;
    Ok(true)
}

/// [`record`], logged and never failing: a sample is worth having, never worth a run.
pub(crate) async fn record_quietly(history: &History, target: &TargetConfig) {
    if let Err(e) = record(history, target).await {
        tracing::warn!(target = %target.name, "cannot sample the primary's transaction horizon for drcheck's journal: {e:#}");
    }
}

/// The daemon's sampler: every target's primary every `journal_interval` (read from the
/// config each round, so a reload takes effect) until `stop`.
pub(crate) async fn sampler_loop(config: impl Fn() -> Arc<Config>, history: &History, stop: CancellationToken) {
    let mut failing: std::collections::HashSet<String> = Default::default();
    loop {
        let config = config();
        let every = config.daemon.journal_interval;
        if !every.is_zero() {
            for t in config.targets.iter().filter(|t| t.primary.is_some()) {
                let sampled = tokio::select! {
                    r = record(history, t) => r,
                    _ = stop.cancelled() => return,
                };
                match sampled {
                    Ok(_) => {
                        if failing.remove(&t.name) {
                            tracing::info!(target = %t.name, "sampling the primary for drcheck's journal again");
                        }
                    }
                    Err(e) => {
                        if failing.insert(t.name.clone()) {
                            tracing::warn!(target = %t.name, "cannot sample the primary for drcheck's journal: {e:#}");
                        }
                    }
                }
            }
        }
        let wait = if every.is_zero() { Duration::from_secs(60) } else { every };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
    }
}
