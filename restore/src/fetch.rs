//! Fetching a backup at full speed with bounded memory: concurrent ranged reads, each
//! part retried on transient errors with backoff and jitter, delivered in order as
//! one stream. At most `concurrency` parts are in memory at once.

use crate::error::StoreError;
use crate::retry::Backoff;
use crate::store::{BackupReader, BackupStore};
use futures::stream::{self, StreamExt};
use sha2::{Digest, Sha256};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::io::StreamReader;

#[derive(Debug, Clone, Copy)]
pub struct FetchOptions {
    pub part_size: u64,
    pub concurrency: usize,
    pub backoff: Backoff,
}

impl Default for FetchOptions {
    fn default() -> Self {
        Self { part_size: 8 << 20, concurrency: 4, backoff: Backoff::default() }
    }
}

/// The error a part carries once its retries are spent; `io::Error` wraps it.
fn to_io(e: StoreError) -> io::Error {
    io::Error::other(e)
}

/// The first part's size: small, so the first byte reaches the consumer (pg_restore,
/// the tar extractor) after one short request rather than a whole large part.
const FIRST_PART: u64 = 1 << 20;

/// The parts of a `size`-byte object: starting at [`FIRST_PART`] and doubling up to
/// `max_part` (a slow start: the first bytes arrive fast, later parts are large enough
/// that per-request cost stays small). In memory at once: `concurrency` parts at most.
pub fn part_plan(size: u64, max_part: u64) -> Vec<(u64, u64)> {
    let max_part = max_part.max(1);
    let mut part = FIRST_PART.min(max_part);
    let (mut offset, mut parts) = (0u64, Vec::new());
    while offset < size {
        let len = part.min(size - offset);
        parts.push((offset, len));
        offset += len;
        part = (part * 2).min(max_part);
    }
    parts
}

/// A reader of `key` (of `size` bytes) that fetches parts concurrently.
pub fn parallel(store: Arc<dyn BackupStore>, key: &str, size: u64, opts: FetchOptions) -> BackupReader {
    let parts = part_plan(size, opts.part_size);
    let key = key.to_string();
    let s = stream::iter(parts)
        .map(move |(offset, len)| {
            let store = store.clone();
            let key = key.clone();
            // Spawned so parts download in parallel even while the consumer is busy;
            // `buffered` bounds how many exist at once. Aborted when dropped: a cancelled
            // restore stops downloading.
            let task = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
                opts.backoff
                    .run(
                        &format!("GET {key} bytes {offset}+{len}"),
                        |_| store.read_range(&key, offset, len),
                        |e: &StoreError| e.unreachable,
                    )
                    .await
                    .map_err(to_io)
            }));
            async move { task.await.map_err(io::Error::other)? }
        })
        .buffered(opts.concurrency.max(1));
    Box::pin(StreamReader::new(s))
}

/// Passes bytes through while hashing them; at the end, a digest that differs from
/// `expected` is an `InvalidData` error naming both.
pub struct Sha256Verify<R> {
    inner: R,
    hasher: Option<Sha256>,
    expected: String,
}

impl<R> Sha256Verify<R> {
    pub fn new(inner: R, expected_hex: &str) -> Self {
        Self { inner, hasher: Some(Sha256::new()), expected: expected_hex.to_ascii_lowercase() }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Sha256Verify<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = &buf.filled()[before..];
                if !new.is_empty() {
                    if let Some(h) = this.hasher.as_mut() {
                        h.update(new);
                    }
                } else if let Some(h) = this.hasher.take() {
                    let got = hex::encode(h.finalize());
                    if got != this.expected {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "sha256 mismatch: the .sha256 sidecar says {}, the backup hashes to {got}",
                                this.expected
                            ),
                        )));
                    }
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

/// The hex digest in a `.sha256` sidecar (`sha256sum` output or a bare digest).
pub fn parse_sidecar(text: &str) -> Option<String> {
    let word = text.split_whitespace().next()?;
    (word.len() == 64 && word.chars().all(|c| c.is_ascii_hexdigit())).then(|| word.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::FsStore;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn parts_arrive_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..1_000_003u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("b"), &data).unwrap();
        let store: Arc<dyn BackupStore> = Arc::new(FsStore::new(dir.path().to_path_buf()));
        let opts = FetchOptions { part_size: 65_536, concurrency: 5, backoff: Backoff::default() };
        let mut r = parallel(store, "b", data.len() as u64, opts);
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        assert!(got == data, "reassembled bytes differ");
    }

    #[test]
    fn parts_start_small_and_grow_to_the_part_size() {
        let mib = 1 << 20;
        let plan = part_plan(100 * mib, 8 * mib);
        let sizes: Vec<u64> = plan.iter().map(|p| p.1 / mib).collect();
        assert_eq!(&sizes[..5], [1, 2, 4, 8, 8]);
        assert_eq!(plan.iter().map(|p| p.1).sum::<u64>(), 100 * mib);
        assert!(plan.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0), "contiguous");
        assert_eq!(part_plan(0, mib), vec![]);
        assert_eq!(part_plan(10, 4), vec![(0, 4), (4, 4), (8, 2)], "a part size below the first part");
    }

    #[tokio::test]
    async fn sha256_mismatch_is_invalid_data() {
        let data = b"hello world".to_vec();
        let good = hex::encode(Sha256::digest(&data));
        let mut out = Vec::new();
        Sha256Verify::new(&data[..], &good).read_to_end(&mut out).await.unwrap();
        let err = Sha256Verify::new(&data[..], &"0".repeat(64)).read_to_end(&mut out).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains(&good));
    }

    #[test]
    fn sidecar_forms() {
        let d = "a".repeat(64);
        assert_eq!(parse_sidecar(&format!("{d}  orders.dump\n")), Some(d.clone()));
        assert_eq!(parse_sidecar(&d.to_uppercase()), Some(d));
        assert_eq!(parse_sidecar("nonsense"), None);
    }
}
