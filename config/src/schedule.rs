//! Schedules, with crontab's meaning — the one Kubernetes gives a CronJob — in one type
//! that the daemon and the generated CronJobs both use, so they fire at the same
//! instants:
//!
//! - five fields (minute hour day-of-month month day-of-week), or six with seconds
//!   first (the daemon only); `@yearly`, `@monthly`, `@weekly`, `@daily`, `@hourly`;
//! - `*`, `a`, `a-b`, `*/n`, `a-b/n`, `a/n` (from a to the end), lists with `,`;
//!   month names `JAN`–`DEC` and day names `SUN`–`SAT` in any case;
//! - day of week 0–7, where both 0 and 7 are Sunday;
//! - when both day of month and day of week are restricted (neither is `*`), a day
//!   matches if *either* does; when one is `*`, the other alone decides;
//! - `H` (a value picked from the target's name, stable everywhere) in the minute and
//!   hour fields only: `H`, `H/n`, `H(lo-hi)`.
//!
//! Times are UTC; [`Schedule::to_kubernetes`] is the five-field line a CronJob gets
//! (with `timeZone: Etc/UTC`), numbers only, Sunday as 0.

use crate::error::ValueError;
use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Timelike, Utc};

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// As written (with `H` resolved), for messages and the config's rendering.
    pub text: String,
    seconds: u64,
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    /// Whether the day-of-month / day-of-week field is `*` (not restricted).
    days_star: bool,
    weekdays_star: bool,
    /// A seconds field was given.
    with_seconds: bool,
}

const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// A schedule is shown (and round-trips through `config check`) as its text.
impl serde::Serialize for Schedule {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_str(&self.text)
    }
}

impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl Schedule {
    /// Parses `s` for target `target` (whose name resolves `H`).
    pub fn parse(target: &str, s: &str) -> Result<Schedule, ValueError> {
        let resolved = spread(target, s)?;
        let t = resolved.trim();
        let expanded = match t.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *".to_string(),
            "@monthly" => "0 0 1 * *".to_string(),
            "@weekly" => "0 0 * * 0".to_string(),
            "@daily" | "@midnight" => "0 0 * * *".to_string(),
            "@hourly" => "0 * * * *".to_string(),
            other if other.starts_with('@') => {
                return Err(ValueError::refused(
                    s,
                    "unknown shorthand (expected @yearly, @monthly, @weekly, @daily or @hourly)",
                ));
            }
            _ => t.to_string(),
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let (sec, rest) = match fields.len() {
            5 => ("0", &fields[..]),
            6 => (fields[0], &fields[1..]),
            _ => {
                return Err(ValueError::expected(
                    s,
                    "a crontab line of 5 fields (\"0 3 * * *\") or 6 with seconds first",
                ));
            }
        };
        let field = |name: &str, text: &str, lo: u32, hi: u32, names: &[&str]| {
            parse_field(text, lo, hi, names).map_err(|e| ValueError::refused(s, format!("{name} field {text:?}: {e}")))
        };
        let (seconds, _) = field("seconds", sec, 0, 59, &[])?;
        let (minutes, _) = field("minute", rest[0], 0, 59, &[])?;
        let (hours, _) = field("hour", rest[1], 0, 23, &[])?;
        let (days, days_star) = field("day-of-month", rest[2], 1, 31, &[])?;
        let (months, _) = field("month", rest[3], 1, 12, &MONTHS)?;
        let (weekdays, weekdays_star) = field("day-of-week", rest[4], 0, 7, &WEEKDAYS)?;
        // 7 is Sunday as well as 0.
        let weekdays = (weekdays | (weekdays >> 7)) & 0x7f;
        let schedule = Schedule {
            text: resolved.trim().to_string(),
            seconds,
            minutes,
            hours: hours as u32,
            days: days as u32,
            months: months as u16,
            weekdays: weekdays as u8,
            days_star,
            weekdays_star,
            with_seconds: fields.len() == 6,
        };
        // Accepted, it would never fire and nothing would say so (issue 34: `0 0 31 2 *`).
        let fires = Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).single().and_then(|leap| schedule.next_after(leap));
        if fires.is_none() {
            return Err(ValueError::refused(
                s,
                "never fires: it names no day that exists (such as 31 February or 30 February)",
            ));
        }
        Ok(schedule)
    }

    /// Whether a day matches (day of month, month, weekday; crontab's either-day rule).
    fn day_matches(&self, d: NaiveDate) -> bool {
        if self.months & (1 << d.month()) == 0 {
            return false;
        }
        let dom = self.days & (1 << d.day()) != 0;
        let dow = self.weekdays & (1 << d.weekday().num_days_from_sunday()) != 0;
        if self.days_star || self.weekdays_star { dom && dow } else { dom || dow }
    }

    /// The first instant strictly after `after` that the schedule names.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut t = after.with_nanosecond(0)? + Duration::seconds(1);
        // Five years is past every schedule's period (29 February on a Monday included).
        let limit = after + Duration::days(5 * 366);
        while t <= limit {
            let date = t.date_naive();
            if !self.day_matches(date) {
                t = Utc.from_utc_datetime(&date.succ_opt()?.and_hms_opt(0, 0, 0)?);
                continue;
            }
            if self.hours & (1 << t.hour()) == 0 {
                t = t.with_minute(0)?.with_second(0)? + Duration::hours(1);
                continue;
            }
            if self.minutes & (1 << t.minute()) == 0 {
                t = t.with_second(0)? + Duration::minutes(1);
                continue;
            }
            if self.seconds & (1 << t.second()) == 0 {
                t += Duration::seconds(1);
                continue;
            }
            return Some(t);
        }
        None
    }

    /// The five-field line a Kubernetes CronJob evaluates to the same instants (in UTC):
    /// numbers only, Sunday as 0. A schedule with seconds has none.
    pub fn to_kubernetes(&self) -> Result<String, ValueError> {
        if self.with_seconds && self.seconds != 1 {
            return Err(ValueError::refused(
                &self.text,
                "fires at seconds within a minute, which a Kubernetes CronJob cannot (whole minutes only)",
            ));
        }
        let days = if self.days_star { "*".to_string() } else { list(self.days as u64, 1, 31) };
        let weekdays = if self.weekdays_star { "*".to_string() } else { list(self.weekdays as u64, 0, 6) };
        Ok(format!(
            "{} {} {days} {} {weekdays}",
            list(self.minutes, 0, 59),
            list(self.hours as u64, 0, 23),
            list(self.months as u64, 1, 12)
        ))
    }
}

