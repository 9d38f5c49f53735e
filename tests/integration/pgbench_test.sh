#!/usr/bin/env bash
# pgbench through `hyperpool serve --pool-size 5`: initialisation, 50 clients
# of select-only and the default TPC-B script, no failed transaction, and the
# origin never sees more than 5 backends with application_name hyperpool.
# Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
set -euo pipefail
: "${HYPERPOOL_BINARY:?}" "${HYPERPOOL_TEST_PG_ENV:?}"
env_get() { grep "^$1=" "$HYPERPOOL_TEST_PG_ENV" | head -1 | cut -d= -f2-; }
urlencode() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
PGBIN=$(env_get PGBIN)
ADMIN=$(env_get ADMIN_USER)
PW=$(env_get ADMIN_PASSWORD)
DIRECT="postgresql://$ADMIN:$(urlencode "$PW")@$(env_get PGHOST):$(env_get PGPORT)/$(env_get PGDATABASE)?sslmode=disable"
tmp=$(mktemp -d)
pid=
monitor=
cleanup() {
  [ -n "$monitor" ] && kill "$monitor" 2>/dev/null
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; echo "--- serve stderr (tail):" >&2; tail -20 "$tmp/err" >&2 || true; exit 1; }
wait_for() { local secs=$1; shift; local end=$((SECONDS + secs)); until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.1; done; }

"$HYPERPOOL_BINARY" serve --origin "$DIRECT" --pool-size 5 --threads 2 >"$tmp/out" 2>"$tmp/err" &
pid=$!
wait_for 15 test -s "$tmp/out" || fail "no connection string on stdout"
url=$(head -1 "$tmp/out")

# Samples the origin's hyperpool backends until stopped; records the maximum.
(
  max=0
  while :; do
    n=$("$PGBIN/psql" -XAtq -d "$DIRECT" -c \
      "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'hyperpool'" 2>/dev/null || echo 0)
    [ "$n" -gt "$max" ] && max=$n
    echo "$max" >"$tmp/max"
    sleep 0.1
  done
) &
monitor=$!

run_pgbench() {  # name, args...
  local name=$1; shift
  timeout 60 "$PGBIN/pgbench" "$@" "$url" >"$tmp/$name.out" 2>&1 || { cat "$tmp/$name.out" >&2; fail "pgbench $name failed"; }
  if grep -q "number of failed transactions: [1-9]" "$tmp/$name.out"; then cat "$tmp/$name.out" >&2; fail "pgbench $name had failures"; fi
  grep -E "number of transactions actually processed|tps" "$tmp/$name.out" | sed "s/^/$name: /" || true
}

run_pgbench init -i -s 1 -q
run_pgbench select_only -S -c 50 -j 2 -t 200
grep -q "processed: 10000/10000" "$tmp/select_only.out" || fail "select-only did not process 10000 transactions"
run_pgbench tpcb -c 20 -j 2 -t 50
grep -q "processed: 1000/1000" "$tmp/tpcb.out" || fail "TPC-B did not process 1000 transactions"

kill "$monitor" 2>/dev/null || true
wait "$monitor" 2>/dev/null || true
monitor=
max=$(cat "$tmp/max" 2>/dev/null || echo 0)
echo "most hyperpool backends seen at once: $max"
[ "$max" -le 5 ] || fail "saw $max origin backends with application_name hyperpool (pool size 5)"
[ "$max" -ge 1 ] || fail "never saw a backend with application_name hyperpool (is the Endpoint setting it?)"

kill -TERM "$pid"
( sleep 15; kill -KILL "$pid" 2>/dev/null ) &
guard=$!
set +e
wait "$pid"
rc=$?
set -e
kill "$guard" 2>/dev/null || true
pid=
[ "$rc" = 0 ] || fail "serve exited with $rc after SIGTERM"
echo "pgbench_test: ok"
