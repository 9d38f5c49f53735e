#!/usr/bin/env bash
# pgbench through `hyperpool serve --pool-size 5`: initialisation, 50 clients
# of select-only and the default TPC-B script in simple and extended protocol,
# no failed transaction, TPC-B's balance invariants hold afterwards, and the
# origin never sees more than 5 backends of hyperpool's origin role (a role of
# this test's own, so other tests sharing the cluster do not count).
# Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
set -euo pipefail
: "${HYPERPOOL_BINARY:?}" "${HYPERPOOL_TEST_PG_ENV:?}"
env_get() { grep "^$1=" "$HYPERPOOL_TEST_PG_ENV" | head -1 | cut -d= -f2-; }
urlencode() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
PGBIN=$(env_get PGBIN)
ADMIN=$(env_get ADMIN_USER)
PW=$(env_get ADMIN_PASSWORD)
ADMIN_URL="postgresql://$ADMIN:$(urlencode "$PW")@$(env_get PGHOST):$(env_get PGPORT)/$(env_get PGDATABASE)?sslmode=disable"
ROLE="hp_pgbench_$$"
ROLE_PW="pw_$RANDOM$RANDOM"
"$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$ADMIN_URL" -c "CREATE ROLE $ROLE LOGIN PASSWORD '$ROLE_PW'; CREATE SCHEMA $ROLE AUTHORIZATION $ROLE" >/dev/null
DIRECT="postgresql://$ROLE:$ROLE_PW@$(env_get PGHOST):$(env_get PGPORT)/$(env_get PGDATABASE)?sslmode=disable"
tmp=$(mktemp -d)
pid=
monitor=
cleanup() {
  [ -n "$monitor" ] && kill "$monitor" 2>/dev/null
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  "$PGBIN/psql" -XAtq -d "$ADMIN_URL" -c "DROP SCHEMA IF EXISTS $ROLE CASCADE; DROP ROLE IF EXISTS $ROLE" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; echo "--- serve stderr (tail):" >&2; tail -20 "$tmp/err" >&2 || true; exit 1; }
wait_for() { local secs=$1; shift; local end=$((SECONDS + secs)); until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.1; done; }

"$HYPERPOOL_BINARY" serve --origin "$DIRECT" --pool-size 5 --threads 2 >"$tmp/out" 2>"$tmp/err" &
pid=$!
wait_for 15 test -s "$tmp/out" || fail "no connection string on stdout"
url=$(head -1 "$tmp/out")

# Samples the origin's backends of hyperpool's role until stopped; records the maximum.
(
  max=0
  while :; do
    n=$("$PGBIN/psql" -XAtq -d "$ADMIN_URL" -c \
      "SELECT count(*) FROM pg_stat_activity WHERE usename = '$ROLE'" 2>/dev/null || echo 0)
    [ "$n" -gt "$max" ] && max=$n
    # Renamed into place: the monitor is killed at any moment, and a kill
    # between `>`'s truncation and the write left an empty file (CI once
    # read "" there and failed the pool-size check).
    echo "$max" >"$tmp/max.new" && mv -f "$tmp/max.new" "$tmp/max"
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
for mode in simple extended; do
  run_pgbench "select_only_$mode" -n -M "$mode" -S -c 50 -j 2 -t 100
  grep -q "processed: 5000/5000" "$tmp/select_only_$mode.out" || fail "select-only ($mode) did not process 5000 transactions"
  run_pgbench "tpcb_$mode" -n -M "$mode" -c 50 -j 2 -t 20  # -n: keep pgbench_history across runs
  grep -q "processed: 1000/1000" "$tmp/tpcb_$mode.out" || fail "TPC-B ($mode) did not process 1000 transactions"
done

# The monitor stops before anything else logs in as the role (the check below
# connects directly, and its scans may start parallel workers of that role).
kill "$monitor" 2>/dev/null || true
wait "$monitor" 2>/dev/null || true
monitor=

# TPC-B's invariants: every balance sum equals the sum of the history deltas.
sums=$("$PGBIN/psql" -XAtq -d "$DIRECT" -c "SELECT (SELECT sum(abalance) FROM pgbench_accounts), (SELECT sum(bbalance) FROM pgbench_branches),
  (SELECT sum(tbalance) FROM pgbench_tellers), (SELECT sum(delta) FROM pgbench_history), (SELECT count(*) FROM pgbench_history)")
echo "balance sums (accounts|branches|tellers|history|history rows): $sums"
IFS='|' read -r a b t h rows <<<"$sums"
[ "$a" = "$h" ] && [ "$b" = "$h" ] && [ "$t" = "$h" ] || fail "TPC-B invariants broken: $sums"
[ "$rows" = 2000 ] || fail "expected 2000 history rows, found $rows"

max=$(cat "$tmp/max" 2>/dev/null || echo 0)
echo "most origin backends of $ROLE seen at once: $max"
[ "$max" -le 5 ] || fail "saw $max origin backends of hyperpool's role (pool size 5)"
[ "$max" -ge 1 ] || fail "never saw an origin backend of hyperpool's role (is the monitor working?)"

# SIGTERM: a bounded wait for a clean exit (no background guard: its sleep
# would hold ctest's output pipe open and it would inherit the EXIT trap).
kill -TERM "$pid"
wait_for 15 bash -c "! kill -0 $pid 2>/dev/null" || { kill -KILL "$pid"; fail "serve did not stop within 15 s of SIGTERM"; }
set +e
wait "$pid"
rc=$?
set -e
pid=
[ "$rc" = 0 ] || fail "serve exited with $rc after SIGTERM"
echo "pgbench_test: ok"
