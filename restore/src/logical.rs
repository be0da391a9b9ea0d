//! Logical restores: a pg_dump archive streamed from a store straight into `pg_restore`,
//! never held whole in memory or on disk.

use crate::error::{RestoreError, Stage, StoreError};
use crate::format::{self, BackupFormat};
use crate::sandbox::{Sandbox, tail};
use crate::store::BackupReader;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How much of pg_restore's stderr a report keeps (the tail, where the error is).
const STDERR_KEEP: usize = 4000;
const CHUNK: usize = 256 * 1024;

/// What a streamed restore did, and how long each side took.
#[derive(Debug, Clone)]
pub struct StreamedRestore {
    pub format: BackupFormat,
    pub bytes: u64,
    /// From the first read to the last byte received from the store.
    pub fetch: Duration,
    /// From pg_restore's start to its successful exit (overlaps `fetch`).
    pub restore: Duration,
}

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

fn read_error(store: &str, e: std::io::Error) -> RestoreError {
    RestoreError::Store(StoreError {
        store: store.to_string(),
        message: format!("download failed: {e}"),
        unreachable: true,
    })
}

/// Streams a custom-format pg_dump archive into a new database `database` in the
/// sandbox: `head` (from [`read_head`]) first, then the rest of `reader`. `started` is
/// when the fetch began; `store` names the source in errors; `progress` gets the byte
/// count so far.
pub async fn restore_custom(
    sandbox: &Sandbox,
    database: &str,
    head: Vec<u8>,
    mut reader: BackupReader,
    started: Instant,
    store: &str,
    progress: &(dyn Fn(u64) + Send + Sync),
) -> Result<StreamedRestore, RestoreError> {
    let read_err = |e: std::io::Error| read_error(store, e);
    let found = format::detect(&head);
    if found != BackupFormat::Custom {
        return Err(RestoreError::bad(
            Stage::Restore,
            format!("expected a pg_dump custom-format archive (starting with PGDMP), found {found} data"),
        ));
    }

    sandbox.create_database(database).await?;
    let restore_started = Instant::now();
    let pg_restore = sandbox.bin().tool("pg_restore");
    let mut child = tokio::process::Command::new(&pg_restore)
        .arg("--no-owner")
        .arg("--no-privileges")
        .arg("--exit-on-error")
        .arg("-h")
        .arg(sandbox.socket_dir())
        .args(["-p", &sandbox.port().to_string(), "-U", "postgres", "-d", database])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LC_ALL", "C.UTF-8")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| RestoreError::infra(Stage::Restore, format!("cannot run {}: {e}", pg_restore.display())))?;

    // Drain stderr concurrently: a full pipe would otherwise stall pg_restore.
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let stderr_task = tokio::spawn(async move {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > 4 * STDERR_KEEP {
                buf.drain(..buf.len() - STDERR_KEEP);
            }
        }
        buf
    });

    let mut stdin = child.stdin.take().expect("stdin is piped");
    let mut total = head.len() as u64;
    let mut fetch_done = None;
    let mut pipe_closed = stdin.write_all(&head).await.is_err();
    progress(total);
    let mut buf = vec![0u8; CHUNK];
    while !pipe_closed {
        let n = match reader.read(&mut buf).await {
            Ok(n) => n,
            Err(e) => {
                let _ = child.kill().await;
                return Err(read_err(e));
            }
        };
        if n == 0 {
            fetch_done = Some(started.elapsed());
            break;
        }
        total += n as u64;
        progress(total);
        // A write error means pg_restore has exited (usually on a bad archive); its exit
        // status and stderr say why.
        pipe_closed = stdin.write_all(&buf[..n]).await.is_err();
    }
    drop(stdin);

    let status =
        child.wait().await.map_err(|e| RestoreError::infra(Stage::Restore, format!("waiting for pg_restore: {e}")))?;
    let stderr = stderr_task.await.unwrap_or_default();
    if !status.success() {
        return Err(RestoreError::bad(
            Stage::Restore,
            format!("pg_restore failed ({status}): {}", tail(&stderr, STDERR_KEEP)),
        ));
    }
    if pipe_closed {
        return Err(RestoreError::bad(
            Stage::Restore,
            format!("pg_restore stopped reading after {total} bytes without an error: {}", tail(&stderr, STDERR_KEEP)),
        ));
    }
    Ok(StreamedRestore {
        format: found,
        bytes: total,
        fetch: fetch_done.unwrap_or_else(|| started.elapsed()),
        restore: restore_started.elapsed(),
    })
}
