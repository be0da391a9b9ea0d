//! The stream pieces of restores: reading a backup's head, bounding what it expands to
//! ([`Bounded`]),
//! counting it ([`Counting`]), streaming it into a tool's stdin (pg_restore for custom
//! dumps, psql for plain SQL) without holding it whole in memory, staging it in the
//! scratch directory when a tool needs a seekable file, and unpacking tar archives.

use crate::error::{RestoreError, Stage, StoreError};
use crate::events::{Events, RestoreEvent};
use crate::server::capture;
use crate::server::sandbox::{Sandbox, tail};
use crate::server::tools::STDERR_KEEP;
use crate::store::BackupReader;
use crate::transfer::format;
use crate::transfer::unpack;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};

pub(crate) const CHUNK: usize = 256 * 1024;

/// Reads the first bytes of a backup, enough for [`format::detect`].
pub async fn read_head(reader: &mut BackupReader, store: &str) -> Result<Vec<u8>, RestoreError> {
    let mut head = vec![0u8; format::DETECT_BYTES];
    let mut filled = 0;
    while filled < head.len() {
        let n = reader.read(&mut head[filled..]).await.map_err(|e| read_error(store, e))?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    head.truncate(filled);
    if head.is_empty() {
        return Err(RestoreError::bad(Stage::Fetch, "the backup is empty (0 bytes)"));
    }
    Ok(head)
}

/// A read error while streaming a backup. The store's own failures reach here as
/// `StoreError`s (the world's fault); everything else came from undoing the backup's
/// framing — a corrupt or truncated compressed stream, a checksum mismatch, an
/// expansion past the ceiling — and is the backup's fault.
pub(crate) fn read_error(store: &str, e: io::Error) -> RestoreError {
    if let Some(se) = e.get_ref().and_then(|inner| inner.downcast_ref::<StoreError>()) {
        return RestoreError::Store(StoreError {
            store: se.store.clone(),
            message: se.message.clone(),
            unreachable: se.unreachable,
            changed: se.changed,
        });
    }
    match e.kind() {
        io::ErrorKind::InvalidData if e.to_string().starts_with(EXPANSION_EXCEEDED) => {
            RestoreError::bad(Stage::Restore, e.to_string())
        }
        io::ErrorKind::InvalidData => RestoreError::bad(Stage::Fetch, format!("the backup is corrupt: {e}")),
        io::ErrorKind::StorageFull => RestoreError::infra(Stage::Restore, e.to_string()),
        io::ErrorKind::UnexpectedEof => {
            RestoreError::bad(Stage::Fetch, format!("the backup is truncated: its compressed data ends early ({e})"))
        }
        _ => RestoreError::Store(StoreError {
            store: store.to_string(),
            message: format!("download failed: {e}"),
            unreachable: true,
            changed: false,
        }),
    }
}

/// The head bytes put back in front of the rest of the stream.
pub fn rejoin(head: Vec<u8>, rest: BackupReader) -> BackupReader {
    Box::pin(io::Cursor::new(head).chain(rest))
}

/// Counts bytes for progress (each total told to `progress`, the first byte's moment as a
/// [`RestoreEvent::FirstByte`]) and notes when the source ran dry: the end of the fetch.
pub(crate) struct Counting<R> {
    inner: R,
    total: u64,
    progress: Arc<dyn Fn(u64) + Send + Sync>,
    events: Events,
    finished: Arc<Mutex<Option<Instant>>>,
}

impl<R> Counting<R> {
    pub(crate) fn new(
        inner: R,
        events: Events,
        progress: Arc<dyn Fn(u64) + Send + Sync>,
    ) -> (Self, Arc<Mutex<Option<Instant>>>) {
        let finished = Arc::new(Mutex::new(None));
        (Self { inner, total: 0, progress, events, finished: finished.clone() }, finished)
    }

    /// Counting that tells each total as [`RestoreEvent::Received`].
    pub(crate) fn telling(inner: R, events: Events) -> (Self, Arc<Mutex<Option<Instant>>>) {
        let tell = events.clone();
        Self::new(inner, events, Arc::new(move |n| tell.send(RestoreEvent::Received(n))))
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Counting<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &r {
            let n = buf.filled().len() - before;
            if n == 0 {
                this.finished.lock().unwrap().get_or_insert_with(Instant::now);
            } else {
                if this.total == 0 {
                    this.events.send(RestoreEvent::FirstByte(Instant::now()));
                }
                this.total += n as u64;
                (this.progress)(this.total);
            }
        }
        r
    }
}

/// Streams `head` then `reader` into `cmd`'s stdin (a client of `sandbox`), draining its
/// stderr, and waits for it.
pub(crate) async fn stream_into(
    sandbox: &Sandbox,
    mut cmd: tokio::process::Command,
    what: &str,
    head: Vec<u8>,
    mut reader: BackupReader,
    store: &str,
) -> Result<(), RestoreError> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RestoreError::infra(Stage::Restore, format!("cannot run {what}: {e}")))?;
    // Drain stderr concurrently: a full pipe would otherwise stall the tool.
    let stderr = child.stderr.take().expect("stderr is piped");
    let stderr_task = tokio::spawn(async move { capture::last_bytes(stderr, STDERR_KEEP).await.unwrap_or_default() });
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let mut pipe_closed = stdin.write_all(&head).await.is_err();
    let mut buf = vec![0u8; CHUNK];
    let mut total = head.len() as u64;
    while !pipe_closed {
        let n = match reader.read(&mut buf).await {
            Ok(n) => n,
            Err(e) => {
                let _ = child.kill().await;
                return Err(read_error(store, e));
            }
        };
        if n == 0 {
            break;
        }
        total += n as u64;
        // A write error means the tool has exited (usually on a bad archive); its exit
        // status and stderr say why.
        pipe_closed = stdin.write_all(&buf[..n]).await.is_err();
    }
    drop(stdin);
    let status =
        child.wait().await.map_err(|e| RestoreError::infra(Stage::Restore, format!("waiting for {what}: {e}")))?;
    let stderr = stderr_task.await.unwrap_or_default();
    if !status.success() {
        return Err(crate::server::tools::tool_failed(sandbox, what, &status, &stderr));
    }
    if pipe_closed {
        return Err(RestoreError::bad(
            Stage::Restore,
            format!("{what} stopped reading after {total} bytes without an error: {}", tail(&stderr, STDERR_KEEP)),
        ));
    }
    Ok(())
}

