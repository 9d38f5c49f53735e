#!/usr/bin/env bash
# bench/wal_feed_cost.sh — what invalidation from the origin's WAL costs
# (docs/architecture.md, "Invalidation from the origin's WAL"): pgbench's
# TPC-B written straight to the origin while two idle `hyperpool serve`
# processes watch it, one with --wal-invalidation on and one with it off.
# Prints per committed transaction: the Endpoint's CPU for the feed (serve
# on minus serve off, utime+stime of all threads from /proc/PID/stat), the
# origin walsender's CPU decoding for it (its backend process), and the
# replication bytes read.
#
#   bash bench/wal_feed_cost.sh
#
# Environment: WFC_DURATION (s per run, 10), WFC_REPS (2), WFC_CLIENTS (4),
# WFC_SCALE (10).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${WFC_DURATION:-10}
REPS=${WFC_REPS:-2}
CLIENTS=${WFC_CLIENTS:-4}
SCALE=${WFC_SCALE:-10}
BIN=${HYPERPOOL_BINARY:-$ROOT/build/hyperpool}
WORK=$(mktemp -d /tmp/wal_feed_cost.XXXXXX)
chmod 755 "$WORK"
PIDS=()

log() { echo "[wfc $(date +%H:%M:%S)] $*" >&2; }
die() { log "error: $*"; exit 1; }
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  bash "$ROOT/tests/support/pgcluster.sh" stop "$WORK/pg" >/dev/null 2>&1 || true
}
trap cleanup EXIT
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

PGCLUSTER_EXTRA_CONF="wal_level = logical" bash "$ROOT/tests/support/pgcluster.sh" start "$WORK/pg" \
  >"$WORK/pgcluster.log" 2>&1 || { cat "$WORK/pgcluster.log" >&2; die "pgcluster.sh start failed"; }
set -a; . "$WORK/pg/env"; set +a
export PGPASSWORD=$ADMIN_PASSWORD PGSSLMODE=disable
ORIGIN="postgresql://$ADMIN_USER@$PGHOST:$PGPORT/$PGDATABASE?sslmode=disable"
pgbench -i -q -s "$SCALE" -h "$PGHOST" -p "$PGPORT" -U "$ADMIN_USER" "$PGDATABASE" >"$WORK/init.log" 2>&1 \
  || { cat "$WORK/init.log" >&2; die "pgbench -i failed"; }

declare -A PID
for mode in on off; do
  "$BIN" serve --origin "$ORIGIN" --wal-invalidation "$mode" --metrics-listen 127.0.0.1:0 \
    >"$WORK/serve-$mode.out" 2>"$WORK/serve-$mode.err" &
  PID[$mode]=$!
  PIDS+=($!)
done
for _ in $(seq 150); do grep -q wal_feed_streaming "$WORK/serve-on.err" && break; sleep 0.1; done
grep -q wal_feed_streaming "$WORK/serve-on.err" || { tail "$WORK/serve-on.err" >&2; die "the feed did not start"; }
METRICS=$(grep -o 'http://[0-9.:]*' "$WORK/serve-on.err" | head -1)
WALSENDER=$(psql -X -At -h "$PGHOST" -p "$PGPORT" -U "$ADMIN_USER" -d "$PGDATABASE" \
  -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'hyperpool wal feed'")
[ -n "$WALSENDER" ] || die "no walsender for the feed"
log "serve on: ${PID[on]}, off: ${PID[off]}, walsender: $WALSENDER; pgbench TPC-B -c $CLIENTS, ${DURATION}s x $REPS"
metric() { curl -s "$METRICS/metrics" | awk -v n="$1" '$1 == n {print $2}'; }

for rep in $(seq "$REPS"); do
  on0=$(ticks "${PID[on]}"); off0=$(ticks "${PID[off]}"); ws0=$(ticks "$WALSENDER"); b0=$(metric hyperpool_wal_feed_bytes_total)
  tx0=$(metric hyperpool_wal_feed_transactions_total)
  out=$(pgbench -n -c "$CLIENTS" -j 2 -T "$DURATION" -h "$PGHOST" -p "$PGPORT" -U "$ADMIN_USER" "$PGDATABASE" 2>&1)
  # Let the feed apply the tail of the run before reading its counters.
  for _ in $(seq 100); do [ "$(metric hyperpool_wal_feed_lag_seconds)" != "" ] && \
    awk -v l="$(metric hyperpool_wal_feed_lag_seconds)" 'BEGIN{exit !(l < 0.1)}' && break; sleep 0.05; done
  on1=$(ticks "${PID[on]}"); off1=$(ticks "${PID[off]}"); ws1=$(ticks "$WALSENDER"); b1=$(metric hyperpool_wal_feed_bytes_total)
  tx1=$(metric hyperpool_wal_feed_transactions_total)
  tx=$(echo "$out" | awk '/number of transactions actually processed/ {split($0, a, ": "); split(a[2], b, "/"); print b[1]}')
  tps=$(echo "$out" | awk '/^tps/ {print $3; exit}')
  hz=$(getconf CLK_TCK)
  awk -v tx="$tx" -v tps="$tps" -v on=$((on1 - on0)) -v off=$((off1 - off0)) -v ws=$((ws1 - ws0)) -v hz="$hz" \
      -v bytes="$(awk -v a="$b0" -v b="$b1" 'BEGIN{print b - a}')" -v dec="$(awk -v a="$tx0" -v b="$tx1" 'BEGIN{print b - a}')" \
      -v rep="$rep" 'BEGIN {
    us = 1e6 / hz
    printf "run %d: %d transactions (%.0f tps), %d decoded; serve on %.1f us/tx, off %.1f us/tx, feed %.1f us/tx; origin walsender %.1f us/tx; %.0f replication bytes/tx\n",
      rep, tx, tps, dec, on * us / tx, off * us / tx, (on - off) * us / tx, ws * us / tx, bytes / tx
  }'
done
