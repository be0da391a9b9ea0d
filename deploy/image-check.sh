#!/usr/bin/env bash
# Builds drcheck's container image without a container engine's daemon — buildah with
# chroot isolation, over a Debian bookworm base made here with debootstrap and imported
# locally (no registry is reached), the Rust stage replaced by the binary built on this
# machine — then runs `drcheck --version` and one `drcheck verify` inside it, as its
# non-root user (10001), against a test primary on this host: the image restores and
# validates a backup, contained.
#
#   DRCHECK_BIN=target/debug/drcheck deploy/image-check.sh     # root; tests/tests/deploy.rs runs it
#   PG_MAJORS="15 18" deploy/image-check.sh                   # asks for more majors (PGDG, where reachable)
#
# Everything (buildah's storage, the base, the primary) lives in one directory, removed
# at the end; two checks at once do not share anything.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "image-check: needs root (buildah, chroot, bind mounts)" >&2; exit 2; }
for tool in buildah debootstrap chroot; do
  command -v "$tool" >/dev/null || { echo "image-check: $tool not found (scripts/setup.sh installs it)" >&2; exit 2; }
done
bin=$(realpath "${DRCHECK_BIN:-target/debug/drcheck}")
[ -x "$bin" ] || { echo "image-check: no drcheck binary at $bin (cargo build --bin drcheck)" >&2; exit 2; }
majors=${PG_MAJORS:-15}
work=$(mktemp -d /tmp/drcheck-image.XXXXXX)
chmod 755 "$work"
b() { buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs "$@"; }
# This machine refuses raising resource limits: the containers get the host's.
export CONTAINERS_CONF=$work/containers.conf
printf '[containers]\ndefault_ulimits = []\n' >"$CONTAINERS_CONF"
ctr=
mnt=
pg_data=
cleanup() {
  if [ -n "$mnt" ]; then
    for d in sys dev/pts dev proc; do umount "$mnt/$d" 2>/dev/null || true; done
  fi
  [ -n "$ctr" ] && b rm "$ctr" >/dev/null 2>&1 || true
  [ -n "$pg_data" ] && su postgres -s /bin/sh -c "/usr/lib/postgresql/15/bin/pg_ctl -D $pg_data -m immediate stop" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
t0=$(date +%s)

# The base: Debian bookworm (minbase) from the machine's own Debian mirror.
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
mirror=${mirror:-http://deb.debian.org/debian}
debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
base=$(b from scratch)
base_mnt=$(b mount "$base")
cp -a "$work/rootfs/." "$base_mnt/"
b umount "$base" >/dev/null
b commit -q "$base" docker.io/library/debian:bookworm-slim >/dev/null
b rm "$base" >/dev/null
rm -rf "$work/rootfs"
echo "image-check: base imported ($(( $(date +%s) - t0 )) s)"

# The binary, as the image's `binary` stage expects it.
bctr=$(b from scratch)
b copy "$bctr" "$bin" /src/target/release/drcheck >/dev/null
b commit -q "$bctr" localhost/drcheck-binary:check >/dev/null
b rm "$bctr" >/dev/null

mkdir -p "$work/context"
b bud --isolation chroot --pull-never --layers=false \
  --build-arg BINARY_FROM=localhost/drcheck-binary:check --build-arg PG_MAJORS="$majors" \
  -f deploy/Dockerfile -t localhost/drcheck:check "$work/context" >"$work/bud.log" 2>&1 \
  || { tail -40 "$work/bud.log" >&2; exit 1; }
grep -h "cannot be reached" "$work/bud.log" >&2 || true
echo "image-check: image built ($(( $(date +%s) - t0 )) s)"

# Inside it: its user, its PostgreSQL, a test primary on this host, a backup in a
# filesystem store in the image's scratch volume.
ctr=$(b from localhost/drcheck:check)
mnt=$(b mount "$ctr")
for d in proc dev dev/pts sys; do mount --bind "/$d" "$mnt/$d"; done
chroot_bin=$(command -v chroot)
inside() { env -i HOME=/var/lib/drcheck PATH=/usr/local/bin:/usr/bin:/bin "$chroot_bin" --userspec=10001:10001 "$mnt" "$@"; }
inside /usr/local/bin/drcheck --version
echo "image-check: PostgreSQL in the image: $(cat "$mnt/etc/drcheck-postgresql-majors")"

pg_data=$work/pg/data
mkdir -p "$work/pg" && chown postgres "$work/pg"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
password=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
su postgres -s /bin/sh -c "/usr/lib/postgresql/15/bin/initdb -D $pg_data -U postgres --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 --no-sync" >/dev/null
su postgres -s /bin/sh -c "/usr/lib/postgresql/15/bin/pg_ctl -D $pg_data -w -l $work/pg/log -o '-p $port -k $work/pg -c listen_addresses=127.0.0.1' start" >/dev/null
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h "$work/pg" -p "$port" -U postgres "$@"; }
psql_ -d postgres -c "create database shop" -c "create role verifier login password '$password'" -c "grant pg_read_all_data to verifier"
psql_ -d shop -c "create table accounts (id int primary key, balance int); insert into accounts select g, g from generate_series(1, 1000) g"
store=$mnt/var/tmp/drcheck/store
mkdir -p "$store"
pg_dump -Fc -h "$work/pg" -p "$port" -U postgres -f "$store/shop.dump" shop
mkdir -p "$mnt/etc/drcheck"
cat >"$mnt/etc/drcheck/drcheck.toml" <<EOF
[state]
url = "sqlite:///var/tmp/drcheck/history.db"
[sandbox]
scratch_dir = "/var/tmp/drcheck"
[storage.local]
kind = "filesystem"
path = "/var/tmp/drcheck/store"
[[target]]
name = "shop"
primary = "postgres://verifier:$password@127.0.0.1:$port/shop"
storage = "local"
rto = "10m"
rpo = "30d"
EOF
chown -R 10001:10001 "$store" "$mnt/etc/drcheck"
set +e
inside /usr/local/bin/drcheck --config /etc/drcheck/drcheck.toml verify --target shop --json >"$work/run.json" 2>"$work/run.log"
code=$?
set -e
python3 - "$work/run.json" "$code" <<'PY' || { cat "$work/run.log" >&2; exit 1; }
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
code = int(sys.argv[2])
contained = (run.get("restore") or {}).get("containment")
print(f"image-check: verify inside the image as uid 10001: {run['result']} (exit {code}), "
      f"PostgreSQL {run['restore']['server_major']}, containment {contained}")
assert run["result"] == "passed" and code == 0, run
assert contained and contained != "none", run
PY
echo "image-check: passed ($(( $(date +%s) - t0 )) s)"
