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
    /// An age file (`age-encryption.org/v1`), binary or armoured.
    Age,
    /// An OpenPGP encrypted message, binary or armoured.
    OpenPgp,
    /// Looks like SQL text.
    PlainSql,
    Unknown,
}

impl BackupFormat {
    /// A layer around the backup proper: compression or encryption.
    pub fn is_layer(self) -> bool {
        matches!(
            self,
            BackupFormat::Gzip | BackupFormat::Zstd | BackupFormat::Lz4 | BackupFormat::Age | BackupFormat::OpenPgp
        )
    }

    pub fn is_encryption(self) -> bool {
        matches!(self, BackupFormat::Age | BackupFormat::OpenPgp)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BackupFormat::Custom => "custom",
            BackupFormat::Tar => "tar",
            BackupFormat::Gzip => "gzip",
            BackupFormat::Zstd => "zstd",
            BackupFormat::Lz4 => "lz4",
            BackupFormat::Age => "age",
            BackupFormat::OpenPgp => "openpgp",
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
pub(crate) const DETECT_BYTES: usize = 8192;

/// How many bytes a compressed backup says it expands to, where its format records it:
/// gzip's trailer (ISIZE, the size modulo 4 GiB: a lower bound), a zstd frame's content
/// size. `head` is the object's first bytes, `tail` its last four.
pub(crate) fn declared_expanded_size(head: &[u8], tail: &[u8]) -> Option<u64> {
    match detect(head) {
        BackupFormat::Gzip => {
            let t: [u8; 4] = tail.get(tail.len().checked_sub(4)?..)?.try_into().ok()?;
            Some(u64::from(u32::from_le_bytes(t)))
        }
        BackupFormat::Zstd => zstd_content_size(head),
        _ => None,
    }
}

/// The Frame_Content_Size of the first zstd frame, when the header carries one.
fn zstd_content_size(head: &[u8]) -> Option<u64> {
    if !head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        return None;
    }
    let descriptor = *head.get(4)?;
    let fcs_flag = descriptor >> 6;
    let single_segment = descriptor & 0x20 != 0;
    let dict_len = [0usize, 1, 2, 4][usize::from(descriptor & 0x03)];
    let fcs_len = match (fcs_flag, single_segment) {
        (0, false) => return None,
        (0, true) => 1,
        (1, _) => 2,
        (2, _) => 4,
        _ => 8,
    };
    let at = 5 + usize::from(!single_segment) + dict_len;
    let bytes = head.get(at..at + fcs_len)?;
    let mut v = 0u64;
    for (i, b) in bytes.iter().enumerate() {
        v |= u64::from(*b) << (8 * i);
    }
    Some(if fcs_len == 2 { v + 256 } else { v })
}

/// Detects the format from the first bytes of a backup.
pub(crate) fn detect(head: &[u8]) -> BackupFormat {
    if head.starts_with(b"PGDMP") {
        BackupFormat::Custom
    } else if head.starts_with(&[0x1f, 0x8b]) {
        BackupFormat::Gzip
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd])
        // A skippable frame (0x184D2A50–5F) may open a zstd stream too.
        || (head.len() >= 4 && head[0] & 0xf0 == 0x50 && head[1..4] == [0x2a, 0x4d, 0x18])
    {
        BackupFormat::Zstd
    } else if head.starts_with(&[0x04, 0x22, 0x4d, 0x18]) {
        BackupFormat::Lz4
    } else if head.len() >= 262 && &head[257..262] == b"ustar" {
        BackupFormat::Tar
    } else if crate::transfer::envelope::is_age(head) {
        BackupFormat::Age
    } else if crate::transfer::envelope::is_openpgp(head) || crate::transfer::envelope::is_openpgp_signed_only(head) {
        // Encrypted, or signed only (`gpg -s`, `--clearsign`: its armour starts with
        // dashes a SQL comment would too): an OpenPGP layer either way.
        BackupFormat::OpenPgp
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

/// What a pg_dump archive header (custom format, or `toc.dat` of tar and directory
/// dumps) says about the dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DumpHeader {
    pub archive_version: (u8, u8, u8),
    /// `none`, `gzip`, `lz4` or `zstd`: pg_dump's own compression of the data.
    pub compression: &'static str,
    /// The dumped server's version string, e.g. `15.18 (Debian 15.18-0+deb12u1)`.
    pub server_version: Option<String>,
    /// When pg_dump started (its snapshot, within a moment): the archive keeps the
    /// dumping host's local time without a zone, read here as UTC — what containers and
    /// most backup hosts run on.
    pub created: Option<std::time::SystemTime>,
}

impl DumpHeader {
    pub(crate) fn server_major(&self) -> Option<u32> {
        major_of(self.server_version.as_deref()?)
    }
}

pub(crate) use crate::server::pgbin::major_of;

/// Parses the header pg_dump writes at the start of a custom archive and of `toc.dat`
/// (see `WriteHead` in PostgreSQL's `pg_backup_archiver.c`).
pub(crate) fn parse_dump_header(b: &[u8]) -> Result<DumpHeader, crate::error::Malformed> {
    if !b.starts_with(b"PGDMP") {
        return Err(crate::error::Malformed::from("no PGDMP magic"));
    }
    let mut pos = 5;
    let mut byte = || -> Result<u8, crate::error::Malformed> {
        let v = *b.get(pos).ok_or("header cut short")?;
        pos += 1;
        Ok(v)
    };
    let (vmaj, vmin, vrev) = (byte()?, byte()?, byte()?);
    let int_size = byte()? as usize;
    let _off_size = byte()?;
    let _format = byte()?;
    if !(1..=8).contains(&int_size) || vmaj != 1 || vmin < 10 {
        return Err(crate::error::Malformed::from(format!("unsupported archive version {vmaj}.{vmin}.{vrev}")));
    }
    let read_int = |pos: &mut usize| -> Result<i64, crate::error::Malformed> {
        let sign = *b.get(*pos).ok_or("header cut short")?;
        let bytes = b.get(*pos + 1..*pos + 1 + int_size).ok_or("header cut short")?;
        *pos += 1 + int_size;
        let v = bytes.iter().rev().fold(0i64, |acc, &x| (acc << 8) | x as i64);
        Ok(if sign != 0 { -v } else { v })
    };
    let compression = if vmin >= 15 {
        match byte()? {
            0 => "none",
            1 => "gzip",
            2 => "lz4",
            3 => "zstd",
            _ => "unknown",
        }
    } else {
        let level = read_int(&mut pos)?;
        if level == 0 { "none" } else { "gzip" }
    };
    // The dump's creation time, field by field: a C `struct tm` (sec, min, hour, mday,
    // mon from 0, year from 1900, isdst).
    let mut tm = [0i64; 7];
    for f in &mut tm {
        *f = read_int(&mut pos)?;
    }
    let created = tm_to_time(&tm);
    let read_str = |pos: &mut usize| -> Result<Option<String>, crate::error::Malformed> {
        let len = read_int(pos)?;
        if len < 0 {
            return Ok(None);
        }
        let bytes = b.get(*pos..*pos + len as usize).ok_or("header cut short")?;
        *pos += len as usize;
        Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
    };
    let _dbname = read_str(&mut pos)?;
    let server_version = read_str(&mut pos)?;
    Ok(DumpHeader { archive_version: (vmaj, vmin, vrev), compression, server_version, created })
}

/// A `struct tm` (sec, min, hour, mday, mon from 0, year from 1900) as UTC.
fn tm_to_time(tm: &[i64; 7]) -> Option<std::time::SystemTime> {
    let date = chrono::NaiveDate::from_ymd_opt(
        i32::try_from(tm[5] + 1900).ok()?,
        u32::try_from(tm[4] + 1).ok()?,
        u32::try_from(tm[3]).ok()?,
    )?;
    let t = date.and_hms_opt(u32::try_from(tm[2]).ok()?, u32::try_from(tm[1]).ok()?, u32::try_from(tm[0]).ok()?)?;
    let secs = t.and_utc().timestamp();
    (secs > 0).then(|| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64))
}

