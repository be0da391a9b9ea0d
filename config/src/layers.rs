//! The crate's layering, kept by a test (`drcheck-layering`): rooms bottom to top, every
//! import pointing down or sideways, no cycle of files.
//!
//! | room | what it is |
//! |------|------------|
//! | `error`, `duration`, `interpolate`, `secret`, `schedule`, `controls`, `raw`, `ident` | the pieces: errors, durations, `${VAR}`, secrets, cron, evidence controls, the file's raw shape, SQL identifiers |
//! | `model` | the validated configuration's types |
//! | `validated` | raw → validated, errors naming key and line |
//! | `effective` | the validated config written back (`config check`) |
//! | `lib` | the face |

#![cfg(test)]

use drcheck_layering::{Rooms, assert_layered, read_sources, violations};
use std::path::Path;

const ROOMS: Rooms<'static> = &[
    &["error", "duration", "interpolate", "secret", "schedule", "controls", "raw", "ident"],
    &["model"],
    &["validated"],
    &["effective"],
    &["lib", "layers"],
];

fn sources() -> std::collections::BTreeMap<String, String> {
    read_sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &["layers.rs", "validated/tests.rs"])
}

#[test]
fn every_import_points_down_and_no_files_import_each_other_round_a_cycle() {
    assert_layered(env!("CARGO_MANIFEST_DIR"), ROOMS, &["layers.rs", "validated/tests.rs"]);
}

#[test]
fn an_upward_import_is_caught() {
    // The types reaching for the validation that makes them.
    let mut s = sources();
    s.get_mut("model.rs").unwrap().insert_str(0, "use crate::validated::validate;\n");
    let v = violations(&s, ROOMS);
    assert!(v.iter().any(|m| m.starts_with("model.rs imports crate::validated::validate from validated.rs")), "{v:?}");
}