/// A bit set as a crontab list: `*` when full, else runs as `a-b` and single values.
fn list(bits: u64, lo: u32, hi: u32) -> String {
    let full = (lo..=hi).all(|i| bits & (1 << i) != 0);
    if full {
        return "*".into();
    }
    let mut parts = Vec::new();
    let mut i = lo;
    while i <= hi {
        if bits & (1 << i) == 0 {
            i += 1;
            continue;
        }
        let start = i;
        while i < hi && bits & (1 << (i + 1)) != 0 {
            i += 1;
        }
        parts.push(if i - start >= 2 {
            format!("{start}-{i}")
        } else if i > start {
            format!("{start},{i}")
        } else {
            start.to_string()
        });
        i += 1;
    }
    parts.join(",")
}

/// One field as a bit set over `lo..=hi`, and whether it is unrestricted (`*`).
/// What is wrong with one field of a crontab line.
#[derive(Debug, thiserror::Error)]
enum FieldError {
    #[error("{0:?} is not a number or a name")]
    NotANumber(String),
    #[error("{n} is outside {lo}-{hi}")]
    Outside { n: u32, lo: u32, hi: u32 },
    #[error("bad step {0:?}")]
    BadStep(String),
    #[error("the range {0:?} runs backwards")]
    Backwards(String),
    #[error("matches nothing")]
    Nothing,
}

