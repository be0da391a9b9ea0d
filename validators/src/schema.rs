//! `schema`: the restored copy has the same tables (schema-qualified) as the primary.

use crate::{Context, Finding, Primary, Status, TableName, Validator, catalog};
use async_trait::async_trait;
use std::collections::BTreeSet;

pub struct Schema;

/// How many names a detail lists before it says "and N more".
const SHOW: usize = 20;

pub(crate) fn list(names: &[&TableName]) -> String {
    let mut s: Vec<String> = names.iter().take(SHOW).map(|t| t.to_string()).collect();
    if names.len() > SHOW {
        s.push(format!("and {} more", names.len() - SHOW));
    }
    s.join(", ")
}

#[async_trait]
impl Validator for Schema {
    fn name(&self) -> &'static str {
        "schema"
    }

    async fn validate(&self, cx: &Context) -> Finding {
        let name = self.name();
        let primary = match &cx.primary {
            Primary::Available(p) => p,
            Primary::Unavailable(why) => {
                return Finding::new(name, Status::Skipped, format!("primary unavailable: {why}"));
            }
        };
        let on_primary = match catalog::tables(primary).await {
            Ok(t) => t.into_iter().collect::<BTreeSet<_>>(),
            Err(e) => {
                return Finding::new(name, Status::Error, format!("listing tables on the primary: {e}"));
            }
        };
        let restored = match catalog::tables(&cx.restored).await {
            Ok(t) => t.into_iter().collect::<BTreeSet<_>>(),
            Err(e) => {
                return Finding::new(name, Status::Error, format!("listing tables in the restored copy: {e}"));
            }
        };
        let missing: Vec<&TableName> = on_primary.difference(&restored).collect();
        let extra: Vec<&TableName> = restored.difference(&on_primary).collect();
        if missing.is_empty() && extra.is_empty() {
            return Finding::new(name, Status::Passed, format!("{} tables match the primary", restored.len()));
        }
        let mut parts = Vec::new();
        if !missing.is_empty() {
            parts.push(format!("{} missing from the restored copy: {}", missing.len(), list(&missing)));
        }
        if !extra.is_empty() {
            parts.push(format!("{} not on the primary: {}", extra.len(), list(&extra)));
        }
        Finding::new(name, Status::Failed, parts.join("; "))
    }
}
