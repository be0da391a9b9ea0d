//! The crate's layering, kept by a test (`drcheck-layering`): rooms bottom to top, every
//! import pointing down or sideways, no cycle of files.
//!
//! | room | what it is |
//! |------|------------|
//! | `finding` | what a check says: `Finding`, `Status`, the coverage rule, a table's name |
//! | `primary`, `catalog`, `databases` | the primary's sessions; catalog reads; which databases |
//! | `asof`, `guard`, `ddl` | changes since the copy's point; the restored copy's sessions pinned; the DDL log |
//! | `context` | what a validator looks at, the `Validator` trait, the rotation, cut-offs, the phase's deadline |
//! | the validators | `amcheck` … `point_in_time`, one file (or folder) each |
//! | `registry` | the one list, and the run of a selection |
//! | `lib` | the face |

#![cfg(test)]

use drcheck_layering::{Rooms, assert_layered, read_sources, violations};
use std::path::Path;

const ROOMS: Rooms<'static> = &[
    &["finding"],
    &["primary", "catalog", "databases"],
    &["asof", "guard", "ddl"],
    &["context"],
    &[
        "amcheck",
        "checksums",
        "custom",
        "freshness",
        "full_read",
        "indexes",
        "large_objects",
        "point_in_time",
        "row_counts",
        "schema",
        "sequences",
    ],
    &["registry"],
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
fn an_upward_import_is_caught() {
    // The ground floor reaching for the registry through the face.
    let mut s = sources();
    s.get_mut("finding.rs").unwrap().insert_str(0, "use crate::selected;\n");
    let v = violations(&s, ROOMS);
    assert!(v.iter().any(|m| m.starts_with("finding.rs imports crate::selected from registry.rs")), "{v:?}");
    // A validator's context reaching for a validator.
    let mut s = sources();
    s.get_mut("context.rs").unwrap().insert_str(0, "use crate::checksums::record_hash_sql;\n");
    let v = violations(&s, ROOMS);
    assert!(v.iter().any(|m| m.starts_with("context.rs imports crate::checksums::record_hash_sql")), "{v:?}");
}
