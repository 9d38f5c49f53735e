#!/usr/bin/env bash
# `hyperpool demo` end to end: a short run (RTT 10 ms, 3 connections per mode)
# with its own scratch PostgreSQL. Checks the exit code, the table (all three
# modes), that pooled beats direct, the CSV and PNG files, and that the scratch
# cluster is gone afterwards (no directory, no process with its data dir).
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

# The table: a header and one row per mode with mean and median.
grep -qE '^mode +mean ms +median ms' "$work/stdout" || fail "no table header"
declare -A mean
for mode in direct pooled cached; do
  line=$(grep -E "^$mode +[0-9]" "$work/stdout") || fail "no table row for $mode"
  mean[$mode]=$(awk '{print $2}' <<<"$line")
done
awk -v d="${mean[direct]}" -v p="${mean[pooled]}" 'BEGIN { exit !(p < d) }' \
  || fail "pooled (${mean[pooled]} ms) is not faster than direct (${mean[direct]} ms)"
grep -q 'committed exactly once' "$work/stderr" || fail "the write check did not run"

# CSV: a header and the three modes; PNG: the 8-byte signature.
[ -s "$out/demo.csv" ] || fail "no demo.csv"
head -n1 "$out/demo.csv" | grep -q '^mode,iterations,rtt_ms,mean_ms,median_ms' || fail "bad demo.csv header"
for mode in direct pooled cached; do
  grep -q "^$mode,3," "$out/demo.csv" || fail "demo.csv has no $mode row"
done
[ "$(wc -l <"$out/demo_iterations.csv")" = 10 ] || fail "demo_iterations.csv should have 1 + 9 lines"
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

echo "demo_test: ok (direct ${mean[direct]} ms, pooled ${mean[pooled]} ms, cached ${mean[cached]} ms at RTT 10 ms)"
