#!/usr/bin/env bash
# Proving a large database every day (issue 36), one run, four parts:
#  1. a full verification of a ≥ 4 GB pgbench database (BENCH_SCALE, default 280) from a
#     base backup in a directory store: its time, what it read from the primary
#     (pg_statio blocks × 8 KiB), the restore's throughput against the scratch disk's
#     write bandwidth (restore.disk_fraction: target ≥ 0.7 on the file copy);
#  2. a day of following: `drcheck daemon` follows the archive while 2 % of the
#     accounts (a contiguous range: a day's churn lands together) are updated
#     (BENCH_CHURN_PERCENT) — segments replayed,
#     CPU seconds (the daemon and the follower's server), bytes fetched;
#  3. the daily verification on the follower (primary_read_budget: BENCH_BUDGET_MIB,
#     default a twentieth of the database): its time (target ≤ 0.1× the full
#     verification's) and what it read from the primary (target ≤ the budget): table
#     data — user tables' heap, index and TOAST blocks, hit or read (pg_statio_user_tables);
#  4. pgBackRest (the same primary also archives into a pgBackRest repository in moto):
#     after another 2 % of churn, a restore onto the previous copy with --delta vs a full
#     restore of the same backup: bytes fetched and time — on local disk, and through a
#     store at a distance (the TLS terminator throttled: BENCH_FAR_MIBPS a connection,
#     BENCH_FAR_LATENCY_MS a request), where delta must win on time.
# Every measurement and ratio is printed; each target line ends in met or MISSED.
#
#   tests/bench/scale.sh
#
# DRCHECK_BIN runs that binary instead of building target/release/drcheck. BENCH_DIR
# (default /var/tmp/drcheck-bench) keeps the generated clusters between runs;
# BENCH_FRESH=1 regenerates them. BENCH_SKIP_PGBR=1 skips part 4; BENCH_ONLY_COPY=1 stops after
# part 1 and the file copy's comparison with tar -xf.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh

base=${BENCH_DIR:-/var/tmp/drcheck-bench}
work=$base/scale
scale=${BENCH_SCALE:-280}
churn=${BENCH_CHURN_PERCENT:-2}
mkdir -p "$work"
chmod 755 "$base" "$work"
[ "$(id -u)" = 0 ] && chown postgres: "$work"
port=$(free_port)
store=$work/store
mkdir -p "$store/wal" "$store/phys" "$work/scratch" "$work/state"
chmod 1777 "$work/scratch" "$work/state"
[ "$(id -u)" = 0 ] && chown -R postgres: "$store"

# pgBackRest's repository (part 4) in moto behind the TLS terminator pgBackRest 2.45
# needs: the primary archives into it as well as into drcheck's directory store.
pgwork=$base/scale-pgbr
mkdir -p "$pgwork"; chmod 755 "$pgwork"; [ "$(id -u)" = 0 ] && chown postgres: "$pgwork"
start_moto "$pgwork/moto.log" pgbr
make_tls "$pgwork"
tls_port=$(free_port)
python3 tests/tools/tls_terminator.py "$tls_port" "$s3_port" "$pgwork/cert.pem" "$pgwork/key.pem" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$tls_port") 2>/dev/null && break; sleep 0.1; done
conf=$pgwork/pgbackrest.conf
mkdir -p "$pgwork/pgbr-work"; [ "$(id -u)" = 0 ] && chown postgres: "$pgwork/pgbr-work"
cat >"$conf" <<CONF
[global]
repo1-type=s3
repo1-s3-bucket=pgbr
repo1-s3-endpoint=127.0.0.1
repo1-storage-port=$tls_port
repo1-s3-region=us-east-1
repo1-s3-uri-style=path
repo1-s3-key=bench
repo1-s3-key-secret=bench
repo1-storage-ca-file=$pgwork/ca.pem
repo1-path=/pgbackrest
repo1-bundle=y
repo1-retention-full=9
log-path=$pgwork/pgbr-work
lock-path=$pgwork/pgbr-work
spool-path=$pgwork/pgbr-work
log-level-console=warn
log-level-file=off
start-fast=y
compress-type=gz
compress-level=1
process-max=2
[main]
pg1-path=$work/primary
pg1-socket-path=$work
pg1-port=$port
CONF
chmod 644 "$conf"
pgbr() { as_pg pgbackrest --config="$conf" --stanza=main "$@"; }

