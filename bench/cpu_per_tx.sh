#!/usr/bin/env bash
# bench/cpu_per_tx.sh — the pooler's CPU per transaction, interleaved, small
# enough for a shared 2-core machine (see docs/performance.md, "CPU per
# transaction"). Starts a throwaway PostgreSQL 15, PgBouncer 1.25.2 and one
# `hyperpool serve` per binary given, then runs `pgbench -S -c8 -j2` in each
# mode against each target in rotating order and prints, per run, the
# pooler's utime+stime (all threads, /proc/PID/stat) over pgbench's
# transactions (and the user and kernel parts apart), then the median per
# target and the ratio to PgBouncer.
# CPU per transaction is robust to other load on the machine; tps is not.
#
#   bash bench/cpu_per_tx.sh                      # build/hyperpool vs pgbouncer
#   HYPERPOOL_BINARIES="/tmp/old build/hyperpool" bash bench/cpu_per_tx.sh
#
# Environment: CPT_SERVE_ARGS (extra `serve` flags, "--no-cache"; "" for the
# cache on), CPT_DURATION (s per run, 10), CPT_REPS (3), CPT_MODES
# ("simple prepared"), CPT_CLIENTS (8), CPT_POOL (8), CPT_SCALE (10),
# CPT_PERF=1: also `perf record -g` the last hyperpool's last run
# (perf.data in the work directory, whose path is printed).
# CPT_SYSCALLS=1: also count each pooler's system calls per transaction, by
# kind, in every run (`perf stat -e 'syscalls:sys_enter_*' -p PID`: the
# kernel's tracepoints, no ptrace) and print their medians (docs/performance.md,
# "System calls per transaction"). The tracepoints cost kernel time on every
# call (3x the kernel µs per transaction here): read CPU from a run without.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${CPT_DURATION:-10}
REPS=${CPT_REPS:-3}
CLIENTS=${CPT_CLIENTS:-8}
POOL=${CPT_POOL:-8}
SCALE=${CPT_SCALE:-10}
read -r -a MODES <<< "${CPT_MODES:-simple prepared}"
read -r -a HP_BINS <<< "${HYPERPOOL_BINARIES:-$ROOT/build/hyperpool}"
WORK=$(mktemp -d /tmp/cpu_per_tx.XXXXXX)
chmod 755 "$WORK"
PIDS=()

log() { echo "[cpt $(date +%H:%M:%S)] $*" >&2; }
die() { log "error: $*"; exit 1; }
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  bash "$ROOT/tests/support/pgcluster.sh" stop "$WORK/pg" >/dev/null 2>&1 || true
}
trap cleanup EXIT
# utime + stime of all threads, in clock ticks.
# utime and stime (user and kernel) of all the process's threads, in ticks.
cpu_ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }

bash "$ROOT/tests/support/pgcluster.sh" start "$WORK/pg" >"$WORK/pgcluster.log" 2>&1 \
  || { cat "$WORK/pgcluster.log" >&2; die "pgcluster.sh start failed"; }
set -a; . "$WORK/pg/env"; set +a
DB=$PGDATABASE BUSER=$SCRAM_USER BPASS=$SCRAM_PASSWORD
PGPASSWORD=$BPASS PGSSLMODE=disable pgbench -i -q -s "$SCALE" -h "$PGHOST" -p "$PGPORT" -U "$BUSER" "$DB" \
  >"$WORK/init.log" 2>&1 || { cat "$WORK/init.log" >&2; die "pgbench -i failed"; }

declare -A PORT PID
. "$ROOT/bench/pgbouncer.sh"
find_pgbouncer125
SECRET=$(PGPASSWORD=$ADMIN_PASSWORD psql -X -At -h "$PGHOST" -p "$PGPORT" -U "$ADMIN_USER" -d "$DB" \
  -c "SELECT rolpassword FROM pg_authid WHERE rolname = '$BUSER'")
PORT[pgbouncer]=$(free_port)
start_pgbouncer_instance "$WORK/pgb" "$PGB125_BIN" "${PORT[pgbouncer]}" "$DB" "$PGHOST" "$PGPORT" "$BUSER" "$BPASS" \
  "$SECRET" "$POOL" 200
PID[pgbouncer]=$PGB_STARTED_PID
TARGETS=(pgbouncer)

i=0
for bin in "${HP_BINS[@]}"; do
  name=hp$i; i=$((i + 1))
  PORT[$name]=$(free_port)
  "$bin" serve --origin "postgresql://$BUSER:$BPASS@$PGHOST:$PGPORT/$DB?sslmode=disable" \
    --listen "127.0.0.1:${PORT[$name]}" --pool-size "$POOL" ${CPT_SERVE_ARGS---no-cache} \
    --user "$BUSER" --password "$BPASS" --database "$DB" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  PID[$name]=$!; PIDS+=("$!")
  for _ in $(seq 100); do [ -s "$WORK/$name.out" ] && break; sleep 0.1; done
  [ -s "$WORK/$name.out" ] || die "$bin serve did not start: $(tail -3 "$WORK/$name.err")"
  log "$name = $bin (pid ${PID[$name]})"
  TARGETS+=("$name")
done
PIDS+=("${PID[pgbouncer]}")

