//! `full_read`: every table read end to end, each value detoasted and decompressed, so
//! an unreadable page or TOAST chunk anywhere fails the check, naming the table.
//!
//! The server reads each table into `COPY … TO '/dev/null' (FORMAT binary)`: nothing
//! crosses a socket and no client process parses it (against `pg_dump --data-only` to
//! nowhere, as before: 3.5 s instead of 6.5 s on a 2.2 GB database, and ~3 CPU-seconds
//! of client work gone — the cores go to the checks running beside it). The sandbox's
//! server may write `/dev/null` (its Landlock rules grant it); drcheck connects to the
//! sandbox as its superuser, which COPY to a file requires.

use crate::context::{Context, Validator};
use crate::finding::Said;
use crate::finding::{Finding, Status, TableName};
use async_trait::async_trait;

pub struct FullRead;

/// Failures named in the finding (the rest are counted).
const NAMED: usize = 5;

#[async_trait]
impl Validator for FullRead {
    fn catches(&self) -> &'static [&'static str] {
        &["flipped_page"]
    }
    fn reads_everything(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        "full_read"
    }

    fn self_check(&self) -> bool {
        true
    }

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        let name = self.name();
        // What pg_dump --data-only would read: every table, and every populated
        // materialized view (an unpopulated one has no data to read).
        let rows: Result<Vec<(String, String, bool)>, _> = sqlx::query_as(
            "select n.nspname::text, c.relname::text, c.relkind = 'm'
               from pg_class c join pg_namespace n on n.oid = c.relnamespace
              where (c.relkind = 'r' or (c.relkind = 'm' and c.relispopulated))
                and n.nspname not in ('pg_catalog', 'information_schema')
                and n.nspname not like 'pg_toast%' and n.nspname not like 'pg_temp%'
              order by 1, 2",
        )
        .fetch_all(&cx.restored)
        .await;
        let tables = match rows {
            Ok(t) => t,
            Err(e) => return vec![Finding::new(name, Status::Error, format!("listing tables: {}", e.said()))],
        };
        let mut failures = Vec::new();
        // A follower with a rotation reads one slice of each table's blocks a day.
        let slice = cx.rotation.as_ref().filter(|r| cx.on_follower && r.slices > 1);
        for (schema, table, matview) in &tables {
            let t = TableName { schema: schema.clone(), name: table.clone() };
            let source = match slice {
                Some(r) if !*matview => match blocks_of(cx, &t).await {
                    Ok(blocks) => {
                        let (lo, hi) = slice_of(blocks, r.slice, r.slices);
                        format!(
                            "(select * from {} where ctid >= '({lo},0)'::pg_catalog.tid and ctid < '({hi},0)'::pg_catalog.tid)",
                            t.quoted()
                        )
                    }
                    Err(e) => {
                        failures.push(format!("{t}: {e}"));
                        continue;
                    }
                },
                _ if *matview => format!("(select * from {})", t.quoted()),
                _ => t.quoted(),
            };
            let sql = format!("copy {source} to '/dev/null' (format binary)");
            // Identifiers quoted (`TableName::quoted`); the rest is constant.
            if let Err(e) = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&cx.restored).await {
                failures.push(format!("{t}: {}", crate::amcheck::tail(e.said().as_bytes(), 500)));
            }
        }
        let n = tables.len() as u64;
        if failures.is_empty() {
            let how = match slice {
                Some(r) => format!(
                    "slice {} of {} of the pages of all {n} tables read (every page within {} runs; materialized views whole)",
                    r.slice + 1,
                    r.slices,
                    r.slices
                ),
                None => format!("all {n} tables read end to end"),
            };
            return vec![Finding::new(name, Status::Passed, how).covered("tables", n)];
        }
        let count = failures.len();
        vec![Finding::new(
            name,
            Status::Failed,
            format!("reading the data failed in {count} of {n} tables: {}", crate::finding::some_of(&failures, NAMED)),
        )]
    }
}

/// The number of blocks of `t` in the copy.
async fn blocks_of(cx: &Context, t: &TableName) -> Result<i64, crate::finding::Failure> {
    let sql = format!(
        "select (pg_catalog.pg_relation_size('{}'::pg_catalog.regclass) / \
                 pg_catalog.current_setting('block_size')::pg_catalog.int8)::pg_catalog.int8",
        t.quoted().replace('\'', "''")
    );
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(&cx.restored).await?)
}

/// Blocks `[lo, hi)` of slice `slice` of `slices` of a table of `blocks` blocks; the last
/// slice runs past the end (pages added since the size was read).
fn slice_of(blocks: i64, slice: u32, slices: u32) -> (i64, i64) {
    let per = (blocks + i64::from(slices) - 1) / i64::from(slices).max(1);
    let lo = per * i64::from(slice);
    let hi = if slice + 1 >= slices { i64::from(u32::MAX) } else { per * (i64::from(slice) + 1) };
    (lo, hi)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_slices_cover_every_block_once() {
        for (blocks, slices) in [(0i64, 3u32), (10, 3), (1000, 21), (5, 7)] {
            let mut covered = vec![0u32; blocks as usize];
            for s in 0..slices {
                let (lo, hi) = super::slice_of(blocks, s, slices);
                for (b, c) in covered.iter_mut().enumerate() {
                    if (b as i64) >= lo && (b as i64) < hi {
                        *c += 1;
                    }
                }
            }
            assert!(covered.iter().all(|c| *c == 1), "{blocks} blocks, {slices} slices: {covered:?}");
        }
    }
}
