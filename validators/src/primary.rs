//! Access to the production primary, protected: every session is read-only, carries a
//! `statement_timeout`, `lock_timeout` and `application_name = 'drcheck'`; the pool is
//! as large as the allowed concurrency; every query is counted and timed, so a run can
//! say how hard it leaned on the primary.

use crate::finding::Said;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgPool, postgres::PgConnection};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct PrimaryLimits {
    pub statement_timeout: Duration,
    pub connect_timeout: Duration,
    pub max_concurrency: u32,
}

impl Default for PrimaryLimits {
    fn default() -> Self {
        Self {
            statement_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            max_concurrency: 2,
        }
    }
}

/// Session settings that make row text (and so row hashes) identical on both sides.
pub fn canonical_session(opts: PgConnectOptions) -> PgConnectOptions {
    opts.options(CANONICAL_SETTINGS.iter().copied())
}

/// What [`canonical_session`] sets, on the primary and the restored copy alike.
pub const CANONICAL_SETTINGS: &[(&str, &str)] = &[
    ("TimeZone", "UTC"),
    ("DateStyle", "ISO, YMD"),
    ("IntervalStyle", "postgres"),
    ("extra_float_digits", "3"),
    ("bytea_output", "hex"),
    // money's text depends on the session's lc_monetary; bytea inside XML on xmlbinary.
    ("lc_monetary", "C"),
    ("xmlbinary", "base64"),
    // Names of objects (regclass and regproc values, view definitions, the schema
    // fingerprint) print the same on both sides only with the same search_path; and
    // the restored copy's own schemas must never be searched by drcheck's queries.
    ("search_path", "pg_catalog,pg_temp"),
    // A read that row-level security would filter raises an error instead of
    // silently returning fewer rows.
    ("row_security", "off"),
];

/// How many queries went to the primary, the longest, and how many it refused to
/// drcheck's role (SQLSTATE 42501, `insufficient_privilege`: a missing grant).
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryStats {
    pub count: u64,
    pub longest: Duration,
    pub refused: u64,
}

/// What a query's outcome says, in the primary's own terms, of whether it refused
/// drcheck's role.
pub trait Answer {
    fn refused(&self) -> bool;
}

impl<T> Answer for Result<T, sqlx::Error> {
    fn refused(&self) -> bool {
        matches!(self, Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42501"))
    }
}

#[derive(Clone)]
pub struct PrimaryDb {
    pub pool: PgPool,
    stats: Arc<Mutex<QueryStats>>,
    /// The primary's own `TimeZone` for this role and database (what its applications'
    /// sessions get; drcheck's are pinned to UTC): `timestamp` and `date` values — local
    /// times, zone-less — mean instants in it.
    pub time_zone: String,
}

impl PrimaryDb {
    /// Runs one query future against the primary, counting and timing it, and counting
    /// it refused when the primary said so (its SQLSTATE).
    pub async fn timed<T: Answer>(&self, query: impl std::future::Future<Output = T>) -> T {
        let started = Instant::now();
        let r = query.await;
        let took = started.elapsed();
        let mut s = self.stats.lock().unwrap();
        s.count += 1;
        s.longest = s.longest.max(took);
        s.refused += u64::from(r.refused());
        r
    }

