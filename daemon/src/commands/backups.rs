//! `drcheck backups list`: what is in a target's store, newest first.

use crate::exit::{CliError, Exit};
use crate::pipeline::list_backups;
use crate::report::timestamp;
use drcheck_config::Config;
use std::time::SystemTime;

pub async fn list(config: &Config, target: Option<&str>, json: bool) -> Result<Exit, CliError> {
    let targets = super::select_targets(config, target)?;
    let mut out = Vec::new();
    for t in targets {
        // Whether unreachable or refusing (403, no such bucket), a store that cannot be
        // listed is a problem outside the backups: exit 3.
        let (store, backups) = list_backups(config, t).await.map_err(|e| {
            CliError::incomplete(anyhow::Error::new(e).context(format!("listing backups of target {}", t.name)))
        })?;
        if json {
            let items: Vec<_> = backups
                .iter()
                .map(|b| serde_json::json!({"key": b.key, "size_bytes": b.size, "created_at": timestamp(b.last_modified)}))
                .collect();
            out.push(serde_json::json!({"target": t.name, "store": store, "backups": items}));
        } else {
            println!("{} — {} under {:?}: {} backups", t.name, store, t.prefix, backups.len());
            for (i, b) in backups.iter().enumerate() {
                let age = SystemTime::now().duration_since(b.last_modified).unwrap_or_default();
                let marker = if i == 0 { "latest" } else { "" };
                println!(
                    "  {:<6} {}  {:>12} B  {}  (age {})",
                    marker,
                    b.key,
                    b.size,
                    timestamp(b.last_modified),
                    drcheck_config::format_duration(age)
                );
            }
        }
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"targets": out})).map_err(CliError::incomplete)?
        );
    }
    Ok(Exit::Passed)
}
