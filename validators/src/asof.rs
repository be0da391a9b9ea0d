//! As of the copy's point T: which of the primary's rows changed since — the primary
//! never stops changing, and a comparison with it is only fair as of T.
//!
//! **What changed since T is decided from the primary and drcheck's own records only —
//! never from anything the backup holds** (its counts, keys, horizon, commit log or DDL
//! log). [`Since`] is how a run tells a row version the primary wrote after T from one
//! that was there, unchanged, at T:
//!
//! - **By transaction ids of this cluster** (a physical copy of the primary's own
//!   cluster): the copy knows its horizon — `pg_snapshot_xmax` right after recovery, read
//!   before drcheck wrote to it — and which of the transactions below it did not commit at
//!   T (in flight then, aborted in the copy: `pg_xact_status`, over the last
//!   [`XID_WINDOW`] ids). On the primary a row version is *new* when its `xmin` is at or
//!   past the horizon or one of those. The copy's own claims are held to the primary's:
//!   a horizon ahead of the primary's is the backup's defect ([`Established::provenance`],
//!   failed), never a reason to judge by anything weaker; and an id the journal shows had
//!   completed before T is committed whatever the copy's commit log says.
//! - **By commit time** (the primary has `track_commit_timestamp`): new when its `xmin`
//!   committed at or after T. A version the primary has no commit time for (committed
//!   before the setting was turned on, or too long ago) is decided by the journal.
//! - **By drcheck's journal of the primary's horizon** ([`Journal`]): every run, the
//!   daemon every `journal_interval` and the heartbeat with each beat record the
//!   primary's `pg_snapshot_xmin(pg_current_snapshot())` with the primary's clock — read
//!   only, no transaction id consumed. For T, the newest sample taken at or before
//!   T − `as_of_grace` gives a horizon H: every transaction below H had ended by then, so
//!   a visible row version whose `xmin` is below H existed, unchanged, at T. Versions at
//!   or past H are counted as changed since (the journal's resolution).
//! - **Unknown** (no journal sample before T, no commit times): `as_of` columns still cut
//!   exactly; rows that match are proven; other differences are undecided.
//!
//! Rows unchanged since T must match exactly; rows changed since are counted, never a
//! failure; what cannot be decided is *undecided* — never a pass (the run's share of it
//! is bounded by `[target] max_undecided`).

use crate::finding::{Failure, Finding, Said, Status, TableName};
use crate::primary::PrimaryDb;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How many transaction ids below the copy's horizon are asked whether they committed
/// at T (about a second of `pg_xact_status` calls). A transaction in flight at T that
/// began further back is still found row by row (the checksums' drill-down asks the
/// copy about each id it meets).
pub const XID_WINDOW: u64 = 1 << 21;

/// The most not-committed ids kept from the window; past it the window is cut short.
const MAX_ABORTED: usize = 200_000;

/// Modulo for 32-bit transaction ids.
const XID_SPACE: i64 = 1 << 32;

/// The finding that says a physical copy is not of the primary's history.
pub const PROVENANCE: &str = "provenance";

/// What the copy knows of its point, and what drcheck's records say of the primary then.
#[derive(Debug, Clone, Default)]
pub struct CopyPoint {
    /// The copy's point in time: the last replayed commit, else the backup's own time.
    pub at: Option<SystemTime>,
    /// A physical copy's transaction horizon, read right after recovery.
    pub horizon: Option<CopyHorizon>,
    /// drcheck's journal of the primary's horizon around T and now.
    pub journal: Journal,
    /// The target compares its backups with a primary that is another cluster on purpose
    /// (`[target] other_cluster`): a physical copy of another system is then no defect.
    pub other_cluster: bool,
    /// `as_of_grace`: a sample must be this much older than T to say what T held.
    pub grace: Duration,
    /// How long the primary's statistics may lag its commits (`stats_settle`).
    pub settle: Duration,
    /// The primary's heartbeat table, whose rows carry its horizon with each beat.
    pub heartbeat: Option<TableName>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyHorizon {
    pub next_xid: u64,
    pub system_identifier: String,
}

/// One sample of the primary's transaction horizon.
#[derive(Debug, Clone)]
pub struct Sample {
    /// When it was taken, on the primary's clock.
    pub at: SystemTime,
    /// `pg_snapshot_xmin(pg_current_snapshot())`: every transaction below it had ended.
    pub xmin: u64,
    pub system_identifier: Option<String>,
    /// Where it was read: `drcheck's journal` or `the primary's heartbeat`.
    pub source: String,
    /// The primary's per-table insert counters at the same moment, where recorded.
    pub counters: Option<Arc<Counters>>,
}

/// The primary's cumulative insert counters of one database (`pg_stat_user_tables`),
/// monotonic until `pg_stat_reset` or a crash (`stats_reset` says when).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    pub database: String,
    pub stats_reset: Option<String>,
    /// `relid → n_tup_ins`.
    pub inserted: BTreeMap<i64, i64>,
}

