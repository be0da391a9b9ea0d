//! Backup formats, recognised by their first bytes.

use std::fmt;

/// What a backup's content says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupFormat {
    /// `pg_dump -Fc`: starts with `PGDMP`.
    Custom,
    /// A tar archive (`pg_dump -Ft`, a directory dump packed as tar, or `pg_basebackup -Ft`).
    Tar,
    Gzip,
    Zstd,
    Lz4,
    /// Looks like SQL text.
    PlainSql,
    Unknown,
}

impl BackupFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            BackupFormat::Custom => "custom",
            BackupFormat::Tar => "tar",
            BackupFormat::Gzip => "gzip",
            BackupFormat::Zstd => "zstd",
            BackupFormat::Lz4 => "lz4",
            BackupFormat::PlainSql => "plain",
            BackupFormat::Unknown => "unknown",
        }
    }
}

impl fmt::Display for BackupFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How many leading bytes [`detect`] wants to see (a tar header's magic sits at 257).
pub const DETECT_BYTES: usize = 512;

/// Detects the format from the first bytes of a backup.
pub fn detect(head: &[u8]) -> BackupFormat {
    if head.starts_with(b"PGDMP") {
        BackupFormat::Custom
    } else if head.starts_with(&[0x1f, 0x8b]) {
        BackupFormat::Gzip
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        BackupFormat::Zstd
    } else if head.starts_with(&[0x04, 0x22, 0x4d, 0x18]) {
        BackupFormat::Lz4
    } else if head.len() >= 262 && &head[257..262] == b"ustar" {
        BackupFormat::Tar
    } else if looks_like_sql(head) {
        BackupFormat::PlainSql
    } else {
        BackupFormat::Unknown
    }
}

fn looks_like_sql(head: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(&head[..head.len().min(256)]) else {
        return false;
    };
    let t = text.trim_start();
    t.starts_with("--") || t.starts_with("SET ") || t.starts_with("CREATE ") || t.starts_with("\\")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_magic_bytes() {
        assert_eq!(detect(b"PGDMP\x01\x0e\x00"), BackupFormat::Custom);
        assert_eq!(detect(&[0x1f, 0x8b, 8, 0]), BackupFormat::Gzip);
        assert_eq!(detect(&[0x28, 0xb5, 0x2f, 0xfd, 0]), BackupFormat::Zstd);
        assert_eq!(detect(b"--\n-- PostgreSQL database dump\n"), BackupFormat::PlainSql);
        assert_eq!(detect(b"\x00\x01garbage"), BackupFormat::Unknown);
        let mut tar = vec![0u8; 512];
        tar[257..262].copy_from_slice(b"ustar");
        assert_eq!(detect(&tar), BackupFormat::Tar);
    }
}