HZ=$(getconf CLK_TCK)
echo "mode target rep tps cpu_us_per_tx user_us_per_tx kernel_us_per_tx" > "$WORK/runs.txt"
for rep in $(seq "$REPS"); do
  for mode in "${MODES[@]}"; do
    n=${#TARGETS[@]}
    for k in $(seq 0 $((n - 1))); do
      t=${TARGETS[$(( (k + rep) % n ))]}
      perf_pid=""
      if [ "${CPT_PERF:-0}" = 1 ] && [ "$rep" = "$REPS" ] && [ "$t" = "${TARGETS[$((n - 1))]}" ]; then
        perf record -g -o "$WORK/perf-$mode.data" -p "${PID[$t]}" >/dev/null 2>&1 &
        perf_pid=$!
      fi
      sys_pid=""
      if [ "${CPT_SYSCALLS:-0}" = 1 ]; then
        perf stat -x, -e 'syscalls:sys_enter_*' -p "${PID[$t]}" -o "$WORK/sys-$mode-$t-$rep.csv" &
        sys_pid=$!
        sleep 0.2
      fi
      read -r u0 s0 < <(cpu_ticks "${PID[$t]}")
      out=$(PGPASSWORD=$BPASS PGSSLMODE=disable pgbench -n -S -M "$mode" -c "$CLIENTS" -j 2 -T "$DURATION" \
        -h 127.0.0.1 -p "${PORT[$t]}" -U "$BUSER" "$DB" 2>&1) || { echo "$out" >&2; die "pgbench failed on $t"; }
      read -r u1 s1 < <(cpu_ticks "${PID[$t]}")
      [ -n "$perf_pid" ] && { kill -INT "$perf_pid"; wait "$perf_pid" || true; }
      [ -n "$sys_pid" ] && { kill -INT "$sys_pid"; wait "$sys_pid" || true; }
      tx=$(echo "$out" | awk '/number of transactions actually processed/ {split($NF, a, "/"); print a[1]}')
      tps=$(echo "$out" | awk '/^tps/ {printf "%.0f", $3}')
      us=$(awk -v u=$((u1 - u0)) -v k=$((s1 - s0)) -v hz="$HZ" -v tx="$tx" \
        'BEGIN {printf "%.1f %.1f %.1f", (u + k) * 1e6 / hz / tx, u * 1e6 / hz / tx, k * 1e6 / hz / tx}')
      echo "$mode $t $rep $tps $us" | tee -a "$WORK/runs.txt" >&2
      if [ -n "$sys_pid" ]; then
        awk -F, -v m="$mode" -v t="$t" -v tx="$tx" '$1 ~ /^[0-9]+$/ && $1 > 0 {
            sub("syscalls:sys_enter_", "", $3); print m, t, $3, $1 / tx }' \
          "$WORK/sys-$mode-$t-$rep.csv" >> "$WORK/syscalls.txt"
      fi
    done
  done
done

echo "# medians over $REPS reps, -c$CLIENTS -j2 -T$DURATION, pool $POOL (work dir $WORK)"
/usr/bin/python3 - "$WORK/runs.txt" "${HP_BINS[@]}" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
bins = sys.argv[2:]
print(f"{'mode':9} {'target':10} {'tps':>8} {'cpu_us/tx':>10} {'x_pgb':>6} {'user':>6} {'kernel':>7}  binary")
for mode in sorted({r[0] for r in rows}):
    med = {}
    for t in dict.fromkeys(r[1] for r in rows if r[0] == mode):
        sel = [r for r in rows if r[0] == mode and r[1] == t]
        med[t] = tuple(statistics.median(float(r[i]) for r in sel) for i in (3, 4, 5, 6))
    for t, (tps, us, user, kernel) in med.items():
        ratio = us / med["pgbouncer"][1] if med.get("pgbouncer") else float("nan")
        b = bins[int(t[2:])] if t.startswith("hp") else ""
        print(f"{mode:9} {t:10} {tps:8.0f} {us:10.1f} {ratio:6.2f} {user:6.1f} {kernel:7.1f}  {b}")
EOF
[ "${CPT_SYSCALLS:-0}" = 1 ] || exit 0
echo "# system calls per transaction by kind, medians over $REPS reps (0 where a run made none)"
/usr/bin/python3 - "$WORK/syscalls.txt" "$REPS" <<'EOF'
import collections, statistics, sys
reps = int(sys.argv[2])
runs = collections.defaultdict(list)
for mode, target, call, per_tx in (l.split() for l in open(sys.argv[1]) if l.strip()):
    runs[(mode, target, call)].append(float(per_tx))
med = {k: statistics.median(v + [0.0] * (reps - len(v))) for k, v in runs.items()}
for mode in dict.fromkeys(k[0] for k in med):
    targets = list(dict.fromkeys(k[1] for k in med if k[0] == mode))
    calls = sorted({k[2] for k in med if k[0] == mode and med[k] >= 0.01},
                   key=lambda c: -max(med.get((mode, t, c), 0) for t in targets))
    print(f"\n{mode:18} " + " ".join(f"{t:>10}" for t in targets))
    for c in calls:
        print(f"{c:18} " + " ".join(f"{med.get((mode, t, c), 0):10.2f}" for t in targets))
    print(f"{'all':18} " + " ".join(f"{sum(v for k, v in med.items() if k[:2] == (mode, t)):10.2f}" for t in targets))
EOF
