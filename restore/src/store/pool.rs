//! The download's buffer pool: blocks of one size, handed out empty, filled from the
//! socket, shared as `Bytes` with the consumer, and returned when the consumer drops
//! them. Reusing them keeps memory flat (a fresh block would be fresh pages from the
//! kernel — faulted in and zeroed — for every MiB of every download: a quarter of
//! the download's time here) without giving up the small mmap threshold that returns
//! freed memory to the system. At most `keep` idle blocks are kept, and only while a
//! download holds a [`Lease`]: once the last one ends, they go back to the system (a
//! run's validators then start from the memory the download used, not on top of it).

/// The default memory bound of one download's parts: two 8 MiB parts in flight and one
/// being consumed, one of 12 MiB, or eight of 2 MiB. On Garage, 24 MiB downloads as
/// fast as 32 (1.32 vs 1.29 s for 1.09 GB, medians of 3) and 16 MiB is a tenth slower.
pub const WINDOW: u64 = 24 << 20;

use std::sync::{Arc, Mutex};

pub(crate) struct BlockPool {
    size: usize,
    keep: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    idle: Vec<Vec<u8>>,
    /// Downloads running (leases held).
    downloads: usize,
}

impl BlockPool {
    pub(crate) fn new(size: usize, keep: usize) -> Arc<Self> {
        Arc::new(Self { size, keep, state: Mutex::default() })
    }

    /// An empty block of at least `want` bytes (the pool's size, unless more is wanted).
    pub(crate) fn take(self: &Arc<Self>, want: usize) -> Block {
        let buf = match want <= self.size {
            true => self.state.lock().unwrap().idle.pop().unwrap_or_else(|| Vec::with_capacity(self.size)),
            false => Vec::with_capacity(want),
        };
        Block { buf, pool: self.clone() }
    }

    /// Held by a download while it runs: blocks returned meanwhile are kept for reuse.
    pub(crate) fn lease(self: &Arc<Self>) -> Lease {
        self.state.lock().unwrap().downloads += 1;
        Lease(self.clone())
    }

    /// Idle blocks held now.
    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        self.state.lock().unwrap().idle.len()
    }
}

/// A download in progress (see [`BlockPool::lease`]); the last one to end frees the
/// idle blocks.
pub struct Lease(Arc<BlockPool>);

impl Drop for Lease {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap();
        state.downloads -= 1;
        if state.downloads == 0 {
            state.idle = Vec::new();
        }
    }
}

/// A block being filled, then (through [`Block::freeze`]) shared read-only.
pub(crate) struct Block {
    buf: Vec<u8>,
    pool: Arc<BlockPool>,
}

impl Block {
    pub(crate) fn room(&self) -> usize {
        self.buf.capacity() - self.buf.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub(crate) fn extend(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The filled bytes as `Bytes`; the block returns to the pool when the last
    /// reference is dropped.
    pub(crate) fn freeze(self) -> bytes::Bytes {
        bytes::Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for Block {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if self.buf.capacity() != self.pool.size {
            return;
        }
        let mut state = self.pool.state.lock().unwrap();
        if state.downloads > 0 && state.idle.len() < self.pool.keep {
            let mut buf = std::mem::take(&mut self.buf);
            buf.clear();
            state.idle.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_come_back_when_their_bytes_are_dropped_and_the_pool_is_bounded() {
        let pool = BlockPool::new(1024, 2);
        let _download = pool.lease();
        let mut a = pool.take(10);
        a.extend(b"hello");
        let bytes = a.freeze();
        let copy = bytes.slice(1..3);
        assert_eq!(&copy[..], b"el");
        drop(bytes);
        assert_eq!(pool.idle(), 0, "still shared by a slice");
        drop(copy);
        assert_eq!(pool.idle(), 1);
        let b = pool.take(10);
        assert!(b.is_empty() && b.room() == 1024, "reused, emptied");
        let (c, d, e) = (pool.take(1), pool.take(1), pool.take(1));
        drop((b, c, d, e));
        assert_eq!(pool.idle(), 2, "at most `keep` idle");
        let big = pool.take(4096);
        assert!(big.room() >= 4096);
        drop(big);
        assert_eq!(pool.idle(), 2, "odd sizes are not kept");
    }

    #[test]
    fn idle_blocks_are_freed_when_the_last_download_ends() {
        let pool = BlockPool::new(1024, 8);
        let (first, second) = (pool.lease(), pool.lease());
        let held = pool.take(1).freeze();
        drop(pool.take(1));
        assert_eq!(pool.idle(), 1);
        drop(first);
        assert_eq!(pool.idle(), 1, "another download still runs");
        drop(second);
        assert_eq!(pool.idle(), 0, "freed with the last download");
        drop(held);
        assert_eq!(pool.idle(), 0, "a block returned after the end is freed, not kept");
        let _again = pool.lease();
        drop(pool.take(1));
        assert_eq!(pool.idle(), 1, "a new download keeps blocks again");
    }
}
