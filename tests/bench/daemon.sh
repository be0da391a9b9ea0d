#!/usr/bin/env bash
# Daemon benchmark, two parts, one run:
#  1. idle cost: the daemon with 100 targets configured and no run due — RSS and CPU
#     over 60 s (BENCH_IDLE_SECONDS);
#  2. scheduling accuracy under load: 20 targets due every 5 s (their store is an empty
#     directory, so runs end at once) while two busy loops load both cores — the delay
#     from each due time to the run's start, from the daemon's own log.
#
#   tests/bench/daemon.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -n "${DRCHECK_BIN:-}" ]; then drcheck=$DRCHECK_BIN; else cargo build -q --release --bin drcheck; drcheck=$PWD/target/release/drcheck; fi
work=$(mktemp -d /tmp/drcheck-bench-daemon.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mkdir -p "$work/store"

config() { # FILE PORT TARGETS SCHEDULE
  {
    printf '[state]\nurl = "sqlite://%s/history-%s.db"\n[sandbox]\nscratch_dir = "%s"\n' "$work" "$2" "$work"
    printf '[metrics]\nlisten = "127.0.0.1:%s"\n[storage.dir]\nkind = "filesystem"\npath = "%s/store"\n' "$2" "$work"
    for i in $(seq "$3"); do
      printf '[[target]]\nname = "db%03d"\nstorage = "dir"\nprefix = "db%03d/"\nrto = "30m"\nrpo = "26h"\nschedule = "%s"\n' "$i" "$i" "$4"
    done
  } >"$1"
}

idle=${BENCH_IDLE_SECONDS:-60}
port=$(free_port)
config "$work/idle.toml" "$port" 100 "0 0 3 1 1 *"
"$drcheck" --config "$work/idle.toml" daemon 2>"$work/idle.log" &
pid=$!; pids+=($pid)
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
sleep 2
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
t0=$(ticks); sleep "$idle"; t1=$(ticks)
rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
hz=$(getconf CLK_TCK)
kill -TERM "$pid"; wait "$pid" || true

port=$(free_port)
config "$work/load.toml" "$port" 20 "*/5 * * * * *"
for _ in 1 2; do python3 -c 'while True: pass' & pids+=($!); done
RUST_LOG=info "$drcheck" --config "$work/load.toml" daemon 2>"$work/load.log" &
pid=$!; pids+=($pid)
sleep "${BENCH_LOAD_SECONDS:-31}"
kill -TERM "$pid"; wait "$pid" || true

python3 - "$work/load.log" "$t0" "$t1" "$hz" "$idle" "$rss" <<'PY'
import re, sys, datetime
log, t0, t1, hz, idle, rss = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
print(f"idle, 100 targets: RSS {rss / 1024:.1f} MiB, CPU {(t1 - t0) / hz:.2f} s over {idle:.0f} s ({100 * (t1 - t0) / hz / idle:.2f}% of one core)")
delays = []
for line in open(log):
    if "verification started" not in line:
        continue
    m = re.match(r"\x1b?\[?[0-9;]*m?(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z", line)
    if not m:
        continue
    t = datetime.datetime.fromisoformat(m.group(1))
    due = t.replace(microsecond=0) - datetime.timedelta(seconds=t.second % 5)
    delays.append((t - due).total_seconds() * 1000)
delays.sort()
if delays:
    pick = lambda q: delays[min(len(delays) - 1, int(q * len(delays)))]
    print(f"scheduling under load (2 busy loops), {len(delays)} starts: due -> started p50 {pick(0.5):.1f} ms, p99 {pick(0.99):.1f} ms, max {delays[-1]:.1f} ms")
else:
    print("scheduling under load: no starts logged")
PY
