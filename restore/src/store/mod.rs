//! Backup stores: where backups live, how to list them and how to read one — each
//! request retried ([`retry`]) behind a circuit breaker ([`breaker`]), its bytes in
//! pooled blocks ([`pool`]). The ground the other layers stand on: it imports only
//! [`crate::error`].

pub mod breaker;
mod fs;
mod mem;
pub(crate) mod pool;
pub mod retry;
mod s3;

pub(crate) use fs::FsStore;
pub use mem::MemStore;
pub(crate) use s3::S3Store;

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
    /// The store's last-modified time: when the object was uploaded (never taken as its
    /// data's time).
    pub last_modified: SystemTime,
    /// What identifies this version of the object (S3's ETag; a file's device, inode,
    /// size and modification time): every read is pinned to the version listed.
    pub etag: Option<String>,
}

/// A stream of a backup's bytes.
pub(crate) type BackupReader = std::pin::Pin<Box<dyn AsyncRead + Send>>;

/// A place backups are kept. Implementations retry transient failures themselves and
/// report what is left as a [`StoreError`] saying whether the store was unreachable.
#[async_trait]
pub trait BackupStore: Send + Sync {
    /// Names the store for messages, e.g. `s3://bucket at http://host:port`. Never holds secrets.
    fn describe(&self) -> String;

    /// Every object whose key starts with `prefix`, in no particular order.
    async fn list(&self, prefix: &str) -> Result<Vec<BackupObject>, StoreError>;

    /// The objects under `prefix` whose keys sort after `start_after` (S3's
    /// `start-after`: the store skips the rest instead of sending it).
    async fn list_after(&self, prefix: &str, start_after: &str) -> Result<Vec<BackupObject>, StoreError> {
        let mut all = self.list(prefix).await?;
        all.retain(|o| o.key.as_str() > start_after);
        Ok(all)
    }

    /// The object at `key`, or a not-found error.
    async fn stat(&self, key: &str) -> Result<BackupObject, StoreError>;

    /// Reads `len` bytes of `key` from `offset`. A short read is an error.
    async fn read_range(&self, key: &str, offset: u64, len: u64) -> Result<bytes::Bytes, StoreError>;

    /// The same bytes in several blocks (no part-sized buffer), for a consumer that takes them in
    /// order anyway: no copy into one buffer.
    async fn read_range_chunks(&self, key: &str, offset: u64, len: u64) -> Result<Vec<bytes::Bytes>, StoreError> {
        Ok(vec![self.read_range(key, offset, len).await?])
    }

    /// [`Self::read_range_chunks`] of the version of `key` whose [`BackupObject::etag`]
    /// is `etag`: if the object changed since it was listed, an error with
    /// [`StoreError::changed`] set instead of bytes of another version.
    async fn read_range_pinned(
        &self,
        key: &str,
        etag: Option<&str>,
        offset: u64,
        len: u64,
    ) -> Result<Vec<bytes::Bytes>, StoreError> {
        let _ = etag;
        self.read_range_chunks(key, offset, len).await
    }

    /// How the store protects what it holds against being replaced or deleted (bucket
    /// versioning, Object Lock); `None` for a store that has no such thing (a directory).
    async fn protection(&self) -> Result<Option<Protection>, StoreError> {
        Ok(None)
    }

    /// The object at `key` with its version and lock (one HEAD); `None` for a store
    /// without versions or locks.
    async fn object_lock(&self, key: &str) -> Result<Option<ObjectLock>, StoreError> {
        let _ = key;
        Ok(None)
    }

    /// What the store's credentials may do besides reading, learned by trying: a delete
    /// of a key that does not exist, and a put of an empty object at `probe_key` removed
    /// again at once. Only `drcheck storage check` with `probe_write = true` asks.
    async fn probe_write(&self, probe_key: &str) -> Result<Option<WriteProbe>, StoreError> {
        let _ = probe_key;
        Ok(None)
    }

    /// Held by a download for as long as it runs: a store that reads into pooled blocks
    /// keeps them for reuse meanwhile, and frees them when the last download ends.
    fn download_lease(&self) -> Option<crate::store::pool::Lease> {
        None
    }
}

/// [`Protection::versioning`] when the store's answer could not be read.
pub(crate) const VERSIONING_UNREADABLE: &str = "unreadable";

/// How a bucket protects its objects (issue 37).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Protection {
    /// `Enabled` or `Suspended`; `None` when versioning was never switched on;
    /// [`VERSIONING_UNREADABLE`] when the store's answer could not be read.
    pub versioning: Option<String>,
    /// Object Lock is enabled on the bucket.
    pub lock_enabled: bool,
    /// The bucket's default retention: `COMPLIANCE`/`GOVERNANCE`…
    pub default_mode: Option<String>,
    /// …for this long (`30 days`, `1 years`).
    pub default_period: Option<String>,
}

