//! Exponential backoff with full jitter, capped in delay and in attempts. This is the
//! one retry layer for a store (the AWS SDK's own retries are off): every retry is
//! logged at warn with what, the attempt, the delay and the cause.

use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    /// Total attempts, the first included.
    pub attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { base: Duration::from_millis(200), cap: Duration::from_secs(2), attempts: 6 }
    }
}

impl Backoff {
    /// The pause before retry number `retry` (0-based): uniform in [0, min(cap, base × 2^retry)].
    pub fn delay(&self, retry: u32) -> Duration {
        let ceiling = self.base.saturating_mul(1u32 << retry.min(20)).min(self.cap);
        ceiling.mul_f64(rand::random::<f64>())
    }

    /// Runs `op` until it succeeds, fails with an error `retryable` rejects, or the
    /// attempts are used up; returns the last error. `what` names the operation in the
    /// warning logged before each retry.
    pub async fn run<T, E, F, Fut>(&self, what: &str, mut op: F, retryable: impl Fn(&E) -> bool) -> Result<T, E>
    where
        E: std::fmt::Display,
        F: FnMut(u32) -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let mut attempt = 0;
        loop {
            match op(attempt).await {
                Ok(v) => return Ok(v),
                Err(e) if attempt + 1 < self.attempts && retryable(&e) => {
                    let delay = self.delay(attempt);
                    tracing::warn!(
                        what,
                        attempt = attempt + 1,
                        of = self.attempts,
                        delay_ms = delay.as_millis() as u64,
                        cause = %e,
                        "transient failure, retrying"
                    );
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_jittered_and_capped() {
        let b = Backoff { base: Duration::from_millis(100), cap: Duration::from_secs(1), attempts: 5 };
        for retry in 0..30 {
            let d = b.delay(retry);
            assert!(d <= Duration::from_secs(1));
            assert!(d <= Duration::from_millis(100) * 2u32.pow(retry.min(10)));
        }
        let spread: std::collections::HashSet<_> = (0..50).map(|_| b.delay(3)).collect();
        assert!(spread.len() > 10, "full jitter spreads the delays");
    }

    #[tokio::test(start_paused = true)]
    async fn retries_only_what_is_retryable_and_stops_at_the_cap() {
        let b = Backoff { base: Duration::from_millis(10), cap: Duration::from_millis(50), attempts: 4 };
        let mut calls = 0;
        let r: Result<(), &str> = b
            .run(
                "test",
                |_| {
                    calls += 1;
                    async { Err("transient") }
                },
                |_| true,
            )
            .await;
        assert_eq!((r, calls), (Err("transient"), 4));
        let mut calls = 0;
        let r: Result<(), &str> = b
            .run(
                "test",
                |_| {
                    calls += 1;
                    async { Err("403") }
                },
                |e| *e != "403",
            )
            .await;
        assert_eq!((r, calls), (Err("403"), 1));
        let r: Result<u32, &str> =
            b.run("test", |n| async move { if n < 2 { Err("x") } else { Ok(n) } }, |_| true).await;
        assert_eq!(r, Ok(2));
    }
}
