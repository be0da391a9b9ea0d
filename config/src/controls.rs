//! What answers which compliance control (issue 38): the mapping from frameworks'
//! controls to the measures `drcheck report` computes over its window. One data file —
//! `deploy/controls.toml`, built in; `[evidence] controls_file` replaces it — so a
//! compliance team can adapt the wording. The wording goes into the report and is
//! signed with it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The built-in mapping.
pub const DEFAULT: &str = include_str!("../../deploy/controls.toml");

/// The measures a control's `evidence` may name (what each means: `deploy/controls.toml`).
pub const MEASURES: &[&str] = &[
    "verified_on_schedule",
    "backups_proven",
    "restores_isolated",
    "integrity_checked",
    "restore_within_rto",
    "drills_run",
    "canaries_caught",
    "backups_immutable",
];

/// One framework: its title and controls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Framework {
    pub title: String,
    pub controls: Vec<Control>,
}

/// One control: what it asks, in one line, and the measures that answer it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Control {
    pub id: String,
    pub asks: String,
    pub evidence: Vec<String>,
}

/// Frameworks by name (`soc2`, `iso27001`, `dora`, `nist-800-53`, `hipaa`).
pub type Mapping = BTreeMap<String, Framework>;

/// Reads a mapping (`origin` names it in errors): every control asks something in one
/// line and names only known measures.
pub fn parse(text: &str, origin: &str) -> Result<Mapping, MappingError> {
    let wrong = |why: String| MappingError { origin: origin.to_string(), why };
    let mapping: Mapping = toml::from_str(text).map_err(|e| wrong(e.message().to_string()))?;
    for (name, f) in &mapping {
        if f.controls.is_empty() {
            return Err(wrong(format!("[{name}] has no controls")));
        }
        for c in &f.controls {
            if c.asks.trim().is_empty() || c.asks.contains('\n') {
                return Err(wrong(format!("{name} {}: `asks` must be one line", c.id)));
            }
            if let Some(m) = c.evidence.iter().find(|m| !MEASURES.contains(&m.as_str())) {
                return Err(wrong(format!("{name} {}: unknown measure {m:?} (known: {})", c.id, MEASURES.join(", "))));
            }
            if c.evidence.is_empty() {
                return Err(wrong(format!("{name} {}: names no evidence", c.id)));
            }
        }
    }
    Ok(mapping)
}

/// What is wrong with a controls mapping, and which file (`origin`) it is in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {why}")]
pub struct MappingError {
    pub origin: String,
    pub why: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_mapping_covers_the_five_frameworks_with_known_measures() {
        let m = parse(DEFAULT, "deploy/controls.toml").unwrap();
        for f in ["soc2", "iso27001", "dora", "nist-800-53", "hipaa"] {
            assert!(m.contains_key(f), "{f}");
        }
        let every: std::collections::BTreeSet<&str> =
            m.values().flat_map(|f| f.controls.iter().flat_map(|c| c.evidence.iter().map(String::as_str))).collect();
        assert_eq!(every.len(), MEASURES.len(), "every measure answers some control: {every:?}");
        let bad = DEFAULT.replacen("\"drills_run\"", "\"drils_run\"", 1);
        let e = parse(&bad, "x.toml").unwrap_err().to_string();
        assert!(e.contains("unknown measure \"drils_run\""), "{e}");
        assert!(parse("[x]\ntitle = \"X\"\ncontrols = []\n", "x.toml").unwrap_err().why.contains("no controls"));
    }
}
