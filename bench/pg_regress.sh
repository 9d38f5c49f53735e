#!/usr/bin/env bash
# PostgreSQL 15's own regression suite (its parallel schedule) against a
# throwaway cluster, directly and through `hyperpool serve` in its defaults
# (cache on), in one run. Prints "TARGET: N of M tests passed" per target and
# keeps each target's regression.diffs.
#
#   bench/pg_regress.sh [TARGETS]      TARGETS: "direct hyperpool" (default);
#                                      also hyperpool-nocache* (--no-cache) and
#                                      hyperpool-cache* (--cache-max-age 3600)
# Each target's per-test outputs are kept in $REGRESS_OUT/TARGET.results/
# (bench/pg_regress_diff.sh compares them).
# Env: HYPERPOOL_BINARY (default build/hyperpool), REGRESS_POOL_SIZE (20),
#      REGRESS_SERVE_ARGS (more serve flags), REGRESS_OUT (default
#      bench/results/regress), REGRESS_SCHEDULE (parallel_schedule, or
#      "serial": its tests one at a time), REGRESS_SKIP (tests to leave out).
#
# Needs the suite's source: Debian's postgresql-15 source package
# (bench/pg_regress_source.sh fetches it, as scripts/setup.sh does), Debian's
# pg_regress (postgresql-server-dev-15), and regress.so built from the
# source's regress.c against the installed server headers.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGETS=${1:-"direct hyperpool"}
HYPERPOOL_BINARY=${HYPERPOOL_BINARY:-$ROOT/build/hyperpool}
POOL=${REGRESS_POOL_SIZE:-20}
OUT=${REGRESS_OUT:-$ROOT/bench/results/regress}
SCHEDULE=${REGRESS_SCHEDULE:-parallel_schedule}
PGREGRESS=/usr/lib/postgresql/15/lib/pgxs/src/test/regress/pg_regress

die() { echo "pg_regress.sh: $*" >&2; exit 2; }

[ -x "$PGREGRESS" ] || apt-get install -y -qq --no-install-recommends postgresql-server-dev-15 >/dev/null
REGRESS_DIR=$("$ROOT/bench/pg_regress_source.sh") || die "no regression suite"
[ -d "$REGRESS_DIR/sql" ] || die "no regression suite under $REGRESS_DIR"

