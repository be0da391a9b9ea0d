//! `drcheck daemon`: wires signals to the daemon — SIGTERM/SIGINT stop it (exit 0
//! once in-flight runs are recorded as aborted), SIGHUP reloads the config.

use crate::exit::{CliError, Exit};
use drcheck_config::Config;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

pub(crate) async fn run(config: Config, only: Vec<String>) -> Result<Exit, CliError> {
    let config = crate::service::only_targets(config, &only).map_err(CliError::usage)?;
    let shutdown = CancellationToken::new();
    let (reload_tx, reload_rx) = tokio::sync::mpsc::channel(1);
    let (mut term, mut int, mut hup) =
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt()), signal(SignalKind::hangup())) {
            (Ok(a), Ok(b), Ok(c)) => (a, b, c),
            _ => return Err(CliError::incomplete(anyhow::anyhow!("cannot install signal handlers"))),
        };
    let stop = shutdown.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = hup.recv() => { let _ = reload_tx.try_send(()); }
            }
        }
        tracing::info!("signal received: shutting down");
        stop.cancel();
    });
    crate::service::run(config, only, shutdown, reload_rx).await.map_err(CliError::incomplete)?;
    Ok(Exit::Passed)
}
