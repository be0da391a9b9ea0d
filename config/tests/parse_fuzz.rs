//! A bounded fuzz run of the config loader: random text and mutations of the README's
//! example. Whatever the text, `parse` returns a config or an error naming what is wrong;
//! it never panics. `DRCHECK_FUZZ_SECONDS` bounds it (default 3; `scripts/test.sh --long` sets 30).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::path::Path;
use std::time::{Duration, Instant};

const EXAMPLE: &str = r#"
[state]
url = "sqlite:///tmp/h.db"
keep_runs = 10
[sandbox]
scratch_dir = "/var/tmp/drcheck"
profile = "fast"
max_expansion = 50
[metrics]
listen = "127.0.0.1:9187"
[[alert]]
kind = "webhook"
url = "http://127.0.0.1:1/hook"
max_attempts = 3
[storage.backups]
kind = "s3"
bucket = "db-backups"
endpoint = "http://127.0.0.1:9000"
part_size = "8MiB"
concurrency = 4
[[target]]
name = "orders"
primary = "postgres://verifier:pw@db:5432/orders"
storage = "backups"
prefix = "orders/"
rto = "30m"
rpo = "26h"
schedule = "0 3 * * *"
row_count_tolerance = "0.1%"
[target.validators]
enabled = ["amcheck", "checksums"]
checksum_chunk_rows = 1000
[target.as_of]
"public.orders" = "created_at"
[[target.check]]
name = "c"
sql = "select 1"
expect = "1"
"#;

fn texts() -> impl Strategy<Value = String> {
    let mutated =
        (proptest::collection::vec((any::<u16>(), any::<char>()), 1..8), any::<u16>()).prop_map(|(edits, cut)| {
            let mut chars: Vec<char> = EXAMPLE.chars().collect();
            for (at, c) in edits {
                let n = chars.len();
                chars[at as usize % n] = c;
            }
            let keep = (cut as usize % chars.len()).max(chars.len() / 2);
            chars.truncate(keep);
            chars.into_iter().collect()
        });
    prop_oneof![any::<String>(), mutated]
}

#[test]
fn parsing_any_text_never_panics() {
    let secs: u64 = std::env::var("DRCHECK_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let deadline = Instant::now() + Duration::from_secs(secs);
    assert!(drcheck_config::parse(EXAMPLE, Path::new("fuzz.toml")).is_ok(), "the seed itself is valid");
    let mut tried = 0u64;
    // A runner runs its 256 cases once: a fresh one (freshly seeded) per round.
    while Instant::now() < deadline {
        tried += 256;
        TestRunner::new(Config { cases: 256, failure_persistence: None, ..Config::default() })
            .run(&texts(), |t| {
                let _ = drcheck_config::parse(&t, Path::new("fuzz.toml"));
                Ok(())
            })
            .unwrap();
    }
    eprintln!("config: {tried} inputs in {secs}s, no panic");
}
