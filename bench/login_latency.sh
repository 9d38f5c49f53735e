#!/usr/bin/env bash
# bench/login_latency.sh — a fresh login + `select 1` + close, side by side in
# one run (issue 11: "a fresh libpq/psycopg login + select 1 through the local
# string: p50 <= 0.3 ms"). Targets, all on this machine, plaintext:
#
#   direct     PostgreSQL 15 (a backend forked per login; SCRAM, 4096 iterations)
#   pgbouncer  PgBouncer 1.25.2, transaction mode, the role's SCRAM secret from
#              pg_authid in auth_file (4096 iterations, as a real deployment)
#   hyperpool  `hyperpool serve` with its generated password (16 iterations for
#              libpq: ClientOptions::scram_iterations)
#   hyperpool-4096  the same with --scram-iterations 4096 (what PgJDBC gets)
#
# Every repetition logs in once on each target, the order rotating; the
# driver is Debian's psycopg 3 (libpq), one process, timed around
# connect() .. execute("select 1") .. close(). Then the same from C with
# libpq alone: `pgbench -n -C -c1 -f select1.sql -T LOGIN_PGBENCH_S` per
# target, LOGIN_PGBENCH_REPS rounds (default 3 x 3 s), the order rotating;
# pgbench's mean latency per transaction (with -C: connect, SCRAM,
# `select 1`, close) and its mean connection time, medians over the rounds.
#
#   bash bench/login_latency.sh          # 300 logins per target
#   LOGIN_N=1000 bash bench/login_latency.sh
#
# Environment: LOGIN_N (default 300), LOGIN_PGBENCH_S (3), LOGIN_PGBENCH_REPS
# (3; 0 skips the pgbench part), HYPERPOOL_BINARY (default build/hyperpool),
# BENCH_OUT (default bench/results). Writes BENCH_OUT/<timestamp>-login/
# (logins.csv, report.md, env.txt) and copies it to BENCH_OUT/latest/login/.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$ROOT/bench
PY=/usr/bin/python3
N=${LOGIN_N:-300}
HYPERPOOL_BINARY=${HYPERPOOL_BINARY:-$ROOT/build/hyperpool}
OUT_ROOT=${BENCH_OUT:-$BENCH/results}

log() { echo "[login $(date +%H:%M:%S)] $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=bench/pgbouncer.sh
. "$BENCH/pgbouncer.sh"
# shellcheck source=bench/common.sh
. "$BENCH/common.sh"

[ -x "$HYPERPOOL_BINARY" ] || die "no hyperpool binary at $HYPERPOOL_BINARY"
$PY -c 'import psycopg' 2>/dev/null || die "psycopg 3 missing for $PY (python3-psycopg)"

STAMP=$(date +%Y%m%d-%H%M%S)
OUT=$OUT_ROOT/$STAMP-login
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/hpl.XXXXXX)
chmod 755 "$WORK"
PGDIR=$WORK/pg
PIDS=()

