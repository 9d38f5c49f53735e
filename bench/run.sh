#!/usr/bin/env bash
# bench/run.sh — the side-by-side benchmark suite: direct PostgreSQL vs a
# no-logic TCP forwarder (nullproxy, the floor for any proxy process) vs
# PgBouncer 1.25.2 (transaction mode; optionally Debian's 1.18 too) vs
# hyperpool serve, same pool size, same machine, interleaved repetitions.
# See docs/performance.md. The seed workload with postgres.js across a
# simulated WAN is bench/seed_postgresjs.sh.
#
#   bash bench/run.sh                 # full suite, ~13 min on 2 cores (144 runs of 5 s + setup), plus ~3 min per pooler for the 10,000-idle-client latency test
#   BENCH_QUICK=1 bash bench/run.sh   # ~2-3 min smoke version
#
# Environment:
#   BENCH_DURATION   seconds per pgbench run            (default 5; quick 3)
#   BENCH_REPS       interleaved repetitions, median     (default 3; quick 1)
#   BENCH_SCALE      pgbench -i scale factor             (default 10; quick 1)
#   BENCH_POOL_SIZE  origin connections per pooler       (default 8)
#   BENCH_TARGETS    subset of "direct nullproxy pgbouncer pgbouncer118 hyperpool"
#                    (default all but pgbouncer118). pgbouncer is 1.25.2, built once
#                    with ../shared/anchors/build-pgbouncer.sh into
#                    $BENCH_PGBOUNCER_PREFIX (default /opt/pgbouncer-1.25), or
#                    Debian's 1.18 when that fails (env.txt says which);
#                    pgbouncer118 is Debian's 1.18.
#   BENCH_WORKLOADS  subset of the workloads (bench/workloads.py list); the name
#                    seed-postgresjs adds bench/seed_postgresjs.sh (the seed workload
#                    with postgres.js across a WAN; 3 iterations when quick) at the end
#                    (alone, it runs only that)
#   BENCH_IDLE_CLIENTS  connections for the memory-per-idle-client test (default 1000; quick 200; 0 = skip)
#   BENCH_IDLE_LATENCY_CLIENTS  connections held open while one more client times
#                    SELECT 1 and SELECT now() (pgbench, simple protocol), poolers only
#                    (default 10000; quick 1000; 0 = skip)
#   BENCH_IDLE_LATENCY_SECONDS  seconds of pgbench per query in that test (default 5; quick 2)
#   BENCH_MICRO      1 = run the bench_* microbenchmarks (default 1)
#   BENCH_OUT        results root (default bench/results)
#   HYPERPOOL_BINARY hyperpool binary (default build/hyperpool); its directory's
#                    bench/ (or $BENCH_BUILD_DIR/bench) holds the microbenchmarks.
# Writes bench/results/<timestamp>/ (runs.csv, summary.csv, idle.jsonl, idle_latency.jsonl,
# micro.json, report.md, *.png, logs/) and copies it to bench/results/latest/.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$ROOT/bench
PY=/usr/bin/python3   # Debian's python: asyncpg, matplotlib (not a pyenv shim)

QUICK=${BENCH_QUICK:-0}
if [ "$QUICK" = 1 ]; then
  DURATION=${BENCH_DURATION:-3}; REPS=${BENCH_REPS:-1}; SCALE=${BENCH_SCALE:-1}
  IDLE_N=${BENCH_IDLE_CLIENTS:-200}
  IDLE_LAT_N=${BENCH_IDLE_LATENCY_CLIENTS:-1000}; IDLE_LAT_S=${BENCH_IDLE_LATENCY_SECONDS:-2}
else
  DURATION=${BENCH_DURATION:-5}; REPS=${BENCH_REPS:-3}; SCALE=${BENCH_SCALE:-10}
  IDLE_N=${BENCH_IDLE_CLIENTS:-1000}
  IDLE_LAT_N=${BENCH_IDLE_LATENCY_CLIENTS:-10000}; IDLE_LAT_S=${BENCH_IDLE_LATENCY_SECONDS:-5}
