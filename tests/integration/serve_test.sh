#!/usr/bin/env bash
# `hyperpool serve`: prints the connection string first, serves psql, keeps the
# origin password out of its logs, exits 0 on SIGTERM. Also `validate` and
# the --help texts. Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
set -euo pipefail
: "${HYPERPOOL_BINARY:?}" "${HYPERPOOL_TEST_PG_ENV:?}"
env_get() { grep "^$1=" "$HYPERPOOL_TEST_PG_ENV" | head -1 | cut -d= -f2-; }
urlencode() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
PGBIN=$(env_get PGBIN)
PW=$(env_get ADMIN_PASSWORD)
ORIGIN="postgresql://$(env_get ADMIN_USER):$(urlencode "$PW")@$(env_get PGHOST):$(env_get PGPORT)/$(env_get PGDATABASE)?sslmode=disable"
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; echo "--- serve stderr:" >&2; cat "$tmp/err" >&2 || true; exit 1; }

# Polls `cmd` every 0.1 s until it succeeds or `secs` pass.
wait_for() { local secs=$1; shift; local end=$((SECONDS + secs)); until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.1; done; }

# --help documents every option.
help=$("$HYPERPOOL_BINARY" serve --help)
for opt in --origin --listen --pool-size --min-idle --acquire-timeout --idle-timeout --max-lifetime \
           --pool-mode --user --password --database --threads --max-pinned --pinned-idle-timeout; do
  grep -q -- "$opt" <<<"$help" || fail "serve --help lacks $opt"
done
if "$HYPERPOOL_BINARY" serve --origin "$ORIGIN" --max-pinned 0 >/dev/null 2>&1; then
  fail "serve accepted --max-pinned 0"
fi
top_help=$("$HYPERPOOL_BINARY" --help)  # captured first: grep -q closing a pipe early would SIGPIPE the binary under pipefail
grep -q "serve" <<<"$top_help" || fail "hyperpool --help lacks serve"
grep -q "validate" <<<"$top_help" || fail "hyperpool --help lacks validate"

# validate: 0 on a good origin, non-zero on a refused one.
"$HYPERPOOL_BINARY" validate "$ORIGIN" --timeout 10000 >"$tmp/validate" || fail "validate failed: $(cat "$tmp/validate")"
if "$HYPERPOOL_BINARY" validate "postgresql://x:y@127.0.0.1:1/db?sslmode=disable" --timeout 3000 >/dev/null; then
  fail "validate accepted a refused origin"
fi

"$HYPERPOOL_BINARY" serve --origin "$ORIGIN" --pool-size 2 --threads 2 --user app --database appdb \
  >"$tmp/out" 2>"$tmp/err" &
pid=$!
wait_for 15 test -s "$tmp/out" || fail "no connection string on stdout"
url=$(head -1 "$tmp/out")
[[ "$url" == postgresql://app:*@127.0.0.1:*/appdb\?sslmode=disable ]] || fail "unexpected first line: $url"

out=$("$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$url" -c "SELECT 40 + 2") || fail "psql through serve failed"
[ "$out" = 42 ] || fail "psql printed '$out'"
out=$("$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$url" -c "BEGIN; SELECT 1; COMMIT; SELECT current_database()") \
  || fail "second psql failed"
grep -q "$(env_get PGDATABASE)" <<<"$out" || fail "current_database printed '$out'"

if grep -qF -- "$PW" "$tmp/err"; then fail "the origin password appears in the log"; fi

kill -TERM "$pid"
# Bounded wait for a clean exit (no background guard: its sleep would hold
# ctest's output pipe open and it would inherit the EXIT trap).
wait_for 15 bash -c "! kill -0 $pid 2>/dev/null" || { kill -KILL "$pid"; fail "serve did not stop within 15 s of SIGTERM"; }
set +e
wait "$pid"
rc=$?
set -e
pid=
[ "$rc" = 0 ] || fail "serve exited with $rc after SIGTERM"
echo "serve_test: ok"
