//! Defects made on purpose, for the canary (`drcheck canary`): a base backup with one
//! byte of one table row changed in its data page — as a page corrupted on the primary
//! and copied faithfully by the backup tool would be, so its `backup_manifest` agrees —
//! for the validators to catch.
//!
//! The tar is backup content (hostile input): it is read as a stream of entries, each
//! copied as bytes into a new archive; no entry's name or link is ever a path written
//! on this machine. The page is parsed only to choose a byte inside a row's data.

use std::io::{self, Read, Seek, Write};
use std::path::Path;

/// PostgreSQL's block size (drcheck's sandboxes use the default build).
pub const BLOCK: usize = 8192;
/// The first relfilenode of a user relation (`FirstNormalObjectId`).
const FIRST_USER_OID: u64 = 16384;
/// Pages of a candidate relation looked at for a row to change.
const PAGES_LOOKED_AT: usize = 16;

/// Where the defect is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flipped {
    /// The relation file inside the data directory (`base/16384/16385`).
    pub path: String,
    /// Its block, and the row's line pointer (1-based, as `ctid` counts).
    pub block: u64,
    pub line: u16,
    /// The byte's offset in the file, and its value before and after.
    pub offset: u64,
    pub was: u8,
    pub now: u8,
}

/// The byte of `page` (a heap page) to change: the last data byte of a live row,
/// preferring rows whose value ends in an ASCII letter or digit (the end of a text
/// value: changing it keeps the row readable). Returns (offset in page, line pointer,
/// new value).
pub fn choose_in_page(page: &[u8]) -> Option<(usize, u16, u8)> {
    if page.len() != BLOCK {
        return None;
    }
    let u16_at = |o: usize| u16::from_le_bytes([page[o], page[o + 1]]) as usize;
    let (lower, upper, special) = (u16_at(12), u16_at(14), u16_at(16));
    let version = u16_at(18);
    // A heap page: no special space, the block size in its version word, line pointers.
    if special != BLOCK || version & 0xFF00 != BLOCK || lower < 28 || lower > upper || upper > BLOCK {
        return None;
    }
    let mut fallback = None;
    for (i, lp) in (24..lower).step_by(4).enumerate() {
        let word = u32::from_le_bytes([page[lp], page[lp + 1], page[lp + 2], page[lp + 3]]);
        let (off, flags, len) = ((word & 0x7FFF) as usize, (word >> 15) & 3, (word >> 17) as usize);
        // LP_NORMAL, inside the tuple area, at least a header.
        if flags != 1 || off < upper || off + len > BLOCK || len <= 24 {
            continue;
        }
        let t = &page[off..off + len];
        let xmax = u32::from_le_bytes([t[4], t[5], t[6], t[7]]);
        let infomask = u16::from_le_bytes([t[20], t[21]]);
        let hoff = t[22] as usize;
        // A live row: never deleted or updated (xmax invalid).
        if !(xmax == 0 || infomask & 0x0800 != 0) || hoff < 23 || hoff >= len {
            continue;
        }
        let last = off + len - 1;
        let b = page[last];
        let line = (i + 1) as u16;
        let changed = match b {
            b'0'..=b'8' | b'a'..=b'y' | b'A'..=b'Y' => Some(b + 1),
            b'9' => Some(b'0'),
            b'z' => Some(b'a'),
            b'Z' => Some(b'A'),
            _ => None,
        };
        match changed {
            Some(now) => return Some((last, line, now)),
            None if fallback.is_none() => fallback = Some((last, line, b ^ 0x01)),
            None => {}
        }
    }
    fallback
}

/// Whether a tar member is a user relation's main fork (`base/<db>/<relfilenode>`).
fn is_user_relation(path: &str) -> bool {
    let parts: Vec<&str> = path.trim_start_matches("./").split('/').collect();
    parts.len() == 3
        && parts[0] == "base"
        && parts[1].chars().all(|c| c.is_ascii_digit())
        && parts[2].chars().all(|c| c.is_ascii_digit())
        && parts[2].parse::<u64>().is_ok_and(|n| n >= FIRST_USER_OID)
}

