//! `indexes`: no index of the restored copy is invalid or unready, and every
//! constraint is validated.

use crate::context::{Context, Validator};
use crate::finding::Said;
use crate::finding::{Finding, Status, some_of};
use async_trait::async_trait;

pub struct Indexes;

#[async_trait]
impl Validator for Indexes {
    fn needs_restore(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        "indexes"
    }

    fn self_check(&self) -> bool {
        true
    }

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        let name = self.name();
        let invalid: Result<Vec<(String,)>, _> = sqlx::query_as(
            "select n.nspname || '.' || c.relname || case when not i.indisvalid then ' (invalid)' else ' (not ready)' end
               from pg_index i join pg_class c on c.oid = i.indexrelid join pg_namespace n on n.oid = c.relnamespace
              where not i.indisvalid or not i.indisready
              order by 1",
        )
        .fetch_all(&cx.restored)
        .await;
        let unvalidated: Result<Vec<(String,)>, _> = sqlx::query_as(
            "select n.nspname || '.' || r.relname || ': constraint ' || c.conname
               from pg_constraint c join pg_class r on r.oid = c.conrelid join pg_namespace n on n.oid = r.relnamespace
              where not c.convalidated
              order by 1",
        )
        .fetch_all(&cx.restored)
        .await;
        let counted: Result<(i64, i64), _> = sqlx::query_as(
            "select (select count(*) from pg_index i join pg_class c on c.oid = i.indexrelid
                       join pg_namespace n on n.oid = c.relnamespace
                      where n.nspname not in ('pg_catalog', 'information_schema') and n.nspname not like 'pg\\_toast%'),
                    (select count(*) from pg_constraint c join pg_namespace n on n.oid = c.connamespace
                      where n.nspname not in ('pg_catalog', 'information_schema'))",
        )
        .fetch_one(&cx.restored)
        .await;
        let (invalid, unvalidated, (indexes, constraints)) = match (invalid, unvalidated, counted) {
            (Ok(a), Ok(b), Ok(c)) => (a, b, c),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                return vec![Finding::new(name, Status::Error, format!("querying the catalog: {}", e.said()))];
            }
        };
        let problems: Vec<String> = invalid.into_iter().chain(unvalidated).map(|(s,)| s).collect();
        if problems.is_empty() {
            vec![
                Finding::new(
                    name,
                    Status::Passed,
                    format!("{indexes} indexes valid, {constraints} constraints validated"),
                )
                .covered("indexes", indexes as u64)
                .covered("constraints", constraints as u64),
            ]
        } else {
            vec![Finding::new(name, Status::Failed, some_of(&problems, 20))]
        }
    }
}
