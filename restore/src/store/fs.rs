//! Backups in a local directory; keys are paths relative to it, with `/` separators.
//!
//! The directory is written by whoever writes backups, so it gives drcheck bytes, never
//! paths: every object is opened beneath the root with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)` — no symbolic link is followed, no `..` leaves — and must be
//! a regular file. A listing walks only the target's prefix, never follows links,
//! stops descending at [`MAX_DEPTH`] and after [`MAX_ENTRIES`] entries, and skips
//! (logging) what it cannot read instead of failing the whole store.

use super::{BackupObject, BackupStore};
use crate::error::StoreError;
use async_trait::async_trait;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// How deep a listing descends below the prefix's directory.
pub(super) const MAX_DEPTH: usize = 32;
/// How many directory entries a listing reads at most.
pub(super) const MAX_ENTRIES: usize = 1_000_000;

pub(crate) struct FsStore {
    root: PathBuf,
}

impl FsStore {
    pub(crate) fn new(root: PathBuf) -> Self {
        Self { root }
    }

    fn err(&self, message: String) -> StoreError {
        StoreError { store: self.describe(), message, unreachable: false, changed: false }
    }

    /// Opens `key` for reading beneath the root: never through a link, never outside,
    /// only a regular file.
    fn open(root: &Path, key: &str) -> Result<(std::fs::File, std::fs::Metadata), Refused> {
        use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
        use nix::sys::stat::Mode;
        if key.is_empty() || key.starts_with('/') || key.split('/').any(|p| p == "..") {
            return Err(Refused::Outside(key.into()));
        }
        let dir = std::fs::File::open(root).map_err(|e| Refused::Io { what: root.display().to_string(), source: e })?;
        let how = OpenHow::new()
            .flags(OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK)
            .mode(Mode::empty())
            .resolve(
                ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS,
            );
        let fd: OwnedFd = openat2(&dir, key, how).map_err(|e| match e {
            nix::errno::Errno::ELOOP => Refused::Link(key.into()),
            nix::errno::Errno::EXDEV => Refused::Escapes(key.into()),
            nix::errno::Errno::ENOENT => Refused::Missing(key.into()),
            other => Refused::Io { what: key.into(), source: other.into() },
        })?;
        let file = std::fs::File::from(fd);
        let meta = file.metadata().map_err(|e| Refused::Io { what: key.into(), source: e })?;
        if !meta.is_file() {
            return Err(Refused::NotAFile(key.into()));
        }
        Ok((file, meta))
    }
}

/// Why a key is not opened beneath the store's root.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("key {0:?} leaves the store's directory")]
    Outside(String),
    #[error("{0}: a symbolic link (the store gives files, not links)")]
    Link(String),
    #[error("{0}: leaves the store's directory")]
    Escapes(String),
    #[error("{0}: no such object")]
    Missing(String),
    #[error("{0}: not a regular file")]
    NotAFile(String),
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
}

/// A file's version: device, inode, size and modification time (nanoseconds). A file
/// replaced or rewritten in place (a `latest.dump` written again) has another.
fn version(m: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!("{:x}-{:x}-{:x}-{}.{:09}", m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec())
}

/// What a listing found, and what it had to leave out.
#[derive(Default)]
struct Walk {
    objects: Vec<BackupObject>,
    entries: usize,
    skipped: Vec<String>,
}