/// The largest user heap relation of the tar in `input` that has a row to change, and
/// the change: read once, front to back.
fn choose<R: Read>(input: R) -> io::Result<Option<Flipped>> {
    let mut archive = tar::Archive::new(input);
    let mut best: Option<(u64, Flipped)> = None;
    for entry in archive.entries()? {
        let mut entry = entry?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let path = String::from_utf8_lossy(&entry.path_bytes()).to_string();
        let size = entry.size();
        if !is_user_relation(&path) || size < BLOCK as u64 || best.as_ref().is_some_and(|(s, _)| *s >= size) {
            continue;
        }
        let mut page = vec![0u8; BLOCK];
        for block in 0..PAGES_LOOKED_AT.min((size / BLOCK as u64) as usize) {
            if entry.read_exact(&mut page).is_err() {
                break;
            }
            if let Some((at, line, now)) = choose_in_page(&page) {
                let offset = block as u64 * BLOCK as u64 + at as u64;
                let flipped = Flipped { path: path.clone(), block: block as u64, line, offset, was: page[at], now };
                best = Some((size, flipped));
                break;
            }
        }
    }
    Ok(best.map(|(_, f)| f))
}

/// A reader that changes one byte at `offset` of what it reads.
struct Change<R> {
    inner: R,
    pos: u64,
    offset: u64,
    now: u8,
}

impl<R: Read> Read for Change<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if self.offset >= self.pos && self.offset < self.pos + n as u64 {
            buf[(self.offset - self.pos) as usize] = self.now;
        }
        self.pos += n as u64;
        Ok(n)
    }
}

/// Copies the tar `spool` (uncompressed, seekable: read twice) into `out` with one byte
/// of one row changed, chosen as [`choose`] says. `None`: no user table with a row.
pub fn flip_row_byte<W: Write>(spool: &mut std::fs::File, out: W) -> io::Result<Option<(Flipped, W)>> {
    spool.rewind()?;
    let Some(flipped) = choose(&mut *spool)? else { return Ok(None) };
    spool.rewind()?;
    let mut archive = tar::Archive::new(&mut *spool);
    let mut builder = tar::Builder::new(out);
    for entry in archive.entries()? {
        let entry = entry?;
        let mut header = entry.header().clone();
        let path = String::from_utf8_lossy(&entry.path_bytes()).to_string();
        if header.entry_type() == tar::EntryType::Regular && path == flipped.path {
            let reader = Change { inner: entry, pos: 0, offset: flipped.offset, now: flipped.now };
            builder.append(&header, reader)?;
        } else {
            header.set_cksum();
            builder.append(&header, entry)?;
        }
    }
    let out = builder.into_inner()?;
    Ok(Some((flipped, out)))
}

/// `backup_manifest` as a backup of the changed file would have it: the file's checksum
/// left out (as `pg_basebackup --manifest-checksums=none` writes it; its size is the
/// same) and the manifest's own SHA-256 computed again.
pub fn manifest_without_checksum(manifest: &str, path: &str) -> Result<String, crate::error::Malformed> {
    let needle = format!("\"Path\": \"{path}\",");
    let mut found = false;
    let mut out = String::with_capacity(manifest.len());
    for line in manifest.split_inclusive('\n') {
        if !found && line.contains(&needle) {
            found = true;
            match line.find(", \"Checksum-Algorithm\"") {
                Some(at) => {
                    let end = line.rfind('}').ok_or("backup_manifest: a file's entry does not end in }")?;
                    out.push_str(&line[..at]);
                    out.push(' ');
                    out.push_str(&line[end..]);
                }
                None => out.push_str(line),
            }
        } else {
            out.push_str(line);
        }
    }
    if !found {
        return Err(format!("backup_manifest lists no {path}").into());
    }
    let at = out.rfind("\"Manifest-Checksum\": \"").ok_or("backup_manifest has no Manifest-Checksum")?;
    use sha2::Digest as _;
    let digest = hex::encode(sha2::Sha256::digest(&out.as_bytes()[..at]));
    let value = at + "\"Manifest-Checksum\": \"".len();
    if out.len() < value + 64 {
        return Err("backup_manifest: Manifest-Checksum is not 64 hex digits".into());
    }
    out.replace_range(value..value + 64, &digest);
    Ok(out)
}

