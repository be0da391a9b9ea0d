#!/usr/bin/env bash
# Runs every test: unit tests and the end-to-end tests against real PostgreSQL,
# moto's S3 server and the aws CLI. Installs what is missing first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The end-to-end tests run the built binary, so build it first.
cargo build --locked --bin drcheck
# The deployment files: kustomize renders, kubernetes-validate --strict, promtool rules,
# and a generated 300-target fleet.
DRCHECK_BIN=$PWD/target/debug/drcheck bash deploy/check.sh
# The parsers' property tests (a bounded fuzz run) spend this long each.
export DRCHECK_FUZZ_SECONDS=${DRCHECK_FUZZ_SECONDS:-30}
status=0
cargo nextest run --locked --workspace --no-fail-fast "$@" || status=$?
# The adversarial corpus a second time, with drcheck as an unprivileged user (as in the
# shipped container): the run above is as root.
bash tests/unprivileged.sh || status=$?
exit "$status"
