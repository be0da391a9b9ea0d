//! `sequences`: every sequence that feeds a column (serial, identity) is at or past the
//! largest value in that column — otherwise the first insert after a restore collides.

use crate::{Context, Finding, Status, TableName, Validator, some_of};
use async_trait::async_trait;
use drcheck_config::quote_ident;

pub struct Sequences;

#[async_trait]
impl Validator for Sequences {
    fn name(&self) -> &'static str {
        "sequences"
    }

    fn self_check(&self) -> bool {
        true
    }

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        let name = self.name();
        let rows: Result<Vec<(String, String, Option<String>, i64, String, String, String)>, _> = sqlx::query_as(
            "select s.schemaname::text, s.sequencename::text, s.last_value::text, s.increment_by,
                    n.nspname::text, c.relname::text, a.attname::text
               from pg_sequences s
               join pg_namespace sn on sn.nspname = s.schemaname
               join pg_class sc on sc.relnamespace = sn.oid and sc.relname = s.sequencename
               join pg_depend d on d.classid = 'pg_class'::regclass and d.objid = sc.oid
                               and d.refclassid = 'pg_class'::regclass and d.deptype in ('a', 'i')
               join pg_class c on c.oid = d.refobjid join pg_namespace n on n.oid = c.relnamespace
               join pg_attribute a on a.attrelid = c.oid and a.attnum = d.refobjsubid
              order by 1, 2",
        )
        .fetch_all(&cx.restored)
        .await;
        let rows = match rows {
            Ok(r) => r,
            Err(e) => return vec![Finding::new(name, Status::Error, format!("listing sequences: {e}"))],
        };
        let mut behind = Vec::new();
        for (sschema, sname, last, increment, tschema, tname, column) in &rows {
            let table = TableName { schema: tschema.clone(), name: tname.clone() };
            let sql = format!("select max({})::text from {}", quote_ident(column), table.quoted());
            let max: Result<Option<String>, _> =
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(&cx.restored).await;
            let max = match max {
                Ok(m) => m,
                Err(e) => return vec![Finding::new(name, Status::Error, format!("max of {table}.{column}: {e}"))],
            };
            let (Some(max), descending) = (max.and_then(|m| m.parse::<i128>().ok()), *increment < 0) else { continue };
            let last_v = last.as_deref().and_then(|l| l.parse::<i128>().ok());
            let ok = match last_v {
                None => false,
                Some(l) if descending => l <= max,
                Some(l) => l >= max,
            };
            if !ok {
                let at = last.clone().unwrap_or_else(|| "never used".into());
                behind.push(format!("{sschema}.{sname} is at {at}, but max({table}.{column}) is {max}"));
            }
        }
        if behind.is_empty() {
            vec![
                Finding::new(name, Status::Passed, format!("{} column sequences at or past their columns", rows.len()))
                    .covered("sequences", rows.len() as u64),
            ]
        } else {
            vec![Finding::new(name, Status::Failed, format!("{} behind: {}", behind.len(), some_of(&behind, 20)))]
        }
    }
}
