#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every
# test: unit + integration (real PostgreSQL 15, real drivers) in a release
# tree, the unit tests again under ASan+UBSan, and each libFuzzer target for a
# bounded time. Exits non-zero when anything fails; ends with one summary line.
set -uo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${HYPERPOOL_FUZZ_SECONDS:-20}
passed=0; failed=0; failures=()

record() {  # record NAME STATUS
  if [ "$2" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$1"); fi
}
# ctest's per-test results count individually.
count_ctest() {  # count_ctest LOGFILE
  local p f
  p=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* +Passed' "$1" || true)
  f=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*(\*\*\*|Failed|Timeout|Not Run)' "$1" || true)
  passed=$((passed + p)); failed=$((failed + f))
  [ "$f" = 0 ] || failures+=("$(grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*(\*\*\*|Failed|Timeout|Not Run)' "$1" | sed 's/^ *//')")
}

scripts/setup.sh || { echo "setup failed"; exit 1; }

echo "== release build"
scripts/build.sh build || { echo "0 passed, 1 failed"; exit 1; }
echo "== unit + integration tests"
(cd build && ctest --output-on-failure --timeout 900 2>&1) | tee build/ctest.log
count_ctest build/ctest.log

echo "== ASan + UBSan build and unit tests"
if HYPERPOOL_BUILD_TARGET=unit_tests scripts/build.sh build-asan -DHYPERPOOL_SANITIZE=ON \
     -DHYPERPOOL_BUILD_EXAMPLES=OFF -DHYPERPOOL_BUILD_BENCH=OFF; then
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
     ctest -L unit --output-on-failure 2>&1) | tee build-asan/ctest.log
  count_ctest build-asan/ctest.log
else
  record "asan build" 1
fi

echo "== libFuzzer targets, ${FUZZ_SECONDS}s each"
if CC=clang CXX=clang++ scripts/build.sh build-fuzz -DHYPERPOOL_FUZZ=ON -DHYPERPOOL_BUILD_TESTS=OFF; then
  for f in build-fuzz/fuzz/*; do
    [ -x "$f" ] || continue
    name=$(basename "$f")
    corpus=$(mktemp -d)
    [ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$corpus/"
    if "$f" -max_total_time="$FUZZ_SECONDS" -max_len=65536 -rss_limit_mb=2048 -timeout=10 "$corpus" >"build-fuzz/$name.log" 2>&1; then
      echo "fuzz $name: ok ($(grep -oE 'Done [0-9]+ runs' "build-fuzz/$name.log" || echo done))"
      record "fuzz $name" 0
    else
      echo "fuzz $name: FAILED"; tail -40 "build-fuzz/$name.log"
      record "fuzz $name" 1
    fi
    rm -rf "$corpus"
  done
else
  record "fuzz build" 1
fi

# The output of each failed test again, at the end where a CI summary shows
# it: ctest's LastTest.log keeps every test's output.
failed_output() {  # failed_output LASTTEST_LOG
  [ -f "$1" ] || return 0
  awk '
    /^[0-9]+\/[0-9]+ Test: / { name = $3; n = 0; keep = 0; next }
    /^Output:$/ { keep = 1; next }
    /^<end of output>$/ { keep = 0; next }
    keep { lines[++n] = $0; next }
    /^Test (Failed|Timeout|Not Run)/ || /^Test .*\*\*\*/ {
      printf "--- output of %s (its last 40 lines)\n", name
      for (i = (n > 40 ? n - 39 : 1); i <= n; i++) print lines[i]
    }
  ' "$1"
}

echo
if [ "$failed" != 0 ]; then
  failed_output build/Testing/Temporary/LastTest.log
  failed_output build-asan/Testing/Temporary/LastTest.log
  printf 'FAILED: %s\n' "${failures[@]}"
fi
echo "${passed} passed, ${failed} failed"
[ "$failed" = 0 ]
