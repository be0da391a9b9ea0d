//! `drcheck config check`: the config as it will run — the file's own shape with its
//! defaults filled in, so the output loads back as a config that means the same;
//! `${VAR}` references printed as written, secrets written literally as `***`.

use crate::exit::{CliError, Exit};
use clap::Subcommand;
use drcheck_config::Config;

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Validate the config and print it as drcheck understands it, secrets redacted.
    Check,
}

pub(crate) fn run(config: &Config) -> Result<Exit, CliError> {
    let effective = drcheck_config::effective(&config.path)?;
    crate::outln!(
        "# {}: valid ({}); defaults filled in, ${{VAR}} references as written",
        config.path.display(),
        crate::out::count(config.targets.len(), "target")
    );
    for w in crate::verify::config_warnings(config, true) {
        crate::outln!("# warning: {w}");
    }
    crate::out!("{effective}");
    Ok(Exit::Passed)
}
