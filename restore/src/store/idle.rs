//! A reader that fails when no byte arrives for too long: a stalled download is
//! treated like a dead one instead of hanging forever.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::{Instant, Sleep};

pub struct IdleTimeout<R> {
    inner: Pin<Box<R>>,
    limit: Duration,
    what: String,
    deadline: Pin<Box<Sleep>>,
}

impl<R> IdleTimeout<R> {
    pub fn new(inner: R, limit: Duration, what: String) -> Self {
        Self { inner: Box::pin(inner), limit, what, deadline: Box::pin(tokio::time::sleep(limit)) }
    }
}

impl<R: AsyncRead> AsyncRead for IdleTimeout<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match this.inner.as_mut().poll_read(cx, buf) {
            Poll::Ready(r) => {
                let limit = this.limit;
                this.deadline.as_mut().reset(Instant::now() + limit);
                Poll::Ready(r)
            }
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{}: no data for {:?}", this.what, this.limit),
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test(start_paused = true)]
    async fn a_stalled_stream_times_out() {
        let (_tx, rx) = tokio::io::duplex(64);
        let mut r = IdleTimeout::new(rx, Duration::from_secs(5), "test stream".into());
        let mut buf = [0u8; 8];
        let err = r.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(err.to_string().contains("test stream"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_flowing_stream_does_not() {
        let (mut tx, rx) = tokio::io::duplex(64);
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_secs(3)).await;
                tx.write_all(b"x").await.unwrap();
            }
        });
        let mut r = IdleTimeout::new(rx, Duration::from_secs(5), "s".into());
        let mut all = Vec::new();
        r.read_to_end(&mut all).await.unwrap();
        assert_eq!(all.len(), 10);
    }
}
