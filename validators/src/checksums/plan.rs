//! How a table is hashed: the row hash both sides compute, the key ranges a keyed table
//! is cut into, and the slice of a keyless table kept when sampling.

use crate::finding::TableName;

/// One query's worth of a table: keys in `[lo, hi)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Range {
    Keys(i64, i64),
}

/// Splits `[min, max]` into chunks of about `chunk_rows` rows, and keeps an evenly
/// spread subset when the table holds more than `sample_rows`.
pub(crate) fn plan(min: i64, max: i64, rows: f64, chunk_rows: u64, sample_rows: u64) -> (Vec<Range>, bool) {
    let span = (max as i128 - min as i128 + 1).max(1);
    // A table never analyzed has no estimate: assume its keys are dense.
    let rows = if rows >= 1.0 { rows } else { span as f64 };
    let density = if rows >= 1.0 { rows / span as f64 } else { 1.0 };
    let width = ((chunk_rows as f64 / density.max(1e-9)).ceil() as i128).clamp(1, span);
    let chunks = (span + width - 1) / width;
    let all: Vec<Range> = (0..chunks)
        .map(|i| {
            let lo = min as i128 + i * width;
            let hi = (lo + width).min(max as i128 + 1);
            Range::Keys(lo as i64, hi as i64)
        })
        .collect();
    if rows <= sample_rows as f64 {
        return (all, false);
    }
    let keep = (sample_rows as f64 / rows * all.len() as f64).ceil().max(1.0) as usize;
    let step = all.len() as f64 / keep as f64;
    let sampled: Vec<Range> = (0..keep).map(|i| all[((i as f64 * step) as usize).min(all.len() - 1)]).collect();
    (sampled, true)
}

/// Rows per 1024 kept when sampling a table of `rows` rows down to `sample_rows`.
pub(crate) fn sample_slice(rows: f64, sample_rows: u64) -> Option<u32> {
    (rows > sample_rows as f64).then(|| ((sample_rows as f64 / rows * 1024.0).ceil() as u32).clamp(1, 1024))
}

/// How a row is hashed: by its values (`hash_record_extended`: each column's own hash
/// function, no text rendering — about twice as fast), or by its text
/// (`hashtextextended(row::text)`) for tables with a column type that has no hash
/// function (json, xml, point, …). Both sides always use the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hash {
    Record,
    Text,
}

impl Hash {
    /// The hash of `row` (a row expression: [`Row`]), an `int8`. A record's hash combines
    /// its columns' hashes linearly (×31 + next), so a sum of them would not see two rows
    /// exchanging the values of one column; the record hash is hashed again, which no sum
    /// undoes.
    pub(crate) fn expr(self, row: &Row) -> String {
        let row = &row.0;
        match self {
            // Schema-qualified, with exact argument types: no overload the restored copy
            // defines elsewhere can be chosen instead (and `catalog` checks pg_catalog).
            Hash::Record => format!(
                "pg_catalog.hashint8extended(pg_catalog.hash_record_extended({row}, 0::pg_catalog.int8), 1::pg_catalog.int8)"
            ),
            Hash::Text => format!("pg_catalog.hashtextextended(({row})::pg_catalog.text, 0::pg_catalog.int8)"),
        }
    }
}

/// The row both sides hash: the whole row (`drcheck_row.*`), or — when a column was
/// added, dropped or retyped on one side (DDL after the copy's point, which `schema`
/// judges) — the columns both have, alike, in the primary's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row(pub(crate) String);

impl Row {
    pub(crate) fn whole() -> Row {
        Row("drcheck_row.*".into())
    }
}

/// The columns (name, type) of `t`, in order.
async fn columns(pool: &sqlx::PgPool, t: &TableName) -> Result<Vec<(String, String)>, sqlx::Error> {
    sqlx::query_as(
        "select a.attname::pg_catalog.text, pg_catalog.format_type(a.atttypid, a.atttypmod)
           from pg_catalog.pg_attribute a
           join pg_catalog.pg_class c on c.oid = a.attrelid
           join pg_catalog.pg_namespace n on n.oid = c.relnamespace
          where n.nspname = $1 and c.relname = $2 and a.attnum > 0 and not a.attisdropped
          order by a.attnum",
    )
    .bind(&t.schema)
    .bind(&t.name)
    .fetch_all(pool)
    .await
}