fn parse_field(text: &str, lo: u32, hi: u32, names: &[&str]) -> Result<(u64, bool), FieldError> {
    let value = |v: &str| -> Result<u32, FieldError> {
        let lower = v.to_ascii_lowercase();
        if let Some(i) = names.iter().position(|n| *n == lower) {
            // Month names count from 1, day names from 0.
            return Ok(i as u32 + if lo == 1 { 1 } else { 0 });
        }
        let n: u32 = v.parse().map_err(|_| FieldError::NotANumber(v.into()))?;
        if n < lo || n > hi {
            return Err(FieldError::Outside { n, lo, hi });
        }
        Ok(n)
    };
    let mut bits = 0u64;
    let mut star = false;
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s.parse().ok().filter(|s| *s > 0).ok_or_else(|| FieldError::BadStep(s.into()))?;
                (r, Some(step))
            }
            None => (item, None),
        };
        let (a, b) = if range == "*" || range == "?" {
            if step.is_none_or(|s| s == 1) {
                star = true;
            }
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (value(a)?, value(b)?);
            if a > b {
                return Err(FieldError::Backwards(range.into()));
            }
            (a, b)
        } else {
            let a = value(range)?;
            // `a/n` runs from a to the end.
            (a, if step.is_some() { hi } else { a })
        };
        let step = step.unwrap_or(1);
        let mut i = a;
        while i <= b {
            bits |= 1 << i;
            i += step;
        }
    }
    if bits == 0 {
        return Err(FieldError::Nothing);
    }
    Ok((bits, star))
}

/// `s` with `H` resolved from the target's name, in the minute and hour fields only (a
/// token that merely contains the letter, such as `THU`, is left alone).
pub fn spread(target: &str, s: &str) -> Result<String, ValueError> {
    let t = s.trim();
    if t.starts_with('@') {
        return Ok(t.to_string());
    }
    let fields: Vec<&str> = t.split_whitespace().collect();
    let (minute, hour) = match fields.len() {
        5 => (0, 1),
        6 => (1, 2),
        _ => return Ok(t.to_string()),
    };
    let mut out = Vec::with_capacity(fields.len());
    for (i, f) in fields.iter().enumerate() {
        let is_h = f.starts_with('H');
        if !is_h {
            out.push(f.to_string());
            continue;
        }
        let (span, salt) = match i {
            _ if i == minute => (60, "minute"),
            _ if i == hour => (24, "hour"),
            _ => return Err(ValueError::refused(s, "H is supported in the minute and hour fields only")),
        };
        let h = name_hash(target, salt);
        let value = if *f == "H" {
            (h % span).to_string()
        } else if let Some(step) = f.strip_prefix("H/") {
            let n: u64 = step
                .parse()
                .ok()
                .filter(|n| (1..=span).contains(n))
                .ok_or_else(|| ValueError::refused(s, format!("bad step in {f:?}")))?;
            format!("{}/{n}", h % n)
        } else if let Some(range) = f.strip_prefix("H(").and_then(|r| r.strip_suffix(')')) {
            let (lo, hi) =
                range.split_once('-').ok_or_else(|| ValueError::refused(s, format!("expected H(lo-hi), got {f:?}")))?;
            let (lo, hi): (u64, u64) = match (lo.parse(), hi.parse()) {
                (Ok(lo), Ok(hi)) if lo <= hi && hi < span => (lo, hi),
                _ => return Err(ValueError::refused(s, format!("expected H(lo-hi) within 0-{}, got {f:?}", span - 1))),
            };
            (lo + h % (hi - lo + 1)).to_string()
        } else {
            return Err(ValueError::refused(s, format!("expected H, H/n or H(lo-hi), got {f:?}")));
        };
        out.push(value);
    }
    Ok(out.join(" "))
}

