//! Unpacking tar archives from a backup, which is hostile input.
//!
//! Nothing an archive holds may reach outside the directory it is unpacked into, nor
//! create privilege: entry paths are relative and free of `..`; no entry is written
//! through a symbolic link (neither one already on disk nor one the archive made
//! earlier); symbolic and hard links must point inside the directory; set-user-ID,
//! set-group-ID and sticky bits are dropped; device and FIFO nodes are refused. An entry
//! this code does not understand fails the unpacking instead of vanishing. Writing stops
//! within one chunk once the run is cancelled.

use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

const CHUNK: usize = 1 << 20;

/// Why an archive could not be unpacked.
#[derive(Debug)]
pub(crate) enum UnpackError {
    /// The archive itself is bad or hostile: the backup's fault.
    Archive(String),
    /// Reading the source or writing the files failed.
    Io(io::Error),
    /// The run was cancelled.
    Cancelled,
}

impl From<io::Error> for UnpackError {
    fn from(e: io::Error) -> Self {
        UnpackError::Io(e)
    }
}

fn hostile(entry: &Path, why: impl std::fmt::Display) -> UnpackError {
    UnpackError::Archive(format!("archive entry {:?}: {why}", entry.display().to_string()))
}

/// A flag that stops unpacking; [`StopOnDrop`] sets it when the restore is dropped.
pub(crate) type StopFlag = Arc<AtomicBool>;

/// Sets its flag when dropped: tie it to the future that owns the unpacking thread.
pub(crate) struct StopOnDrop(pub StopFlag);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Unpacks `src` (a tar stream) into `dest`, which must be a real directory (created
/// if missing). Returns the bytes written.
pub(crate) fn unpack(src: impl Read, dest: &Path, stop: &AtomicBool) -> Result<u64, UnpackError> {
    if let Ok(m) = std::fs::symlink_metadata(dest)
        && !m.is_dir()
    {
        return Err(UnpackError::Archive(format!(
            "{} is not a directory (the archive made it a link or file)",
            dest.display()
        )));
    }
    std::fs::create_dir_all(dest)?;
    let mut archive = tar::Archive::new(src);
    let mut written = 0u64;
    for entry in archive.entries()? {
        if stop.load(Ordering::Relaxed) {
            return Err(UnpackError::Cancelled);
        }
        let mut entry = entry?;
        let raw_path = entry.path()?.into_owned();
        let Some(rel) = clean_relative(&raw_path)? else { continue };
        let target = dest.join(&rel);
        ensure_real_parents(dest, &rel)?;
        let mode = entry.header().mode().unwrap_or(0o600) & 0o777;
        use tar::EntryType as T;
        match entry.header().entry_type() {
            T::Directory => {
                match std::fs::symlink_metadata(&target) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => return Err(hostile(&raw_path, "a directory over an existing file or link")),
                    Err(_) => create_dir_shared(&target)?,
                }
                // drcheck must be able to write into it (and later hand it over).
                std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode | 0o700))?;
            }
            T::Regular | T::Continuous => {
                remove_non_dir(&target, &raw_path)?;
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(nix::libc::O_NOFOLLOW)
                    .open(&target)?;
                let mut buf = vec![0u8; CHUNK.min(entry.size().max(1) as usize)];
                loop {
                    if stop.load(Ordering::Relaxed) {
                        return Err(UnpackError::Cancelled);
                    }
                    let n = entry.read(&mut buf)?;
                    if n == 0 {
                        break;
                    }
                    file.write_all(&buf[..n])?;
                    written += n as u64;
                }
                // Never set-user-ID, set-group-ID or sticky.
                file.set_permissions(std::fs::Permissions::from_mode(mode))?;
            }
            T::Symlink => {
                let link = entry.link_name()?.ok_or_else(|| hostile(&raw_path, "a symbolic link without a target"))?;
                let parent = rel.parent().unwrap_or(Path::new(""));
                if link.is_absolute() || escapes(&parent.join(&link)) {
                    return Err(hostile(
                        &raw_path,
                        format!("a symbolic link to {:?}, outside the backup", link.display().to_string()),
                    ));
                }
                remove_non_dir(&target, &raw_path)?;
                std::os::unix::fs::symlink(&link, &target)?;
            }
            T::Link => {
                let link = entry.link_name()?.ok_or_else(|| hostile(&raw_path, "a hard link without a target"))?;
                let Some(link_rel) = clean_relative(&link)? else {
                    return Err(hostile(&raw_path, "a hard link to nothing"));
                };
                ensure_real_parents(dest, &link_rel)?;
                let source = dest.join(&link_rel);
                match std::fs::symlink_metadata(&source) {
                    Ok(m) if m.file_type().is_file() => {}
                    _ => {
                        return Err(hostile(
                            &raw_path,
                            format!(
                                "a hard link to {:?}, which is not a file unpacked before it",
                                link.display().to_string()
                            ),
                        ));
                    }
                }
                remove_non_dir(&target, &raw_path)?;
                std::fs::hard_link(&source, &target)?;
            }
            T::Char | T::Block | T::Fifo => {
                return Err(hostile(&raw_path, "a device or FIFO node (a backup holds none)"));
            }
            T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink => {}
            other => return Err(hostile(&raw_path, format!("an entry of unsupported type {other:?}"))),
        }
    }
    Ok(written)
}

/// The entry's path as plain relative components; `None` for the archive's root
/// (`./`). `..` and absolute paths are hostile.
fn clean_relative(path: &Path) -> Result<Option<PathBuf>, UnpackError> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => return Err(hostile(path, "`..` would leave the backup's directory")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(hostile(path, "an absolute path would leave the backup's directory"));
            }
        }
    }
    Ok((!out.as_os_str().is_empty()).then_some(out))
}

