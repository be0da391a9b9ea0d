//! drcheck's validators: checks that turn "the restore exited 0" into "this backup
//! holds our data, intact". Each [`Validator`] looks at the restored copy and, where it
//! compares, at the primary, and returns [`Finding`]s: `passed`, `failed`, `skipped`
//! (could not run — never counted as passed) or `error`, each with a precise detail.
//!
//! Self-checks (sandbox only): `amcheck`, `full_read`, `sequences`, `indexes`.
//! Comparisons with the primary: `schema`, `row_counts`, `checksums`, `large_objects`
//! (which also checks the copy's references to them), `freshness`, the user's
//! `custom` SQL checks, and `point_in_time` (where replay stopped, by the primary's
//! heartbeat).
//!
//! Validators never know where a backup came from and never see storage credentials.
//! The primary is reached only through [`primary::PrimaryDb`]: read-only sessions with a
//! `statement_timeout`, a pool as large as the allowed concurrency, every query counted
//! and timed. Every identifier reaching SQL is quoted with `quote_ident`.

pub mod asof;
pub mod catalog;
pub mod databases;
pub mod ddl;
pub mod guard;
pub mod primary;

mod amcheck;
pub mod checksums;
pub use checksums::record_hash_sql;
mod custom;
mod freshness;
mod full_read;
mod indexes;
mod large_objects;
mod point_in_time;
mod row_counts;
mod schema;
mod sequences;

use async_trait::async_trait;
use drcheck_config::{ValidatorsConfig, quote_ident};
use primary::PrimaryDb;
use serde::Serialize;
use sqlx::PgPool;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Passed,
    Failed,
    Skipped,
    Error,
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
    pub fn new(name: &str, status: Status, detail: impl Into<String>) -> Self {
        let mut detail = detail.into();
        // The error a new install meets first on the primary: say what to grant.
        if status == Status::Error && detail.contains("permission denied for") && !detail.contains("GRANT") {
            detail.push_str(
                " — drcheck's role on the primary may not read this: GRANT pg_read_all_data TO that role \
                 (PostgreSQL 14+), or SELECT on the tables it checks",
            );
        }
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

/// The primary, if it could be reached; otherwise why not.
pub enum Primary {
    Available(PrimaryDb),
    Unavailable(String),
}

/// Builds the command for a client tool (its path given): the binary passes one that
/// runs the tool inside the sandbox's containment, since the tools read restored data.
pub type ToolLauncher = std::sync::Arc<dyn Fn(&std::path::Path) -> std::process::Command + Send + Sync>;

/// How to reach the restored database with command-line tools (pg_amcheck, pg_dump).
#[derive(Clone)]
pub struct RestoredAccess {
    pub socket_dir: PathBuf,
    pub port: u16,
    pub database: String,
    pub bindir: PathBuf,
    /// libpq's password file for the sandbox (its password is random per run).
    pub passfile: Option<PathBuf>,
    /// How tools are started; `None` runs them directly.
    pub launcher: Option<ToolLauncher>,
}

impl std::fmt::Debug for RestoredAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestoredAccess")
            .field("socket_dir", &self.socket_dir)
            .field("database", &self.database)
            .field("contained", &self.launcher.is_some())
            .finish()
    }
}