cleanup() {
  local rc=$?
  set +e
  stop_pids
  bash "$ROOT/tests/support/pgcluster.sh" stop "$PGDIR" >/dev/null 2>&1
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "starting PostgreSQL 15"
start_pg_cluster "$PGDIR" "$WORK/pgcluster.log"
DB=$PGDATABASE
ORIGIN="postgresql://$SCRAM_USER:$SCRAM_PASSWORD@$PGHOST:$PGPORT/$DB?sslmode=disable"

find_pgbouncer125
secret=$(PGPASSWORD=$ADMIN_PASSWORD psql -X -At -h "$PGHOST" -p "$PGPORT" -U "$ADMIN_USER" -d "$DB" \
  -c "SELECT rolpassword FROM pg_authid WHERE rolname = '$SCRAM_USER'")
pgb_port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start_pgbouncer_instance "$WORK/pgb" "$PGB125_BIN" "$pgb_port" "$DB" "$PGHOST" "$PGPORT" \
  "$SCRAM_USER" "$SCRAM_PASSWORD" "$secret" 4 100
PIDS+=("$PGB_STARTED_PID")
start_bg hyperpool "$HYPERPOOL_BINARY" serve --origin "$ORIGIN" --pool-size 4
HP_URL=$FIRST_LINE
start_bg hyperpool4096 "$HYPERPOOL_BINARY" serve --origin "$ORIGIN" --pool-size 4 --scram-iterations 4096
HP4096_URL=$FIRST_LINE

{
  echo "started: $(date -Is)"
  echo "host: $(uname -srm), $(nproc) cores"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "logins per target: $N"
  echo "pgbouncer: $PGB125_VERSION${PGB125_NOTE:+ ($PGB125_NOTE)}"
  echo "hyperpool: $HYPERPOOL_BINARY ($("$HYPERPOOL_BINARY" --version 2>/dev/null | head -1 || echo '?'))"
  echo "hyperpool git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "psycopg: $($PY -c 'import psycopg; print(psycopg.__version__, "libpq", psycopg.pq.version())')"
} > "$OUT/env.txt"

log "measuring $N logins per target"
$PY - "$N" "$OUT" \
  "direct=postgresql://$SCRAM_USER:$SCRAM_PASSWORD@$PGHOST:$PGPORT/$DB?sslmode=disable" \
  "pgbouncer=postgresql://$SCRAM_USER:$SCRAM_PASSWORD@127.0.0.1:$pgb_port/$DB?sslmode=disable" \
  "hyperpool=$HP_URL" "hyperpool-4096=$HP4096_URL" <<'EOF'
import statistics, sys, time
import psycopg

n, out = int(sys.argv[1]), sys.argv[2]
targets = [a.split("=", 1) for a in sys.argv[3:]]
times = {name: [] for name, _ in targets}

def login(url):
    start = time.perf_counter()
    conn = psycopg.connect(url)
    assert conn.execute("select 1").fetchone() == (1,)
    conn.close()
    return (time.perf_counter() - start) * 1000

for name, url in targets:  # warm-up: one login each (pools open, code paged in)
    for _ in range(5):
        login(url)
for rep in range(n):
    k = rep % len(targets)
    for name, url in targets[k:] + targets[:k]:
        times[name].append(login(url))

with open(f"{out}/logins.csv", "w") as f:
    f.write("target,login,ms\n")
    for name, values in times.items():
        for i, v in enumerate(values):
            f.write(f"{name},{i + 1},{v:.4f}\n")

def q(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]

pgb = statistics.median(times["pgbouncer"])
lines = ["# Fresh login + `select 1` + close (psycopg 3 / libpq), side by side", "",
         "| target | logins | p50 ms | p90 ms | p99 ms | p50 vs PgBouncer |", "|---|---|---|---|---|---|"]
for name, values in times.items():
    p50 = statistics.median(values)
    lines.append(f"| {name} | {len(values)} | {p50:.3f} | {q(values, 0.9):.3f} | {q(values, 0.99):.3f} | {p50 / pgb:.2f}x |")
hp = statistics.median(times["hyperpool"])
lines += ["", "| goal (issue 11) | measured | met? |", "|---|---|---|",
          f"| hyperpool login + select 1, p50 <= 0.3 ms | {hp:.3f} ms | {'yes' if hp <= 0.3 else 'no'} |"]
open(f"{out}/report.md", "w").write("\n".join(lines) + "\n")
EOF
PGB_REPS=${LOGIN_PGBENCH_REPS:-3}
if [ "$PGB_REPS" -gt 0 ]; then
  log "libpq from C: pgbench -C, $PGB_REPS rounds of ${LOGIN_PGBENCH_S:-3} s per target"
  echo "select 1;" > "$WORK/select1.sql"
  names=(direct pgbouncer hyperpool hyperpool-4096)
  urls=("postgresql://$SCRAM_USER:$SCRAM_PASSWORD@$PGHOST:$PGPORT/$DB?sslmode=disable"
        "postgresql://$SCRAM_USER:$SCRAM_PASSWORD@127.0.0.1:$pgb_port/$DB?sslmode=disable"
        "$HP_URL" "$HP4096_URL")
  echo "target,round,latency_ms,connection_ms,tps" > "$OUT/pgbench_connect.csv"
  for round in $(seq "$PGB_REPS"); do
    for k in 0 1 2 3; do
      i=$(( (k + round) % 4 ))
      r=$(pgbench -n -C -c1 -j1 -T "${LOGIN_PGBENCH_S:-3}" -f "$WORK/select1.sql" "${urls[$i]}" 2>&1) \
        || die "pgbench -C on ${names[$i]} failed: $(echo "$r" | tail -3)"
      lat=$(echo "$r" | awk '/^latency average/{print $4}')
      con=$(echo "$r" | awk '/^average connection time/{print $5}')
      tps=$(echo "$r" | awk '/^tps/{print $3}')
      echo "${names[$i]},$round,$lat,$con,$tps" >> "$OUT/pgbench_connect.csv"
    done
  done
  $PY - "$OUT" <<'EOF'
import csv, statistics, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/pgbench_connect.csv")))
order = ["direct", "pgbouncer", "hyperpool", "hyperpool-4096"]
names = [n for n in order if any(r["target"] == n for r in rows)]
med = {n: (statistics.median(float(r["latency_ms"]) for r in rows if r["target"] == n),
           statistics.median(float(r["connection_ms"]) for r in rows if r["target"] == n)) for n in names}
pgb = med["pgbouncer"][0]
lines = ["", "## libpq from C: `pgbench -n -C -c1 -f select1.sql` (mean per transaction, median of rounds)", "",
         "| target | login + select 1 + close ms | of which connection ms | vs PgBouncer |", "|---|---|---|---|"]
for n in names:
    lines.append(f"| {n} | {med[n][0]:.3f} | {med[n][1]:.3f} | {med[n][0] / pgb:.2f}x |")
hp = med["hyperpool"][0]
lines += ["", "| goal (issue 11), libpq from C | measured | met? |", "|---|---|---|",
          f"| hyperpool login + select 1, mean <= 0.3 ms | {hp:.3f} ms | {'yes' if hp <= 0.3 else 'no'} |"]
open(f"{out}/report.md", "a").write("\n".join(lines) + "\n")
EOF
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/env.txt"
{ echo; echo '```'; cat "$OUT/env.txt"; echo '```'; } >> "$OUT/report.md"
mkdir -p "$OUT_ROOT/latest"
rm -rf "$OUT_ROOT/latest/login"
mkdir -p "$OUT_ROOT/latest/login"
cp "$OUT"/report.md "$OUT"/env.txt "$OUT_ROOT/latest/login/"
[ -f "$OUT/pgbench_connect.csv" ] && cp "$OUT/pgbench_connect.csv" "$OUT_ROOT/latest/login/"
log "done: $OUT/report.md (copied to $OUT_ROOT/latest/login/)"
cat "$OUT/report.md"
