//! A circuit breaker per dependency (each S3 endpoint): after `threshold` consecutive
//! failures it opens and calls fail fast for `cooloff`; then one probe is let through,
//! and its outcome closes or re-opens it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

#[derive(Debug)]
struct Inner {
    failures: u32,
    /// The first failure of the current streak.
    failing_since: Option<Instant>,
    open_until: Option<Instant>,
    probing: bool,
}

#[derive(Debug)]
pub struct Breaker {
    inner: Mutex<Inner>,
    threshold: u32,
    cooloff: Duration,
}

/// Whether this process is a one-shot command (no later attempt will come).
static ONE_SHOT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Says this process runs one command and exits: an open circuit is then reported as
/// giving up, not as a next attempt that will never come.
pub fn mark_one_shot() {
    ONE_SHOT.store(true, std::sync::atomic::Ordering::Relaxed);
}

impl Breaker {
    /// Why a call was refused while the circuit is open, `wait` before the next probe:
    /// a daemon tries again; a one-shot command has given up.
    pub fn refusal(&self, wait: Duration, last: &str) -> String {
        if ONE_SHOT.load(std::sync::atomic::Ordering::Relaxed) {
            let g = self.inner.lock().unwrap();
            let over = g.failing_since.map(|t| format!(" over {}s", t.elapsed().as_secs())).unwrap_or_default();
            format!("the store failed {} times in a row{over} (the last: {last})", g.failures)
        } else {
            format!("circuit open after repeated failures (the last: {last}); next attempt in {}s", wait.as_secs())
        }
    }

    pub fn new(threshold: u32, cooloff: Duration) -> Self {
        Self {
            inner: Mutex::new(Inner { failures: 0, failing_since: None, open_until: None, probing: false }),
            threshold,
            cooloff,
        }
    }

    /// `Ok` if a call may go ahead; `Err` with the remaining cool-off while open.
    pub fn admit(&self) -> Result<(), Duration> {
        let mut g = self.inner.lock().unwrap();
        match g.open_until {
            None => Ok(()),
            Some(until) => {
                let now = Instant::now();
                if now < until {
                    Err(until - now)
                } else if g.probing {
                    Err(Duration::ZERO)
                } else {
                    g.probing = true;
                    Ok(())
                }
            }
        }
    }

    pub fn success(&self) {
        let mut g = self.inner.lock().unwrap();
        *g = Inner { failures: 0, failing_since: None, open_until: None, probing: false };
    }

    pub fn failure(&self) {
        let mut g = self.inner.lock().unwrap();
        g.failures += 1;
        g.failing_since.get_or_insert_with(Instant::now);
        if g.probing || g.failures >= self.threshold {
            g.open_until = Some(Instant::now() + self.cooloff);
            g.probing = false;
        }
    }

    /// How long the dependency has failed without a success in between.
    pub fn failing_for(&self) -> Option<Duration> {
        self.inner.lock().unwrap().failing_since.map(|t| t.elapsed())
    }

    pub fn state(&self) -> BreakerState {
        let g = self.inner.lock().unwrap();
        match g.open_until {
            None => BreakerState::Closed,
            Some(until) if Instant::now() < until => BreakerState::Open,
            Some(_) => BreakerState::HalfOpen,
        }
    }
}

fn registry() -> &'static Mutex<HashMap<String, Arc<Breaker>>> {
    static ALL: OnceLock<Mutex<HashMap<String, Arc<Breaker>>>> = OnceLock::new();
    ALL.get_or_init(Default::default)
}

/// The process-wide breaker of a dependency, created on first use.
pub fn for_dependency(name: &str) -> Arc<Breaker> {
    let mut map = registry().lock().unwrap();
    map.entry(name.to_string()).or_insert_with(|| Arc::new(Breaker::new(5, Duration::from_secs(10)))).clone()
}

/// Every breaker and its state, for metrics.
pub fn states() -> Vec<(String, BreakerState)> {
    registry().lock().unwrap().iter().map(|(k, b)| (k.clone(), b.state())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_fails_fast_then_probes_once() {
        let b = Breaker::new(3, Duration::from_millis(50));
        for _ in 0..2 {
            b.failure();
            assert!(b.admit().is_ok());
        }
        b.failure();
        assert_eq!(b.state(), BreakerState::Open);
        assert!(b.admit().is_err());
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(b.admit().is_ok(), "one probe");
        assert!(b.admit().is_err(), "only one probe");
        b.failure();
        assert_eq!(b.state(), BreakerState::Open, "a failed probe re-opens");
        std::thread::sleep(Duration::from_millis(60));
        assert!(b.admit().is_ok());
        b.success();
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.admit().is_ok());
    }
}
