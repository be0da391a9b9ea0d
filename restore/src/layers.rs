//! The crate's layering, kept by a test: its rooms, bottom to top, and the rule that an
//! import points down or sideways — never up, and never round a cycle of files.
//!
//! | room | what it is |
//! |------|------------|
//! | `error`, `events` | the typed errors and who is to blame; what a restore tells as it goes |
//! | `store/` | where backups live: S3 and files, retries, the breaker, block leases |
//! | `server/` | the sandbox server, containment, client tools, recovery, WAL reach |
//! | `transfer/` | downloads, formats, layers (compression, encryption), streams, tar |
//! | `request`, `source` | the seam: what a restore is asked and answers; what a source is |
//! | `sources/` | objects in a store, pgBackRest, barman-cloud |
//! | `job`, `open`, `follow`, `lib` | one restore start to finish; opening a source; following an archive; the face |
//!
//! The test reads each file's `crate::…` paths (in `use` lines and in code, comments left
//! out) and resolves each to the file that defines it.

#![cfg(test)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The rooms, bottom first; a file's room is its directory, or its own name at the top.
const ROOMS: &[&[&str]] = &[
    &["error", "events"],
    &["store"],
    &["server"],
    &["transfer"],
    &["request", "source"],
    &["sources"],
    &["job", "open", "follow", "canary", "lib", "fuzz"],
];

fn room_of(file: &str) -> usize {
    let first = file.split('/').next().unwrap_or(file).trim_end_matches(".rs");
    ROOMS.iter().position(|r| r.contains(&first)).unwrap_or_else(|| panic!("{file} is in no room: add it to ROOMS"))
}

/// Every `crate::` path in `text`, outside comments; groups (`crate::{a, b::{c, d}}`)
/// expanded.
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    let code: String = text.lines().filter(|l| !l.trim_start().starts_with("//")).map(|l| format!("{l}\n")).collect();
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        // `drcheck_config::…` and other crates' paths end in `crate::` only by accident.
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        group(rest, Vec::new(), &mut out);
    }
    out
}

