//! Catalog queries shared by validators.

use crate::TableName;
use sqlx::PgPool;

/// User tables (plain and partitioned), excluding system schemas and extension members.
pub async fn tables(pool: &PgPool) -> Result<Vec<TableName>, sqlx::Error> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "select n.nspname::text, c.relname::text
           from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where c.relkind in ('r', 'p')
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