/// The samples that matter for one verification (chosen by the caller from its history).
#[derive(Debug, Clone, Default)]
pub struct Journal {
    /// The newest sample taken at or before T − `as_of_grace`.
    pub before: Option<Sample>,
    /// The newest such sample holding the primary's insert counters.
    pub counted: Option<Sample>,
    /// The newest sample at least `stats_settle` old: rows below its horizon are in the
    /// primary's counters by now.
    pub settled: Option<Sample>,
}

/// A horizon the journal gives, as a [`Since`] uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct Horizon {
    /// Every transaction below it had ended when the sample was taken.
    pub xmin: u64,
    /// When the sample was taken (RFC 3339, seconds), and how long before T.
    pub at: String,
    pub before_point: Duration,
    pub source: String,
}

/// How the primary's changes since T are told (see the module's documentation).
#[derive(Debug, Clone)]
pub enum Since {
    Xid {
        /// The copy's horizon (a full, 64-bit id).
        next: u64,
        /// 32-bit ids below `next` the copy did not commit (in flight at T), from `from`
        /// on — never one below the journal's horizon (the copy cannot vouch for those).
        aborted: Arc<Vec<i64>>,
        from: u64,
        /// The journal's horizon before T, where there is one: ids below it had ended
        /// before T, whatever the copy's commit log says.
        floor: Option<Horizon>,
    },
    CommitTime {
        /// Committed at or after this (RFC 3339) is new.
        cut: String,
        /// Decides the versions without a commit time.
        journal: Option<Horizon>,
    },
    Journal {
        horizon: Horizon,
    },
    Unknown {
        why: String,
        /// Whether the primary tracks commit timestamps (`None`: it could not be asked):
        /// what the advice to prove the difference may and may not recommend.
        commit_ts: Option<bool>,
    },
}

/// A value bound to a query built here.
#[derive(Debug, Clone, PartialEq)]
pub enum Bind {
    Int(i64),
    Ints(Vec<i64>),
    Text(String),
}

/// Binds each of `binds`, in order, to the query `$q`.
macro_rules! bind_each {
    ($q:expr, $binds:expr) => {{
        let mut q = $q;
        for b in $binds {
            q = match b {
                Bind::Int(i) => q.bind(*i),
                Bind::Ints(v) => q.bind(v.clone()),
                Bind::Text(t) => q.bind(t.clone()),
            };
        }
        q
    }};
}

/// Binds `binds`, in order, to `q`.
pub fn bind_all<'q, O>(
    q: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    binds: &[Bind],
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
    bind_each!(q, binds)
}

/// Binds `binds`, in order, to a scalar query.
pub fn bind_scalar<'q, O>(
    q: sqlx::query::QueryScalar<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    binds: &[Bind],
) -> sqlx::query::QueryScalar<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
    bind_each!(q, binds)
}

/// An `xid` expression as a 32-bit number (an `int8`).
fn as_int(xid: &str) -> String {
    format!("(({xid})::pg_catalog.text)::pg_catalog.int8")
}

/// True for an id at or past `h` (a full id, bound at `$first` as its 32-bit value and
/// `$first+1` whole) and below the primary's own horizon now: compared modulo 2³² within
/// the statement's snapshot (every version it sees began below its `xmax`).
fn at_or_past(xid: &str, first: usize) -> String {
    let x = as_int(xid);
    // Ids 0–2 are special (2: frozen) and precede every normal one.
    format!(
        "({x} >= 3 and (({x} - ${a}::pg_catalog.int8 + {XID_SPACE}) % {XID_SPACE}) < \
         ((select (pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot()))::pg_catalog.text::pg_catalog.int8) \
          - ${b}::pg_catalog.int8))",
        a = first,
        b = first + 1,
    )
}