/// Whether a relative path climbs above its start (lexically).
fn escapes(path: &Path) -> bool {
    let mut depth: i64 = 0;
    for c in path.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return true,
        }
    }
    false
}

/// Makes the directories above `rel` inside `dest`, refusing any that is a link (an
/// earlier entry's symlink must never redirect a later entry).
/// Creates a directory another extraction into the same tree may be creating at the
/// same moment (`base.tar` and `pg_wal.tar` unpack side by side): a real directory
/// made by the other is fine; a link or a file is not.
fn create_dir_shared(path: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if std::fs::symlink_metadata(path)?.is_dir() {
                Ok(())
            } else {
                Err(e)
            }
        }
        other => other,
    }
}

fn ensure_real_parents(dest: &Path, rel: &Path) -> Result<(), UnpackError> {
    let mut at = dest.to_path_buf();
    let Some(parent) = rel.parent() else { return Ok(()) };
    for c in parent.components() {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(hostile(rel, format!("{} is a link or a file, not a directory", at.display()))),
            Err(_) => {
                create_dir_shared(&at)?;
                std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o700))?;
            }
        }
    }
    Ok(())
}

/// Removes what is at `target` unless it is a directory (a file over a directory is hostile).
fn remove_non_dir(target: &Path, entry: &Path) -> Result<(), UnpackError> {
    match std::fs::symlink_metadata(target) {
        Ok(m) if m.is_dir() => Err(hostile(entry, "a file over an existing directory")),
        Ok(_) => Ok(std::fs::remove_file(target)?),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        b.into_inner().unwrap()
    }

    fn header(kind: tar::EntryType, path: &str, size: u64, mode: u32) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(mode);
        // set_path refuses `..`; write the raw name the way a crafted archive would.
        let name = &mut h.as_old_mut().name;
        name[..path.len()].copy_from_slice(path.as_bytes());
        h.set_cksum();
        h
    }

    fn run(bytes: &[u8]) -> (tempfile::TempDir, Result<u64, UnpackError>) {
        let dir = tempfile::tempdir().unwrap();
        let r = unpack(bytes, &dir.path().join("out"), &AtomicBool::new(false));
        (dir, r)
    }

    #[test]
    fn plain_files_and_directories_unpack_without_privilege_bits() {
        let bytes = archive(|b| {
            b.append(&header(tar::EntryType::Directory, "d/", 0, 0o755), io::empty()).unwrap();
            b.append(&header(tar::EntryType::Regular, "d/f", 3, 0o4755), &b"abc"[..]).unwrap();
        });
        let (dir, r) = run(&bytes);
        assert_eq!(r.unwrap(), 3);
        let m = std::fs::metadata(dir.path().join("out/d/f")).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o755, "setuid bit dropped");
    }

    #[test]
    fn dot_dot_is_refused_not_skipped() {
        let bytes = archive(|b| b.append(&header(tar::EntryType::Regular, "../evil", 1, 0o644), &b"x"[..]).unwrap());
        let (dir, r) = run(&bytes);
        assert!(matches!(r, Err(UnpackError::Archive(ref m)) if m.contains("..")), "{r:?}");
        assert!(!dir.path().join("evil").exists());
    }

    #[test]
    fn symlinks_out_and_writes_through_links_are_refused() {
        let outside = tempfile::tempdir().unwrap();
        let mut h = header(tar::EntryType::Symlink, "pg_wal", 0, 0o777);
        h.set_link_name(outside.path()).unwrap();
        h.set_cksum();
        let bytes = archive(|b| b.append(&h, io::empty()).unwrap());
        let (_dir, r) = run(&bytes);
        assert!(matches!(r, Err(UnpackError::Archive(ref m)) if m.contains("outside")), "{r:?}");

        // An inside link, then a file written "through" it.
        let mut l = header(tar::EntryType::Symlink, "a", 0, 0o777);
        l.set_link_name("b").unwrap();
        l.set_cksum();
        let bytes = archive(|b| {
            b.append(&header(tar::EntryType::Directory, "b/", 0, 0o755), io::empty()).unwrap();
            b.append(&l, io::empty()).unwrap();
            b.append(&header(tar::EntryType::Regular, "a/f", 1, 0o644), &b"x"[..]).unwrap();
        });
        let (_dir, r) = run(&bytes);
        assert!(matches!(r, Err(UnpackError::Archive(ref m)) if m.contains("link")), "{r:?}");
    }

    #[test]
    fn devices_fifos_and_outside_hard_links_are_refused() {
        let bytes = archive(|b| b.append(&header(tar::EntryType::Fifo, "p", 0, 0o644), io::empty()).unwrap());
        assert!(matches!(run(&bytes).1, Err(UnpackError::Archive(_))));
        let mut h = header(tar::EntryType::Link, "shadow", 0, 0o644);
        h.set_link_name("/etc/passwd").unwrap();
        h.set_cksum();
        let bytes = archive(|b| b.append(&h, io::empty()).unwrap());
        assert!(matches!(run(&bytes).1, Err(UnpackError::Archive(_))));
    }

    #[test]
    fn a_stop_flag_stops_writing() {
        let bytes = archive(|b| b.append(&header(tar::EntryType::Regular, "f", 1, 0o644), &b"x"[..]).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let r = unpack(&bytes[..], dir.path(), &AtomicBool::new(true));
        assert!(matches!(r, Err(UnpackError::Cancelled)));
    }
}
