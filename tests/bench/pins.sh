#!/usr/bin/env bash
# Pinned proofs at retention scale (issue 37): a target with 1,000 proven backups in
# moto, each pinned (key, size, ETag) in the history. Times `drcheck backups list` with
# pins compared (pin = true) against the same listing without (pin = false) — the
# overhead of comparing every pin — and against the plain way of the same check by hand
# (`aws s3api list-objects-v2` and a script comparing each ETag and size with a saved
# manifest). Medians of BENCH_REPEAT (default 5) runs; prints the ratios.
#
#   tests/bench/pins.sh
#
# BENCH_BACKUPS (default 1000) sizes the target.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh

n=${BENCH_BACKUPS:-1000}
repeat=${BENCH_REPEAT:-5}
work=$(mktemp -d /var/tmp/drcheck-bench-pins.XXXXXX)
pids_cleanup() { rm -rf "$work"; }
trap 'bench_cleanup; pids_cleanup' EXIT
bucket=pins
start_moto "$work/moto.log" "$bucket"

echo "bench: $n backups of 4 KiB each in s3://$bucket/dumps/…"
mkdir -p "$work/up"
python3 - "$work/up" "$n" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(os.path.join(d, f"orders-{i:05d}.dump"), "wb") as f:
        f.write(os.urandom(4096))
PY
s3 sync --quiet "$work/up" "s3://$bucket/dumps/"
aws --endpoint-url "http://127.0.0.1:$s3_port" s3api list-objects-v2 --bucket "$bucket" --prefix dumps/ >"$work/listed.json"

config() { # PIN
  cat <<EOF
[state]
url = "sqlite://$work/history.db"
[storage.s3]
kind = "s3"
bucket = "$bucket"
endpoint = "http://127.0.0.1:$s3_port"
path_style = true
[[target]]
name = "orders"
storage = "s3"
prefix = "dumps/"
rto = "10m"
rpo = "30d"
pin = $1
EOF
}
config true >"$work/pin.toml"
config false >"$work/nopin.toml"
# drcheck makes the history with its migrations; each backup's proof, pinned as a pass
# would pin it, is written directly.
"$drcheck" --config "$work/pin.toml" history >/dev/null
python3 - "$work/history.db" "$work/listed.json" "$work/manifest.json" <<'PY'
import json, sqlite3, sys
db, listed, manifest = sys.argv[1:4]
objs = json.load(open(listed))["Contents"]
con = sqlite3.connect(db)
rows, saved = [], {}
for o in objs:
    at = o["LastModified"].replace("+00:00", "Z")
    pin = {"at": at, "parts": [{"key": o["Key"], "size": o["Size"], "etag": o["ETag"]}]}
    rows.append(("orders", o["Key"], at, at, at, "bench", 0, json.dumps(pin)))
    saved[o["Key"]] = [o["Size"], o["ETag"]]
con.executemany(
    "insert into backup_proofs (target, backup_key, consistent_at, first_passed_at, last_passed_at, last_run_id,"
    " points_proven, pin) values (?,?,?,?,?,?,?,?)", rows)
con.commit()
json.dump(saved, open(manifest, "w"))
PY

cat >"$work/by_hand.sh" <<EOF
#!/usr/bin/env bash
# The plain way: list, and compare each object with the manifest saved when proven.
set -euo pipefail
aws --endpoint-url "http://127.0.0.1:$s3_port" s3api list-objects-v2 --bucket "$bucket" --prefix dumps/ >"$work/now.json"
python3 - "$work/manifest.json" "$work/now.json" <<'PY'
import json, sys
saved = json.load(open(sys.argv[1]))
now = {o["Key"]: [o["Size"], o["ETag"]] for o in json.load(open(sys.argv[2]))["Contents"]}
changed = [k for k, v in saved.items() if now.get(k) != v]
print(len(changed))
PY
EOF
chmod +x "$work/by_hand.sh"

median() { # COMMAND…: the median wall time of $repeat runs
  local times=()
  for _ in $(seq "$repeat"); do
    local t0; t0=$(now)
    "$@" >/dev/null
    times+=("$(elapsed "$t0" "$(now)")")
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n "$(((repeat + 1) / 2))p"
}

# Nothing changed: the listing says so for every backup.
changed=$("$drcheck" --config "$work/pin.toml" backups list --json | python3 -c '
import json, sys
t = json.load(sys.stdin)["targets"][0]
print(sum(1 for b in t["backups"] if b.get("changed_since_proven")) + len(t["vanished_since_proven"]), sum(1 for b in t["backups"] if b.get("pinned")))')
echo "bench: drcheck compares $(echo "$changed" | cut -d' ' -f2) pins, $(echo "$changed" | cut -d' ' -f1) changed"
with=$(median "$drcheck" --config "$work/pin.toml" backups list --json)
without=$(median "$drcheck" --config "$work/nopin.toml" backups list --json)
hand=$(median "$work/by_hand.sh")
python3 - "$n" "$with" "$without" "$hand" <<'PY'
import sys
n, w, wo, h = int(sys.argv[1]), *map(float, sys.argv[2:5])
print(f"backups list, {n} proven backups pinned:   {w:.2f} s (median)")
print(f"backups list, pins not compared (pin=false): {wo:.2f} s   overhead {w - wo:+.2f} s, ratio {w / wo:.2f}×")
print(f"by hand (list-objects-v2 + a manifest):      {h:.2f} s   drcheck / by hand = {w / h:.2f}×")
PY
