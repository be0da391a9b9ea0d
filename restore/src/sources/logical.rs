//! The building blocks of restores: streaming a backup into a tool's stdin (pg_restore
//! for custom dumps, psql for plain SQL) without holding it whole in memory, staging it
//! in the scratch directory when a tool needs a seekable file, unpacking tar archives,
//! and undoing outer compression.

use crate::error::{RestoreError, Stage, StoreError};
use crate::server::capture;
use crate::server::sandbox::{Sandbox, tail};
use crate::store::BackupReader;
use crate::transfer::format::{self, BackupFormat};
use crate::transfer::unpack;
use async_compression::tokio::bufread::{GzipDecoder, Lz4Decoder, ZstdDecoder};
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader, ReadBuf};

/// How much of a tool's stderr a report keeps (the tail, where the error is).
const STDERR_KEEP: usize = 4000;
const CHUNK: usize = 256 * 1024;

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
pub fn read_error(store: &str, e: io::Error) -> RestoreError {
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

/// Undoes gzip, zstd or lz4 around a backup (`.sql.gz`, `base.tar.zst`, …).
pub fn decompress(outer: BackupFormat, head: Vec<u8>, rest: BackupReader) -> BackupReader {
    let src = BufReader::with_capacity(CHUNK, rejoin(head, rest));
    match outer {
        BackupFormat::Gzip => {
            let mut d = GzipDecoder::new(src);
            d.multiple_members(true);
            Box::pin(d)
        }
        BackupFormat::Zstd => {
            let mut d = ZstdDecoder::new(src);
            d.multiple_members(true);
            Box::pin(d)
        }
        BackupFormat::Lz4 => Box::pin(Lz4Decoder::new(src)),
        _ => Box::pin(src),
    }
}

/// How many layers (compression, encryption) may wrap a backup: more is hostile.
const MAX_LAYERS: usize = 4;

/// Undoes every layer around a backup, outermost first — gzip, zstd, lz4, age, OpenPGP,
/// in any order (`pg_dump | gzip | age`, `pg_dump -Fc | gpg -c`). Returns the inner
/// stream, its first bytes and the layers, outermost first.
pub async fn peel(
    job: &crate::request::RestoreJob<'_>,
    sandbox: &Sandbox,
    mut head: Vec<u8>,
    mut reader: BackupReader,
    store: &str,
) -> Result<(BackupReader, Vec<u8>, Vec<BackupFormat>), RestoreError> {
    let mut layers = Vec::new();
    loop {
        let layer = format::detect(&head);
        if !layer.is_layer() {
            return Ok((reader, head, layers));
        }
        if layers.len() == MAX_LAYERS {
            return Err(RestoreError::bad(
                Stage::Fetch,
                format!("the backup is wrapped in more than {MAX_LAYERS} layers of compression or encryption"),
            ));
        }
        let mut inner = if layer.is_encryption() {
            crate::transfer::decrypt::open(layer, head, reader, job.decrypt, sandbox, &job.decryption).await?
        } else {
            decompress(layer, head, reader)
        };
        head = read_head(&mut inner, store).await?;
        reader = inner;
        layers.push(layer);
    }
}

/// How layers read in a format name: innermost first (`custom+gzip+age`).
pub fn layer_suffix(layers: &[BackupFormat]) -> String {
    layers.iter().rev().map(|l| format!("+{l}")).collect()
}

/// Counts bytes for progress and notes when the source ran dry: the end of the fetch.
pub struct Counting<R> {
    inner: R,
    total: u64,
    progress: Arc<dyn Fn(u64) + Send + Sync>,
    finished: Arc<Mutex<Option<Instant>>>,
}

impl<R> Counting<R> {
    pub fn new(inner: R, progress: Arc<dyn Fn(u64) + Send + Sync>) -> (Self, Arc<Mutex<Option<Instant>>>) {
        let finished = Arc::new(Mutex::new(None));
        (Self { inner, total: 0, progress, finished: finished.clone() }, finished)
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
                this.total += n as u64;
                (this.progress)(this.total);
            }
        }
        r
    }
}

/// A PostgreSQL client tool from the sandbox's bindir, contained, connected to
/// `database` over the sandbox's socket, in a clean environment.
pub fn client_command(sandbox: &Sandbox, tool: &str, database: &str) -> Result<tokio::process::Command, RestoreError> {
    sandbox.client_command(tool, database)
}

