#!/usr/bin/env bash
# Evidence at fleet scale: `drcheck report` over a synthetic history of 300 targets ×
# 1,000 runs (the default keep_runs), signed, in every format (HTML, Markdown, JUnit,
# JSON) — peak RSS (≤ 256 MiB each, writing and verifying) and time, against the plain way
# of getting the same rows out (sqlite3 exporting the reports); then `report verify` of
# a quarter of that and of all of it: 4× the runs must take ≤ 5× the time; and one target
# of 25,454 runs (a window's worth at keep_runs = 30000: the report holds one target's
# runs at a time, so this is its worst case) in every format, writing and verifying,
# ≤ 256 MiB.
#
#   tests/bench/report.sh
#
# BENCH_TARGETS (default 300) and BENCH_RUNS (default 1000) size the history;
# BENCH_DIR (default /var/tmp/drcheck-bench-report) keeps it between runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh

work=${BENCH_DIR:-/var/tmp/drcheck-bench-report}
targets=${BENCH_TARGETS:-300}
runs=${BENCH_RUNS:-1000}
mkdir -p "$work"
key=$work/key.pem
pub=$work/pub.pem
[ -s "$key" ] || openssl genpkey -algorithm ed25519 -out "$key" 2>/dev/null
openssl pkey -in "$key" -pubout -out "$pub" 2>/dev/null

