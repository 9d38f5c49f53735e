#!/usr/bin/env bash
# Real-driver compatibility suite: runs every driver program of tests/drivers/
# (asyncpg, psycopg 3, node-postgres, postgres.js 3.4 and 4.x, PgJDBC, pgbench; see
# tests/drivers/README.md) against each target and prints a result table.
#
# Targets:
#   direct     the throwaway cluster itself (tests/support/pgcluster.sh)
#   hyperpool  `$HYPERPOOL_BINARY serve --origin <cluster> --pool-size 2`, one fresh
#              pooler per driver; its first stdout line is the URL the driver uses.
#              8 workers on a pool of 2: every driver shares origin connections.
#   pgbouncer  (optional, for the record; not counted in the exit status) PgBouncer
#              in transaction mode, default_pool_size 2.
#
# Env: DRIVERS="asyncpg psycopg pg postgresjs postgresjs4 jdbc pgbench postgresjs_schema asyncpg_schema
#      postgresjs_listen python_listen named_concurrency named_concurrency_py sql_execute_py named_concurrency_jdbc stale_reads" (default: all; the *_schema ones are
#      prepared statements across a table change, the *_listen ones LISTEN/NOTIFY fan-out,
#      named_concurrency(_py, _jdbc) named statements shared by 8 clients over the pool,
#      sql_execute_py SQL EXECUTE / DEALLOCATE of names the driver Parsed,
#      stale_reads no read older than an acknowledged write, none of another row),
#      TARGETS="direct hyperpool" (default), HYPERPOOL_BINARY (needed for hyperpool),
#      DRV_KEEP=1 keeps the temp dir (logs, cluster stopped) for inspection.
# Exit 0 only if every selected driver passes on every counted target.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DRV="$ROOT/tests/drivers"
PGCLUSTER="$ROOT/tests/support/pgcluster.sh"
DRIVERS=${DRIVERS:-"asyncpg psycopg pg postgresjs postgresjs4 jdbc pgbench postgresjs_schema asyncpg_schema postgresjs_listen python_listen named_concurrency named_concurrency_py sql_execute_py named_concurrency_jdbc stale_reads"}
TARGETS=${TARGETS:-"direct hyperpool"}
POOL_SIZE=${DRV_POOL_SIZE:-2}
DRIVER_TIMEOUT_S=120
UNCOUNTED_TARGETS=" pgbouncer "

TMP=$(mktemp -d /tmp/hp-drv.XXXXXX)
chmod 755 "$TMP"  # pgcluster.sh runs PostgreSQL as the postgres OS user when we are root
mkdir -p "$TMP/logs"
PG="$TMP/pg"
SERVER_PID=""

stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
    SERVER_PID=""
  fi
}

