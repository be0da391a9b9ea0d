#!/usr/bin/env bash
# Daemon benchmark, three parts, one run:
#  1. idle cost: the daemon with 300 targets (BENCH_IDLE_TARGETS) on spread schedules
#     ("H 3 1 1 *") and no run due — RSS (target < 30 MiB) and CPU over 60 s
#     (BENCH_IDLE_SECONDS), and how long the status page / takes to render them all;
#  2. scheduling accuracy under load: 20 targets due every 5 s (their store is an empty
#     directory, so runs end at once) while two busy loops load both cores — the delay
#     from each due time to the run's start, from the daemon's own log;
#  3. a fleet due at once: 300 targets firing in the same second with
#     max_concurrent_restores = 2 — runs in flight (polled from /metrics) never exceed 2
#     and every target is run exactly once (from the history).
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

config() { # FILE PORT TARGETS SCHEDULE [DAEMON SETTINGS]
  {
    printf '[state]\nurl = "sqlite://%s/history-%s.db"\n[sandbox]\nscratch_dir = "%s"\n' "$work" "$2" "$work"
    printf '[daemon]\n%s\n' "${5:-}"
    printf '[metrics]\nlisten = "127.0.0.1:%s"\n[storage.dir]\nkind = "filesystem"\npath = "%s/store"\n' "$2" "$work"
    for i in $(seq "$3"); do
      printf '[[target]]\nname = "db%03d"\nstorage = "dir"\nprefix = "db%03d/"\nrto = "30m"\nrpo = "26h"\nschedule = "%s"\n' "$i" "$i" "$4"
    done
  } >"$1"
}

idle=${BENCH_IDLE_SECONDS:-60}
idle_targets=${BENCH_IDLE_TARGETS:-300}
port=$(free_port)
config "$work/idle.toml" "$port" "$idle_targets" "H 3 1 1 *"
"$drcheck" --config "$work/idle.toml" daemon 2>"$work/idle.log" &
pid=$!; pids+=($pid)
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
sleep 2
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
t0=$(ticks); sleep "$idle"; t1=$(ticks)
rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
hz=$(getconf CLK_TCK)
page_s=$(curl -s -o "$work/status.html" -w '%{time_total}' "http://127.0.0.1:$port/")
page_rows=$(grep -c 'class="target"' "$work/status.html" || true)
rss_after_page=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
kill -TERM "$pid"; wait "$pid" || true

port=$(free_port)
config "$work/load.toml" "$port" 20 "*/5 * * * * *"
for _ in 1 2; do python3 -c 'while True: pass' & pids+=($!); done
RUST_LOG=info "$drcheck" --config "$work/load.toml" daemon 2>"$work/load.log" &
pid=$!; pids+=($pid)
sleep "${BENCH_LOAD_SECONDS:-31}"
kill -TERM "$pid"; wait "$pid" || true

kill "${pids[@]}" 2>/dev/null || true
pids=()

# 3. Every target due in the same second (once, 8 s from now, UTC), at most 2 at once.
port=$(free_port)
config "$work/fleet.toml" "$port" 300 "$(date -u -d '+8 seconds' '+%-S %-M %-H') * * *" "max_concurrent_restores = 2"
"$drcheck" --config "$work/fleet.toml" daemon 2>"$work/fleet.log" &
pid=$!; pids+=($pid)
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
max_in_flight=0
end=$((SECONDS + ${BENCH_FLEET_SECONDS:-20}))
while [ $SECONDS -lt $end ]; do
  n=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^drcheck_runs_in_flight / {print int($2)}')
  [ -n "$n" ] && [ "$n" -gt "$max_in_flight" ] && max_in_flight=$n
  sleep 0.05
done
kill -TERM "$pid"; wait "$pid" || true
fleet_runs=$(python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute("select count(*), count(distinct target) from runs").fetchone())' "$work/history-$port.db")

python3 - "$work/load.log" "$t0" "$t1" "$hz" "$idle" "$rss" "$idle_targets" "$page_s" "$page_rows" "$rss_after_page" "$max_in_flight" "$fleet_runs" <<'PY'
import re, sys, datetime
log, t0, t1, hz, idle, rss = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
targets, page_s, page_rows, rss_page, in_flight = int(sys.argv[7]), float(sys.argv[8]), int(sys.argv[9]), int(sys.argv[10]), int(sys.argv[11])
runs, distinct = eval(sys.argv[12])
verdict = lambda ok: "met" if ok else "MISSED"
print(f"idle, {targets} targets: RSS {rss / 1024:.1f} MiB (target < 30 MiB) {verdict(rss / 1024 < 30)}, CPU {(t1 - t0) / hz:.2f} s over {idle:.0f} s ({100 * (t1 - t0) / hz / idle:.2f}% of one core)")
print(f"status page with {targets} targets: {page_rows} rows in {page_s * 1000:.0f} ms; RSS after it {rss_page / 1024:.1f} MiB")
print(f"fleet due at once, 300 targets, max_concurrent_restores = 2: at most {in_flight} in flight {verdict(0 < in_flight <= 2)}; {runs} runs recorded for {distinct} targets {verdict(runs == distinct == 300)}")
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