/// One object's version and lock, as its HEAD says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectLock {
    pub size: u64,
    pub etag: Option<String>,
    pub version_id: Option<String>,
    /// `COMPLIANCE` or `GOVERNANCE`; `None` when the object has no retention.
    pub mode: Option<String>,
    pub retain_until: Option<SystemTime>,
    pub legal_hold: bool,
}

/// What a write probe learned ([`BackupStore::probe_write`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteProbe {
    /// A delete was accepted (of a key that does not exist: nothing was lost).
    pub delete_allowed: bool,
    /// A put was accepted (the empty object was removed again when deletes are allowed).
    pub put_allowed: bool,
    /// The put's object could not be removed: it is left at this key.
    pub left_behind: Option<String>,
}

/// Builds the store a storage config describes.
pub async fn open_store(name: &str, config: &StorageConfig) -> std::sync::Arc<dyn BackupStore> {
    match config {
        StorageConfig::S3(s3) => std::sync::Arc::new(S3Store::new(name, s3).await),
        StorageConfig::Filesystem { path, .. } => std::sync::Arc::new(FsStore::new(path.clone())),
    }
}

/// One backup: a single object (a dump), or for physical backups the prefix holding
/// `base.tar[.gz|.zst|.lz4]`, `pg_wal.tar[…]` and friends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// The object's key, or the physical backup's prefix (ending in `/`).
    pub key: String,
    pub size: u64,
    /// The newest last-modified among its parts.
    pub last_modified: SystemTime,
    pub parts: Vec<BackupObject>,
    /// A `KEY.sha256` sidecar next to a single-object backup.
    pub sha256_key: Option<String>,
    /// A backup from a backup tool's catalog (pgBackRest): restored by the tool.
    pub catalog: Option<CatalogEntry>,
}

/// What a backup tool's catalog says about one backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogEntry {
    /// `pgbackrest` or `barman-cloud`.
    pub tool: &'static str,
    /// `full`, `diff` or `incr`.
    pub kind: String,
    pub started: SystemTime,
    /// Whether the tool calls it usable, and why not.
    pub status: CatalogStatus,
    /// The first and last WAL file the backup needs to become consistent.
    pub wal_start: Option<String>,
    pub wal_stop: Option<String>,
    /// barman-cloud: the backup's tablespaces, by name (restored inside the run's directory).
    pub tablespaces: Vec<String>,
}

/// What a backup tool's catalog says of a backup: usable, or not and why (the tool's
/// own word: pgBackRest's `error`, barman-cloud's status other than `DONE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogStatus {
    Ok,
    Unusable(String),
}

impl CatalogStatus {
    pub fn is_ok(&self) -> bool {
        *self == CatalogStatus::Ok
    }

    pub fn as_str(&self) -> &str {
        match self {
            CatalogStatus::Ok => "ok",
            CatalogStatus::Unusable(why) => why,
        }
    }
}

impl std::fmt::Display for CatalogStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Protection {
    /// In words: `versioning Enabled; Object Lock on (default COMPLIANCE, 40 days)`.
    /// `versioned`: whether the objects looked at carry version ids (what versioning is
    /// when the store's answer about it could not be read).
    pub fn describe(&self, versioned: Option<bool>) -> String {
        let versioning = match (self.versioning.as_deref(), versioned) {
            (Some(VERSIONING_UNREADABLE), Some(true)) => "Enabled (the objects carry version ids)".to_string(),
            (Some(VERSIONING_UNREADABLE), _) => "unknown (the store's answer could not be read)".to_string(),
            (Some(v), _) => v.to_string(),
            (None, _) => "never enabled".to_string(),
        };
        let lock = match (self.lock_enabled, &self.default_mode, &self.default_period) {
            (false, ..) => "off".to_string(),
            (true, Some(m), Some(p)) => format!("on (default {m}, {p})"),
            (true, ..) => "on (no default retention)".to_string(),
        };
        format!("versioning {versioning}; Object Lock {lock}")
    }
}

impl Backup {
    pub fn is_physical(&self) -> bool {
        self.key.ends_with('/')
    }
}

/// Whether `name` (a file name) is a base backup's main tar.
pub(crate) fn is_base_tar(name: &str) -> bool {
    // `base.tar`, compressed and/or encrypted the way backup jobs name them
    // (`base.tar.gz`, `base.tar.zst.age`, `base.tar.gpg`); the content decides the rest.
    let Some(rest) = name.strip_prefix("base.tar") else { return false };
    let layers = ["gz", "zst", "lz4", "age", "gpg", "pgp", "asc"];
    rest.is_empty()
        || rest.strip_prefix('.').is_some_and(|r| {
            let parts: Vec<&str> = r.split('.').collect();
            parts.len() <= 2 && parts.iter().all(|p| layers.contains(p))
        })
}