fi
# The latency client's queries in the idle-latency test: SELECT 1 is answered
# by hyperpool's Client cache tier (default config); now() is a stable function,
# never cacheable (src/cache/cacheability.cc), so it reaches the origin each time.
IDLE_LAT_QUERIES=("SELECT 1" "SELECT now()")
POOL_SIZE=${BENCH_POOL_SIZE:-8}
read -r -a TARGETS <<< "${BENCH_TARGETS:-direct nullproxy pgbouncer hyperpool}"
MICRO=${BENCH_MICRO:-1}
HYPERPOOL_BINARY=${HYPERPOOL_BINARY:-$ROOT/build/hyperpool}
OUT_ROOT=${BENCH_OUT:-$BENCH/results}

log() { echo "[bench $(date +%H:%M:%S)] $*" >&2; }
die() { log "error: $*"; exit 1; }
has_target() { local t; for t in "${TARGETS[@]}"; do [ "$t" = "$1" ] && return 0; done; return 1; }

for t in "${TARGETS[@]}"; do
  case $t in direct|nullproxy|pgbouncer|pgbouncer118|hyperpool) ;; *) die "unknown target '$t' in BENCH_TARGETS" ;; esac
done
command -v pgbench >/dev/null || die "pgbench not found (postgresql-client-15)"
if has_target pgbouncer118; then command -v pgbouncer >/dev/null || die "pgbouncer (Debian's 1.18) not found"; fi
if has_target nullproxy; then command -v cc >/dev/null || die "cc not found (for bench/nullproxy.c)"; fi
# shellcheck source=bench/pgbouncer.sh
. "$BENCH/pgbouncer.sh"
# shellcheck source=bench/common.sh
. "$BENCH/common.sh"
$PY -c 'import asyncpg' 2>/dev/null || die "python3-asyncpg missing (apt-get install python3-asyncpg)"
if ! $PY -c 'import matplotlib' 2>/dev/null; then
  log "installing python3-matplotlib for the plots"
  if ! apt-get install -y --no-install-recommends python3-matplotlib >/dev/null 2>&1; then
    apt-get update -qq >/dev/null 2>&1 || true
    apt-get install -y --no-install-recommends python3-matplotlib >/dev/null 2>&1 \
      || log "warning: python3-matplotlib unavailable: the report will have no plots"
  fi
fi

if [ -n "${BENCH_WORKLOADS:-}" ]; then
  read -r -a WORKLOADS <<< "$BENCH_WORKLOADS"
else
  mapfile -t WORKLOADS < <($PY "$BENCH/workloads.py" list)
fi
SEED=0
kept=()
for w in "${WORKLOADS[@]}"; do
  if [ "$w" = seed-postgresjs ]; then SEED=1; else kept+=("$w"); fi
