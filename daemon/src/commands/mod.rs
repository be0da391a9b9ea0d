//! One file per subcommand, each owning its arguments (`clap::Args`/`Subcommand`);
//! `crate::cli` names them in its command enum and dispatches.

pub mod alerts;
pub mod backups;
pub mod config_check;
pub mod daemon;
pub mod deploy;
pub mod drill;
pub mod heartbeat;
pub mod history;
pub mod lease;
pub mod report;
pub mod status;
pub mod verify;

use crate::exit::CliError;
use drcheck_config::{Config, TargetConfig};

/// The config file read when neither `--config` nor `DRCHECK_CONFIG` names one.
pub const DEFAULT_CONFIG: &str = "drcheck.toml";

/// The targets a command applies to: one by name, or all of them.
pub fn select_targets<'c>(config: &'c Config, name: Option<&str>) -> Result<Vec<&'c TargetConfig>, CliError> {
    match name {
        Some(n) => config.target(n).map(|t| vec![t]).ok_or_else(|| {
            let known: Vec<&str> = config.targets.iter().map(|t| t.name.as_str()).collect();
            CliError::usage(anyhow::anyhow!(
                "no target named {n:?} in {}; targets: [{}]",
                config.path.display(),
                known.join(", ")
            ))
        }),
        None if config.targets.is_empty() => {
            Err(CliError::usage(anyhow::anyhow!("{} defines no [[target]]", config.path.display())))
        }
        None => Ok(config.targets.iter().collect()),
    }
}
