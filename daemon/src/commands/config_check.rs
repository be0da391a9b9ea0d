//! `drcheck config check`: the config as drcheck understands it, secrets redacted.

use crate::exit::{CliError, Exit};
use drcheck_config::Config;

pub fn run(config: &Config) -> Result<Exit, CliError> {
    println!("# {}: valid ({} targets)", config.path.display(), config.targets.len());
    print!("{}", config.to_redacted_toml());
    Ok(Exit::Passed)
}
