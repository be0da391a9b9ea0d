//! As of the copy's point T: which of the primary's rows changed since — the primary
//! never stops changing, and a comparison with it is only fair as of T.
//!
//! [`Since`] is how a run tells a row version the primary wrote after T from one that was
//! there, unchanged, at T:
//!
//! - **By transaction ids** (a physical copy of this very cluster): the copy knows its
//!   horizon — `pg_snapshot_xmax` right after recovery, read before drcheck wrote to it —
//!   and which of the transactions below it did not commit at T (in flight then, aborted
//!   in the copy: `pg_xact_status`, over the last [`XID_WINDOW`] ids). On the primary a row
//!   version is *new* when its `xmin` is at or past the horizon (32-bit ids compared
//!   modulo 2³², within the primary's own snapshot) or one of those. The cluster is the
//!   same when `pg_control_system().system_identifier` is; a copy of another cluster is
//!   never judged by ids.
//! - **By commit time** (the primary has `track_commit_timestamp`): new when its `xmin`
//!   committed at or after T — a dump's start (its header's whole second, before its
//!   snapshot), a replayed commit's time less a second (`pg_xact_commit_timestamp`); a version whose
//!   commit time the primary no longer knows (NULL: committed before the setting, or too
//!   long ago) counts as old, and a difference it shows is inconclusive, not a failure.
//! - **Unknown** (a dump, without commit times): nothing tells an update since T from a
//!   defect. `as_of` columns still cut exactly (rows within `as_of_grace` of the cut may
//!   have been in flight: counted, not compared); other differences are inconclusive.
//!
//! Rows unchanged since T must match exactly; rows changed since are counted, never a
//! failure; what cannot be told apart is inconclusive — the report says what would
//! prove it.

use crate::Said;
use crate::primary::PrimaryDb;
use sqlx::PgPool;
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

/// What the copy knows of its point.
#[derive(Debug, Clone, Default)]
pub struct CopyPoint {
    /// The copy's point in time: the last replayed commit, else the backup's own time.
    pub at: Option<SystemTime>,
    /// A physical copy's transaction horizon, read right after recovery.
    pub horizon: Option<CopyHorizon>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyHorizon {
    pub next_xid: u64,
    pub system_identifier: String,
}

/// How the primary's changes since T are told (see the module's documentation).
#[derive(Debug, Clone)]
pub enum Since {
    Xid {
        /// The copy's horizon (a full, 64-bit id).
        next: u64,
        /// 32-bit ids below `next` the copy did not commit (in flight at T), from `from` on.
        aborted: Arc<Vec<i64>>,
        from: u64,
    },
    CommitTime {
        /// Committed at or after this (RFC 3339) is new.
        cut: String,
    },
    Unknown {
        why: String,
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

/// `alias.xmin` as a 32-bit number (an `int8`).
fn xmin(alias: &str) -> String {
    format!("(({alias}.xmin)::pg_catalog.text)::pg_catalog.int8")
}

impl Since {
    /// Whether changes since T can be told at all.
    pub fn known(&self) -> bool {
        !matches!(self, Since::Unknown { .. })
    }

    /// A SQL condition, true for a row version of `alias` the primary wrote after T; its
    /// parameters numbered from `$first`. `None` when nothing tells.
    pub fn changed(&self, alias: &str, first: usize) -> Option<(String, Vec<Bind>)> {
        match self {
            Since::Xid { next, aborted, .. } => {
                let x = xmin(alias);
                let h32 = (*next % (1u64 << 32)) as i64;
                Some((
                    // The primary's horizon is the statement's own (a subquery, evaluated once):
                    // every row version it sees began below it.
                    format!(
                        "((({x} - ${a}::pg_catalog.int8 + {XID_SPACE}) % {XID_SPACE}) < \
                         ((select (pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot()))::pg_catalog.text::pg_catalog.int8) \
                          - ${b}::pg_catalog.int8) \
                         or {x} = any(${c}::pg_catalog.int8[]))",
                        a = first,
                        b = first + 1,
                        c = first + 2
                    ),
                    vec![Bind::Int(h32), Bind::Int(*next as i64), Bind::Ints(aborted.as_ref().clone())],
                ))
            }
            Since::CommitTime { cut } => Some((
                format!(
                    "coalesce(pg_catalog.pg_xact_commit_timestamp({alias}.xmin) >= ${first}::pg_catalog.timestamptz, false)"
                ),
                vec![Bind::Text(cut.clone())],
            )),
            Since::Unknown { .. } => None,
        }
    }

    /// How changes since T were told, in words (for findings' details).
    pub fn describe(&self) -> String {
        match self {
            Since::Xid { next, .. } => {
                format!("changes since the copy's point told by transaction ids (horizon {next})")
            }
            Since::CommitTime { cut } => format!("changes since the copy's point told by commit times (from {cut})"),
            Since::Unknown { why } => format!("changes since the copy's point cannot be told ({why})"),
        }
    }

    /// What would make a table whose differences cannot be told apart provable.
    pub fn how_to_prove(&self) -> &'static str {
        match self {
            Since::Unknown { .. } => {
                "set track_commit_timestamp = on on the primary (commit times tell what changed since the dump), \
                 give the table an as_of column, or verify base backups with their WAL"
            }
            _ => "give the table a single-column integer primary key (rows changed since are then matched one by one)",
        }
    }
}

/// Whether each 32-bit id in `xids` (found on primary rows the copy disagrees with)
/// had committed at the copy's point: asked of the copy (`Xid`) — `false` for an id the
/// copy did not commit (in flight at T) — or answered by the primary's commit times
/// (`CommitTime`): `None` where the primary no longer knows when it committed.
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
        Since::Xid { next, .. } => {
            let h32 = (*next % (1u64 << 32)) as i64;
            // The full id of each 32-bit one, below the horizon.
            let full: Vec<i64> = xids.iter().map(|x| *next as i64 - (h32 - x).rem_euclid(XID_SPACE).max(1)).collect();
            let rows: Vec<(i64, Option<String>)> = sqlx::query_as(
                "select x, pg_catalog.pg_xact_status((x::pg_catalog.text)::pg_catalog.xid8)::pg_catalog.text
                   from pg_catalog.unnest($1::pg_catalog.int8[]) x where x > 2",
            )
            .bind(&full)
            .fetch_all(restored)
            .await?;
            let status: std::collections::HashMap<i64, Option<String>> = rows.into_iter().collect();
            for (x, f) in xids.iter().zip(&full) {
                // Too old for the copy's commit log (NULL, or not asked): committed long ago.
                let committed = match status.get(f) {
                    Some(Some(s)) => s == "committed",
                    _ => true,
                };
                out.insert(*x, Some(committed));
            }
        }
        Since::CommitTime { cut } => {
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
            out.extend(rows);
        }
        Since::Unknown { .. } => {
            out.extend(xids.iter().map(|x| (*x, None)));
        }
    }
    Ok(out)
}