/// What validators get to look at.
pub struct Context {
    /// The restored database in the sandbox.
    pub restored: PgPool,
    pub access: RestoredAccess,
    pub primary: Primary,
    /// When the backup's data is consistent as of (or the last replayed commit): rows
    /// written later are not expected in it. `None` when nothing records it.
    pub backup_time: Option<SystemTime>,
    pub rpo: Duration,
    /// Allowed relative difference of row counts (0.001 = 0.1%) where no `as_of` applies.
    pub row_count_tolerance: f64,
    pub settings: ValidatorsConfig,
    /// A base backup (a whole cluster) rather than a logical dump: unlogged tables'
    /// data is not in it, by design.
    pub physical: bool,
    /// The primary's heartbeat table (`[target.heartbeat]`), for `point_in_time`.
    pub heartbeat: Option<drcheck_config::HeartbeatConfig>,
    /// The moment replay was asked to stop at (a time recovery target), if any.
    pub target_time: Option<SystemTime>,
    /// How changes on the primary since the copy's point are told ([`asof::Since`]).
    pub since: asof::Since,
    /// drcheck's journal of the primary's horizon: its insert counters from before T
    /// and a horizon old enough for the counters to hold what is below it.
    pub journal: asof::Journal,
    /// Comparisons within `primary_read_budget`: this run compares one slice of every
    /// table's ranges; `None` compares them all.
    pub rotation: Option<Rotation>,
    /// The copy is a follower, validated every day: with a rotation, `full_read` reads the
    /// same slice of every table's pages (every page within the rotation's runs) rather
    /// than all of them each time.
    pub on_follower: bool,
}

/// Which part of each table this run compares with the primary, so that what one run
/// reads from it stays within `primary_read_budget`: the ranges whose index is `slice`
/// modulo `slices`; the slices in turn cover every range within `slices` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotation {
    pub slice: u32,
    pub slices: u32,
    /// The byte budget it keeps to (for the detail), and the slice compared longest
    /// ago: when (RFC 3339), or `None` if some slice never was.
    pub budget: u64,
    pub oldest: Option<String>,
    /// Tables the primary holds more of than one slice's share: counted on the copy
    /// only (`row_counts`), never by reading them whole on the primary.
    pub share_bytes: u64,
    /// What the caller knows of the rotation's pace (its schedule against
    /// `prove_within`), said with it.
    pub note: Option<String>,
    /// The cycle's secret seed (drawn at random when the cycle starts, kept in
    /// drcheck's history): which slice a range falls in follows from it, so a backup
    /// cannot place its rows in a slice this run does not compare.
    pub seed: u64,
    /// A table compared whole this run beside the slice (`schema.name`): the canary's
    /// changed table, which must be judged whichever slice its row falls in. Never a
    /// backup's choice: only drcheck's canary sets it, on its own runs.
    pub whole: Option<String>,
}

/// splitmix64's finalizer: a well-mixed 64-bit hash step.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rotation {
    /// Whether range `index` of `table` is this run's to compare: each range's slice is
    /// a hash of the cycle's seed, the table's name and the range's index — spread over
    /// the slices, and unknowable without the seed.
    pub fn takes(&self, table: &str, index: usize) -> bool {
        if self.slices <= 1 || self.whole.as_deref() == Some(table) {
            return true;
        }
        let name = table.bytes().fold(mix(self.seed), |h, b| mix(h ^ u64::from(b)));
        mix(name ^ index as u64) % self.slices as u64 == self.slice as u64
    }

    /// The rotation said in a finding.
    pub fn describe(&self) -> String {
        format!(
            "primary_read_budget {}: slice {} of {} this run (every range compared within {} runs; the oldest slice {})",
            human_bytes(self.budget),
            self.slice + 1,
            self.slices,
            self.slices,
            match &self.oldest {
                Some(at) => format!("last compared {at}"),
                None => "not compared yet".into(),
            }
        ) + &self.whole.as_ref().map(|t| format!("; {t} whole (the canary's changed table)")).unwrap_or_default()
            + &self.note.as_ref().map(|n| format!("; {n}")).unwrap_or_default()
    }
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

impl Context {
    /// The primary, or a `skipped` finding saying why not.
    pub fn primary_or_skip(&self, name: &str) -> Result<&PrimaryDb, Finding> {
        match &self.primary {
            Primary::Available(p) => Ok(p),
            Primary::Unavailable(why) => {
                Err(Finding::new(name, Status::Skipped, format!("primary unavailable: {why}")))
            }
        }
    }

