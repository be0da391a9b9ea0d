//! drcheck's own tables on a primary, and the DDL log: what the primary's schema did
//! after the copy's point.
//!
//! `drcheck heartbeat setup` makes the heartbeat table and a DDL log — a table an event
//! trigger writes each DDL command into (`ddl_command_end`: the command's tag, object type
//! and identity; `sql_drop`: each object dropped) — and marks both with a comment
//! starting `drcheck:` ([`MARK`]). Every target on that database finds them by the mark:
//! they are `as_of` tables of themselves (`at`), and never "missing" from a copy made
//! before they were.
//!
//! A schema difference is explained when **the primary's** log holds a command at or
//! after the copy's point less the grace band that names **the object itself** (a
//! dropped column by its own identity, a constraint as `name on table`). The copy's own
//! log is never read: a backup does not get to say what happened after it.

use crate::finding::TableName;
use crate::primary::PrimaryDb;
use sqlx::PgPool;
use std::time::{Duration, SystemTime};

/// The comment that marks drcheck's own tables: `drcheck: heartbeat` and `drcheck: ddl log`.
pub const MARK: &str = "drcheck:";
/// The DDL log's mark.
pub const DDL_LOG_MARK: &str = "drcheck: ddl log";

/// Tables marked as drcheck's, and which is the DDL log.
#[derive(Debug, Clone, Default)]
pub struct Marked {
    pub tables: Vec<TableName>,
    pub ddl_log: Option<TableName>,
}

impl Marked {
    /// Whether the fingerprint entry `kind name` is one of drcheck's own objects: a
    /// marked table and what hangs off it, the log's trigger function, their schema.
    pub fn owns(&self, kind: &str, name: &str) -> bool {
        let parts: Vec<&str> = name.splitn(3, '.').collect();
        let relation = parts.iter().take(2).copied().collect::<Vec<_>>().join(".");
        self.tables.iter().any(|t| {
            let full = format!("{}.{}", t.schema, t.name);
            relation == full
                || (kind == "schema" && name == t.schema)
                || (kind == "function" && name == format!("{}.log_ddl()", t.schema))
        })
    }
}

/// drcheck's tables on `pool` (by their comment's mark).
pub async fn marked(pool: &PgPool) -> Result<Marked, sqlx::Error> {
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "select n.nspname::pg_catalog.text, c.relname::pg_catalog.text, d.description
           from pg_catalog.pg_description d
           join pg_catalog.pg_class c on c.oid = d.objoid and d.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass
           join pg_catalog.pg_namespace n on n.oid = c.relnamespace
          where d.objsubid = 0 and c.relkind = 'r' and pg_catalog.starts_with(d.description, $1)
          order by 1, 2",
    )
    .bind(MARK)
    .fetch_all(pool)
    .await?;
    let mut m = Marked::default();
    for (schema, name, comment) in rows {
        let t = TableName { schema, name };
        if comment.starts_with(DDL_LOG_MARK) {
            m.ddl_log = Some(t.clone());
        }
        m.tables.push(t);
    }
    Ok(m)
}

/// One logged DDL command.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Logged {
    pub at: String,
    pub xid: String,
    pub tag: String,
    pub object_type: String,
    pub identity: String,
}

impl Logged {
    /// The names this command touched, as the schema fingerprint names objects: the
    /// identity without quotes, and `x on s.t` (triggers, policies, constraints) as
    /// `s.t.x`.
    pub fn touched(&self) -> Vec<String> {
        let id = self.identity.replace('"', "");
        let mut out = vec![id.clone()];
        if let Some((x, on)) = id.split_once(" on ") {
            out.push(format!("{on}.{x}"));
        }
        out
    }
}

async fn entries(pool: &PgPool, log: &TableName, since: Option<&str>) -> Result<Vec<Logged>, sqlx::Error> {
    let sql = format!(
        "select pg_catalog.to_char(pg_catalog.timezone('UTC', at), 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), \
                xid::pg_catalog.text, coalesce(tag, ''), coalesce(object_type, ''), coalesce(identity, '') \
           from {} where ($1::pg_catalog.timestamptz is null or at >= $1::pg_catalog.timestamptz) order by at, xid",
        log.quoted()
    );
    let rows: Vec<(String, String, String, String, String)> =
        sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(since).fetch_all(pool).await?;
    Ok(rows
        .into_iter()
        .map(|(at, xid, tag, object_type, identity)| Logged { at, xid, tag, object_type, identity })
        .collect())
}

/// What the primary's DDL log says happened after the copy's point.
pub enum After {
    /// No DDL log on the primary.
    NoLog,
    /// The log's commands after the point (empty: none), and when the log begins.
    Logged { commands: Vec<Logged>, begins: Option<String> },
}

