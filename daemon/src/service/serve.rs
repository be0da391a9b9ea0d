//! Serving the daemon's HTTP surface without letting a client cost more than a little:
//! a client that opens a connection and sends nothing (or sends a header a byte at a
//! time) holds one file descriptor for [`HEADER_READ_TIMEOUT`], a connection lives at
//! most [`CONNECTION_LIFETIME`], and at most [`max_connections`] are open at once —
//! far below the descriptors the process has ([`raise_nofile_limit`] raises the soft
//! limit to the hard one at start-up), so the scheduler's runs (SQLite, sandboxes,
//! pipes) always find descriptors.

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long a client may take to send a request's headers (also between requests on a
/// kept-alive connection).
pub(super) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one connection may stay open, whatever it does.
pub(super) const CONNECTION_LIFETIME: Duration = Duration::from_secs(120);

/// Raises the soft limit on open files to the hard limit; returns the soft limit now.
pub(super) fn raise_nofile_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                hard
            } else {
                soft
            }
        }
        Err(_) => 1024,
    }
}

/// At most a quarter of the descriptors go to HTTP clients (and never more than 4096).
pub(super) fn max_connections(nofile: u64) -> usize {
    (nofile / 4).clamp(16, 4096) as usize
}

/// Serves `app` on `listener` until `stop`, then waits for open connections to finish.
pub(super) async fn serve(listener: TcpListener, app: axum::Router, stop: CancellationToken, max_connections: usize) {
    let slots = Arc::new(Semaphore::new(max_connections));
    let connections = TaskTracker::new();
    loop {
        let permit = tokio::select! {
            _ = stop.cancelled() => break,
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        let (stream, _) = tokio::select! {
            _ = stop.cancelled() => break,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or the like: say so, wait a moment, go on.
                    tracing::warn!("accepting an HTTP connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let service = TowerToHyperService::new(app.clone());
        let stop = stop.clone();
        connections.spawn(async move {
            let _permit = permit;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT).keep_alive(true);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = &mut conn => {}
                _ = tokio::time::sleep(CONNECTION_LIFETIME) => {}
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                }
            }
        });
    }
    connections.close();
    let _ = tokio::time::timeout(Duration::from_secs(5), connections.wait()).await;
}
