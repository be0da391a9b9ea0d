#!/usr/bin/env bash
# Runs every test: unit tests and the end-to-end tests against real PostgreSQL,
# moto's S3 server and the aws CLI. Installs what is missing first (scripts/setup.sh).
#
#   scripts/test.sh           everything, as CI runs it (.ci/run): fmt first, clippy in the build,
#                             property tests 3 s each, the adversarial identity tests again
#                             as an unprivileged user, then the ten slowest tests
#   scripts/test.sh --quick   the edit loop: unit tests and one end-to-end smoke test, no set-up,
#                             building only what they run (about 16 s warm)
#   scripts/test.sh --long    everything, property tests 30 s each
# Other arguments go to cargo nextest (a filter, --no-capture, …).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=full
case "${1:-}" in
  --quick) mode=quick; shift ;;
  --long) mode=long; shift ;;
esac
# The edit loop (--quick) trusts the machine's set-up and builds only what it runs.
[ "$mode" = quick ] || bash scripts/setup.sh
# Formatting and lints are part of the contract: a warning fails the run, first.
cargo fmt --all --check
# Clippy's lints (warnings denied) run inside the one build of everything — the binary,
# which the end-to-end tests run, and every test — with clippy-driver as the workspace's
# rustc wrapper, as `cargo clippy` runs it (CLIPPY_ARGS is how it hands clippy-driver its
# flags). The dependencies are then compiled once, not again in check mode for a separate
# `cargo clippy`: that was 4.5 of a fresh clone's 9.5 build minutes.
if [ -z "${RUSTC_WORKSPACE_WRAPPER:-}" ]; then
  RUSTC_WORKSPACE_WRAPPER=$(command -v clippy-driver) || {
    echo "test.sh: clippy-driver not found (scripts/setup.sh adds clippy with rustup)" >&2
    exit 2
  }
fi
export RUSTC_WORKSPACE_WRAPPER
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
if [ "$mode" = quick ]; then
  # The binary the smoke test drives; nextest builds the test targets it runs (the same
  # clippy-checked artifacts as the full run: switching modes rebuilds nothing).
  cargo build --locked --bin drcheck
else
  cargo build --locked --workspace --all-targets
fi
# One S3 server (moto) and one cache of pristine catalog fingerprints for the whole run:
# every test makes buckets of its own; drcheck fingerprints a pristine cluster once.
run_dir=$(mktemp -d /tmp/drcheck-test-run.XXXXXX)
moto_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
moto_server -H 127.0.0.1 -p "$moto_port" >"$run_dir/moto.log" 2>&1 &
moto_pid=$!
trap 'kill "$moto_pid" 2>/dev/null; wait "$moto_pid" 2>/dev/null; rm -rf "$run_dir"' EXIT
for _ in $(seq 600); do
  (echo >"/dev/tcp/127.0.0.1/$moto_port") 2>/dev/null && break
  sleep 0.1
done
mkdir -m 700 "$run_dir/cache"
export DRCHECK_TEST_S3_PORT=$moto_port DRCHECK_CACHE_DIR=$run_dir/cache
# The parsers' property tests (a bounded fuzz run) spend this long each.
export DRCHECK_FUZZ_SECONDS=${DRCHECK_FUZZ_SECONDS:-$([ "$mode" = long ] && echo 30 || echo 3)}
if [ "$mode" = quick ]; then
  cargo nextest run --locked --workspace --exclude drcheck-e2e "$@"
  cargo nextest run --locked -p drcheck-e2e --test verify -E 'test(=a_good_backup_passes_is_recorded_and_listed)'
  exit
fi
# The deployment files: kustomize renders, kubernetes-validate --strict, promtool rules,
# and a generated 300-target fleet.
DRCHECK_BIN=$PWD/target/debug/drcheck bash deploy/check.sh
status=0
cargo nextest run --locked --workspace --no-fail-fast "$@" || status=$?
# The slowest ten, from nextest's JUnit report (target/nextest/default/junit.xml).
python3 - target/nextest/default/junit.xml <<'PY' || true
import sys, xml.etree.ElementTree as ET
cases = [(float(c.get("time", 0)), f"{c.get('classname')} {c.get('name')}") for c in ET.parse(sys.argv[1]).iter("testcase")]
print("test.sh: the ten slowest tests", file=sys.stderr)
for t, name in sorted(cases, reverse=True)[:10]:
    print(f"  {t:7.1f}s  {name}", file=sys.stderr)
PY
# The adversarial tests that concern identity a second time, with drcheck as an
# unprivileged user (as in the shipped container): the run above is as root.
bash tests/unprivileged.sh || status=$?
exit "$status"
