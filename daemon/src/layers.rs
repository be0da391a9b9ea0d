//! The binary's layering, kept by a test (`drcheck-layering`): rooms bottom to top, every
//! import pointing down or sideways, no cycle of files.
//!
//! | room | what it is |
//! |------|------------|
//! | `exit`, `ids`, `out`, `progress`, `measure`, `forecast` | exit codes; names, ids and options; the terminal; measurements; the RTO forecast |
//! | `shutdown`, `run_report`, `pristine` | signals; a run's report (the JSON contract); the pristine catalog |
//! | `canary_report`, `alerts`, `disk` | what a canary found; alerts and their sinks; the scratch disk |
//! | `history` | the history store |
//! | `journal`, `validate`, `metrics`, `evidence` | the primary's journal; the validate step; metrics; audit evidence |
//! | `verify`, `dispatch` | one verification; alert delivery |
//! | `canary`, `heartbeat`, `follow` | the canary; the heartbeat; followers |
//! | `reaper` | what killed drchecks left |
//! | `service` | the daemon |
//! | `commands` | one file per subcommand |
//! | `cli`, `lib`, `main` | the command line; the face |

#![cfg(test)]

use drcheck_layering::{Rooms, assert_layered, read_sources, violations};
use std::path::Path;

const ROOMS: Rooms<'static> = &[
    &["exit", "ids", "out", "progress", "measure", "forecast"],
    &["shutdown", "run_report", "pristine"],
    &["canary_report", "alerts", "disk"],
    &["history"],
    &["journal", "validate", "metrics", "evidence"],
    &["verify", "dispatch"],
    &["canary", "heartbeat", "follow"],
    &["reaper"],
    &["service"],
    &["commands"],
    &["cli", "lib", "main", "layers"],
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
    // The history store reaching for a verification (what `died_report` once was).
    let mut s = sources();
    s.get_mut("history/starts.rs").unwrap().insert_str(0, "use crate::verify::verify_as;\n");
    let v = violations(&s, ROOMS);
    assert!(v.iter().any(|m| m.starts_with("history/starts.rs imports crate::verify::verify_as")), "{v:?}");
    // A follower reaching for the daemon that runs it.
    let mut s = sources();
    s.get_mut("follow.rs").unwrap().insert_str(0, "use crate::service::Shared;\n");
    let v = violations(&s, ROOMS);
    assert!(v.iter().any(|m| m.starts_with("follow.rs imports crate::service::Shared")), "{v:?}");
    // Two files of one room importing each other.
    let mut s = sources();
    s.get_mut("verify/select.rs").unwrap().insert_str(0, "use super::restore::Ready;\n");
    let v = violations(&s, ROOMS);
    assert!(v.iter().any(|m| m.starts_with("import cycle:") && m.contains("verify/select.rs")), "{v:?}");
}