/// `base.tar` or `base.tar.gz` at `input` rewritten to `output` with one row byte
/// changed ([`flip_row_byte`]), through an uncompressed spool in `work`.
/// The spool holds at most `max_bytes` (what a restore of the backup may write): a
/// compressed tar that expands further is refused, not followed.
pub fn flip_base_tar(
    input: &Path,
    output: &Path,
    gzip: bool,
    work: &Path,
    max_bytes: u64,
) -> io::Result<Option<Flipped>> {
    let mut spool = tempfile::tempfile_in(work)?;
    let file = std::fs::File::open(input)?;
    let reader: Box<dyn Read> = if gzip {
        Box::new(flate2::read::MultiGzDecoder::new(io::BufReader::new(file)))
    } else {
        Box::new(io::BufReader::new(file))
    };
    let copied = io::copy(&mut reader.take(max_bytes.saturating_add(1)), &mut spool)?;
    if copied > max_bytes {
        return Err(io::Error::other(format!("expands past {max_bytes} bytes (sandbox.max_expansion × its size)")));
    }
    let out = io::BufWriter::new(std::fs::File::create(output)?);
    let flipped = if gzip {
        let gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
        match flip_row_byte(&mut spool, gz)? {
            Some((f, gz)) => {
                gz.finish()?.flush()?;
                Some(f)
            }
            None => None,
        }
    } else {
        match flip_row_byte(&mut spool, out)? {
            Some((f, mut out)) => {
                out.flush()?;
                Some(f)
            }
            None => None,
        }
    };
    Ok(flipped)
}

/// The names of the regular files a tar (plain or gzip) at `input` holds, at most
/// `max` of them: what a base backup's `pg_wal.tar` carries.
pub fn tar_members(input: &Path, gzip: bool, max: usize) -> io::Result<Vec<String>> {
    let file = io::BufReader::new(std::fs::File::open(input)?);
    let reader: Box<dyn Read> = if gzip { Box::new(flate2::read::MultiGzDecoder::new(file)) } else { Box::new(file) };
    let mut archive = tar::Archive::new(reader);
    let mut names = Vec::new();
    for entry in archive.entries()? {
        let entry = entry?;
        if entry.header().entry_type() == tar::EntryType::Regular {
            names.push(String::from_utf8_lossy(&entry.path_bytes()).to_string());
            if names.len() >= max {
                break;
            }
        }
    }
    Ok(names)
}

/// The label's `START WAL LOCATION` segment, read from a base backup's tar at `input`.
pub fn start_segment_of(input: &Path, gzip: bool) -> io::Result<Option<String>> {
    let file = io::BufReader::new(std::fs::File::open(input)?);
    let reader: Box<dyn Read> = if gzip { Box::new(flate2::read::MultiGzDecoder::new(file)) } else { Box::new(file) };
    let mut archive = tar::Archive::new(reader);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = String::from_utf8_lossy(&entry.path_bytes()).to_string();
        if path.trim_start_matches("./") == "backup_label" {
            let mut label = String::new();
            entry.by_ref().take(64 * 1024).read_to_string(&mut label)?;
            return Ok(crate::sources::physical::parse_start_segment(&label).ok());
        }
    }
    Ok(None)
}

