#!/usr/bin/env bash
# pgBackRest restore benchmark: on the same pgBackRest backup of a ≥ 1 GB database (in
# moto behind the TLS terminator pgBackRest 2.45 needs), drcheck against the hand-written
# way — `pgbackrest restore` + start with pgBackRest's own `restore_command` + recovery
# done — interleaved in one run, two ways:
#   latest: replaying all the archived WAL (target ≤ 0.7× the hand way);
#   time:   to a point T inside the replayed WAL (`pgbackrest restore --type=time
#           --target=T --target-action=promote` by hand, `recovery_target = "T"` for
#           drcheck; the same T; target ≤ 0.8×).
# The drcheck runs' reports say what set the replay's pace (restore.replay): printed.
# Prints each round, the medians and the ratios with met/MISSED.
#
#   tests/bench/pgbackrest.sh
#
# DRCHECK_BIN runs that binary instead of building target/release/drcheck.
# BENCH_DIR (default /var/tmp/drcheck-bench) keeps the generated cluster between runs;
# BENCH_FRESH=1 regenerates it. BENCH_SCALE (default 70, ≈ 1.05 GB) is pgbench's scale.
# BENCH_ROUNDS (default 3) restores each way this many times, alternating.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
. tests/bench/lib.sh

work=${BENCH_DIR:-/var/tmp/drcheck-bench}/pgbackrest
scale=${BENCH_SCALE:-70}
rounds=${BENCH_ROUNDS:-3}

mkdir -p "$work"
chmod 755 "${BENCH_DIR:-/var/tmp/drcheck-bench}" "$work"
[ "$(id -u)" = 0 ] && chown postgres: "$work"

start_moto "$work/moto.log" pgbr
make_tls "$work"
tls_port=$(free_port)
python3 tests/tools/tls_terminator.py "$tls_port" "$s3_port" "$work/cert.pem" "$work/key.pem" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$tls_port") 2>/dev/null && break; sleep 0.1; done

port=$(free_port)
conf=$work/pgbackrest.conf
mkdir -p "$work/pgbr-work"; [ "$(id -u)" = 0 ] && chown postgres: "$work/pgbr-work"
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
repo1-storage-ca-file=$work/ca.pem
repo1-path=/pgbackrest
repo1-bundle=y
repo1-retention-full=9
log-path=$work/pgbr-work
lock-path=$work/pgbr-work
spool-path=$work/pgbr-work
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

if [ -n "${BENCH_FRESH:-}" ] || [ ! -s "$work/primary/PG_VERSION" ]; then
  echo "bench: generating the primary (pgbench scale $scale)…"
  rm -rf "$work/primary"
  as_pg "$pgbin/initdb" -D "$work/primary" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null
fi
as_pg "$pgbin/pg_ctl" -D "$work/primary" -l "$work/primary.log" -w -o "-c listen_addresses= -p $port -k $work \
  -c archive_mode=on -c wal_level=replica -c max_wal_size=4GB \
  -c archive_command='pgbackrest --config=$conf --stanza=main archive-push %p'" start >/dev/null
clusters+=("$work/primary")
psql_p() { psql -X -q -h "$work" -p "$port" -U postgres -v ON_ERROR_STOP=1 "$@"; }
if [ "$(psql_p -d postgres -Atc "select count(*) from pg_database where datname = 'bench'")" = 0 ]; then
  psql_p -d postgres -c "create database bench"
  pgbench -q -i -s "$scale" -h "$work" -p "$port" -U postgres bench 2>/dev/null
fi
db_size=$(psql_p -d bench -Atc "select pg_database_size('bench')")
echo "bench: database is $db_size bytes"
[ "$db_size" -ge 1000000000 ] || echo "bench: WARNING: the database is under 1 GB"
pgbr stanza-create
t0=$(now)
pgbr backup --type=full
echo "bench: pgbackrest full backup took $(elapsed "$t0" "$(now)") s"
# WAL after the backup, as in production: recovery replays it. T lies in the middle.
pgbench -n -T 6 -c 2 -h "$work" -p "$port" -U postgres bench >/dev/null 2>&1
# Milliseconds: what pgBackRest's --target accepts (as "YYYY-MM-DD HH:MM:SS.mmm+00").
target=$(psql_p -d postgres -Atc "select to_char(clock_timestamp() at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')")
target_pgbr="$(echo "$target" | tr T ' ' | sed 's/Z$/+00/')"
pgbench -n -T 6 -c 2 -h "$work" -p "$port" -U postgres bench >/dev/null 2>&1
echo "bench: point in time T = $target"
seg=$(psql_p -d postgres -Atc "select pg_walfile_name(pg_switch_wal())")
for _ in $(seq 600); do
  [ "$(psql_p -d postgres -Atc "select coalesce(last_archived_wal, '') >= '$seg' from pg_stat_archiver")" = t ] && break
  sleep 0.2
