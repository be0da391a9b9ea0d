//! The crate's layering, kept by a test: its rooms, bottom to top, and the rule that an
//! import points down or sideways — never up, and never round a cycle of files
//! (`drcheck-layering` reads every file's `crate::` and `super::` paths, re-exports
//! followed).
//!
//! | room | what it is |
//! |------|------------|
//! | `error`, `events` | the typed errors and who is to blame; what a restore tells as it goes |
//! | `store/` | where backups live: S3 and files, retries, the breaker, block leases |
//! | `server/` | the sandbox server, containment, client tools, recovery, WAL reach |
//! | `transfer/` | downloads, formats, layers (compression, encryption), streams, tar |
//! | `request`, `source` | the seam: what a restore is asked and answers; what a source is |
//! | `sources/` | objects in a store, pgBackRest, barman-cloud, one-file backups judged whole |
//! | `job`, `open`, `follow`, `canary`, `lib` | one restore start to finish; opening a source; following an archive; the canary's defects; the face |

#![cfg(test)]

use drcheck_layering::{Rooms, assert_layered, read_sources, violations};
use std::path::Path;

/// The rooms, bottom first; a file's room is its directory, or its own name at the top.
const ROOMS: Rooms<'static> = &[
    &["error", "events"],
    &["store"],
    &["server"],
    &["transfer"],
    &["request", "source"],
    &["sources"],
    &["job", "open", "follow", "canary", "lib", "fuzz", "layers"],
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
    // The real sources with one import added that points up: the store using a source.
    let mut s = sources();
    s.get_mut("store/fs.rs").unwrap().push_str("\nuse crate::sources::objects::WalArchive;\n");
    let v = violations(&s, ROOMS);
    assert!(
        v.iter()
            .any(|m| m.starts_with("store/fs.rs imports crate::sources::objects::WalArchive from sources/objects.rs")),
        "{v:?}"
    );
    // Through the face: the store using what the root re-exports from a restore job.
    let mut s = sources();
    s.get_mut("store/fs.rs").unwrap().push_str("\nfn f() { crate::disk_usage; }\n");
    let v = violations(&s, ROOMS);
    assert!(v.iter().any(|m| m.starts_with("store/fs.rs imports crate::disk_usage from job.rs")), "{v:?}");
    // Sideways is allowed, round a cycle is not.
    let mut s = sources();
    s.get_mut("transfer/envelope.rs").unwrap().push_str("\nfn f() { super::decrypt::open; }\n");
    let v = violations(&s, ROOMS);
    assert!(v.iter().any(|m| m.starts_with("import cycle:") && m.contains("transfer/envelope.rs")), "{v:?}");
    assert!(v.iter().all(|m| !m.contains("a room above")), "{v:?}");
}
