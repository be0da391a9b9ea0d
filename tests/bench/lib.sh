# What every benchmark shares; sourced from the repository root after `set -euo pipefail`:
# the setup, the drcheck binary to measure ($drcheck: DRCHECK_BIN or a fresh release
# build), helpers, and a cleanup that stops every cluster in `clusters` and every
# process in `pids` on exit.
bash scripts/setup.sh
if [ -n "${DRCHECK_BIN:-}" ]; then drcheck=$DRCHECK_BIN; else cargo build -q --release --bin drcheck; drcheck=$PWD/target/release/drcheck; fi
pgbin=/usr/lib/postgresql/15/bin
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$2 - $1:.2f}')"; }
pids=()
clusters=()
bench_cleanup() {
  for c in "${clusters[@]}"; do as_pg "$pgbin/pg_ctl" -D "$c" -m immediate stop >/dev/null 2>&1 || true; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap bench_cleanup EXIT
# moto's S3 server on a free port, logging to $1, stopped on exit; sets s3_port and the
# AWS variables, defines s3 (the aws CLI against it) and makes bucket $2.
start_moto() { # LOG BUCKET
  s3_port=$(free_port)
  moto_server -H 127.0.0.1 -p "$s3_port" >"$1" 2>&1 &
  pids+=($!)
  export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
  for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$s3_port") 2>/dev/null && break; sleep 0.1; done
  s3 mb "s3://$2" >/dev/null
}
s3() { aws --endpoint-url "http://127.0.0.1:$s3_port" s3 "$@"; }
# A private CA and a server certificate it signed for 127.0.0.1 in $1 (ca.pem, cert.pem,
# key.pem), made once: a self-signed certificate that is its own CA is refused as a
# server's by rustls (CaUsedAsEndEntity), though OpenSSL takes it — an operator's PKI
# looks like this.
make_tls() { # DIR
  [ -s "$1/ca.pem" ] && [ -s "$1/cert.pem" ] && return
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=drcheck-bench-ca \
    -keyout "$1/ca.key" -out "$1/ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$1/key.pem" -out "$1/cert.csr" 2>/dev/null
  printf 'subjectAltName=DNS:127.0.0.1,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$1/cert.ext"
  openssl x509 -req -days 3650 -in "$1/cert.csr" -CA "$1/ca.pem" -CAkey "$1/ca.key" -CAcreateserial \
    -extfile "$1/cert.ext" -out "$1/cert.pem" 2>/dev/null
  chmod 644 "$1/ca.pem" "$1/cert.pem"
}