    /// The primary and the tables both sides have (minus exclusions, within the dump's
    /// scope, and — for a base backup — minus unlogged tables), with a note of what was
    /// left out; or the finding that says why the comparison cannot run.
    pub(crate) async fn common_tables(
        &self,
        name: &str,
    ) -> Result<(&PrimaryDb, Vec<TableName>, Option<String>), Finding> {
        let primary = self.primary_or_skip(name)?;
        match (primary.timed(catalog::tables(&primary.pool)).await, catalog::tables(&self.restored).await) {
            (Ok(p), Ok(r)) => {
                let restored: std::collections::BTreeSet<TableName> = r.into_iter().collect();
                let unlogged: std::collections::BTreeSet<TableName> = if self.physical {
                    catalog::unlogged_tables(&self.restored)
                        .await
                        .map_err(|e| {
                            Finding::new(name, Status::Error, format!("listing unlogged tables: {}", e.said()))
                        })?
                        .into_iter()
                        .collect()
                } else {
                    Default::default()
                };
                let tables = p
                    .into_iter()
                    .filter(|t| restored.contains(t) && !self.excluded(t) && self.in_scope(t) && !unlogged.contains(t))
                    .collect();
                let note = (!unlogged.is_empty()).then(|| {
                    let list: Vec<String> = unlogged.iter().map(|t| t.to_string()).collect();
                    format!(
                        "{} unlogged tables not covered (a base backup holds no unlogged data, by design): {}",
                        list.len(),
                        some_of(&list, 10)
                    )
                });
                Ok((primary, tables, note))
            }
            (Err(e), _) | (_, Err(e)) => {
                Err(Finding::new(name, Status::Error, format!("listing tables: {}", e.said())))
            }
        }
    }

    /// The cut-off for the rows of `t` by its `as_of` column `col`; `None` when there
    /// is none. A `timestamp` or `date` column holds local times: they are read in
    /// the primary's own `TimeZone` (drcheck's sessions are UTC), the same on both sides.
    pub(crate) async fn as_of_cut(&self, t: &TableName, col: &str) -> Result<Option<Cut>, sqlx::Error> {
        let column = quote_ident(col);
        let zoneless = catalog::zoneless_column(&self.restored, t, col).await?;
        if let Some(at) = self.backup_time {
            let value = humantime::format_rfc3339_micros(at).to_string();
            let zone = zoneless.then(|| self.primary_zone().to_string());
            return Ok(Some(Cut { column, value, zone, cast: "pg_catalog.timestamptz", less: None }));
        }
        // No time of its own: the newest value the copy holds, compared as it is stored.
        let Some(value) = self.cutoff(t, col).await? else { return Ok(None) };
        let cast = if zoneless { "pg_catalog.timestamp" } else { "pg_catalog.timestamptz" };
        Ok(Some(Cut { column, value, zone: None, cast, less: None }))
    }

    /// Where nothing tells the primary's changes since the copy's point: `t`'s `as_of`
    /// cut-off less `as_of_grace` (younger rows may have been in flight), if it has one.
    /// `None` where changes can be told (the cut is then not needed) or `t` has no `as_of`.
    pub(crate) async fn settled_cut(&self, t: &TableName) -> Result<Option<Cut>, sqlx::Error> {
        if self.since.known() {
            return Ok(None);
        }
        match self.as_of(t) {
            Some(col) => Ok(self.as_of_cut(t, col).await?.map(|c| c.less(self.settings.as_of_grace))),
            None => Ok(None),
        }
    }

    /// The primary's own time zone (UTC when there is no primary to ask).
    pub(crate) fn primary_zone(&self) -> &str {
        match &self.primary {
            Primary::Available(p) => &p.time_zone,
            Primary::Unavailable(_) => "UTC",
        }
    }

