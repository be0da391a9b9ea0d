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

pub mod error;
pub mod events;
pub mod job;
mod layers;
pub mod open;
pub mod request;
pub mod server;
pub mod source;
pub mod sources;
pub mod store;
pub mod transfer;

// The layers' modules by their short names, for the binary.
pub use server::{contain, leftovers, pgbin, reach, recovery, sandbox, tools};
pub use sources::{barman, delegate, objects, pgbackrest, physical, plain};
pub use store::{breaker, pool, retry};
pub use transfer::{decrypt, envelope, fetch, format, peel, stream, unpack};

pub use error::{Blame, RestoreError, Stage, StoreError};
pub use events::{Events, RestoreEvent};
pub use format::BackupFormat;
pub use open::open_source;
pub use sandbox::{Sandbox, SandboxOptions};
pub use source::{Archive, Catalog, Repository, Source};
pub use store::{Backup, BackupObject, BackupStore, open_store, select_latest};
