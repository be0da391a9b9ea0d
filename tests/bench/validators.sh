#!/usr/bin/env bash
# Validator benchmark: every validator on a database of at least 2 GB on disk (pgbench
# tables plus random text, bytea and jsonb), restored from a dump by drcheck and
# compared with the live primary. Prints the time per validator, the number of queries
# sent to the primary and the longest one, and the ratio of `checksums` time to a plain
# `SELECT count(*)` of every table on the same data (the primary), and the cost of
# mixing each row's hash (the record hash alone vs drcheck's, the same sums).
#
#   tests/bench/validators.sh
#
# DRCHECK_BIN runs that binary instead of building target/release/drcheck.
# BENCH_DIR (default /var/tmp/drcheck-bench-validators) keeps the primary's data and
# dump between runs; BENCH_FRESH=1 regenerates them. BENCH_SCALE (default 100) is the
# pgbench scale. DRCHECK_BASELINE_BIN: another drcheck (e.g. the build before a change)
# run on the same data in the same run: the validate phase of both and their ratio.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
. tests/bench/lib.sh
work=${BENCH_DIR:-/var/tmp/drcheck-bench-validators}
scale=${BENCH_SCALE:-100}
# The primary and the hand-restored copy stop with the benchmark, whatever happens.
clusters+=("$work/primary" "$work/copy")

mkdir -p "$work"; chmod 755 "$work"
[ "$(id -u)" = 0 ] && chown postgres: "$work"
port=$(free_port)
password=$(python3 -c 'import secrets; print(secrets.token_hex(12))')
if [ -n "${BENCH_FRESH:-}" ] || [ ! -s "$work/bench.dump" ]; then
  rm -rf "$work/primary"
  as_pg "$pgbin/initdb" -D "$work/primary" -U postgres --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null
fi
as_pg "$pgbin/pg_ctl" -D "$work/primary" -l "$work/primary.log" -w -o \
  "-c listen_addresses=127.0.0.1 -p $port -k $work -c fsync=off -c max_wal_size=8GB" start >/dev/null
psql_p() { psql -X -q -h "$work" -p "$port" -U postgres -v ON_ERROR_STOP=1 "$@"; }
if [ -n "${BENCH_FRESH:-}" ] || [ ! -s "$work/bench.dump" ]; then
  echo "bench: generating pgbench scale $scale plus random text, bytea and jsonb…"
  psql_p -d postgres -c "create database bench"
  pgbench -q -i -s "$scale" -h "$work" -p "$port" -U postgres bench 2>/dev/null
  psql_p -d bench -c "create extension pgcrypto" \
    -c "create table blobs (id int primary key, b bytea not null, at timestamptz not null default now() - interval '1 hour')" \
    -c "insert into blobs (id, b) select g, gen_random_bytes(512) from generate_series(1, 600000) g" \
    -c "create table notes (id int primary key, t text not null)" \
    -c "insert into notes select g, md5(random()::text) || md5(random()::text) || md5(random()::text) from generate_series(1, 1000000) g" \
    -c "create table docs (id int primary key, d jsonb not null)" \
    -c "insert into docs select g, jsonb_build_object('n', g, 'r', random(), 's', md5(g::text), 'a', jsonb_build_array(g, g * 2)) from generate_series(1, 1000000) g" \
    -c "vacuum analyze"
  pg_dump -Fc -Z1 -h "$work" -p "$port" -U postgres -f "$work/bench.dump.tmp" bench
  mv "$work/bench.dump.tmp" "$work/bench.dump"
fi
psql_p -d postgres -c "drop role if exists verifier" -c "create role verifier login password '$password'" -c "grant pg_read_all_data to verifier"
db_size=$(psql_p -d bench -A -t -c "select pg_database_size('bench')")
echo "bench: database is $db_size bytes on disk; dump $(stat -c %s "$work/bench.dump") bytes"

start_moto "$work/moto.log" bench
s3 cp --only-show-errors "$work/bench.dump" s3://bench/bench/bench.dump

mkdir -p "$work/scratch"; chmod 1777 "$work/scratch"
cat >"$work/drcheck.toml" <<TOML
[state]
url = "sqlite://$work/history.db"
[sandbox]
scratch_dir = "$work/scratch"
profile = "fast"
[storage.s3]
kind = "s3"
bucket = "bench"
endpoint = "http://127.0.0.1:$s3_port"
path_style = true
[[target]]
name = "bench"
primary = "postgres://verifier:\${BENCH_PW}@127.0.0.1:$port/bench"
storage = "s3"
prefix = "bench/"
rto = "2h"
rpo = "26h"
restore_jobs = 2
[target.as_of]
"public.blobs" = "at"
[[target.check]]
name = "no negative balances beyond the usual"
sql = "select count(*) >= 0 from pgbench_accounts"
compare = "primary"
TOML
echo "bench: drcheck verify with every validator…"
BENCH_PW=$password "$drcheck" --config "$work/drcheck.toml" verify --json >"$work/run.json" || true
if [ -n "${DRCHECK_BASELINE_BIN:-}" ]; then
  echo "bench: the baseline build on the same data…"
  BENCH_PW=$password "$DRCHECK_BASELINE_BIN" --config "$work/drcheck.toml" verify --json >"$work/baseline.json" || true
else
  echo '{"runs": []}' >"$work/baseline.json"
