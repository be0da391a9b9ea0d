//! Fetching a backup at full speed with bounded memory: concurrent ranged reads, each
//! part retried on transient errors with backoff and jitter, delivered in order as
//! one stream of blocks of up to 1 MiB (a part is never held in one part-sized buffer).
//!
//! How many parts are in flight and how large they are adapts as the download goes
//! ([`Pacer`]): parts start at 1 MiB so the first byte arrives after one short request,
//! two at a time, and double in size. Once they are full size, each round of completed
//! parts measures throughput: concurrency doubles while that throughput grows (by at
//! least a tenth); at the first round where it does not, it goes back to the last
//! concurrency that paid and stays — or, if even the first doubling did not pay, tries
//! one part at a time and keeps it if it is at least as fast. The bytes of parts in
//! memory never exceed the window (the buffer pool's bound), so more parts in flight
//! means smaller ones, and a server whose requests cost the same whatever their size
//! (moto reads the whole object for each) is read one large part at a time.

use crate::error::StoreError;
use crate::store::retry::Backoff;
use crate::store::{BackupObject, BackupReader, BackupStore};
use futures::stream;
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::io::StreamReader;
use tokio_util::task::AbortOnDropHandle;

#[derive(Debug, Clone, Copy)]
pub struct FetchOptions {
    /// The largest ranged GET.
    pub part_size: u64,
    /// The most ranged GETs at once.
    pub concurrency: usize,
    /// The most bytes of parts in memory at once (in flight or waiting for the consumer);
    /// at least one part of `part_size` whatever this says.
    pub window: u64,
    pub backoff: Backoff,
}

pub use crate::store::pool::WINDOW;

impl Default for FetchOptions {
    fn default() -> Self {
        Self { part_size: 16 << 20, concurrency: 8, window: WINDOW, backoff: Backoff::default() }
    }
}

impl FetchOptions {
    /// The same download sharing its bounds with `n` others running beside it.
    pub fn shared_by(self, n: usize) -> Self {
        let n = n.max(1);
        Self { concurrency: self.concurrency.div_ceil(n), window: self.window / n as u64, ..self }
    }
}

/// The error a part carries once its retries are spent; `io::Error` wraps it.
fn to_io(e: StoreError) -> io::Error {
    io::Error::other(e)
}

/// The first part's size: small, so the first byte reaches the consumer (pg_restore,
/// the tar extractor) after one short request rather than a whole large part.
const FIRST_PART: u64 = 1 << 20;
/// No part is made smaller than this to fit more in flight (per-request cost).
const MIN_PART: u64 = 1 << 20;
/// Parts are whole multiples of this, so every part starts on a MiB boundary. Object
/// stores keep an object in blocks (Garage: 1 MiB; multipart parts are whole MiBs), and
/// a range that starts inside one makes the server read (and verify) that block for two
/// requests: on Garage, 1.09 GB in 10.67 MiB parts took 2.1 s, in 10 MiB parts 1.3 s.
/// It also fills the pool's 1 MiB blocks exactly.
const ALIGN: u64 = 1 << 20;
/// Concurrency at the start (fewer if the options allow fewer).
const START_CONCURRENCY: usize = 2;
/// Throughput must grow by this factor for concurrency to keep growing.
const GROWTH: f64 = 1.1;
/// A measured round lasts at least this long (and `limit` parts): shorter ones are noise.
const MIN_ROUND: std::time::Duration = std::time::Duration::from_millis(250);

/// Decides how many parts are in flight and the size of the next one. Pure: fed the
/// sizes of completed parts and when they completed.
#[derive(Debug)]
pub(crate) struct Pacer {
    limit: usize,
    max_limit: usize,
    window: u64,
    max_part: u64,
    next: u64,
    /// The slow start is over: rounds are measured.
    measuring: bool,
    phase: Phase,
    /// The concurrency that paid best so far, and its throughput (bytes/s).
    best: (usize, f64),
    /// Parts requested and completed, so a round leaves out the parts requested
    /// before it began (`skip` of them still to complete).
    requested: u64,
    done: u64,
    skip: u64,
    round_bytes: u64,
    round_parts: usize,
    round_started: Option<Instant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Doubling concurrency while throughput grows.
    Growing,
    /// The first doubling did not pay: trying fewer parts at a time.
    Probing,
    Settled,
}

