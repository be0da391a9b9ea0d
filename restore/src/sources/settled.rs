//! A one-file base backup judged complete by its own contents (issue 48).
//!
//! A base-backup directory without `backup_manifest` or `pg_wal.tar` written within
//! [`crate::store::UPLOAD_GRACE`] may still be uploading, so it waits the grace out — unless its
//! `base.tar` itself shows it is whole: `backup_label` first (the start of the backup),
//! the WAL the backup needs inside it (`pg_basebackup -X fetch` ends the tar with
//! `pg_wal/<segment>` and its `archive_status/<segment>.done`, at or past the label's
//! start segment), and the tar's end-of-archive marker. Two range reads, the head and
//! the tail; nothing of it is trusted beyond deciding *when* to look: the restore reads
//! and judges all of it as ever. A compressed or encrypted tar's end cannot be read
//! without reading all of it: those wait out the grace.

use crate::store::{Backup, BackupObject, BackupStore};
use std::time::SystemTime;

/// How much of the head and of the tail is read.
const READ: u64 = 64 * 1024;
const BLOCK: usize = 512;

/// The headers' names in `bytes` (512-aligned tar blocks whose checksum holds), with
/// each one's block index.
fn headers(bytes: &[u8]) -> Vec<(usize, String)> {
    bytes
        .chunks_exact(BLOCK)
        .enumerate()
        .filter_map(|(i, b)| {
            if b.iter().all(|x| *x == 0) {
                return None;
            }
            let h = tar::Header::from_byte_slice(b);
            let stored = h.cksum().ok()?;
            // The checksum counts its own field as spaces.
            let sum: u32 = b
                .iter()
                .enumerate()
                .map(|(j, x)| if (148..156).contains(&j) { u32::from(b' ') } else { u32::from(*x) })
                .sum();
            (stored == sum).then(|| (i, String::from_utf8_lossy(&h.path_bytes()).trim_start_matches("./").to_string()))
        })
        .collect()
}

/// Whether a `base.tar` whose first bytes are `head` and last bytes `tail` (the tail
/// starting at a 512-byte boundary) is a whole one-file base backup: `Ok` says why,
/// `Err` what is missing.
pub fn one_tar_complete(head: &[u8], tail: &[u8]) -> Result<String, crate::error::Malformed> {
    let first = headers(&head[..head.len() - head.len() % BLOCK]);
    let Some((_, name)) = first.first() else {
        return Err(crate::error::Malformed::from("its head is not a tar header"));
    };
    if name != "backup_label" {
        return Err(crate::error::Malformed::from(format!("its first member is {name:?}, not backup_label")));
    }
    let size = tar::Header::from_byte_slice(&head[..BLOCK]).size().map_err(|e| e.to_string())? as usize;
    let label = head.get(BLOCK..BLOCK + size).ok_or("its backup_label runs past what was read")?;
    let start =
        crate::sources::physical::parse_start_segment(&String::from_utf8_lossy(label)).map_err(|e| e.to_string())?;
    let tail = &tail[..tail.len() - tail.len() % BLOCK];
    // The end marker: at least two zero blocks after the last member.
    let zero_end = tail.rchunks_exact(BLOCK).take_while(|b| b.iter().all(|x| *x == 0)).count();
    if zero_end < 2 {
        return Err(crate::error::Malformed::from(
            "it does not end with a tar's end-of-archive marker (it may still be written)",
        ));
    }
    let wal: Option<String> = headers(tail)
        .into_iter()
        .filter_map(|(_, n)| {
            let seg = n
                .strip_prefix("pg_wal/archive_status/")
                .and_then(|r| r.strip_suffix(".done"))
                .or(n.strip_prefix("pg_wal/"))?;
            (seg.len() == 24 && seg.chars().all(|c| c.is_ascii_hexdigit())).then(|| seg.to_ascii_uppercase())
        })
        .max();
    match wal {
        Some(w) if w[..8] == start[..8] && w >= start => Ok(format!(
            "its base.tar is whole: backup_label (from {start}), its WAL inside up to {w}, the tar's end marker"
        )),
        Some(w) => Err(crate::error::Malformed::from(format!(
            "the WAL at its end ({w}) is not the backup's own (from {start})"
        ))),
        None => Err(crate::error::Malformed::from(
            "no WAL at its end (a backup without -X fetch needs its archive or pg_wal.tar)",
        )),
    }
}

