//! `drcheck archive acknowledge-gap FROM TO`: WAL segments known lost, acknowledged with
//! who, when and why; the follower and the `archive` finding then name the gap instead of
//! failing on it (issue 48).

use crate::exit::{CliError, Exit};
use clap::Subcommand;
use drcheck_config::Config;

#[derive(Debug, Subcommand)]
pub(crate) enum ArchiveCommand {
    /// Acknowledge that WAL segments FROM..TO (inclusive) of a target's archive are lost:
    /// recorded with who, when and why (history, the evidence report); the follower and
    /// the `archive` finding name it instead of failing. Points after it stay unrecoverable
    /// from backups before it — said, never hidden.
    AcknowledgeGap {
        /// The target whose archive lost them.
        #[arg(long)]
        target: String,
        /// The first segment lost (24 hex digits).
        from: String,
        /// The last segment lost.
        to: String,
        /// Why it is lost, and what was decided.
        #[arg(long)]
        reason: String,
        /// Who decided (default: the login name drcheck runs as).
        #[arg(long)]
        by: Option<String>,
    },
}

pub(crate) async fn acknowledge_gap(
    config: &Config,
    target: &str,
    from: &str,
    to: &str,
    reason: &str,
    by: Option<&str>,
) -> Result<Exit, CliError> {
    let t = super::select_targets(config, Some(target))?[0];
    crate::history::gap_bounds(from, to).map_err(CliError::usage)?;
    if reason.trim().is_empty() {
        return Err(CliError::usage(anyhow::anyhow!("--reason must say why the segments are lost")));
    }
    let history = crate::history::History::open(&config.state.url).await.map_err(CliError::incomplete)?;
    let by = by.map(str::to_string).unwrap_or_else(crate::history::who_here);
    let acked = history.acknowledge(&t.name, crate::history::WAL_GAP, from, Some(to), reason, &by).await;
    history.close().await;
    let ack = acked.map_err(CliError::incomplete)?;
    crate::outln!("{}: WAL {from}..{to} acknowledged lost — {}", t.name, crate::out::shown(&ack.describe()));
    Ok(Exit::Passed)
}