impl Pacer {
    pub(crate) fn new(opts: &FetchOptions) -> Self {
        let max_part = opts.part_size.max(1);
        let window = opts.window.max(max_part);
        // Room for `limit` parts of at least MIN_PART and the one being consumed.
        let max_limit = opts.concurrency.max(1).min(((window / MIN_PART) as usize).saturating_sub(1).max(1));
        Self {
            limit: START_CONCURRENCY.min(max_limit),
            max_limit,
            window,
            max_part,
            next: FIRST_PART.min(max_part),
            measuring: false,
            phase: Phase::Growing,
            best: (0, 0.0),
            requested: 0,
            done: 0,
            skip: 0,
            round_bytes: 0,
            round_parts: 0,
            round_started: None,
        }
    }

    /// How many parts may be in flight now.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// The largest part that keeps `limit` parts (and the one being consumed) in the
    /// window, in whole MiBs (see [`ALIGN`]).
    fn part_cap(&self) -> u64 {
        let cap = (self.window / (self.limit as u64 + 1)).max(MIN_PART).min(self.max_part);
        match cap >= ALIGN {
            true => cap / ALIGN * ALIGN,
            false => cap,
        }
    }

    /// The size of the next part (before clipping to what is left of the object):
    /// doubling from [`FIRST_PART`] up to the cap the current concurrency allows.
    pub(crate) fn next_len(&mut self) -> u64 {
        let cap = self.part_cap();
        let len = self.next.min(cap);
        self.next = (self.next * 2).min(self.max_part);
        if len == cap && !self.measuring {
            // The first full-size part opens the first measured round.
            self.measuring = true;
            self.begin_round();
        }
        self.requested += 1;
        len
    }

    /// A new round counts only parts requested from now on: the ones still in flight
    /// were sized and sent under the last concurrency.
    fn begin_round(&mut self) {
        self.skip = self.requested - self.done;
        (self.round_bytes, self.round_parts, self.round_started) = (0, 0, None);
    }

    /// A round starts when the first of its parts is requested (or, if parts of the
    /// last one are still in flight, when the last of those completes).
    pub(crate) fn started(&mut self, now: Instant) {
        if self.skip == 0 {
            self.round_started.get_or_insert(now);
        }
    }

    /// After the concurrency that paid best is known to be the starting one (or the
    /// most allowed): one part at a time is worth a try, else it is the answer.
    fn settle_or_probe(&mut self) {
        let start = START_CONCURRENCY.min(self.max_limit);
        if self.phase == Phase::Growing && self.best.0 == start && start > 1 {
            self.limit = start / 2;
            self.phase = Phase::Probing;
        } else {
            self.limit = self.best.0;
            self.phase = Phase::Settled;
        }
    }

    /// A part of `bytes` reached the consumer at `now`. After a round (`limit` parts and
    /// [`MIN_ROUND`]), compares its throughput with the best so far and grows, probes
    /// or settles.
    pub(crate) fn completed(&mut self, bytes: u64, now: Instant) {
        self.done += 1;
        if !self.measuring {
            return;
        }
        if self.skip > 0 {
            self.skip -= 1;
            if self.skip == 0 {
                self.round_started = Some(now);
            }
            return;
        }
        self.round_bytes += bytes;
        self.round_parts += 1;
        let Some(started) = self.round_started else { return };
        if self.round_parts < self.limit || now.duration_since(started) < MIN_ROUND {
            return;
        }
        let secs = now.duration_since(started).as_secs_f64().max(1e-6);
        let rate = self.round_bytes as f64 / secs;
        let before = self.limit;
        match self.phase {
            Phase::Growing if rate >= self.best.1 * GROWTH => {
                self.best = (self.limit, rate);
                match self.limit < self.max_limit {
                    true => self.limit = (self.limit * 2).min(self.max_limit),
                    false => self.settle_or_probe(),
                }
            }
            // The last doubling did not pay: back to the concurrency before it (or below).
            Phase::Growing => self.settle_or_probe(),
            // Fewer, larger requests at least as fast: keep them.
            Phase::Probing => {
                if rate >= self.best.1 {
                    self.best = (self.limit, rate);
                }
                self.limit = self.best.0;
                self.phase = Phase::Settled;
            }
            Phase::Settled => {}
        }
        tracing::debug!(
            concurrency = before,
            mb_per_s = (rate / 1e6) as u64,
            next = self.limit,
            part_mib = self.part_cap() >> 20,
            "download round"
        );
        match self.limit == before {
            true => (self.round_bytes, self.round_parts, self.round_started) = (0, 0, Some(now)),
            false => self.begin_round(),
        }
    }
}

