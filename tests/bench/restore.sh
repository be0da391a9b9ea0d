#!/usr/bin/env bash
# Restore benchmark: drcheck against the plain hand-written way, in one run, on one
# custom-format dump of at least 1 GB (pgbench tables plus random bytea and text, which
# do not compress away), and on pg_basebackup backups of 0.25, 0.5 and 1 GB (plain and
# gzip; tests/bench/physical.sh). Prints the measurements and the ratios.
#
#   tests/bench/restore.sh
#
# BENCH_PARTS (default "custom physical") picks the parts. BENCH_ROUNDS (default 3)
# is how many interleaved rounds the Garage fetch+restores and the physical restores
# take, BENCH_DL_ROUNDS (default 5) the Garage downloads (medians are compared); moto's
# downloads, at ~10 MB/s, are measured once.
# BENCH_NO_MOTO=1 measures the custom dump on Garage only (not with DRCHECK_BASELINE_BIN).
# DRCHECK_BIN runs that binary instead of building target/release/drcheck.
# BENCH_DIR (default /var/tmp/drcheck-bench) keeps the generated dump between runs;
# BENCH_FRESH=1 regenerates it. BENCH_JOBS (default 2) is pg_restore -j for both sides.
# BENCH_BLOB_ROWS (default 900000, ~1 KiB each) sizes the data.
# DRCHECK_BASELINE_BIN: another drcheck (e.g. one built before the restore containment)
# run on the same dump in the same run; the ratio line says what the difference costs.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
. tests/bench/lib.sh

work=${BENCH_DIR:-/var/tmp/drcheck-bench}
jobs=${BENCH_JOBS:-2}
rows=${BENCH_BLOB_ROWS:-900000}

mkdir -p "$work"
chmod 755 "$work"
[ "$(id -u)" = 0 ] && chown postgres: "$work"
start_cluster() { # DIR PORT [extra -c options]
  local dir=$1 port=$2; shift 2
  rm -rf "$dir"
  as_pg "$pgbin/initdb" -D "$dir" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null
  as_pg "$pgbin/pg_ctl" -D "$dir" -l "$dir.log" -w -o "-c listen_addresses= -p $port -k $work $*" start >/dev/null
  clusters+=("$dir")
}

parts=" ${BENCH_PARTS:-custom physical} "
rounds=${BENCH_ROUNDS:-3}
dl_rounds=${BENCH_DL_ROUNDS:-5}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
has() { [[ "$parts" == *" $1 "* ]]; }
dump=$work/bench.dump
if has custom && { [ -n "${BENCH_FRESH:-}" ] || [ ! -s "$dump" ]; }; then
  echo "bench: generating the dataset (pgbench scale 20 + $rows random 1 KiB bytea rows + text)…"
  port=$(free_port)
  start_cluster "$work/primary" "$port" "-c fsync=off -c max_wal_size=8GB"
  psql_p() { psql -X -q -h "$work" -p "$port" -U postgres -v ON_ERROR_STOP=1 "$@"; }
  psql_p -d postgres -c "create database bench"
  pgbench -q -i -s 20 -h "$work" -p "$port" -U postgres bench 2>/dev/null
  psql_p -d bench -c "create extension pgcrypto" \
    -c "create table blobs (id int primary key, b bytea not null)" \
    -c "insert into blobs select g, gen_random_bytes(1024) from generate_series(1, $rows) g" \
    -c "create table notes (id int primary key, t text not null)" \
    -c "insert into notes select g, md5(random()::text) || md5(random()::text) || md5(random()::text) from generate_series(1, 500000) g"
  pg_dump -Fc -h "$work" -p "$port" -U postgres -f "$dump.tmp" bench
  mv "$dump.tmp" "$dump"
  as_pg "$pgbin/pg_ctl" -D "$work/primary" -m fast stop >/dev/null
fi
size=0
if has custom; then
  size=$(stat -c %s "$dump")
  echo "bench: dump is $size bytes"
  [ "$size" -ge 1000000000 ] || echo "bench: WARNING: the dump is under 1 GB"
fi

start_moto "$work/moto.log" bench
mkdir -p "$work/scratch"; chmod 1777 "$work/scratch"
. tests/bench/physical.sh
if ! has custom; then
  if [ -z "${BENCH_NO_GARAGE:-}" ]; then
    . tests/bench/garage.sh
    garage_start "$work/garage"
    pids+=("$GARAGE_PID")
    gs3() { AWS_ACCESS_KEY_ID=$GARAGE_KEY AWS_SECRET_ACCESS_KEY=$GARAGE_SECRET aws --endpoint-url "http://127.0.0.1:$GARAGE_PORT" s3 "$@"; }
    AWS_ACCESS_KEY_ID=$GARAGE_KEY AWS_SECRET_ACCESS_KEY=$GARAGE_SECRET physical_bench gs3 "$GARAGE_PORT" garage
  else
    physical_bench s3 "$s3_port" moto
  fi
  exit 0