/// Lists regular files under `dir` (key prefix `rel`), never following links.
fn walk(dir: &Path, rel: &str, depth: usize, out: &mut Walk) {
    if out.entries >= MAX_ENTRIES {
        return;
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            out.skipped.push(format!("{}: {e}", if rel.is_empty() { "." } else { rel }));
            return;
        }
    };
    for entry in entries {
        out.entries += 1;
        if out.entries > MAX_ENTRIES {
            out.skipped.push(format!("more than {MAX_ENTRIES} entries: the rest is not listed"));
            return;
        }
        let Ok(entry) = entry else { continue };
        let name = entry.file_name().to_string_lossy().into_owned();
        let key = format!("{rel}{name}");
        // The entry's own type: a link is neither a file nor a directory here.
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            if depth >= MAX_DEPTH {
                out.skipped.push(format!("{key}/: deeper than {MAX_DEPTH} levels, not listed"));
            } else {
                walk(&entry.path(), &format!("{key}/"), depth + 1, out);
            }
        } else if kind.is_symlink() {
            out.skipped.push(format!("{key}: a symbolic link (the store gives files, not links), not listed"));
        } else if kind.is_file() {
            match entry.metadata().and_then(|m| Ok((m.len(), m.modified()?, version(&m)))) {
                Ok((size, last_modified, etag)) => {
                    out.objects.push(BackupObject { key, size, last_modified, etag: Some(etag) })
                }
                Err(e) => out.skipped.push(format!("{key}: {e}")),
            }
        }
    }
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
        if prefix.starts_with('/') || prefix.split('/').any(|p| p == "..") {
            return Err(self.err(format!("prefix {prefix:?} leaves the store's directory")));
        }
        // Only the prefix's own directory is walked: nothing elsewhere in the store (a
        // deep tree, an unreadable directory under another prefix) affects this target.
        let dir_part = prefix.rsplit_once('/').map(|(d, _)| format!("{d}/")).unwrap_or_default();
        let start = root.join(&dir_part);
        let is_real_dir = std::fs::symlink_metadata(&start).is_ok_and(|m| m.is_dir());
        if !dir_part.is_empty() && !is_real_dir {
            return Ok(Vec::new());
        }
        let walked = tokio::task::spawn_blocking(move || {
            let mut out = Walk::default();
            walk(&start, &dir_part, 0, &mut out);
            out
        })
        .await
        .map_err(|e| self.err(format!("listing panicked: {e}")))?;
        if !walked.skipped.is_empty() {
            tracing::warn!(
                store = %self.describe(),
                skipped = walked.skipped.len(),
                first = %walked.skipped.iter().take(3).cloned().collect::<Vec<_>>().join("; "),
                "parts of the store could not be listed and were left out"
            );
        }
        let mut all = walked.objects;
        all.retain(|o| o.key.starts_with(prefix));
        Ok(all)
    }

    async fn stat(&self, key: &str) -> Result<BackupObject, StoreError> {
        let (root, k) = (self.root.clone(), key.to_string());
        let r = tokio::task::spawn_blocking(move || FsStore::open(&root, &k).map(|(_, m)| m))
            .await
            .map_err(|e| self.err(format!("{key}: stat panicked: {e}")))?;
        let meta = r.map_err(|m| self.err(m.to_string()))?;
        let last_modified = meta.modified().map_err(|e| self.err(format!("{key}: {e}")))?;
        Ok(BackupObject { key: key.to_string(), size: meta.len(), last_modified, etag: Some(version(&meta)) })
    }

    async fn read_range(&self, key: &str, offset: u64, len: u64) -> Result<bytes::Bytes, StoreError> {
        self.read_range_pinned(key, None, offset, len).await.map(|chunks| chunks.concat().into())
    }

    async fn read_range_pinned(
        &self,
        key: &str,
        etag: Option<&str>,
        offset: u64,
        len: u64,
    ) -> Result<Vec<bytes::Bytes>, StoreError> {
        use std::io::{Read, Seek, SeekFrom};
        let (root, k, want) = (self.root.clone(), key.to_string(), etag.map(str::to_string));
        let r = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, (bool, String)> {
            let (mut f, meta) = FsStore::open(&root, &k).map_err(|m| (false, m.to_string()))?;
            if let Some(want) = &want
                && *want != version(&meta)
            {
                return Err((
                    true,
                    format!("{k}: the object changed while being read (it is no longer the file listed)"),
                ));
            }
            let f = &mut f;
            let io = |e: std::io::Error| (false, format!("{k}: bytes {offset}+{len}: {e}"));
            f.seek(SeekFrom::Start(offset)).map_err(io)?;
            let mut buf = vec![0u8; len as usize];
            f.read_exact(&mut buf).map_err(io)?;
            Ok(buf)
        })
        .await
        .map_err(|e| self.err(format!("{key}: read panicked: {e}")))?;
        match r {
            Ok(buf) => Ok(vec![bytes::Bytes::from(buf)]),
            Err((changed, m)) => Err(StoreError { changed, ..self.err(m) }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn links_are_never_followed_and_only_the_prefix_is_walked() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        std::fs::create_dir_all(root.join("t")).unwrap();
        std::fs::create_dir_all(root.join("other/unreadable")).unwrap();
        std::fs::write(root.join("t/a.dump"), b"PGDMP").unwrap();
        std::fs::write(dir.path().join("secret"), b"SECRET").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("t/b.dump")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("t/a.dump.sha256")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("t/up")).unwrap();
        let store = FsStore::new(root.clone());
        let listed: Vec<String> = store.list("t/").await.unwrap().into_iter().map(|o| o.key).collect();
        assert_eq!(listed, ["t/a.dump"], "links are not objects");
        let e = store.read_range("t/a.dump.sha256", 0, 6).await.unwrap_err().to_string();
        assert!(e.contains("symbolic link") && !e.contains("SECRET"), "{e}");
        let e = store.read_range("t/up/secret", 0, 6).await.unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(store.stat("../secret").await.unwrap_err().to_string().contains("leaves"));
        assert_eq!(&store.read_range("t/a.dump", 1, 4).await.unwrap()[..], b"GDMP");
        // Another prefix's trouble is not this target's.
        std::fs::set_permissions(root.join("other/unreadable"), std::os::unix::fs::PermissionsExt::from_mode(0o000))
            .unwrap();
        assert_eq!(store.list("t/").await.unwrap().len(), 1);
        assert!(
            store.list("").await.unwrap().iter().any(|o| o.key == "t/a.dump"),
            "the root skips what it cannot read"
        );
    }
}