/// One part's bytes, in blocks.
type Part = Result<Vec<bytes::Bytes>, io::Error>;

struct Download {
    store: Arc<dyn BackupStore>,
    key: Arc<str>,
    /// The version listed: every part is read from it, or fails as changed.
    etag: Option<Arc<str>>,
    size: u64,
    offset: u64,
    opts: FetchOptions,
    pacer: Pacer,
    /// Parts requested, in order: their length and the task fetching them.
    in_flight: VecDeque<(u64, AbortOnDropHandle<Part>)>,
    /// What is left of the part being handed to the consumer.
    current: std::vec::IntoIter<bytes::Bytes>,
    /// Keeps the store's block pool while the download runs.
    _lease: Option<crate::store::pool::Lease>,
}

impl Download {
    /// Requests parts until the pacer's limit is in flight or the object is covered.
    fn fill(&mut self) {
        while self.in_flight.len() < self.pacer.limit() && self.offset < self.size {
            let len = self.pacer.next_len().min(self.size - self.offset);
            self.pacer.started(Instant::now());
            let (store, key, offset, backoff) = (self.store.clone(), self.key.clone(), self.offset, self.opts.backoff);
            let etag = self.etag.clone();
            // Spawned so parts download in parallel even while the consumer is busy.
            // Aborted when dropped: a cancelled restore stops downloading.
            let task = AbortOnDropHandle::new(tokio::spawn(async move {
                backoff
                    .run_counted(
                        &format!("GET {key} bytes {offset}+{len}"),
                        |_| store.read_range_pinned(&key, etag.as_deref(), offset, len),
                        |e: &StoreError| e.unreachable,
                    )
                    .await
                    .map_err(|e| to_io(StoreError::after(e)))
            }));
            self.in_flight.push_back((len, task));
            self.offset += len;
        }
    }

    /// The next chunk in order, or `None` at the end.
    async fn next_chunk(&mut self) -> Option<io::Result<bytes::Bytes>> {
        loop {
            if let Some(chunk) = self.current.next() {
                return Some(Ok(chunk));
            }
            self.fill();
            let (len, task) = self.in_flight.pop_front()?;
            let part = match task.await {
                Ok(Ok(chunks)) => chunks,
                Ok(Err(e)) => return Some(Err(e)),
                Err(e) => return Some(Err(io::Error::other(e))),
            };
            self.pacer.completed(len, Instant::now());
            self.fill();
            self.current = part.into_iter();
        }
    }
}

/// A reader of `object` (the version listed) that fetches parts concurrently.
pub fn parallel(store: Arc<dyn BackupStore>, object: &BackupObject, opts: FetchOptions) -> BackupReader {
    let download = Download {
        _lease: store.download_lease(),
        store,
        key: object.key.as_str().into(),
        etag: object.etag.as_deref().map(Arc::from),
        size: object.size,
        offset: 0,
        pacer: Pacer::new(&opts),
        opts,
        in_flight: VecDeque::new(),
        current: Vec::new().into_iter(),
    };
    let s = stream::unfold((download, false), |(mut d, failed)| async move {
        if failed {
            return None;
        }
        let item = d.next_chunk().await?;
        let failed = item.is_err();
        Some((item, (d, failed)))
    });
    Box::pin(StreamReader::new(s))
}

/// Passes bytes through while hashing them; at the end, a digest that differs from
/// `expected` is an `InvalidData` error naming both, and the digest is told (`tell`).
pub(crate) struct Sha256Verify<R> {
    inner: R,
    hasher: Option<Sha256>,
    expected: Option<String>,
    tell: Option<(crate::events::Events, String)>,
}

impl<R> Sha256Verify<R> {
    pub(crate) fn new(inner: R, expected_hex: &str) -> Self {
        Self { inner, hasher: Some(Sha256::new()), expected: Some(expected_hex.to_ascii_lowercase()), tell: None }
    }

    /// Hashes without expecting a digest: only tells it, as `key`'s, at the end.
    pub(crate) fn tap(inner: R, events: crate::events::Events, key: &str) -> Self {
        Self { inner, hasher: Some(Sha256::new()), expected: None, tell: Some((events, key.to_string())) }
    }

    /// Tells the digest at the end too.
    pub(crate) fn telling(mut self, events: crate::events::Events, key: &str) -> Self {
        self.tell = Some((events, key.to_string()));
        self
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
                    if let Some(expected) = this.expected.as_ref().filter(|e| **e != got) {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("sha256 mismatch: the .sha256 sidecar says {expected}, the backup hashes to {got}"),
                        )));
                    }
                    if let Some((events, key)) = this.tell.take() {
                        events.send(crate::events::RestoreEvent::Sha256 { key, hex: got });
                    }
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

