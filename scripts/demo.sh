#!/usr/bin/env bash
# The local demo: a PostgreSQL primary with sample data (pgbench), moto's S3-compatible
# server, a pg_dump backup uploaded the way a backup job would, and `drcheck verify` on
# built-in defaults. Everything runs on 127.0.0.1 and is stopped when the script ends.
#
#   DEMO_SCALE=10 scripts/demo.sh        # pgbench scale (default 1)
#   DEMO_KEEP=1 scripts/demo.sh          # leave primary and S3 running; prints the one command that stops them
#   DEMO_DIR=/var/tmp/demo scripts/demo.sh   # where the demo's files go (default: a new temp dir per run)
#   DRCHECK_BIN=/path/to/drcheck scripts/demo.sh   # use that binary instead of building one
#
# The demo's files live outside the checkout, in a directory of its own per run (two
# demos at once never share one; a DEMO_DIR another demo holds is refused) that the
# postgres user can enter, so the demo works wherever the checkout is (even in root's
# 0700 home). It installs only what it uses (scripts/setup.sh --demo).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bash scripts/setup.sh --demo

if [ -n "${DEMO_DIR:-}" ]; then
  demo=$DEMO_DIR
  mkdir -p "$demo"
  # One demo per directory: a second one would stop the first one's primary.
  exec 9>"$demo.lock"
  if ! flock -n 9; then
    echo "demo: another demo is using $demo (it holds $demo.lock); choose another DEMO_DIR, or leave it unset" >&2
    exit 1
  fi
else
  demo=$(mktemp -d "${TMPDIR:-/tmp}/drcheck-demo-XXXXXX")
fi
scale=${DEMO_SCALE:-1}
pgbin=/usr/lib/postgresql/15/bin
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

stop_all() {
  [ -f "$demo/data/postmaster.pid" ] && as_pg "$pgbin/pg_ctl" -D "$demo/data" -m fast stop >/dev/null 2>&1 || true
  [ -f "$demo/moto.pid" ] && kill "$(cat "$demo/moto.pid")" 2>/dev/null || true
  rm -f "$demo/moto.pid"
}
cleanup() {
  [ -n "${DEMO_KEEP:-}" ] && return
  stop_all
  # A directory of the demo's own making goes with it.
  [ -n "${DEMO_DIR:-}" ] || rm -rf "$demo"
}
trap cleanup EXIT

# A demo kept earlier in this DEMO_DIR (DEMO_KEEP): stop what it left before starting afresh.
[ -f "$demo/stop.sh" ] && bash "$demo/stop.sh" --keep-files >/dev/null 2>&1 || true
stop_all
find "$demo" -mindepth 1 -delete 2>/dev/null || true
mkdir -p "$demo/scratch" "$demo/sock"
chmod 755 "$demo" "$demo/scratch"
# The postgres user must be able to reach the demo directory through its parents.
if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$demo"; then
  echo "demo: the postgres user cannot enter $demo; set DEMO_DIR to a directory it can reach" >&2
  exit 1
fi
[ "$(id -u)" = 0 ] && chown postgres: "$demo/sock" "$demo"
chmod 1777 "$demo/scratch"

pg_port=$(free_port)
s3_port=$(free_port)
password=$(python3 -c 'import secrets; print(secrets.token_hex(12))')

echo "demo: in $demo — primary on 127.0.0.1:$pg_port, S3 on 127.0.0.1:$s3_port"
as_pg "$pgbin/initdb" -D "$demo/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
  -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null
# (Started without the lock's descriptor: a kept primary must not hold DEMO_DIR's lock.)
as_pg "$pgbin/pg_ctl" -D "$demo/data" -l "$demo/primary.log" -w -o \
  "-c listen_addresses=127.0.0.1 -p $pg_port -k $demo/sock" start >/dev/null 9>&-
psql_pg() { psql -X -q -h "$demo/sock" -p "$pg_port" -U postgres -v ON_ERROR_STOP=1 "$@"; }
psql_pg -d postgres -c "create database orders" \
  -c "create role verifier login password '$password'" \
  -c "grant pg_read_all_data to verifier"
pgbench -q -i -s "$scale" -h "$demo/sock" -p "$pg_port" -U postgres orders 2>/dev/null
# What the example runbooks (runbooks/examples/) work with: customers and their orders.
psql_pg -d orders \
  -c "create table customers (id int primary key, name text not null)" \
  -c "insert into customers select g, 'customer ' || g from generate_series(1, 100) g" \
  -c "create table orders (id serial primary key, customer_id int not null references customers,
        total numeric(10,2) not null, placed_at timestamptz not null default now())" \
  -c "insert into orders (customer_id, total, placed_at)
        select 1 + g % 100, (g % 500) + 0.99, now() - make_interval(mins => g) from generate_series(1, 1000) g"

