#!/usr/bin/env bash
# Drill-runner benchmark, one run: what drcheck adds around the work of a runbook.
#  1. per-step overhead: a runbook of N trivial shell steps (BENCH_STEPS, default 200)
#     vs the same N commands run one after another by a plain shell script, each via
#     `sh -c` as drcheck runs them;
#  2. output handling: one step printing 200,000 lines vs the same command with its
#     output sent to /dev/null.
# The drill also times, journals and renders its report; both are part of its time.
#
#   tests/bench/drill.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -n "${DRCHECK_BIN:-}" ]; then drcheck=$DRCHECK_BIN; else cargo build -q --release --bin drcheck; drcheck=$PWD/target/release/drcheck; fi
work=$(mktemp -d /tmp/drcheck-bench-drill.XXXXXX)
trap 'rm -rf "$work"' EXIT
steps=${BENCH_STEPS:-200}
now() { date +%s.%N; }

{
  printf 'title: %s trivial steps\nsteps:\n' "$steps"
  for i in $(seq "$steps"); do printf '  - name: step %s\n    shell: {command: "echo %s > %s/out"}\n' "$i" "$i" "$work"; done
} >"$work/many.yaml"
{
  printf 'set -e\n'
  for i in $(seq "$steps"); do printf "sh -c 'echo %s > %s/out'\n" "$i" "$work"; done
} >"$work/many.sh"
printf 'title: chatty\nsteps:\n  - name: print a lot\n    shell: {command: "seq 200000"}\n' >"$work/chatty.yaml"

t0=$(now); sh "$work/many.sh"; t1=$(now)
"$drcheck" drill run "$work/many.yaml" --report "$work/many.html" >/dev/null 2>"$work/many.log"; t2=$(now)
sh -c 'seq 200000 >/dev/null'; t3=$(now)
"$drcheck" drill run "$work/chatty.yaml" --report "$work/chatty.html" >/dev/null 2>/dev/null; t4=$(now)

python3 - "$steps" "$t0" "$t1" "$t2" "$t3" "$t4" "$work" <<'PY'
import json, sys
steps = int(sys.argv[1]); t0, t1, t2, t3, t4 = map(float, sys.argv[2:7]); work = sys.argv[7]
plain, drill = t1 - t0, t2 - t1
j = json.load(open(f"{work}/many.json"))
assert j["result"] == "completed" and len(j["steps"]) == steps, j["result"]
print(f"{steps} trivial steps: plain sh {plain:.2f} s ({1000*plain/steps:.1f} ms/step), "
      f"drcheck drill {drill:.2f} s ({1000*drill/steps:.1f} ms/step)")
print(f"ratio drill/plain: {drill/plain:.2f}   overhead per step: {1000*(drill-plain)/steps:.1f} ms")
quiet, chatty = t3 - t2, t4 - t3
print(f"200,000 lines of output: plain to /dev/null {quiet:.2f} s, drcheck drill (streamed live, "
      f"last 4 KiB journaled) {chatty:.2f} s, ratio {chatty/quiet:.1f}")
PY
echo "report: $(du -h "$work/many.html" | cut -f1) for $steps steps"