fi
# The plain way to look at every row on both sides: count(*) of every table on the
# primary and on a copy restored by hand from the same dump.
echo "bench: restoring the dump by hand for the count(*) baseline…"
copy_port=$(free_port)
rm -rf "$work/copy"
as_pg "$pgbin/initdb" -D "$work/copy" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null
as_pg "$pgbin/pg_ctl" -D "$work/copy" -l "$work/copy.log" -w -o "-c listen_addresses= -p $copy_port -k $work -c fsync=off" start >/dev/null
psql -X -q -h "$work" -p "$copy_port" -U postgres -d postgres -c "create database bench"
pg_restore -j 2 --no-owner -h "$work" -p "$copy_port" -U postgres -d bench "$work/bench.dump" 2>/dev/null || true
psql -X -q -h "$work" -p "$copy_port" -U postgres -d bench -c "vacuum analyze" >/dev/null
echo "bench: plain count(*) of every table on both sides…"
count_s=$(python3 - "$work" "$port" "$copy_port" <<'PY'
import subprocess, sys, time
work, ports = sys.argv[1], sys.argv[2:]
q = lambda port, sql: subprocess.run(["psql", "-X", "-A", "-t", "-h", work, "-p", port, "-U", "postgres", "-d", "bench", "-c", sql],
                                     check=True, capture_output=True, text=True).stdout
tables = q(ports[0], "select quote_ident(schemaname) || '.' || quote_ident(relname) from pg_stat_user_tables").split()
took = []
for port in ports:
    start = time.monotonic()
    for t in tables:
        q(port, f"select count(*) from {t}")
    took.append(time.monotonic() - start)
print(f"{took[0]:.3f} {took[1]:.3f}")
PY
)
# The row hash's mixing (issue 33): the same sum over every table of the primary, with
# the record hash alone (linear in its columns' hashes: exchanges balance it) and mixed
# as drcheck hashes it, in the same run.
echo "bench: the record hash alone vs mixed, every table of the primary…"
mix_s=$(python3 - "$work" "$port" <<'PY'
import subprocess, sys, time
work, port = sys.argv[1:]
q = lambda sql: subprocess.run(["psql", "-X", "-A", "-t", "-h", work, "-p", port, "-U", "postgres", "-d", "bench", "-c", sql],
                               check=True, capture_output=True, text=True).stdout
tables = q("select quote_ident(schemaname) || '.' || quote_ident(relname) from pg_stat_user_tables").split()
linear = "pg_catalog.hash_record_extended(drcheck_row.*, 0::pg_catalog.int8)"
mixed = f"pg_catalog.hashint8extended({linear}, 1::pg_catalog.int8)"
took = []
for expr in (linear, mixed, linear, mixed):
    start = time.monotonic()
    for t in tables:
        q(f"select pg_catalog.sum({expr}) from {t} drcheck_row")
    took.append(time.monotonic() - start)
print(f"{min(took[0], took[2]):.3f} {min(took[1], took[3]):.3f}")
PY
)
as_pg "$pgbin/pg_ctl" -D "$work/copy" -m fast stop >/dev/null
rm -rf "$work/copy"
python3 - "$work/run.json" "$count_s" "$db_size" "$work/baseline.json" "$mix_s" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
count_p, count_r = (float(x) for x in sys.argv[2].split())
count_s, db_size = count_p + count_r, int(sys.argv[3])
baseline = (json.load(open(sys.argv[4]))["runs"] or [None])[0]
print()
print(f"database: {db_size / 1e9:.2f} GB on disk; run result: {run['result']}")
for p in run["phases"]:
    print(f"  phase {p['name']:<10} {p['seconds']:8.2f} s")
for v in run["validators"]:
    print(f"  {v['name']:<42} {v['status']:<8} {v['measurements'].get('seconds', 0):8.2f} s   {v['detail'][:90]}")
pq = run.get("primary_queries") or {}
print(f"  queries sent to the primary: {pq.get('count')}, longest {pq.get('longest_seconds')} s")
cs = next(v for v in run["validators"] if v["name"] == "checksums")["measurements"]["seconds"]
print(f"  plain SELECT count(*) of every table: primary {count_p:.2f} s + restored copy {count_r:.2f} s = {count_s:.2f} s")
# What checking the copy's pages costs per GiB of the database (issue 50): amcheck and
# full_read, the two that read the whole copy.
gib = db_size / 2**30
for name in ("amcheck", "full_read"):
    v = next((v for v in run["validators"] if v["name"] == name), None)
    if v and v["status"] == "passed":
        s = v["measurements"].get("seconds", 0)
        print(f"  {name} cost: {s / gib:.2f} s per GiB of the database ({s:.2f} s over {gib:.2f} GiB)")
    else:
        print(f"  {name} cost: not measured ({v['status'] if v else 'not run'})")
print()
ratio = cs / count_s
print(f"ratio checksums / count(*) on both sides: {ratio:.2f} (target <= 6) {'met' if ratio <= 6 else 'MISSED'}")
lin, mix = (float(x) for x in sys.argv[5].split())
print(f"row hash, every table of the primary: record hash alone {lin:.2f} s, mixed (drcheck's) {mix:.2f} s: ratio {mix / lin:.3f}")
phase = lambda r: next((p["seconds"] for p in r["phases"] if p["name"] == "validate"), None)
if baseline and phase(baseline):
    b = phase(baseline)
    bcs = next(v for v in baseline["validators"] if v["name"] == "checksums")["measurements"]["seconds"]
    print(f"baseline build: validate {b:.2f} s, checksums {bcs:.2f} s (ratio {bcs / count_s:.2f})")
    print(f"ratio validate phase this/baseline: {phase(run) / b:.3f} (target <= 0.6) {'met' if phase(run) / b <= 0.6 else 'MISSED'}")
else:
    print("validate phase vs a baseline: not measured (set DRCHECK_BASELINE_BIN)")
PY
