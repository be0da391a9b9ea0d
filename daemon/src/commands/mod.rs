//! One file per subcommand, each owning its arguments (`clap::Args`/`Subcommand`);
//! `crate::cli` names them in its command enum and dispatches.

pub(crate) mod alerts;
pub(crate) mod archive;
pub(crate) mod backups;
pub(crate) mod canary;
pub(crate) mod config_check;
pub(crate) mod daemon;
pub(crate) mod deploy;
pub(crate) mod drill;
pub(crate) mod heartbeat;
pub(crate) mod history;
pub(crate) mod lease;
pub(crate) mod report;
pub(crate) mod status;
pub(crate) mod storage;
pub(crate) mod verify;

use crate::exit::CliError;
use drcheck_config::{Config, TargetConfig};

/// The config file read when neither `--config` nor `DRCHECK_CONFIG` names one.
pub(crate) const DEFAULT_CONFIG: &str = "drcheck.toml";

/// The targets a command applies to: one by name, or all of them.
pub(crate) fn select_targets<'c>(config: &'c Config, name: Option<&str>) -> Result<Vec<&'c TargetConfig>, CliError> {
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