moto_server -H 127.0.0.1 -p "$s3_port" >"$demo/moto.log" 2>&1 9>&- &
echo $! >"$demo/moto.pid"
export AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$s3_port") 2>/dev/null && break; sleep 0.1; done
s3() { aws --endpoint-url "http://127.0.0.1:$s3_port" s3 "$@"; }
s3 mb s3://demo-backups >/dev/null

key="orders/orders-$(date -u +%Y%m%dT%H%M%SZ).dump"
pg_dump -Fc -h "$demo/sock" -p "$pg_port" -U postgres -f "$demo/orders.dump" orders
s3 cp --only-show-errors "$demo/orders.dump" "s3://demo-backups/$key"
echo "demo: uploaded s3://demo-backups/$key ($(stat -c %s "$demo/orders.dump") bytes)"

cat >"$demo/drcheck.toml" <<TOML
[state]
url = "sqlite://$demo/history.db"
[sandbox]
scratch_dir = "$demo/scratch"
[storage.backups]
kind = "s3"
bucket = "demo-backups"
endpoint = "http://127.0.0.1:$s3_port"
region = "us-east-1"
path_style = true
[[target]]
name = "orders"
primary = "postgres://verifier:\${ORDERS_PW}@127.0.0.1:$pg_port/orders"
storage = "backups"
prefix = "orders/"
rto = "30m"
rpo = "26h"
[target.as_of]
"public.orders" = "placed_at"     # rows written after the backup are not losses
TOML
export ORDERS_PW=$password

if [ -n "${DRCHECK_BIN:-}" ]; then
  drcheck=$DRCHECK_BIN
else
  echo "demo: building drcheck (cargo build: the first build takes about 8 minutes on 2 cores, later ones seconds)…"
  cargo build --bin drcheck
  drcheck=$root/target/debug/drcheck
fi
# The primary and the store the config names are the ones this demo started.
[ "$(psql -X -At -h "$demo/sock" -p "$pg_port" -U postgres -d orders -c 'show data_directory')" = "$demo/data" ] \
  || { echo "demo: 127.0.0.1:$pg_port is not this demo's primary" >&2; exit 1; }
s3 ls "s3://demo-backups/$key" >/dev/null || { echo "demo: the store on :$s3_port lacks this demo's backup" >&2; exit 1; }
echo "demo: drcheck backups list"
"$drcheck" --config "$demo/drcheck.toml" backups list --target orders
echo "demo: drcheck verify"
set +e
"$drcheck" --config "$demo/drcheck.toml" verify --target orders
rc=$?
set -e
echo "demo: drcheck history"
"$drcheck" --config "$demo/drcheck.toml" history
echo "demo: verify of s3://demo-backups/$key exited $rc"
if [ -n "${DEMO_KEEP:-}" ]; then
  as_pg_prefix=
  [ "$(id -u)" = 0 ] && as_pg_prefix="runuser -u postgres -- "
  cat >"$demo/stop.sh" <<STOP
#!/usr/bin/env bash
# Stops what DEMO_KEEP=1 scripts/demo.sh left running in $demo, then removes it.
[ -f "$demo/data/postmaster.pid" ] && ${as_pg_prefix}$pgbin/pg_ctl -D "$demo/data" -m fast stop >/dev/null 2>&1
[ -f "$demo/restored/data/postmaster.pid" ] && ${as_pg_prefix}$pgbin/pg_ctl -D "$demo/restored/data" -m fast stop >/dev/null 2>&1
[ -f "$demo/moto.pid" ] && kill "\$(cat "$demo/moto.pid")" 2>/dev/null
rm -f "$demo/moto.pid"
[ "\${1:-}" = --keep-files ] || rm -rf "$demo" "$demo.lock"
true
STOP
  cat >"$demo/env.sh" <<ENV
export DRCHECK_CONFIG=$demo/drcheck.toml ORDERS_PW=$password AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
ENV
  cat >>"$demo/env.sh" <<ENV
export PATH=$(dirname "$(readlink -f "$drcheck")"):\$PATH
ENV
  # The example drill, against this demo: its application's config, a place for the
  # restored cluster (the postgres user's), a free port.
  printf 'postgresql://postgres@localhost:%s/orders?host=%s\n' "$pg_port" "$demo/sock" >"$demo/app.url"
  mkdir -p "$demo/restored"
  [ "$(id -u)" = 0 ] && chown postgres: "$demo/restored"
  run_as=
  [ "$(id -u)" = 0 ] && run_as=" --var run_as=postgres"
  echo "demo: left running — config $demo/drcheck.toml; for drcheck commands: source $demo/env.sh"
  echo "demo: a DR drill against it (add --dry-run to see its plan first): source $demo/env.sh && drcheck drill run $root/runbooks/examples/restore-from-backup.yaml --var app_conf=$demo/app.url --var new_data=$demo/restored/data --var socket_dir=$demo/restored --var new_port=$(free_port) --var work_dir=$demo/drill$run_as"
  echo "demo: stop everything with: bash $demo/stop.sh"
fi
exit $rc
