//! `checksums`: an order-independent content hash of every table — the count and the
//! sum of each row's hash — computed on both sides (with identical session settings, so
//! row text is identical) and compared **as of the copy's point T** ([`crate::asof`]):
//! rows unchanged on the primary since T must hash the same; rows changed since are
//! counted, never a failure; what cannot be told from a change since T is inconclusive,
//! and the finding says what would prove it.
//!
//! Tables with a single-column integer key are hashed in key ranges of about
//! `checksum_chunk_rows` rows ([`keyed`]), so no query on the primary runs long, and a
//! range that differs is drilled key by key; tables larger than `checksum_sample_rows`
//! are sampled in whole ranges spread over the keys, and the detail says how many rows
//! were compared. Other tables are hashed in block ranges ([`blocks`]).
//!
//! Rows are hashed by value (`hash_record_extended`, hashed again so that no sum can
//! undo two rows exchanging a column's values) where every column is of a built-in type
//! with a hash function, else by their text (types the database defines, whose hash the
//! restored copy would compute with its own functions, and enums, whose hash is an OID
//! that a logical restore reassigns); both sides run each range at the same time, and a
//! table's ranges run up to `primary_concurrency` at once. Built-ins are called
//! schema-qualified with exact argument types.

mod blocks;
mod keyed;
pub(crate) mod plan;

use crate::catalog;
use crate::context::{Context, Validator};
use crate::finding::{Failure, INSUFFICIENT_PRIVILEGE, UNDEFINED_FUNCTION};
use crate::finding::{Finding, Status, TableName, some_of};
use async_trait::async_trait;
use drcheck_config::quote_ident;
use futures::stream::{self, StreamExt};
use plan::{Hash, Range};

pub struct Checksums;

/// The measurement that says a rotation's slice was compared through (`primary_read_budget`).
pub const SLICE_DONE: &str = "rotation_slice_done";

/// The expression `checksums` sums for each row of a table aliased `drcheck_row` whose
/// columns all hash by value (for the property test that no exchange of values balances).
pub fn record_hash_sql() -> String {
    Hash::Record.expr(&plan::Row::whole())
}

/// What comparing (part of) a table found.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Rows that hash the same on both sides.
    compared: i64,
    /// Rows the primary changed (wrote) since T: counted, not compared.
    changed: i64,
    /// Rows only the copy holds — deleted on the primary since T, versions of rows
    /// changed since, or invented: counted and named, never compared.
    deleted: i64,
    /// Failures: rows that differ though the primary did not change them since T.
    differs: Vec<String>,
    /// Parts that could not be decided (neither proven nor a change since T).
    unproven: Vec<String>,
    /// The primary's rows in those parts.
    undecided_rows: i64,
    sampled: bool,
    estimated: f64,
    /// With a rotation: the table's ranges, and how many this run compared.
    ranges: Option<(usize, usize)>,
    /// Columns only one side has, or has otherwise (DDL since the point): not hashed.
    left_out: Vec<String>,
}

impl Tally {
    fn add(&mut self, o: Tally) {
        self.compared += o.compared;
        self.changed += o.changed;
        self.deleted += o.deleted;
        self.differs.extend(o.differs);
        self.unproven.extend(o.unproven);
        self.undecided_rows += o.undecided_rows;
    }
}

