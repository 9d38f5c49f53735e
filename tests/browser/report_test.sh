#!/usr/bin/env bash
# The demo's report.html in a real browser (report_test.mjs does the checks),
# rendered from tests/browser/data/demo-results by `hyperpool demo --report-from`.
# Needs HYPERPOOL_BINARY; BROWSER_TEST_OUT: where report.html and its
# screenshot go (default: a temp dir, kept).
set -euo pipefail
: "${HYPERPOOL_BINARY:?}"
here=$(cd "$(dirname "$0")" && pwd)
out=${BROWSER_TEST_OUT:-$(mktemp -d /tmp/hp-browser-XXXXXX)}
timeout 60 node "$here/report_test.mjs" "$HYPERPOOL_BINARY" "$out"