/// When a plain SQL dump started, if it says so (`pg_dump -v` writes `-- Started on
/// 2026-12-01 03:00:00 UTC`): only UTC and GMT, and numeric offsets, are understood.
pub(crate) fn plain_dump_started(head: &[u8]) -> Option<std::time::SystemTime> {
    let text = String::from_utf8_lossy(head);
    let line = text.lines().take(50).find_map(|l| l.strip_prefix("-- Started on "))?.trim();
    let (stamp, zone) = line.rsplit_once(' ')?;
    let naive = chrono::NaiveDateTime::parse_from_str(stamp, "%Y-%m-%d %H:%M:%S").ok()?;
    let offset_secs = match zone {
        "UTC" | "GMT" | "Z" => 0,
        z if (z.starts_with('+') || z.starts_with('-')) && z.len() >= 3 => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let digits = z[1..].replace(':', "");
            let (h, m) = match digits.len() {
                2 => (digits.parse::<i64>().ok()?, 0),
                4 => (digits[..2].parse::<i64>().ok()?, digits[2..].parse::<i64>().ok()?),
                _ => return None,
            };
            sign * (h * 3600 + m * 60)
        }
        _ => return None,
    };
    let secs = naive.and_utc().timestamp() - offset_secs;
    (secs > 0).then(|| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64))
}

/// The name of a tar archive's first member.
pub(crate) fn first_tar_member(head: &[u8]) -> Option<String> {
    let name = head.get(..100)?;
    let end = name.iter().position(|&c| c == 0).unwrap_or(100);
    Some(String::from_utf8_lossy(&name[..end]).trim_start_matches("./").to_string())
}

