//! Catalog queries shared by validators. System schemas and objects that belong to
//! extensions are left out everywhere.

use crate::TableName;
use sqlx::PgPool;

/// User tables (plain and partitioned parents; partitions are covered by their parent).
pub async fn tables(pool: &PgPool) -> Result<Vec<TableName>, sqlx::Error> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "select n.nspname::text, c.relname::text
           from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where c.relkind in ('r', 'p') and not c.relispartition
            and n.nspname not in ('pg_catalog', 'information_schema')
            and n.nspname not like 'pg\\_toast%' and n.nspname not like 'pg\\_temp%'
            and not exists (select 1 from pg_depend d
                             where d.classid = 'pg_class'::regclass and d.objid = c.oid and d.deptype = 'e')
          order by 1, 2",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(schema, name)| TableName { schema, name }).collect())
}

/// A table's single-column integer primary key, if it has one.
pub async fn integer_key(pool: &PgPool, t: &TableName) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(
        "select a.attname::text
           from pg_index i
           join pg_class c on c.oid = i.indrelid join pg_namespace n on n.oid = c.relnamespace
           join pg_attribute a on a.attrelid = c.oid and a.attnum = i.indkey[0]
          where i.indisprimary and i.indnatts = 1 and n.nspname = $1 and c.relname = $2
            and a.atttypid in ('int2'::regtype, 'int4'::regtype, 'int8'::regtype)",
    )
    .bind(&t.schema)
    .bind(&t.name)
    .fetch_optional(pool)
    .await
}

/// The planner's row estimate (cheap; exact enough to size chunks and samples);
/// 0 when the table was never analyzed.
pub async fn estimated_rows(pool: &PgPool, t: &TableName) -> Result<f64, sqlx::Error> {
    let est: Option<f32> = sqlx::query_scalar(
        "select greatest(c.reltuples, 0)::float4 from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = $1 and c.relname = $2",
    )
    .bind(&t.schema)
    .bind(&t.name)
    .fetch_optional(pool)
    .await?;
    Ok(est.unwrap_or(0.0) as f64)
}