async fn compare_with(
    cx: &Context,
    primary: &crate::primary::PrimaryDb,
    t: &TableName,
    hash: Hash,
) -> Result<Tally, Failure> {
    let cut = cx.settled_cut(t).await.map_err(Failure::from)?;
    let key = primary.timed(catalog::integer_key(&primary.pool, t)).await.map_err(Failure::from)?;
    let estimated = primary.timed(catalog::estimated_rows(&primary.pool, t)).await.unwrap_or(0.0);
    let (row, left_out) = plan::common_row(primary, &cx.restored, t).await.map_err(Failure::from)?;
    let mut tally = Tally { estimated, left_out, ..Tally::default() };
    let Some(k) = key else {
        // Both sides lay rows out differently: a table without an integer key is compared
        // whole or not at all. Under a rotation each one has a slice of its own (by its
        // name), in which it is read whole; sampling would read it all and keep some rows.
        let slice = match &cx.rotation {
            Some(r) => {
                let mine = r.takes(&t.to_string(), 0);
                tally.ranges = Some((1, usize::from(mine)));
                if !mine {
                    return Ok(tally);
                }
                None
            }
            None => plan::sample_slice(estimated, cx.settings.checksum_sample_rows),
        };
        tally.sampled = slice.is_some();
        let bp = hash.blocks(&row, cut.as_ref(), cx.settings.checksum_chunk_rows, slice);
        blocks::compare(cx, primary, t, &bp, &cx.since, &mut tally).await?;
        return Ok(tally);
    };
    if tally.left_out.contains(&k) {
        return Err(format!("its key column {k} is not the same on both sides").into());
    }
    // The key range is the primary's alone: rows the copy holds beyond it are counted
    // (not on the primary now) and can never open ranges of their own.
    let sql = format!("select min({0})::bigint, max({0})::bigint from {1}", quote_ident(&k), t.quoted());
    let q = sqlx::query_as::<_, (Option<i64>, Option<i64>)>(sqlx::AssertSqlSafe(sql));
    let p = primary.timed(q.fetch_one(&primary.pool)).await.map_err(Failure::from)?;
    let keyed = keyed::Keyed { t, key: &k, hash, row: &row, since: &cx.since, cut: cut.as_ref() };
    let ((ranges, sampled), (lo, hi)) = match p {
        // A rotation takes its slice of every range; otherwise large tables are sampled.
        (Some(lo), Some(hi)) if cx.rotation.is_some() => {
            (plan::plan(lo, hi, estimated, cx.settings.checksum_chunk_rows, u64::MAX), (lo, hi.saturating_add(1)))
        }
        (Some(lo), Some(hi)) => (
            plan::plan(lo, hi, estimated, cx.settings.checksum_chunk_rows, cx.settings.checksum_sample_rows),
            (lo, hi.saturating_add(1)),
        ),
        _ => ((vec![], false), (0, 0)),
    };
    tally.deleted += keyed::copy_outside(cx, &keyed, lo, hi).await.map_err(Failure::from)?;
    tally.sampled = sampled;
    let ranges = match &cx.rotation {
        Some(r) if !ranges.is_empty() => {
            let all = ranges.len();
            let mine: Vec<Range> = ranges
                .into_iter()
                .enumerate()
                .filter(|(i, _)| r.takes(&t.to_string(), *i))
                .map(|(_, range)| range)
                .collect();
            tally.ranges = Some((all, mine.len()));
            mine
        }
        _ => ranges,
    };
    keyed::compare(cx, primary, &keyed, ranges, &mut tally).await?;
    Ok(tally)
}

async fn compare_table(cx: &Context, primary: &crate::primary::PrimaryDb, t: &TableName) -> Result<Tally, Failure> {
    let hash = plan::hash_for(primary, t).await.map_err(Failure::from)?;
    match compare_with(cx, primary, t, hash).await {
        // A type the catalog check let through without a usable hash: by text, then.
        Err(e) if hash == Hash::Record && e.is(UNDEFINED_FUNCTION) => compare_with(cx, primary, t, Hash::Text).await,
        Err(e) if e.is(INSUFFICIENT_PRIVILEGE) => {
            Err(crate::context::explain_primary_error(primary, t, &e).await.into())
        }
        other => other,
    }
}

