# Physical restores, sourced by tests/bench/restore.sh (which has set up lib.sh, $work,
# start_cluster and an S3 server): `pg_basebackup -Ft -X stream` backups of one
# pgbench cluster at three sizes (uncompressed; ≈ 0.25, 0.5 and 1 GB of base.tar) and
# of the 1 GB one with gzip. For each, drcheck's restore to consistent against the
# hand-written way — `aws s3 cp --recursive` + `tar -x` of base and pg_wal + `pg_ctl
# start -w` (crash recovery from the backup's own WAL) — interleaved, medians of
# BENCH_ROUNDS. The three uncompressed sizes are the size curve.
#
#   physical_generate              # once; kept in $work/physical between runs
#   physical_bench S3FN PORT NAME  # S3FN: an `aws s3` wrapper for that server
#                                  # prints its lines and sets physical_verdicts

physical_scales=(17 35 70)

physical_generate() {
  local phys=$work/physical port
  if [ -z "${BENCH_FRESH:-}" ] && [ -s "$phys/s70gz/base.tar.gz" ]; then return; fi
  echo "bench: generating physical backups (pgbench scales ${physical_scales[*]}, pg_basebackup -Ft -X stream)…"
  rm -rf "$phys"; mkdir -p "$phys"
  port=$(free_port)
  start_cluster "$work/physical-primary" "$port" "-c fsync=off -c max_wal_size=4GB -c checkpoint_timeout=1h"
  local psql_p="psql -X -q -h $work -p $port -U postgres -v ON_ERROR_STOP=1"
  $psql_p -d postgres -c "create database bench"
  for s in "${physical_scales[@]}"; do
    pgbench -q -i -s "$s" -h "$work" -p "$port" -U postgres bench 2>/dev/null
    $psql_p -d bench -c "vacuum analyze" -c checkpoint
    pg_basebackup -h "$work" -p "$port" -U postgres -D "$phys/s$s" -Ft -X stream -c fast
  done
  pg_basebackup -h "$work" -p "$port" -U postgres -D "$phys/s70gz" -Ft -X stream -c fast -z
  as_pg "$pgbin/pg_ctl" -D "$work/physical-primary" -m fast stop >/dev/null
  rm -rf "$work/physical-primary"
}

# By hand: download, untar base and pg_wal, start, wait until it accepts connections
# (crash recovery done). Prints the seconds.
physical_by_hand() { # S3FN NAME
  local s3fn=$1 name=$2 dir=$work/hand-physical hport t0 t1 z=
  hport=$(free_port)
  rm -rf "$dir" "$dir.dl"
  t0=$(now)
  "$s3fn" cp --recursive --only-show-errors "s3://bench/physical/$name/" "$dir.dl/"
  mkdir -p "$dir"
  [ -f "$dir.dl/base.tar.gz" ] && z=.gz
  tar -x${z:+z}f "$dir.dl/base.tar$z" -C "$dir"
  tar -x${z:+z}f "$dir.dl/pg_wal.tar$z" -C "$dir/pg_wal"
  [ "$(id -u)" = 0 ] && chown -R postgres: "$dir"
  chmod 700 "$dir"
  as_pg "$pgbin/pg_ctl" -D "$dir" -l "$dir.log" -t 900 -w -o "-c listen_addresses= -p $hport -k $work" start >/dev/null
  t1=$(now)
  as_pg "$pgbin/pg_ctl" -D "$dir" -m fast stop >/dev/null
  rm -rf "$dir" "$dir.dl" "$dir.log"
  elapsed "$t0" "$t1"
}

physical_config() { # PORT NAME
  cat >"$work/physical-$1-$2.toml" <<TOML
[state]
url = "sqlite://$work/history.db"
[sandbox]
scratch_dir = "$work/scratch"
[storage.s3]
kind = "s3"
bucket = "bench"
endpoint = "http://127.0.0.1:$1"
path_style = true
[[target]]
name = "physical"
storage = "s3"
prefix = "physical/$2/"
format = "physical"
rto = "2h"
rpo = "26h"
[target.validators]
enabled = ["schema"]
TOML
  echo "$work/physical-$1-$2.toml"
}