/// The primary's DDL commands at or after the copy's point `at` less `grace` (a command
/// in that band may have committed after the point). Only the primary's log is read.
pub async fn after_point(
    primary: &PrimaryDb,
    marked: &Marked,
    at: Option<SystemTime>,
    grace: Duration,
) -> Result<After, sqlx::Error> {
    let Some(log) = &marked.ddl_log else { return Ok(After::NoLog) };
    let from = at.map(|t| humantime::format_rfc3339_micros(t.checked_sub(grace).unwrap_or(t)).to_string());
    let commands = primary.timed(entries(&primary.pool, log, from.as_deref())).await?;
    let begins: Option<String> = primary
        .timed(
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "select pg_catalog.to_char(pg_catalog.timezone('UTC', pg_catalog.min(at)), \
                        'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') from {}",
                log.quoted()
            )))
            .fetch_one(&primary.pool),
        )
        .await?;
    Ok(After::Logged { commands, begins })
}

/// The logged command that names the object of the fingerprint entry `kind name`
/// itself, if any: never a command on its table or schema (an excuse names the object
/// changed, not every difference near it).
pub fn names<'a>(commands: &'a [Logged], kind: &str, name: &str) -> Option<&'a Logged> {
    let parts: Vec<&str> = name.splitn(3, '.').collect();
    let mut exact = vec![name.to_string()];
    // An index's identity is `schema.index`; the fingerprint names it `schema.table.index`.
    if kind == "index" && parts.len() == 3 {
        exact.push(format!("{}.{}", parts[0], parts[2]));
    }
    commands.iter().find(|c| c.touched().iter().any(|t| exact.contains(t)))
}

/// A logged command on table `relation` itself (an `ALTER TABLE` names its table, not
/// the columns or constraints it adds).
pub fn on_relation<'a>(commands: &'a [Logged], relation: &str) -> Option<&'a Logged> {
    commands.iter().find(|c| c.object_type == "table" && c.touched().first().is_some_and(|t| t == relation))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(tag: &str, object_type: &str, identity: &str) -> Logged {
        Logged {
            at: "2026-12-01T00:00:00.000000Z".into(),
            xid: "1".into(),
            tag: tag.into(),
            object_type: object_type.into(),
            identity: identity.into(),
        }
    }

    /// Issue 46: any logged `ALTER TABLE t` excused every difference on `t` (a constraint
    /// dropped from the backup passed as "ALTER TABLE … after the copy's point").
    #[test]
    fn only_a_command_naming_the_object_itself_explains_it() {
        let log = vec![
            cmd("ALTER TABLE", "table", "public.orders"),
            cmd("CREATE INDEX", "index", "public.orders_total_idx"),
            cmd("CREATE SCHEMA", "schema", "reporting"),
            cmd("CREATE TRIGGER", "trigger", "audit on public.\"Customers\""),
            cmd("CREATE FUNCTION", "function", "public.f(integer)"),
            cmd("ALTER TABLE", "table constraint", "items_qty_check on public.items"),
            cmd("DROP TABLE", "table column", "public.items.note"),
        ];
        assert!(names(&log, "column", "public.orders.discount").is_none(), "not by its table's ALTER");
        assert!(names(&log, "constraint", "public.orders.orders_pkey").is_none(), "not by its table's ALTER");
        assert!(on_relation(&log, "public.orders").is_some(), "the table's own command, for what only it can say");
        assert!(names(&log, "table", "public.orders").is_some());
        assert_eq!(names(&log, "index", "public.orders.orders_total_idx").unwrap().tag, "CREATE INDEX");
        assert!(names(&log, "table", "reporting.daily").is_none(), "not by its schema's");
        assert!(names(&log, "schema", "reporting").is_some());
        assert!(names(&log, "trigger", "public.Customers.audit").is_some(), "quotes and `on` forms");
        assert!(names(&log, "constraint", "public.items.items_qty_check").is_some());
        assert!(names(&log, "function", "public.f(integer)").is_some());
        assert!(names(&log, "column", "public.items.note").is_some(), "a dropped column");
        assert!(names(&log, "table", "public.invoices").is_none());
        assert!(names(&log, "column", "public.items.qty").is_none());
        assert!(names(&log, "function", "public.g(integer)").is_none());
    }

    #[test]
    fn drchecks_own_objects_are_known_by_their_mark() {
        let m = Marked {
            tables: vec![
                TableName { schema: "drcheck".into(), name: "heartbeat".into() },
                TableName { schema: "drcheck".into(), name: "ddl_log".into() },
            ],
            ddl_log: None,
        };
        for (kind, name) in [
            ("schema", "drcheck"),
            ("table", "drcheck.heartbeat"),
            ("column", "drcheck.heartbeat.at"),
            ("index", "drcheck.heartbeat.heartbeat_pkey"),
            ("constraint", "drcheck.heartbeat.heartbeat_pkey"),
            ("table", "drcheck.ddl_log"),
            ("function", "drcheck.log_ddl()"),
        ] {
            assert!(m.owns(kind, name), "{kind} {name}");
        }
        assert!(!m.owns("table", "drcheck.other"));
        assert!(!m.owns("table", "public.heartbeat"));
        assert!(!m.owns("function", "public.log_ddl()"));
    }
}
