//! The RTO forecast (issue 50): from a target's measured restores — how many bytes a
//! second its restore moves, what it spends regardless of size — and its backups' growth
//! over the window, the date its restore will take longer than its RTO at the current
//! trend. Stated with its confidence, and never from fewer measurements than it needs.
//!
//! Pure: the history hands the samples in (`History::rto_samples`), the run's report
//! carries the result (`rto.forecast`), metrics, status and the alert rule read it.
//! Times are the backups' data times (a backup's consistency point), not upload times.

use serde::{Deserialize, Serialize};

/// Restores with a measured RTO it needs before it says anything.
pub(crate) const MIN_RUNS: usize = 5;
/// Distinct backups (sizes) the growth is fitted on.
pub(crate) const MIN_BACKUPS: usize = 3;
/// How far apart (data time) the oldest and newest of those backups must be.
pub(crate) const MIN_SPAN_DAYS: f64 = 1.0;
/// The growth is the trend of the last this many days of backups.
const WINDOW_DAYS: f64 = 30.0;
/// Throughput is the median of the newest this many restores (what the restore does now).
const RECENT_RUNS: usize = 10;
/// Further than this, "no breach in sight".
const HORIZON_DAYS: f64 = 3650.0;
const DAY: f64 = 86_400.0;

/// One measured restore.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    /// The backup restored (its key): growth counts each backup once.
    pub backup: String,
    /// The backup's data time (Unix seconds).
    pub data_at: f64,
    pub size_bytes: f64,
    /// The measured RTO: fetch start to a restored database that accepts connections.
    pub rto_seconds: f64,
    /// What did not depend on the backup's size (the sandbox's start).
    pub fixed_seconds: f64,
    /// Its `fetch` and `restore` phases, where measured.
    pub fetch_seconds: Option<f64>,
    pub restore_seconds: Option<f64>,
}

/// What the trend says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outlook {
    /// The restore will take longer than the RTO on `breach_at`.
    Breach,
    /// At the trend, a restore takes longer than the RTO already.
    Missed,
    /// Not within the horizon (not growing, or slowly enough).
    Clear,
    /// Too few measurements to say (`detail` says what it needs).
    Insufficient,
}

impl Outlook {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outlook::Breach => "breach",
            Outlook::Missed => "missed",
            Outlook::Clear => "clear",
            Outlook::Insufficient => "insufficient",
        }
    }
}

/// How much to trust a forecast.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Confidence {
    High,
    Medium,
    Low,
    /// Insufficient: no forecast.
    None,
}

/// The forecast a run reports (`rto.forecast`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RtoForecast {
    pub outlook: Outlook,
    /// When the trend crosses the RTO (RFC 3339); the run's time when already over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breach_at: Option<String>,
    /// Restores with a measured RTO it read, and the distinct backups among them.
    pub runs: u32,
    pub backups: u32,
    /// Data time between the oldest and newest backup the growth was fitted on.
    pub span_days: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth_percent_per_day: Option<f64>,
    /// How well the growth fits an exponential trend (R², 0 to 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth_fit: Option<f64>,
    /// What a restore of a backup of the trend's size now takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_seconds_now: Option<f64>,
    /// The restore's size-dependent throughput (backup bytes per second; median of the newest runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_second: Option<f64>,
    /// How much that throughput varies between those runs (coefficient of variation, %).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise_percent: Option<f64>,
    /// The phase that takes longest (`fetch` or `restore`): what to make faster first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limited_by: Option<String>,
    pub confidence: Confidence,
    /// One sentence: the forecast, or what it still needs.
    pub detail: String,
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

fn rfc3339(unix: f64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(unix.max(0.0));
    humantime::format_rfc3339_seconds(t).to_string()
}

