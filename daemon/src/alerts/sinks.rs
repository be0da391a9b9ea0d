//! Delivering one alert to one sink: Alertmanager's v2 API, a generic JSON webhook
//! (with `Idempotency-Key` and an optional HMAC-SHA256 signature), or a Slack-style
//! incoming webhook. Errors never contain the sink's URL (it may hold a token).

use super::Alert;
use drcheck_config::{AlertConfig, AlertKind};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::time::{Duration, SystemTime};

/// How long a firing alert stays active at Alertmanager without being re-sent.
const FIRING_TTL: Duration = Duration::from_secs(48 * 3600);

fn body(sink: &AlertConfig, a: &Alert) -> serde_json::Value {
    match sink.kind {
        AlertKind::Alertmanager => {
            let ends = match &a.ends_at {
                Some(e) => e.clone(),
                None => humantime::format_rfc3339_millis(SystemTime::now() + FIRING_TTL).to_string(),
            };
            let mut labels = serde_json::json!({"alertname": a.alertname, "target": a.target, "severity": a.severity, "source": "drcheck"});
            if a.canary {
                labels["canary"] = "true".into();
            }
            serde_json::json!([{
                "labels": labels,
                "annotations": {"summary": a.summary, "description": a.description, "run_id": a.run_id.clone().unwrap_or_default()},
                "startsAt": a.starts_at,
                "endsAt": ends,
            }])
        }
        AlertKind::Webhook => serde_json::to_value(a).unwrap_or_default(),
        AlertKind::Slack => {
            let icon = if a.state == crate::alerts::AlertState::Resolved { "✅" } else { "🚨" };
            let canary = if a.canary { "[canary] " } else { "" };
            serde_json::json!({"text": format!("{icon} {canary}{} [{}] {}: {}", a.alertname, a.state, a.target, a.summary)})
        }
    }
}

/// The `X-Drcheck-Signature` header value: `sha256=` and the hex HMAC of the body.
pub(super) fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Why a delivery failed, and whether trying again can help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SinkError {
    /// Timeouts, refused connections, 5xx, 408 and 429: the next attempt may work.
    Transient(String),
    /// Any other 4xx (a wrong URL, a rejected payload, bad credentials): it will not.
    Permanent(String),
}

impl SinkError {
    pub(crate) fn message(&self) -> &str {
        match self {
            SinkError::Transient(m) | SinkError::Permanent(m) => m,
        }
    }

    /// An HTTP answer's class: only 408, 429 and 5xx are worth retrying.
    pub(super) fn for_status(status: u16, message: String) -> SinkError {
        if status == 408 || status == 429 || status >= 500 {
            SinkError::Transient(message)
        } else {
            SinkError::Permanent(message)
        }
    }
}

pub(crate) async fn deliver(client: &reqwest::Client, sink: &AlertConfig, a: &Alert) -> Result<(), SinkError> {
    let url = match sink.kind {
        AlertKind::Alertmanager => format!("{}/api/v2/alerts", sink.url.expose().trim_end_matches('/')),
        _ => sink.url.expose().to_string(),
    };
    let payload = serde_json::to_vec(&body(sink, a)).map_err(|e| SinkError::Permanent(e.to_string()))?;
    let mut req = client
        .post(&url)
        .timeout(sink.timeout)
        .header("Content-Type", "application/json")
        .header("Idempotency-Key", &a.dedup_key);
    if let Some(secret) = &sink.secret {
        req = req.header("X-Drcheck-Signature", signature(secret.expose(), &payload));
    }
    let resp = req
        .body(payload)
        .send()
        .await
        .map_err(|e| SinkError::Transient(format!("{}: {}", sink.name, e.without_url())))?;
    let status = resp.status();
    if status.is_success() {
        Ok(())
    } else {
        let text = resp.text().await.unwrap_or_default();
        let message = format!("{}: HTTP {status}: {}", sink.name, text.chars().take(300).collect::<String>());
        Err(SinkError::for_status(status.as_u16(), message))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_408_429_and_5xx_are_transient() {
        use super::SinkError;
        for s in [408, 429, 500, 502, 503] {
            assert!(matches!(SinkError::for_status(s, String::new()), SinkError::Transient(_)), "{s}");
        }
        for s in [400, 401, 403, 404, 410, 422] {
            assert!(matches!(SinkError::for_status(s, String::new()), SinkError::Permanent(_)), "{s}");
        }
    }

    #[test]
    fn signature_is_the_documented_hmac() {
        // RFC 4231 test case 2.
        assert_eq!(
            super::signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
