//! Turns SIGTERM and SIGINT into a cancellation token. Work watches the token and
//! unwinds through drop guards, so sandboxes are torn down rather than left behind.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// A token cancelled on the first SIGTERM or SIGINT. A second signal exits at once.
pub fn on_signals() -> CancellationToken {
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
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        tracing::warn!("second signal: exiting now");
        std::process::exit(crate::exit::Exit::Incomplete as i32);
    });
    token
}
