//! Backup stores: where backups live, how to list them and how to read one.

mod fs;
mod idle;
mod s3;

pub use fs::FsStore;
pub use idle::IdleTimeout;
pub use s3::S3Store;

use crate::error::StoreError;
use async_trait::async_trait;
use drcheck_config::StorageConfig;
use std::time::SystemTime;
use tokio::io::AsyncRead;

/// One object in a store that may be a backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupObject {
    pub key: String,
    pub size: u64,
    /// The store's last-modified time, taken as the backup's creation time.
    pub last_modified: SystemTime,
}

/// A stream of a backup's bytes.
pub type BackupReader = std::pin::Pin<Box<dyn AsyncRead + Send>>;

/// A place backups are kept. Implementations retry transient failures themselves and
/// report what is left as a [`StoreError`] saying whether the store was unreachable.
#[async_trait]
pub trait BackupStore: Send + Sync {
    /// Names the store for messages, e.g. `s3://bucket at http://host:port`. Never holds secrets.
    fn describe(&self) -> String;

    /// Every object whose key starts with `prefix`, in no particular order.
    async fn list(&self, prefix: &str) -> Result<Vec<BackupObject>, StoreError>;

    /// The object at `key`, or a not-found error.
    async fn stat(&self, key: &str) -> Result<BackupObject, StoreError>;

    /// Opens `key` for streaming.
    async fn open(&self, key: &str) -> Result<BackupReader, StoreError>;
}

/// Builds the store a storage config describes.
pub async fn open_store(name: &str, config: &StorageConfig) -> Box<dyn BackupStore> {
    match config {
        StorageConfig::S3(s3) => Box::new(S3Store::new(name, s3).await),
        StorageConfig::Filesystem { path } => Box::new(FsStore::new(path.clone())),
    }
}

/// Keys that sit beside backups but are not backups: checksum and signature sidecars,
/// manifests, "directories" and hidden files.
pub fn is_backup_key(key: &str) -> bool {
    const SIDECARS: [&str; 7] = [".sha256", ".sha512", ".md5", ".sig", ".asc", ".manifest", ".json"];
    let base = key.rsplit('/').next().unwrap_or(key);
    !key.ends_with('/')
        && !base.is_empty()
        && !base.starts_with('.')
        && !SIDECARS.iter().any(|s| base.to_ascii_lowercase().ends_with(s))
}

/// The newest backup among `objects` by last-modified time; ties (stores with
/// one-second resolution) are broken by the greater key, so the choice is stable.
pub fn select_latest(objects: &[BackupObject]) -> Option<&BackupObject> {
    objects
        .iter()
        .filter(|o| is_backup_key(&o.key))
        .max_by(|a, b| a.last_modified.cmp(&b.last_modified).then_with(|| a.key.cmp(&b.key)))
}

/// Every backup among `objects`, newest first, as [`select_latest`] orders them.
pub fn backups_newest_first(objects: &[BackupObject]) -> Vec<&BackupObject> {
    let mut v: Vec<&BackupObject> = objects.iter().filter(|o| is_backup_key(&o.key)).collect();
    v.sort_by(|a, b| b.last_modified.cmp(&a.last_modified).then_with(|| b.key.cmp(&a.key)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn obj(key: &str, secs: u64) -> BackupObject {
        BackupObject { key: key.into(), size: 1, last_modified: SystemTime::UNIX_EPOCH + Duration::from_secs(secs) }
    }

    #[test]
    fn newest_wins_and_sidecars_are_skipped() {
        let objs = [obj("o/a.dump", 10), obj("o/b.dump", 20), obj("o/b.dump.sha256", 30), obj("o/", 40)];
        assert_eq!(select_latest(&objs).unwrap().key, "o/b.dump");
    }

    #[test]
    fn ties_break_by_key() {
        let objs = [obj("o/2026-01-02.dump", 10), obj("o/2026-01-01.dump", 10)];
        assert_eq!(select_latest(&objs).unwrap().key, "o/2026-01-02.dump");
        let order: Vec<_> = backups_newest_first(&objs).iter().map(|o| o.key.as_str()).collect();
        assert_eq!(order, ["o/2026-01-02.dump", "o/2026-01-01.dump"]);
    }

    #[test]
    fn nothing_to_select() {
        assert!(select_latest(&[obj("o/x.sha256", 1), obj("o/.hidden", 2)]).is_none());
    }
}
