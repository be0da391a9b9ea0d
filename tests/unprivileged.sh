#!/usr/bin/env bash
# The adversarial corpus again, with drcheck running as an unprivileged user (the
# shipped container's case: drcheck and the sandbox server share one uid, so Landlock,
# non-dumpability and the per-run password are all that stand between them).
# Needs root (to create the user and switch to it); elsewhere the main run already is
# the unprivileged case.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "unprivileged.sh: already unprivileged; the main test run covers it" >&2
  exit 0
fi
user=drcheck-ci
id -u "$user" >/dev/null 2>&1 || useradd --system --user-group --no-create-home --shell /usr/sbin/nologin "$user"
uid=$(id -u "$user")
gid=$(id -g "$user")
# The checkout may live where the user cannot enter (/root): run a copy of the binary.
dir=$(mktemp -d /tmp/drcheck-unprivileged.XXXXXX)
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
install -m 755 target/debug/drcheck "$dir/drcheck"
cat >"$dir/drcheck-as-$user" <<WRAP
#!/bin/sh
exec setpriv --reuid=$uid --regid=$gid --clear-groups -- $dir/drcheck "\$@"
WRAP
chmod 755 "$dir/drcheck-as-$user"
# The tests whose defence depends on who drcheck runs as (the sandbox's containment,
# another run's sandbox, the reaper, a tool's reach); not the forged verdicts, bombs,
# leases and messages, which are the same whoever runs them (a new test is included
# unless it is named here).
same_for_everyone='test(/^forged::/) or test(/bomb/) or test(/wal_segment/) or test(/lease/) or test(/api_token/)
  or test(/userinfo/) or test(/error_text/) or test(/drill_variables/)'
echo "unprivileged.sh: the adversarial identity tests with drcheck as $user (uid $uid)" >&2
# Its pristine-catalog cache is its own (the run's shared one is root's).
DRCHECK_CACHE_DIR= DRCHECK_BIN="$dir/drcheck-as-$user" DRCHECK_TEST_USER="$user" DRCHECK_HELPER_BIN="$dir/drcheck" \
  cargo nextest run --locked -p drcheck-e2e --test adversarial --no-fail-fast -E "not ($same_for_everyone)" "$@"