/// What transaction ids below the horizon did not commit at the copy's point: read once
/// per restored cluster (ids are cluster-wide) and shared by its databases.
pub type Aborted = tokio::sync::OnceCell<Result<(u64, Arc<Vec<i64>>), String>>;

/// Reads, on the copy, the ids in `[next − XID_WINDOW, next)` that did not commit (32-bit
/// values), and where the window starts.
async fn aborted_below(restored: &PgPool, next: u64) -> Result<(u64, Arc<Vec<i64>>), String> {
    let from = next.saturating_sub(XID_WINDOW).max(3);
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
    .map_err(|e| format!("asking the copy which transactions had committed: {}", e.said()))?;
    // Cut short at the limit: the window then starts at the oldest id kept.
    let from = if ids.len() >= MAX_ABORTED { ids.last().map_or(from, |x| *x as u64) } else { from };
    Ok((from, Arc::new(ids.iter().map(|x| x.rem_euclid(XID_SPACE)).collect())))
}

/// The primary's side: its cluster and its transaction horizon now.
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

/// How this comparison tells changes since T, decided once per restored database.
pub async fn establish(point: &CopyPoint, restored: &PgPool, primary: &PrimaryDb, aborted: &Aborted) -> Since {
    let (system, now, commit_ts) = match primary_state(primary).await {
        Ok(s) => s,
        Err(e) => {
            return Since::Unknown { why: format!("the primary's transaction state cannot be read: {}", e.said()) };
        }
    };
    let mut why = Vec::new();
    match &point.horizon {
        Some(h) if system.as_deref() == Some(h.system_identifier.as_str()) && now as u64 >= h.next_xid => {
            match aborted.get_or_init(|| aborted_below(restored, h.next_xid)).await {
                Ok((from, ids)) => return Since::Xid { next: h.next_xid, aborted: ids.clone(), from: *from },
                Err(e) => why.push(e.clone()),
            }
        }
        Some(h) if system.as_deref() == Some(h.system_identifier.as_str()) => why.push(format!(
            "the primary's transaction ids ({now}) are behind the copy's ({}): not this backup's history",
            h.next_xid
        )),
        Some(_) => why.push("the copy is of another cluster than the primary (system identifiers differ)".into()),
        None => why.push("a logical dump keeps no transaction ids".into()),
    }
    match (commit_ts, point.at) {
        (true, Some(at)) => {
            // A dump's time is its start, whole seconds, before it took its snapshot: what
            // committed before it is in the dump. A replayed commit's time is not in WAL
            // order with its neighbours' (each is stamped before its record is written):
            // a second's band before it counts as changed since.
            let margin = if point.horizon.is_some() { Duration::from_secs(1) } else { Duration::ZERO };
            let cut = at.checked_sub(margin).unwrap_or(at);
            return Since::CommitTime { cut: humantime::format_rfc3339_micros(cut).to_string() };
        }
        (true, None) => why.push("nothing records when the backup's data is from".into()),
        (false, _) => why.push("the primary does not track commit timestamps".into()),
    }
    Since::Unknown { why: why.join("; ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_xid_condition_compares_modulo_the_32_bit_space() {
        let s = Since::Xid { next: (5u64 << 32) + 100, aborted: Arc::new(vec![98, 99]), from: 3 };
        let (sql, binds) = s.changed("r", 4).unwrap();
        assert!(sql.contains("$4::pg_catalog.int8 + 4294967296) % 4294967296)"), "{sql}");
        assert!(sql.contains("- $5::pg_catalog.int8)") && sql.contains("any($6::pg_catalog.int8[])"), "{sql}");
        assert_eq!(binds, vec![Bind::Int(100), Bind::Int((5i64 << 32) + 100), Bind::Ints(vec![98, 99])]);
        assert!(Since::Unknown { why: "x".into() }.changed("r", 1).is_none());
        let (sql, binds) = Since::CommitTime { cut: "2026-12-01T00:00:00Z".into() }.changed("r", 2).unwrap();
        assert!(sql.contains("pg_xact_commit_timestamp(r.xmin) >= $2::pg_catalog.timestamptz"), "{sql}");
        assert_eq!(binds, vec![Bind::Text("2026-12-01T00:00:00Z".into())]);
    }
}