fi
[ -n "${BENCH_NO_MOTO:-}" ] || s3 cp --only-show-errors "$dump" s3://bench/bench/bench.dump

config() { # PROFILE JOBS [S3 PORT] [HISTORY NAME]
  local port=${3:-$s3_port} history=${4:-history}
  cat >"$work/drcheck-$1-$2-$port-$history.toml" <<TOML
[state]
url = "sqlite://$work/$history.db"
[sandbox]
scratch_dir = "$work/scratch"
profile = "$1"
[storage.s3]
kind = "s3"
bucket = "bench"
endpoint = "http://127.0.0.1:$port"
path_style = true
[[target]]
name = "bench"
storage = "s3"
prefix = "bench/"
rto = "2h"
rpo = "26h"
restore_jobs = $2
TOML
  echo "$work/drcheck-$1-$2-$port-$history.toml"
}

plain_restore() { # S3 FUNCTION → plain_s: seconds of download, initdb + start, pg_restore -j
  local port t0 t1
  rm -f "$work/plain.dump"
  port=$(free_port)
  t0=$(now)
  "$1" cp --only-show-errors s3://bench/bench/bench.dump "$work/plain.dump"
  start_cluster "$work/plain" "$port"
  psql -X -q -h "$work" -p "$port" -U postgres -d postgres -c "create database restored"
  pg_restore -j "$jobs" --no-owner --no-privileges --exit-on-error -h "$work" -p "$port" -U postgres -d restored "$work/plain.dump"
  t1=$(now)
  as_pg "$pgbin/pg_ctl" -D "$work/plain" -m fast stop >/dev/null
  rm -rf "$work/plain" "$work/plain.dump"
  plain_s=$(elapsed "$t0" "$t1")
}

run_drcheck() { # PROFILE JOBS [BINARY] [S3 PORT] → prints "rto peak_rss_kib first_byte_s"
  local out=$work/run.json rss=$work/rss.json bin=${3:-$drcheck} history=history
  # Another binary keeps its own history (its migrations may differ).
  [ "$bin" = "$drcheck" ] || history=history-baseline
  python3 tests/bench/peak_rss.py "$rss" "$bin" --config "$(config "$1" "$2" "${4:-}" "$history")" verify --json >"$out" || true
  python3 - "$out" "$rss" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
rss = json.load(open(sys.argv[2]))
assert run["result"] == "passed", run
print(run["rto"]["measured_seconds"], rss["peak_rss_kib"], run["restore"].get("first_byte_seconds", 0))
PY
}
dl_rss() { # S3 PORT → peak RSS (KiB) of drcheck backups fetch
  python3 tests/bench/peak_rss.py "$work/dl-rss.json" "$drcheck" --config "$(config production "$jobs" "$1")" \
    backups fetch --target bench --output "$work/drcheck.dump" >/dev/null
  rm -f "$work/drcheck.dump"
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak_rss_kib"])' "$work/dl-rss.json"
}
# On moto (the CI server). BENCH_NO_MOTO=1 skips it (a 1 GB object from moto takes
# minutes); then only Garage's lines are printed.
aws_dl=0 dr_dl=0 plain=0 dr_prod=0 dr_prod_rss=0 dr_prod_ttfb=0 dr_stream=0 dr_stream_rss=0 dr_stream_ttfb=0 dr_fast=0 dr_fast_rss=0 dr_dl_rss=0
if [ -z "${BENCH_NO_MOTO:-}" ]; then
  echo "bench: plain download (aws s3 cp)…"
  rm -f "$work/plain.dump"
  t0=$(now); s3 cp --only-show-errors s3://bench/bench/bench.dump "$work/plain.dump"; t1=$(now)
  aws_dl=$(elapsed "$t0" "$t1")
  echo "bench: drcheck download (backups fetch)…"
  rm -f "$work/drcheck.dump"
  t0=$(now); "$drcheck" --config "$(config production "$jobs")" backups fetch --target bench --output "$work/drcheck.dump" >/dev/null; t1=$(now)
  dr_dl=$(elapsed "$t0" "$t1")
  cmp -s "$work/plain.dump" "$work/drcheck.dump" || { echo "bench: the two downloads differ" >&2; exit 1; }
  rm -f "$work/drcheck.dump"

  echo "bench: plain restore (aws s3 cp, then initdb + pg_restore -j $jobs)…"
  plain_restore s3
  plain=$plain_s
  echo "bench: drcheck verify, production profile, restore_jobs=$jobs…"
  read -r dr_prod dr_prod_rss dr_prod_ttfb < <(run_drcheck production "$jobs")
  echo "bench: drcheck verify, production profile, streamed (restore_jobs=1)…"
  read -r dr_stream dr_stream_rss dr_stream_ttfb < <(run_drcheck production 1)
  echo "bench: drcheck verify, fast profile, restore_jobs=$jobs…"
  read -r dr_fast dr_fast_rss _ < <(run_drcheck fast "$jobs")
  dr_dl_rss=$(dl_rss "$s3_port")