# drcheck: prints "rto_seconds peak_rss_kib".
physical_drcheck() { # PORT NAME
  local out=$work/physical-run.json rss=$work/physical-rss.json
  python3 tests/bench/peak_rss.py "$rss" "$drcheck" --config "$(physical_config "$1" "$2")" verify --json >"$out" || true
  python3 - "$out" "$rss" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
assert run["result"] == "passed", run
print(run["rto"]["measured_seconds"], json.load(open(sys.argv[2]))["peak_rss_kib"])
PY
}

physical_bench() { # S3FN PORT SERVER-NAME
  local s3fn=$1 port=$2 server=$3 rounds=${BENCH_ROUNDS:-2} name h d rss lines=()
  physical_generate
  for name in s17 s35 s70 s70gz; do
    "$s3fn" cp --recursive --only-show-errors "$work/physical/$name/" "s3://bench/physical/$name/"
  done
  local report=$work/physical-$server.txt
  : >"$report"
  for name in s17 s35 s70 s70gz; do
    local size hand=() mine=() peak=0
    size=$(du -cb "$work/physical/$name"/*.tar* | awk 'END {print $1}')
    for i in $(seq "$rounds"); do
      h=$(physical_by_hand "$s3fn" "$name"); hand+=("$h")
      read -r d rss < <(physical_drcheck "$port" "$name"); mine+=("$d")
      [ "$rss" -gt "$peak" ] && peak=$rss
      echo "bench: $server: physical $name round $i: by hand $h s, drcheck $d s"
    done
    echo "$name $size $(IFS=,; echo "${hand[*]}") $(IFS=,; echo "${mine[*]}") $peak" >>"$report"
  done
  python3 - "$report" "$server" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
server = sys.argv[2]
med = lambda s: statistics.median(float(x) for x in s.split(","))
print()
print(f"physical (pg_basebackup -Ft -X stream) on {server}: restore to consistent, medians")
verdict = lambda ok: "met" if ok else "MISSED"
curve = []
peak = 0
plain = {name: int(size) for name, size, *_ in rows}
for name, size, hand, mine, rss in rows:
    h, d, size, rss = med(hand), med(mine), int(size), int(rss)
    peak = max(peak, rss)
    label = f"{size / 1e9:.2f} GB"
    if name.endswith("gz"):
        label = f"{plain[name[:-2]] / 1e9:.2f} GB as {size / 1e9:.2f} GB gzip"
    print(f"  {label:<24} by hand {h:7.2f} s   drcheck {d:7.2f} s   ratio {d / h:.3f}   peak RSS {rss / 1024:.1f} MiB")
    if not name.endswith("gz"):
        curve.append((size, h, d))
    else:
        print(f"ratio drcheck/hand physical gzip >= 1 GB ({server}): {d / h:.3f}   (target <= 1.0) {verdict(d / h <= 1.0)}")
        gz_ok = d / h
print("size curve (uncompressed base.tar): seconds per GB, drcheck / by hand")
for size, h, d in curve:
    print(f"  {size / 1e9:.2f} GB   drcheck {d / (size / 1e9):6.2f} s/GB   by hand {h / (size / 1e9):6.2f} s/GB")
(s0, _, d0), (s1, _, d1) = curve[0], curve[-1]
growth = (d1 / d0) / (s1 / s0)
shape = "sublinear" if growth < 0.95 else "linear (within 15 %)" if growth <= 1.15 else "faster than linear"
print(f"size curve: time grows {d1 / d0:.2f}x for {s1 / s0:.2f}x the size: {shape}")
size, h, d = curve[-1]
print(f"ratio drcheck/hand physical 1 GB uncompressed ({server}): {d / h:.3f}   (target <= 1.0) {verdict(d / h <= 1.0)}")
print(f"peak RSS physical ({server}): {peak / 1024:.1f} MiB (target <= 64 MiB) {verdict(peak / 1024 <= 64)}")
PY
}