/// How long a base-backup directory without its `backup_manifest` or `pg_wal.tar`
/// must sit untouched before it counts as complete (a backup written without either).
pub const UPLOAD_GRACE: std::time::Duration = std::time::Duration::from_secs(600);

/// Groups listed objects into backups: each `…/base.tar*` makes its directory one
/// physical backup; every other backup-like object is a backup on its own. Linear in
/// the number of objects. Includes base-backup directories still being uploaded (for a
/// backup named explicitly); [`backups_newest_first`] leaves those out.
pub fn group_backups(objects: &[BackupObject]) -> Vec<Backup> {
    group(objects, None)
}

/// [`group_backups`] as of `now`, without a base-backup directory still being
/// uploaded — no `backup_manifest` and no `pg_wal.tar*` yet, and a part written within
/// [`UPLOAD_GRACE`] — which is not a backup yet (said in the log).
pub(crate) fn group_backups_at(objects: &[BackupObject], now: SystemTime) -> Vec<Backup> {
    group(objects, Some(now))
}

fn group(objects: &[BackupObject], complete_as_of: Option<SystemTime>) -> Vec<Backup> {
    use std::collections::{BTreeMap, HashSet};
    let dir_of = |key: &str| -> (String, String) {
        match key.rsplit_once('/') {
            Some((d, n)) => (format!("{d}/"), n.to_string()),
            None => (String::new(), key.to_string()),
        }
    };
    // Each directory's direct children, in one pass.
    let mut children: BTreeMap<String, Vec<&BackupObject>> = BTreeMap::new();
    for o in objects {
        children.entry(dir_of(&o.key).0).or_default().push(o);
    }
    let mut physical: HashSet<String> = HashSet::new();
    let mut out = Vec::new();
    for (dir, parts) in &children {
        let names: Vec<String> = parts.iter().map(|p| dir_of(&p.key).1).collect();
        if !names.iter().any(|n| is_base_tar(n)) {
            continue;
        }
        physical.insert(dir.clone());
        let newest = parts.iter().map(|p| p.last_modified).max().unwrap_or(SystemTime::UNIX_EPOCH);
        let complete = complete_as_of.is_none_or(|now| {
            names.iter().any(|n| n == "backup_manifest" || n.starts_with("pg_wal.tar"))
                || now.duration_since(newest).is_ok_and(|age| age >= UPLOAD_GRACE)
        });
        if !complete {
            tracing::info!(
                backup = %dir,
                "base backup skipped: still being uploaded (no backup_manifest or pg_wal.tar yet, written within {}s)",
                UPLOAD_GRACE.as_secs()
            );
            continue;
        }
        out.push(Backup {
            key: dir.clone(),
            size: parts.iter().map(|p| p.size).sum(),
            last_modified: newest,
            parts: parts.iter().map(|p| (*p).clone()).collect(),
            sha256_key: None,
            catalog: None,
        });
    }
    let keys: HashSet<&str> = objects.iter().map(|o| o.key.as_str()).collect();
    for o in objects {
        // `X.asc` beside `X` is X's signature; alone, it is an armoured OpenPGP message
        // (`gpg -a -e` names its output so): a backup, which its content will tell.
        let lone_armour = o.key.to_ascii_lowercase().ends_with(".asc")
            && !keys.contains(&o.key[..o.key.len() - 4])
            && is_backup_key(&o.key[..o.key.len() - 4]);
        if physical.contains(&dir_of(&o.key).0) || !(is_backup_key(&o.key) || lone_armour) {
            continue;
        }
        let sidecar = format!("{}.sha256", o.key);
        out.push(Backup {
            key: o.key.clone(),
            size: o.size,
            last_modified: o.last_modified,
            parts: vec![o.clone()],
            sha256_key: keys.contains(sidecar.as_str()).then_some(sidecar),
            catalog: None,
        });
    }
    out
}

/// Keys that sit beside backups but are not backups: checksum and signature sidecars,
/// manifests, "directories" and hidden files.
pub(crate) fn is_backup_key(key: &str) -> bool {
    const SIDECARS: [&str; 7] = [".sha256", ".sha512", ".md5", ".sig", ".asc", ".manifest", ".json"];
    let base = key.rsplit('/').next().unwrap_or(key);
    !key.ends_with('/')
        && !base.is_empty()
        && !base.starts_with('.')
        && !SIDECARS.iter().any(|s| base.to_ascii_lowercase().ends_with(s))
}

