#!/usr/bin/env bash
# The query cache's differential proof: PostgreSQL 15's regression suite
# through `hyperpool serve` twice, cache off (--no-cache) and cache on with a
# long max age (--cache-max-age 3600), and every test's output (results/*.out)
# must be the same in both runs. The runs are compared with each other, not
# with the suite's expected/ files, so what the pooler cannot show (docs/
# architecture.md, "What a transaction pooler still cannot show") shows in
# both and cancels out; a difference is a result the cache changed.
#
#   bench/pg_regress_diff.sh            cache off, cache on; exit 1 on a difference
#   bench/pg_regress_diff.sh calibrate  cache off twice: the tests that differ
#                                       between those are nondeterministic and
#                                       belong in bench/pg_regress_exclude.txt
#
# bench/pg_regress_exclude.txt lists the tests left out of the comparison,
# one a line: NAME  reason (found by `calibrate`). Env as bench/pg_regress.sh's
# (HYPERPOOL_BINARY, REGRESS_SCHEDULE, REGRESS_OUT ...).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=${1:-compare}
OUT=${REGRESS_OUT:-$ROOT/bench/results/regress-diff}
EXCLUDE=$ROOT/bench/pg_regress_exclude.txt
# The schedule's tests one at a time (see docs/architecture.md, "Query cache",
# "Differential proof", for why not the parallel groups).
# guc is left out: it SETs a plpgsql.* placeholder, which stays in that
# origin backend after the session (docs/architecture.md, "What a
# transaction pooler still cannot show") and makes whichever test next loads
# plpgsql there, or guc itself, differ by the connection drawn.
export REGRESS_OUT=$OUT REGRESS_SCHEDULE=${REGRESS_SCHEDULE:-serial} REGRESS_SKIP=${REGRESS_SKIP-guc}
MIN_STORES=${REGRESS_MIN_STORES:-500}
# REGRESS_REPLAY=1: after the suite, also its one-line SELECTs twice each on
# one session (bench/pg_regress_replay.py). Off by default: its cache hits
# went from 402 in one run to 10 in the next, and its exclusions come from
# one pair of runs only (docs/architecture.md, "Query cache", "Replay").
export REGRESS_REPLAY=${REGRESS_REPLAY:-0}
REPLAY_EXCLUDE=$ROOT/bench/pg_regress_replay_exclude.txt

case $MODE in
  compare) A=hyperpool-nocache; B=hyperpool-cache ;;
  calibrate) A=hyperpool-nocache; B=hyperpool-nocache-2 ;;
  *) echo "usage: $0 [compare|calibrate]" >&2; exit 2 ;;
esac

rm -rf "$OUT/$A.results" "$OUT/$B.results"
bash "$ROOT/bench/pg_regress.sh" "$A $B" || exit 2
for t in $A $B; do
  n=$(ls "$OUT/$t.results" 2>/dev/null | wc -l)
  # A run that did not get far (serve did not start, the cluster died) has
  # nothing to compare: that is a failure, not a pass.
  [ "$n" -ge 100 ] || { echo "pg_regress_diff.sh: $t left only $n test outputs"; tail -20 "$OUT/$t.out"; exit 2; }
done

# The proof is worth something only if the cache was in play: the cache-on
# run must have stored results (a session whose startup the cache cannot key
# bypasses it whole, as pg_regress's PGOPTIONS once made every session do).
if [ "$MODE" = compare ]; then
  stats=$(grep -E '^(client|endpoint) tier:' "$OUT/$B.serve.log")
  echo "$stats"
  stores=$(sed -nE 's/^endpoint tier: .* stores ([0-9]+) .*/\1/p' <<<"$stats" | head -1)
  [ "${stores:-0}" -ge "$MIN_STORES" ] ||
    { echo "pg_regress_diff.sh: the cache stored ${stores:-0} results (< $MIN_STORES): it was not in play"; exit 1; }
fi

excluded() { grep -qE "^$1([[:space:]]|$)" "$EXCLUDE" 2>/dev/null; }

same=0; skipped=0; differ=()
for f in "$OUT/$A.results"/*.out; do
  name=$(basename "$f" .out)
  if excluded "$name"; then skipped=$((skipped + 1)); continue; fi
  other="$OUT/$B.results/$name.out"
  if [ -f "$other" ] && cmp -s "$f" "$other"; then same=$((same + 1)); else differ+=("$name"); fi
done
for f in "$OUT/$B.results"/*.out; do  # a test only the second run has
  name=$(basename "$f" .out)
  [ -f "$OUT/$A.results/$name.out" ] || excluded "$name" || differ+=("$name")
done

echo "pg_regress_diff ($A vs $B): ${#differ[@]} differ, $same identical, $skipped excluded"
replay_status=0
if [ "$REGRESS_REPLAY" = 1 ]; then
  /usr/bin/python3 "$ROOT/bench/pg_regress_replay.py" compare "$OUT/$A.replay.jsonl" "$OUT/$B.replay.jsonl" \
    "$REPLAY_EXCLUDE" || replay_status=1
fi
if [ "${#differ[@]}" -gt 0 ]; then
  for name in "${differ[@]}"; do
    echo "=== $name differs:"
    diff -u --label "$A/$name.out" --label "$B/$name.out" \
      "$OUT/$A.results/$name.out" "$OUT/$B.results/$name.out" 2>&1 | head -80
  done
  echo "DIFFERING: ${differ[*]}"
  exit 1
fi
exit $replay_status
