//! PostgreSQL 17+ incremental backups in a store: a chain of `pg_basebackup` backups — a
//! full one, then incrementals each taken with `--incremental=PRIOR/backup_manifest` —
//! that `pg_combinebackup` reconstructs into one data directory.
//!
//! Links are found from what the backups say of themselves, never from their names: an
//! incremental's `backup_label` names its prior by `INCREMENTAL FROM LSN` and `INCREMENTAL
//! FROM TLI`, which must be another backup's `START WAL LOCATION` and `START TIMELINE` in
//! the same store, of the same cluster (`System-Identifier` of the manifests). A link that
//! is missing, or of another cluster, is the backup's failure, named. Only the first
//! bytes of each `base.tar[.gz|.zst|.lz4]` (its first entry is `backup_label`) and of each
//! `backup_manifest` are read.

use crate::error::{RestoreError, Stage};
use crate::store::{Backup, BackupObject, BackupReader, BackupStore, is_base_tar};
use crate::transfer::format::{self, BackupFormat};
use tokio::io::AsyncReadExt;

/// Bytes of a base tar read to find its `backup_label` (its first entry).
const HEAD: u64 = 64 << 10;

/// What a base backup's `backup_label` and manifest say of its place in a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// `START WAL LOCATION` and `START TIMELINE`.
    pub start_lsn: u64,
    pub timeline: u32,
    /// An incremental's prior: `INCREMENTAL FROM LSN` / `INCREMENTAL FROM TLI`.
    pub from: Option<(u64, u32)>,
    /// The manifest's `System-Identifier` (version 2 manifests, PostgreSQL 17+).
    pub system_identifier: Option<String>,
}

impl Label {
    pub fn is_incremental(&self) -> bool {
        self.from.is_some()
    }
}

/// `0/2000028` → its 64-bit value.
pub(crate) fn parse_lsn(s: &str) -> Option<u64> {
    let (hi, lo) = s.trim().split_once('/')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

pub(crate) fn lsn(v: u64) -> String {
    format!("{:X}/{:X}", v >> 32, v & 0xffff_ffff)
}

/// Parses a `backup_label`'s lines that place it in a chain.
pub(crate) fn parse_label(text: &str) -> Option<Label> {
    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let start_lsn = parse_lsn(field("START WAL LOCATION:")?.split_whitespace().next()?)?;
    let timeline = field("START TIMELINE:").and_then(|t| t.parse().ok()).unwrap_or(1);
    let from = match (field("INCREMENTAL FROM LSN:"), field("INCREMENTAL FROM TLI:")) {
        (Some(l), t) => Some((parse_lsn(l)?, t.and_then(|t| t.parse().ok()).unwrap_or(timeline))),
        _ => None,
    };
    Some(Label { start_lsn, timeline, from, system_identifier: None })
}

/// The first entry named `backup_label` among the tar bytes `head` (a stream's start).
fn label_in_tar(head: &[u8]) -> Option<String> {
    let mut at = 0usize;
    while at + 512 <= head.len() {
        let h = &head[at..at + 512];
        if h.iter().all(|b| *b == 0) {
            return None;
        }
        let name = String::from_utf8_lossy(&h[..100]).trim_end_matches('\0').to_string();
        let size_field =
            String::from_utf8_lossy(&h[124..136]).trim_matches(|c: char| c == '\0' || c == ' ').to_string();
        let size = usize::from_str_radix(&size_field, 8).ok()?;
        let body = at + 512;
        if name.trim_start_matches("./") == "backup_label" {
            return head.get(body..body + size).map(|b| String::from_utf8_lossy(b).into_owned());
        }
        at = body + size.div_ceil(512) * 512;
    }
    None
}

/// The `backup_label` of base backup `backup`, read from its base tar's first bytes
/// (decompressed as needed); `None` when it cannot be read that way (an encrypted tar).
pub async fn read_label(store: &dyn BackupStore, backup: &Backup) -> Result<Option<Label>, RestoreError> {
    let Some(base) = backup.parts.iter().find(|p| is_base_tar(name_of(p))) else { return Ok(None) };
    let raw = store.read_range(&base.key, 0, base.size.min(HEAD)).await?;
    let kind = format::detect(&raw);
    let head: Vec<u8> = match kind {
        BackupFormat::Tar => raw.to_vec(),
        BackupFormat::Gzip | BackupFormat::Zstd | BackupFormat::Lz4 => {
            let empty: BackupReader = Box::pin(tokio::io::empty());
            let mut d = crate::transfer::peel::decompress(kind, raw.to_vec(), empty);
            let mut out = Vec::new();
            // A cut stream ends in an error once its bytes run out: what came first is enough.
            let mut buf = vec![0u8; 16 << 10];
            while out.len() < HEAD as usize {
                match d.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => out.extend_from_slice(&buf[..n]),
                }
            }
            out
        }
        _ => return Ok(None),
    };
    let Some(text) = label_in_tar(&head) else { return Ok(None) };
    let Some(mut label) = parse_label(&text) else { return Ok(None) };
    label.system_identifier = system_identifier(store, backup).await?;
    Ok(Some(label))
}

