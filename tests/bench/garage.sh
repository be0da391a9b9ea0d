#!/usr/bin/env bash
# Garage — a production S3 server that serves ranged GETs without reading the whole
# object (unlike moto) — for the benchmarks, never for CI. Sourced by the benchmarks:
#
#   . tests/bench/garage.sh
#   garage_start DIR      # installs garage (cargo install, once), starts a one-node
#                         # cluster in DIR; sets GARAGE_PORT, GARAGE_KEY, GARAGE_SECRET,
#                         # GARAGE_PID and makes bucket "bench"
#   garage_stop
#
# GARAGE_BIN overrides the binary; otherwise `cargo install --locked garage` into
# BENCH_TOOLS (default /var/tmp/drcheck-bench-tools), once.
garage_install() {
  local tools=${BENCH_TOOLS:-/var/tmp/drcheck-bench-tools}
  if [ -n "${GARAGE_BIN:-}" ]; then return; fi
  if command -v garage >/dev/null 2>&1; then GARAGE_BIN=$(command -v garage); return; fi
  if [ ! -x "$tools/bin/garage" ]; then
    echo "bench: installing garage (cargo install --locked garage; once, several minutes)…" >&2
    cargo install -q --locked garage --root "$tools"
  fi
  GARAGE_BIN=$tools/bin/garage
}

garage_start() {
  local dir=$1
  garage_install
  rm -rf "$dir"; mkdir -p "$dir/meta" "$dir/data"
  local rpc_port s3_port
  rpc_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  s3_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat >"$dir/garage.toml" <<TOML
metadata_dir = "$dir/meta"
data_dir = "$dir/data"
db_engine = "lmdb"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$rpc_port"
rpc_public_addr = "127.0.0.1:$rpc_port"
rpc_secret = "$(openssl rand -hex 32)"
[s3_api]
s3_region = "us-east-1"
api_bind_addr = "127.0.0.1:$s3_port"
root_domain = ".s3.garage.localhost"
TOML
  chmod 600 "$dir/garage.toml"
  "$GARAGE_BIN" -c "$dir/garage.toml" server >"$dir/garage.log" 2>&1 &
  GARAGE_PID=$!
  local g="$GARAGE_BIN -c $dir/garage.toml"
  for _ in $(seq 100); do $g status >/dev/null 2>&1 && break; sleep 0.2; done
  local node
  node=$($g status 2>/dev/null | awk '/^[0-9a-f]{16}/ {print $1; exit}')
  $g layout assign -z dc1 -c 20G "$node" >/dev/null
  $g layout apply --version 1 >/dev/null
  $g bucket create bench >/dev/null
  local key
  key=$($g key create bench-key 2>/dev/null)
  GARAGE_KEY=$(echo "$key" | awk '/Key ID/ {print $NF}')
  GARAGE_SECRET=$(echo "$key" | awk '/Secret key/ {print $NF}')
  $g bucket allow --read --write --owner bench --key bench-key >/dev/null
  GARAGE_PORT=$s3_port
  for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$s3_port") 2>/dev/null && break; sleep 0.1; done
}

garage_stop() {
  [ -n "${GARAGE_PID:-}" ] && kill "$GARAGE_PID" 2>/dev/null || true
}
