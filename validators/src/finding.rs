//! The ground floor of the validators: what a check says ([`Finding`], its [`Status`],
//! its measurements and the coverage rule that no `passed` covers nothing), how an error
//! is said ([`Said`]), and a table's name. Everything else stands on it.

use drcheck_config::quote_ident;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Passed,
    Failed,
    Skipped,
    Error,
}

impl std::str::FromStr for Status {
    type Err = drcheck_config::UnknownWord;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Status::Passed, Status::Failed, Status::Skipped, Status::Error]
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| drcheck_config::UnknownWord { what: "a status", word: s.into() })
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
            Status::Error => "error",
        }
    }
}

/// One verdict with a precise, human-readable detail (schema, table, expected, got).
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub name: String,
    pub status: Status,
    pub detail: String,
    /// Numbers a validator measured (e.g. `data_lag_seconds`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub measurements: BTreeMap<String, f64>,
    /// What the check could not prove, each with why and what would prove it: a
    /// difference that cannot be told apart from a change on the primary since the
    /// copy's point. Never counted as covered, never a failure.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inconclusive: Vec<String>,
    /// The check erred because the primary refused drcheck's role (it answered
    /// SQLSTATE 42501 while the check ran): a missing grant, which `comparisons =
    /// "best-effort"` turns into a skipped check. Set by [`run_all`] from the primary's
    /// own answers, never from the detail's words.
    #[serde(skip)]
    pub refused_by_primary: bool,
    /// Each table a comparison looked at, and whether it was decided in full (proven, or
    /// changed on the primary since the copy's point): what drcheck's record of tables
    /// proven within `prove_within` is kept from. Not part of the report.
    #[serde(skip)]
    pub per_table: Box<[(String, bool)]>,
}

impl Finding {
    /// The error a new install meets first on the primary, said with what to grant: for
    /// a check that erred while the primary refused drcheck's role (SQLSTATE 42501,
    /// counted by the primary's sessions — [`Finding::refused_by_primary`]).
    pub fn advise_grant(mut self) -> Self {
        if self.status == Status::Error && self.refused_by_primary {
            self.detail.push_str(
                " — drcheck's role on the primary may not read this: GRANT pg_read_all_data TO that role \
                 (PostgreSQL 14+), or SELECT on the tables it checks",
            );
        }
        self
    }

    pub fn new(name: &str, status: Status, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        Self {
            name: name.to_string(),
            status,
            detail: bounded(detail, MAX_DETAIL),
            measurements: BTreeMap::new(),
            inconclusive: Vec::new(),
            refused_by_primary: false,
            per_table: Box::default(),
        }
    }

    /// Records what could not be proven (see [`Finding::inconclusive`]): all of it counted,
    /// the first [`MAX_INCONCLUSIVE`] kept (each bounded like a detail).
    pub fn inconclusive(mut self, items: Vec<String>) -> Self {
        self.measurements.insert("inconclusive".into(), items.len() as f64);
        let more = items.len().saturating_sub(MAX_INCONCLUSIVE);
        self.inconclusive = items.into_iter().take(MAX_INCONCLUSIVE).map(|i| bounded(i, MAX_DETAIL / 16)).collect();
        if more > 0 {
            self.inconclusive.push(format!("and {more} more, counted, not listed"));
        }
        self
    }

    pub fn with(mut self, key: &str, value: f64) -> Self {
        self.measurements.insert(key.to_string(), value);
        self
    }

    /// Records what the check covered (`covered_tables`, `covered_rows`, …). A passed
    /// finding must say what it covered, and cover something: see [`enforce_coverage`].
    pub fn covered(self, what: &str, n: u64) -> Self {
        self.with(&format!("{COVERED}{what}"), n as f64)
    }
}

/// The most of a finding's detail that is kept (a backup controls much of what a detail
/// quotes: names, values, definitions); the rest is counted, never stored.
pub const MAX_DETAIL: usize = 64 * 1024;

/// The most inconclusive items a finding lists (all are counted).
pub const MAX_INCONCLUSIVE: usize = 1000;

/// `text` cut to at most `max` bytes (on a character boundary), saying how much was left out.
pub fn bounded(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let left = text.len() - cut;
    text.truncate(cut);
    text.push_str(&format!("… ({left} more bytes not kept)"));
    text
}

/// An error in its speaker's own words. For PostgreSQL: the message, its SQLSTATE, and
/// the server's detail and hint — never sqlx's `at line N` (a line of PostgreSQL's C
/// source, which users read as a line of their own config or SQL).
pub trait Said {
    fn said(&self) -> String;
}

impl Said for sqlx::Error {
    fn said(&self) -> String {
        let sqlx::Error::Database(db) = self else { return self.to_string() };
        let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().unwrap_or_default());
        if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
            if let Some(detail) = pg.detail() {
                text.push_str(&format!("; DETAIL: {detail}"));
            }
            if let Some(hint) = pg.hint() {
                text.push_str(&format!("; HINT: {hint}"));
            }
        }
        text
    }
}

/// An error as drcheck says it ([`Said`]), with the database's SQLSTATE when a database
/// raised it: what a branch decides on — never the words.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub sqlstate: Option<String>,
    pub text: String,
}

/// SQLSTATE 42501, insufficient_privilege: a grant is missing, or row-level security
/// would filter the read (drcheck's sessions set `row_security = off`).
pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
/// SQLSTATE 42883, undefined_function: e.g. no hash function for a column's type.
pub const UNDEFINED_FUNCTION: &str = "42883";

