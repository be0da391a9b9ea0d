#!/usr/bin/env bash
# Encrypted-backup benchmark (issue 27): the 1 GB custom dump of tests/bench/restore.sh,
# encrypted with age (an X25519 recipient) and with gpg (symmetric, as backup images do),
# on moto. drcheck's fetch + decrypt + restore (`verify`, restore_jobs = 2) against the
# hand-written way in the same run: `aws s3 cp`, then `age -d` / `gpg -d`, then initdb +
# `pg_restore -j 2`. Prints the times, the ratios with met/MISSED (target ≤ 0.95) and
# drcheck's peak RSS.
#
#   tests/bench/encrypted.sh
#
# BENCH_DIR (default /var/tmp/drcheck-bench) holds the dump (made by restore.sh when
# missing: BENCH_PARTS=custom) and the encrypted copies; DRCHECK_BIN runs that binary
# instead of building target/release/drcheck; BENCH_KINDS (default "age gpg") picks.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh

work=${BENCH_DIR:-/var/tmp/drcheck-bench}
jobs=2
kinds=${BENCH_KINDS:-age gpg}
dump=$work/bench.dump
if [ ! -s "$dump" ]; then
  echo "bench: no $dump yet: making it (tests/bench/restore.sh's dataset)…"
  BENCH_PARTS=custom BENCH_NO_GARAGE=1 BENCH_NO_MOTO=1 DRCHECK_BIN=$drcheck bash tests/bench/restore.sh >/dev/null
fi
mkdir -p "$work/enc" "$work/scratch"
chmod 700 "$work/enc"
chmod 1777 "$work/scratch"
[ "$(id -u)" = 0 ] && chown postgres: "$work"
identity=$work/enc/identity.txt
[ -s "$identity" ] || age-keygen -o "$identity" 2>/dev/null
recipient=$(age-keygen -y "$identity")
pass=$(head -c 24 /dev/urandom | base64)
printf '%s' "$pass" >"$work/enc/pass"
echo "bench: encrypting the $(stat -c %s "$dump")-byte dump with age and gpg…"
age -r "$recipient" -o "$work/enc/bench.dump.age" "$dump"
gpg --homedir "$work/enc" --batch --yes --pinentry-mode loopback --passphrase-file "$work/enc/pass" \
  --symmetric -o "$work/enc/bench.dump.gpg" "$dump" 2>/dev/null
gpgconf --homedir "$work/enc" --kill all 2>/dev/null || true

start_moto "$work/moto.log" bench
for k in $kinds; do s3 cp --only-show-errors "$work/enc/bench.dump.$k" "s3://bench/$k/bench.dump.$k"; done

start_cluster() { # DIR PORT
  rm -rf "$1"
  as_pg "$pgbin/initdb" -D "$1" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null
  as_pg "$pgbin/pg_ctl" -D "$1" -l "$1.log" -w -o "-c listen_addresses= -p $2 -k $work" start >/dev/null
  clusters+=("$1")
}

hand() { # KIND → hand_s
  local port t0 t1 gnupg
  rm -f "$work/hand.enc" "$work/hand.dump"
  port=$(free_port)
  t0=$(now)
  s3 cp --only-show-errors "s3://bench/$1/bench.dump.$1" "$work/hand.enc"
  if [ "$1" = age ]; then
    age -d -i "$identity" -o "$work/hand.dump" "$work/hand.enc"
  else
    gnupg=$(mktemp -d); chmod 700 "$gnupg"
    gpg --homedir "$gnupg" --batch --no-autostart --pinentry-mode loopback --passphrase-file "$work/enc/pass" \
      -o "$work/hand.dump" -d "$work/hand.enc" 2>/dev/null
    rm -rf "$gnupg"
  fi
  start_cluster "$work/hand" "$port"
  psql -X -q -h "$work" -p "$port" -U postgres -d postgres -c "create database restored"
  pg_restore -j "$jobs" --no-owner --no-privileges --exit-on-error -h "$work" -p "$port" -U postgres -d restored "$work/hand.dump"
  t1=$(now)
  as_pg "$pgbin/pg_ctl" -D "$work/hand" -m fast stop >/dev/null
  rm -rf "$work/hand" "$work/hand.enc" "$work/hand.dump"
  hand_s=$(elapsed "$t0" "$t1")
}

config() { # KIND
  cat >"$work/enc/drcheck-$1.toml" <<TOML
[state]
url = "sqlite://$work/enc/history.db"
[sandbox]
scratch_dir = "$work/scratch"
[storage.s3]
kind = "s3"
bucket = "bench"
endpoint = "http://127.0.0.1:$s3_port"
path_style = true
[[target]]
name = "bench"
storage = "s3"
prefix = "$1/"
rto = "2h"
rpo = "26h"
restore_jobs = $jobs
[target.validators]
enabled = ["row_counts"]
[target.decrypt]
age_identity = "$identity"
gpg_passphrase = "\${BENCH_GPG_PASSPHRASE}"
TOML
  echo "$work/enc/drcheck-$1.toml"
}

mine() { # KIND → "rto peak_rss_kib"
  local out=$work/enc/run.json rss=$work/enc/rss.json
  BENCH_GPG_PASSPHRASE=$pass python3 tests/bench/peak_rss.py "$rss" "$drcheck" --config "$(config "$1")" verify --json >"$out" || true
  python3 - "$out" "$rss" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
rss = json.load(open(sys.argv[2]))
assert run["result"] == "passed" and run["backup"]["encryption"], run
print(run["rto"]["measured_seconds"], rss["peak_rss_kib"])
PY
}

results=()
for k in $kinds; do
  echo "bench: $k: by hand (aws s3 cp, then ${k} -d, then initdb + pg_restore -j $jobs)…"
  hand "$k"
  echo "bench: $k: drcheck verify (fetch + decrypt + restore, restore_jobs = $jobs)…"
  read -r dr rss < <(mine "$k")
  echo "bench: $k: by hand $hand_s s, drcheck $dr s, peak RSS $((rss / 1024)) MiB"
  results+=("$k $hand_s $dr $rss")
done

python3 - "${results[@]}" <<'PY'
import sys
print()
print("encrypted 1 GB custom dump on moto (fetch + decrypt + restore):")
for line in sys.argv[1:]:
    kind, hand, mine, rss = line.split()
    hand, mine, rss = float(hand), float(mine), int(rss)
    r = mine / hand
    print(f"  {kind:<4} by hand {hand:8.2f} s   drcheck {mine:8.2f} s   peak RSS {rss / 1024:6.1f} MiB")
    print(f"ratio drcheck/hand ({kind}):  {r:.3f}   (target <= 0.95) {'met' if r <= 0.95 else 'MISSED'}")
    print(f"peak RSS ({kind}): {rss / 1024:.1f} MiB (the download's bound, 64 MiB) {'met' if rss / 1024 <= 64 else 'MISSED'}")
PY