/// Writes `head` then `reader` to `path` (for tools that need a seekable file).
pub(crate) async fn stage_to_file(
    head: Vec<u8>,
    reader: BackupReader,
    path: &Path,
    store: &str,
) -> Result<u64, RestoreError> {
    let staging = |e: io::Error| RestoreError::infra(Stage::Fetch, format!("staging to {}: {e}", path.display()));
    let mut file = tokio::fs::File::from_std(create_no_follow(path).map_err(staging)?);
    file.write_all(&head).await.map_err(staging)?;
    let n = copy_in_blocks(reader, &mut file).await.map_err(|e| match e {
        Copy::Read(e) => read_error(store, e),
        Copy::Write(e) => staging(e),
    })?;
    Ok(head.len() as u64 + n)
}

/// Creates (or truncates) `path` for drcheck to write, refusing a symbolic link in its
/// place: in a WAL spool the running server may write (its marks), or a directory a
/// contained tool writes, a link planted there would have drcheck — root — write the
/// backup's bytes wherever it points.
pub(crate) fn create_no_follow(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).create(true).truncate(true).custom_flags(nix::libc::O_NOFOLLOW).open(path)
}

/// Which side of a copy failed.
pub enum Copy {
    Read(io::Error),
    Write(io::Error),
}

/// Copies `reader` to `file` in blocks of [`CHUNK`] bytes (the download hands over
/// chunks as they came off the socket, some of a few KiB; a file write is a trip to a
/// blocking thread, so writes are gathered). Returns the bytes copied.
pub async fn copy_in_blocks(mut reader: BackupReader, file: &mut tokio::fs::File) -> Result<u64, Copy> {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        let mut filled = 0;
        while filled < buf.len() {
            match reader.read(&mut buf[filled..]).await.map_err(Copy::Read)? {
                0 => break,
                n => filled += n,
            }
        }
        if filled == 0 {
            break;
        }
        file.write_all(&buf[..filled]).await.map_err(Copy::Write)?;
        total += filled as u64;
    }
    file.flush().await.map_err(Copy::Write)?;
    Ok(total)
}

