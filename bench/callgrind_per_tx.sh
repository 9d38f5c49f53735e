#!/usr/bin/env bash
# bench/callgrind_per_tx.sh — user-space instructions per transaction of
# `hyperpool serve` (docs/performance.md, "CPU per transaction"): a
# deterministic count, unlike CPU time on a shared machine.
#
# Starts a throwaway PostgreSQL 15 (tests/support/pgcluster.sh), runs
# `serve --threads 1 --pool-size 4` under `valgrind --tool=callgrind`, warms
# it up with CG_WARMUP pgbench transactions, zeroes the counters, runs
# `pgbench -n -S -c4 -j1 -t CG_TX` per mode, and prints the total Ir over the
# transactions and the top inclusive functions per transaction. The mode
# `tpcb` runs pgbench's TPC-B-like script (simple protocol) instead of -S.
#
#   bash bench/callgrind_per_tx.sh                 # build/hyperpool, cache on
#   CG_SERVE_ARGS=--no-cache bash bench/callgrind_per_tx.sh
#   CG_MODES=tpcb CG_TX=500 CG_WARMUP=400 bash bench/callgrind_per_tx.sh
#
# Environment: HYPERPOOL_BINARY (build/hyperpool), CG_SERVE_ARGS (extra
# `serve` flags, "" = cache on), CG_MODES ("simple prepared"), CG_TX (1000
# per client), CG_CLIENTS (4), CG_WARMUP (300 transactions in all), CG_TOP
# (25 functions shown), CG_KEEP=1 keeps the work directory (callgrind.out.*).
# Needs valgrind (Debian's `valgrind` package, not in scripts/setup.sh: no
# test uses it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${HYPERPOOL_BINARY:-$ROOT/build/hyperpool}
read -r -a MODES <<< "${CG_MODES:-simple prepared}"
TX=${CG_TX:-1000}
CLIENTS=${CG_CLIENTS:-4}
WARMUP=${CG_WARMUP:-300}
TOP=${CG_TOP:-25}
WORK=$(mktemp -d /tmp/callgrind_per_tx.XXXXXX)
chmod 755 "$WORK"
SERVE_PID=

log() { echo "[cg $(date +%H:%M:%S)] $*" >&2; }
die() { log "error: $*"; exit 1; }
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cleanup() {
  [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null || true
  bash "$ROOT/tests/support/pgcluster.sh" stop "$WORK/pg" >/dev/null 2>&1 || true
  [ "${CG_KEEP:-0}" = 1 ] && log "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT

bash "$ROOT/tests/support/pgcluster.sh" start "$WORK/pg" >"$WORK/pgcluster.log" 2>&1 \
  || { cat "$WORK/pgcluster.log" >&2; die "pgcluster.sh start failed"; }
set -a; . "$WORK/pg/env"; set +a
DB=$PGDATABASE BUSER=$SCRAM_USER BPASS=$SCRAM_PASSWORD
PGPASSWORD=$BPASS PGSSLMODE=disable pgbench -i -q -s 1 -h "$PGHOST" -p "$PGPORT" -U "$BUSER" "$DB" \
  >"$WORK/init.log" 2>&1 || { cat "$WORK/init.log" >&2; die "pgbench -i failed"; }

bench() {  # bench MODE TRANSACTIONS_PER_CLIENT
  local script=(-S -M "$1")
  [ "$1" = tpcb ] && script=(-M simple)
  PGPASSWORD=$BPASS PGSSLMODE=disable pgbench -n "${script[@]}" -c "$CLIENTS" -j1 -t "$2" \
    -h 127.0.0.1 -p "$PORT" -U "$BUSER" "$DB" >>"$WORK/pgbench.log" 2>&1 \
    || { tail -20 "$WORK/pgbench.log" >&2; die "pgbench failed"; }
}

for mode in "${MODES[@]}"; do
  PORT=$(free_port)
  out=$WORK/callgrind.out.$mode
  # shellcheck disable=SC2086
  valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$BIN" serve --origin "postgresql://$BUSER:$BPASS@$PGHOST:$PGPORT/$DB?sslmode=disable" \
    --listen "127.0.0.1:$PORT" --threads 1 --pool-size 4 ${CG_SERVE_ARGS:-} \
    --user "$BUSER" --password "$BPASS" --database "$DB" >"$WORK/serve.$mode.out" 2>"$WORK/serve.$mode.err" &
  SERVE_PID=$!
  for _ in $(seq 600); do
    PGPASSWORD=$BPASS PGSSLMODE=disable PGCONNECT_TIMEOUT=2 psql -X -At -h 127.0.0.1 -p "$PORT" -U "$BUSER" \
      -d "$DB" -c 'select 1' >/dev/null 2>&1 && break
    sleep 0.2
  done
  bench "$mode" $(( (WARMUP + CLIENTS - 1) / CLIENTS ))
  callgrind_control -z "$SERVE_PID" >/dev/null
  bench "$mode" "$TX"
  callgrind_control -d "$SERVE_PID" >/dev/null
  kill -INT "$SERVE_PID" 2>/dev/null || true
  wait "$SERVE_PID" 2>/dev/null || true
  SERVE_PID=
  # The dump made after the run (callgrind_control -d) is the highest-numbered part.
  dump=$(ls "$out".* 2>/dev/null | sort -t. -k3 -n | tail -1)
  [ -n "$dump" ] || die "no callgrind dump for $mode"
  n=$((TX * CLIENTS))
  total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}')
  echo "== $mode ${CG_SERVE_ARGS:-cache on}: $n transactions, Ir/tx $(awk -v t="$total" -v n="$n" 'BEGIN {printf "%.0f", t / n}')"
  # Inclusive per transaction: our functions, absl's hashing, malloc/free
  # (not the Asio and std::function frames around them).
  callgrind_annotate --inclusive=yes "$dump" 2>/dev/null \
    | grep -E 'hyperpool::|absl::|malloc|free' | grep -vE '_Function_handler|asio::detail|std::thread' \
    | awk -v n="$n" -v top="$TOP" '
        $1 ~ /^[0-9,]+$/ && shown < top {
          v = $1; gsub(",", "", v); line = $0; sub(/^ *[0-9,]+ \([ 0-9.]+%\) +/, "", line);
          sub(/^[^:]*:/, "", line); sub(/ \[[^]]*\]$/, "", line);
          printf "%8.0f  %s\n", v / n, substr(line, 1, 140); shown++ }'
done
