//! The scheduler's core, free of I/O so it can be tested with paused time: each target
//! fires at its cron times (plus a random jitter); a firing is skipped while that
//! target still runs, and one target's slow run never delays another's firings,
//! because runs are spawned and the loop only ever waits for the next firing.

use chrono::{DateTime, Utc};
use drcheck_config::Schedule;
use futures::future::BoxFuture;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A target's schedule as the loop needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub target: String,
    pub schedule: Schedule,
    pub jitter: Duration,
}

impl Entry {
    pub(crate) fn new(target: &str, schedule: &Schedule, jitter: Duration) -> Self {
        Self { target: target.into(), schedule: schedule.clone(), jitter }
    }

    /// The next firing strictly after `after`, with jitter added.
    pub(crate) fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let base = self.schedule.next_after(after)?;
        let jitter = if self.jitter.is_zero() { Duration::ZERO } else { self.jitter.mul_f64(rand::random::<f64>()) };
        Some(base + chrono::Duration::from_std(jitter).unwrap_or_default())
    }
}

/// Wall-clock time, injectable so tests can drive it with tokio's paused clock.
pub(crate) trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// Starts one run of a target; resolves when the run is over.
pub(crate) type Runner = Arc<dyn Fn(String) -> BoxFuture<'static, ()> + Send + Sync>;

/// Told of each firing: the target, and whether a run started (false: skipped).
pub(crate) type OnFire = Arc<dyn Fn(&str, bool) + Send + Sync>;

/// Targets running now (shared with the trigger API, which must not overlap them either).
pub(crate) type Running = Arc<Mutex<HashSet<String>>>;

/// Each target's next firing, with the entry it was computed from.
pub(crate) type Pending = BTreeMap<String, (Entry, DateTime<Utc>)>;

/// The next firings of `entries` from `now` — keeping, from `previous` (the loop's
/// state before a reload), the pending instant (jitter included) of every entry that
/// did not change: a reload never loses or moves a firing. New and changed schedules
/// apply from the reload; removed ones are gone.
pub(crate) fn pending(previous: &Pending, entries: &[Entry], now: DateTime<Utc>) -> Pending {
    let mut out = Pending::new();
    for e in entries {
        let at = match previous.get(&e.target) {
            Some((old, at)) if old == e => Some(*at),
            _ => e.next_after(now),
        };
        if let Some(at) = at {
            out.insert(e.target.clone(), (e.clone(), at));
        }
    }
    out
}