    /// Whether `t` is in the dump's declared scope (`[target] dump_scope`; everything
    /// when none is declared).
    pub fn in_scope(&self, t: &TableName) -> bool {
        in_scope(&self.settings.dump_scope, &t.schema, Some(&t.name))
    }

    /// The `as_of` column configured for a table.
    pub fn as_of(&self, t: &TableName) -> Option<&str> {
        self.settings.as_of.iter().find(|(s, n, _)| *s == t.schema && *n == t.name).map(|(_, _, c)| c.as_str())
    }

    pub fn excluded(&self, t: &TableName) -> bool {
        let full = t.to_string();
        self.settings.exclude.iter().any(|e| *e == full || (!e.contains('.') && t.schema == "public" && *e == t.name))
    }

    /// The cut-off for `as_of` column `col` of `t`, as text bound as `$n::timestamptz`:
    /// the backup's own time; when nothing records it, the newest value the copy holds
    /// (rows up to it must all be there). `None` when neither is known (an empty copy
    /// of a backup without a time).
    pub async fn cutoff(&self, t: &TableName, col: &str) -> Result<Option<String>, sqlx::Error> {
        if let Some(at) = self.backup_time {
            return Ok(Some(humantime::format_rfc3339_micros(at).to_string()));
        }
        let sql = format!("select pg_catalog.max({})::pg_catalog.text from {}", quote_ident(col), t.quoted());
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(&self.restored).await
    }
}

/// What a failed query on the primary says, with the policy to blame when row-level
/// security refused it (drcheck's sessions set `row_security = off`, so a read that a
/// policy would filter raises instead of silently returning fewer rows).
pub(crate) async fn primary_error(primary: &PrimaryDb, t: &TableName, e: &sqlx::Error) -> String {
    explain_primary_error(primary, t, &e.said()).await
}

/// [`primary_error`] of an error's text.
pub(crate) async fn explain_primary_error(primary: &PrimaryDb, t: &TableName, message: &str) -> String {
    if !message.contains("row-level security") {
        return message.to_string();
    }
    let policies: Vec<String> = primary
        .timed(
            sqlx::query_scalar("select policyname::text from pg_catalog.pg_policies where schemaname = $1 and tablename = $2 order by 1")
                .bind(&t.schema)
                .bind(&t.name)
                .fetch_all(&primary.pool),
        )
        .await
        .unwrap_or_default();
    format!(
        "row-level security on the primary hides rows of {t} from drcheck's role (policies: {}); \
         the comparison would be of a filtered table. Give the verifier role BYPASSRLS \
         (ALTER ROLE … BYPASSRLS), or exclude the table",
        if policies.is_empty() { "none listed".to_string() } else { policies.join(", ") }
    )
}

/// An `as_of` cut-off: rows whose column is at or before it.
#[derive(Debug, Clone)]
pub(crate) struct Cut {
    /// The column, quoted.
    column: String,
    /// The cut-off, as text.
    value: String,
    /// For a zone-less column (`timestamp`, `date`): the zone its values are local to.
    zone: Option<String>,
    /// What the value is cast to.
    cast: &'static str,
    /// A band before the cut-off left out too (`as_of_grace`), as an interval.
    less: Option<String>,
}

impl Cut {
    /// The SQL condition, its parameters numbered from `$first`.
    pub(crate) fn condition(&self, first: usize) -> String {
        let (col, cast) = (&self.column, self.cast);
        let mut n = first + 1;
        let mut value = format!("${first}::{cast}");
        if self.less.is_some() {
            value = format!("({value} - ${n}::pg_catalog.interval)");
            n += 1;
        }
        match &self.zone {
            Some(_) => format!("{col} <= ({value} at time zone ${n}::pg_catalog.text)"),
            None => format!("{col} <= {value}"),
        }
    }

    /// The same cut-off, `grace` earlier.
    pub(crate) fn less(mut self, grace: Duration) -> Cut {
        if !grace.is_zero() {
            self.less = Some(format!("{} seconds", grace.as_secs_f64()));
        }
        self
    }