TMP=$(mktemp -d /tmp/hp-regress.XXXXXX)
chmod 755 "$TMP"
SERVE_PID=
cleanup() {
  [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null
  "$ROOT/tests/support/pgcluster.sh" stop "$TMP/pg" >/dev/null 2>&1
  rm -rf "$TMP"
}
trap cleanup EXIT

# The suite's C functions and the two contrib/spi modules, in one libdir.
mkdir -p "$TMP/lib"
gcc -O2 -shared -fPIC -I"$(pg_config --includedir-server)" -o "$TMP/lib/regress.so" "$REGRESS_DIR/regress.c" ||
  die "regress.so did not build"
ln -s /usr/lib/postgresql/15/lib/autoinc.so /usr/lib/postgresql/15/lib/refint.so "$TMP/lib/"
chmod -R a+rX "$TMP/lib"

"$ROOT/tests/support/pgcluster.sh" start "$TMP/pg" >/dev/null || die "cluster did not start"
env_get() { grep "^$1=" "$TMP/pg/env" | head -1 | cut -d= -f2-; }
PGH=$(env_get PGHOST); PGP=$(env_get PGPORT); AU=$(env_get ADMIN_USER); APW=$(env_get ADMIN_PASSWORD)
# The test cluster loads pg_stat_statements; the suite's EXPLAIN VERBOSE
# output expects no query identifier.
PGPASSWORD=$APW psql -q -h "$PGH" -p "$PGP" -U "$AU" -d postgres \
  -c "ALTER SYSTEM SET compute_query_id = off" -c "SELECT pg_reload_conf()" >/dev/null
mkdir -p "$OUT"

# The schedule: parallel_schedule as it is, or "serial" (its tests one at a
# time, in its order); REGRESS_SKIP names tests to leave out of either.
SCHEDULE_FILE=$TMP/schedule
if [ "$SCHEDULE" = serial ]; then
  sed -n 's/^test: *//p' "$REGRESS_DIR/parallel_schedule" | tr ' ' '\n' | sed '/^$/d;s/^/test: /' > "$SCHEDULE_FILE"
else
  cp "$REGRESS_DIR/$SCHEDULE" "$SCHEDULE_FILE"
fi
for t in ${REGRESS_SKIP:-}; do sed -i -E "/^test:/{s/ $t( |\$)/ /;}" "$SCHEDULE_FILE"; sed -i -E '/^test: *$/d' "$SCHEDULE_FILE"; done

run_target() {  # run_target NAME: leaves $OUT/NAME.out and NAME.diffs
  local name=$1 host=$PGH port=$PGP user=$AU pw=$APW extra=()
  PGPASSWORD=$APW psql -q -h "$PGH" -p "$PGP" -U "$AU" -d postgres \
    -c "DROP DATABASE IF EXISTS regression" -c "CREATE DATABASE regression TEMPLATE=template0" \
    -c "ALTER DATABASE regression SET lc_messages TO 'C'" -c "ALTER DATABASE regression SET lc_monetary TO 'C'" \
    -c "ALTER DATABASE regression SET lc_numeric TO 'C'" -c "ALTER DATABASE regression SET lc_time TO 'C'" \
    -c "ALTER DATABASE regression SET bytea_output TO 'hex'" \
    -c "ALTER DATABASE regression SET timezone_abbreviations TO 'Default'" >/dev/null 2>&1 || return 1
  if [ "$name" != direct ]; then
    case $name in
      hyperpool-nocache*) extra+=(--no-cache) ;;
      hyperpool-cache*) extra+=(--cache-max-age 3600 --cache-swr 0) ;;  # nothing expires during the run
    esac
    printf '%s\n' "$APW" > "$TMP/origin.pw"; chmod 600 "$TMP/origin.pw"
    "$HYPERPOOL_BINARY" serve --origin "postgresql://$AU@$PGH:$PGP/regression?sslmode=disable" \
      --origin-password-file "$TMP/origin.pw" --pool-size "$POOL" --database regression \
      --user "$AU" --password regress-pw "${extra[@]}" ${REGRESS_SERVE_ARGS:-} \
      >"$TMP/serve.url" 2>"$OUT/$name.serve.log" &
    SERVE_PID=$!
    for _ in $(seq 100); do [ -s "$TMP/serve.url" ] && break; sleep 0.1; done
    local url; url=$(head -1 "$TMP/serve.url")
    [ -n "$url" ] || { echo "serve did not start"; return 1; }
    port=$(sed -E 's#.*@[^:]+:([0-9]+)/.*#\1#' <<<"$url"); host=127.0.0.1; pw=regress-pw
  fi
  rm -rf "$TMP/out-$name"; mkdir -p "$TMP/out-$name"
  # The suite's COPY TO/FROM files under results/ are the server's: run
  # pg_regress as the server's OS user when we are root.
  local as=()
  if [ "$(id -u)" = 0 ]; then chown postgres "$TMP/out-$name"; as=(runuser -u postgres --); fi
  (cd "$REGRESS_DIR" && PGPASSWORD=$pw PGUSER=$user "${as[@]}" "$PGREGRESS" --use-existing --dbname=regression \
      --host="$host" --port="$port" --user="$user" --inputdir=. --outputdir="$TMP/out-$name" \
      --dlpath="$TMP/lib" --schedule="$SCHEDULE_FILE" --max-connections=20 \
      >"$OUT/$name.out" 2>&1)
  cp "$TMP/out-$name/regression.diffs" "$OUT/$name.diffs" 2>/dev/null || : > "$OUT/$name.diffs"
  # Each test's own output, for bench/pg_regress_diff.sh to compare runs.
  rm -rf "$OUT/$name.results"; mkdir -p "$OUT/$name.results"
  cp "$TMP/out-$name"/results/*.out "$OUT/$name.results/" 2>/dev/null
  # REGRESS_REPLAY=1: then the suite's one-line SELECTs, each twice, on one
  # session (bench/pg_regress_replay.py), while the catalog stands still.
  if [ "${REGRESS_REPLAY:-0}" = 1 ]; then
    /usr/bin/python3 "$ROOT/bench/pg_regress_replay.py" run \
      "postgresql://$user:$pw@$host:$port/regression?sslmode=disable" "$REGRESS_DIR/sql" "$OUT/$name.replay.jsonl" ||
      echo "$name: replay failed"
  fi
  if [ -n "$SERVE_PID" ]; then kill "$SERVE_PID" 2>/dev/null; wait "$SERVE_PID" 2>/dev/null; SERVE_PID=; fi
  local ok total
  ok=$(grep -cE '\.\.\. ok' "$OUT/$name.out")
  total=$(grep -cE '\.\.\. (ok|FAILED|failed)' "$OUT/$name.out")
  echo "$name: $ok of $total tests passed ($(grep -E 'tests (passed|failed)|All [0-9]+ tests' "$OUT/$name.out" | tail -1 | sed 's/^ *//'))"
}

for t in $TARGETS; do run_target "$t"; done
