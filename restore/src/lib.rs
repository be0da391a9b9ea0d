//! drcheck's restore side: where backups live and how one becomes a running database.
//!
//! - [`store`]: the [`BackupStore`] trait with S3 (aws-sdk-s3) and filesystem
//!   implementations, and [`select_latest`], which picks the newest backup under a prefix.
//! - [`format`]: backup formats, detected from content (magic bytes), never from names.
//! - [`sandbox`]: the throwaway PostgreSQL cluster a backup is restored into. It listens
//!   only on a private unix socket and is torn down when dropped.
//! - [`logical`]: streaming a pg_dump archive from a store into `pg_restore`.
//!
//! This crate never compares data: that is `drcheck-validators`' job.

pub mod barman;
pub mod breaker;
pub mod contain;
pub mod decrypt;
pub mod delegate;
pub mod error;
pub mod fetch;
pub mod format;
pub mod job;
pub mod leftovers;
pub mod logical;
pub mod objects;
pub mod pgbackrest;
pub mod pgbin;
pub mod physical;
pub mod pool;
pub mod reach;
pub mod recovery;
pub mod request;
pub mod retry;
pub mod sandbox;
pub mod store;
pub mod unpack;

pub use error::{Blame, RestoreError, Stage, StoreError};
pub use format::BackupFormat;
pub use sandbox::{Sandbox, SandboxOptions};
pub use store::{Backup, BackupObject, BackupStore, open_store, select_latest};