    pub fn stats(&self) -> QueryStats {
        *self.stats.lock().unwrap()
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Connects to the primary. The error never contains the URL or its password.
/// Why the primary refused a connection, from what the connection itself says (its
/// SQLSTATE, the socket's error kind), never the message's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Nothing answered within the connect timeout.
    NoAnswer,
    /// The host refused the TCP connection (nothing listens there).
    ConnectionRefused,
    /// SQLSTATE 28P01: the password is wrong (or none was given).
    BadPassword,
    /// SQLSTATE 28000: pg_hba.conf, or the role, does not admit the connection.
    NotAdmitted,
    /// SQLSTATE 3D000: the database does not exist.
    NoDatabase,
    /// Anything else: said in its own words.
    Other,
}

/// A failed connection to the primary: why ([`Refusal`]) and in its own words (the URL's
/// password scrubbed).
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectError {
    pub refusal: Refusal,
    pub text: String,
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for ConnectError {}

fn refusal_of(e: &sqlx::Error) -> Refusal {
    match e {
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some("28P01") => Refusal::BadPassword,
            Some("28000") => Refusal::NotAdmitted,
            Some("3D000") => Refusal::NoDatabase,
            _ => Refusal::Other,
        },
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => Refusal::ConnectionRefused,
        _ => Refusal::Other,
    }
}

pub async fn connect(url: &str, limits: &PrimaryLimits) -> Result<PrimaryDb, ConnectError> {
    let opts = PgConnectOptions::from_str(url).map_err(|_| ConnectError {
        refusal: Refusal::Other,
        text: "the primary URL is not a valid postgres:// URL".to_string(),
    })?;
    let timeout_ms = limits.statement_timeout.as_millis().to_string();
    let opts = canonical_session(opts.application_name("drcheck")).options([
        ("default_transaction_read_only", "on"),
        ("statement_timeout", timeout_ms.as_str()),
        ("lock_timeout", "5000"),
    ]);
    // One probe connection first: the pool would keep retrying a refused connection
    // until its acquire timeout, and a dead primary should be known at once. It asks
    // the primary's own time zone (the pool's sessions are pinned to UTC).
    let mut probe = tokio::time::timeout(limits.connect_timeout, PgConnection::connect_with(&opts))
        .await
        .map_err(|_| ConnectError {
            refusal: Refusal::NoAnswer,
            text: format!("no answer within {:?}", limits.connect_timeout),
        })?
        .map_err(|e| ConnectError { refusal: refusal_of(&e), text: scrub(&e.said(), url) })?;
    let time_zone: String = sqlx::query_scalar(PRIMARY_TIME_ZONE)
        .fetch_one(&mut probe)
        .await
        .map_err(|e| ConnectError { refusal: refusal_of(&e), text: scrub(&e.said(), url) })?;
    let _ = probe.close().await;
    let pool = PgPoolOptions::new()
        .max_connections(limits.max_concurrency.max(1))
        .acquire_timeout(limits.connect_timeout)
        .connect_lazy_with(opts);
    Ok(PrimaryDb { pool, stats: Default::default(), time_zone })
}

/// The `TimeZone` the primary's sessions get (a driver's own startup setting aside —
/// sqlx sends UTC, so `current_setting` cannot tell): `ALTER ROLE … IN DATABASE`, `ALTER
/// ROLE`, `ALTER DATABASE` settings in that order, else the server's own, read as its
/// `log_timezone` (initdb writes both from the system's zone; `postgresql.conf` itself
/// is readable only by superusers).
const PRIMARY_TIME_ZONE: &str = "select coalesce(
    (select pg_catalog.substr(s, pg_catalog.strpos(s, '=') + 1)
       from pg_catalog.pg_db_role_setting d cross join lateral pg_catalog.unnest(d.setconfig) s
      where pg_catalog.lower(pg_catalog.split_part(s, '=', 1)) = 'timezone'
        and d.setdatabase in (0, (select oid from pg_catalog.pg_database where datname = pg_catalog.current_database()))
        and d.setrole in (0, (select oid from pg_catalog.pg_roles where rolname = current_user))
      order by d.setrole <> 0 desc, d.setdatabase <> 0 desc
      limit 1),
    pg_catalog.current_setting('log_timezone'))";

/// Removes the URL and its password from a message, in case a driver ever echoes them.
pub fn scrub(message: &str, url: &str) -> String {
    let mut m = message.replace(url, "<primary>");
    if let Ok(u) = url::Url::parse(url)
        && let Some(pw) = u.password()
        && !pw.is_empty()
    {
        m = m.replace(pw, "***");
    }
    m
}

#[cfg(test)]
mod tests {
    #[test]
    fn scrub_removes_password_and_url() {
        let url = "postgres://u:pw123@h/db";
        assert_eq!(super::scrub("bad pw123 at postgres://u:pw123@h/db", url), "bad *** at <primary>");
    }
}
