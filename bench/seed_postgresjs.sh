#!/usr/bin/env bash
# bench/seed_postgresjs.sh — the seed's benchmark (Hyperdrive write-up) with
# postgres.js itself across the WAN simulator: per iteration a fresh
# postgres.js client runs 5 distinct reads (bench/seed_postgresjs.mjs) and
# ends. Targets, in the seed's topology (the WAN is the distance between the
# app and the database):
#
#   direct          app ──WAN──▶ PostgreSQL
#   pgbouncer       app ──▶ PgBouncer 1.25.2 (transaction mode) ──WAN──▶ PostgreSQL
#   hyperpool       app ──▶ hyperpool client ──WAN (TLS link)──▶ hyperpool endpoint ──▶ PostgreSQL,
#                   both cache tiers off
#   hyperpool-cache the same with the cache on (warm: the warm-up iterations fill it)
#
#   bash bench/seed_postgresjs.sh               # RTT 50 ms, 10 iterations per target
#   SEED_ITERATIONS=3 bash bench/seed_postgresjs.sh
#
# Every target also runs at RTT 0 (the same processes and WAN simulator,
# no delay): the driver's and the poolers' local work, from which the
# report builds each target's limit (round trips x RTT + local work).
#
# Environment:
#   SEED_RTT_MS       simulated round trip (default 50)
#   SEED_LOCAL        1 (default): also run every target at RTT 0; 0: only at SEED_RTT_MS
#   SEED_SCRAM_ITERATIONS  PBKDF2 count of hyperpool's generated app password
#                     (--scram-iterations; default: hyperpool's own, 4096, as
#                     PostgreSQL's and so PgBouncer's); the report names it
#   SEED_ITERATIONS   measured iterations per target (default 10)
#   SEED_WARMUP       warm-up iterations per target, not counted (default 2)
#   SEED_TARGETS      subset of "direct pgbouncer hyperpool hyperpool-cache"
#   BENCH_OUT         results root (default bench/results)
#   HYPERPOOL_BINARY  hyperpool binary (default build/hyperpool)
# Writes BENCH_OUT/<timestamp>-seed/ (iterations.csv, summary.csv, report.md,
# env.txt, logs/) and copies it to BENCH_OUT/latest/seed/ (bench/run.sh keeps
# that subdirectory when it refreshes latest/).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$ROOT/bench
PY=/usr/bin/python3
RTT=${SEED_RTT_MS:-50}
ITERATIONS=${SEED_ITERATIONS:-10}
WARMUP=${SEED_WARMUP:-2}
LOCAL=${SEED_LOCAL:-1}
SCRAM_ITERATIONS=${SEED_SCRAM_ITERATIONS:-}
RTTS=("$RTT")
[ "$LOCAL" = 1 ] && [ "$RTT" != 0 ] && RTTS+=(0)
read -r -a TARGETS <<< "${SEED_TARGETS:-direct pgbouncer hyperpool hyperpool-cache}"
HYPERPOOL_BINARY=${HYPERPOOL_BINARY:-$ROOT/build/hyperpool}
OUT_ROOT=${BENCH_OUT:-$BENCH/results}

log() { echo "[seed $(date +%H:%M:%S)] $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=bench/pgbouncer.sh
. "$BENCH/pgbouncer.sh"
# shellcheck source=bench/common.sh
. "$BENCH/common.sh"

for t in "${TARGETS[@]}"; do
  case $t in direct|pgbouncer|hyperpool|hyperpool-cache) ;; *) die "unknown target '$t' in SEED_TARGETS" ;; esac
done
command -v node >/dev/null || die "node not found"
[ -d "$ROOT/tests/drivers/node_modules/postgres" ] || die "postgres.js missing: tests/drivers/node_modules/postgres (npm ci in tests/drivers)"
[ -x "$HYPERPOOL_BINARY" ] || die "no hyperpool binary at $HYPERPOOL_BINARY"

STAMP=$(date +%Y%m%d-%H%M%S)
OUT=$OUT_ROOT/$STAMP-seed
mkdir -p "$OUT/logs"
WORK=$(mktemp -d /tmp/hps.XXXXXX)
chmod 755 "$WORK"
PGDIR=$WORK/pg
PIDS=()