/// `pg_restore` into `database`. Without the source's roles, ownership and privileges
/// are left out; with them (a globals file applied first), they are restored too.
///
/// `--clean --if-exists`: into a fresh database every `DROP … IF EXISTS` is a no-op but
/// one — a partial archive's (`pg_dump -n public`) entry for the `public` schema, which
/// every database already has and PostgreSQL 15's pg_dump writes as `CREATE SCHEMA
/// public`: the empty schema is dropped and the archive's recreates it. Every other
/// error still stops the restore (`--exit-on-error`).
pub fn pg_restore(
    sandbox: &Sandbox,
    database: &str,
    keep_owners: bool,
    jobs: u32,
) -> Result<tokio::process::Command, RestoreError> {
    let mut cmd = client_command(sandbox, "pg_restore", database)?;
    cmd.args(["--exit-on-error", "--clean", "--if-exists"]);
    if !keep_owners {
        cmd.args(["--no-owner", "--no-privileges"]);
    }
    if jobs > 1 {
        cmd.arg(format!("--jobs={jobs}"));
    }
    Ok(cmd)
}

/// `psql` running a script from stdin, stopping at the first error.
pub fn psql_script(sandbox: &Sandbox, database: &str) -> Result<tokio::process::Command, RestoreError> {
    let mut cmd = client_command(sandbox, "psql", database)?;
    cmd.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"]);
    Ok(cmd)
}

/// A psql script from a backup, made harmless to psql itself: `\restrict KEY` (a random
/// key, per run) goes first, so psql runs none of the script's meta-commands — `\c` to
/// another server, `\!`, `\o`, `\copy`, `\i` — and the script's own `\restrict` and
/// `\unrestrict` lines (pg_dump 15.14+ brackets its output with them) are left out:
/// nothing in the script may lift drcheck's restriction. The one statement a partial
/// dump is known to fail on harmlessly — `CREATE SCHEMA public;`, which PostgreSQL 15's
/// `pg_dump -n public` writes though every database has that schema — becomes `CREATE
/// SCHEMA IF NOT EXISTS public;` (outside `COPY` data); every other error still stops
/// the restore. Returns the new head and the rest of the stream.
pub fn restricted(head: Vec<u8>, reader: BackupReader) -> (Vec<u8>, BackupReader) {
    use rand::Rng;
    let key: String = rand::rng().sample_iter(rand::distr::Alphanumeric).take(32).map(char::from).collect();
    let filtered = RestrictLines::new(rejoin(head, reader));
    (format!("\\restrict {key}\n").into_bytes(), Box::pin(filtered))
}

/// Drops the lines `\restrict KEY` and `\unrestrict KEY` from a script as it streams,
/// and rewrites a whole-line `CREATE SCHEMA public;` outside `COPY … FROM stdin` data.
pub struct RestrictLines {
    inner: BackupReader,
    /// Bytes ready to hand out, and how many were handed out.
    out: Vec<u8>,
    taken: usize,
    /// A line that may yet be one the filter acts on.
    held: Vec<u8>,
    at_line_start: bool,
    /// Inside a `COPY … FROM stdin;` block's data (until `\.`).
    in_copy: bool,
    done: bool,
}

/// The statement PostgreSQL 15's `pg_dump -n public` writes for a schema every database has.
const CREATE_PUBLIC: &[u8] = b"CREATE SCHEMA public;";
const CREATE_PUBLIC_IF_NOT_EXISTS: &[u8] = b"CREATE SCHEMA IF NOT EXISTS public;";
/// A `COPY` line longer than this is passed on without being recognised (its data then
/// is not told from statements; the only effect is on the rewrite above).
const HELD_MAX: usize = 64 * 1024;

