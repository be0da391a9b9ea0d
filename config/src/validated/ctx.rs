//! The validation context: the file, its text (for line numbers) and the environment,
//! and the checks every key shares (strings with `${ENV}`, durations, whole numbers in a
//! range, numbers with a floor, sizes, percentages), each error naming key and line.

use crate::duration::parse_duration;
use crate::error::{ConfigError, ValueError};
use crate::interpolate::interpolate;
use std::path::Path;
use std::time::Duration;
use toml::Spanned;

/// Carries what every error needs: the file, its text (for line numbers) and the env.
pub(super) struct Ctx<'a> {
    pub(super) path: &'a Path,
    pub(super) text: &'a str,
    pub(super) env: &'a dyn Fn(&str) -> Option<String>,
    /// Whether the files the config names are on this machine (a run), or where the
    /// config will be deployed (`load_shape`: `deploy kubernetes`, `drill check`).
    pub(super) here: bool,
}

impl Ctx<'_> {
    fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())].matches('\n').count() + 1
    }

    pub(super) fn err(
        &self,
        key: &str,
        span: Option<std::ops::Range<usize>>,
        message: impl std::fmt::Display,
    ) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            line: span.map(|s| self.line_of(s.start)),
            key: key.to_string(),
            message: message.to_string(),
        }
    }

    /// Interpolates `${ENV}` in a spanned string value.
    pub(super) fn string(&self, key: &str, v: &Spanned<String>) -> Result<String, ConfigError> {
        interpolate(v.get_ref(), self.env).map_err(|m| self.err(key, Some(v.span()), m))
    }

    pub(super) fn opt_string(&self, key: &str, v: &Option<Spanned<String>>) -> Result<Option<String>, ConfigError> {
        v.as_ref().map(|v| self.string(key, v)).transpose()
    }

    pub(super) fn duration(&self, key: &str, v: &Spanned<String>) -> Result<Duration, ConfigError> {
        parse_duration(v.get_ref()).map_err(|m| self.err(key, Some(v.span()), m))
    }

    /// An optional whole number in `lo..=hi` (the default when absent); out of range is
    /// an error naming the key, the line and the range.
    pub(super) fn whole_in(
        &self,
        key: &str,
        v: Option<&Spanned<i64>>,
        default: i64,
        lo: i64,
        hi: i64,
    ) -> Result<i64, ConfigError> {
        match v {
            None => Ok(default),
            Some(n) if (lo..=hi).contains(n.get_ref()) => Ok(*n.get_ref()),
            Some(n) => Err(self.err(key, Some(n.span()), format!("expected a whole number from {lo} to {hi}"))),
        }
    }

    /// An optional finite number of at least `min` (the default when absent).
    pub(super) fn number_at_least(
        &self,
        key: &str,
        v: Option<&Spanned<f64>>,
        default: f64,
        min: f64,
    ) -> Result<f64, ConfigError> {
        match v {
            None => Ok(default),
            Some(f) if *f.get_ref() >= min && f.get_ref().is_finite() => Ok(*f.get_ref()),
            Some(f) => Err(self.err(key, Some(f.span()), format!("expected a number ≥ {min}, got {}", f.get_ref()))),
        }
    }
}

/// `"8MiB"` → 8388608. Units: B, KiB, MiB, GiB (and KB, MB, GB as powers of 1000).
pub(super) fn parse_size(s: &str) -> Result<u64, ValueError> {
    let expected = || ValueError::expected(s, "a size like \"8MiB\"");
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| expected())?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(expected()),
    };
    n.checked_mul(mult).ok_or_else(expected)
}

/// `"0.1%"` → 0.001.
pub(super) fn parse_percent(s: &str) -> Result<f64, ValueError> {
    let expected = || ValueError::expected(s, "a percentage like \"0.1%\"");
    let n: f64 = s.trim().strip_suffix('%').ok_or_else(expected)?.trim().parse().map_err(|_| expected())?;
    if !(0.0..=100.0).contains(&n) {
        return Err(ValueError::expected(s, "a percentage between 0% and 100%"));
    }
    Ok(n / 100.0)
}
