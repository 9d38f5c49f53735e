#!/usr/bin/env bash
# run.sh DRIVER URL — runs one driver program of this directory against URL
# (postgresql://USER:PASS@HOST:PORT/DB?sslmode=disable). DRIVER is one of:
#   asyncpg psycopg pg postgresjs postgresjs4 jdbc pgbench postgresjs_schema asyncpg_schema
#   postgresjs_listen python_listen named_concurrency named_concurrency_py sql_execute_py
#   named_concurrency_jdbc stale_reads
# Exit status is the driver program's (0 = every check held, no errors).
# Overrides: DRV_PYTHON (a python3 that has Debian's python3-asyncpg and
# python3-psycopg; default /usr/bin/python3, so that a pyenv shim earlier in PATH
# does not hide them), PGJDBC_JAR (default /usr/share/java/postgresql.jar),
# DRV_ITERATIONS (iterations per worker, default 60).
set -euo pipefail
[ $# = 2 ] || { echo "usage: run.sh DRIVER URL" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${DRV_PYTHON:-/usr/bin/python3}
JAR=${PGJDBC_JAR:-/usr/share/java/postgresql.jar}
need() { command -v "$1" >/dev/null || { echo "run.sh: $1 not found (scripts/setup.sh installs it)" >&2; exit 3; }; }
node_deps() {
  need node
  [ -d "$HERE/node_modules/$1" ] || {
    echo "run.sh: $HERE/node_modules/$1 missing: run 'npm ci' in tests/drivers (scripts/setup.sh does)" >&2; exit 3; }
}
cd "$HERE"
case $1 in
  asyncpg) need "$PYTHON"; exec "$PYTHON" asyncpg_test.py "$2" ;;
  psycopg) need "$PYTHON"; exec "$PYTHON" psycopg_test.py "$2" ;;
  pg) node_deps pg; exec node pg_test.mjs "$2" ;;
  postgresjs) node_deps postgres; exec node postgresjs_test.mjs "$2" ;;
  # The same program on postgres.js 4.x (package.json's alias postgres4).
  postgresjs4) node_deps postgres4; POSTGRESJS_MODULE=postgres4 exec node postgresjs_test.mjs "$2" ;;
  # Prepared statements across a table change (issue 15 item 0).
  postgresjs_schema) node_deps postgres; exec node schema_change_test.mjs "$2" ;;
  asyncpg_schema) need "$PYTHON"; exec "$PYTHON" schema_change_test.py "$2" ;;
  # sql.listen() fan-out without pinning (issue 15 item 1).
  postgresjs_listen) node_deps postgres; exec node listen_test.mjs "$2" ;;
  python_listen) need "$PYTHON"; exec "$PYTHON" listen_test.py "$2" ;;
  # Named statements shared by concurrent clients, cache on (issue 28 item 1).
  named_concurrency) node_deps pg; node_deps postgres; exec node named_concurrency_test.mjs "$2" ;;
  # No read older than an acknowledged write, every row the one asked for
  # (many clients, cache on, writes and DDL from other connections).
  stale_reads) node_deps pg; node_deps postgres; exec node stale_reads_test.mjs "$2" ;;
  named_concurrency_py) need "$PYTHON"; exec "$PYTHON" named_concurrency_test.py "$2" ;;
  # SQL EXECUTE / DEALLOCATE of protocol-level names, duplicate names (issue 28).
  sql_execute_py) need "$PYTHON"; exec "$PYTHON" sql_execute_test.py "$2" ;;
  # The same named-statement workload with PgJDBC (prepareThreshold=1: S_N), DDL beside it.
  named_concurrency_jdbc) need java; [ -f "$JAR" ] || { echo "run.sh: $JAR missing (libpostgresql-jdbc-java)" >&2; exit 3; }
        exec java -Xshare:auto -XX:TieredStopAtLevel=1 -cp "$JAR" NamedConcurrency.java "$2" ;;
  # Single-file source launch: javac-compiles JdbcTest.java in memory, no build dir.
  jdbc) need java; [ -f "$JAR" ] || { echo "run.sh: $JAR missing (libpostgresql-jdbc-java)" >&2; exit 3; }
        exec java -Xshare:auto -XX:TieredStopAtLevel=1 -cp "$JAR" JdbcTest.java "$2" ;;
  pgbench) need pgbench; need psql; exec ./pgbench_test.sh "$2" ;;
  *) echo "run.sh: unknown driver '$1'" >&2; exit 2 ;;
esac
