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
    // What the credentials may do is learned by `storage check`, never here (no request).
    for (name, s) in &config.storage {
        if let drcheck_config::StorageConfig::S3(s3) = s {
            let lock = match (s3.require_lock, s3.retain_until_at_least) {
                (Some(m), Some(d)) => {
                    format!("{} lock required, {} past each backup", m.as_s3(), crate::verify::immutable::in_days(d))
                }
                (Some(m), None) => format!("{} lock required", m.as_s3()),
                (None, _) => "no lock required".to_string(),
            };
            let probe = if s3.probe_write { "will try a delete and a put" } else { "never writes (probe_write off)" };
            crate::outln!("# storage.{name}: {lock}; `drcheck storage check` {probe}");
        }
    }
    crate::out!("{effective}");
    Ok(Exit::Passed)
}
