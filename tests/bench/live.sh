#!/usr/bin/env bash
# The live-primary soak at length: tests/tests/live.rs — a primary under continuous
# pgbench, 0–5 s application transactions, large objects created and unlinked, a
# migration, the heartbeat and the DDL log; base backups with archived WAL and dumps taken
# while it runs — with its verifications repeated LIVE_ROUNDS times (default 5: 50
# verifications — latest, random:7d, fixed points, least-proven, with and without
# track_commit_timestamp — besides the planted defects). CI runs one round (10).
#
#   tests/bench/live.sh
#
# A soak, not a speed comparison: it prints how many verifications passed, failed and
# errored (the target: 50 passed, 0 failed, 0 error, every planted defect caught), the
# time each kind of verification took (min / median / max), and every distinct
# inconclusive finding with why. DRCHECK_BIN runs that binary instead of a release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
rounds=${LIVE_ROUNDS:-5}
log=$(mktemp)
echo "live: $rounds rounds ($((rounds * 10)) verifications) against $drcheck…"
status=0
DRCHECK_BIN=$drcheck DRCHECK_LIVE_ROUNDS=$rounds cargo nextest run --locked -p drcheck-e2e --test live \
  --no-capture >"$log" 2>&1 || status=$?
python3 - "$log" "$rounds" <<'PY'
import re, statistics, sys
lines = open(sys.argv[1]).read().splitlines()
rounds = int(sys.argv[2])
passed = [l for l in lines if re.match(r"live: round \d+: .*: passed", l)]
caught = [l for l in lines if ": failed, naming" in l]
took = {}
for l in lines:
    m = re.match(r"live: verify (\w+) took ([\d.]+)s", l)
    if m:
        took.setdefault(m.group(1), []).append(float(m.group(2)))
print(f"live: {len(passed)} of {rounds * 10} verifications passed (target {rounds * 10}); planted defects caught: {len(caught)} (target 5)")
for target, t in sorted(took.items()):
    print(f"live: verify {target}: {len(t)} runs, {min(t):.1f} / {statistics.median(t):.1f} / {max(t):.1f} s (min / median / max)")
start = next((i for i, l in enumerate(lines) if l.startswith("live: inconclusive over every run:")), None)
if start is not None:
    print("live: inconclusive findings seen (distinct):")
    for l in lines[start + 1:]:
        if not l.startswith("  "):
            break
        print("  " + l.strip()[:300])
PY
if [ "$status" != 0 ]; then
  echo "live: the soak FAILED — see $log" >&2
  grep -E "panicked|assert" "$log" | head -20 >&2
  exit "$status"
fi
rm -f "$log"
