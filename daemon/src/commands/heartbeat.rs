//! `drcheck heartbeat setup`: the SQL that gives a target's primary its heartbeat.

use crate::exit::{CliError, Exit};
use drcheck_config::Config;

pub fn setup(config: &Config, target: Option<&str>, role: &str) -> Result<Exit, CliError> {
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
