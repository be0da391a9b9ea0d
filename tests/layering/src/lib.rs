//! The layering rule, for every crate of the workspace: a crate's files stand in rooms,
//! bottom to top, and **an import points down or sideways — never up, and never round a
//! cycle of files**. Each crate names its rooms in its own `layers.rs` test and asks
//! [`violations`] of its sources ([`read_sources`]).
//!
//! A file's room is its first path component under `src/` (a directory, or the file's own
//! name). Its imports are the `crate::…` and `super::…` paths in its code — `use` lines and
//! paths in expressions, groups expanded, comments and its `#[cfg(test)]` module left out —
//! each resolved to the file that defines it: through the crate root's re-exports (so
//! `use crate::Follower` from a lower room is the import of `follow.rs` it is) and
//! relative to the file for `super::`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A crate's own sources, by path under `src/` (`verify/select.rs`), but `skip`'s files.
pub fn read_sources(src: &Path, skip: &[&str]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())).flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(src).unwrap().to_string_lossy().into_owned();
                if !skip.contains(&rel.as_str()) {
                    out.insert(rel, std::fs::read_to_string(&p).unwrap());
                }
            }
        }
    }
    out
}

/// The code of `text` that counts: comments and test modules (`#[cfg(test)]` before a
/// `mod name {`, up to its closing brace) left out.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        let t = l.trim_start();
        if t == "#[cfg(test)]"
            && lines.peek().is_some_and(|n| n.trim_start().starts_with("mod ") && n.trim_end().ends_with('{'))
        {
            // Skip the module: braces counted (its strings' braces come in pairs).
            let mut depth = 0i64;
            for m in lines.by_ref() {
                depth += m.matches('{').count() as i64 - m.matches('}').count() as i64;
                if depth <= 0 && m.contains('}') {
                    break;
                }
            }
            continue;
        }
        if !t.starts_with("//") {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// Every path in `text`'s code that starts with `root` (`crate::` or `super::`); groups
/// (`crate::{a, b::{c, d}}`) expanded.
pub fn paths(text: &str, root: &str) -> Vec<Vec<String>> {
    let code = code(text);
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(i) = rest.find(root) {
        // `drcheck_config::…` and other crates' paths end in `crate::` only by accident.
        let before = rest[..i].chars().next_back();
        rest = &rest[i + root.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
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

/// What the crate root re-exports (`pub use a::b::{C, d};`, `pub use a::B;`,
/// `pub use a::b as c;`): each name it gives, with the path it stands for.
fn reexports(lib: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let code = code(lib);
    let mut rest = code.as_str();
    while let Some(i) = rest.find("pub use ") {
        rest = &rest[i + "pub use ".len()..];
        let end = rest.find(';').unwrap_or(rest.len());
        let stmt: String = rest[..end].split_whitespace().collect::<Vec<_>>().join(" ");
        for (path, rename) in use_tree(&stmt, &[]) {
            let Some(last) = path.last() else { continue };
            out.insert(rename.unwrap_or_else(|| last.clone()), path);
        }
    }
    out
}

/// The leaves of a `use` tree (`a::{b, c::D as E, f::{g}}`), each with its rename.
fn use_tree(s: &str, prefix: &[String]) -> Vec<(Vec<String>, Option<String>)> {
    let s = s.trim();
    if let Some(open) = s.find('{') {
        let head: Vec<String> = s[..open]
            .trim_end_matches("::")
            .split("::")
            .filter(|p| !p.is_empty())
            .map(|p| p.trim().to_string())
            .collect();
        let mut base = prefix.to_vec();
        base.extend(head);
        let inner = &s[open + 1..s.rfind('}').unwrap_or(s.len())];
        // Split the group at commas of depth 0.
        let (mut depth, mut start, mut out) = (0, 0, Vec::new());
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.extend(use_tree(&inner[start..i], &base));
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.extend(use_tree(&inner[start..], &base));
        return out;
    }
    if s.is_empty() {
        return Vec::new();
    }
    let (path, rename) = match s.split_once(" as ") {
        Some((p, r)) => (p, Some(r.trim().to_string())),
        None => (s, None),
    };
    let mut full = prefix.to_vec();
    full.extend(path.split("::").map(|p| p.trim().to_string()).filter(|p| !p.is_empty() && p != "self"));
    vec![(full, rename)]
}

/// The file among `files` that defines the longest prefix of `path`.
fn file_of(path: &[String], files: &BTreeSet<String>) -> Option<String> {
    (1..=path.len()).rev().find_map(|k| {
        let p = path[..k].join("/");
        [format!("{p}.rs"), format!("{p}/mod.rs")].into_iter().find(|f| files.contains(f))
    })
}

/// The module path of a file (`verify/select.rs` → `[verify, select]`, `verify/mod.rs` →
/// `[verify]`, `lib.rs` → `[]`).
fn module_of(file: &str) -> Vec<String> {
    let stem = file.trim_end_matches(".rs");
    let mut parts: Vec<String> = stem.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib" || l == "main") {
        parts.pop();
    }
    parts
}

/// The file `path` (read in `file`, from the crate root, re-exports followed) names.
fn resolve(path: &[String], files: &BTreeSet<String>, exports: &BTreeMap<String, Vec<String>>) -> Option<String> {
    let mut path = path.to_vec();
    // A name the root re-exports stands for its real path (followed a few times: a
    // re-export of a re-export).
    for _ in 0..4 {
        match path.first().and_then(|f| exports.get(f)) {
            Some(real) if file_of(&path, files).is_none() || path.len() == 1 => {
                let mut p = real.clone();
                p.extend(path[1..].iter().cloned());
                if p == path {
                    break;
                }
                path = p;
            }
            _ => break,
        }
    }
    file_of(&path, files)
}

/// A crate's rooms, bottom first: each a list of first path components (`"verify"`,
/// `"ids"`).
pub type Rooms<'a> = &'a [&'a [&'a str]];

/// The room of `file`; `None` when no room names it.
pub fn room_of(file: &str, rooms: Rooms<'_>) -> Option<usize> {
    let first = file.split('/').next().unwrap_or(file).trim_end_matches(".rs");
    rooms.iter().position(|r| r.contains(&first))
}

/// What breaks the rule among `sources` (path under `src/` → text): a file in no room,
/// imports that point up a room, and cycles of files.
pub fn violations(sources: &BTreeMap<String, String>, rooms: Rooms<'_>) -> Vec<String> {
    let files: BTreeSet<String> = sources.keys().cloned().collect();
    let root = ["lib.rs", "main.rs"].into_iter().find(|f| files.contains(*f)).unwrap_or("lib.rs");
    let exports = reexports(sources.get(root).map(String::as_str).unwrap_or_default());
    let mut found = Vec::new();
    for f in &files {
        if room_of(f, rooms).is_none() {
            found.push(format!("{f} is in no room: add it to the crate's rooms"));
        }
    }
    let mut edges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (file, text) in sources {
        let here = module_of(file);
        let mut all: Vec<(String, Vec<String>)> =
            paths(text, "crate::").into_iter().map(|p| (format!("crate::{}", p.join("::")), p)).collect();
        for p in paths(text, "super::") {
            // `super::` from `a/b.rs` is `a`; from `a/mod.rs` it is the root.
            let mut base = here.clone();
            base.pop();
            let mut full = base;
            let mut p = p;
            while p.first().is_some_and(|s| s == "super") {
                full.pop();
                p.remove(0);
            }
            full.extend(p.iter().cloned());
            all.push((format!("super::{}", p.join("::")), full));
        }
        for (shown, path) in all {
            let Some(to) = resolve(&path, &files, &exports) else { continue };
            if &to == file || to == root {
                continue;
            }
            if let (Some(a), Some(b)) = (room_of(file, rooms), room_of(&to, rooms))
                && b > a
            {
                found.push(format!("{file} imports {shown} from {to}, a room above it"));
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

/// The crate at `manifest_dir` keeps its rooms: panics naming every violation.
pub fn assert_layered(manifest_dir: &str, rooms: Rooms<'_>, skip: &[&str]) {
    let v = violations(&read_sources(&Path::new(manifest_dir).join("src"), skip), rooms);
    assert!(v.is_empty(), "the layering is broken:\n  {}", v.join("\n  "));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn house(files: &[(&str, &str)]) -> BTreeMap<String, String> {
        files.iter().map(|(f, t)| (f.to_string(), t.to_string())).collect()
    }

    const ROOMS: Rooms<'static> = &[&["low"], &["mid"], &["high", "lib"]];

    #[test]
    fn paths_are_read_from_groups_and_code_but_not_comments_or_tests() {
        let text = "use crate::a::{b, c::{d, e}};\n// crate::x::y\nfn f() { crate::g::h(); drcheck_config::k(); }\n\
                    #[cfg(test)]\nmod tests {\n    use crate::z::w;\n}\n";
        let got: Vec<String> = paths(text, "crate::").into_iter().map(|p| p.join("::")).collect();
        assert_eq!(got, ["a::b", "a::c::d", "a::c::e", "g::h"]);
        let after = format!("{text}fn later() {{ crate::after::x(); }}\n");
        let got: Vec<String> = paths(&after, "crate::").into_iter().map(|p| p.join("::")).collect();
        assert_eq!(got.last().map(String::as_str), Some("after::x"), "code after a test module counts");
    }

    #[test]
    fn an_upward_import_through_a_reexport_or_super_is_caught_and_sideways_is_not() {
        let lib =
            "mod low;\nmod mid;\nmod high;\npub use high::{Top, top_fn};\npub use mid::inner::Thing as Renamed;\n";
        let clean = house(&[
            ("lib.rs", lib),
            ("low.rs", "pub struct L;"),
            ("mid/mod.rs", "mod inner;\nuse crate::low::L;\nuse super::low;"),
            ("mid/inner.rs", "use super::other::O;\npub struct Thing;"),
            ("mid/other.rs", "pub struct O;"),
            ("high.rs", "use crate::mid::inner::Thing;\npub struct Top;"),
        ]);
        assert_eq!(violations(&clean, ROOMS), Vec::<String>::new());
        // Up through the root's re-export.
        let mut up = clean.clone();
        up.get_mut("low.rs").unwrap().push_str("\nuse crate::Top;\n");
        let v = violations(&up, ROOMS);
        assert!(v.iter().any(|m| m == "low.rs imports crate::Top from high.rs, a room above it"), "{v:?}");
        // Up through a renamed re-export.
        let mut up = clean.clone();
        up.get_mut("low.rs").unwrap().push_str("\nfn f() { crate::Renamed; }\n");
        let v = violations(&up, ROOMS);
        assert!(v.iter().any(|m| m.starts_with("low.rs imports crate::Renamed from mid/inner.rs")), "{v:?}");
        // Up through super:: from a file of a lower room's folder.
        let mut up = clean.clone();
        up.insert("low/deep.rs".into(), "use super::super::high::Top;".into());
        up.insert("low.rs".into(), "mod deep;".into());
        let v = violations(&up, ROOMS);
        assert!(v.iter().any(|m| m.starts_with("low/deep.rs imports super::high::Top from high.rs")), "{v:?}");
        // Sideways round a cycle.
        let mut cyc = clean.clone();
        cyc.get_mut("mid/other.rs").unwrap().push_str("\nuse super::inner::Thing;\n");
        let v = violations(&cyc, ROOMS);
        assert!(v.iter().any(|m| m.starts_with("import cycle:") && m.contains("mid/other.rs")), "{v:?}");
        // A file in no room.
        let mut stray = clean;
        stray.insert("stray.rs".into(), String::new());
        assert!(violations(&stray, ROOMS).iter().any(|m| m.starts_with("stray.rs is in no room")));
    }
}