fresh=${BENCH_FRESH:-}
if [ -n "$fresh" ] || [ ! -s "$work/primary/PG_VERSION" ]; then
  echo "scale: generating the primary (pgbench scale $scale)…"
  rm -rf "$work/primary" "$store/wal"/* "$store/phys"/* "$work/history.db" "$work/state"/*
  as_pg "$pgbin/initdb" -D "$work/primary" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null
  fresh=1
fi
as_pg "$pgbin/pg_ctl" -D "$work/primary" -l "$work/primary.log" -w -o "-c listen_addresses=127.0.0.1 -p $port -k $work \
  -c archive_mode=on -c wal_level=replica -c max_wal_size=4GB -c track_commit_timestamp=on \
  -c archive_command='cp %p $store/wal/%f && pgbackrest --config=$conf --stanza=main archive-push %p'" start >/dev/null
clusters+=("$work/primary")
psql_p() { psql -X -q -h 127.0.0.1 -p "$port" -U postgres -v ON_ERROR_STOP=1 "$@"; }
# The repository is moto's (in memory): made again each run, the archive with it.
pgbr stanza-create
if [ -n "$fresh" ]; then
  psql_p -d postgres -c "create database bench"
  t0=$(now)
  pgbench -q -i -s "$scale" -h 127.0.0.1 -p "$port" -U postgres bench 2>/dev/null
  echo "scale: pgbench -i took $(elapsed "$t0" "$(now)") s"
  rm -rf "$store/phys/b1"
  as_pg pg_basebackup -h 127.0.0.1 -p "$port" -U postgres -D "$store/phys/b1" -Ft -X stream --checkpoint=fast
  psql_p -d postgres -Atc "select pg_switch_wal()" >/dev/null
fi
db_size=$(psql_p -d bench -Atc "select pg_database_size('bench')")
echo "scale: database is $db_size bytes"
[ "$db_size" -ge 4000000000 ] || echo "scale: WARNING: the database is under 4 GB (BENCH_SCALE=$scale)"
budget_mib=${BENCH_BUDGET_MIB:-$((db_size / 20 / 1048576))}
budget=$((budget_mib * 1048576))

# Table data read by every session on the primary's bench database: the blocks of user
# tables, their indexes and TOAST (buffer hits and reads), in bytes. Catalog queries
# (the schema comparison) are not counted.
primary_bytes() {
  psql_p -d bench -Atc "select (coalesce(sum(heap_blks_read + heap_blks_hit + coalesce(idx_blks_read, 0) + coalesce(idx_blks_hit, 0)
    + coalesce(toast_blks_read, 0) + coalesce(toast_blks_hit, 0) + coalesce(tidx_blks_read, 0) + coalesce(tidx_blks_hit, 0)), 0)
    * current_setting('block_size')::int8)::int8 from pg_statio_user_tables"
}
# The statistics a backend sends at its end: give them a moment to arrive.
settle() { sleep 1; psql_p -d bench -Atc "select pg_stat_clear_snapshot()" >/dev/null; }

metrics_port=$(free_port)
url="postgres://postgres@127.0.0.1:$port/bench"
common="[state]
url = \"sqlite://$work/history.db\"
[sandbox]
scratch_dir = \"$work/scratch\"
state_dir = \"$work/state\"
[metrics]
listen = \"127.0.0.1:$metrics_port\"
[api]
token = \"bench\"
[storage.fs]
kind = \"filesystem\"
path = \"$store\"
[[target]]
name = \"big\"
primary = \"$url\"
storage = \"fs\"
prefix = \"phys/\"
format = \"physical\"
wal_prefix = \"wal/\"
rto = \"2h\"
rpo = \"1h\"
comparisons = \"best-effort\"
[target.validators]
phase_timeout = \"2h\"
timeout = \"1h\""
printf '%s\n' "$common" >"$work/full.toml"
printf '%s\nprimary_read_budget = "%sMiB"\n[target.follow]\ninterval = "5s"\n' \
  "$(printf '%s\n' "$common" | sed '/^\[target.validators\]/,$d')" "$budget_mib" >"$work/follow.toml"
printf '[target.validators]\nphase_timeout = "2h"\ntimeout = "1h"\n' >>"$work/follow.toml"

# 1. A full verification.
rm -f "$work/history.db"
settle; b0=$(primary_bytes); t0=$(now)
"$drcheck" --config "$work/full.toml" verify --json >"$work/full.json" || true
t1=$(now); settle; b1=$(primary_bytes)
full_s=$(elapsed "$t0" "$t1"); full_read=$((b1 - b0))
python3 - "$work/full.json" "$full_s" "$full_read" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
ri = r.get("restore") or {}
print(f"scale: 1. full verification: {r['result']} in {float(sys.argv[2]):.1f} s (RTO {r['rto']['measured_seconds']} s), "
      f"primary read {int(sys.argv[3]) / 2**20:.0f} MiB")
for v in r["validators"]:
    print(f"scale:    {v['name']}: {v['status']}")
f = ri.get("disk_fraction")
print(f"scale:    restore wrote {ri.get('bytes_written', 0) / 2**20:.0f} MiB at {ri.get('write_bps', 0) / 2**20:.0f} MiB/s; "
      f"the disk writes {ri.get('disk_write_bps', 0) / 2**20:.0f} MiB/s; limited by {ri.get('limited_by')}")
if f is not None:
    print(f"ratio restore write rate / disk write bandwidth {f:.2f} (target >= 0.7) {'met' if f >= 0.7 else 'MISSED'}")
assert r["result"] == "passed", r.get("error") or [v for v in r["validators"] if v["status"] not in ("passed", "skipped")]
PY

# The hand-written file copy of the same backup: tar -x of base.tar into the scratch
# directory (its write rate, against the same disk bandwidth).
rm -rf "$work/scratch/tar-x"; mkdir -p "$work/scratch/tar-x"; sync
t0=$(now); tar -xf "$store/phys/b1/base.tar" -C "$work/scratch/tar-x"; t1=$(now)
tar_bytes=$(du -sb "$work/scratch/tar-x" | cut -f1); rm -rf "$work/scratch/tar-x"
python3 - "$work/full.json" "$tar_bytes" "$(elapsed "$t0" "$t1")" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
ri = r.get("restore") or {}
rate = int(sys.argv[2]) / float(sys.argv[3])
disk = ri.get("disk_write_bps") or 0
print(f"scale:    by hand: tar -xf base.tar wrote {int(sys.argv[2]) / 2**20:.0f} MiB in {float(sys.argv[3]):.1f} s: {rate / 2**20:.0f} MiB/s"
      + (f", {rate / disk:.2f} of the disk's bandwidth" if disk else ""))
if ri.get("write_bps"):
    print(f"ratio drcheck's file copy / tar -xf (write rate) {ri['write_bps'] / rate:.2f} (target >= 1.0) {'met' if ri['write_bps'] >= rate else 'MISSED'}")
PY

[ -n "${BENCH_ONLY_COPY:-}" ] && exit 0
# 2. A day of following.
"$drcheck" --config "$work/follow.toml" daemon --target big 2>"$work/daemon.log" &
dpid=$!; pids+=($dpid)
metric() { curl -s "http://127.0.0.1:$metrics_port/metrics" | awk -v n="$1" '$1 ~ "^"n"\\{" && v == "" {v = $2} END {print v}'; }
t0=$(now)
until [ "$(metric drcheck_follow_up)" = 1 ]; do
  kill -0 "$dpid" 2>/dev/null || { tail -20 "$work/daemon.log"; exit 1; }
  sleep 1
done
echo "scale: 2. the follower is up (seeded or resumed) after $(elapsed "$t0" "$(now)") s"
cpu() { # the daemon's and the follower's server's CPU seconds so far (children reaped included)
  local hz pm total
  hz=$(getconf CLK_TCK)
  pm=$(pgrep -f -- "-D $work/state/" | head -1 || true)
  total=0
  for p in $dpid $pm; do
    total=$((total + $(awk '{print $14 + $15 + $16 + $17}' "/proc/$p/stat")))
  done
  python3 -c "print($total / $hz)"
}
seg0=$(metric drcheck_follow_segments_replayed_total); bytes0=$(metric drcheck_follow_fetched_bytes_total); cpu0=$(cpu)
rows=$(psql_p -d bench -Atc "select count(*) from pgbench_accounts")
step=$((100 / churn))
t0=$(now)
# A day's churn lands together (today's rows, this week's accounts): a contiguous 2 %.
churned=$((rows / step))
for lo in $(seq 0 200000 "$churned"); do
  psql_p -d bench -c "update pgbench_accounts set abalance = abalance + 1 where aid > $lo and aid <= $((lo + 200000 < churned ? lo + 200000 : churned))"
done
last=$(psql_p -d bench -Atc "insert into pgbench_history (tid, bid, aid, delta, mtime) values (1, 1, 1, 0, now()) returning extract(epoch from clock_timestamp())")
psql_p -d postgres -Atc "select pg_switch_wal()" >/dev/null
echo "scale:    churn: $churned accounts (a contiguous $churn %) updated in $(elapsed "$t0" "$(now)") s"
until python3 -c "import sys; sys.exit(0 if float('${c:-0}' or 0) >= $last - 1 else 1)" 2>/dev/null; do
  c=$(metric drcheck_follow_replayed_commit_timestamp_seconds); sleep 1
done
follow_s=$(elapsed "$t0" "$(now)")
seg1=$(metric drcheck_follow_segments_replayed_total); bytes1=$(metric drcheck_follow_fetched_bytes_total); cpu1=$(cpu)
python3 -c "print(f'scale:    followed: {int(float($seg1) - float($seg0))} segments replayed, {(float($bytes1) - float($bytes0)) / 2**20:.0f} MiB fetched, {float($cpu1) - float($cpu0):.1f} CPU s (daemon + follower), replayed within {float($follow_s):.0f} s of the churn starting')"

# 3. The daily verification, on the follower. The churn's vacuum first: autovacuum
# reading pgbench_accounts during the measurement is counted by pg_statio too, and is not
# drcheck's read (a re-run over the same primary once showed 1.9 GiB of it).
psql_p -d bench -c "vacuum (analyze) pgbench_accounts, pgbench_history" >/dev/null
settle; b0=$(primary_bytes); t0=$(now)
body=$(curl -s -X POST -H 'Authorization: Bearer bench' "http://127.0.0.1:$metrics_port/api/v1/targets/big/verify")
id=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['run_id'])" "$body")
until [ "$(curl -s -o "$work/daily.json" -w '%{http_code}' -H 'Authorization: Bearer bench' "http://127.0.0.1:$metrics_port/api/v1/runs/$id")" = 200 ]; do sleep 1; done
t1=$(now); settle; b1=$(primary_bytes)
daily_s=$(elapsed "$t0" "$t1"); daily_read=$((b1 - b0))
kill -TERM "$dpid"; wait "$dpid" || true
python3 - "$work/daily.json" "$daily_s" "$daily_read" "$full_s" "$budget" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
daily, read, full, budget = float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
print(f"scale: 3. daily verification on the follower: {r['result']} (mode {r.get('mode')}, paused at {r.get('follow', {}).get('commit')}) "
      f"in {daily:.1f} s, primary read {read / 2**20:.0f} MiB (budget {budget / 2**20:.0f} MiB)")
for v in r["validators"]:
    print(f"scale:    {v['name']}: {v['status']}: {v['detail'][:160]}")
ratio = daily / full
print(f"ratio daily on the follower / full verification (time) {ratio:.3f} (target <= 0.1) {'met' if ratio <= 0.1 else 'MISSED'}")
print(f"ratio primary read / budget {read / budget:.3f} (target <= 1.0) {'met' if read <= budget else 'MISSED'}")
PY

[ -n "${BENCH_SKIP_PGBR:-}" ] && exit 0
# 4. pgBackRest: --delta onto the previous copy vs a full restore, of the same database.
# The churn of part 2 is in the archive; a full backup now, another 2 % after it.
t0=$(now)
pgbr backup --type=full
echo "scale: 4. pgBackRest full backup of the database took $(elapsed "$t0" "$(now)") s"
mkdir -p "$pgwork/scratch" "$pgwork/state"; chmod 1777 "$pgwork/scratch" "$pgwork/state"
pgconf() { # DELTA [PORT HISTORY STATE]
  cat <<TOML
[state]
url = "sqlite://${3:-$pgwork/history.db}"
[sandbox]
# A pgBackRest incremental backup's size is its database's: room for one restore, not five.
expansion_factor = 1.5
scratch_dir = "$pgwork/scratch"
state_dir = "${4:-$pgwork/state}"
[storage.repo]
kind = "s3"
bucket = "pgbr"
endpoint = "https://127.0.0.1:${2:-$tls_port}"
ca_file = "$pgwork/ca.pem"
path_style = true
[[target]]
name = "bench"
source = "pgbackrest"
storage = "repo"
stanza = "main"
repo_path = "/pgbackrest"
rto = "1h"
rpo = "26h"
delta_restore = $1
[target.validators]
enabled = ["indexes"]
TOML
}
pgconf true >"$pgwork/delta.toml"; pgconf false >"$pgwork/full.toml"
restore_of() { # CONFIG → "seconds bytes_fetched"
  "$drcheck" --config "$1" verify --json | python3 -c 'import json,sys; r=json.load(sys.stdin)["runs"][0]; assert r["result"]=="passed", r; print(r["rto"]["measured_seconds"], r["restore"].get("bytes_fetched") or "full")'
}
rm -f "$pgwork/history.db"
read -r first _ < <(restore_of "$pgwork/delta.toml")
echo "scale:    the first restore (nothing to go onto) $first s"
psql_p -d bench -c "update pgbench_accounts set abalance = abalance + 1 where aid <= $((rows / step))"
pgbr backup --type=incr
read -r delta_s delta_bytes < <(restore_of "$pgwork/delta.toml")
read -r full_s2 _ < <(restore_of "$pgwork/full.toml")
repo_bytes=$(s3 ls --recursive --summarize s3://pgbr/ | awk '/Total Size/ {print $3}')
python3 - "$delta_s" "$delta_bytes" "$full_s2" "$repo_bytes" "$db_size" <<'PY'
import sys
delta_s, delta_b, full_s, repo, size = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
print(f"scale:    after {size / 2**30:.2f} GiB with 2 % of its accounts updated: --delta onto the previous copy {delta_s:.1f} s, "
      f"fetched {delta_b / 2**20:.0f} MiB; a full restore {full_s:.1f} s (the repository holds {repo / 2**20:.0f} MiB)")
print(f"ratio delta / full restore (time) {delta_s / full_s:.3f} (target < 1.0) {'met' if delta_s < full_s else 'MISSED'}")
print(f"ratio fetched by --delta / database size {delta_b / size:.3f} (target < 0.5) {'met' if delta_b < size / 2 else 'MISSED'}")
PY

# The same through a store at a distance (BENCH_FAR_MIBPS per connection, default 25 MiB/s;
# BENCH_FAR_LATENCY_MS a request, default 20): the TLS terminator throttling what it
# relays. The copy is the full backup's; then --delta onto it and a full restore, both of
# the incremental backup — where fetching less must win on time.
far_rate=$(( ${BENCH_FAR_MIBPS:-25} * 1048576 ))
far_port=$(free_port)
python3 tests/tools/tls_terminator.py "$far_port" "$s3_port" "$pgwork/cert.pem" "$pgwork/key.pem" "$far_rate" "${BENCH_FAR_LATENCY_MS:-20}" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$far_port") 2>/dev/null && break; sleep 0.1; done
mkdir -p "$pgwork/state-far"; chmod 1777 "$pgwork/state-far"; rm -f "$pgwork/far-history.db"
pgconf true "$far_port" "$pgwork/far-history.db" "$pgwork/state-far" >"$pgwork/far-delta.toml"
pgconf false "$far_port" "$pgwork/far-history.db" "$pgwork/state-far" >"$pgwork/far-full.toml"
full_label=$(pgbr info --output=json | python3 -c 'import json,sys; print([b["label"] for b in json.load(sys.stdin)[0]["backup"] if b["type"] == "full"][-1])')
"$drcheck" --config "$pgwork/far-delta.toml" verify --target bench --backup "$full_label" --json >/dev/null
read -r far_delta_s far_delta_bytes < <(restore_of "$pgwork/far-delta.toml")
read -r far_full_s _ < <(restore_of "$pgwork/far-full.toml")
python3 - "$far_delta_s" "$far_delta_bytes" "$far_full_s" "${BENCH_FAR_MIBPS:-25}" "${BENCH_FAR_LATENCY_MS:-20}" <<'PY'
import sys
delta_s, delta_b, full_s = float(sys.argv[1]), sys.argv[2], float(sys.argv[3])
print(f"scale:    through a store {sys.argv[4]} MiB/s a connection and {sys.argv[5]} ms a request away: --delta {delta_s:.1f} s "
      f"(fetched {int(delta_b) / 2**20 if delta_b.isdigit() else 0:.0f} MiB), a full restore {full_s:.1f} s")
print(f"ratio delta / full restore through the distant store (time) {delta_s / full_s:.3f} (target < 1.0) {'met' if delta_s < full_s else 'MISSED'}")
PY