/// The least-squares line `y = a + b·x`, with its R² (`None` when `y` does not vary).
fn fit(points: &[(f64, f64)]) -> (f64, f64, Option<f64>) {
    let n = points.len() as f64;
    let (mx, my) = (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    let b = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let r2 = (syy > 1e-18 && sxx > 0.0).then(|| (sxy * sxy / (sxx * syy)).clamp(0.0, 1.0));
    (my - b * mx, b, r2)
}

/// The forecast for an RTO of `rto_seconds` at `now` (Unix seconds) from `samples`
/// (any order; the newest matter most).
pub(crate) fn forecast(samples: &[Sample], rto_seconds: f64, now: f64) -> RtoForecast {
    let mut runs: Vec<&Sample> =
        samples.iter().filter(|s| s.size_bytes > 0.0 && s.rto_seconds > 0.0 && s.data_at.is_finite()).collect();
    runs.sort_by(|a, b| b.data_at.total_cmp(&a.data_at));
    // Each backup once (its newest measurement), within the window of the newest.
    let newest = runs.first().map(|s| s.data_at).unwrap_or(now);
    let mut seen = std::collections::BTreeSet::new();
    let backups: Vec<&Sample> = runs
        .iter()
        .copied()
        .filter(|s| newest - s.data_at <= WINDOW_DAYS * DAY && seen.insert(s.backup.as_str()))
        .collect();
    let span_days = backups.iter().map(|s| s.data_at).fold(f64::NEG_INFINITY, f64::max)
        - backups.iter().map(|s| s.data_at).fold(f64::INFINITY, f64::min);
    let span_days = if backups.is_empty() { 0.0 } else { span_days / DAY };
    let mut f = RtoForecast {
        outlook: Outlook::Insufficient,
        breach_at: None,
        runs: runs.len() as u32,
        backups: backups.len() as u32,
        span_days,
        growth_percent_per_day: None,
        growth_fit: None,
        predicted_seconds_now: None,
        bytes_per_second: None,
        noise_percent: None,
        limited_by: None,
        confidence: Confidence::None,
        detail: String::new(),
    };
    if runs.len() < MIN_RUNS || backups.len() < MIN_BACKUPS || span_days < MIN_SPAN_DAYS {
        f.detail = format!(
            "no forecast yet: it needs {MIN_RUNS} measured restores of {MIN_BACKUPS} backups spanning {MIN_SPAN_DAYS} day(s); \
             it has {} of {} spanning {:.1} day(s)",
            runs.len(),
            backups.len(),
            span_days
        );
        return f;
    }
    // Growth: ln(size) against the data time, in days from the newest backup.
    let points: Vec<(f64, f64)> = backups.iter().map(|s| ((s.data_at - newest) / DAY, s.size_bytes.ln())).collect();
    let (a, g, r2) = fit(&points);
    f.growth_percent_per_day = Some((g.exp() - 1.0) * 100.0);
    f.growth_fit = r2;
    // Throughput now: the newest restores' size-dependent seconds.
    let recent = &runs[..runs.len().min(RECENT_RUNS)];
    let mut rates: Vec<f64> =
        recent.iter().map(|s| s.size_bytes / (s.rto_seconds - s.fixed_seconds).max(1e-3)).collect();
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    let sd = (rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / rates.len() as f64).sqrt();
    let noise = if mean > 0.0 { sd / mean * 100.0 } else { 0.0 };
    let bps = median(&mut rates).unwrap_or(0.0);
    let fixed = median(&mut recent.iter().map(|s| s.fixed_seconds).collect::<Vec<_>>()).unwrap_or(0.0);
    let fetch = median(&mut recent.iter().filter_map(|s| s.fetch_seconds).collect::<Vec<_>>());
    let restore = median(&mut recent.iter().filter_map(|s| s.restore_seconds).collect::<Vec<_>>());
    f.limited_by = match (fetch, restore) {
        (Some(a), Some(b)) if a > b => Some("fetch".into()),
        (_, Some(_)) => Some("restore".into()),
        (Some(_), None) => Some("fetch".into()),
        (None, None) => None,
    };
    f.bytes_per_second = Some(bps);
    f.noise_percent = Some(noise);
    f.confidence = match (runs.len(), noise, r2.unwrap_or(1.0)) {
        (n, c, r) if n >= 2 * MIN_RUNS && c < 15.0 && r >= 0.9 => Confidence::High,
        (_, c, r) if c < 35.0 && r >= 0.5 => Confidence::Medium,
        _ => Confidence::Low,
    };
    let size_now = (a + g * (now - newest) / DAY).exp();
    let predicted = fixed + size_now / bps.max(1e-9);
    f.predicted_seconds_now = Some(predicted);
    let breach_size = (rto_seconds - fixed) * bps;
    let how = format!(
        "{:+.1} %/day over {} backups in {:.1} days, {} now at {}/s, confidence {} ({} restores, throughput ±{:.0} %)",
        (g.exp() - 1.0) * 100.0,
        backups.len(),
        span_days,
        crate::out::whole(predicted),
        drcheck_validators::human_bytes(bps as u64),
        match f.confidence {
            Confidence::High => "high",
            Confidence::Medium => "medium",
            Confidence::Low => "low",
            Confidence::None => "none",
        },
        runs.len(),
        noise
    );
    let rto = crate::out::whole(rto_seconds);
    if breach_size <= size_now {
        f.outlook = Outlook::Missed;
        f.breach_at = Some(rfc3339(now));
        f.detail = format!("at the current trend a restore already takes longer than the RTO {rto} ({how})");
        return f;
    }
    let days = if g > 1e-9 { (breach_size / size_now).ln() / g } else { f64::INFINITY };
    if days > HORIZON_DAYS {
        f.outlook = Outlook::Clear;
        f.detail = format!("no RTO breach in sight ({how})");
        return f;
    }
    let at = now + days * DAY;
    f.outlook = Outlook::Breach;
    f.breach_at = Some(rfc3339(at));
    f.detail = format!(
        "at the current trend the restore takes longer than the RTO {rto} on {} (in {}; {how})",
        &rfc3339(at)[..10],
        crate::out::whole(days * DAY)
    );
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: f64 = 1_796_601_600.0; // 2026-12-07T00:00:00Z

    /// A database growing `growth` a day, one backup a day for `days` days ending at NOW,
    /// each restored at `rto_fraction` × `rto` (+ `jitter` alternately) when at NOW's size.
    fn growing(days: usize, growth: f64, rto: f64, rto_fraction: f64, jitter: f64) -> Vec<Sample> {
        let size_now = 10e9;
        let fixed = 5.0;
        let bps = size_now / (rto * rto_fraction - fixed);
        (0..days)
            .map(|i| {
                let age = (days - 1 - i) as f64;
                let size = size_now / (1.0 + growth).powf(age);
                let wobble = if i % 2 == 0 { 1.0 + jitter } else { 1.0 - jitter };
                let moving = size / bps * wobble;
                Sample {
                    backup: format!("b{i}"),
                    data_at: NOW - age * DAY,
                    size_bytes: size,
                    rto_seconds: fixed + moving,
                    fixed_seconds: fixed,
                    fetch_seconds: Some(moving * 0.3),
                    restore_seconds: Some(moving * 0.7),
                }
            })
            .collect()
    }

    #[test]
    fn five_percent_a_day_at_eighty_percent_of_the_rto_breaches_within_a_week() {
        let f = forecast(&growing(10, 0.05, 1800.0, 0.8, 0.02), 1800.0, NOW);
        assert_eq!(f.outlook, Outlook::Breach, "{f:?}");
        let at = humantime::parse_rfc3339(f.breach_at.as_deref().unwrap()).unwrap();
        let days = (at.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64() - NOW) / DAY;
        // 0.8 × 1.05^d = 1 → d = 4.57 (the fixed start-up does not grow: a little later).
        assert!((4.0..7.0).contains(&days), "{days} days: {f:?}");
        assert!((f.growth_percent_per_day.unwrap() - 5.0).abs() < 0.1, "{f:?}");
        assert_eq!(f.limited_by.as_deref(), Some("restore"));
        assert_eq!(f.confidence, Confidence::High, "{f:?}");
        assert!(f.detail.contains("longer than the RTO 30m on 2026-12-1"), "{}", f.detail);
    }

    #[test]
    fn never_from_fewer_runs_than_it_needs() {
        // Four restores, or five of two backups, or five within an hour: nothing said.
        for samples in [
            growing(4, 0.05, 1800.0, 0.8, 0.0),
            {
                let mut s = growing(5, 0.05, 1800.0, 0.8, 0.0);
                for x in &mut s[2..] {
                    x.backup = "b1".into();
                }
                s
            },
            {
                let mut s = growing(5, 0.05, 1800.0, 0.8, 0.0);
                for (i, x) in s.iter_mut().enumerate() {
                    x.data_at = NOW - i as f64 * 600.0;
                }
                s
            },
        ] {
            let f = forecast(&samples, 1800.0, NOW);
            assert_eq!(f.outlook, Outlook::Insufficient, "{f:?}");
            assert_eq!(f.confidence, Confidence::None);
            assert!(f.breach_at.is_none() && f.predicted_seconds_now.is_none());
            assert!(f.detail.starts_with("no forecast yet: it needs 5"), "{}", f.detail);
        }
    }

    #[test]
    fn a_database_that_does_not_grow_never_breaches() {
        let f = forecast(&growing(8, 0.0, 1800.0, 0.8, 0.05), 1800.0, NOW);
        assert_eq!(f.outlook, Outlook::Clear, "{f:?}");
        assert!(f.breach_at.is_none());
        // Shrinking: the same.
        let f = forecast(&growing(8, -0.02, 1800.0, 0.8, 0.0), 1800.0, NOW);
        assert_eq!(f.outlook, Outlook::Clear, "{f:?}");
    }

    #[test]
    fn a_restore_over_the_rto_at_the_trend_is_missed_now() {
        let f = forecast(&growing(6, 0.01, 1800.0, 1.1, 0.0), 1800.0, NOW);
        assert_eq!(f.outlook, Outlook::Missed, "{f:?}");
        assert_eq!(f.breach_at.as_deref(), Some("2026-12-07T00:00:00Z"));
    }

    #[test]
    fn slow_growth_far_from_the_rto_is_clear_and_noise_lowers_the_confidence() {
        // 0.1 % a day at 10 % of the RTO: 2,300 days away — inside the horizon, stated.
        let f = forecast(&growing(12, 0.001, 1800.0, 0.1, 0.0), 1800.0, NOW);
        assert_eq!(f.outlook, Outlook::Breach, "{f:?}");
        // 0.01 % a day: beyond it.
        let f = forecast(&growing(12, 0.0001, 1800.0, 0.1, 0.0), 1800.0, NOW);
        assert_eq!(f.outlook, Outlook::Clear, "{f:?}");
        // Throughput varying ±40 % between runs: low.
        let f = forecast(&growing(12, 0.05, 1800.0, 0.5, 0.4), 1800.0, NOW);
        assert_eq!(f.confidence, Confidence::Low, "{f:?}");
        assert!(f.noise_percent.unwrap() > 35.0);
    }

    #[test]
    fn each_backup_counts_once_for_the_growth() {
        // The same small backup restored twenty times does not outweigh the trend.
        let mut s = growing(6, 0.05, 1800.0, 0.8, 0.0);
        let oldest = s[0].clone();
        s.extend(std::iter::repeat_n(oldest, 20));
        let f = forecast(&s, 1800.0, NOW);
        assert_eq!(f.backups, 6);
        assert!((f.growth_percent_per_day.unwrap() - 5.0).abs() < 0.1, "{f:?}");
    }
}
