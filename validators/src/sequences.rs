//! `sequences`: every sequence that feeds a column (serial, identity) is at or past the
//! largest value in that column — otherwise the first insert after a restore collides.

use crate::context::{Context, Validator};
use crate::finding::Said;
use crate::finding::{Finding, Status, TableName, some_of};
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
        // Each column sequence with its column; its state is read from the sequence
        // itself (`last_value`, `is_called`): `pg_sequences.last_value` is NULL after
        // `setval(…, n, false)`, whose next value is n.
        let rows: Result<Vec<(String, String, i64, String, String, String)>, _> = sqlx::query_as(
            "select sn.nspname::text, sc.relname::text, s.seqincrement,
                    n.nspname::text, c.relname::text, a.attname::text
               from pg_sequence s
               join pg_class sc on sc.oid = s.seqrelid
               join pg_namespace sn on sn.oid = sc.relnamespace
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
            Err(e) => return vec![Finding::new(name, Status::Error, format!("listing sequences: {}", e.said()))],
        };
        let mut behind = Vec::new();
        for (sschema, sname, increment, tschema, tname, column) in &rows {
            let table = TableName { schema: tschema.clone(), name: tname.clone() };
            let sequence = TableName { schema: sschema.clone(), name: sname.clone() };
            let descending = *increment < 0;
            // The column's extreme in the sequence's direction.
            let extreme = if descending { "min" } else { "max" };
            let sql = format!(
                "select pg_catalog.{extreme}({})::pg_catalog.text from {}",
                quote_ident(column),
                table.quoted()
            );
            let state = format!("select last_value::pg_catalog.text, is_called from {}", sequence.quoted());
            let extreme_v: Result<Option<String>, _> =
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(&cx.restored).await;
            let seq: Result<(String, bool), _> =
                sqlx::query_as(sqlx::AssertSqlSafe(state)).fetch_one(&cx.restored).await;
            let (extreme_v, (last, is_called)) = match (extreme_v, seq) {
                (Ok(m), Ok(s)) => (m, s),
                (Err(e), _) => {
                    return vec![Finding::new(
                        name,
                        Status::Error,
                        format!("{extreme} of {table}.{column}: {}", e.said()),
                    )];
                }
                (_, Err(e)) => {
                    return vec![Finding::new(name, Status::Error, format!("reading {sequence}: {}", e.said()))];
                }
            };
            let (Some(m), Ok(l)) = (extreme_v.and_then(|m| m.parse::<i128>().ok()), last.parse::<i128>()) else {
                continue;
            };
            if !next_is_free(l, is_called, descending, m) {
                let next = if is_called { format!("{l} (used)") } else { format!("{l}, not yet used") };
                behind.push(format!("{sequence} is at {next}, but {extreme}({table}.{column}) is {m}"));
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

/// Whether a sequence at `last` (`is_called`: `last` was handed out; else it is the next
/// value) gives next a value past `extreme`, the column's max (ascending) or min
/// (descending).
fn next_is_free(last: i128, is_called: bool, descending: bool, extreme: i128) -> bool {
    match (descending, is_called) {
        (false, true) => last >= extreme,
        (false, false) => last > extreme,
        (true, true) => last <= extreme,
        (true, false) => last < extreme,
    }
}

#[cfg(test)]
mod tests {
    use super::next_is_free;

    #[test]
    fn a_sequence_not_yet_called_hands_out_its_last_value_next() {
        // setval(s, 10, false): the next value is 10.
        assert!(next_is_free(10, false, false, 9));
        assert!(!next_is_free(10, false, false, 10));
        // setval(s, 10): 10 was handed out, 11 is next.
        assert!(next_is_free(10, true, false, 10));
        assert!(!next_is_free(10, true, false, 11));
        // Descending: the column's minimum matters.
        assert!(next_is_free(-10, true, true, -10));
        assert!(!next_is_free(-10, false, true, -10));
    }
}