/// A line without its line ending (`\n` or `\r\n`).
fn body(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

impl RestrictLines {
    pub fn new(inner: BackupReader) -> Self {
        Self { inner, out: Vec::new(), taken: 0, held: Vec::new(), at_line_start: true, in_copy: false, done: false }
    }

    /// Whether `line` (so far) can still be, or is, a `\restrict` / `\unrestrict` line.
    fn may_be_restrict(line: &[u8], complete: bool) -> bool {
        for cmd in [&b"\\restrict "[..], &b"\\unrestrict "[..]] {
            if line.len() <= cmd.len() {
                if cmd.starts_with(line) && !complete {
                    return true;
                }
                continue;
            }
            if !line.starts_with(cmd) {
                continue;
            }
            let mut key = &line[cmd.len()..];
            if complete {
                key = body(key);
                return !key.is_empty() && key.iter().all(u8::is_ascii_alphanumeric);
            }
            return key.len() <= 256 && key.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'\r');
        }
        false
    }

    /// Whether an incomplete `line` may yet be one the filter acts on.
    fn may_matter(line: &[u8]) -> bool {
        let prefix_of = |whole: &[u8]| {
            line.len() <= whole.len() + 1 && body(line).len() <= whole.len() && whole.starts_with(body(line))
        };
        Self::may_be_restrict(line, false)
            || prefix_of(b"\\.")
            || prefix_of(CREATE_PUBLIC)
            || (line.len() <= HELD_MAX && (prefix_of(b"COPY ") || line.starts_with(b"COPY ")))
    }

    /// A complete line: dropped, rewritten, or passed on — and the `COPY` state it sets.
    fn finish_line(&mut self) {
        let line = std::mem::take(&mut self.held);
        if Self::may_be_restrict(&line, true) {
            return;
        }
        let text = body(&line);
        if self.in_copy {
            self.in_copy = text != b"\\.";
        } else if text.starts_with(b"COPY ") && text.ends_with(b" FROM stdin;") {
            self.in_copy = true;
        } else if text == CREATE_PUBLIC {
            self.out.extend_from_slice(CREATE_PUBLIC_IF_NOT_EXISTS);
            self.out.extend_from_slice(&line[text.len()..]);
            return;
        }
        self.out.extend_from_slice(&line);
    }

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if !self.held.is_empty() {
                self.held.push(b);
                if b == b'\n' {
                    self.finish_line();
                    self.at_line_start = true;
                } else if !Self::may_matter(&self.held) {
                    self.out.append(&mut self.held);
                    self.at_line_start = false;
                }
            } else if self.at_line_start && matches!(b, b'\\' | b'C') {
                self.held.push(b);
            } else {
                self.out.push(b);
                self.at_line_start = b == b'\n';
            }
        }
    }
}

impl AsyncRead for RestrictLines {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.taken < this.out.len() {
                let n = (this.out.len() - this.taken).min(buf.remaining());
                buf.put_slice(&this.out[this.taken..this.taken + n]);
                this.taken += n;
                if this.taken == this.out.len() {
                    this.out.clear();
                    this.taken = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.done {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = vec![0u8; 64 * 1024];
            let mut rb = ReadBuf::new(&mut chunk);
            match this.inner.as_mut().poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if rb.filled().is_empty() => {
                    // The last line, without a newline.
                    if !this.held.is_empty() {
                        this.finish_line();
                    }
                    this.done = true;
                }
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    this.feed(&chunk[..n]);
                }
            }
        }
    }
}

/// Runs `cmd` (a client of `sandbox`) to completion; a non-zero exit is the backup's
/// fault unless [`Sandbox::judge_client`] says the world's, with the tool's stderr tail
/// as the reason.
pub async fn run_tool(sandbox: &Sandbox, mut cmd: tokio::process::Command, what: &str) -> Result<(), RestoreError> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RestoreError::infra(Stage::Restore, format!("cannot run {what}: {e}")))?;
    // The backup decides how much the tool complains: only the end is kept.
    let (status, stderr) = capture::wait_keeping_stderr(&mut child, STDERR_KEEP)
        .await
        .map_err(|e| RestoreError::infra(Stage::Restore, format!("running {what}: {e}")))?;
    if !status.success() {
        let (who, why) = sandbox.judge_client(&status);
        let message = format!("{what} failed ({status}): {}", tail(&stderr, STDERR_KEEP));
        return Err(who.error(Stage::Restore, crate::error::with_reason(message, why)));
    }
    Ok(())
}

