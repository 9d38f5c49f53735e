#!/usr/bin/env bash
# `hyperpool demo` end to end: a short run (RTT 10 ms, 3 connections per mode)
# with its own scratch PostgreSQL. Checks the exit code, both tables (the
# extended protocol as postgres.js speaks it, and the simple protocol; all
# three modes each), that pooled is not slower than direct in either, that the
# extended client makes postgres.js's round trips, the CSV files and
# report.html (well-formed; --report-from renders it again from the CSV
# files), and that the scratch cluster is gone afterwards (no directory, no process with
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

# CSV: a header and the three modes per protocol.
[ -s "$out/demo.csv" ] || fail "no demo.csv"
head -n1 "$out/demo.csv" | grep -q '^protocol,mode,iterations,rtt_ms,mean_ms,median_ms' || fail "bad demo.csv header"
for protocol in extended simple; do
  for mode in direct pooled cached; do
    grep -q "^$protocol,$mode,3," "$out/demo.csv" || fail "demo.csv has no $protocol $mode row"
  done
done
[ "$(wc -l <"$out/demo_iterations.csv")" = 19 ] || fail "demo_iterations.csv should have 1 + 18 lines"
# report.html: well-formed (every element closed in order), the chart as
# inline SVG with a label per mode, the two tables, nothing to fetch.
[ -s "$out/report.html" ] || fail "no report.html"
[ ! -e "$out/demo.png" ] || fail "demo.png is written again"
report_check=$(/usr/bin/python3 - "$out/report.html" <<'PYEOF'
import sys
from html.parser import HTMLParser
VOID = {"meta", "link", "br", "img", "input", "hr", "rect", "line", "polyline", "path", "circle"}
class Check(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.errors, self.tags, self.modes, self.fetches = [], [], {}, [], []
        self.in_mode = False
    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        a = dict(attrs)
        for k in ("src", "href"):
            if k in a: self.fetches.append(a[k])
        self.in_mode = tag == "text" and a.get("class") == "mode"
        if tag not in VOID: self.stack.append(tag)
    def handle_startendtag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
    def handle_endtag(self, tag):
        if tag in VOID: return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else 'nothing'}>")
        else:
            self.stack.pop()
    def handle_data(self, data):
        if self.in_mode and data.strip(): self.modes.append(data.strip())
c = Check()
c.feed(open(sys.argv[1], encoding="utf-8").read())
c.close()
problems = c.errors + [f"<{t}> never closed" for t in c.stack]
if c.tags.get("svg") != 1: problems.append(f"{c.tags.get('svg', 0)} svg elements")
if c.tags.get("table") != 2: problems.append(f"{c.tags.get('table', 0)} tables")
if c.modes != ["direct", "pooled", "cached"] * 2: problems.append(f"mode labels {c.modes}")
if c.fetches: problems.append(f"fetches {c.fetches}")
print("; ".join(problems))
PYEOF
) || fail "cannot check report.html"
[ -z "$report_check" ] || fail "report.html: $report_check"
# --report-from renders the same file from the CSV files alone.
"$BIN" demo --report-from "$out" --out "$work/again" 2>>"$work/stderr" || fail "--report-from failed"
grep -q '<svg' "$work/again/report.html" || fail "--report-from wrote no chart"

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