cleanup() {
  local rc=$?
  set +e
  stop_pids
  cp "$WORK"/*.err "$OUT/logs/" 2>/dev/null
  bash "$ROOT/tests/support/pgcluster.sh" stop "$PGDIR" >/dev/null 2>&1
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM


# --- PostgreSQL and its standard tables ----------------------------------------
log "starting PostgreSQL 15"
start_pg_cluster "$PGDIR" "$WORK/pgcluster.log"
DB=$PGDATABASE
BUSER=$SCRAM_USER
BPASS=$SCRAM_PASSWORD
PGPASSWORD=$BPASS PGSSLMODE=disable pgbench -i -q -s 1 -h "$PGHOST" -p "$PGPORT" -U "$BUSER" "$DB" \
  >"$OUT/logs/pgbench-init.log" 2>&1 || { cat "$OUT/logs/pgbench-init.log" >&2; die "pgbench -i failed"; }
ORIGIN="postgresql://$BUSER:$BPASS@$PGHOST:$PGPORT/$DB?sslmode=disable"

has_target() { local t; for t in "${TARGETS[@]}"; do [ "$t" = "$1" ] && return 0; done; return 1; }
PGB125_VERSION=""
has_target pgbouncer && find_pgbouncer125
{
  echo "started: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) cores"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "settings: rtt_ms=$RTT (also at: ${RTTS[*]:1}) iterations=$ITERATIONS warmup=$WARMUP scram_iterations=${SCRAM_ITERATIONS:-default}"
  echo "targets: ${TARGETS[*]}"
  echo "node: $(node --version), postgres.js $(node -p "require('$ROOT/tests/drivers/node_modules/postgres/package.json').version")"
  echo "pgbouncer: ${PGB125_VERSION:-not run}${PGB125_NOTE:+ ($PGB125_NOTE)}"
  echo "hyperpool: $HYPERPOOL_BINARY ($("$HYPERPOOL_BINARY" --version 2>/dev/null | head -1 || echo '?'))"
  echo "hyperpool git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- src include 2>/dev/null || echo ' + uncommitted changes')"
} > "$OUT/env.txt"

openssl rand -hex 32 > "$WORK/link.secret"
chmod 600 "$WORK/link.secret"

# Runs the postgres.js iterations against URL; appends to iterations.csv.
run_target() {  # target url
  log "$1: $WARMUP warm-up + $ITERATIONS measured iterations"
  node "$BENCH/seed_postgresjs.mjs" "$2" "$ITERATIONS" "$WARMUP" >"$WORK/$1.jsonl" 2>"$WORK/$1.node.err" \
    || { tail -5 "$WORK/$1.node.err" >&2; die "$1: postgres.js run failed"; }
  $PY - "$1" "$WORK/$1.jsonl" "$OUT/iterations.csv" <<'EOF'
import json, os, sys
target, src, dst = sys.argv[1:4]
new = not os.path.exists(dst)
with open(dst, "a") as out:
    if new:
        out.write("target,iteration,ms\n")
    for line in open(src):
        row = json.loads(line)
        out.write(f"{target},{row['iteration']},{row['ms']}\n")
EOF
}

# A target's label: its name at SEED_RTT_MS, NAME@0 at RTT 0.
label() { if [ "$rtt" = "$RTT" ]; then echo "$1"; else echo "$1@$rtt"; fi; }

NAME_SUFFIX=""
for rtt in "${RTTS[@]}"; do
  [ "$rtt" = "$RTT" ] || NAME_SUFFIX=-rtt$rtt
  for t in "${TARGETS[@]}"; do
    case $t in
      direct)
        start_bg wan-direct "$HYPERPOOL_BINARY" wan --target "$PGHOST:$PGPORT" --rtt "$rtt"
        run_target "$(label direct)" "postgresql://$BUSER:$BPASS@$FIRST_LINE/$DB?sslmode=disable"
        ;;
      pgbouncer)
        start_bg wan-pgbouncer "$HYPERPOOL_BINARY" wan --target "$PGHOST:$PGPORT" --rtt "$rtt"
        wan_host=${FIRST_LINE%:*} wan_port=${FIRST_LINE##*:}
        secret=$(PGPASSWORD=$ADMIN_PASSWORD psql -X -At -h "$PGHOST" -p "$PGPORT" -U "$ADMIN_USER" -d "$DB" \
          -c "SELECT rolpassword FROM pg_authid WHERE rolname = '$BUSER'")
        pgb_port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        start_pgbouncer_instance "$WORK/pgb$NAME_SUFFIX" "$PGB125_BIN" "$pgb_port" "$DB" "$wan_host" "$wan_port" \
          "$BUSER" "$BPASS" "$secret" 4 100
        PIDS+=("$PGB_STARTED_PID")
        run_target "$(label pgbouncer)" "postgresql://$BUSER:$BPASS@127.0.0.1:$pgb_port/$DB?sslmode=disable"
        cp "$WORK/pgb$NAME_SUFFIX/pgbouncer.log" "$OUT/logs/pgbouncer$NAME_SUFFIX.log" 2>/dev/null || true
        ;;
      hyperpool|hyperpool-cache)
        cache_flag=(--no-cache)
        scram_flag=()
        [ -n "$SCRAM_ITERATIONS" ] && scram_flag=(--scram-iterations "$SCRAM_ITERATIONS")
        [ "$t" = hyperpool-cache ] && cache_flag=()
        start_bg "$t-endpoint" "$HYPERPOOL_BINARY" endpoint --listen 127.0.0.1:0 --origin "$ORIGIN" \
          --tls-cert "$SERVER_CERT" --tls-key "$SERVER_KEY" --link-secret-file "$WORK/link.secret" --pool-size 4 \
          "${cache_flag[@]}"
        start_bg "$t-wan" "$HYPERPOOL_BINARY" wan --target "$FIRST_LINE" --rtt "$rtt"
        start_bg "$t-client" "$HYPERPOOL_BINARY" client --endpoint "$FIRST_LINE" --tls-ca "$CA_CERT" \
          --tls-server-name 127.0.0.1 --link-secret-file "$WORK/link.secret" --threads 2 \
          --user app --database appdb "${cache_flag[@]}" "${scram_flag[@]}"
        run_target "$(label "$t")" "$FIRST_LINE"
        ;;
    esac
    stop_pids
  done
done

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/env.txt"
$PY "$BENCH/seed_report.py" "$OUT" "$RTT"
mkdir -p "$OUT_ROOT/latest"
rm -rf "$OUT_ROOT/latest/seed"
mkdir -p "$OUT_ROOT/latest/seed"
cp "$OUT"/*.csv "$OUT"/*.md "$OUT"/env.txt "$OUT_ROOT/latest/seed/"
log "done: $OUT/report.md (copied to $OUT_ROOT/latest/seed/)"
cat "$OUT/report.md"