fi

# The same on Garage, a production S3 server (ranged GETs cost what they read; moto
# reads the whole object for each). Not in CI: installed here with cargo.
garage_dl=0 garage_aws=0 garage_plain=0 garage_prod=0 garage_prod_rss=0 garage_dl_rss=0 garage_ttfb=0
if [ -z "${BENCH_NO_GARAGE:-}" ]; then
  . tests/bench/garage.sh
  garage_start "$work/garage"
  pids+=("$GARAGE_PID")
  gs3() { AWS_ACCESS_KEY_ID=$GARAGE_KEY AWS_SECRET_ACCESS_KEY=$GARAGE_SECRET aws --endpoint-url "http://127.0.0.1:$GARAGE_PORT" s3 "$@"; }
  gs3 cp --only-show-errors "$dump" s3://bench/bench/bench.dump
  gfetch() { # OUTPUT
    AWS_ACCESS_KEY_ID=$GARAGE_KEY AWS_SECRET_ACCESS_KEY=$GARAGE_SECRET \
      "$drcheck" --config "$(config production "$jobs" "$GARAGE_PORT")" backups fetch --target bench --output "$1" >/dev/null
  }
  gfetch "$work/drcheck.dump"
  cmp -s "$dump" "$work/drcheck.dump" || { echo "bench: drcheck's garage download differs from the dump" >&2; exit 1; }
  rm -f "$work/drcheck.dump"
  # Download speed alone (to /dev/null: the disk is not what is measured), rounds
  # interleaved, medians compared.
  aws_rounds=() dr_rounds=()
  for i in $(seq "$dl_rounds"); do
    t0=$(now); gs3 cp --only-show-errors s3://bench/bench/bench.dump - >/dev/null; t1=$(now)
    aws_rounds+=("$(elapsed "$t0" "$t1")")
    t0=$(now); gfetch /dev/null; t1=$(now)
    dr_rounds+=("$(elapsed "$t0" "$t1")")
    echo "bench: garage: download round $i: aws s3 cp ${aws_rounds[-1]} s, drcheck ${dr_rounds[-1]} s"
  done
  garage_aws=$(median "${aws_rounds[@]}")
  garage_dl=$(median "${dr_rounds[@]}")
  garage_dl_rss=$(AWS_ACCESS_KEY_ID=$GARAGE_KEY AWS_SECRET_ACCESS_KEY=$GARAGE_SECRET dl_rss "$GARAGE_PORT")
  # Fetch + restore: pg_restore is most of it and varies by a tenth between runs, so
  # rounds interleaved here too, medians compared (RSS: the largest).
  plain_rounds=() prod_rounds=() ttfb_rounds=()
  for i in $(seq "$rounds"); do
    echo "bench: garage: round $i: plain restore (aws s3 cp, then initdb + pg_restore -j $jobs)…"
    plain_restore gs3
    plain_rounds+=("$plain_s")
    echo "bench: garage: round $i: drcheck verify, production profile, restore_jobs=$jobs…"
    read -r prod rss ttfb < <(AWS_ACCESS_KEY_ID=$GARAGE_KEY AWS_SECRET_ACCESS_KEY=$GARAGE_SECRET \
      run_drcheck production "$jobs" "" "$GARAGE_PORT")
    prod_rounds+=("$prod") ttfb_rounds+=("$ttfb")
    garage_prod_rss=$(( rss > garage_prod_rss ? rss : garage_prod_rss ))
    echo "bench: garage: fetch+restore round $i: plain $plain_s s, drcheck $prod s"
  done
  garage_plain=$(median "${plain_rounds[@]}")
  garage_prod=$(median "${prod_rounds[@]}")
  garage_ttfb=$(median "${ttfb_rounds[@]}")
fi

