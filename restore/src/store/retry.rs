//! Exponential backoff with full jitter, capped in delay and in attempts. This is the
//! one retry layer for a store (the AWS SDK's own retries are off): every retry is
//! logged at warn with what, the attempt, the delay and the cause.

use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    /// Attempts made at least, the first included…
    pub attempts: u32,
    /// …and more while this long has not passed since the first (a store's
    /// `retry_window`): a blip of a store must not fail a nightly run.
    pub window: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { base: Duration::from_millis(200), cap: Duration::from_secs(2), attempts: 6, window: Duration::ZERO }
    }
}

/// How much trying a failure took: said after the cause when a call gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tried {
    pub attempts: u32,
    pub elapsed: Duration,
    pub window: Duration,
}

impl std::fmt::Display for Tried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = if self.attempts == 1 { "" } else { "s" };
        write!(f, "gave up after {} attempt{s} in {:.1}s", self.attempts, self.elapsed.as_secs_f64())?;
        if !self.window.is_zero() {
            write!(f, " (retry_window = {})", drcheck_config::format_duration(self.window))?;
        }
        Ok(())
    }
}

impl Backoff {
    /// Retries spanning `window`: delays from 250 ms doubling to 10 s, with full jitter.
    pub fn within(window: Duration) -> Self {
        Self { base: Duration::from_millis(250), cap: Duration::from_secs(10), attempts: 6, window }
    }

    /// The pause before retry number `retry` (0-based): uniform in [0, min(cap, base × 2^retry)].
    pub fn delay(&self, retry: u32) -> Duration {
        let ceiling = self.base.saturating_mul(1u32 << retry.min(20)).min(self.cap);
        ceiling.mul_f64(rand::random::<f64>())
    }

    /// Runs `op` until it succeeds, fails with an error `retryable` rejects, or both the
    /// attempts and the window are used up; returns the last error. `what` names the
    /// operation in the warning logged before each retry.
    pub async fn run<T, E, F, Fut>(&self, what: &str, op: F, retryable: impl Fn(&E) -> bool) -> Result<T, E>
    where
        E: std::fmt::Display,
        F: FnMut(u32) -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        self.run_counted(what, op, retryable).await.map_err(|(e, _)| e)
    }

    /// [`run`](Self::run), the last error with how much trying it took.
    pub async fn run_counted<T, E, F, Fut>(
        &self,
        what: &str,
        mut op: F,
        retryable: impl Fn(&E) -> bool,
    ) -> Result<T, (E, Tried)>
    where
        E: std::fmt::Display,
        F: FnMut(u32) -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let started = tokio::time::Instant::now();
        let mut attempt = 0;
        loop {
            match op(attempt).await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let delay = self.delay(attempt);
                    let elapsed = started.elapsed();
                    let more = attempt + 1 < self.attempts || elapsed + delay < self.window;
                    if !(more && retryable(&e)) {
                        return Err((e, Tried { attempts: attempt + 1, elapsed, window: self.window }));
                    }
                    tracing::warn!(
                        what,
                        attempt = attempt + 1,
                        elapsed_s = elapsed.as_secs(),
                        retry_window_s = self.window.as_secs(),
                        delay_ms = delay.as_millis() as u64,
                        cause = %e,
                        "transient failure, retrying"
                    );
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
            }
        }
    }
}

impl crate::error::StoreError {
    /// The error a call gave up on, saying how much it tried (when it tried again at all).
    pub fn after((mut e, tried): (crate::error::StoreError, Tried)) -> crate::error::StoreError {
        if tried.attempts > 1 {
            e.message = format!("{} — {tried}", e.message);
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_jittered_and_capped() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(1),
            attempts: 5,
            window: Duration::ZERO,
        };
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
        let b = Backoff {
            base: Duration::from_millis(10),
            cap: Duration::from_millis(50),
            attempts: 4,
            window: Duration::ZERO,
        };
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

    /// A store down for a minute is asked again for the whole window, not six times in
    /// two seconds; giving up says how long it tried.
    #[tokio::test(start_paused = true)]
    async fn a_window_keeps_retrying_until_it_has_passed() {
        let b = Backoff::within(Duration::from_secs(120));
        let start = tokio::time::Instant::now();
        // Down for 60 s, then up.
        let r: Result<u32, (&str, Tried)> = b
            .run_counted(
                "test",
                |n| async move { if start.elapsed() < Duration::from_secs(60) { Err("refused") } else { Ok(n) } },
                |_| true,
            )
            .await;
        let n = r.unwrap();
        assert!(n > 6, "{n} attempts: more than the six of a window-less backoff");
        // Down for good: gives up once the window has passed, not before.
        let start = tokio::time::Instant::now();
        let r: Result<(), (&str, Tried)> = b.run_counted("test", |_| async { Err("refused") }, |_| true).await;
        let (_, tried) = r.unwrap_err();
        let took = start.elapsed();
        assert!(took >= Duration::from_secs(110) && took <= Duration::from_secs(131), "{took:?}");
        assert!(tried.attempts > 6, "{tried:?}");
        let said = tried.to_string();
        assert!(said.starts_with(&format!("gave up after {} attempts in 1", tried.attempts)), "{said}");
        assert!(said.ends_with("(retry_window = 2m)"), "{said}");
    }
}