impl Failure {
    /// The failure with what was being done said first; its SQLSTATE kept.
    pub fn doing(self, what: impl std::fmt::Display) -> Failure {
        Failure { text: format!("{what}: {}", self.text), ..self }
    }

    /// Whether the database raised it with `sqlstate`.
    pub fn is(&self, sqlstate: &str) -> bool {
        self.sqlstate.as_deref() == Some(sqlstate)
    }
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Self {
        let sqlstate = match &e {
            sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
            _ => None,
        };
        Failure { sqlstate, text: e.said() }
    }
}

impl From<String> for Failure {
    fn from(text: String) -> Self {
        Failure { sqlstate: None, text }
    }
}

impl From<&str> for Failure {
    fn from(text: &str) -> Self {
        Failure { sqlstate: None, text: text.to_string() }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// What a failed finding adds of the tables it could not check at all: a failure must not
/// hide another table's error (a grant or a policy to fix), or it shows only once the
/// failure is gone.
pub(crate) fn also_could_not(what: &str, errors: &[String]) -> String {
    if errors.is_empty() {
        return String::new();
    }
    let shown: Vec<&str> = errors.iter().take(10).map(String::as_str).collect();
    let more = errors.len().saturating_sub(shown.len());
    let more = if more > 0 { format!(" and {more} more") } else { String::new() };
    format!("; and could not {what} {}: {}{more}", errors.len(), shown.join("; "))
}

/// The rows a comparison could not decide: neither proven nor a change on the primary
/// since the copy's point (a measurement; the run weighs it against `max_undecided`).
pub const UNDECIDED_ROWS: &str = "undecided_rows";
/// The tables with an undecided part (a measurement).
pub const UNDECIDED_TABLES: &str = "undecided_tables";

/// Measurements named like this say what a finding covered.
pub const COVERED: &str = "covered_";

/// `passed` means "checked, and it held": a passed finding that covered nothing (every
/// `covered_*` is 0) or did not say what it covered is `skipped` instead, with why. It
/// is applied to every finding by [`run_all`], so no validator can pass over nothing.
pub fn enforce_coverage(mut f: Finding) -> Finding {
    f.detail = bounded(std::mem::take(&mut f.detail), MAX_DETAIL);
    if f.status != Status::Passed {
        return f;
    }
    let covered: Vec<(&String, &f64)> = f.measurements.iter().filter(|(k, _)| k.starts_with(COVERED)).collect();
    if covered.is_empty() {
        f.status = Status::Skipped;
        f.detail = format!("{} — not counted as passed: the check did not say what it covered", f.detail);
    } else if covered.iter().all(|(_, v)| **v <= 0.0) {
        let what: Vec<String> = covered.iter().map(|(k, _)| format!("0 {}", &k[COVERED.len()..])).collect();
        f.status = Status::Skipped;
        f.detail = format!("covered nothing ({}): {}", what.join(", "), f.detail);
    }
    f
}

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[u]) }
}

/// Whether an object of `schema` (a table's, when `table` is given) is in `scope`
/// (schemas, or `schema.table` entries); an empty scope holds everything.
pub fn in_scope(scope: &[String], schema: &str, table: Option<&str>) -> bool {
    scope.is_empty()
        || scope.iter().any(|e| match e.split_once('.') {
            None => e == schema,
            Some((s, t)) => s == schema && table.is_none_or(|n| n == t),
        })
}

/// A "schema"."table" name, quoted for SQL and readable for people.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableName {
    pub schema: String,
    pub name: String,
}

impl TableName {
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

/// At most `n` items joined, then "and N more".
pub fn some_of(items: &[String], n: usize) -> String {
    let mut s: Vec<String> = items.iter().take(n).cloned().collect();
    if items.len() > n {
        s.push(format!("and {} more", items.len() - n));
    }
    s.join("; ")
}

#[cfg(test)]
mod coverage_tests {
    use super::*;

    /// Issue 26: a missing grant on the primary says what to grant.
    #[test]
    fn a_missing_grant_names_the_grant() {
        let refused = |status| {
            let mut f = Finding::new("row_counts", status, "could not count: permission denied for table orders");
            f.refused_by_primary = true;
            f.advise_grant()
        };
        assert!(refused(Status::Error).detail.contains("GRANT pg_read_all_data"));
        assert!(!refused(Status::Failed).detail.contains("GRANT"), "only errors");
        // Decided by the primary's refusal, not the words: the same words without one.
        let f = Finding::new("row_counts", Status::Error, "permission denied for table orders").advise_grant();
        assert!(!f.detail.contains("GRANT"), "{}", f.detail);
    }

    #[test]
    fn a_pass_over_nothing_is_not_a_pass() {
        let f = enforce_coverage(Finding::new("row_counts", Status::Passed, "0 tables match").covered("tables", 0));
        assert_eq!(f.status, Status::Skipped);
        assert!(f.detail.starts_with("covered nothing (0 tables)"), "{}", f.detail);
        let f = enforce_coverage(Finding::new("x", Status::Passed, "fine"));
        assert_eq!(f.status, Status::Skipped, "a pass that does not say what it covered");
        let f =
            enforce_coverage(Finding::new("checksums", Status::Passed, "ok").covered("tables", 3).covered("rows", 0));
        assert_eq!(f.status, Status::Passed, "three empty tables were still compared");
        let f = enforce_coverage(Finding::new("schema", Status::Failed, "differs"));
        assert_eq!(f.status, Status::Failed);
    }
}