make_history() { # DB TARGETS [RUNS]
  local db=$1 n=$2 runs=${3:-$runs}
  [ -s "$db" ] && return
  local cfg=$work/make.toml
  printf '[state]\nurl = "sqlite://%s"\n[storage.b]\nkind = "filesystem"\npath = "/nonexistent"\n' "$db" >"$cfg"
  # drcheck creates the store with its migrations; the rows are written directly.
  "$drcheck" --config "$cfg" history >/dev/null
  python3 - "$db" "$n" "$runs" <<'PY'
import json, sqlite3, sys, uuid, datetime
db, targets, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
con = sqlite3.connect(db)
start = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
validators = ["catalog", "amcheck", "full_read", "sequences", "indexes", "schema", "row_counts", "checksums", "freshness", "custom"]
rows = []
for t in range(targets):
    name = f"db-{t:03d}"
    for i in range(runs):
        at = start + datetime.timedelta(hours=8 * i, minutes=t % 60)
        ts = at.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        end = (at + datetime.timedelta(seconds=95)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        result = "passed" if i % 17 else "failed"
        rid = str(uuid.UUID(int=t * 1_000_000 + i))
        report = {
            "run_id": rid, "target": name, "result": result, "started_at": ts, "finished_at": end,
            "backup": {"key": f"{name}/{ts}.dump", "size_bytes": 123456789, "created_at": ts, "format": "custom"},
            "phases": [{"name": "fetch", "seconds": 12.5}, {"name": "restore", "seconds": 40.1}, {"name": "validate", "seconds": 30.2}],
            "rto": {"target_seconds": 1800.0, "measured_seconds": 52.6, "met": True},
            "rpo": {"target_seconds": 93600.0, "backup_age_seconds": 3600.0, "met": True},
            "validators": [{"name": v, "status": "passed" if result == "passed" or v != "checksums" else "failed",
                            "detail": f"{v}: 42 tables, 1234567 rows checked", "measurements": {"covered_tables": 42.0, "seconds": 1.5}}
                           for v in validators],
            "restore": {"profile": "production", "jobs": 1, "server_major": 15, "recovered_to": None, "containment": "landlock-abi7+uid+seccomp+ns"},
        }
        rows.append((rid, name, result, ts, end, report["backup"]["key"], 123456789, ts, "custom", 1800.0, 52.6, 1, 93600.0, 3600.0, 1, None, None, json.dumps(report)))
    if len(rows) >= 20000:
        con.executemany("insert into runs values (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        rows.clear()
con.executemany("insert into runs values (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
con.commit()
PY
}

measure() { # LABEL COMMAND…: prints "SECONDS MAX_RSS_KIB"
  /usr/bin/time -f '%e %M' -o "$work/time.out" "$@" >/dev/null
  cat "$work/time.out"
}

quarter=$((targets / 4))
big=$work/history-$targets-$runs.db
small=$work/history-$quarter-$runs.db
echo "bench: synthetic histories ($targets and $quarter targets × $runs runs)…"
make_history "$big" "$targets"
make_history "$small" "$quarter"

report_for() { # DB OUT [FORMAT [TO]]
  local cfg=$work/report.toml
  printf '[state]\nurl = "sqlite://%s"\n[evidence]\nsigning_key = "%s"\n[storage.b]\nkind = "filesystem"\npath = "/nonexistent"\n' "$1" "$key" >"$cfg"
  local names=()
  for t in $(sqlite3 "$1" "select distinct target from runs"); do names+=(--target "$t"); done
  measure "$drcheck" --config "$cfg" report --from 2025-12-01 --to "${4:-2027-01-01}" "${names[@]}" --format "${3:-html}" --output "$2"
}

read -r hand_secs _ < <(measure sqlite3 "$big" "select report_json from runs where started_at >= '2025-12-01' order by target, started_at")
worst=0
for format in html markdown junit json; do
  out=$work/big.$format
  read -r secs rss < <(report_for "$big" "$out" "$format")
  read -r v_secs v_rss < <(measure "$drcheck" report verify "$out" --public-key "$pub")
  size=$(stat -c %s "$out")
  rss_mib=$((rss / 1024)); v_mib=$((v_rss / 1024))
  [ "$rss_mib" -gt "$worst" ] && worst=$rss_mib
  [ "$v_mib" -gt "$worst" ] && worst=$v_mib
  echo "report $format: $((targets * runs)) runs, ${size} bytes in ${secs}s, peak ${rss_mib} MiB (sqlite3 export of the same rows ${hand_secs}s: ratio $(python3 -c "print(f'{$secs / max($hand_secs, 0.01):.2f}')")); verify ${v_secs}s, peak ${v_mib} MiB"
done
verdict=$([ "$worst" -le 256 ] && echo met || echo MISSED)
echo "report: peak RSS over every format, writing and verifying, ${worst} MiB (target ≤ 256 MiB) $verdict"

read -r _ _ < <(report_for "$small" "$work/small.html")
read -r v_small v_small_rss < <(measure "$drcheck" report verify "$work/small.html" --public-key "$pub")
read -r v_big v_big_rss < <(measure "$drcheck" report verify "$work/big.html" --public-key "$pub")
ratio=$(python3 -c "print(f'{$v_big / max($v_small, 0.01):.2f}')")
verdict=$(python3 -c "print('met' if $v_big <= 5 * max($v_small, 0.01) else 'MISSED')")
echo "report verify: $((quarter * runs)) runs ${v_small}s ($((v_small_rss / 1024)) MiB), $((targets * runs)) runs ${v_big}s ($((v_big_rss / 1024)) MiB): 4× the runs in ${ratio}× the time (target ≤ 5) $verdict"

# One target of 25,454 runs: what one target's section costs.
one=$work/history-1-25454.db
make_history "$one" 1 25454
worst=0
for format in html markdown junit json; do
  out=$work/one.$format
  read -r secs rss < <(report_for "$one" "$out" "$format" 2050-01-01)
  read -r v_secs v_rss < <(measure "$drcheck" report verify "$out" --public-key "$pub")
  rss_mib=$((rss / 1024)); v_mib=$((v_rss / 1024))
  [ "$rss_mib" -gt "$worst" ] && worst=$rss_mib
  [ "$v_mib" -gt "$worst" ] && worst=$v_mib
  echo "report $format of one target's 25454 runs: ${secs}s, peak ${rss_mib} MiB; verify ${v_secs}s, peak ${v_mib} MiB"
done
verdict=$([ "$worst" -le 256 ] && echo met || echo MISSED)
echo "report: one target's 25454 runs, peak RSS over every format, writing and verifying, ${worst} MiB (target ≤ 256 MiB) $verdict"
