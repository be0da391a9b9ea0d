//! drcheck's validators: checks that turn "the restore exited 0" into "this backup
//! holds our data, intact". Each [`Validator`] looks at the restored copy and, where it
//! compares, at the primary, and returns [`Finding`]s: `passed`, `failed`, `skipped`
//! (could not run — never counted as passed) or `error`, each with a precise detail.
//!
//! Self-checks (sandbox only): `amcheck`, `full_read`, `sequences`, `indexes`.
//! Comparisons with the primary: `schema`, `row_counts`, `checksums`, `large_objects`
//! (which also checks the copy's references to them), `freshness`, the user's
//! `custom` SQL checks, and `point_in_time` (where replay stopped, by the primary's
//! heartbeat).
//!
//! Validators never know where a backup came from and never see storage credentials.
//! The primary is reached only through [`primary::PrimaryDb`]: read-only sessions with a
//! `statement_timeout`, a pool as large as the allowed concurrency, every query counted
//! and timed. Every identifier reaching SQL is quoted with `quote_ident`.

mod amcheck;
pub mod asof;
pub mod catalog;
pub mod checksums;
pub mod context;
pub mod databases;
pub mod ddl;
pub mod finding;
pub mod guard;
mod layers;
pub mod primary;
mod registry;
pub use checksums::record_hash_sql;
mod custom;
mod freshness;
mod full_read;
mod indexes;
mod large_objects;
mod point_in_time;
mod row_counts;
mod schema;
mod sequences;

pub use context::{Context, PhaseDeadline, Primary, RestoredAccess, Rotation, ToolLauncher, Validator};
pub use finding::{
    COVERED, Finding, MAX_DETAIL, MAX_INCONCLUSIVE, Said, Status, TableName, UNDECIDED_ROWS, UNDECIDED_TABLES, bounded,
    enforce_coverage, human_bytes, in_scope, some_of,
};
pub use registry::{Capabilities, capabilities, names_where, run_all, selected};
