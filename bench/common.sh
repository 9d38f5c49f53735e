# shellcheck shell=bash disable=SC2034  # sets variables for the scripts that source it
# bench/common.sh — sourced by the bench scripts (run.sh, seed_postgresjs.sh,
# login_latency.sh).
#
# start_pg_cluster DIR LOG: starts a throwaway PostgreSQL 15 in DIR
#   (tests/support/pgcluster.sh) and exports its DIR/env (PGHOST, PGPORT,
#   SCRAM_USER, ...); dies with LOG's contents if it cannot.
# start_bg NAME CMD...: runs CMD in the background (stdout and stderr in
#   $WORK/NAME$NAME_SUFFIX.out/.err, its pid added to PIDS), waits up to 15 s
#   for its first stdout line (an address or URL) and sets FIRST_LINE to it.
# stop_pids: TERM, then after 5 s KILL, every process in PIDS; empties it.
# Needs: ROOT, WORK, PIDS (an array), die().

start_pg_cluster() {
  bash "$ROOT/tests/support/pgcluster.sh" start "$1" >"$2" 2>&1 \
    || { cat "$2" >&2; die "pgcluster.sh start failed"; }
  set -a
  # shellcheck disable=SC1091
  . "$1/env"
  set +a
}

start_bg() {
  local name=$1${NAME_SUFFIX:-}; shift
  "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  PIDS+=($!)
  local _
  for _ in $(seq 150); do [ -s "$WORK/$name.out" ] && break; sleep 0.1; done
  [ -s "$WORK/$name.out" ] || { tail -5 "$WORK/$name.err" >&2; die "$name printed nothing"; }
  FIRST_LINE=$(head -1 "$WORK/$name.out")
}

stop_pids() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  PIDS=()
}
