#!/usr/bin/env bash
# Transcript comparisons: programs of tests/drivers/ that print what a real
# driver saw (rows, errors with their SQLSTATE, counts) run against the
# throwaway cluster directly and through `hyperpool serve --pool-size 2`
# (cache on, as shipped); the transcripts must be identical.
#
#   shape_py / shape_js  prepared statements across DROP / re-CREATE of their
#                        table (same and other columns; issue 28 item 2):
#                        psycopg 3 + asyncpg, node-postgres + postgres.js; the
#                        DDL runs through the same target, then (through
#                        hyperpool) on the origin directly
#   prepared_view        what psycopg 3 sees in pg_prepared_statements (item 4)
#
# Env: TRANSCRIPTS="shape_py shape_js prepared_view" (default: all),
#      HYPERPOOL_BINARY (required), DRV_KEEP=1 keeps the temp dir.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DRV="$ROOT/tests/drivers"
PGCLUSTER="$ROOT/tests/support/pgcluster.sh"
PYTHON=${DRV_PYTHON:-/usr/bin/python3}
TRANSCRIPTS=${TRANSCRIPTS:-"shape_py shape_js prepared_view"}
PROGRAM_TIMEOUT_S=90

[ -x "${HYPERPOOL_BINARY:-}" ] || { echo "HYPERPOOL_BINARY is not set to an executable"; exit 1; }
TMP=$(mktemp -d /tmp/hp-transcripts.XXXXXX)
chmod 755 "$TMP"
PG="$TMP/pg"
SERVER_PID=""

stop_server() {
  [ -n "$SERVER_PID" ] || return 0
  kill "$SERVER_PID" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$SERVER_PID" 2>/dev/null
  wait "$SERVER_PID" 2>/dev/null
  SERVER_PID=""
}
cleanup() {
  stop_server
  "$PGCLUSTER" stop "$PG" >/dev/null 2>&1 || true
  if [ -n "${DRV_KEEP:-}" ]; then echo "driver_transcripts: kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$PGCLUSTER" start "$PG" >/dev/null || { echo "could not start PostgreSQL"; exit 1; }
# shellcheck disable=SC1091
. "$PG/env"
DIRECT_URL="postgresql://$SCRAM_USER:$SCRAM_PASSWORD@127.0.0.1:$PGPORT/$PGDATABASE?sslmode=disable"

# start_hyperpool: a fresh pooler (pool 2, defaults otherwise); sets URL.
start_hyperpool() {
  URL=""
  : >"$TMP/serve.out"
  "$HYPERPOOL_BINARY" serve --origin "$DIRECT_URL" --pool-size 2 >"$TMP/serve.out" 2>>"$TMP/serve.err" </dev/null &
  SERVER_PID=$!
  for _ in $(seq 150); do
    if [ "$(wc -l <"$TMP/serve.out")" -ge 1 ]; then URL=$(head -n 1 "$TMP/serve.out"); return 0; fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "hyperpool serve printed no URL"; tail -n 5 "$TMP/serve.err"
  return 1
}

# run NAME URL DDL_URL OUT: one program's transcript.
run() {
  local name=$1 url=$2 ddl=$3 out=$4
  case $name in
    shape_py) (cd "$DRV" && timeout -k 5 "$PROGRAM_TIMEOUT_S" "$PYTHON" shape_transcript.py "$url" "$ddl") ;;
    shape_js) (cd "$DRV" && timeout -k 5 "$PROGRAM_TIMEOUT_S" node shape_transcript.mjs "$url" "$ddl") ;;
    prepared_view) (cd "$DRV" && timeout -k 5 "$PROGRAM_TIMEOUT_S" "$PYTHON" prepared_view_transcript.py "$url") ;;
    *) echo "unknown transcript $name" ;;
  esac >"$out" 2>&1
  echo "exit $?" >>"$out"
}

failed=0
compare() {  # compare LABEL DIRECT_FILE OTHER_FILE
  if diff -u "$2" "$3" >"$TMP/diff"; then
    echo "ok   $1 ($(wc -l <"$2") lines)"
  else
    echo "FAIL $1: the transcript differs from direct:"
    sed 's/^/    /' "$TMP/diff" | head -n 60
    failed=$((failed + 1))
  fi
}

for name in $TRANSCRIPTS; do
  run "$name" "$DIRECT_URL" "$DIRECT_URL" "$TMP/$name.direct"
  start_hyperpool || { failed=$((failed + 1)); continue; }
  run "$name" "$URL" "$URL" "$TMP/$name.hyperpool"
  compare "$name through hyperpool" "$TMP/$name.direct" "$TMP/$name.hyperpool"
  if [[ $name == shape_* ]]; then
    # DDL that bypasses the pooler (the programs then read with a no-cache hint).
    run "$name" "$URL" "$DIRECT_URL" "$TMP/$name.bypass"
    compare "$name through hyperpool, DDL on the origin" "$TMP/$name.direct" "$TMP/$name.bypass"
  fi
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then echo "FAIL $name: hyperpool serve died"; failed=$((failed + 1)); fi
  stop_server
done
[ "$failed" = 0 ] || { echo "--- serve stderr (last 20 lines):"; tail -n 20 "$TMP/serve.err"; }
echo "driver transcripts: $failed failed"
[ "$failed" = 0 ]