done
export HYPERPOOL_BINARY BENCH_OUT="$OUT_ROOT"
if [ "$QUICK" = 1 ]; then export SEED_ITERATIONS=${SEED_ITERATIONS:-3}; fi
if [ "$SEED" = 1 ] && [ ${#kept[@]} = 0 ]; then exec bash "$BENCH/seed_postgresjs.sh"; fi
WORKLOADS=("${kept[@]}")

STAMP=$(date +%Y%m%d-%H%M%S)
OUT=$OUT_ROOT/$STAMP
mkdir -p "$OUT/logs" "$OUT/latency"
# Short path: pgcluster.sh needs a Unix socket path below 107 bytes.
WORK=$(mktemp -d /tmp/hpb.XXXXXX)
chmod 755 "$WORK"
PGDIR=$WORK/pg
HP_PID=""
PGB_PID=""
PGB118_PID=""
NP_PID=""

cleanup() {
  local rc=$?
  set +e
  if [ -n "$HP_PID" ] && kill -0 "$HP_PID" 2>/dev/null; then
    kill -TERM "$HP_PID"; for _ in $(seq 50); do kill -0 "$HP_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$HP_PID" 2>/dev/null
  fi
  local p
  # PgBouncer shuts down cleanly on SIGINT; nullproxy, a background job of a
  # non-interactive shell, ignores SIGINT and gets SIGTERM.
  for p in "$PGB_PID:INT" "$PGB118_PID:INT" "$NP_PID:TERM"; do
    local pid=${p%%:*}
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill "-${p##*:}" "$pid"; for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null
    fi
  done
  [ -f "$WORK/hyperpool.err" ] && cp "$WORK/hyperpool.err" "$OUT/logs/hyperpool.stderr.log" 2>/dev/null
  [ -f "$WORK/pgb/pgbouncer.log" ] && cp "$WORK/pgb/pgbouncer.log" "$OUT/logs/pgbouncer.log" 2>/dev/null
  [ -f "$WORK/pgb118/pgbouncer.log" ] && cp "$WORK/pgb118/pgbouncer.log" "$OUT/logs/pgbouncer118.log" 2>/dev/null
  bash "$ROOT/tests/support/pgcluster.sh" stop "$PGDIR" >/dev/null 2>&1
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Poolers and the idle-client test need more than 1024 descriptors.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || ulimit -n 65536 2>/dev/null || true
NOFILE=$(ulimit -n)
IDLE_MAX=$(( IDLE_N > IDLE_LAT_N ? IDLE_N : IDLE_LAT_N ))
if [ "$NOFILE" != unlimited ] && [ "$NOFILE" -lt $(( IDLE_MAX + 600 )) ]; then
  log "warning: open-file limit $NOFILE < $(( IDLE_MAX + 600 )): not all $IDLE_MAX idle clients can be held"
fi

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

PGB125_VERSION=""
if has_target pgbouncer; then find_pgbouncer125; fi

SUITE_T0=$SECONDS
{
  echo "started: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) cores"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "settings: duration=${DURATION}s reps=$REPS scale=$SCALE pool_size=$POOL_SIZE quick=$QUICK idle_clients=$IDLE_N idle_latency_clients=$IDLE_LAT_N idle_latency_seconds=$IDLE_LAT_S"
  echo "open files: $NOFILE (ulimit -n of run.sh, inherited by hyperpool)"
  echo "targets: ${TARGETS[*]}"
  echo "workloads: ${WORKLOADS[*]}"
  echo "pgbench: $(pgbench --version)"
  echo "pgbouncer: ${PGB125_VERSION:-not run}${PGB125_NOTE:+ ($PGB125_NOTE)}"
  echo "pgbouncer118: $(if has_target pgbouncer118; then pgbouncer --version 2>/dev/null | head -1; else echo 'not run'; fi)"
  echo "hyperpool: $HYPERPOOL_BINARY ($("$HYPERPOOL_BINARY" --version 2>/dev/null | head -1 || echo 'not runnable'))"
  echo "hyperpool git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- src include 2>/dev/null || echo ' + uncommitted changes')"
} > "$OUT/env.txt"
runs=$(( ${#WORKLOADS[@]} * ${#TARGETS[@]} * REPS ))
log "$runs pgbench runs of ${DURATION}s (~$(( runs * (DURATION + 1) / 60 + 1 )) min) + setup; results in $OUT"

# --- PostgreSQL ---------------------------------------------------------------
log "starting PostgreSQL 15"
start_pg_cluster "$PGDIR" "$WORK/pgcluster.log"
DB=$PGDATABASE
BUSER=$SCRAM_USER
BPASS=$SCRAM_PASSWORD
log "pgbench -i -s $SCALE (as $BUSER)"
PGPASSWORD=$BPASS PGSSLMODE=disable pgbench -i -q -s "$SCALE" -h "$PGHOST" -p "$PGPORT" -U "$BUSER" "$DB" \
  >"$OUT/logs/pgbench-init.log" 2>&1 || { cat "$OUT/logs/pgbench-init.log" >&2; die "pgbench -i failed"; }

# --- PgBouncer ----------------------------------------------------------------
PGB_SECRET=""
start_pgbouncer() {  # name binary -> sets PGB_STARTED_PORT, PGB_STARTED_PID
  [ -n "$PGB_SECRET" ] || PGB_SECRET=$(PGPASSWORD=$ADMIN_PASSWORD psql -X -At -h "$PGHOST" -p "$PGPORT" \
    -U "$ADMIN_USER" -d "$DB" -c "SELECT rolpassword FROM pg_authid WHERE rolname = '$BUSER'")
  PGB_STARTED_PORT=$(free_port)
  start_pgbouncer_instance "$WORK/$1" "$2" "$PGB_STARTED_PORT" "$DB" "$PGHOST" "$PGPORT" "$BUSER" "$BPASS" \
    "$PGB_SECRET" "$POOL_SIZE" $(( IDLE_MAX + 500 ))
  # start_pgbouncer_instance raised its soft open-file limit (runuser's
  # pam_limits leaves 1024) to the hard one.
  local soft=$PGB_STARTED_NOFILE
  echo "$1 open files: $soft, max_client_conn $(( IDLE_MAX + 500 ))" >> "$OUT/env.txt"
  if [ "$soft" != unlimited ] && [ "$soft" -lt $(( IDLE_MAX + POOL_SIZE + 100 )) ]; then
    log "warning: $1's open-file limit $soft cannot hold $IDLE_MAX idle clients"
  fi
  log "$1 ($("$2" --version 2>/dev/null | head -1)) $PGB_STARTED_PID on 127.0.0.1:$PGB_STARTED_PORT (transaction mode, pool $POOL_SIZE)"
}

# --- nullproxy -----------------------------------------------------------------
start_nullproxy() {
  cc -O2 -o "$WORK/nullproxy" "$BENCH/nullproxy.c" || die "cannot compile bench/nullproxy.c"
  "$WORK/nullproxy" "$PGPORT" >"$WORK/nullproxy.out" 2>"$WORK/nullproxy.err" &
  NP_PID=$!
  for _ in $(seq 50); do [ -s "$WORK/nullproxy.out" ] && break; sleep 0.1; done
  NP_PORT=$(head -n1 "$WORK/nullproxy.out")
  [ -n "$NP_PORT" ] || die "nullproxy did not start: $(cat "$WORK/nullproxy.err")"
  log "nullproxy $NP_PID on 127.0.0.1:$NP_PORT -> $PGPORT"
}

# --- hyperpool ----------------------------------------------------------------
HP_PORT=""
HP_START_ERROR=""
HP_STARTS=0
start_hyperpool() {
  HP_PID=""; HP_PORT=""
  # After 5 failed or crashed starts, stop trying: every later run records the last error.
  if [ "$HP_STARTS" -ge 5 ]; then
    HP_START_ERROR=${HP_START_ERROR:-"hyperpool exited 5 times; not restarted again (see crashes.txt)"}
    return 1
  fi
  HP_STARTS=$(( HP_STARTS + 1 ))
  HP_START_ERROR=""
  if [ ! -x "$HYPERPOOL_BINARY" ]; then
    HP_START_ERROR="no hyperpool binary at $HYPERPOOL_BINARY"; return 1
  fi
  HP_PORT=$(free_port)
  : > "$WORK/hyperpool.out"
  "$HYPERPOOL_BINARY" serve \
    --origin "postgresql://$BUSER:$BPASS@$PGHOST:$PGPORT/$DB?sslmode=disable" \
    --listen "127.0.0.1:$HP_PORT" --pool-size "$POOL_SIZE" \
    --user "$BUSER" --password "$BPASS" --database "$DB" \
    >"$WORK/hyperpool.out" 2>>"$WORK/hyperpool.err" &
  HP_PID=$!
  for _ in $(seq 150); do
    [ -s "$WORK/hyperpool.out" ] && break
    kill -0 "$HP_PID" 2>/dev/null || break
    sleep 0.1
  done
  if ! [ -s "$WORK/hyperpool.out" ] || ! kill -0 "$HP_PID" 2>/dev/null; then
    HP_START_ERROR="hyperpool serve did not start: $(tail -n 3 "$WORK/hyperpool.err" | tr '\n' ' ' | cut -c1-400)"
    kill -KILL "$HP_PID" 2>/dev/null || true
    HP_PID=""
    return 1
  fi
  log "hyperpool $HP_PID: $(head -n1 "$WORK/hyperpool.out" | sed -E 's/:[^:@/]*@/:***@/')"
}

declare -A T_PORT T_PID
T_PORT[direct]=$PGPORT; T_PID[direct]=0
if has_target nullproxy; then start_nullproxy; T_PORT[nullproxy]=$NP_PORT; T_PID[nullproxy]=$NP_PID; fi
if has_target pgbouncer; then
  start_pgbouncer pgb "$PGB125_BIN"; PGB_PID=$PGB_STARTED_PID
  T_PORT[pgbouncer]=$PGB_STARTED_PORT; T_PID[pgbouncer]=$PGB_PID
fi
if has_target pgbouncer118; then
  start_pgbouncer pgb118 "$(command -v pgbouncer)"; PGB118_PID=$PGB_STARTED_PID
  T_PORT[pgbouncer118]=$PGB_STARTED_PORT; T_PID[pgbouncer118]=$PGB118_PID
fi
if has_target hyperpool; then
  if start_hyperpool; then T_PORT[hyperpool]=$HP_PORT; T_PID[hyperpool]=$HP_PID
  else log "warning: $HP_START_ERROR"; fi
fi

# A crashed hyperpool is data: record it and start a fresh one for the next run.
ensure_hyperpool() {
  if [ -n "$HP_PID" ] && kill -0 "$HP_PID" 2>/dev/null; then return 0; fi
  if [ -n "$HP_PID" ]; then
    log "hyperpool $HP_PID exited: $(tail -n 2 "$WORK/hyperpool.err" | tr '\n' ' ' | cut -c1-300); restarting"
    echo "hyperpool $HP_PID exited before rep $1 $2: $(tail -n 5 "$WORK/hyperpool.err" | tr '\n' ' ')" >> "$OUT/crashes.txt"
  fi
  start_hyperpool && { T_PORT[hyperpool]=$HP_PORT; T_PID[hyperpool]=$HP_PID; }
}

record_failure() {  # rep workload target error
  $PY - "$OUT/runs.csv" "$@" <<'EOF'
import csv, os, sys
sys.path.insert(0, os.environ["BENCH"])
from pgbench_run import FIELDS, append
path, rep, workload, target, error = sys.argv[1:6]
row = {k: "" for k in FIELDS}
row.update(rep=rep, workload=workload, target=target, status="FAILED", error=error,
           load1=f"{os.getloadavg()[0]:.2f}")
append(path, row)
print(f"  r{rep} {workload:<20} {target:<10} FAILED [{error[:160]}]", flush=True)
EOF
}
export BENCH

# --- the interleaved pgbench runs --------------------------------------------
log "running: ${#WORKLOADS[@]} workloads x ${#TARGETS[@]} targets x $REPS reps"
for (( rep = 1; rep <= REPS; rep++ )); do
  log "repetition $rep/$REPS"
  for (( wi = 0; wi < ${#WORKLOADS[@]}; wi++ )); do
    w=${WORKLOADS[$wi]}
    n=${#TARGETS[@]}
    for (( k = 0; k < n; k++ )); do
      # Rotate the target order per repetition and workload: no target always
      # runs first (cold) or right after the same neighbour.
      t=${TARGETS[$(( (k + rep - 1 + wi) % n ))]}
      if [ "$t" = hyperpool ]; then
        ensure_hyperpool "$rep" "$w" || { record_failure "$rep" "$w" "$t" "$HP_START_ERROR"; continue; }
      fi
      $PY "$BENCH/pgbench_run.py" --rep "$rep" --workload "$w" --target "$t" \
        --host 127.0.0.1 --port "${T_PORT[$t]}" --user "$BUSER" --password "$BPASS" --database "$DB" \
        --pid "${T_PID[$t]}" --duration "$DURATION" --out "$OUT/runs.csv" \
        --latdir "$OUT/latency" --logdir "$OUT/logs" --tmpdir "$WORK" --hot-sql "$BENCH/hot.sql" \
        || log "warning: runner failed for $w/$t"
    done
  done
done

# Peak RSS of the poolers over the pgbench runs (before the idle-client test restarts hyperpool).
for t in nullproxy pgbouncer pgbouncer118 hyperpool; do
  pid=${T_PID[$t]:-0}
  if [ "$pid" != 0 ] && [ -r "/proc/$pid/status" ]; then
    echo "$t $(awk '/VmHWM/ {print $2}' "/proc/$pid/status")" >> "$OUT/peak_rss.txt"
  fi
done

# --- memory per idle client ---------------------------------------------------
if [ "$IDLE_N" -gt 0 ]; then
  log "memory per idle client ($IDLE_N connections each)"
  for t in "${TARGETS[@]}"; do
    n=$IDLE_N
    # max_connections = 200, and nullproxy opens a backend per client.
    if [ "$t" = direct ] || [ "$t" = nullproxy ]; then n=$(( IDLE_N < 100 ? IDLE_N : 100 )); fi
    if [ "$t" = hyperpool ]; then
      # A fresh process: after the pgbench runs the cache's freed memory
      # would absorb the clients' and hide them (the 0.00 kB of an earlier run).
      if [ -n "$HP_PID" ]; then kill "$HP_PID" 2>/dev/null; wait "$HP_PID" 2>/dev/null; HP_PID=""; fi
      if start_hyperpool; then T_PORT[hyperpool]=$HP_PORT; T_PID[hyperpool]=$HP_PID
      else echo "{\"target\": \"hyperpool\", \"error\": \"$HP_START_ERROR\"}" >> "$OUT/idle.jsonl"; continue; fi
    fi
    res=$(timeout 300 $PY "$BENCH/idle_clients.py" --host 127.0.0.1 --port "${T_PORT[$t]}" --user "$BUSER" \
      --password "$BPASS" --database "$DB" -n "$n" --pid "${T_PID[$t]}" 2>"$OUT/logs/idle-$t.err") \
      || res="{\"error\": \"idle_clients.py failed: $(tail -n 1 "$OUT/logs/idle-$t.err" | tr '"' "'" | cut -c1-300)\"}"
    echo "$res" | $PY -c 'import json,sys; d=json.loads(sys.stdin.read()); d["target"]=sys.argv[1]; print(json.dumps(d))' "$t" >> "$OUT/idle.jsonl"
    log "  $t: $(tail -n 1 "$OUT/idle.jsonl")"
  done
fi

# --- select 1 with N idle clients held ------------------------------------------
# bench/idle_clients.py opens IDLE_LAT_N connections (25 at a time), each of
# which runs SELECT now() once (so at hyperpool every held client has a link and
# an Endpoint session, as an app's pooled connection that did real work), holds them,
# and meanwhile one more client runs each query back to back for IDLE_LAT_S s
# (pgbench -c1 -M simple --log; p50/p90/p99 from the per-transaction log).
# Poolers only: PostgreSQL has max_connections = 200, and nullproxy opens a
# backend per client.
idle_lat_record() {  # target key value [key value ...]: one JSON line to idle_latency.jsonl
  $PY -c 'import json, sys
a = sys.argv[2:]
d = {"target": sys.argv[1], "n_requested": int(a.pop(0))}
d.update(zip(a[::2], a[1::2]))
print(json.dumps(d))' "$1" "$IDLE_LAT_N" "${@:2}" >> "$OUT/idle_latency.jsonl"
}
idle_lat_summary() {  # the last line of idle_latency.jsonl, short
  tail -n 1 "$OUT/idle_latency.jsonl" | $PY -c 'import json, sys
d = json.loads(sys.stdin.read())
parts = ["%s/%s held, %s errors" % (d.get("n_open", 0), d.get("n_requested"), d.get("errors", 0))]
for r in d.get("latency", []):
    parts.append("%s: p50 %s ms p99 %s ms (%s tx)%s" % (
        r["query"], r.get("p50_ms", "-"), r.get("p99_ms", "-"), r.get("count", 0),
        " [%s]" % r["error"][:120] if r.get("error") else ""))
if d.get("error"):
    parts.append(d["error"][:200])
print("; ".join(parts))'
}
if [ "$IDLE_LAT_N" -gt 0 ]; then
  log "select 1 with $IDLE_LAT_N idle clients held (${IDLE_LAT_S}s per query: ${IDLE_LAT_QUERIES[*]})"
  lat_args=(--latency-seconds "$IDLE_LAT_S")
  for q in "${IDLE_LAT_QUERIES[@]}"; do lat_args+=(--latency-query "$q"); done
  for t in "${TARGETS[@]}"; do
    if [ "$t" = direct ] || [ "$t" = nullproxy ]; then
      idle_lat_record "$t" skipped "not a pooler: each client is a PostgreSQL backend (max_connections = 200)"
      continue
    fi
    if [ "$t" = hyperpool ] && ! ensure_hyperpool idle-latency test; then
      idle_lat_record hyperpool error "$HP_START_ERROR"; log "  hyperpool: $HP_START_ERROR"
      continue
    fi
    # Opening runs at ~65 connections/s on 2 cores (asyncpg's SCRAM login in
    # Python is the bound): ~150 s for 10,000; the timeout leaves ample room.
    if res=$(timeout $(( 300 + IDLE_LAT_N / 10 + (IDLE_LAT_S + 60) * ${#IDLE_LAT_QUERIES[@]} )) \
        $PY "$BENCH/idle_clients.py" --host 127.0.0.1 --port "${T_PORT[$t]}" --user "$BUSER" \
        --password "$BPASS" --database "$DB" -n "$IDLE_LAT_N" --pid "${T_PID[$t]}" "${lat_args[@]}" \
        --query "SELECT now()" \
        2>"$OUT/logs/idle-latency-$t.err"); then
      echo "$res" | $PY -c 'import json,sys; d=json.loads(sys.stdin.read()); d["target"]=sys.argv[1]; print(json.dumps(d))' "$t" \
        >> "$OUT/idle_latency.jsonl"
    else
      idle_lat_record "$t" error "idle_clients.py failed: $(tail -n 1 "$OUT/logs/idle-latency-$t.err" | cut -c1-300)"
    fi
    log "  $t: $(idle_lat_summary)"
  done
fi

# --- microbenchmarks ----------------------------------------------------------
if [ "$MICRO" = 1 ]; then
  MICRO_DIR=${BENCH_BUILD_DIR:-$(dirname "$HYPERPOOL_BINARY")}/bench
  found=0
  for b in "$MICRO_DIR"/bench_*; do
    [ -x "$b" ] || continue
    found=1
    log "microbenchmark $(basename "$b")"
    "$b" --benchmark_min_time=0.2 --benchmark_format=json --benchmark_out="$OUT/micro-$(basename "$b").json" \
      --benchmark_out_format=json >/dev/null 2>"$OUT/logs/micro-$(basename "$b").err" \
      || log "warning: $(basename "$b") failed (see logs)"
  done
  [ $found = 1 ] || log "no microbenchmarks in $MICRO_DIR (build them: cmake --build <dir> --target bench_codec)"
fi

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/env.txt"
echo "suite wall time: $(( SECONDS - SUITE_T0 )) s" >> "$OUT/env.txt"

# --- report -------------------------------------------------------------------
log "report"
$PY "$BENCH/report.py" "$OUT" || log "warning: report.py failed"
# latest/seed/ and latest/login/ belong to bench/seed_postgresjs.sh and
# bench/login_latency.sh: keep them.
for kept in seed login; do
  if [ -d "$OUT_ROOT/latest/$kept" ]; then mv "$OUT_ROOT/latest/$kept" "$WORK/$kept-latest"; fi
done
rm -rf "$OUT_ROOT/latest"
cp -r "$OUT" "$OUT_ROOT/latest"
for kept in seed login; do
  if [ -d "$WORK/$kept-latest" ]; then mv "$WORK/$kept-latest" "$OUT_ROOT/latest/$kept"; fi
done
log "done in $(( SECONDS - SUITE_T0 )) s: $OUT/report.md (copied to $OUT_ROOT/latest/)"
if [ "$SEED" = 1 ]; then
  log "the seed workload (bench/seed_postgresjs.sh)"
  bash "$BENCH/seed_postgresjs.sh" || log "warning: bench/seed_postgresjs.sh failed"
fi
