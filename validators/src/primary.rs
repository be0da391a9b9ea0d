//! Access to the production primary, protected: every session is read-only, carries a
//! `statement_timeout` and `application_name = 'drcheck'`, and the pool caps how many
//! queries run at once.

use sqlx::postgres::PgConnection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgPool};
use std::str::FromStr;
use std::time::Duration;

pub struct PrimaryLimits {
    pub statement_timeout: Duration,
    pub connect_timeout: Duration,
    pub max_concurrency: u32,
}

impl Default for PrimaryLimits {
    fn default() -> Self {
        Self {
            statement_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            max_concurrency: 2,
        }
    }
}

/// Connects to the primary. The error never contains the URL or its password.
pub async fn connect(url: &str, limits: &PrimaryLimits) -> Result<PgPool, String> {
    let opts =
        PgConnectOptions::from_str(url).map_err(|_| "the primary URL is not a valid postgres:// URL".to_string())?;
    let timeout_ms = limits.statement_timeout.as_millis().to_string();
    let opts = opts.application_name("drcheck").options([
        ("default_transaction_read_only", "on"),
        ("statement_timeout", timeout_ms.as_str()),
        ("lock_timeout", "5000"),
    ]);
    // One probe connection first: the pool would keep retrying a refused connection
    // until its acquire timeout, and a dead primary should be known at once.
    let probe = tokio::time::timeout(limits.connect_timeout, PgConnection::connect_with(&opts))
        .await
        .map_err(|_| format!("no answer within {:?}", limits.connect_timeout))?
        .map_err(|e| scrub(&e.to_string(), url))?;
    let _ = probe.close().await;
    Ok(PgPoolOptions::new()
        .max_connections(limits.max_concurrency.max(1))
        .acquire_timeout(limits.connect_timeout)
        .connect_lazy_with(opts))
}

/// Removes the URL and its password from a message, in case a driver ever echoes them.
fn scrub(message: &str, url: &str) -> String {
    let mut m = message.replace(url, "<primary>");
    if let Ok(u) = url::Url::parse(url)
        && let Some(pw) = u.password()
        && !pw.is_empty()
    {
        m = m.replace(pw, "***");
    }
    m
}

#[cfg(test)]
mod tests {
    #[test]
    fn scrub_removes_password_and_url() {
        let url = "postgres://u:pw123@h/db";
        assert_eq!(super::scrub("bad pw123 at postgres://u:pw123@h/db", url), "bad *** at <primary>");
    }
}
