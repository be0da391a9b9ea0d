//! `drcheck config check`: the config as drcheck understands it, secrets redacted.

use crate::exit::{CliError, Exit};
use drcheck_config::Config;

pub fn run(config: &Config) -> Result<Exit, CliError> {
    crate::outln!("# {}: valid ({})", config.path.display(), crate::out::count(config.targets.len(), "target"));
    crate::out!("{}", config.to_redacted_toml());
    Ok(Exit::Passed)
}
