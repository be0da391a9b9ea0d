//! The crate's layering, kept by a test (`drcheck-layering`): rooms bottom to top, every
//! import pointing down or sideways, no cycle of files.
//!
//! | room | what it is |
//! |------|------------|
//! | `format`, `scope`, `clock`, `outcome` | the runbook file's raw shape; variables; time stamps; what a step ended as |
//! | `plan`, `live`, `journal` | the checked plan; live output; the drill's record |
//! | `steps`, `drill_report` | one module per step kind; the HTML report |
//! | `runner`, `dry_run` | a drill run; `--dry-run` |
//! | `lib` | the face |

#![cfg(test)]

use drcheck_layering::{Rooms, assert_layered, read_sources, violations};
use std::path::Path;

const ROOMS: Rooms<'static> = &[
    &["format", "scope", "clock", "outcome"],
    &["plan", "live", "journal"],
    &["steps", "drill_report"],
    &["runner", "dry_run"],
    &["lib", "layers", "fuzz"],
];

fn sources() -> std::collections::BTreeMap<String, String> {
    read_sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &["layers.rs"])
}

#[test]
fn every_import_points_down_and_no_files_import_each_other_round_a_cycle() {
    assert_layered(env!("CARGO_MANIFEST_DIR"), ROOMS, &["layers.rs"]);
}

#[test]
fn an_upward_import_or_a_cycle_is_caught() {
    // What a step ended as, reaching for the steps (as the circle through `live` once did).
    let mut s = sources();
    s.get_mut("outcome.rs").unwrap().insert_str(0, "use crate::steps::Env;\n");
    let v = violations(&s, ROOMS);
    assert!(v.iter().any(|m| m.starts_with("outcome.rs imports crate::steps::Env from steps/mod.rs")), "{v:?}");
    // Through the face: `crate::run` is the runner's.
    let mut s = sources();
    s.get_mut("journal.rs").unwrap().insert_str(0, "use crate::run;\n");
    let v = violations(&s, ROOMS);
    assert!(v.iter().any(|m| m.starts_with("journal.rs imports crate::run from runner.rs")), "{v:?}");
}