cleanup() {
  stop_server
  "$PGCLUSTER" stop "$PG" >/dev/null 2>&1 || true
  if [ -n "${DRV_KEEP:-}" ]; then echo "drivers_test: kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$PGCLUSTER" start "$PG" || { echo "drivers_test: could not start PostgreSQL"; exit 1; }
# shellcheck disable=SC1091
. "$PG/env"
ORIGIN_USER=$SCRAM_USER
ORIGIN_PASSWORD=$SCRAM_PASSWORD
DIRECT_URL="postgresql://$ORIGIN_USER:$ORIGIN_PASSWORD@127.0.0.1:$PGPORT/$PGDATABASE?sslmode=disable"

# start_hyperpool LOGPREFIX: starts the pooler, sets URL from its first stdout line.
start_hyperpool() {
  URL=""
  if [ -z "${HYPERPOOL_BINARY:-}" ] || [ ! -x "$HYPERPOOL_BINARY" ]; then
    echo "HYPERPOOL_BINARY is not set to an executable (got '${HYPERPOOL_BINARY:-}')" >"$1.server"
    return 1
  fi
  : >"$1.server.out"
  "$HYPERPOOL_BINARY" serve --origin "$DIRECT_URL" --pool-size "$POOL_SIZE" \
    >"$1.server.out" 2>"$1.server" </dev/null &
  SERVER_PID=$!
  for _ in $(seq 150); do
    if [ "$(wc -l <"$1.server.out")" -ge 1 ]; then  # a complete first line
      URL=$(head -n 1 "$1.server.out")
      [ -n "$URL" ] && return 0
      break
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "hyperpool serve printed no URL within 15 s (exit/alive: $(kill -0 "$SERVER_PID" 2>/dev/null && echo alive || echo exited))" >>"$1.server"
  stop_server
  return 1
}

# start_pgbouncer LOGPREFIX: transaction mode, pool of POOL_SIZE, sets URL.
start_pgbouncer() {
  URL=""
  command -v pgbouncer >/dev/null || { echo "pgbouncer not installed" >"$1.server"; return 1; }
  local dir="$TMP/pgbouncer" port
  mkdir -p "$dir"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  printf '"%s" "%s"\n' "$ORIGIN_USER" "$ORIGIN_PASSWORD" >"$dir/userlist.txt"
  cat >"$dir/pgbouncer.ini" <<EOF
[databases]
$PGDATABASE = host=127.0.0.1 port=$PGPORT dbname=$PGDATABASE
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = $POOL_SIZE
max_client_conn = 100
logfile = $dir/pgbouncer.log
pidfile =
EOF
  chmod 755 "$dir"; chmod 644 "$dir"/*
  if [ "$(id -u)" = 0 ]; then
    chown -R postgres "$dir"
    runuser -u postgres -- pgbouncer "$dir/pgbouncer.ini" >"$1.server" 2>&1 &
  else
    pgbouncer "$dir/pgbouncer.ini" >"$1.server" 2>&1 &
  fi
  SERVER_PID=$!
  for _ in $(seq 50); do
    if pg_isready -q -h 127.0.0.1 -p "$port" -t 1; then
      URL="postgresql://$ORIGIN_USER:$ORIGIN_PASSWORD@127.0.0.1:$port/$PGDATABASE?sslmode=disable"
      return 0
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "pgbouncer did not start" >>"$1.server"
  stop_server
  return 1
}

declare -A RESULT
counted_pass=0 counted_fail=0
# Runs one driver against one target and sets RESULT[target,driver].
run_one() {
  log="$TMP/logs/$target-$driver"
  echo "=== $driver on $target"
  URL=""
  case $target in
    direct) URL=$DIRECT_URL ;;
    hyperpool) start_hyperpool "$log" ;;
    pgbouncer) start_pgbouncer "$log" ;;
    *) echo "unknown target '$target'" >"$log.server" ;;
  esac
  if [ -z "$URL" ]; then
    sed 's/^/    server: /' "$log.server"
    RESULT[$target,$driver]="FAIL(no server)"
  else
    start=$SECONDS
    DRV_DIRECT_URL=$DIRECT_URL timeout -k 5 "$DRIVER_TIMEOUT_S" "$DRV/run.sh" "$driver" "$URL" >"$log" 2>&1
    rc=$?
    sed 's/^/    /' "$log"
    if [ $rc = 0 ]; then
      RESULT[$target,$driver]="PASS"
    elif [ $rc = 124 ]; then
      RESULT[$target,$driver]="FAIL(timeout)"
    else
      RESULT[$target,$driver]="FAIL"
    fi
    echo "    ($driver on $target: exit $rc after $((SECONDS - start)) s)"
    if [ -n "$SERVER_PID" ]; then
      if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        wait "$SERVER_PID"; echo "    $target server exited during the run (status $?)"
        RESULT[$target,$driver]="FAIL(server died)"
        SERVER_PID=""
      fi
      stop_server
      if [ -s "$log.server" ]; then
        echo "    --- $target stderr (last 15 lines):"
        tail -n 15 "$log.server" | sed 's/^/    | /'
      fi
    fi
  fi
}

for target in $TARGETS; do
  for driver in $DRIVERS; do
    run_one
    if [[ $UNCOUNTED_TARGETS != *" $target "* ]]; then
      if [[ ${RESULT[$target,$driver]} == PASS* ]]; then
        counted_pass=$((counted_pass + 1))
      else
        counted_fail=$((counted_fail + 1))
      fi
    fi
  done
done

echo
printf '%-18s' driver
for target in $TARGETS; do printf '%-20s' "$target"; done
echo
for driver in $DRIVERS; do
  printf '%-18s' "$driver"
  for target in $TARGETS; do printf '%-20s' "${RESULT[$target,$driver]}"; done
  echo
done
[[ " $TARGETS " == *" pgbouncer "* ]] && echo "(pgbouncer results are for the record and not counted)"
echo "drivers: $counted_pass passed, $counted_fail failed"
[ "$counted_fail" = 0 ]