/// The stream's chunks in flight between the reading future and the unpacking thread: at
/// most `HANDOFF_DEPTH` × `HANDOFF_CHUNK` (16 MiB) held at once.
const HANDOFF_CHUNK: usize = 1 << 20;
const HANDOFF_DEPTH: usize = 16;

/// The unpacking thread's side of [`extract_tar`]'s hand-over: a blocking `Read` over the
/// chunks the reading future sends. The sender gone without an error is the stream's end.
struct Handoff {
    rx: tokio::sync::mpsc::Receiver<io::Result<bytes::Bytes>>,
    current: bytes::Bytes,
}

impl io::Read for Handoff {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.current.len());
        out[..n].copy_from_slice(&self.current[..n]);
        bytes::Buf::advance(&mut self.current, n);
        Ok(n)
    }
}

/// Remembers the first error its source returned, so a failed consumer (tar) can tell
/// a broken download from a broken archive.
struct Tap {
    inner: BackupReader,
    seen: Arc<Mutex<Option<(io::ErrorKind, String)>>>,
}

impl AsyncRead for Tap {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let r = self.inner.as_mut().poll_read(cx, buf);
        if let Poll::Ready(Err(e)) = &r {
            self.seen.lock().unwrap().get_or_insert_with(|| (e.kind(), e.to_string()));
        }
        r
    }
}

/// Unpacks a tar stream into `dest` with [`crate::transfer::unpack`]'s rules (nothing leaves
/// `dest`, no privilege bits, no device nodes). Dropping the returned future stops the
/// unpacking thread within one chunk.
///
/// Two cores, not one: this future reads the stream — the store's reads, the SHA-256
/// every byte goes through, decompression — and hands it over in chunks ([`Handoff`]) to
/// the unpacking thread, which only parses and writes. One thread doing both ran at the
/// sum of their times; `tar -xf` of the same archive, which only writes, was faster.
pub(crate) async fn extract_tar(
    head: Vec<u8>,
    reader: BackupReader,
    dest: &Path,
    store: &str,
) -> Result<(), RestoreError> {
    let seen = Arc::new(Mutex::new(None));
    let mut tap = Tap { inner: rejoin(head, reader), seen: seen.clone() };
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<bytes::Bytes>>(HANDOFF_DEPTH);
    let feeding = async move {
        loop {
            let mut chunk = bytes::BytesMut::with_capacity(HANDOFF_CHUNK);
            // Full chunks: fewer hand-overs (each wakes the other thread).
            let read = loop {
                match tap.read_buf(&mut chunk).await {
                    Ok(0) => break Ok(0),
                    Ok(_) if chunk.len() < HANDOFF_CHUNK / 2 => continue,
                    other => break other,
                }
            };
            let eof = matches!(read, Ok(0));
            let sent = match read {
                Err(e) => tx.send(Err(e)).await.map(|_| true),
                Ok(_) if chunk.is_empty() => Ok(true),
                Ok(_) => tx.send(Ok(chunk.freeze())).await.map(|_| eof),
            };
            // The end, an error handed over, or the unpacking thread gone (done or failed).
            if !matches!(sent, Ok(false)) {
                return;
            }
        }
    };
    let src = Handoff { rx, current: bytes::Bytes::new() };
    let dest = dest.to_path_buf();
    let stop = unpack::StopOnDrop(Arc::new(std::sync::atomic::AtomicBool::new(false)));
    let flag = stop.0.clone();
    let unpacking = tokio::task::spawn_blocking(move || unpack::unpack(src, &dest, &flag));
    let ((), r) = tokio::join!(feeding, unpacking);
    let r = r.map_err(|e| RestoreError::infra(Stage::Restore, format!("tar extraction panicked: {e}")))?;
    drop(stop);
    match r {
        Ok(_) => Ok(()),
        Err(unpack::UnpackError::Archive(m)) => Err(RestoreError::bad(Stage::Restore, m)),
        Err(unpack::UnpackError::Cancelled) => Err(RestoreError::infra(Stage::Restore, "unpacking cancelled")),
        Err(unpack::UnpackError::Io(e)) => Err(match seen.lock().unwrap().take() {
            Some((kind, msg)) => read_error(store, io::Error::new(kind, msg)),
            None if e.kind() == io::ErrorKind::UnexpectedEof
                || e.kind() == io::ErrorKind::InvalidData
                || e.kind() == io::ErrorKind::Other =>
            {
                RestoreError::bad(Stage::Restore, format!("the tar archive is corrupt or truncated: {e}"))
            }
            None => RestoreError::infra(Stage::Restore, format!("unpacking into the sandbox failed: {e}")),
        }),
    }
}

