//! Backups in a local directory; keys are paths relative to it, with `/` separators.

use super::{BackupObject, BackupStore};
use crate::error::StoreError;
use async_trait::async_trait;
use std::path::{Path, PathBuf};

pub struct FsStore {
    root: PathBuf,
}

impl FsStore {
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    fn err(&self, message: String) -> StoreError {
        StoreError { store: self.describe(), message, unreachable: false }
    }

    /// The path of `key`, refusing keys that would escape the root.
    fn path_of(&self, key: &str) -> Result<PathBuf, StoreError> {
        if key.split('/').any(|part| part == "..") || key.starts_with('/') {
            return Err(self.err(format!("key {key:?} leaves the store's directory")));
        }
        Ok(self.root.join(key))
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<BackupObject>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            walk(root, &entry.path(), out)?;
        } else if meta.is_file() {
            let rel = entry.path().strip_prefix(root).map(Path::to_path_buf).unwrap_or_default();
            out.push(BackupObject {
                key: rel.to_string_lossy().replace(std::path::MAIN_SEPARATOR, "/"),
                size: meta.len(),
                last_modified: meta.modified()?,
            });
        }
    }
    Ok(())
}

#[async_trait]
impl BackupStore for FsStore {
    fn describe(&self) -> String {
        format!("directory {}", self.root.display())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<BackupObject>, StoreError> {
        let root = self.root.clone();
        if !root.is_dir() {
            return Err(self.err("no such directory".into()));
        }
        let mut all = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            walk(&root, &root, &mut out).map(|()| out)
        })
        .await
        .map_err(|e| self.err(format!("listing panicked: {e}")))?
        .map_err(|e| self.err(format!("cannot list: {e}")))?;
        all.retain(|o| o.key.starts_with(prefix));
        Ok(all)
    }

    async fn stat(&self, key: &str) -> Result<BackupObject, StoreError> {
        let path = self.path_of(key)?;
        let meta = tokio::fs::metadata(&path).await.map_err(|e| self.err(format!("{key}: {e}")))?;
        if !meta.is_file() {
            return Err(self.err(format!("{key}: not a file")));
        }
        let last_modified = meta.modified().map_err(|e| self.err(format!("{key}: {e}")))?;
        Ok(BackupObject { key: key.to_string(), size: meta.len(), last_modified })
    }

    async fn read_range(&self, key: &str, offset: u64, len: u64) -> Result<bytes::Bytes, StoreError> {
        use std::io::{Read, Seek, SeekFrom};
        let path = self.path_of(key)?;
        let what = key.to_string();
        let r = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
            let mut f = std::fs::File::open(&path)?;
            f.seek(SeekFrom::Start(offset))?;
            let mut buf = vec![0u8; len as usize];
            f.read_exact(&mut buf)?;
            Ok(buf)
        })
        .await
        .map_err(|e| self.err(format!("{what}: read panicked: {e}")))?;
        r.map(bytes::Bytes::from).map_err(|e| self.err(format!("{what}: bytes {offset}+{len}: {e}")))
    }
}