/// The `System-Identifier` of a backup's manifest (read from its first bytes).
async fn system_identifier(store: &dyn BackupStore, backup: &Backup) -> Result<Option<String>, RestoreError> {
    let Some(m) = backup.parts.iter().find(|p| name_of(p) == "backup_manifest") else { return Ok(None) };
    let head = store.read_range(&m.key, 0, m.size.min(4096)).await?;
    let text = String::from_utf8_lossy(&head);
    Ok(text
        .split("\"System-Identifier\":")
        .nth(1)
        .map(|rest| rest.trim_start().chars().take_while(|c| c.is_ascii_digit()).collect::<String>()))
}

fn name_of(o: &BackupObject) -> &str {
    o.key.rsplit('/').next().unwrap_or(&o.key)
}

/// The earlier links `backup` needs, oldest (the full backup) first — empty when it is
/// not an incremental backup. `listed` is every backup of the target's store.
pub async fn links(store: &dyn BackupStore, listed: &[Backup], backup: &Backup) -> Result<Vec<Backup>, RestoreError> {
    if !backup.is_physical() {
        return Ok(Vec::new());
    }
    let Some(mut label) = read_label(store, backup).await? else { return Ok(Vec::new()) };
    if !label.is_incremental() {
        return Ok(Vec::new());
    }
    let mut known: Vec<(Backup, Label)> = Vec::new();
    for b in listed.iter().filter(|b| b.is_physical() && b.key != backup.key) {
        if let Some(l) = read_label(store, b).await? {
            known.push((b.clone(), l));
        }
    }
    let mut chain: Vec<Backup> = Vec::new();
    let mut this = backup.key.clone();
    while let Some((from, tli)) = label.from {
        let prior = known.iter().find(|(_, l)| l.start_lsn == from && l.timeline == tli);
        let Some((b, l)) = prior else {
            return Err(RestoreError::bad(
                Stage::Select,
                format!(
                    "the incremental backup {this} needs the backup that started at {} on timeline {tli} \
                     (its backup_label's INCREMENTAL FROM LSN), and the store holds none: the chain is broken \
                     ({} is restorable only with every earlier link)",
                    lsn(from),
                    backup.key
                ),
            ));
        };
        if let (Some(a), Some(b_id)) = (&label.system_identifier, &l.system_identifier)
            && a != b_id
        {
            return Err(RestoreError::bad(
                Stage::Select,
                format!(
                    "the incremental backup {this} (system identifier {a}) names {} as its prior, a backup of \
                     another cluster (system identifier {b_id})",
                    b.key
                ),
            ));
        }
        if chain.iter().any(|c| c.key == b.key) || chain.len() > 1000 {
            return Err(RestoreError::bad(Stage::Select, format!("the backups' labels make a loop at {}", b.key)));
        }
        chain.push(b.clone());
        this = b.key.clone();
        label = l.clone();
    }
    chain.reverse();
    Ok(chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\n\
                        CHECKPOINT LOCATION: 0/2000080\nBACKUP METHOD: streamed\nSTART TIMELINE: 1\n";
    const INC: &str = "START WAL LOCATION: 0/4000028 (file 000000010000000000000004)\nSTART TIMELINE: 1\n\
                       INCREMENTAL FROM LSN: 0/2000028\nINCREMENTAL FROM TLI: 1\n";

    #[test]
    fn labels_place_a_backup_in_its_chain() {
        let full = parse_label(FULL).unwrap();
        assert_eq!((full.start_lsn, full.timeline, full.from), (0x2000028, 1, None));
        let inc = parse_label(INC).unwrap();
        assert_eq!(inc.from, Some((0x2000028, 1)));
        assert!(inc.is_incremental() && !full.is_incremental());
        assert_eq!(lsn(0x1_0000_2000), "1/2000");
        assert_eq!(parse_lsn("1/2000"), Some(0x1_0000_2000));
        assert!(parse_label("garbage").is_none());
    }

    #[test]
    fn the_label_is_found_in_a_tars_first_bytes() {
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(INC.len() as u64);
        h.set_cksum();
        tar.append_data(&mut h, "backup_label", INC.as_bytes()).unwrap();
        let bytes = tar.into_inner().unwrap();
        assert_eq!(label_in_tar(&bytes).as_deref(), Some(INC));
        assert_eq!(label_in_tar(&bytes[..600]), None, "cut short: not read");
    }
}