#[async_trait]
impl Validator for Checksums {
    fn catches(&self) -> &'static [&'static str] {
        &["flipped_page", "changed_row"]
    }
    fn reads_everything(&self) -> bool {
        true
    }
    fn weighs_undecided(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        "checksums"
    }

    async fn validate(&self, cx: &Context) -> Vec<Finding> {
        let name = self.name();
        let (primary, common, note) = match cx.common_tables(name).await {
            Ok(v) => v,
            Err(finding) => return vec![finding],
        };
        let mut outcomes: Vec<(TableName, Result<Tally, Failure>)> = stream::iter(common)
            .map(|t| async move {
                let o = compare_table(cx, primary, &t).await;
                (t, o)
            })
            .buffer_unordered(cx.settings.primary_concurrency.max(1) as usize)
            .collect()
            .await;
        outcomes.sort_by(|a, b| a.0.cmp(&b.0));
        let (mut differs, mut failed, mut notes, mut inconclusive) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut rows, mut changed, mut deleted, mut proven, mut undecided_rows) = (0i64, 0i64, 0i64, 0u64, 0i64);
        let mut per_table = Vec::new();
        let mut beyond = Vec::new();
        let mut later = 0usize;
        for (t, o) in &outcomes {
            let tally = match o {
                Ok(tally) => tally,
                Err(e) => {
                    failed.push(format!("{t}: {e}"));
                    continue;
                }
            };
            // None of its ranges is this run's (a small or keyless table: its turn comes).
            if tally.ranges.is_some_and(|(_, mine)| mine == 0) {
                later += 1;
                continue;
            }
            rows += tally.compared;
            changed += tally.changed;
            deleted += tally.deleted;
            undecided_rows += tally.undecided_rows;
            if tally.deleted > 0 {
                beyond.push(format!("{t}: {}", tally.deleted));
            }
            if !tally.differs.is_empty() {
                differs.push(format!("{t}: {}", tally.differs.join(", ")));
                per_table.push((t.to_string(), false));
            } else if !tally.unproven.is_empty() {
                inconclusive.push(format!(
                    "{t}: {} — to prove it, {}",
                    some_of(&tally.unproven, 3),
                    cx.since.how_to_prove()
                ));
                per_table.push((t.to_string(), false));
            } else {
                proven += 1;
                per_table.push((t.to_string(), true));
            }
            if tally.sampled {
                notes.push(format!("{t}: sampled {} of ~{} rows", tally.compared, tally.estimated.max(0.0) as i64));
            }
            if let Some((all, mine)) = tally.ranges
                && mine < all
            {
                notes.push(format!("{t}: {mine} of its {all} key ranges compared this run"));
            }
            if !tally.left_out.is_empty() {
                notes.push(format!(
                    "{t}: compared on the columns both sides have alike ({} left out; schema judges them)",
                    tally.left_out.join(", ")
                ));
            }
        }
        notes.extend(note);
        let mut detail = String::new();
        if let Some(r) = &cx.rotation {
            detail.push_str(&format!("; {}", r.describe()));
            if later > 0 {
                detail.push_str(&format!("; {later} tables not compared this run (their slice comes in another)"));
            }
        }
        if changed > 0 {
            detail.push_str(&format!(
                "; {changed} rows changed on the primary since the copy's point (counted, not compared)"
            ));
        }
        if deleted > 0 {
            detail.push_str(&format!(
                "; {deleted} rows only the copy holds — not on the primary now: deleted or changed there since the \
                 copy's point, or invented (counted, not compared: {})",
                some_of(&beyond, 10)
            ));
        }
        detail.push_str(&format!("; {}", cx.since.describe()));
        if !notes.is_empty() {
            detail.push_str(&format!("; {}", some_of(&notes, 10)));
        }
        let finding = if !differs.is_empty() {
            Finding::new(
                name,
                Status::Failed,
                format!(
                    "{} of {} tables hold rows that differ from the primary's, which did not change them since the copy's point: {}{}{detail}",
                    differs.len(),
                    outcomes.len(),
                    some_of(&differs, 20),
                    crate::finding::also_could_not("hash", &failed)
                ),
            )
        } else if !failed.is_empty() {
            Finding::new(name, Status::Error, format!("could not hash: {}", some_of(&failed, 10)))
        } else {
            Finding::new(name, Status::Passed, format!("{proven} tables, {rows} rows hash the same{detail}"))
                .covered("tables", proven)
                .covered("rows", rows as u64)
        };
        // The rotation's slice is done when nothing in it failed or could not run
        // (a slice may hold no table: small tables spread over the slices).
        let slice_done = cx.rotation.is_some() && differs.is_empty() && failed.is_empty();
        let finding = if slice_done { finding.with(SLICE_DONE, 1.0) } else { finding };
        let mut finding = finding
            .with("rows_compared", rows as f64)
            .with("rows_changed_since", changed as f64)
            .with("rows_deleted_since", deleted as f64)
            .with(crate::finding::UNDECIDED_ROWS, undecided_rows as f64)
            .with(crate::finding::UNDECIDED_TABLES, inconclusive.len() as f64)
            .inconclusive(inconclusive);
        finding.per_table = per_table.into_boxed_slice();
        vec![finding]
    }
}
