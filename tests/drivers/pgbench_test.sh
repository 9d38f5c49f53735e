#!/usr/bin/env bash
# pgbench (postgresql-client-15) against a PostgreSQL URL, with -M prepared and then
# -M extended, 8 clients (each its own connection), two scripts mixed at random:
# the built-in TPC-B-like transaction and pgbench_timezone.sql (per-client TimeZone
# that must neither leak nor vanish).
#
# usage: pgbench_test.sh URL     (postgresql://USER:PASS@HOST:PORT/DB?sslmode=disable)
#
# Checks per mode: pgbench exits 0 with every transaction processed and none failed
# or aborted; pgbench_history grew by exactly the number of TPC-B transactions in
# pgbench's per-transaction log (no commit lost, none doubled); the TPC-B sums agree
# (accounts = tellers = branches = history deltas). Prints one line per check and a
# summary; exit 0 only if all hold. pgbench has no cancel API: no cancel check here.
set -uo pipefail

[ $# = 1 ] || { echo "usage: pgbench_test.sh URL" >&2; exit 2; }
URL=$1
HERE=$(cd "$(dirname "$0")" && pwd)
PGBENCH=${PGBENCH:-pgbench}
PSQL=${PSQL:-psql}
CLIENTS=8
TX=${DRV_PGBENCH_TX:-150}
DRIVER=pgbench
passed=0 failed=0

check() {  # check OK NAME DETAIL
  if [ "$1" = 1 ]; then passed=$((passed + 1)); echo "ok   $DRIVER: $2 - $3"
  else failed=$((failed + 1)); echo "FAIL $DRIVER: $2 - $3"; fi
}

finish() {
  local verdict=FAIL
  [ $failed = 0 ] && [ $passed -gt 0 ] && verdict=PASS
  echo "SUMMARY $DRIVER: $verdict ($passed checks passed, $failed failed, 0 errors)"
  [ $verdict = PASS ]
  exit
}

q() { timeout 30 "$PSQL" "$URL" -XAtq -v ON_ERROR_STOP=1 -c "$1" 2>&1; }

out=$(timeout 60 "$PGBENCH" -i -q -s 1 "$URL" 2>&1); rc=$?
check $([ $rc = 0 ] && echo 1 || echo 0) "pgbench -i -s 1" \
  "exit $rc$( [ $rc = 0 ] || printf ': %s' "$(tail -n 3 <<<"$out" | tr '\n' ' ')")"
[ $rc = 0 ] || finish

logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT
for mode in prepared extended; do
  before=$(q "SELECT count(*) FROM pgbench_history")
  rm -f "$logdir"/*
  out=$(cd "$logdir" && timeout 50 "$PGBENCH" -n -M "$mode" -c "$CLIENTS" -j 2 -t "$TX" -b tpcb-like \
        -f "$HERE/pgbench_timezone.sql" -D tzset=0 --log --log-prefix=tx "$URL" 2>&1); rc=$?
  processed=$(sed -n 's/^number of transactions actually processed: //p' <<<"$out")
  failed_tx=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' <<<"$out")
  # The TPC-B transactions, counted from the per-transaction log (4th field:
  # the script, 0 = the builtin TPC-B given first): pgbench's per-script
  # summary is off by one at times (seen against PostgreSQL directly).
  tpcb=$(cat "$logdir"/tx.* 2>/dev/null | awk '$4 == 0 {n++} END {print n + 0}')
  errs=$(grep -iE 'error|abort' <<<"$out" | head -n 4 | tr '\n' ' ')
  want="$((CLIENTS * TX))/$((CLIENTS * TX))"
  check $([ $rc = 0 ] && [ "$processed" = "$want" ] && [ "${failed_tx:-0}" = 0 ] && [ -z "$errs" ] && echo 1 || echo 0) \
    "-M $mode run" "exit $rc, processed ${processed:-?} (want $want), failed ${failed_tx:-?}${errs:+; $errs}"
  tz_bad=$(grep -c 'timezone check failed' <<<"$out")
  check $([ "$tz_bad" = 0 ] && [ "$processed" = "$want" ] && echo 1 || echo 0) "-M $mode session TimeZone" \
    "$([ "$tz_bad" = 0 ] && echo "each client kept its own zone" || echo "$tz_bad clients saw another zone")"
  after=$(q "SELECT count(*) FROM pgbench_history")
  check $([ -n "$tpcb" ] && [ "$after" = "$((before + tpcb))" ] 2>/dev/null && echo 1 || echo 0) \
    "-M $mode committed TPC-B transactions" "history $before -> $after, pgbench logged ${tpcb:-?} TPC-B transactions"
  sums=$(q "SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ' ' || (SELECT sum(tbalance) FROM pgbench_tellers)
            || ' ' || (SELECT sum(bbalance) FROM pgbench_branches) || ' ' || (SELECT coalesce(sum(delta), 0) FROM pgbench_history)")
  read -r s1 s2 s3 s4 <<<"$sums"
  check $([ -n "${s4:-}" ] && [ "$s1" = "$s2" ] && [ "$s2" = "$s3" ] && [ "$s3" = "$s4" ] && echo 1 || echo 0) \
    "-M $mode TPC-B sums" "accounts/tellers/branches/history: $sums"
done
finish