fn h32(h: u64) -> i64 {
    (h % (1u64 << 32)) as i64
}

/// Whether the 32-bit id `x` is at or past the full id `h`, seen from the primary's
/// horizon `now` (ids in `[h, now)`).
pub fn is_at_or_past(x: i64, h: u64, now: u64) -> bool {
    if x < 3 {
        return false;
    }
    let d = (x - h32(h)).rem_euclid(XID_SPACE);
    (d as u64) < now.saturating_sub(h)
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

fn ago(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

impl Horizon {
    /// The horizon of a sample taken long enough ago for the primary's counters to
    /// hold every row below it (no copy's point to measure from).
    pub fn settled(s: &Sample) -> Horizon {
        Horizon::of(s, None)
    }

    fn of(s: &Sample, point: Option<SystemTime>) -> Horizon {
        Horizon {
            xmin: s.xmin,
            at: rfc3339(s.at),
            before_point: point.and_then(|p| p.duration_since(s.at).ok()).unwrap_or_default(),
            source: s.source.clone(),
        }
    }

    fn describe(&self) -> String {
        format!(
            "the primary's horizon {} in {} (sampled {}, {} before the copy's point)",
            self.xmin,
            self.source,
            self.at,
            ago(self.before_point)
        )
    }
}

impl Since {
    /// Whether changes since T can be told at all.
    pub fn known(&self) -> bool {
        !matches!(self, Since::Unknown { .. })
    }

    /// A SQL condition, true for a row version of `alias` the primary wrote after T; its
    /// parameters numbered from `$first`. `None` when nothing tells.
    pub fn changed(&self, alias: &str, first: usize) -> Option<(String, Vec<Bind>)> {
        self.changed_xid(&format!("{alias}.xmin"), first)
    }

    /// [`Since::changed`] of any `xid` expression (a catalog row's `xmin`, a column).
    pub fn changed_xid(&self, xid: &str, first: usize) -> Option<(String, Vec<Bind>)> {
        match self {
            Since::Xid { next, aborted, .. } => {
                let x = as_int(xid);
                Some((
                    format!("({} or {x} = any(${}::pg_catalog.int8[]))", at_or_past(xid, first), first + 2),
                    vec![Bind::Int(h32(*next)), Bind::Int(*next as i64), Bind::Ints(aborted.as_ref().clone())],
                ))
            }
            Since::CommitTime { cut, journal } => {
                let ts = format!("pg_catalog.pg_xact_commit_timestamp({xid}) >= ${first}::pg_catalog.timestamptz");
                Some(match journal {
                    // Without a commit time (before the setting, or too old): the journal's.
                    Some(h) => (
                        format!("coalesce({ts}, {})", at_or_past(xid, first + 1)),
                        vec![Bind::Text(cut.clone()), Bind::Int(h32(h.xmin)), Bind::Int(h.xmin as i64)],
                    ),
                    None => (format!("coalesce({ts}, false)"), vec![Bind::Text(cut.clone())]),
                })
            }
            Since::Journal { horizon } => {
                Some((at_or_past(xid, first), vec![Bind::Int(h32(horizon.xmin)), Bind::Int(horizon.xmin as i64)]))
            }
            Since::Unknown { .. } => None,
        }
    }

    /// How changes since T were told, in words (for findings' details).
    pub fn describe(&self) -> String {
        match self {
            Since::Xid { next, floor, .. } => format!(
                "changes since the copy's point told by transaction ids of this cluster (horizon {next}){}",
                floor.as_ref().map(|f| format!("; its commit log held to {}", f.describe())).unwrap_or_default()
            ),
            Since::CommitTime { cut, journal: None } => {
                format!("changes since the copy's point told by commit times (from {cut})")
            }
            Since::CommitTime { cut, journal: Some(h) } => format!(
                "changes since the copy's point told by commit times (from {cut}) and, for rows without one, by {}",
                h.describe()
            ),
            Since::Journal { horizon } => format!(
                "changes since the copy's point told by {} — rows written since are counted as changed",
                horizon.describe()
            ),
            Since::Unknown { why, .. } => format!("changes since the copy's point cannot be told ({why})"),
        }
    }

    /// What would decide a difference this comparison could not — from the facts: never
    /// a setting the primary already has, or a sample drcheck already took.
    pub fn how_to_prove(&self) -> String {
        const SAMPLE: &str = "let drcheck sample the primary before the backup is taken (every run records its \
            transaction horizon, `drcheck daemon` every journal_interval: backups taken after a sample are judged by it)";
        match self {
            Since::Unknown { commit_ts, .. } => {
                let mut ways = vec![SAMPLE.to_string()];
                match commit_ts {
                    Some(true) => ways.push(
                        "have the backup say when its data is from (the primary tracks commit timestamps, but \
                         nothing dates this backup: for a plain dump, `pg_dump -v` writes its start time into its \
                         header; custom and directory dumps always carry it)"
                            .into(),
                    ),
                    Some(false) => ways.push("set track_commit_timestamp = on on the primary".into()),
                    None => ways.push(
                        "set track_commit_timestamp = on on the primary if it is off (it could not be asked)".into(),
                    ),
                }
                ways.push("give the table an as_of column".into());
                ways.join(", or ")
            }
            Since::CommitTime { journal: None, .. } | Since::Xid { floor: None, .. } => format!(
                "{SAMPLE}: rows without a commit time or beyond the copy's commit log are then judged by the journal"
            ),
            Since::CommitTime { journal: Some(h), .. }
            | Since::Journal { horizon: h }
            | Since::Xid { floor: Some(h), .. } => {
                format!(
                    "sample the primary closer to the backup's point: drcheck's newest sample before it is from {} \
                     ({} before it) — lower [daemon] journal_interval, or run drcheck just before the backup",
                    h.at,
                    humantime::format_duration(Duration::from_secs(h.before_point.as_secs()))
                )
            }
        }
    }
}

/// Whether each 32-bit id in `xids` (found on primary rows the copy disagrees with, and
/// not changed since T by [`Since::changed`]) had committed at the copy's point:
/// `Some(false)` for an id the copy did not commit (in flight at T) — unless the journal
/// shows it had ended before T —, `None` where nothing says.
pub async fn committed_at_point(
    since: &Since,
    restored: &PgPool,
    primary: &PrimaryDb,
    xids: &[i64],
) -> Result<std::collections::HashMap<i64, Option<bool>>, sqlx::Error> {
    let mut out = std::collections::HashMap::new();
    if xids.is_empty() {
        return Ok(out);
    }
    match since {
        Since::Xid { next, floor, .. } => {
            let full: Vec<i64> =
                xids.iter().map(|x| *next as i64 - (h32(*next) - x).rem_euclid(XID_SPACE).max(1)).collect();
            let rows: Vec<(i64, Option<String>)> = sqlx::query_as(
                "select x, pg_catalog.pg_xact_status((x::pg_catalog.text)::pg_catalog.xid8)::pg_catalog.text
                   from pg_catalog.unnest($1::pg_catalog.int8[]) x where x > 2",
            )
            .bind(&full)
            .fetch_all(restored)
            .await?;
            let status: std::collections::HashMap<i64, Option<String>> = rows.into_iter().collect();
            for (x, f) in xids.iter().zip(&full) {
                // Below the journal's horizon: ended before T, on the primary's word.
                let ended_before = floor.as_ref().is_some_and(|h| (*f as u64) < h.xmin);
                // Too old for the copy's commit log (NULL, or not asked): committed long ago.
                let committed = ended_before
                    || match status.get(f) {
                        Some(Some(s)) => s == "committed",
                        _ => true,
                    };
                out.insert(*x, Some(committed));
            }
        }
        Since::CommitTime { cut, journal } => {
            let rows: Vec<(i64, Option<bool>)> = primary
                .timed(
                    sqlx::query_as(
                        "select x, pg_catalog.pg_xact_commit_timestamp((x::pg_catalog.text)::pg_catalog.xid)
                                   < $2::pg_catalog.timestamptz
                           from pg_catalog.unnest($1::pg_catalog.int8[]) x",
                    )
                    .bind(xids)
                    .bind(cut)
                    .fetch_all(&primary.pool),
                )
                .await?;
            // No commit time: the journal said it is below its horizon (not changed since).
            out.extend(rows.into_iter().map(|(x, c)| (x, c.or(journal.as_ref().map(|_| true)))));
        }
        // Not at or past the horizon: it had ended, committed, before T.
        Since::Journal { .. } => out.extend(xids.iter().map(|x| (*x, Some(true)))),
        Since::Unknown { .. } => out.extend(xids.iter().map(|x| (*x, None))),
    }
    Ok(out)
}

/// What transaction ids below the horizon did not commit at the copy's point: read once
/// per restored cluster (ids are cluster-wide) and shared by its databases.
pub type Aborted = tokio::sync::OnceCell<Result<(u64, Arc<Vec<i64>>), Failure>>;

/// Reads, on the copy, the ids in `[next − XID_WINDOW, next)` that did not commit (32-bit
/// values), and where the window starts — never below `floor` (ids the journal shows
/// had ended before T: the copy's word on those is not taken).
async fn aborted_below(restored: &PgPool, next: u64, floor: u64) -> Result<(u64, Arc<Vec<i64>>), Failure> {
    let from = next.saturating_sub(XID_WINDOW).max(3).max(floor);
    if from >= next {
        return Ok((from, Arc::new(Vec::new())));
    }
    let ids: Vec<i64> = sqlx::query_scalar(
        "select x from pg_catalog.generate_series($1::pg_catalog.int8, $2::pg_catalog.int8) x
          where pg_catalog.pg_xact_status((x::pg_catalog.text)::pg_catalog.xid8) operator(pg_catalog.=) 'aborted'
          order by x desc limit $3",
    )
    .bind(from as i64)
    .bind(next as i64 - 1)
    .bind(MAX_ABORTED as i64)
    .fetch_all(restored)
    .await
    .map_err(|e| Failure::from(e).doing("asking the copy which transactions had committed"))?;
    // Cut short at the limit: the window then starts at the oldest id kept.
    let from = if ids.len() >= MAX_ABORTED { ids.last().map_or(from, |x| *x as u64) } else { from };
    Ok((from, Arc::new(ids.iter().map(|x| x.rem_euclid(XID_SPACE)).collect())))
}

/// The primary's side: its cluster, its transaction horizon now, commit times on.
async fn primary_state(primary: &PrimaryDb) -> Result<(Option<String>, i64, bool), sqlx::Error> {
    primary
        .timed(
            sqlx::query_as(
                "select (select s.system_identifier::pg_catalog.text from pg_catalog.pg_control_system() s),
                        (pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot()))::pg_catalog.text::pg_catalog.int8,
                        pg_catalog.current_setting('track_commit_timestamp') operator(pg_catalog.=) 'on'",
            )
            .fetch_one(&primary.pool),
        )
        .await
}

/// One sample as taken: the horizon with its time, and the counters of the database.
#[derive(Debug, Clone)]
pub struct Taken {
    pub at: SystemTime,
    pub xmin: u64,
    pub xmax: u64,
    pub system_identifier: Option<String>,
    pub counters: Counters,
}

/// Samples the primary: its horizon (`pg_current_snapshot()`, read only — no
/// transaction id is consumed) at its own clock, and its tables' insert counters.
pub async fn take_sample(primary: &PrimaryDb) -> Result<Taken, sqlx::Error> {
    let (at, xmin, xmax, system, database, reset): (String, i64, i64, Option<String>, String, Option<String>) = primary
        .timed(
            sqlx::query_as(
                "select pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.statement_timestamp()),
                                           'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),
                        (pg_catalog.pg_snapshot_xmin(s.s))::pg_catalog.text::pg_catalog.int8,
                        (pg_catalog.pg_snapshot_xmax(s.s))::pg_catalog.text::pg_catalog.int8,
                        (select c.system_identifier::pg_catalog.text from pg_catalog.pg_control_system() c),
                        pg_catalog.current_database()::pg_catalog.text,
                        (select pg_catalog.to_char(pg_catalog.timezone('UTC', d.stats_reset),
                                                   'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
                           from pg_catalog.pg_stat_database d where d.datname operator(pg_catalog.=) pg_catalog.current_database())
                   from (select pg_catalog.pg_current_snapshot() s) s",
            )
            .fetch_one(&primary.pool),
        )
        .await?;
    let inserted: Vec<(i64, i64)> = primary
        .timed(
            sqlx::query_as(
                "select t.relid::pg_catalog.int8, t.n_tup_ins::pg_catalog.int8 from pg_catalog.pg_stat_user_tables t",
            )
            .fetch_all(&primary.pool),
        )
        .await?;
    Ok(Taken {
        at: humantime::parse_rfc3339_weak(&at).unwrap_or_else(|_| SystemTime::now()),
        xmin: xmin as u64,
        xmax: xmax as u64,
        system_identifier: system,
        counters: Counters { database, stats_reset: reset, inserted: inserted.into_iter().collect() },
    })
}

/// The newest heartbeat of the primary at or before `until` that carries its horizon
/// (the column `drcheck heartbeat setup` adds), if the table has one.
async fn heartbeat_sample(primary: &PrimaryDb, hb: &TableName, until: SystemTime) -> Option<(SystemTime, u64)> {
    let has: bool = primary
        .timed(
            sqlx::query_scalar(
                "select exists (select 1 from pg_catalog.pg_attribute a
                                  join pg_catalog.pg_class c on c.oid = a.attrelid
                                  join pg_catalog.pg_namespace n on n.oid = c.relnamespace
                                 where n.nspname = $1 and c.relname = $2 and a.attname = 'horizon'
                                   and not a.attisdropped)",
            )
            .bind(&hb.schema)
            .bind(&hb.name)
            .fetch_one(&primary.pool),
        )
        .await
        .ok()?;
    if !has {
        return None;
    }
    let sql = format!(
        "select pg_catalog.to_char(pg_catalog.timezone('UTC', h.at), 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),
                (h.horizon)::pg_catalog.text::pg_catalog.int8
           from {} h where h.at <= $1::pg_catalog.timestamptz and h.horizon is not null
          order by h.at desc limit 1",
        hb.quoted()
    );
    let row: Option<(String, i64)> = primary
        .timed(
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(humantime::format_rfc3339_micros(until).to_string())
                .fetch_optional(&primary.pool),
        )
        .await
        .ok()?;
    let (at, x) = row?;
    Some((humantime::parse_rfc3339_weak(&at).ok()?, x as u64))
}

/// How a comparison tells changes since T, and what the copy's provenance says.
#[derive(Debug, Clone)]
pub struct Established {
    pub since: Since,
    /// A physical copy that is not of the primary's history: the `provenance` finding,
    /// failed (the backup's defect).
    pub provenance: Option<Finding>,
    /// The journal's samples that belong to this primary (others are left out).
    pub journal: Journal,
    /// The primary's horizon now (a full id), when it could be read.
    pub now: Option<u64>,
}

/// The journal's samples that belong to the primary (`system`, now at `now`), plus its
/// heartbeat's where that is newer.
async fn journal_of(point: &CopyPoint, primary: &PrimaryDb, system: Option<&str>, now: u64) -> Journal {
    let ours = |s: &Option<Sample>| {
        s.clone()
            .filter(|s| s.xmin <= now && (s.system_identifier.is_none() || s.system_identifier.as_deref() == system))
    };
    let mut j = Journal {
        before: ours(&point.journal.before),
        counted: ours(&point.journal.counted),
        settled: ours(&point.journal.settled),
    };
    let Some(hb) = &point.heartbeat else { return j };
    let beat = |at: SystemTime, x: u64| Sample {
        at,
        xmin: x,
        system_identifier: None,
        source: "the primary's heartbeat".into(),
        counters: None,
    };
    if let Some(until) = point.at.and_then(|t| t.checked_sub(point.grace))
        && let Some((at, x)) = heartbeat_sample(primary, hb, until).await
        && x <= now
        && j.before.as_ref().is_none_or(|s| s.at < at)
    {
        j.before = Some(beat(at, x));
    }
    if let Some(until) = SystemTime::now().checked_sub(point.settle)
        && let Some((at, x)) = heartbeat_sample(primary, hb, until).await
        && x <= now
        && j.settled.as_ref().is_none_or(|s| s.at < at)
    {
        j.settled = Some(beat(at, x));
    }
    j
}

/// How this comparison tells changes since T, decided once per restored database.
pub async fn establish(point: &CopyPoint, restored: &PgPool, primary: &PrimaryDb, aborted: &Aborted) -> Established {
    let (system, now, commit_ts) = match primary_state(primary).await {
        Ok(s) => s,
        Err(e) => {
            return Established {
                since: Since::Unknown {
                    why: format!("the primary's transaction state cannot be read: {}", e.said()),
                    commit_ts: None,
                },
                provenance: None,
                journal: Journal::default(),
                now: None,
            };
        }
    };
    let now = now as u64;
    let journal = journal_of(point, primary, system.as_deref(), now).await;
    let floor = journal.before.as_ref().map(|s| Horizon::of(s, point.at));
    let mut why = Vec::new();
    let mut provenance = None;
    match &point.horizon {
        Some(h) if system.as_deref() == Some(h.system_identifier.as_str()) && now >= h.next_xid => {
            let floor_id = floor.as_ref().map_or(0, |f| f.xmin);
            match aborted.get_or_init(|| aborted_below(restored, h.next_xid, floor_id)).await {
                Ok((from, ids)) => {
                    let since = Since::Xid { next: h.next_xid, aborted: ids.clone(), from: *from, floor };
                    return Established { since, provenance, journal, now: Some(now) };
                }
                Err(e) => why.push(e.text.clone()),
            }
        }
        // The copy says it ran transactions this cluster never did: not this primary's
        // history (a clone that burnt ids, another timeline) — the backup's defect,
        // never a reason to judge it by something weaker.
        Some(h) if system.as_deref() == Some(h.system_identifier.as_str()) => {
            provenance = Some(Finding::new(
                PROVENANCE,
                Status::Failed,
                format!(
                    "the copy claims transactions this primary never ran: its next transaction id is {}, the \
                     primary's horizon is {now} (same system identifier {}) — not a backup of this primary's history",
                    h.next_xid, h.system_identifier
                ),
            ));
            why.push("the copy's transaction ids are not this primary's history".into());
        }
        Some(h) => {
            if !point.other_cluster {
                provenance = Some(Finding::new(
                    PROVENANCE,
                    Status::Failed,
                    format!(
                        "not a backup of this primary: the copy's system identifier is {}, the primary's {} — set \
                         other_cluster = true on the target if it compares backups of another cluster on purpose",
                        h.system_identifier,
                        system.as_deref().unwrap_or("unknown")
                    ),
                ));
            }
            why.push("the copy is of another cluster than the primary (system identifiers differ)".into());
        }
        None => why.push("a logical dump keeps no transaction ids".into()),
    }
    let journal_horizon = floor.clone();
    match (commit_ts, point.at) {
        (true, Some(at)) => {
            // A dump's time is its start, whole seconds, before it took its snapshot: what
            // committed before it is in the dump. A replayed commit's time is not in WAL
            // order with its neighbours' (each is stamped before its record is written):
            // a second's band before it counts as changed since.
            let margin = if point.horizon.is_some() { Duration::from_secs(1) } else { Duration::ZERO };
            let cut = at.checked_sub(margin).unwrap_or(at);
            let since =
                Since::CommitTime { cut: humantime::format_rfc3339_micros(cut).to_string(), journal: journal_horizon };
            return Established { since, provenance, journal, now: Some(now) };
        }
        (true, None) => why.push("nothing records when the backup's data is from".into()),
        (false, _) => why.push("the primary does not track commit timestamps".into()),
    }
    if let Some(horizon) = journal_horizon {
        return Established { since: Since::Journal { horizon }, provenance, journal, now: Some(now) };
    }
    why.push(match point.at {
        Some(at) => format!(
            "drcheck has no sample of the primary's horizon from before {} (the copy's point less as_of_grace)",
            rfc3339(at.checked_sub(point.grace).unwrap_or(at))
        ),
        None => "no time to look the primary's horizon up at".into(),
    });
    Established {
        since: Since::Unknown { why: why.join("; "), commit_ts: Some(commit_ts) },
        provenance,
        journal,
        now: Some(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 48: advice from facts — never "turn on track_commit_timestamp" when it is
    /// on (a plain dump without a time: `pg_dump -v`), never "let drcheck sample the
    /// primary" when it did (closer to the point, then).
    #[test]
    fn the_advice_never_recommends_what_is_already_so() {
        let on = Since::Unknown { why: "nothing records when the backup's data is from".into(), commit_ts: Some(true) };
        let advice = on.how_to_prove();
        assert!(!advice.contains("set track_commit_timestamp"), "{advice}");
        assert!(advice.contains("pg_dump -v"), "{advice}");
        let off = Since::Unknown { why: "the primary does not track commit timestamps".into(), commit_ts: Some(false) };
        let advice = off.how_to_prove();
        assert!(advice.contains("set track_commit_timestamp = on") && !advice.contains("pg_dump -v"), "{advice}");
        let h = Horizon {
            xmin: 700,
            at: "2026-12-07T01:00:00Z".into(),
            before_point: Duration::from_secs(7200),
            source: "a run".into(),
        };
        for sampled in [
            Since::Journal { horizon: h.clone() },
            Since::CommitTime { cut: "2026-12-07T03:00:00Z".into(), journal: Some(h.clone()) },
        ] {
            let advice = sampled.how_to_prove();
            assert!(!advice.contains("before the backup is taken"), "it was: {advice}");
            assert!(advice.contains("2026-12-07T01:00:00Z") && advice.contains("2h before it"), "{advice}");
        }
        let unsampled = Since::CommitTime { cut: "2026-12-07T03:00:00Z".into(), journal: None };
        assert!(unsampled.how_to_prove().starts_with("let drcheck sample the primary before the backup"));
    }

    fn horizon(x: u64) -> Horizon {
        Horizon {
            xmin: x,
            at: "2026-12-01T00:00:00Z".into(),
            before_point: Duration::from_secs(60),
            source: "j".into(),
        }
    }

    #[test]
    fn the_xid_condition_compares_modulo_the_32_bit_space() {
        let s = Since::Xid { next: (5u64 << 32) + 100, aborted: Arc::new(vec![98, 99]), from: 3, floor: None };
        let (sql, binds) = s.changed("r", 4).unwrap();
        assert!(sql.contains("$4::pg_catalog.int8 + 4294967296) % 4294967296)"), "{sql}");
        assert!(sql.contains("int8 >= 3 and"), "frozen ids are never new: {sql}");
        assert!(sql.contains("- $5::pg_catalog.int8)") && sql.contains("any($6::pg_catalog.int8[])"), "{sql}");
        assert_eq!(binds, vec![Bind::Int(100), Bind::Int((5i64 << 32) + 100), Bind::Ints(vec![98, 99])]);
        assert!(Since::Unknown { why: "x".into(), commit_ts: None }.changed("r", 1).is_none());
        let (sql, binds) =
            Since::CommitTime { cut: "2026-12-01T00:00:00Z".into(), journal: None }.changed("r", 2).unwrap();
        assert!(sql.contains("pg_xact_commit_timestamp(r.xmin) >= $2::pg_catalog.timestamptz"), "{sql}");
        assert_eq!(binds, vec![Bind::Text("2026-12-01T00:00:00Z".into())]);
    }

    /// Issue 46: a row without a commit time (committed before the setting was turned on)
    /// was judged "old" — and an old dump verified after turning it on failed on rows
    /// inserted after the dump. The journal decides those rows.
    #[test]
    fn rows_without_a_commit_time_are_decided_by_the_journal() {
        let s = Since::CommitTime { cut: "2026-12-01T00:00:00Z".into(), journal: Some(horizon((1 << 32) + 7)) };
        let (sql, binds) = s.changed("r", 1).unwrap();
        assert!(sql.starts_with("coalesce(pg_catalog.pg_xact_commit_timestamp(r.xmin) >= $1"), "{sql}");
        assert!(
            sql.contains("- $2::pg_catalog.int8 + 4294967296) % 4294967296) < (") && sql.contains("- $3::"),
            "{sql}"
        );
        assert_eq!(binds, vec![Bind::Text("2026-12-01T00:00:00Z".into()), Bind::Int(7), Bind::Int((1 << 32) + 7)]);
        let (sql, binds) = Since::Journal { horizon: horizon(900) }.changed_xid("f.x", 3).unwrap();
        assert!(sql.contains("((f.x)::pg_catalog.text)::pg_catalog.int8 - $3::"), "{sql}");
        assert_eq!(binds, vec![Bind::Int(900), Bind::Int(900)]);
        assert!(
            Since::Journal { horizon: horizon(900) }.describe().contains("sampled 2026-12-01T00:00:00Z, 1m before")
        );
    }

    #[test]
    fn ids_at_or_past_a_horizon_are_told_across_the_wrap() {
        let h = (3u64 << 32) + 4_294_967_000; // 296 ids before a wrap
        let now = h + 1000;
        assert!(is_at_or_past(4_294_967_000, h, now));
        assert!(is_at_or_past(100, h, now), "past the wrap, still newer");
        assert!(!is_at_or_past(4_294_966_999, h, now), "just below");
        assert!(!is_at_or_past(800, h, now), "past the primary's own horizon: not a version it holds");
        assert!(!is_at_or_past(2, h, now), "frozen");
    }
}
