#!/usr/bin/env bash
# The restore watcher (the bound on what a restore writes) on a restore of ~100,000
# files: a base backup of a cluster with many small tables. Its CPU over the restore,
# against the way it used to watch (a walk of the run's directory every 250 ms: one
# walk measured here with `du`, times the restore's duration / 0.25 s). Target: ≤ 2 %
# of one core.
#
#   tests/bench/watcher.sh
#
# BENCH_TABLES (default 40000; each a heap and a primary-key index: two files, plus
# what the catalogs hold) sizes it. BENCH_DIR (default /var/tmp/drcheck-bench-watcher)
# keeps the base backup between runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh

work=${BENCH_DIR:-/var/tmp/drcheck-bench-watcher}
tables=${BENCH_TABLES:-40000}
mkdir -p "$work"
chmod 755 "$work"
[ "$(id -u)" = 0 ] && chown postgres: "$work"
store=$work/store
if [ ! -s "$store/phys/b1/base.tar" ]; then
  echo "bench: a cluster with $tables tables and its base backup…"
  port=$(free_port)
  rm -rf "$work/primary"
  as_pg "$pgbin/initdb" -D "$work/primary" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null
  as_pg "$pgbin/pg_ctl" -D "$work/primary" -l "$work/primary.log" -w -o "-c listen_addresses= -p $port -k $work -c fsync=off -c max_locks_per_transaction=1024" start >/dev/null
  clusters+=("$work/primary")
  psql -X -q -h "$work" -p "$port" -U postgres -d postgres -c \
    "do \$\$ begin for i in 1..$tables loop execute format('create table t%s (id int primary key)', i); end loop; end \$\$"
  rm -rf "$work/bb"
  as_pg mkdir -p "$work/bb"
  as_pg pg_basebackup -h "$work" -p "$port" -U postgres -D "$work/bb/b" -Ft -X stream --checkpoint=fast
  mkdir -p "$store/phys/b1"
  cp "$work/bb/b/base.tar" "$work/bb/b/pg_wal.tar" "$store/phys/b1/"
  as_pg "$pgbin/pg_ctl" -D "$work/primary" -m fast stop >/dev/null
fi
files=$(tar -tf "$store/phys/b1/base.tar" | wc -l)
scratch=$work/scratch
mkdir -p "$scratch"
chmod 1777 "$scratch"
cfg=$work/drcheck.toml
printf '[state]\nurl = "sqlite://%s/history.db"\n[sandbox]\nscratch_dir = "%s"\n[storage.b]\nkind = "filesystem"\npath = "%s"\n[[target]]\nname = "t"\nstorage = "b"\nprefix = "phys/"\nrto = "1h"\nrpo = "3650d"\n[target.validators]\nenabled = ["indexes"]\n' \
  "$work" "$scratch" "$store" >"$cfg"
echo "bench: verifying a base backup of $files files…"
RUST_LOG=drcheck_restore::job=debug "$drcheck" --config "$cfg" verify --target t --json >"$work/run.json" 2>"$work/run.log" || true
restore=$(python3 -c "import json; r=json.load(open('$work/run.json'))['runs'][0]; print(sum(p['seconds'] for p in r['phases'] if p['name'] in ('fetch', 'restore')))")
walking=$(grep -o 'walking_seconds=[0-9.e-]*' "$work/run.log" | tail -1 | cut -d= -f2)
walks=$(grep -o 'walks=[0-9]*' "$work/run.log" | tail -1 | cut -d= -f2)
polls=$(grep -o 'polls=[0-9]*' "$work/run.log" | tail -1 | cut -d= -f2)
# What a poll costs: one statvfs of the scratch file system (timed over 10,000 here).
poll=$(python3 -c "import os, time; t = time.perf_counter(); [os.statvfs('$scratch') for _ in range(10000)]; print((time.perf_counter() - t) / 10000)")
[ -n "$walking" ] || { echo "bench: the watcher's line is missing from $work/run.log" >&2; exit 1; }
# The old way: one walk of the restored files (du), every 250 ms of the restore.
mkdir -p "$work/unpacked"
tar -xf "$store/phys/b1/base.tar" -C "$work/unpacked"
t0=$(now); du -s "$work/unpacked" >/dev/null; t1=$(now)
walk=$(elapsed "$t0" "$t1")
rm -rf "$work/unpacked"
old=$(python3 -c "print(f'{$walk * $restore / 0.25:.2f}')")
cost=$(python3 -c "print($walking + $polls * $poll)")
share=$(python3 -c "print(f'{100 * $cost / max($restore, 0.01):.3f}')")
old_share=$(python3 -c "print(f'{100 * $walk / 0.25:.1f}')")
verdict=$(python3 -c "print('met' if $cost <= 0.02 * max($restore, 0.01) else 'MISSED')")
echo "watcher: restore of $files files in ${restore}s; $polls statvfs polls ($(python3 -c "print(f'{$poll * 1e6:.1f}')") µs each), $walks walks (${walking}s) = ${share}% of one core (target ≤ 2%) $verdict"
echo "watcher: walks come at most every 30 s and cost at most 1% of the time between them: a restore this long needs none"
echo "watcher: the old way (a ${walk}s walk every 250 ms) would have spent ${old}s = ${old_share}% of one core"
