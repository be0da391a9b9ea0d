//! Catalog queries shared by validators. System schemas and objects that belong to
//! extensions are left out everywhere.

use crate::finding::TableName;
use sqlx::PgPool;

/// User tables (plain and partitioned parents; partitions are covered by their parent).
/// Listed from what holds data — every plain table — and a partition is left to its
/// parent only when it has one that is partitioned: a flag alone cannot take a table
/// out of the list (the `catalog` check names such a flag too).
pub async fn tables(pool: &PgPool) -> Result<Vec<TableName>, sqlx::Error> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "select n.nspname::text, c.relname::text
           from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where c.relkind in ('r', 'p')
            and not exists (select 1 from pg_inherits i join pg_class p on p.oid = i.inhparent
                             where i.inhrelid = c.oid and p.relkind = 'p')
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

/// Unlogged user tables (a base backup holds none of their data).
pub async fn unlogged_tables(pool: &PgPool) -> Result<Vec<TableName>, sqlx::Error> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "select n.nspname::text, c.relname::text
           from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where c.relkind in ('r', 'p') and c.relpersistence = 'u'
            and n.nspname not in ('pg_catalog', 'information_schema')
          order by 1, 2",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(schema, name)| TableName { schema, name }).collect())
}

/// Whether column `col` of `t` holds zone-less times (`timestamp`, `date`).
pub async fn zoneless_column(pool: &PgPool, t: &TableName, col: &str) -> Result<bool, sqlx::Error> {
    let ty: Option<String> = sqlx::query_scalar(
        "select pg_catalog.format_type(a.atttypid, null)
           from pg_attribute a join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = $1 and c.relname = $2 and a.attname = $3 and not a.attisdropped",
    )
    .bind(&t.schema)
    .bind(&t.name)
    .bind(col)
    .fetch_optional(pool)
    .await?;
    Ok(matches!(ty.as_deref(), Some("timestamp without time zone") | Some("date")))
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

/// The columns of a table's primary key, in the key's order (none without one).
pub async fn primary_key(pool: &PgPool, t: &TableName) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "select a.attname::text
           from pg_index i
           join pg_class c on c.oid = i.indrelid join pg_namespace n on n.oid = c.relnamespace
           cross join lateral pg_catalog.unnest(i.indkey::pg_catalog.int2[]) with ordinality k(attnum, pos)
           join pg_attribute a on a.attrelid = c.oid and a.attnum = k.attnum
          where i.indisprimary and n.nspname = $1 and c.relname = $2
          order by k.pos",
    )
    .bind(&t.schema)
    .bind(&t.name)
    .fetch_all(pool)
    .await
}

/// Blocks read to estimate a never-analyzed table's rows.
const ESTIMATE_BLOCKS: i64 = 128;

/// The planner's row estimate (cheap; exact enough to size chunks and samples). A table
/// never analyzed has none (`reltuples` is −1): then its rows are estimated from its
/// size and the rows of its first blocks — bounded work, so a sampling bound holds
/// without statistics too.
pub async fn estimated_rows(pool: &PgPool, t: &TableName) -> Result<f64, sqlx::Error> {
    let row: Option<(f32, i64)> = sqlx::query_as(
        "select c.reltuples::float4,
                (pg_catalog.pg_relation_size(c.oid) / pg_catalog.current_setting('block_size')::int)::int8
           from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = $1 and c.relname = $2",
    )
    .bind(&t.schema)
    .bind(&t.name)
    .fetch_optional(pool)
    .await?;
    let Some((reltuples, blocks)) = row else { return Ok(0.0) };
    if reltuples >= 0.0 || blocks == 0 {
        return Ok(reltuples.max(0.0) as f64);
    }
    let read = blocks.min(ESTIMATE_BLOCKS);
    let sql = format!("select pg_catalog.count(*) from {} where ctid < $1::pg_catalog.tid", t.quoted());
    let counted: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(format!("({read},0)")).fetch_one(pool).await?;
    Ok(counted as f64 * blocks as f64 / read as f64)
}
