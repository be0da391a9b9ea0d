# What every benchmark shares; sourced from the repository root after `set -euo pipefail`:
# the setup, the drcheck binary to measure ($drcheck: DRCHECK_BIN or a fresh release
# build), helpers, and a cleanup that stops every cluster in `clusters` and every
# process in `pids` on exit.
bash scripts/setup.sh
if [ -n "${DRCHECK_BIN:-}" ]; then drcheck=$DRCHECK_BIN; else cargo build -q --release --bin drcheck; drcheck=$PWD/target/release/drcheck; fi
pgbin=/usr/lib/postgresql/15/bin
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$2 - $1:.2f}')"; }
pids=()
clusters=()
bench_cleanup() {
  for c in "${clusters[@]}"; do as_pg "$pgbin/pg_ctl" -D "$c" -m immediate stop >/dev/null 2>&1 || true; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap bench_cleanup EXIT
