#!/usr/bin/env bash
# A longer fuzz run than CI's (outside the README's test command): builds the
# libFuzzer tree and runs every target for MINUTES each (default 10), keeping
# a growing corpus per target in build-fuzz/corpus/<target>/ (seeded from
# tests/fuzz/corpus/) and any crash in build-fuzz/findings/<target>/.
#   bash scripts/fuzz.sh [MINUTES] [TARGET...]
# Exits non-zero when a target found something; a finding becomes a seed in
# tests/fuzz/corpus/<target>/ once fixed, so CI keeps checking it.
set -uo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-10}; shift || true
CC=clang CXX=clang++ scripts/build.sh build-fuzz -DHYPERPOOL_FUZZ=ON -DHYPERPOOL_BUILD_TESTS=OFF || exit 1
targets=("$@")
if [ ${#targets[@]} = 0 ]; then
  for f in build-fuzz/fuzz/*; do [ -x "$f" ] && targets+=("$(basename "$f")"); done
fi
found=0
for name in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$name findings=build-fuzz/findings/$name
  mkdir -p "$corpus" "$findings"
  [ -d "tests/fuzz/corpus/$name" ] && cp -rn "tests/fuzz/corpus/$name/." "$corpus/"
  echo "== $name for $minutes min"
  if build-fuzz/fuzz/"$name" -max_total_time=$((minutes * 60)) -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
       -artifact_prefix="$findings/" "$corpus" >"build-fuzz/$name.long.log" 2>&1; then
    echo "$name: ok ($(grep -oE 'Done [0-9]+ runs' "build-fuzz/$name.long.log" || echo done))"
  else
    echo "$name: FINDING (see $findings/ and build-fuzz/$name.long.log)"; tail -30 "build-fuzz/$name.long.log"
    found=1
  fi
done
exit $found
