//! `drcheck lease list|release`: the per-target leases (issue 34). A run that died
//! without releasing its lease — a deleted pod, a lost node — holds its target until the
//! lease expires (its whole run budget: hours); on its own machine the next run takes it
//! over, elsewhere an operator frees it here.

use crate::exit::{CliError, Exit};
use crate::history::{History, holder_alive_here};
use clap::Subcommand;
use drcheck_config::Config;

#[derive(Debug, Subcommand)]
pub(crate) enum LeaseCommand {
    /// Every lease: target, holder, when it expires, and whether its holder still runs
    /// (known on the holder's own machine only), as JSON.
    List,
    /// Release a target's lease — one left by a run that died (a deleted pod, a lost
    /// node). Refuses a holder that still runs on this machine, and one on another
    /// machine whose lease is live, unless --force.
    Release {
        /// The target whose lease to release.
        #[arg(long)]
        target: String,
        /// Release it even from a holder that may still be running.
        #[arg(long)]
        force: bool,
    },
}

pub(crate) async fn run(config: &Config, cmd: LeaseCommand) -> Result<Exit, CliError> {
    let history = History::open(&config.state.url).await.map_err(CliError::incomplete)?;
    let result = match cmd {
        LeaseCommand::List => list(&history).await,
        LeaseCommand::Release { target, force } => release(config, &history, &target, force).await,
    };
    history.close().await;
    result
}

async fn list(history: &History) -> Result<Exit, CliError> {
    let now = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    let leases: Vec<serde_json::Value> = history
        .leases()
        .await
        .map_err(CliError::incomplete)?
        .into_iter()
        .map(|(target, holder, expires_at)| {
            serde_json::json!({
                "target": target,
                "holder": holder,
                "expires_at": expires_at,
                "live": expires_at >= now,
                "holder_running": holder_alive_here(&holder),
            })
        })
        .collect();
    let text = serde_json::to_string_pretty(&serde_json::json!({ "leases": leases })).map_err(CliError::incomplete)?;
    crate::outln!("{text}");
    Ok(Exit::Passed)
}

async fn release(config: &Config, history: &History, target: &str, force: bool) -> Result<Exit, CliError> {
    if !config.targets.iter().any(|t| t.name == target) {
        return Err(CliError::usage(anyhow::anyhow!("no target named {target:?} in {}", config.path.display())));
    }
    if let Some((holder, expires_at)) = history.lease(target).await.map_err(CliError::incomplete)?
        && !force
    {
        match holder_alive_here(&holder) {
            Some(true) => {
                return Err(CliError::usage(anyhow::anyhow!(
                    "{target}: {holder} is running on this machine and holds the lease until {expires_at}: \
                     stop it, or pass --force"
                )));
            }
            Some(false) => {}
            None => {
                return Err(CliError::usage(anyhow::anyhow!(
                    "{target}: {holder} (not on this machine: drcheck cannot tell whether it still runs) holds the \
                     lease until {expires_at}: pass --force if you know it is gone"
                )));
            }
        }
    }
    let released = history.release_any_lease(target).await.map_err(CliError::incomplete)?;
    crate::outln!("{target}: {}", if released { "lease released" } else { "no lease held" });
    Ok(Exit::Passed)
}
