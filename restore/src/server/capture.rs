//! What a child process prints, read without trusting its size. A tool that reads
//! backup bytes (`pg_waldump`, `pg_restore`, `pg_verifybackup`, a backup tool reading
//! its repository) prints as much as whoever wrote the backup makes it print: a WAL
//! segment full of commits is hundreds of megabytes of `pg_waldump` lines, a forged
//! manifest one complaint per file. Nothing here holds more than a stated bound.

use std::io;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

/// Calls `f` with each line of `r` (without its `\n`), cutting lines longer than
/// `keep` bytes to their first `keep`. Memory: one line of `keep` bytes and a read
/// buffer, whatever `r` holds. Returns the bytes read.
pub(crate) async fn each_line<R: AsyncRead + Unpin>(r: R, keep: usize, mut f: impl FnMut(&[u8])) -> io::Result<u64> {
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let mut line = Vec::with_capacity(keep.min(64 * 1024));
    let mut total = 0u64;
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            break;
        }
        let (chunk, ended) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], true),
            None => (buf, false),
        };
        let room = keep.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = chunk.len() + usize::from(ended);
        r.consume(used);
        total += used as u64;
        if ended {
            f(&line);
            line.clear();
        }
    }
    if !line.is_empty() {
        f(&line);
    }
    Ok(total)
}

/// Reads `r` to its end, keeping its last `keep` bytes (the end of a tool's stderr
/// says why it stopped).
pub(crate) async fn last_bytes<R: AsyncRead + Unpin>(mut r: R, keep: usize) -> io::Result<Vec<u8>> {
    let mut kept = Vec::with_capacity(keep.min(64 * 1024));
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&chunk[..n]);
        // Trimmed in batches: never more than twice `keep` and a chunk held.
        if kept.len() > 2 * keep + chunk.len() {
            kept.drain(..kept.len() - keep);
        }
    }
    if kept.len() > keep {
        kept.drain(..kept.len() - keep);
    }
    Ok(kept)
}

/// Waits for `child` (its stderr piped), reading its stderr meanwhile and keeping the
/// last `keep` bytes of it.
pub(crate) async fn wait_keeping_stderr(
    child: &mut tokio::process::Child,
    keep: usize,
) -> io::Result<(std::process::ExitStatus, Vec<u8>)> {
    let stderr = child.stderr.take().expect("stderr is piped");
    let (stderr, status) = tokio::join!(last_bytes(stderr, keep), child.wait());
    Ok((status?, stderr?))
}

/// Reads `r` to its end: all of it when it holds at most `limit` bytes, else
/// `Err(bytes read)` after reading (and dropping) the rest, so the writer is never
/// left blocked on a full pipe.
pub(crate) async fn at_most<R: AsyncRead + Unpin>(r: R, limit: usize) -> io::Result<Result<Vec<u8>, u64>> {
    let mut all = Vec::new();
    let mut head = r.take(limit as u64 + 1);
    head.read_to_end(&mut all).await?;
    if all.len() <= limit {
        return Ok(Ok(all));
    }
    let rest = tokio::io::copy(&mut head.into_inner(), &mut tokio::io::sink()).await?;
    Ok(Err(all.len() as u64 + rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_cut_at_keep_and_the_last_unterminated_line_counts() {
        let mut input = b"first\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 200_000));
        input.extend(b"\nshort\nlast");
        let mut seen = Vec::new();
        let n = each_line(&input[..], 100, |l| seen.push(String::from_utf8_lossy(l).into_owned())).await.unwrap();
        assert_eq!(n, input.len() as u64);
        assert_eq!(seen.len(), 4, "{:?}", seen.iter().map(String::len).collect::<Vec<_>>());
        assert_eq!(seen[0], "first");
        assert_eq!(seen[1], "x".repeat(100));
        assert_eq!(&seen[2..], ["short", "last"]);
    }

    #[tokio::test]
    async fn a_flood_is_read_through_in_bounded_memory() {
        // 256 MiB of one endless line: read to the end, never held.
        let flood = tokio::io::repeat(b'y').take(256 << 20);
        let mut longest = 0;
        let n = each_line(flood, 4096, |l| longest = longest.max(l.len())).await.unwrap();
        assert_eq!((n, longest), (256 << 20, 4096));
        let tail = last_bytes(tokio::io::repeat(b'z').take(64 << 20).chain(&b"the reason"[..]), 100).await.unwrap();
        assert_eq!(tail.len(), 100);
        assert!(tail.ends_with(b"the reason"));
        assert_eq!(last_bytes(&b"short"[..], 100).await.unwrap(), b"short");
    }

    #[tokio::test]
    async fn output_over_the_limit_is_counted_not_kept() {
        assert_eq!(at_most(&b"12345"[..], 5).await.unwrap(), Ok(b"12345".to_vec()));
        assert_eq!(at_most(tokio::io::repeat(b'x').take(10 << 20), 1 << 20).await.unwrap(), Err(10 << 20));
    }
}