    #[cfg(test)]
    pub(crate) fn test(column: &str, value: &str, zone: Option<&str>) -> Cut {
        Cut {
            column: column.into(),
            value: value.into(),
            zone: zone.map(Into::into),
            cast: "pg_catalog.timestamptz",
            less: None,
        }
    }

    /// What [`Cut::condition`] binds, in order.
    pub(crate) fn binds(&self) -> Vec<String> {
        std::iter::once(self.value.clone()).chain(self.less.clone()).chain(self.zone.clone()).collect()
    }
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

#[async_trait]
pub trait Validator: Send + Sync {
    fn name(&self) -> &'static str;
    /// Reads only the restored copy (never the primary): runs beside the comparisons.
    fn self_check(&self) -> bool {
        false
    }
    async fn validate(&self, cx: &Context) -> Vec<Finding>;
}

/// Every validator, in the order they run (self-checks first).
fn all() -> Vec<Box<dyn Validator>> {
    vec![
        Box::new(amcheck::Amcheck),
        Box::new(full_read::FullRead),
        Box::new(sequences::Sequences),
        Box::new(indexes::Indexes),
        Box::new(schema::Schema),
        Box::new(row_counts::RowCounts),
        Box::new(checksums::Checksums),
        Box::new(large_objects::LargeObjects),
        Box::new(freshness::Freshness),
        Box::new(custom::Custom),
        Box::new(point_in_time::PointInTime),
    ]
}

/// The validators `enabled` names, in their running order.
pub fn selected(enabled: &[String]) -> Vec<Box<dyn Validator>> {
    all().into_iter().filter(|v| enabled.iter().any(|e| e == v.name())).collect()
}

/// When the validate phase must end (`validators.phase_timeout` from its start), and
/// what to say of a validator it stops.
#[derive(Debug, Clone, Copy)]
pub struct PhaseDeadline {
    pub at: tokio::time::Instant,
    pub phase_timeout: Duration,
}

impl PhaseDeadline {
    pub fn from_now(phase_timeout: Duration) -> Self {
        Self { at: tokio::time::Instant::now() + phase_timeout, phase_timeout }
    }

