#!/usr/bin/env bash
# The dashboard in a real browser (dashboard_test.mjs does the checks):
# `hyperpool serve --metrics-listen 127.0.0.1:0 --pool-size 3` on a role and
# schema of this test's own, a table of 100 rows, and pgbench reading it
# (98%, cacheable) and updating it (2%, invalidations) through serve.
# Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both);
# BROWSER_TEST_OUT: where the screenshot goes (default: a temp dir, kept).
set -euo pipefail
: "${HYPERPOOL_BINARY:?}" "${HYPERPOOL_TEST_PG_ENV:?}"
here=$(cd "$(dirname "$0")" && pwd)
env_get() { grep "^$1=" "$HYPERPOOL_TEST_PG_ENV" | head -1 | cut -d= -f2-; }
urlencode() { /usr/bin/python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
PGBIN=$(env_get PGBIN)
ADMIN_URL="postgresql://$(env_get ADMIN_USER):$(urlencode "$(env_get ADMIN_PASSWORD)")@$(env_get PGHOST):$(env_get PGPORT)/$(env_get PGDATABASE)?sslmode=disable"
ROLE="hp_dashboard_$$"
ROLE_PW="pw_$RANDOM$RANDOM"
out=${BROWSER_TEST_OUT:-$(mktemp -d /tmp/hp-browser-XXXXXX)}
mkdir -p "$out"
tmp=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  "$PGBIN/psql" -XAtq -d "$ADMIN_URL" -c "DROP SCHEMA IF EXISTS $ROLE CASCADE; DROP ROLE IF EXISTS $ROLE" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "dashboard_test: FAIL: $*" >&2; echo "--- serve stderr (tail):" >&2; tail -20 "$tmp/err" >&2 || true; exit 1; }
wait_for() { local secs=$1; shift; local end=$((SECONDS + secs)); until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.1; done; }

"$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$ADMIN_URL" >/dev/null <<SQL
CREATE ROLE $ROLE LOGIN PASSWORD '$ROLE_PW';
CREATE SCHEMA $ROLE AUTHORIZATION $ROLE;
CREATE TABLE $ROLE.t (id int PRIMARY KEY, v text NOT NULL);
INSERT INTO $ROLE.t SELECT i, 'row ' || i FROM generate_series(1, 100) i;
ALTER TABLE $ROLE.t OWNER TO $ROLE;
SQL
DIRECT="postgresql://$ROLE:$ROLE_PW@$(env_get PGHOST):$(env_get PGPORT)/$(env_get PGDATABASE)?sslmode=disable"
"$HYPERPOOL_BINARY" serve --origin "$DIRECT" --pool-size 3 --threads 2 --metrics-listen 127.0.0.1:0 \
  >"$tmp/out" 2>"$tmp/err" &
pid=$!
wait_for 15 test -s "$tmp/out" || fail "no connection string on stdout"
url=$(head -1 "$tmp/out")
wait_for 5 grep -q 'dashboard: http://' "$tmp/err" || fail "the dashboard's address was not logged"
metrics=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$tmp/err" | head -1)

printf '\\set id random(1, 100)\nSELECT v FROM t WHERE id = :id;\n' >"$tmp/read.sql"
printf '\\set id random(1, 100)\nUPDATE t SET v = v WHERE id = :id;\n' >"$tmp/write.sql"
args=$(/usr/bin/python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' \
  -n -c 6 -j 2 -T 4 -f "$tmp/read.sql@49" -f "$tmp/write.sql@1" "$url")
PATH="$PGBIN:$PATH" timeout 60 node "$here/dashboard_test.mjs" "$metrics" "$args" "$out" || fail "dashboard_test.mjs failed"
