//! A store held in memory: objects with their bytes and upload times. For the binary's
//! unit tests of what reads a store — selection, coverage, objectives — without a server
//! (as rustic_core keeps an in-memory backend), and for nothing that restores.

use crate::error::StoreError;
use crate::store::{BackupObject, BackupStore};
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::SystemTime;

/// Objects by key: their bytes and when each was put.
#[derive(Default)]
pub struct MemStore {
    objects: Mutex<BTreeMap<String, (bytes::Bytes, SystemTime)>>,
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore::default()
    }

    /// Puts `bytes` at `key`, uploaded at `at`.
    pub fn put(&self, key: &str, bytes: impl Into<bytes::Bytes>, at: SystemTime) {
        self.objects.lock().unwrap().insert(key.to_string(), (bytes.into(), at));
    }

    fn object(key: &str, bytes: &bytes::Bytes, at: SystemTime) -> BackupObject {
        BackupObject { key: key.to_string(), size: bytes.len() as u64, last_modified: at, etag: None }
    }

    fn not_found(&self, key: &str) -> StoreError {
        StoreError {
            store: self.describe(),
            message: format!("{key}: no such object"),
            unreachable: false,
            changed: false,
        }
    }
}

#[async_trait]
impl BackupStore for MemStore {
    fn describe(&self) -> String {
        "memory".into()
    }

    async fn list(&self, prefix: &str) -> Result<Vec<BackupObject>, StoreError> {
        let objects = self.objects.lock().unwrap();
        Ok(objects.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(k, (b, at))| Self::object(k, b, *at)).collect())
    }

    async fn stat(&self, key: &str) -> Result<BackupObject, StoreError> {
        let objects = self.objects.lock().unwrap();
        objects.get(key).map(|(b, at)| Self::object(key, b, *at)).ok_or_else(|| self.not_found(key))
    }

    async fn read_range(&self, key: &str, offset: u64, len: u64) -> Result<bytes::Bytes, StoreError> {
        let objects = self.objects.lock().unwrap();
        let (bytes, _) = objects.get(key).ok_or_else(|| self.not_found(key))?;
        let end = offset.checked_add(len).filter(|e| *e <= bytes.len() as u64).ok_or_else(|| StoreError {
            store: self.describe(),
            message: format!("{key}: bytes {offset}+{len} are past its end ({} bytes)", bytes.len()),
            unreachable: false,
            changed: false,
        })?;
        Ok(bytes.slice(offset as usize..end as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn it_lists_by_prefix_and_reads_ranges() {
        let s = MemStore::new();
        let at = SystemTime::UNIX_EPOCH;
        s.put("a/1.dump", &b"PGDMP-one"[..], at);
        s.put("b/2.dump", &b"two"[..], at);
        let listed = s.list("a/").await.unwrap();
        assert_eq!(listed.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), ["a/1.dump"]);
        assert_eq!(s.read_range("a/1.dump", 6, 3).await.unwrap(), &b"one"[..]);
        assert!(s.read_range("a/1.dump", 6, 4).await.is_err(), "past the end");
        assert!(s.stat("c").await.is_err());
    }
}
