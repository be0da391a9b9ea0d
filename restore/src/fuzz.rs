//! Property tests (a bounded fuzz run) of every parser that reads backup bytes: format
//! detection, the pg_dump header, the first tar member, the plain-dump version, the
//! declared expanded size, `backup_label`, and the tar unpacker. Inputs are random bytes
//! and mutations of the real samples in `tests/corpus/`. Whatever the input, the parsers
//! return a value or an error: they never panic.
//!
//! `DRCHECK_FUZZ_SECONDS` bounds each property (default 3; `scripts/test.sh --long` sets 30).

use crate::sources::physical;
use crate::transfer::{format, unpack};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::time::{Duration, Instant};

fn corpus() -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// Random bytes, or a corpus sample with bytes flipped, cut short, or spliced.
fn inputs() -> impl Strategy<Value = Vec<u8>> {
    let seeds = corpus();
    let mutated = (0..seeds.len(), proptest::collection::vec((any::<u16>(), any::<u8>()), 0..16), any::<u16>())
        .prop_map(move |(i, flips, cut)| {
            let mut b = seeds[i].clone();
            for (at, v) in flips {
                if !b.is_empty() {
                    let n = b.len();
                    b[at as usize % n] = v;
                }
            }
            let keep = if b.is_empty() { 0 } else { (cut as usize) % (b.len() + 1) };
            b.truncate(keep.max(b.len() / 4));
            b
        });
    prop_oneof![proptest::collection::vec(any::<u8>(), 0..2048), mutated]
}

/// Runs `check` on generated inputs until the time budget is spent.
fn fuzz(name: &str, check: impl Fn(&[u8]) -> Result<(), TestCaseError>) {
    let secs: u64 = std::env::var("DRCHECK_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let strategy = inputs();
    let tried = std::cell::Cell::new(0u64);
    // A runner runs its 256 cases once: a fresh one (freshly seeded) per round.
    while Instant::now() < deadline {
        TestRunner::new(Config { cases: 256, failure_persistence: None, ..Config::default() })
            .run(&strategy, |b| {
                tried.set(tried.get() + 1);
                check(&b)
            })
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    eprintln!("{name}: {} inputs in {secs}s, no panic", tried.get());
}

#[test]
fn format_detection_and_headers_never_panic() {
    fuzz("format", |b| {
        let _ = format::detect(b);
        let _ = format::parse_dump_header(b);
        let _ = format::first_tar_member(b);
        let _ = format::plain_dump_server_major(b);
        let tail = &b[b.len().saturating_sub(4)..];
        let _ = format::declared_expanded_size(b, tail);
        Ok(())
    });
}

#[test]
fn backup_labels_never_panic() {
    fuzz("backup_label", |b| {
        let _ = physical::parse_start_segment(&String::from_utf8_lossy(b));
        Ok(())
    });
}

#[test]
fn the_unpacker_never_panics_nor_writes_outside() {
    let outer = tempfile::tempdir().unwrap();
    let n = std::sync::atomic::AtomicU64::new(0);
    fuzz("unpack", |b| {
        let i = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dest = outer.path().join(format!("d{i}"));
        let _ = unpack::unpack(b, &dest, &std::sync::atomic::AtomicBool::new(false));
        let _ = std::fs::remove_dir_all(&dest);
        // Nothing but the per-input directories ever appears next to them.
        let stray: Vec<_> = std::fs::read_dir(outer.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('d'))
            .collect();
        prop_assert!(stray.is_empty(), "written outside: {stray:?}");
        Ok(())
    });
}