base_prod=0
if [ -n "${DRCHECK_BASELINE_BIN:-}" ]; then
  echo "bench: baseline drcheck ($DRCHECK_BASELINE_BIN) verify, production profile, restore_jobs=$jobs…"
  read -r base_prod _ < <(run_drcheck production "$jobs" "$DRCHECK_BASELINE_BIN")
  echo "bench: drcheck verify again, production profile, restore_jobs=$jobs (interleaved with the baseline)…"
  read -r dr_prod2 _ < <(run_drcheck production "$jobs")
  echo "bench: baseline again…"
  read -r base_prod2 _ < <(run_drcheck production "$jobs" "$DRCHECK_BASELINE_BIN")
fi

python3 - <<PY
size = $size
rows = [
    ("download: aws s3 cp", $aws_dl),
    ("download: drcheck backups fetch", $dr_dl),
    ("fetch+restore: aws s3 cp + initdb + pg_restore -j $jobs", $plain),
    ("fetch+restore: drcheck verify (production, jobs $jobs)", $dr_prod),
    ("fetch+restore: drcheck verify (production, streamed)", $dr_stream),
    ("fetch+restore: drcheck verify (fast, jobs $jobs)", $dr_fast),
]
print()
print(f"dump: {size / 1e9:.2f} GB custom format")
verdict = lambda ok: "met" if ok else "MISSED"
if $plain > 0:
  for name, s in rows:
    print(f"  {name:<58} {s:8.2f} s")
  print(f"  peak RSS of drcheck: {$dr_prod_rss / 1024:.1f} MiB (jobs $jobs), {$dr_stream_rss / 1024:.1f} MiB (streamed), {$dr_fast_rss / 1024:.1f} MiB (fast), {$dr_dl_rss / 1024:.1f} MiB (download)")
  print(f"  time to first byte into pg_restore: {$dr_stream_ttfb:.3f} s (streamed), {$dr_prod_ttfb:.3f} s (staged)")
  print()
  print("moto (the CI server):")
  print(f"ratio drcheck/plain fetch+restore (same -j $jobs):   {$dr_prod / $plain:.3f}   (target <= 0.95) {verdict($dr_prod / $plain <= 0.95)}")
  print(f"ratio drcheck/plain fetch+restore (streamed):        {$dr_stream / $plain:.3f}")
  print(f"ratio download speed drcheck/aws:                    {$aws_dl / $dr_dl:.3f}   (target >= 1.0) {verdict($aws_dl / $dr_dl >= 1.0)}")
  print(f"ratio fast/production restore time:                  {$dr_fast / $dr_prod:.3f}")
peak = max($dr_prod_rss, $dr_stream_rss, $dr_fast_rss, $dr_dl_rss, $garage_prod_rss, $garage_dl_rss) / 1024
print(f"peak RSS (max of every run, both servers):           {peak:.1f} MiB (target <= 64 MiB) {verdict(peak <= 64)}")
if $garage_dl > 0:
    print()
    print("garage (a production S3 server):")
    print(f"  download: aws s3 cp {$garage_aws:.2f} s ({size / $garage_aws / 1e6:.0f} MB/s), drcheck {$garage_dl:.2f} s ({size / $garage_dl / 1e6:.0f} MB/s), peak RSS {$garage_dl_rss / 1024:.1f} MiB")
    print(f"  fetch+restore: plain {$garage_plain:.2f} s, drcheck {$garage_prod:.2f} s, peak RSS {$garage_prod_rss / 1024:.1f} MiB, first byte {$garage_ttfb:.3f} s")
    print(f"ratio download speed drcheck/aws (garage):           {$garage_aws / $garage_dl:.3f}   (target >= 1.3) {verdict($garage_aws / $garage_dl >= 1.3)}")
    print(f"ratio drcheck/plain fetch+restore (garage, -j $jobs): {$garage_prod / $garage_plain:.3f}   (target <= 0.95) {verdict($garage_prod / $garage_plain <= 0.95)}")
    print(f"  (download: medians of $dl_rounds interleaved rounds, to /dev/null; fetch+restore: medians of $rounds)")
if $base_prod > 0:
    mine = ($dr_prod + ${dr_prod2:-0}) / 2
    base = ($base_prod + ${base_prod2:-0}) / 2
    r = mine / base
    print(f"ratio drcheck/baseline fetch+restore (mean of 2 each): {r:.3f}   (target <= 1.05) {'met' if r <= 1.05 else 'MISSED'}")
PY

if has physical; then
  if [ -n "${GARAGE_PID:-}" ]; then
    AWS_ACCESS_KEY_ID=$GARAGE_KEY AWS_SECRET_ACCESS_KEY=$GARAGE_SECRET physical_bench gs3 "$GARAGE_PORT" garage
  else
    physical_bench s3 "$s3_port" moto
  fi
fi