done
repo_bytes=$(aws --endpoint-url "http://127.0.0.1:$s3_port" s3 ls --recursive --summarize s3://pgbr/ | awk '/Total Size/ {print $3}')
echo "bench: repository holds $repo_bytes bytes"

# By hand: restore, start with pgBackRest's restore_command, wait until out of recovery.
# $1: "latest", or a time to stop at.
by_hand() {
  local dir=$work/hand hport to=()
  hport=$(free_port)
  rm -rf "$dir"
  [ "$1" = latest ] || to=(--type=time "--target=$1" --target-action=promote)
  local t0; t0=$(now)
  pgbr restore --pg1-path="$dir" --archive-mode=off "${to[@]}" >/dev/null
  as_pg "$pgbin/pg_ctl" -D "$dir" -l "$dir.log" -o "-c listen_addresses= -p $hport -k $work -c archive_mode=off" start >/dev/null
  clusters+=("$dir")
  until [ "$(psql -X -h "$work" -p "$hport" -U postgres -d postgres -Atc 'select not pg_is_in_recovery()' 2>/dev/null)" = t ]; do sleep 0.05; done
  local t1; t1=$(now)
  as_pg "$pgbin/pg_ctl" -D "$dir" -m fast stop >/dev/null
  rm -rf "$dir"
  elapsed "$t0" "$t1"
}

mkdir -p "$work/scratch"; chmod 1777 "$work/scratch"
cat >"$work/drcheck.toml" <<TOML
[state]
url = "sqlite://$work/history.db"
[sandbox]
scratch_dir = "$work/scratch"
[storage.repo]
kind = "s3"
bucket = "pgbr"
endpoint = "https://127.0.0.1:$tls_port"
ca_file = "$work/ca.pem"
path_style = true
[[target]]
name = "bench"
source = "pgbackrest"
storage = "repo"
stanza = "main"
repo_path = "/pgbackrest"
rto = "1h"
rpo = "26h"
[target.validators]
enabled = ["indexes"]
TOML
sed "s/^rpo = \"26h\"/rpo = \"26h\"\nrecovery_target = \"$target\"/" "$work/drcheck.toml" >"$work/drcheck-time.toml"
# $1: "latest" or "time".
with_drcheck() {
  local out config=$work/drcheck.toml
  [ "$1" = latest ] || config=$work/drcheck-time.toml
  out=$("$drcheck" --config "$config" verify --json)
  # Each run's report stays beside the bench (its phases say where the time went).
  echo "$out" >"$work/report-$1.json"
  echo "$out" | python3 -c 'import json,sys; r=json.load(sys.stdin)["runs"][0]; assert r["result"]=="passed", r; print(r["rto"]["measured_seconds"]); print(r["restore"].get("replay", "-"), file=sys.stderr)' 2>>"$work/replay-$1.txt"
}

hand=(); mine=(); hand_t=(); mine_t=()
rm -f "$work/replay-latest.txt" "$work/replay-time.txt"
for i in $(seq "$rounds"); do
  h=$(by_hand latest); hand+=("$h"); echo "bench: round $i: latest by hand $h s"
  d=$(with_drcheck latest); mine+=("$d"); echo "bench: round $i: latest drcheck $d s"
  h=$(by_hand "$target_pgbr"); hand_t+=("$h"); echo "bench: round $i: time T by hand $h s"
  d=$(with_drcheck time); mine_t+=("$d"); echo "bench: round $i: time T drcheck $d s"
done
python3 - "${hand[*]}" "${mine[*]}" "${hand_t[*]}" "${mine_t[*]}" <<'PY'
import statistics, sys
def report(name, hand, mine, target):
    hand = [float(x) for x in hand.split()]
    mine = [float(x) for x in mine.split()]
    h, d = statistics.median(hand), statistics.median(mine)
    ratio = d / h
    print(f"pgbackrest restore to {name}: by hand (pgbackrest restore + start + recovery) {h:.2f} s, drcheck {d:.2f} s")
    print(f"ratio drcheck/hand ({name}) {ratio:.3f} (target <= {target}) {'met' if ratio <= target else 'MISSED'}")
report("the latest point", sys.argv[1], sys.argv[2], 0.7)
report("a point in time T", sys.argv[3], sys.argv[4], 0.8)
PY
for k in latest time; do echo "drcheck's replay ($k), each round: $(paste -sd'|' "$work/replay-$k.txt")"; done