/// Reads one path (or group) at the start of `s`, prefixed by `prefix`.
fn group(s: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    let mut i = 0;
    let b = s.as_bytes();
    loop {
        if b.get(i) == Some(&b'{') {
            // A group: its members, separated by commas at this depth.
            i += 1;
            loop {
                while b.get(i).is_some_and(|c| c.is_ascii_whitespace() || *c == b',') {
                    i += 1;
                }
                if b.get(i).is_none_or(|c| *c == b'}') {
                    return i + 1;
                }
                let used = group(&s[i..], path.clone(), out);
                i += used.max(1);
            }
        }
        let start = i;
        while b.get(i).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
            i += 1;
        }
        if start == i {
            out.push(path);
            return i;
        }
        path.push(s[start..i].to_string());
        if s[i..].starts_with("::") {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

/// The file among `files` that defines the longest prefix of `path` (after `aliases`,
/// the face's re-exports of modules by short names).
fn resolve(path: &[String], files: &BTreeSet<String>, aliases: &BTreeMap<String, Vec<String>>) -> Option<String> {
    let mut path = path.to_vec();
    if let Some(first) = path.first()
        && let Some(real) = aliases.get(first)
    {
        path.splice(0..1, real.iter().cloned());
    }
    (1..=path.len()).rev().find_map(|k| {
        let p = path[..k].join("/");
        [format!("{p}.rs"), format!("{p}/mod.rs")].into_iter().find(|f| files.contains(f))
    })
}

/// The module aliases `lib.rs` declares (`pub use server::{sandbox, reach};`).
fn aliases(lib: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for line in lib.lines().filter(|l| l.starts_with("pub use ")) {
        let body = line.trim_start_matches("pub use ").trim_end_matches(';');
        let Some((room, names)) = body.split_once("::{") else { continue };
        if room.contains("::") || !names.ends_with('}') {
            continue;
        }
        for name in names
            .trim_end_matches('}')
            .split(',')
            .map(str::trim)
            .filter(|n| n.chars().all(|c| c.is_lowercase() || c == '_'))
        {
            out.insert(name.to_string(), vec![room.to_string(), name.to_string()]);
        }
    }
    out
}

/// What breaks the rule among `sources` (path under `src/` → text): imports that point
/// up a room, and cycles of files.
fn violations(sources: &BTreeMap<String, String>) -> Vec<String> {
    let files: BTreeSet<String> = sources.keys().cloned().collect();
    let aliases = aliases(sources.get("lib.rs").map(String::as_str).unwrap_or_default());
    let mut edges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut found = Vec::new();
    for (file, text) in sources {
        for path in crate_paths(text) {
            let Some(to) = resolve(&path, &files, &aliases) else { continue };
            if &to == file || to == "lib.rs" {
                continue;
            }
            if room_of(&to) > room_of(file) {
                found.push(format!("{file} imports crate::{} from {to}, a room above it", path.join("::")));
            }
            edges.entry(file).or_default().insert(to);
        }
    }
    // Cycles: a depth-first search that meets a file still on its stack.
    fn visit<'a>(
        f: &'a str,
        edges: &'a BTreeMap<&str, BTreeSet<String>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
        found: &mut Vec<String>,
    ) {
        if done.contains(f) {
            return;
        }
        if let Some(at) = stack.iter().position(|s| *s == f) {
            let mut cycle: Vec<&str> = stack[at..].to_vec();
            cycle.push(f);
            found.push(format!("import cycle: {}", cycle.join(" → ")));
            return;
        }
        stack.push(f);
        for to in edges.get(f).into_iter().flatten() {
            visit(to, edges, stack, done, found);
        }
        stack.pop();
        done.insert(f);
    }
    let mut done = BTreeSet::new();
    for f in edges.keys() {
        visit(f, &edges, &mut Vec::new(), &mut done, &mut found);
    }
    found
}

/// The crate's own sources, by path under `src/`.
fn read_sources() -> BTreeMap<String, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") && p.file_name().is_some_and(|n| n != "layers.rs") {
                let rel = p.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn every_import_points_down_and_no_files_import_each_other_round_a_cycle() {
    let v = violations(&read_sources());
    assert!(v.is_empty(), "the layering is broken:\n  {}", v.join("\n  "));
}

#[test]
fn an_upward_import_or_a_cycle_is_caught() {
    // The real sources with one import added that points up: the store using a source.
    let mut sources = read_sources();
    sources.get_mut("store/fs.rs").unwrap().push_str("\nuse crate::sources::objects::WalArchive;\n");
    let v = violations(&sources);
    assert!(
        v.iter()
            .any(|m| m.starts_with("store/fs.rs imports crate::sources::objects::WalArchive from sources/objects.rs")),
        "{v:?}"
    );
    // A grouped import the other way round a room: server and transfer importing each other.
    let mut sources = read_sources();
    sources
        .get_mut("server/reach.rs")
        .unwrap()
        .push_str("\nuse crate::{error::Stage, transfer::{fetch::FetchOptions, format}};\n");
    let v = violations(&sources);
    assert!(v.iter().any(|m| m.contains("server/reach.rs imports crate::transfer::fetch::FetchOptions")), "{v:?}");
    // Sideways is allowed, round a cycle is not.
    let mut sources = read_sources();
    sources.get_mut("transfer/envelope.rs").unwrap().push_str("\nfn f() { crate::transfer::decrypt::open; }\n");
    let v = violations(&sources);
    assert!(v.iter().any(|m| m.starts_with("import cycle:") && m.contains("transfer/envelope.rs")), "{v:?}");
    assert!(v.iter().all(|m| !m.contains("a room above")), "{v:?}");
}

#[test]
fn paths_are_read_from_groups_and_code_but_not_comments() {
    let text = "use crate::a::{b, c::{d, e}};\n// crate::x::y\nfn f() { crate::g::h(); drcheck_config::k(); }\n";
    let got: Vec<String> = crate_paths(text).into_iter().map(|p| p.join("::")).collect();
    assert_eq!(got, ["a::b", "a::c::d", "a::c::e", "g::h"]);
}