/// The base backups of `all` that wait out the grace as of `now` but whose one
/// uncompressed `base.tar` shows it is whole ([`one_tar_complete`]), each with why.
pub async fn whole_by_contents(
    store: &dyn BackupStore,
    all: &[BackupObject],
    now: SystemTime,
) -> Vec<(Backup, String)> {
    let settled: std::collections::HashSet<String> =
        crate::store::group_backups_at(all, now).into_iter().map(|b| b.key).collect();
    let mut out = Vec::new();
    for b in crate::store::group_backups(all).into_iter().filter(|b| b.is_physical() && !settled.contains(&b.key)) {
        let Some(tar) = b.parts.iter().find(|p| p.key.rsplit('/').next() == Some("base.tar")) else { continue };
        if tar.size < 3 * BLOCK as u64 {
            continue;
        }
        let tail_from = tar.size.saturating_sub(READ) / BLOCK as u64 * BLOCK as u64;
        let (head, tail) = tokio::join!(
            store.read_range(&tar.key, 0, READ.min(tar.size)),
            store.read_range(&tar.key, tail_from, tar.size - tail_from)
        );
        let (Ok(head), Ok(tail)) = (head, tail) else { continue };
        match one_tar_complete(&head, &tail) {
            Ok(why) => {
                tracing::info!(backup = %b.key, "taken as complete by its contents: {why}");
                out.push((b, why));
            }
            Err(why) => tracing::info!(backup = %b.key, "still waiting for its upload to settle: {why}"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(members: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in members {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o600);
            h.set_cksum();
            b.append_data(&mut h, name, data.as_slice()).unwrap();
        }
        b.into_inner().unwrap()
    }

    const LABEL: &[u8] =
        b"START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\nCHECKPOINT LOCATION: 0/2000060\n";

    fn judge(t: &[u8]) -> Result<String, crate::error::Malformed> {
        let head = &t[..t.len().min(READ as usize)];
        let from = (t.len().saturating_sub(READ as usize)) / BLOCK * BLOCK;
        one_tar_complete(head, &t[from..])
    }

    #[test]
    fn a_whole_one_file_backup_is_told_from_one_still_written() {
        let seg = vec![7u8; 100_000];
        let whole = tar_of(&[
            ("backup_label", LABEL.to_vec()),
            ("base/1/1259", vec![1u8; 200_000]),
            ("global/pg_control", vec![2u8; 8192]),
            ("pg_wal/000000010000000000000002", seg),
            ("pg_wal/archive_status/000000010000000000000002.done", vec![]),
        ]);
        let why = judge(&whole).unwrap();
        assert!(why.contains("up to 000000010000000000000002"), "{why}");
        // Cut short (still being written): no end marker.
        let cut = &whole[..whole.len() - 4096];
        assert!(judge(cut).unwrap_err().0.contains("end-of-archive"), "{:?}", judge(cut));
        // Without its WAL (-X none, -X stream's pg_wal.tar not here).
        let bare = tar_of(&[("backup_label", LABEL.to_vec()), ("base/1/1259", vec![1u8; 100_000])]);
        assert!(judge(&bare).unwrap_err().0.contains("no WAL"), "{:?}", judge(&bare));
        // WAL of an older backup at its end: not its own.
        let older = tar_of(&[
            ("backup_label", LABEL.to_vec()),
            ("pg_wal/archive_status/000000010000000000000001.done", vec![]),
        ]);
        assert!(judge(&older).unwrap_err().0.contains("not the backup's own"), "{:?}", judge(&older));
        // Not a backup's tar at all.
        let other = tar_of(&[("notes.txt", b"x".to_vec())]);
        assert!(judge(&other).unwrap_err().0.contains("not backup_label"));
    }
}
