#!/usr/bin/env bash
# The origin password stays out of /proc/PID/cmdline (issue: "the origin
# password appears in /proc/PID/cmdline"): a password in --origin is
# redacted in place and warned about; --origin-password-file, PGPASSWORD and
# a pgpass file log in without any password on the command line; an unsafe
# password file is refused. Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV.
set -euo pipefail
: "${HYPERPOOL_BINARY:?}" "${HYPERPOOL_TEST_PG_ENV:?}"
env_get() { grep "^$1=" "$HYPERPOOL_TEST_PG_ENV" | head -1 | cut -d= -f2-; }
urlencode() { /usr/bin/python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
PGBIN=$(env_get PGBIN)
PW=$(env_get ADMIN_PASSWORD)
USER_=$(env_get ADMIN_USER)
HOSTPORT="$(env_get PGHOST):$(env_get PGPORT)"
DB=$(env_get PGDATABASE)
BARE="postgresql://$USER_@$HOSTPORT/$DB?sslmode=disable"
WITH_PW="postgresql://$USER_:$(urlencode "$PW")@$HOSTPORT/$DB?sslmode=disable"
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; echo "--- stderr:" >&2; cat "$tmp/err" >&2 || true; exit 1; }
wait_for() { local secs=$1; shift; local end=$((SECONDS + secs)); until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.1; done; }

# start_serve ARGS...: runs serve with ARGS (and env given by the caller),
# waits for its connection string, checks a query through it.
start_serve() {
  : >"$tmp/out"; : >"$tmp/err"
  "$HYPERPOOL_BINARY" serve --pool-size 1 --threads 1 "$@" >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  wait_for 15 test -s "$tmp/out" || fail "no connection string ($*)"
  local out
  out=$("$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$(head -1 "$tmp/out")" -c "SELECT 'ok-' || 1") \
    || fail "psql through serve failed ($*)"
  [ "$out" = ok-1 ] || fail "psql printed '$out'"
}
stop_serve() { kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=; }
cmdline() { tr '\0' ' ' <"/proc/$pid/cmdline"; }

# 1. A password inside --origin works, is warned about, and is gone from cmdline.
start_serve --origin "$WITH_PW" --password app-secret-123
grep -qF -- "$PW" <<<"$(cmdline)" && fail "origin password visible in /proc/PID/cmdline: $(cmdline)"
grep -qF -- "app-secret-123" <<<"$(cmdline)" && fail "--password value visible in /proc/PID/cmdline"
grep -q "origin password on the command line is visible" "$tmp/err" || fail "no warning for a password in --origin"
grep -q -- "--password-file" "$tmp/err" || fail "no warning for --password on the command line"
grep -q -- "--origin" <<<"$(cmdline)" || fail "cmdline lost the option names: $(cmdline)"
stop_serve

# 2. --origin-password-file (mode 0600).
printf '%s\n' "$PW" >"$tmp/pw"; chmod 600 "$tmp/pw"
start_serve --origin "$BARE" --origin-password-file "$tmp/pw"
grep -q "visible" "$tmp/err" && fail "warned although no password was on the command line"
stop_serve

# 3. PGPASSWORD.
PGPASSWORD="$PW" start_serve --origin "$BARE"
stop_serve

# 4. A pgpass file (PGPASSFILE), with a wildcard port.
printf '%s:*:%s:%s:%s\n' "$(env_get PGHOST)" "$DB" "$USER_" "$PW" >"$tmp/pgpass"; chmod 600 "$tmp/pgpass"
PGPASSFILE="$tmp/pgpass" start_serve --origin "$BARE"
stop_serve

# 5. A password file others can read is refused with a clear message, quoting no password.
chmod 644 "$tmp/pw"
set +e
"$HYPERPOOL_BINARY" serve --origin "$BARE" --origin-password-file "$tmp/pw" >"$tmp/out" 2>"$tmp/err" </dev/null &
pid=$!
wait_for 15 bash -c "! kill -0 $pid 2>/dev/null" || fail "serve kept running with an unsafe password file"
wait "$pid"; rc=$?; pid=
set -e
[ "$rc" != 0 ] || fail "serve exited 0 with an unsafe password file"
grep -q "group or world access" "$tmp/err" || fail "no clear message for an unsafe password file"
grep -qF -- "$PW" "$tmp/err" && fail "the password appears in the error"

# 6. validate takes the same sources.
chmod 600 "$tmp/pw"
"$HYPERPOOL_BINARY" validate "$BARE" --origin-password-file "$tmp/pw" --timeout 10000 >/dev/null \
  || fail "validate --origin-password-file failed"
echo "secrets_test: ok"
