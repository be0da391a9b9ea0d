//! What the scratch disk can write, and how close a restore came to it: a slow restore
//! then says whether the disk was the limit, or the network and decompression, the
//! server's own loading, or WAL replay.
//!
//! The disk's sequential write bandwidth is measured once per scratch device (256 MiB
//! written and synced in 4 MiB blocks of incompressible bytes) and cached beside the
//! pristine catalog fingerprints (`disk-write-<device>.json`).

use drcheck_config::SandboxConfig;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// How much the measurement writes.
const PROBE_BYTES: usize = 256 << 20;
/// The restore wrote at this fraction of the disk's bandwidth or more: the disk was
/// the limit.
pub(crate) const DISK_BOUND: f64 = 0.7;

#[derive(serde::Serialize, serde::Deserialize)]
struct Cached {
    bytes_per_second: f64,
    measured_at: String,
    probe_bytes: u64,
}

/// The scratch disk's sequential write bandwidth (bytes per second): cached, or
/// measured now; `None` when it cannot be (logged).
pub(crate) async fn write_bps(sandbox: &SandboxConfig) -> Option<f64> {
    use std::os::unix::fs::MetadataExt;
    let scratch = sandbox.scratch_dir.clone();
    let device = std::fs::metadata(&scratch).ok()?.dev();
    let cache = crate::pristine::cache_dir(sandbox).ok()?.join(format!("disk-write-{device:x}.json"));
    if let Some(c) = std::fs::read(&cache).ok().and_then(|b| serde_json::from_slice::<Cached>(&b).ok()) {
        return Some(c.bytes_per_second);
    }
    static MEASURING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one = MEASURING.lock().await;
    if let Some(c) = std::fs::read(&cache).ok().and_then(|b| serde_json::from_slice::<Cached>(&b).ok()) {
        return Some(c.bytes_per_second);
    }
    let measured = tokio::task::spawn_blocking(move || measure(&scratch)).await.ok()?;
    match measured {
        Ok(bps) => {
            let c = Cached {
                bytes_per_second: bps,
                measured_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
                probe_bytes: PROBE_BYTES as u64,
            };
            if let Ok(text) = serde_json::to_vec(&c) {
                let _ = crate::pristine::write_private_atomically(&cache, &text);
            }
            tracing::info!(
                bytes_per_second = bps,
                device = format!("{device:x}"),
                "scratch disk write bandwidth measured"
            );
            Some(bps)
        }
        Err(e) => {
            tracing::warn!("cannot measure the scratch disk's write bandwidth: {e}");
            None
        }
    }
}

/// Writes [`PROBE_BYTES`] into a file of `dir` and syncs it: bytes per second.
fn measure(dir: &Path) -> std::io::Result<f64> {
    let private = drcheck_restore::ensure_cache_dir(dir).map_err(std::io::Error::other)?;
    let mut file = tempfile::NamedTempFile::new_in(private)?;
    // Incompressible, so a compressing file system does not flatter the disk.
    let mut block = vec![0u8; 4 << 20];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for b in block.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let started = Instant::now();
    let mut written = 0;
    while written < PROBE_BYTES {
        file.write_all(&block)?;
        written += block.len();
    }
    file.as_file().sync_all()?;
    let took = started.elapsed().max(Duration::from_micros(1));
    Ok(written as f64 / took.as_secs_f64())
}

/// What limited a restore, from how fast it wrote against the disk and where its time
/// went: `disk`, `replay` (WAL replay and start-up after the files were in place),
/// `network or decompression` (the files arrived no faster than they were written), or
/// `restore` (the server's own loading: pg_restore, index builds).
pub(crate) fn limited_by(fraction: Option<f64>, physical: bool, copied: Duration, ready: Duration) -> &'static str {
    if fraction.is_some_and(|f| f >= DISK_BOUND) {
        return "disk";
    }
    let after = ready.saturating_sub(copied);
    if physical && after > copied {
        return "replay";
    }
    if physical || copied * 2 >= ready {
        return "network or decompression";
    }
    "restore"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_named_from_the_fraction_and_the_phases() {
        let s = Duration::from_secs;
        assert_eq!(limited_by(Some(0.8), true, s(10), s(12)), "disk");
        assert_eq!(limited_by(Some(0.2), true, s(10), s(40)), "replay");
        assert_eq!(limited_by(Some(0.2), true, s(10), s(12)), "network or decompression");
        assert_eq!(limited_by(Some(0.1), false, s(2), s(30)), "restore");
        assert_eq!(limited_by(None, false, s(20), s(30)), "network or decompression");
    }

    #[test]
    fn the_disk_is_measured() {
        let dir = tempfile::tempdir().unwrap();
        let bps = measure(dir.path()).unwrap();
        assert!(bps > 1e6, "{bps}");
        assert!(drcheck_restore::disk_usage(dir.path()) < (1 << 20), "the probe's file is removed");
    }
}
