//! Turns SIGTERM and SIGINT into a cancellation token. Work watches the token and
//! unwinds through drop guards, so sandboxes are torn down rather than left behind.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// A token cancelled on the first SIGTERM or SIGINT. A second one is noted (cleanup
/// still runs); a third exits at once.
pub(crate) fn on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
            tracing::warn!("cannot install signal handlers");
            return;
        };
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::warn!(signal = name, "stopping: tearing down sandboxes");
        t.cancel();
        // Cleanup is bounded (unpacking stops within a chunk, a server gets 10 s): a
        // second signal does not skip it; only a third one exits at once.
        for n in 2..=3 {
            tokio::select! {
                _ = term.recv() => {},
                _ = int.recv() => {},
            }
            if n == 2 {
                tracing::warn!(
                    "second signal: already stopping; sandboxes are being torn down (a third exits at once)"
                );
            }
        }
        tracing::warn!("third signal: exiting now, leaving cleanup to the next run's reaper");
        std::process::exit(crate::exit::Exit::Incomplete as i32);
    });
    token
}