/// Dates a pg_dump custom-format archive's header `at` (UTC, as drcheck reads it): a
/// dump made again from a restored copy is as of the copy's point, not of when it was
/// written. Only the header's `struct tm` fields change.
pub fn set_dump_time(b: &mut [u8], at: std::time::SystemTime) -> Result<(), crate::error::Malformed> {
    use chrono::{Datelike as _, Timelike as _};
    if !b.starts_with(b"PGDMP") || b.len() < 11 {
        return Err("not a pg_dump custom archive (no PGDMP magic)".into());
    }
    let (vmaj, vmin, int_size) = (b[5], b[6], b[8] as usize);
    if vmaj != 1 || vmin < 10 || !(4..=8).contains(&int_size) {
        return Err(format!("unsupported archive version {vmaj}.{vmin}").into());
    }
    // After the magic and six version bytes: the compression (one byte from 1.15, an int before).
    let mut pos = 11 + if vmin >= 15 { 1 } else { 1 + int_size };
    let secs = at.duration_since(std::time::UNIX_EPOCH).map_err(|_| "a time before 1970")?.as_secs() as i64;
    let t = chrono::DateTime::from_timestamp(secs, 0).ok_or("time out of range")?;
    let fields = [
        t.second() as i64,
        t.minute() as i64,
        t.hour() as i64,
        t.day() as i64,
        t.month0() as i64,
        t.year() as i64 - 1900,
        0,
    ];
    for v in fields {
        let slot = b.get_mut(pos..pos + 1 + int_size).ok_or("header cut short")?;
        slot[0] = u8::from(v < 0);
        let mut m = v.unsigned_abs();
        for byte in &mut slot[1..] {
            *byte = (m & 0xFF) as u8;
            m >>= 8;
        }
        pos += 1 + int_size;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A heap page with rows whose data ends as given.
    fn page(rows: &[&[u8]]) -> Vec<u8> {
        let mut p = vec![0u8; BLOCK];
        let mut upper = BLOCK;
        for (i, data) in rows.iter().enumerate() {
            let len = 24 + data.len();
            upper -= len.div_ceil(8) * 8;
            let t = &mut p[upper..upper + len];
            t[20..22].copy_from_slice(&0x0800u16.to_le_bytes());
            t[22] = 24;
            t[24..].copy_from_slice(data);
            let word = (upper as u32) | (1 << 15) | ((len as u32) << 17);
            p[24 + 4 * i..28 + 4 * i].copy_from_slice(&word.to_le_bytes());
        }
        p[12..14].copy_from_slice(&((24 + 4 * rows.len()) as u16).to_le_bytes());
        p[14..16].copy_from_slice(&(upper as u16).to_le_bytes());
        p[16..18].copy_from_slice(&(BLOCK as u16).to_le_bytes());
        p[18..20].copy_from_slice(&((BLOCK as u16) | 4).to_le_bytes());
        p
    }

    #[test]
    fn a_text_row_is_preferred_and_changed_to_another_letter() {
        let p = page(&[&[1, 0, 0, 0], &[1, 0, 0, 0, 0x0b, b'a', b'b', b'c', b'd', b'z']]);
        let (at, line, now) = choose_in_page(&p).unwrap();
        assert_eq!((line, p[at], now), (2, b'z', b'a'));
    }

    #[test]
    fn without_text_the_last_byte_of_the_first_live_row() {
        let p = page(&[&[7, 0, 0, 0]]);
        let (at, line, now) = choose_in_page(&p).unwrap();
        assert_eq!((line, p[at], now), (1, 0, 1));
    }

    #[test]
    fn an_index_page_or_an_empty_page_is_not_a_heap_with_rows() {
        let mut p = page(&[&[1, 0, 0, 0]]);
        p[16..18].copy_from_slice(&((BLOCK - 16) as u16).to_le_bytes());
        assert_eq!(choose_in_page(&p), None);
        assert_eq!(choose_in_page(&page(&[])), None);
        assert_eq!(choose_in_page(&[0u8; 100]), None);
    }

    #[test]
    fn only_user_relations_main_forks() {
        assert!(is_user_relation("base/16384/16385"));
        assert!(is_user_relation("./base/5/24576"));
        assert!(!is_user_relation("base/16384/1259"));
        assert!(!is_user_relation("base/16384/16385_fsm"));
        assert!(!is_user_relation("base/16384/16385.1"));
        assert!(!is_user_relation("global/16385"));
    }

    #[test]
    fn the_tar_keeps_every_other_byte_and_changes_one() {
        let dir = tempfile::tempdir().unwrap();
        let rel = page(&[&[1, 0, 0, 0, b'h', b'e', b'y']]);
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in [
            ("backup_label", b"START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\n".to_vec()),
            ("base/16384/16390", rel.clone()),
            ("base/16384/1259", rel.clone()),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o600);
            h.set_cksum();
            b.append_data(&mut h, name, &data[..]).unwrap();
        }
        let input = dir.path().join("base.tar.gz");
        let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(&input).unwrap(), flate2::Compression::fast());
        gz.write_all(&b.into_inner().unwrap()).unwrap();
        gz.finish().unwrap();
        let output = dir.path().join("out.tar.gz");
        assert!(
            flip_base_tar(&input, &output, true, dir.path(), 4096)
                .unwrap_err()
                .to_string()
                .contains("expands past 4096")
        );
        let f = flip_base_tar(&input, &output, true, dir.path(), 1 << 20).unwrap().unwrap();
        assert_eq!((f.path.as_str(), f.block, f.line, f.was, f.now), ("base/16384/16390", 0, 1, b'y', b'z'));
        let mut a = tar::Archive::new(flate2::read::GzDecoder::new(std::fs::File::open(&output).unwrap()));
        let mut seen = 0;
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let name = String::from_utf8_lossy(&e.path_bytes()).to_string();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            if name == "base/16384/16390" {
                let diff: Vec<usize> = (0..BLOCK).filter(|&i| data[i] != rel[i]).collect();
                assert_eq!(diff, vec![f.offset as usize]);
                seen += 1;
            } else if name == "base/16384/1259" {
                assert_eq!(data, rel);
                seen += 1;
            }
        }
        assert_eq!(seen, 2);
        assert_eq!(start_segment_of(&output, true).unwrap().as_deref(), Some("000000010000000000000002"));
        assert_eq!(tar_members(&output, true, 2).unwrap(), vec!["backup_label", "base/16384/16390"]);
    }

    #[test]
    fn a_dump_header_is_dated_again() {
        // PGDMP 1.14.0, int size 4, off size 8, custom; compression 0; tm fields; strings.
        let mut h = b"PGDMP\x01\x0e\x00\x04\x08\x01".to_vec();
        h.extend([0, 0, 0, 0, 0]);
        for _ in 0..7 {
            h.extend([0, 9, 0, 0, 0]);
        }
        for s in ["db", "15.1", "15.1"] {
            h.extend([0, s.len() as u8, 0, 0, 0]);
            h.extend(s.as_bytes());
        }
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_000_000);
        set_dump_time(&mut h, at).unwrap();
        let parsed = crate::transfer::format::parse_dump_header(&h).unwrap();
        assert_eq!(parsed.created, Some(at));
        assert!(set_dump_time(&mut b"PGDMX".to_vec(), at).is_err());
    }

    #[test]
    fn the_manifest_loses_the_files_checksum_and_is_summed_again() {
        let body = "{ \"PostgreSQL-Backup-Manifest-Version\": 1,\n\"Files\": [\n{ \"Path\": \"base/1/16390\", \"Size\": 8192, \"Last-Modified\": \"2026-12-06 10:00:00 GMT\", \"Checksum-Algorithm\": \"CRC32C\", \"Checksum\": \"0a1b2c3d\" },\n{ \"Path\": \"PG_VERSION\", \"Size\": 3, \"Last-Modified\": \"2026-12-06 10:00:00 GMT\", \"Checksum-Algorithm\": \"CRC32C\", \"Checksum\": \"11111111\" }\n],\n";
        let manifest = format!("{body}\"Manifest-Checksum\": \"{}\"}}\n", "0".repeat(64));
        let out = manifest_without_checksum(&manifest, "base/1/16390").unwrap();
        assert!(
            out.contains(
                "{ \"Path\": \"base/1/16390\", \"Size\": 8192, \"Last-Modified\": \"2026-12-06 10:00:00 GMT\" },\n"
            ),
            "{out}"
        );
        assert!(out.contains("\"Checksum\": \"11111111\""));
        use sha2::Digest as _;
        let at = out.find("\"Manifest-Checksum\"").unwrap();
        assert!(out.contains(&hex::encode(sha2::Sha256::digest(&out.as_bytes()[..at]))));
        assert!(manifest_without_checksum(&manifest, "base/1/99").unwrap_err().0.contains("lists no base/1/99"));
    }
}