/// The newest backup by last-modified time; ties (stores with one-second resolution)
/// are broken by the greater key, so the choice is stable.
pub fn select_latest(objects: &[BackupObject]) -> Option<Backup> {
    backups_newest_first(objects).into_iter().next()
}

/// Every complete backup, newest first, as [`select_latest`] orders them.
pub fn backups_newest_first(objects: &[BackupObject]) -> Vec<Backup> {
    let mut v = group_backups_at(objects, SystemTime::now());
    v.sort_by(|a, b| b.last_modified.cmp(&a.last_modified).then_with(|| b.key.cmp(&a.key)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn obj(key: &str, secs: u64) -> BackupObject {
        BackupObject {
            key: key.into(),
            size: 1,
            last_modified: SystemTime::UNIX_EPOCH + Duration::from_secs(secs),
            etag: None,
        }
    }

    #[test]
    fn newest_wins_and_sidecars_are_skipped() {
        let objs = [obj("o/a.dump", 10), obj("o/b.dump", 20), obj("o/b.dump.sha256", 30), obj("o/", 40)];
        assert_eq!(select_latest(&objs).unwrap().key, "o/b.dump");
    }

    /// Issue 27: `gpg -a -e` names its output `X.asc`; beside `X` the same name is X's
    /// signature. Encrypted base-backup parts keep their place.
    #[test]
    fn a_lone_armoured_message_is_a_backup_and_a_signature_is_not() {
        let objs = [obj("o/a.dump", 10), obj("o/a.dump.asc", 50), obj("o/b.tar.asc", 20)];
        let keys: Vec<String> = group_backups(&objs).into_iter().map(|b| b.key).collect();
        assert_eq!(keys, ["o/a.dump", "o/b.tar.asc"]);
        for name in ["base.tar.age", "base.tar.gz.gpg", "base.tar.zst.asc", "base.tar"] {
            assert!(is_base_tar(name), "{name}");
        }
        for name in ["base.tar.exe", "base.tar.gz.gz.gz", "base.tarx", "base.tar."] {
            assert!(!is_base_tar(name), "{name}");
        }
    }

    #[test]
    fn ties_break_by_key() {
        let objs = [obj("o/2026-01-02.dump", 10), obj("o/2026-01-01.dump", 10)];
        assert_eq!(select_latest(&objs).unwrap().key, "o/2026-01-02.dump");
        let order: Vec<_> = backups_newest_first(&objs).into_iter().map(|o| o.key).collect();
        assert_eq!(order, ["o/2026-01-02.dump", "o/2026-01-01.dump"]);
    }

    #[test]
    fn physical_backups_group_by_directory() {
        let objs = [
            obj("o/p1/base.tar.gz", 10),
            obj("o/p1/pg_wal.tar.gz", 11),
            obj("o/p1/backup_manifest", 11),
            obj("o/x.dump", 5),
            obj("o/x.dump.sha256", 5),
        ];
        let all = backups_newest_first(&objs);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].key, "o/p1/");
        assert!(all[0].is_physical());
        assert_eq!(all[0].parts.len(), 3);
        assert_eq!(all[0].size, 3);
        assert_eq!(all[1].sha256_key.as_deref(), Some("o/x.dump.sha256"));
    }

    /// Issue 22: a run during a base backup's upload (base.tar there, pg_wal.tar and the
    /// manifest not yet) does not pick the half-uploaded one.
    #[test]
    fn a_base_backup_still_being_uploaded_is_not_a_backup_yet() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000);
        let objs = [obj("o/old/base.tar", 10), obj("o/old/pg_wal.tar", 11), obj("o/new/base.tar", 9_990)];
        let keys: Vec<String> = group_backups_at(&objs, now).into_iter().map(|b| b.key).collect();
        assert_eq!(keys, ["o/old/"], "the new one is still uploading");
        let later = now + UPLOAD_GRACE;
        assert_eq!(group_backups_at(&objs, later).len(), 2, "untouched for the grace period: complete");
        let done = [obj("o/new/base.tar", 9_990), obj("o/new/backup_manifest", 9_995)];
        assert_eq!(group_backups_at(&done, now).len(), 1, "a manifest says it is complete");
    }

    #[test]
    fn grouping_is_linear() {
        // 20,000 base-backup directories of three parts each: one pass, not dirs × objects.
        let objs: Vec<BackupObject> = (0..20_000)
            .flat_map(|i| ["base.tar", "pg_wal.tar", "backup_manifest"].map(|n| obj(&format!("o/b{i:05}/{n}"), i)))
            .collect();
        let t = std::time::Instant::now();
        assert_eq!(group_backups(&objs).len(), 20_000);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }

    #[test]
    fn nothing_to_select() {
        assert!(select_latest(&[obj("o/x.sha256", 1), obj("o/.hidden", 2)]).is_none());
    }
}