/// The hex digest in a `.sha256` sidecar (`sha256sum` output or a bare digest).
pub(crate) fn parse_sidecar(text: &str) -> Option<String> {
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
        let opts = FetchOptions { part_size: 65_536, concurrency: 5, window: 1 << 20, backoff: Backoff::default() };
        let obj = store.stat("b").await.unwrap();
        let mut r = parallel(store, &obj, opts);
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        assert!(got == data, "reassembled bytes differ");
    }

    #[tokio::test]
    async fn every_byte_arrives_in_order_whatever_the_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..5_000_011u32).map(|i| (i % 253) as u8).collect();
        std::fs::write(dir.path().join("b"), &data).unwrap();
        let store: Arc<dyn BackupStore> = Arc::new(FsStore::new(dir.path().to_path_buf()));
        for (part_size, concurrency, window) in [(1 << 20, 1, 1), (3 << 20, 8, 4 << 20), (16 << 20, 8, WINDOW)] {
            let opts = FetchOptions { part_size, concurrency, window, backoff: Backoff::default() };
            let mut got = Vec::new();
            let obj = store.stat("b").await.unwrap();
            parallel(store.clone(), &obj, opts).read_to_end(&mut got).await.unwrap();
            assert!(got == data, "reassembled bytes differ with {opts:?}");
        }
    }

    fn mib(n: u64) -> u64 {
        n << 20
    }

    /// Feeds the pacer a server that serves parts in order, one after another, a part of
    /// `len` requested at concurrency `limit` taking `secs(len, limit)` of its time; keeps
    /// `limit` parts in flight as [`Download`] does. Returns the limit after each part
    /// completes and the sizes of the parts requested.
    fn drive(opts: FetchOptions, secs: impl Fn(u64, usize) -> f64, parts: usize) -> (Vec<usize>, Vec<u64>) {
        let mut p = Pacer::new(&opts);
        let t0 = Instant::now();
        let (mut now, mut server_free) = (0.0f64, 0.0f64);
        let mut in_flight = VecDeque::new();
        let (mut limits, mut sizes) = (vec![], vec![]);
        let at = |t: f64| t0 + std::time::Duration::from_secs_f64(t);
        while limits.len() < parts {
            while in_flight.len() < p.limit() {
                let len = p.next_len();
                p.started(at(now));
                sizes.push(len);
                server_free = server_free.max(now) + secs(len, p.limit());
                in_flight.push_back((len, server_free));
            }
            let (len, done) = in_flight.pop_front().unwrap();
            now = done;
            p.completed(len, at(now));
            limits.push(p.limit());
        }
        (limits, sizes)
    }

    /// A server whose throughput is `rate(limit)` bytes/s whatever the part size.
    fn scaling(rate: impl Fn(usize) -> f64) -> impl Fn(u64, usize) -> f64 {
        move |len, limit| len as f64 / rate(limit)
    }

    #[test]
    fn concurrency_grows_while_throughput_grows() {
        let opts = FetchOptions::default();
        // A server that scales with connections: concurrency reaches the maximum.
        let (limits, sizes) = drive(opts, scaling(|l| l as f64 * 10e6), 300);
        assert_eq!(*limits.last().unwrap(), 8, "{limits:?}");
        assert_eq!(&sizes[..3], [mib(1), mib(2), mib(4)], "slow start");
        // With 8 in flight (and one being consumed) the window allows parts of 24/9 MiB:
        // 2 MiB in whole MiBs.
        assert_eq!(*sizes.last().unwrap(), mib(2));
        // One that scales up to 4 connections: stays at 4.
        let (limits, _) = drive(opts, scaling(|l| l.min(4) as f64 * 10e6), 300);
        assert_eq!(*limits.last().unwrap(), 4, "{limits:?}");
    }

    #[test]
    fn a_server_that_charges_per_request_is_read_one_large_part_at_a_time() {
        // moto: every ranged GET costs the same (it reads the whole object), one at a time.
        let (limits, sizes) = drive(FetchOptions::default(), |_, _| 0.7, 300);
        assert!(limits.contains(&4) && limits.contains(&1), "tried 4, then 1: {limits:?}");
        assert_eq!(*limits.last().unwrap(), 1, "{limits:?}");
        assert_eq!(*sizes.last().unwrap(), WINDOW / 2, "{sizes:?}");
    }

    #[test]
    fn one_part_at_a_time_is_kept_only_if_it_is_as_fast() {
        // Two connections are twice as fast as one, four no faster than two: the probe
        // of one must see its own parts, not the fast ones still in flight from four.
        let (limits, _) = drive(FetchOptions::default(), scaling(|l| l.min(2) as f64 * 10e6), 300);
        assert!(limits.contains(&1), "tried 1: {limits:?}");
        assert_eq!(*limits.last().unwrap(), 2, "{limits:?}");
        // A server as fast with one connection as with two: one, with larger parts.
        let (limits, sizes) = drive(FetchOptions::default(), scaling(|_| 20e6), 300);
        assert_eq!((*limits.last().unwrap(), *sizes.last().unwrap()), (1, WINDOW / 2), "{limits:?}");
    }

    #[test]
    fn parts_in_memory_never_exceed_the_window() {
        for (part_size, concurrency, window) in [(mib(16), 8, WINDOW), (mib(8), 64, mib(16)), (mib(64), 4, WINDOW)] {
            let opts = FetchOptions { part_size, concurrency, window, backoff: Backoff::default() };
            let mut p = Pacer::new(&opts);
            let mut now = Instant::now();
            for _ in 0..200 {
                let len = p.next_len();
                p.started(now);
                let bound = opts.window.max(part_size).max(2 * MIN_PART);
                assert!(len * (p.limit() as u64 + 1) <= bound, "{opts:?}: {len} × {}", p.limit() + 1);
                assert!(p.limit() <= concurrency);
                now += std::time::Duration::from_millis(10 / p.limit() as u64 + 1);
                p.completed(len, now);
            }
        }
    }

    #[test]
    fn every_part_starts_on_a_whole_mebibyte() {
        // Odd sizes and windows included: only the configured size below 1 MiB is not aligned.
        for (part_size, concurrency, window) in [(mib(16), 8, WINDOW), (5_000_000, 3, 17_000_000), (mib(7), 8, mib(40))]
        {
            let opts = FetchOptions { part_size, concurrency, window, backoff: Backoff::default() };
            for rate in [|l: usize| l as f64 * 10e6, |_| 20e6] {
                let (_, sizes) = drive(opts, scaling(rate), 300);
                let mut offset = 0;
                for len in sizes {
                    assert_eq!(offset % mib(1), 0, "{opts:?}: a part starts at {offset}");
                    assert!(len % mib(1) == 0 && len <= part_size.max(mib(1)), "{opts:?}: a part of {len}");
                    offset += len;
                }
            }
        }
    }

    #[test]
    fn shared_downloads_split_the_bounds() {
        let half = FetchOptions::default().shared_by(2);
        assert_eq!((half.concurrency, half.window), (4, WINDOW / 2));
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

#[cfg(test)]
mod pinned_tests {
    use super::*;
    use crate::store::FsStore;
    use tokio::io::AsyncReadExt;

    /// Issue 22: an object overwritten mid-download (a `latest.dump` key written again)
    /// is an error saying so, never a spliced stream of two versions.
    #[tokio::test]
    async fn an_object_rewritten_mid_download_is_named_not_spliced() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("latest.dump"), vec![1u8; 3 << 20]).unwrap();
        let store: Arc<dyn BackupStore> = Arc::new(FsStore::new(dir.path().to_path_buf()));
        let listed = store.stat("latest.dump").await.unwrap();
        let opts = FetchOptions { part_size: 1 << 20, concurrency: 1, window: 1 << 20, backoff: Backoff::default() };
        let mut r = parallel(store.clone(), &listed, opts);
        let mut first = vec![0u8; 1 << 20];
        r.read_exact(&mut first).await.unwrap();
        // The next version lands while the first is being read.
        std::fs::write(dir.path().join("latest.dump.tmp"), vec![2u8; 3 << 20]).unwrap();
        std::fs::rename(dir.path().join("latest.dump.tmp"), dir.path().join("latest.dump")).unwrap();
        let mut rest = Vec::new();
        let e = r.read_to_end(&mut rest).await.unwrap_err();
        assert!(!rest.contains(&2), "bytes of the new version were handed over");
        let se = e.get_ref().and_then(|i| i.downcast_ref::<StoreError>()).expect("a store error");
        assert!(se.changed && se.message.contains("changed while being read"), "{se}");
    }
}