/// FNV-1a of the target's name and a salt: stable across versions and machines (std's
/// hasher is not).
fn name_hash(target: &str, salt: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in target.bytes().chain([0]).chain(salt.bytes()) {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn next(schedule: &str, after: &str) -> String {
        let s = Schedule::parse("t", schedule).unwrap();
        s.next_after(at(after)).unwrap().to_rfc3339()
    }

    #[test]
    fn crontab_days_of_week_count_from_sunday_zero_and_seven() {
        // 2026-12-06 is a Sunday.
        assert_eq!(next("0 3 * * 1", "2026-12-05T12:00:00Z"), "2026-12-07T03:00:00+00:00", "1 is Monday");
        assert_eq!(next("0 3 * * 0", "2026-12-05T12:00:00Z"), "2026-12-06T03:00:00+00:00", "0 is Sunday");
        assert_eq!(next("0 3 * * 7", "2026-12-05T12:00:00Z"), "2026-12-06T03:00:00+00:00", "7 is Sunday");
        assert_eq!(next("0 3 * * THU", "2026-12-05T12:00:00Z"), "2026-12-10T03:00:00+00:00");
        assert_eq!(next("0 3 * * mon-fri", "2026-12-05T12:00:00Z"), "2026-12-07T03:00:00+00:00");
        assert_eq!(next("0 3 * * 1-5", "2026-12-11T12:00:00Z"), "2026-12-14T03:00:00+00:00", "not Saturday");
    }

    #[test]
    fn either_day_matches_when_both_are_restricted() {
        // The 1st of the month OR a Monday: the next is Monday 2026-12-07, not 1 February.
        assert_eq!(next("0 3 1 * 1", "2026-12-02T00:00:00Z"), "2026-12-07T03:00:00+00:00");
        // Only one restricted: it alone decides.
        assert_eq!(next("0 3 1 * *", "2026-12-02T00:00:00Z"), "2027-01-01T03:00:00+00:00");
        assert_eq!(next("0 3 */2 * 1", "2026-12-02T00:00:00Z"), "2026-12-03T03:00:00+00:00", "*/2 restricts");
    }

    #[test]
    fn seconds_shorthands_and_steps() {
        assert_eq!(next("*/4 * * * * *", "2026-12-01T10:00:01Z"), "2026-12-01T10:00:04+00:00");
        assert_eq!(next("@daily", "2026-12-01T10:00:00Z"), "2026-12-02T00:00:00+00:00");
        assert_eq!(next("5/20 * * * *", "2026-12-01T10:26:00Z"), "2026-12-01T10:45:00+00:00");
        assert_eq!(next("0 0 29 2 *", "2026-12-01T00:00:00Z"), "2028-02-29T00:00:00+00:00");
    }

    #[test]
    fn kubernetes_gets_numbers_and_sunday_as_zero() {
        let k = |s: &str| Schedule::parse("t", s).unwrap().to_kubernetes().unwrap();
        assert_eq!(k("0 3 * * 7"), "0 3 * * 0");
        assert_eq!(k("0 3 * * mon-fri"), "0 3 * * 1-5");
        assert_eq!(k("*/15 2 1,15 jan,jul *"), "0,15,30,45 2 1,15 1,7 *");
        assert_eq!(k("@weekly"), "0 0 * * 0");
        assert_eq!(k("0 0 3 * * *"), "0 3 * * *", "a zero seconds field is fine");
        assert!(Schedule::parse("t", "*/4 * * * * *").unwrap().to_kubernetes().is_err());
    }

    #[test]
    fn mistakes_are_named() {
        for (bad, says) in [
            ("0 3 * * 8", "outside 0-7"),
            ("0 24 * * *", "outside 0-23"),
            ("0 3 * * FUN", "not a number or a name"),
            ("0 3 5-1 * *", "backwards"),
            ("0 3 * *", "5 fields"),
            ("@reboot", "unknown shorthand"),
            ("0 3 H * *", "minute and hour fields only"),
        ] {
            let e = Schedule::parse("t", bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn h_resolves_in_minute_and_hour_only() {
        let s = Schedule::parse("orders", "H 3 * * THU").unwrap();
        assert!(s.text.ends_with(" 3 * * THU") && !s.text.starts_with('H'), "{}", s.text);
        assert_eq!(s, Schedule::parse("orders", "H 3 * * THU").unwrap(), "stable");
    }

    #[test]
    fn a_schedule_that_never_fires_is_refused() {
        for never in ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *"] {
            let e = Schedule::parse("t", never).unwrap_err().to_string();
            assert!(e.contains("never fires"), "{never}: {e}");
        }
        // 29 February fires, once in four years; the 31st fires where months have one.
        assert!(Schedule::parse("t", "0 0 29 2 *").is_ok());
        assert!(Schedule::parse("t", "0 0 31 2,3 *").is_ok());
    }
}
