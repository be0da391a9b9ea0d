//! `drcheck heartbeat setup`: the SQL that gives a target's primary its heartbeat.

use crate::exit::{CliError, Exit};
use clap::Subcommand;
use drcheck_config::Config;

#[derive(Debug, Subcommand)]
pub(crate) enum HeartbeatCommand {
    /// Print the SQL that creates a target's [target.heartbeat] table on its primary, an
    /// INSERT-only writer role, and the pg_cron line for fleets without `drcheck daemon`.
    Setup {
        /// The target (its [target.heartbeat] table); every target with one when absent.
        #[arg(long)]
        target: Option<String>,
        /// The writer role the daemon's heartbeat.url logs in as.
        #[arg(long, default_value = "drcheck_heartbeat")]
        role: String,
    },
}

pub(crate) fn setup(config: &Config, target: Option<&str>, role: &str) -> Result<Exit, CliError> {
    let targets = super::select_targets(config, target)?;
    let with: Vec<_> = targets.iter().filter_map(|t| Some((*t, t.heartbeat.as_ref()?))).collect();
    if with.is_empty() {
        return Err(CliError::usage(anyhow::anyhow!(
            "{} has no [target.heartbeat]{}: add one (table = \"drcheck.heartbeat\", interval = \"1m\")",
            config.path.display(),
            target.map(|t| format!(" for target {t:?}")).unwrap_or_default()
        )));
    }
    for (t, hb) in with {
        println!("{}", crate::heartbeat::setup_sql(t, hb, role));
    }
    Ok(Exit::Passed)
}