/// The server version a plain SQL dump names in its header comment.
pub(crate) fn plain_dump_server_major(head: &[u8]) -> Option<u32> {
    let text = String::from_utf8_lossy(head);
    let line = text.lines().find(|l| l.starts_with("-- Dumped from database version "))?;
    major_of(line.trim_start_matches("-- Dumped from database version "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_magic_bytes() {
        assert_eq!(detect(b"PGDMP\x01\x0e\x00"), BackupFormat::Custom);
        assert_eq!(detect(&[0x1f, 0x8b, 8, 0]), BackupFormat::Gzip);
        assert_eq!(detect(&[0x28, 0xb5, 0x2f, 0xfd, 0]), BackupFormat::Zstd);
        assert_eq!(detect(&[0x5a, 0x2a, 0x4d, 0x18, 0, 0, 0, 0]), BackupFormat::Zstd, "a skippable frame first");
        assert_eq!(detect(b"--\n-- PostgreSQL database dump\n"), BackupFormat::PlainSql);
        assert_eq!(detect(b"\x00\x01garbage"), BackupFormat::Unknown);
        let mut tar = vec![0u8; 512];
        tar[257..262].copy_from_slice(b"ustar");
        assert_eq!(detect(&tar), BackupFormat::Tar);
    }

    #[test]
    fn a_plain_dump_says_when_it_started_only_with_a_zone() {
        let t = |s: &str| plain_dump_started(s.as_bytes()).map(|t| humantime::format_rfc3339(t).to_string());
        let head = "--\n-- PostgreSQL database dump\n--\n\n-- Dumped from database version 15.18\n";
        assert_eq!(
            t(&format!("{head}-- Started on 2026-12-01 03:04:05 UTC\n")).as_deref(),
            Some("2026-12-01T03:04:05Z")
        );
        assert_eq!(
            t(&format!("{head}-- Started on 2026-12-01 05:04:05 +02\n")).as_deref(),
            Some("2026-12-01T03:04:05Z")
        );
        assert_eq!(t(&format!("{head}-- Started on 2026-12-01 03:04:05 CET\n")), None, "a zone name is ambiguous");
        assert_eq!(t(head), None, "pg_dump without -v writes no time");
    }

    #[test]
    fn reads_a_real_pg_dump_15_header() {
        // The first bytes of `pg_dump -Fc` from PostgreSQL 15.18 (archive 1.14, gzip level -1).
        let mut h = b"PGDMP\x01\x0e\x00\x04\x08\x01".to_vec();
        h.extend([1, 1, 0, 0, 0]); // compression -1
        for v in [5, 4, 3, 30, 10, 126, 0] {
            h.extend([0, v, 0, 0, 0]);
        }
        for s in ["orders", "15.18 (Debian 15.18-0+deb12u1)", "15.18 (Debian 15.18-0+deb12u1)"] {
            h.extend([0, s.len() as u8, 0, 0, 0]);
            h.extend(s.as_bytes());
        }
        let d = parse_dump_header(&h).unwrap();
        assert_eq!(d.archive_version, (1, 14, 0));
        assert_eq!(d.compression, "gzip");
        assert_eq!(d.server_major(), Some(15));
        // 2026-11-30 03:04:05 (tm_mon 10 = November, tm_year 126 = 2026).
        assert_eq!(humantime::format_rfc3339(d.created.unwrap()).to_string(), "2026-11-30T03:04:05Z");
        assert!(parse_dump_header(&h[..30]).is_err());
    }

    #[test]
    fn versions_and_members() {
        assert_eq!(major_of("9.6.24"), Some(9));
        assert_eq!(major_of("16beta1"), Some(16));
        assert_eq!(plain_dump_server_major(b"--\n-- Dumped from database version 15.18 (Debian)\n"), Some(15));
        let mut tar = vec![0u8; 512];
        tar[..7].copy_from_slice(b"toc.dat");
        assert_eq!(first_tar_member(&tar).as_deref(), Some("toc.dat"));
    }

    #[test]
    fn declared_sizes_of_gzip_and_zstd() {
        // `printf 'hello' | gzip | tail -c4` holds 5; a zstd frame of 5 bytes (single
        // segment, 1-byte size) as `zstd` writes for a known input size.
        let gz_head = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];
        assert_eq!(super::declared_expanded_size(&gz_head, &[5, 0, 0, 0]), Some(5));
        let zst = [0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x05, 0x29, 0x00, 0x00];
        assert_eq!(super::declared_expanded_size(&zst, &[]), Some(5));
        // 4-byte size, windowed: 3 GiB.
        let big = [0x28, 0xb5, 0x2f, 0xfd, 0x80, 0x58, 0x00, 0x00, 0x00, 0xc0];
        assert_eq!(super::declared_expanded_size(&big, &[]), Some(3 << 30));
        // A streamed frame without a size, and truncated headers, say nothing.
        assert_eq!(super::declared_expanded_size(&[0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58], &[]), None);
        assert_eq!(super::declared_expanded_size(&[0x28, 0xb5, 0x2f, 0xfd, 0x80], &[]), None);
        assert_eq!(super::declared_expanded_size(&gz_head, &[1]), None);
    }
}
