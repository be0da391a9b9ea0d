//! `drcheck alerts list|deliver|dead-letter`: look into, flush and clear the alert outbox.

use crate::dispatch::Dispatcher;
use crate::exit::{CliError, Exit};
use crate::history::History;
use clap::Subcommand;
use drcheck_config::Config;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub(crate) enum AlertsCommand {
    /// Pending alerts, dead letters and the count delivered, as JSON.
    List,
    /// Deliver pending alerts now (for up to --seconds).
    Deliver {
        /// Keep delivering (with back-off) for at most this many seconds.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
    },
    /// Move every pending alert of a sink to the dead letters (a sink removed for good).
    DeadLetter {
        /// The sink's name, as `drcheck alerts list` shows it.
        #[arg(long)]
        sink: String,
    },
}

pub(crate) async fn run(config: &Config, cmd: AlertsCommand) -> Result<Exit, CliError> {
    let history = History::open(&config.state.url).await.map_err(CliError::incomplete)?;
    let out = match cmd {
        AlertsCommand::List => history.alert_listing().await.map_err(CliError::incomplete)?,
        AlertsCommand::Deliver { seconds } => {
            let d = Dispatcher::new(&history, &config.alerts, None);
            let cancel = crate::shutdown::on_signals();
            let r = d.drain(Duration::from_secs(seconds), &cancel).await.map_err(CliError::incomplete)?;
            serde_json::json!({"delivered": r.delivered, "failed": r.failed, "dead_lettered": r.dead, "pending": r.pending})
        }
        AlertsCommand::DeadLetter { sink } => {
            let why = "moved to the dead letters by `drcheck alerts dead-letter`";
            let moved = history.dead_letter_sink(&sink, None, why).await.map_err(CliError::incomplete)?;
            serde_json::json!({"sink": sink, "dead_lettered": moved})
        }
    };
    history.close().await;
    crate::outln!("{}", serde_json::to_string_pretty(&out).map_err(CliError::incomplete)?);
    Ok(Exit::Passed)
}
