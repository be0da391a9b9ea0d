//! A bounded fuzz run of the runbook checker: random text and mutations of the shipped
//! examples. Whatever the YAML, `parse` returns a runbook or its problems with lines; it
//! never panics. `DRCHECK_FUZZ_SECONDS` bounds it (default 3; `scripts/test.sh --long` sets 30).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::path::Path;
use std::time::{Duration, Instant};

fn examples() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

#[test]
fn parsing_any_text_never_panics() {
    let seeds = examples();
    assert!(!seeds.is_empty());
    let mutated = (0..seeds.len(), proptest::collection::vec((any::<u16>(), any::<char>()), 1..8), any::<u16>())
        .prop_map(move |(i, edits, cut)| {
            let mut chars: Vec<char> = seeds[i].chars().collect();
            for (at, c) in edits {
                let n = chars.len();
                chars[at as usize % n] = c;
            }
            let keep = (cut as usize % chars.len()).max(chars.len() / 2);
            chars.truncate(keep);
            chars.into_iter().collect::<String>()
        });
    let strategy = prop_oneof![any::<String>(), mutated];
    let secs: u64 = std::env::var("DRCHECK_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tried = 0u64;
    // A runner runs its 256 cases once: a fresh one (freshly seeded) per round.
    while Instant::now() < deadline {
        tried += 256;
        TestRunner::new(Config { cases: 256, failure_persistence: None, ..Config::default() })
            .run(&strategy, |t| {
                let _ = drcheck_runbooks::plan::parse(&t, Path::new("fuzz.yaml"), &[], None);
                Ok(())
            })
            .unwrap();
    }
    eprintln!("runbook: {tried} inputs in {secs}s, no panic");
}