/// Fails the stream once more than `limit` bytes came through: a backup that expands
/// beyond what its size explains (a decompression bomb) fails the run, as the backup's
/// fault, before it fills the disk.
pub(crate) struct Bounded {
    inner: BackupReader,
    seen: u64,
    /// Bytes since this reader last gave the runtime a turn.
    since_yield: u64,
    limit: u64,
    /// Where `limit` is the free space rather than the backup's size × max_expansion:
    /// passing it is the disk's shortfall, not the backup's.
    disk_limit: Option<u64>,
}

impl Bounded {
    pub(crate) fn new(inner: BackupReader, limit: u64) -> Self {
        Self { inner, seen: 0, since_yield: 0, limit, disk_limit: None }
    }

    /// Bounded by what the backup's size explains (`ceiling`) and by the room the disk
    /// has (`room`): past the first, the backup's fault; past only the second, not.
    pub(crate) fn with_room(inner: BackupReader, ceiling: u64, room: u64) -> Self {
        Self { inner, seen: 0, since_yield: 0, limit: ceiling, disk_limit: (room < ceiling).then_some(room) }
    }
}

/// The message of [`Bounded`]'s error when the disk, not the backup, sets the bound.
pub(crate) const NO_ROOM: &str = "scratch_dir has too little room for this backup";

/// The message of [`Bounded`]'s error, recognised by [`read_error`].
pub(crate) const EXPANSION_EXCEEDED: &str = "the backup expands beyond";

/// Bytes a decoding loop may pass before it gives the runtime a turn: a stream that is
/// always ready (decompressing from memory) would otherwise hold its worker, and a
/// SIGTERM's cancellation would wait for the whole bomb.
const YIELD_EVERY: u64 = 8 << 20;

impl AsyncRead for Bounded {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.since_yield >= YIELD_EVERY {
            self.since_yield = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let before = buf.filled().len();
        let r = self.inner.as_mut().poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &r {
            let n = (buf.filled().len() - before) as u64;
            self.seen += n;
            self.since_yield += n;
            if let Some(room) = self.disk_limit
                && self.seen > room
                && self.seen <= self.limit
            {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    format!("{NO_ROOM}: it expands past {room} bytes, the free space in scratch_dir less a reserve"),
                )));
            }
            if self.seen > self.limit {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{EXPANSION_EXCEEDED} {} bytes (its size × sandbox.max_expansion, plus 1 GiB)", self.limit),
                )));
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    /// A link planted where drcheck stages a file (a spool the server writes its marks
    /// in) is refused, and what it points at is left as it was.
    #[tokio::test]
    async fn staging_never_writes_through_a_planted_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "kept").unwrap();
        let planted = dir.path().join(".part-000000010000000000000003");
        std::os::unix::fs::symlink(&outside, &planted).unwrap();
        let reader: crate::store::BackupReader = Box::pin(std::io::Cursor::new(b"the backup's bytes".to_vec()));
        let staged = super::stage_to_file(Vec::new(), reader, &planted, "test").await;
        assert!(staged.is_err(), "staged through a link: {staged:?}");
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "kept");
        assert!(super::create_no_follow(&planted).is_err());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "kept");
        // A file of its own is created (and truncated) as before.
        let own = dir.path().join("own");
        std::fs::write(&own, "longer than what follows").unwrap();
        let reader: crate::store::BackupReader = Box::pin(std::io::Cursor::new(b"new".to_vec()));
        super::stage_to_file(Vec::new(), reader, &own, "test").await.unwrap();
        assert_eq!(std::fs::read_to_string(&own).unwrap(), "new");
    }
}
