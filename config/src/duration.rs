//! Durations as users write them: `90s`, `30m`, `26h`, `1h 30m`, `2d`.

use crate::error::ValueError;
use std::time::Duration;

/// Parses a human duration; the error says what was expected.
pub fn parse_duration(s: &str) -> Result<Duration, ValueError> {
    const EXPECTED: &str = "a duration like \"90s\", \"30m\" or \"26h\"";
    let t = s.trim();
    if t.is_empty() {
        return Err(ValueError::expected(s, EXPECTED));
    }
    // Months are never a unit here: `M` is one letter from minutes (`15M` read as 15
    // months is a deadline of a year), and a month has no fixed length.
    for unit in t.split(|c: char| !c.is_ascii_alphabetic()).filter(|u| !u.is_empty()) {
        if unit == "M" || unit.to_ascii_lowercase().starts_with("month") {
            return Err(ValueError::refused(
                s,
                "months are not a unit drcheck takes (\"M\" is months in that notation, not minutes): \
                 write minutes as \"m\" (\"15m\") or days as \"d\" (\"90d\")",
            ));
        }
    }
    let d = humantime::parse_duration(t).map_err(|e| ValueError::refused(s, format!("expected {EXPECTED} ({e})")))?;
    if d.is_zero() {
        return Err(ValueError::expected(s, "a duration greater than zero"));
    }
    Ok(d)
}

/// Formats a duration the way users write them (`30m`, `1h 30m`).
pub fn format_duration(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("26h").unwrap(), Duration::from_secs(26 * 3600));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
    }

    #[test]
    fn rejects_garbage_zero_and_missing_unit() {
        assert!(parse_duration("soon").unwrap_err().to_string().contains("\"soon\""));
        assert!(parse_duration("0s").unwrap_err().to_string().contains("greater than zero"));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("").is_err());
    }

    /// Issue 34: `rto = "15M"` was 15 months, silently.
    #[test]
    fn months_are_refused_saying_what_to_write() {
        for s in ["15M", "1M 2d", "3months", "1 month"] {
            let e = parse_duration(s).unwrap_err().to_string();
            assert!(e.contains("months are not a unit") && e.contains("\"15m\""), "{s}: {e}");
        }
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("15min").unwrap(), Duration::from_secs(900));
    }

    #[test]
    fn formats_round_trip() {
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h 30m");
    }
}