/// Runs the schedule until `stop`; returns the firings still pending then (for
/// [`pending`] after a reload). Runs in flight are left to the `tracker` and the
/// caller's shutdown.
pub(crate) async fn run(
    mut next: Pending,
    clock: Arc<dyn Clock>,
    runner: Runner,
    running: Running,
    tracker: TaskTracker,
    stop: CancellationToken,
    on_fire: OnFire,
) -> Pending {
    loop {
        let Some((target, at)) = next.iter().min_by_key(|(_, (_, t))| *t).map(|(k, (_, t))| (k.clone(), *t)) else {
            stop.cancelled().await;
            return next;
        };
        let wait = (at - clock.now()).to_std().unwrap_or(Duration::ZERO);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return next,
        }
        let fired_at = clock.now();
        // Claim the target; a firing while it still runs is skipped, not queued.
        let started = running.lock().unwrap().insert(target.clone());
        on_fire(&target, started);
        if started {
            let (runner, running, t) = (runner.clone(), running.clone(), target.clone());
            tracker.spawn(async move {
                runner(t.clone()).await;
                running.lock().unwrap().remove(&t);
            });
        } else {
            tracing::warn!(target = %target, "scheduled run skipped: the previous run is still going");
        }
        let entry = next[&target].0.clone();
        match entry.next_after(fired_at.max(at)) {
            Some(t) => next.insert(target, (entry, t)),
            None => next.remove(&target),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// UTC that moves with tokio's (paused) clock.
    struct TokioClock {
        start_utc: DateTime<Utc>,
        start: tokio::time::Instant,
    }

    impl Clock for TokioClock {
        fn now(&self) -> DateTime<Utc> {
            self.start_utc + chrono::Duration::from_std(self.start.elapsed()).unwrap()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn fires_on_schedule_skips_overlaps_and_slow_targets_delay_no_one() {
        let clock = Arc::new(TokioClock {
            start_utc: DateTime::parse_from_rfc3339("2026-11-30T00:00:00.500Z").unwrap().with_timezone(&Utc),
            start: tokio::time::Instant::now(),
        });
        let entries = vec![
            Entry::new("fast", &Schedule::parse("fast", "*/10 * * * * *").unwrap(), Duration::ZERO),
            Entry::new("slow", &Schedule::parse("slow", "*/10 * * * * *").unwrap(), Duration::ZERO),
        ];
        let fast_runs = Arc::new(AtomicUsize::new(0));
        let slow_runs = Arc::new(AtomicUsize::new(0));
        let fire_times = Arc::new(Mutex::new(Vec::new()));
        let (f, s) = (fast_runs.clone(), slow_runs.clone());
        let runner: Runner = Arc::new(move |t: String| {
            let (f, s) = (f.clone(), s.clone());
            Box::pin(async move {
                if t == "slow" {
                    s.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(25)).await;
                } else {
                    f.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            })
        });
        let skipped = Arc::new(AtomicUsize::new(0));
        let (sk, ft, c2) = (skipped.clone(), fire_times.clone(), clock.clone());
        let on_fire: OnFire = Arc::new(move |t: &str, started: bool| {
            if !started {
                sk.fetch_add(1, Ordering::SeqCst);
            }
            if t == "fast" {
                ft.lock().unwrap().push(c2.now());
            }
        });
        let stop = CancellationToken::new();
        let tracker = TaskTracker::new();
        let loop_task = tokio::spawn(run(
            pending(&Pending::new(), &entries, clock.now()),
            clock.clone(),
            runner,
            Default::default(),
            tracker.clone(),
            stop.clone(),
            on_fire,
        ));
        tokio::time::sleep(Duration::from_secs(60)).await;
        stop.cancel();
        loop_task.await.unwrap();
        tracker.close();
        tracker.wait().await;
        // Firings at :10, :20, … :60 — six for the fast target, each on time.
        assert_eq!(fast_runs.load(Ordering::SeqCst), 6);
        for (i, t) in fire_times.lock().unwrap().iter().enumerate() {
            let expected = DateTime::parse_from_rfc3339("2026-11-30T00:00:10Z").unwrap()
                + chrono::Duration::seconds(10 * i as i64);
            let late = (*t - expected.with_timezone(&Utc)).num_milliseconds();
            assert!((0..100).contains(&late), "firing {i} late by {late} ms");
        }
        // The slow target (25 s per run) started at :10, :40 and skipped :20, :30, :50, :60.
        assert_eq!(slow_runs.load(Ordering::SeqCst), 2);
        assert_eq!(skipped.load(Ordering::SeqCst), 4);
    }

    /// A reload every 8 s (the loop stopped and started again from what it had
    /// pending) with `* * * * *` and 50 s of jitter: every minute still fires once —
    /// and a changed schedule applies from the reload.
    #[tokio::test(start_paused = true)]
    async fn reloads_keep_every_pending_firing() {
        let clock = Arc::new(TokioClock {
            start_utc: DateTime::parse_from_rfc3339("2026-11-30T00:00:00.500Z").unwrap().with_timezone(&Utc),
            start: tokio::time::Instant::now(),
        });
        let every_minute = vec![Entry::new("t", &Schedule::parse("t", "* * * * *").unwrap(), Duration::from_secs(50))];
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let runner: Runner = Arc::new(move |_t: String| {
            let r = r.clone();
            Box::pin(async move {
                r.fetch_add(1, Ordering::SeqCst);
            })
        });
        let tracker = TaskTracker::new();
        let mut state = pending(&Pending::new(), &every_minute, clock.now());
        // 3 minutes in 8-second slices: 22 reloads.
        for _ in 0..(180 / 8) {
            let stop = CancellationToken::new();
            let task = tokio::spawn(run(
                state,
                clock.clone(),
                runner.clone(),
                Default::default(),
                tracker.clone(),
                stop.clone(),
                Arc::new(|_: &str, _: bool| {}),
            ));
            tokio::time::sleep(Duration::from_secs(8)).await;
            stop.cancel();
            state = pending(&task.await.unwrap(), &every_minute, clock.now());
        }
        tracker.close();
        tracker.wait().await;
        // The firings of minutes :01 and :02 (jittered by up to 50 s) came; :03's
        // cannot have by 2 min 56.5 s.
        let n = runs.load(Ordering::SeqCst);
        assert_eq!(n, 2, "runs in 176 s of `* * * * *` with a reload every 8 s");

        // A changed schedule starts from the reload; an unchanged one keeps its instant.
        let now = clock.now();
        let hourly = vec![Entry::new("t", &Schedule::parse("t", "0 * * * *").unwrap(), Duration::ZERO)];
        let changed = pending(&state, &hourly, now);
        assert_eq!(changed["t"].1, hourly[0].schedule.next_after(now).unwrap());
        assert_eq!(pending(&state, &every_minute, now)["t"].1, state["t"].1);
        assert!(pending(&state, &[], now).is_empty(), "a removed target keeps no firing");
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let e = Entry::new("t", &Schedule::parse("t", "0 0 3 * * *").unwrap(), Duration::from_secs(600));
        let after = DateTime::parse_from_rfc3339("2026-11-30T00:00:00Z").unwrap().with_timezone(&Utc);
        let base = DateTime::parse_from_rfc3339("2026-11-30T03:00:00Z").unwrap().with_timezone(&Utc);
        for _ in 0..100 {
            let t = e.next_after(after).unwrap();
            assert!(t >= base && t <= base + chrono::Duration::seconds(600), "{t}");
        }
    }
}