/// Streams `head` then `reader` into `cmd`'s stdin (a client of `sandbox`), draining its
/// stderr, and waits for it.
pub async fn stream_into(
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
        let (who, why) = sandbox.judge_client(&status);
        let message = format!("{what} failed ({status}): {}", tail(&stderr, STDERR_KEEP));
        return Err(who.error(Stage::Restore, crate::error::with_reason(message, why)));
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
pub async fn stage_to_file(head: Vec<u8>, reader: BackupReader, path: &Path, store: &str) -> Result<u64, RestoreError> {
    let staging = |e: io::Error| RestoreError::infra(Stage::Fetch, format!("staging to {}: {e}", path.display()));
    let mut file = tokio::fs::File::create(path).await.map_err(staging)?;
    file.write_all(&head).await.map_err(staging)?;
    let n = copy_in_blocks(reader, &mut file).await.map_err(|e| match e {
        Copy::Read(e) => read_error(store, e),
        Copy::Write(e) => staging(e),
    })?;
    Ok(head.len() as u64 + n)
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
pub async fn extract_tar(head: Vec<u8>, reader: BackupReader, dest: &Path, store: &str) -> Result<(), RestoreError> {
    let seen = Arc::new(Mutex::new(None));
    let tap = Tap { inner: rejoin(head, reader), seen: seen.clone() };
    let src = tokio_util::io::SyncIoBridge::new(tap);
    let dest = dest.to_path_buf();
    let stop = unpack::StopOnDrop(Arc::new(std::sync::atomic::AtomicBool::new(false)));
    let flag = stop.0.clone();
    let r = tokio::task::spawn_blocking(move || unpack::unpack(src, &dest, &flag))
        .await
        .map_err(|e| RestoreError::infra(Stage::Restore, format!("tar extraction panicked: {e}")))?;
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
pub struct Bounded {
    inner: BackupReader,
    seen: u64,
    limit: u64,
    /// Where `limit` is the free space rather than the backup's size × max_expansion:
    /// passing it is the disk's shortfall, not the backup's.
    disk_limit: Option<u64>,
}

impl Bounded {
    pub fn new(inner: BackupReader, limit: u64) -> Self {
        Self { inner, seen: 0, limit, disk_limit: None }
    }

    /// Bounded by what the backup's size explains (`ceiling`) and by the room the disk
    /// has (`room`): past the first, the backup's fault; past only the second, not.
    pub fn with_room(inner: BackupReader, ceiling: u64, room: u64) -> Self {
        Self { inner, seen: 0, limit: ceiling, disk_limit: (room < ceiling).then_some(room) }
    }
}

/// The message of [`Bounded`]'s error when the disk, not the backup, sets the bound.
pub const NO_ROOM: &str = "scratch_dir has too little room for this backup";

/// The message of [`Bounded`]'s error, recognised by [`read_error`].
pub const EXPANSION_EXCEEDED: &str = "the backup expands beyond";

impl AsyncRead for Bounded {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = self.inner.as_mut().poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &r {
            self.seen += (buf.filled().len() - before) as u64;
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
mod restrict_tests {
    use super::*;

    async fn through(input: &[u8], chunk: usize) -> Vec<u8> {
        // Deliver the input in small pieces: lines split across reads.
        let pieces: Vec<Vec<u8>> = input.chunks(chunk.max(1)).map(<[u8]>::to_vec).collect();
        let stream = futures::stream::iter(pieces.into_iter().map(|p| Ok::<_, io::Error>(bytes::Bytes::from(p))));
        let reader: BackupReader = Box::pin(tokio_util::io::StreamReader::new(stream));
        let (head, mut rest) = restricted(Vec::new(), reader);
        assert!(head.starts_with(b"\\restrict ") && head.ends_with(b"\n") && head.len() == 10 + 32 + 1, "{head:?}");
        let mut out = Vec::new();
        rest.read_to_end(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn the_scripts_own_restrict_lines_go_and_everything_else_stays() {
        let script = b"--\n-- PostgreSQL database dump\n--\n\\restrict Ab12cD\nSET x = 1;\n\\connect other\n\
copy t from stdin;\n\\\\restrict kept\n\\.\nselect '\\restrict inline';\n\\unrestrict Ab12cD\r\n\\restrictX y\n\\unrestrict Zz";
        let want = b"--\n-- PostgreSQL database dump\n--\nSET x = 1;\n\\connect other\n\
copy t from stdin;\n\\\\restrict kept\n\\.\nselect '\\restrict inline';\n\\restrictX y\n";
        for chunk in [1, 2, 3, 7, 64, 100_000] {
            assert_eq!(
                String::from_utf8_lossy(&through(script, chunk).await),
                String::from_utf8_lossy(want),
                "chunk {chunk}"
            );
        }
    }

    /// `pg_dump -n public`'s `CREATE SCHEMA public;` is made idempotent; the same text as
    /// `COPY` data, or in any other form, is left alone.
    #[tokio::test]
    async fn create_schema_public_is_made_idempotent_outside_copy_data() {
        let script = b"CREATE SCHEMA public;\nCREATE SCHEMA public2;\n CREATE SCHEMA public;\n\
COPY public.t (a) FROM stdin;\nCREATE SCHEMA public;\nCOPY x\n\\.\nCREATE SCHEMA public;\r\nCREATE SCHEMA public;";
        let want = b"CREATE SCHEMA IF NOT EXISTS public;\nCREATE SCHEMA public2;\n CREATE SCHEMA public;\n\
COPY public.t (a) FROM stdin;\nCREATE SCHEMA public;\nCOPY x\n\\.\nCREATE SCHEMA IF NOT EXISTS public;\r\nCREATE SCHEMA IF NOT EXISTS public;";
        for chunk in [1, 2, 5, 64, 100_000] {
            assert_eq!(
                String::from_utf8_lossy(&through(script, chunk).await),
                String::from_utf8_lossy(want),
                "chunk {chunk}"
            );
        }
    }
}