/// The row of `t` both sides hash, and the columns left out (see [`Row`]).
pub(crate) async fn common_row(
    primary: &crate::primary::PrimaryDb,
    restored: &sqlx::PgPool,
    t: &TableName,
) -> Result<(Row, Vec<String>), sqlx::Error> {
    let (p, r) = tokio::join!(primary.timed(columns(&primary.pool, t)), columns(restored, t));
    let (p, r) = (p?, r?);
    if p == r {
        return Ok((Row::whole(), vec![]));
    }
    let common: Vec<&(String, String)> = p.iter().filter(|c| r.contains(c)).collect();
    let left_out: Vec<String> =
        p.iter().chain(r.iter()).filter(|c| !common.contains(c)).map(|(n, _)| n.clone()).collect();
    let cols: Vec<String> =
        common.iter().map(|(n, _)| format!("drcheck_row.{}", drcheck_config::quote_ident(n))).collect();
    // `ROW(…)` (the keyword) is a record whatever the number of columns.
    Ok((Row(format!("ROW({})", cols.join(", "))), left_out))
}

/// How a keyless table is hashed: the same on both sides.
#[derive(Clone, Copy)]
pub(crate) struct BlockPlan<'a> {
    /// The row both sides hash.
    pub row: &'a Row,
    /// Where nothing tells changes since T: the `as_of` cut-off, less the grace band.
    pub cut: Option<&'a crate::context::Cut>,
    pub chunk_rows: u64,
    /// Rows per 1024 kept (sampling), if sampled.
    pub slice: Option<u32>,
    pub hash: Hash,
}

/// Whether every column of `t` can be hashed by value: asked of the primary's catalog.
/// Only built-in types (directly, or as the element of an array, the base of a domain
/// or the subtype of a range) whose default hash operator class exists: a type the
/// database defines hashes through functions the restored copy defines too, and an
/// enum's hash is its label's OID, which a logical restore reassigns. Those tables are
/// hashed by their text.
pub(crate) async fn hash_for(primary: &crate::primary::PrimaryDb, t: &TableName) -> Result<Hash, sqlx::Error> {
    let sql = format!(
        "with recursive parts(t) as (
           select a.atttypid from pg_attribute a
            where a.attrelid = '{table}'::regclass and a.attnum > 0 and not a.attisdropped
           union
           select coalesce(nullif(ty.typbasetype, 0),
                           case when ty.typcategory = 'A' then nullif(ty.typelem, 0) end,
                           (select r.rngsubtype from pg_range r where r.rngtypid = ty.oid))
             from parts p join pg_type ty on ty.oid = p.t
            where ty.typtype in ('d', 'r') or ty.typcategory = 'A')
         select coalesce(bool_and(
                  case when ty.typtype in ('d', 'r') or ty.typcategory = 'A' then true
                       else ty.typtype = 'b' and ty.oid < {first} and exists (
                              select 1 from pg_opclass c join pg_am am on am.oid = c.opcmethod
                               where am.amname = 'hash' and c.opcdefault and c.opcintype = ty.oid) end), true)
           from parts join pg_type ty on ty.oid = parts.t",
        table = t.quoted().replace('\'', "''"),
        first = crate::guard::FIRST_NORMAL_OID,
    );
    let by_value: bool = primary.timed(sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(&primary.pool)).await?;
    Ok(if by_value { Hash::Record } else { Hash::Text })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyless_tables_are_sampled_by_a_slice_of_the_hash_space() {
        assert_eq!(sample_slice(1000.0, 5000), None);
        assert_eq!(sample_slice(10_000_000.0, 5_000_000), Some(512));
        assert_eq!(sample_slice(1e12, 10), Some(1), "never an empty sample");
    }

    #[test]
    fn small_tables_are_chunked_whole() {
        let (r, sampled) = plan(1, 1000, 1000.0, 300, 10_000);
        assert!(!sampled);
        assert_eq!(r, vec![Range::Keys(1, 301), Range::Keys(301, 601), Range::Keys(601, 901), Range::Keys(901, 1001)]);
    }

    #[test]
    fn large_tables_are_sampled_across_the_key_range() {
        let (r, sampled) = plan(1, 10_000_000, 10_000_000.0, 100_000, 1_000_000);
        assert!(sampled);
        assert_eq!(r.len(), 10);
        let Range::Keys(first, _) = r[0];
        let Range::Keys(_, last) = r[9];
        assert_eq!(first, 1);
        assert!(last > 9_000_000, "spread to the end: {last}");
    }

    #[test]
    fn sparse_keys_widen_the_chunks() {
        let (r, _) = plan(0, 999_999, 1000.0, 100, 1_000_000);
        assert_eq!(r.len(), 10);
    }
}