    fn stopped(&self) -> String {
        format!(
            "stopped at the validate phase's deadline (validators.phase_timeout = {})",
            humantime::format_duration(Duration::from_secs(self.phase_timeout.as_secs()))
        )
    }
}

/// Runs every validator, each under `timeout` and all before `deadline`; one failing or
/// erroring never stops the others.
pub async fn run_all(
    validators: &[Box<dyn Validator>],
    cx: &Context,
    timeout: Duration,
    deadline: PhaseDeadline,
) -> Vec<Finding> {
    // Self-checks (sandbox only) each run on their own, beside the comparisons (sandbox
    // and primary), which run one at a time: the work overlaps where cores allow, and
    // the primary sees no more than before. Findings keep the validators' order.
    let (own, compare): (Vec<_>, Vec<_>) =
        validators.iter().map(|v| v.as_ref()).enumerate().partition(|(_, v)| v.self_check());
    let own = futures::future::join_all(own.into_iter().map(|v| run_group(vec![v], cx, timeout, deadline)));
    let (own, mut all) = tokio::join!(own, run_group(compare, cx, timeout, deadline));
    all.extend(own.into_iter().flatten());
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().flat_map(|(_, f)| f).collect()
}

async fn run_group(
    validators: Vec<(usize, &dyn Validator)>,
    cx: &Context,
    timeout: Duration,
    deadline: PhaseDeadline,
) -> Vec<(usize, Vec<Finding>)> {
    let mut out = Vec::with_capacity(validators.len());
    // What the primary refused so far: a check during which it refused more erred for
    // want of a grant (the comparisons run one at a time, so the count is theirs).
    let refused = || match &cx.primary {
        Primary::Available(p) => p.stats().refused,
        Primary::Unavailable(_) => 0,
    };
    for (i, v) in validators {
        let refused_before = refused();
        let started = std::time::Instant::now();
        let left = deadline.at.saturating_duration_since(tokio::time::Instant::now());
        let findings = if left.is_zero() {
            vec![Finding::new(v.name(), Status::Error, format!("not run: {}", deadline.stopped()))]
        } else {
            match tokio::time::timeout(timeout.min(left), v.validate(cx)).await {
                Ok(f) => f,
                Err(_) if left < timeout => vec![Finding::new(v.name(), Status::Error, deadline.stopped())],
                Err(_) => vec![Finding::new(v.name(), Status::Error, format!("timed out after {timeout:?}"))],
            }
        };
        // Logged as recorded: after coverage is enforced (a pass over nothing is skipped).
        let was_refused = refused() > refused_before;
        let findings: Vec<Finding> = findings
            .into_iter()
            .map(|mut f| {
                f.refused_by_primary = was_refused && f.status == Status::Error;
                enforce_coverage(f).with("seconds", (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0)
            })
            .collect();
        for f in &findings {
            tracing::info!(validator = %f.name, status = f.status.as_str(), seconds = started.elapsed().as_secs_f64(), "validator finished");
        }
        out.push((i, findings));
    }
    out
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
        let f = Finding::new("row_counts", Status::Error, "could not count: permission denied for table orders");
        assert!(f.detail.contains("GRANT pg_read_all_data"), "{}", f.detail);
        let f = Finding::new("row_counts", Status::Failed, "permission denied for table orders");
        assert!(!f.detail.contains("GRANT"), "only errors: {}", f.detail);
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

#[cfg(test)]
mod rotation_tests {
    use super::Rotation;

    /// Over `slices` runs every range of every table is compared exactly once.
    #[test]
    fn every_range_of_every_table_falls_in_exactly_one_slice() {
        for slices in [2u32, 3, 7] {
            for table in ["public.orders", "public.items", "s.\"odd name\""] {
                for index in 0..40 {
                    let runs = (0..slices)
                        .filter(|&slice| {
                            Rotation {
                                slice,
                                slices,
                                budget: 1,
                                oldest: None,
                                share_bytes: 1,
                                note: None,
                                seed: 7,
                                whole: None,
                            }
                            .takes(table, index)
                        })
                        .count();
                    assert_eq!(runs, 1, "{table} range {index} of {slices} slices");
                }
            }
        }
        let one =
            Rotation { slice: 0, slices: 1, budget: 1, oldest: None, share_bytes: 1, note: None, seed: 7, whole: None };
        assert!(one.takes("t", 5), "a single slice takes everything");
    }

    /// Issue 46: the slices were a function of the table's name alone — a backup could
    /// put its tampered rows in a slice the next run would not compare. With another
    /// seed, ranges fall in other slices.
    #[test]
    fn which_slice_a_range_falls_in_follows_the_cycles_seed() {
        let of = |seed: u64, index: usize| {
            (0..8u32)
                .find(|&slice| {
                    Rotation {
                        slice,
                        slices: 8,
                        budget: 1,
                        oldest: None,
                        share_bytes: 1,
                        note: None,
                        seed,
                        whole: None,
                    }
                    .takes("public.orders", index)
                })
                .unwrap()
        };
        let a: Vec<u32> = (0..64).map(|i| of(1, i)).collect();
        let b: Vec<u32> = (0..64).map(|i| of(2, i)).collect();
        assert_ne!(a, b);
        let moved = a.iter().zip(&b).filter(|(x, y)| x != y).count();
        assert!(moved > 40, "most ranges move with the seed: {moved} of 64");
        for slice in 0..8 {
            assert!(a.iter().filter(|s| **s == slice).count() >= 2, "spread over every slice: {a:?}");
        }
    }
}
