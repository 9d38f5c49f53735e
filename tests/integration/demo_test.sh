#!/usr/bin/env bash
# `hyperpool demo` end to end: a short run (RTT 10 ms, 3 connections per mode)
# with its own scratch PostgreSQL. Checks the exit code, both tables (the
# extended protocol as postgres.js speaks it, and the simple protocol; all
# three modes each), that pooled is not slower than direct in either, that the
# extended client makes postgres.js's round trips, the CSV and PNG files, and
# that the scratch cluster is gone afterwards (no directory, no process with
# its data dir).
set -euo pipefail

BIN=${HYPERPOOL_BINARY:?set HYPERPOOL_BINARY to the hyperpool binary}
[ -x "$BIN" ] || { echo "demo_test: $BIN is not executable" >&2; exit 1; }

work=$(mktemp -d /tmp/hyperpool-demo-test-XXXXXX)
trap 'rm -rf "$work"' EXIT
out=$work/results

fail() {
  echo "demo_test: FAIL: $*" >&2
  echo "--- stdout ---" >&2; cat "$work/stdout" >&2 || true
  echo "--- stderr ---" >&2; cat "$work/stderr" >&2 || true
  exit 1
}

rc=0
timeout 300 "$BIN" demo --rtt 10 --iterations 3 --out "$out" >"$work/stdout" 2>"$work/stderr" || rc=$?
[ "$rc" = 0 ] || fail "exit code $rc"

# Two tables, the extended protocol (postgres.js's flow) first, then the
# simple one; each with a header and one row per mode with mean and median.
section() {  # the lines of the table after the heading that starts with $1
  awk -v h="$1" 'index($0, h) == 1 { on = 1; next } on && /^(extended|simple) protocol/ { exit } on' "$work/stdout"
}
declare -A mean waits
for protocol in extended simple; do
  table=$(section "$protocol protocol")
  [ -n "$table" ] || fail "no $protocol-protocol table"
  grep -qE '^mode +mean ms +median ms +vs direct +x RTT' <<<"$table" || fail "no header in the $protocol table"
  for mode in direct pooled cached; do
    line=$(grep -E "^$mode +[0-9]" <<<"$table") || fail "no $protocol row for $mode"
    mean[$protocol.$mode]=$(awk '{print $2}' <<<"$line")
    waits[$protocol.$mode]=$(awk '{print $6}' <<<"$line")
  done
  # "pooled" is not slower than direct: the pooler costs no WAN round trip.
  awk -v d="${mean[$protocol.direct]}" -v p="${mean[$protocol.pooled]}" 'BEGIN { exit !(p <= d) }' \
    || fail "$protocol: pooled (${mean[$protocol.pooled]} ms) is slower than direct (${mean[$protocol.direct]} ms)"
done
# The extended client really waits as postgres.js does: a type lookup plus two
# round trips per statement (Describe, then Bind/Execute) = 11, against the
# simple protocol's 5 (login waits are the same in both).
extra=$(( ${waits[extended.direct]} - ${waits[simple.direct]} ))
[ "$extra" = 6 ] \
  || fail "extended client waits ${waits[extended.direct]}, simple ${waits[simple.direct]}: expected a difference of 6"
grep -q 'committed exactly once' "$work/stderr" || fail "the write check did not run"

# CSV: a header and the three modes per protocol; PNG: the 8-byte signature.
[ -s "$out/demo.csv" ] || fail "no demo.csv"
head -n1 "$out/demo.csv" | grep -q '^protocol,mode,iterations,rtt_ms,mean_ms,median_ms' || fail "bad demo.csv header"
for protocol in extended simple; do
  for mode in direct pooled cached; do
    grep -q "^$protocol,$mode,3," "$out/demo.csv" || fail "demo.csv has no $protocol $mode row"
  done
done
[ "$(wc -l <"$out/demo_iterations.csv")" = 19 ] || fail "demo_iterations.csv should have 1 + 18 lines"
[ -s "$out/demo.png" ] || fail "no demo.png"
[ "$(head -c 8 "$out/demo.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "demo.png is not a PNG"

# The scratch cluster is gone: its directory and any process started on it.
datadir=$(sed -n 's/.*scratch PostgreSQL 15 on .*(data \(.*\))$/\1/p' "$work/stderr" | head -n1)
[ -n "$datadir" ] || fail "the demo did not report its scratch data directory"
[ ! -e "$datadir" ] || fail "scratch data directory $datadir still exists"
[ ! -e "$(dirname "$datadir")" ] || fail "scratch directory $(dirname "$datadir") still exists"
for _ in $(seq 50); do
  ps -eo args= | grep -F -- "$datadir" | grep -vq grep || break
  sleep 0.1
done
if ps -eo args= | grep -F -- "$datadir" | grep -vq grep; then
  fail "a process still runs on $datadir: $(ps -eo pid=,args= | grep -F -- "$datadir" | grep -v grep)"
fi

echo "demo_test: ok at RTT 10 ms: extended direct ${mean[extended.direct]} / pooled ${mean[extended.pooled]} /" \
  "cached ${mean[extended.cached]} ms; simple direct ${mean[simple.direct]} / pooled ${mean[simple.pooled]} /" \
  "cached ${mean[simple.cached]} ms"
