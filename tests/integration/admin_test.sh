#!/usr/bin/env bash
# The admin console and reload (docs/architecture.md, "Admin console" and
# "Reload") against `hyperpool serve --config FILE` and a real PostgreSQL 15:
#  - every admin command through psql (SHOW SERVERS' remote_pid checked
#    against pg_stat_activity) (SHOW POOLS, CLIENTS, SERVERS, STATS,
#    CACHE, PINS, CONFIG, VERSION, HELP; PAUSE, RESUME, RECONNECT, KILL_CLIENT,
#    RELOAD, SHUTDOWN), unknown commands 42601, extended protocol 0A000;
#  - a user not in [admin] users gets 42501 (asyncpg reads the SQLSTATE);
#  - PAUSE lets a transaction in flight finish and makes a new query wait
#    (seen in SHOW POOLS cl_waiting) until RESUME;
#  - KILL_CLIENT ends that client with FATAL 57P01;
#  - pgbench -T 5 through it while the pool size is reloaded twice (SIGHUP,
#    RELOAD) and a broken file is rejected: zero failed transactions, the new
#    size in SHOW POOLS and SHOW CONFIG, a restart-only change logged;
#  - SHUTDOWN drains and the process exits 0.
# Every wait polls a condition with a deadline. Needs HYPERPOOL_BINARY and
# HYPERPOOL_TEST_PG_ENV (ctest sets both).
set -euo pipefail
: "${HYPERPOOL_BINARY:?}" "${HYPERPOOL_TEST_PG_ENV:?}"
PY=/usr/bin/python3
env_get() { grep "^$1=" "$HYPERPOOL_TEST_PG_ENV" | head -1 | cut -d= -f2-; }
urlencode() { "$PY" -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
PGBIN=$(env_get PGBIN)
ADMIN_URL="postgresql://$(env_get ADMIN_USER):$(urlencode "$(env_get ADMIN_PASSWORD)")@$(env_get PGHOST):$(env_get PGPORT)/$(env_get PGDATABASE)?sslmode=disable"
ROLE="hp_admin_test_$$"
ROLE_PW="pw_$RANDOM$RANDOM"
"$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$ADMIN_URL" -c "CREATE ROLE $ROLE LOGIN PASSWORD '$ROLE_PW'; CREATE SCHEMA $ROLE AUTHORIZATION $ROLE" >/dev/null
DIRECT="postgresql://$ROLE:$ROLE_PW@$(env_get PGHOST):$(env_get PGPORT)/$(env_get PGDATABASE)?sslmode=disable"
tmp=$(mktemp -d)
pid=
bg=
cleanup() {
  [ -n "$bg" ] && kill "$bg" 2>/dev/null
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  "$PGBIN/psql" -XAtq -d "$ADMIN_URL" -c "DROP SCHEMA IF EXISTS $ROLE CASCADE; DROP ROLE IF EXISTS $ROLE" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; echo "--- serve stderr (tail):" >&2; tail -30 "$tmp/err" >&2 || true; exit 1; }
wait_for() { local secs=$1; shift; local end=$((SECONDS + secs)); until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.05; done; }

APP_PW="app_$RANDOM$RANDOM"
printf '%s\n' "$ROLE_PW" >"$tmp/origin-pw"
chmod 600 "$tmp/origin-pw"
# write_config POOL_SIZE [THREADS]
write_config() {
  cat >"$tmp/hp.toml.new" <<TOML
threads = ${2:-2}
[origin]
url = "postgresql://$ROLE@$(env_get PGHOST):$(env_get PGPORT)/$(env_get PGDATABASE)?sslmode=disable"
password_file = "$tmp/origin-pw"
[client]
user = "app"
database = "app"
password = "$APP_PW"
[pool]
size = $1
[admin]
users = ["ops", "root"]
TOML
  chmod 600 "$tmp/hp.toml.new"
  mv "$tmp/hp.toml.new" "$tmp/hp.toml"
}
write_config 4
# The console's name must be free: admins with the default app database "hyperpool" is a usage error.
set +e
"$HYPERPOOL_BINARY" serve --origin "$DIRECT" --admin-user ops >/dev/null 2>"$tmp/clash.err"
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "admin-user needs an application --database other than" "$tmp/clash.err" ||
  fail "admins with database hyperpool: rc $rc, $(head -1 "$tmp/clash.err")"
"$PGBIN/pgbench" -i -s 1 -q "$DIRECT" >"$tmp/init.out" 2>&1 || { cat "$tmp/init.out" >&2; fail "pgbench -i"; }

"$HYPERPOOL_BINARY" serve --config "$tmp/hp.toml" >"$tmp/out" 2>"$tmp/err" &
pid=$!
wait_for 15 test -s "$tmp/out" || fail "no connection string on stdout"
url=$(head -1 "$tmp/out")
port=$(sed -E 's|.*:([0-9]+)/app.*|\1|' <<<"$url")
export PGPASSWORD="$APP_PW"
APP="host=127.0.0.1 port=$port user=app dbname=app sslmode=disable"
CONSOLE="host=127.0.0.1 port=$port user=ops dbname=hyperpool sslmode=disable"
admin() { "$PGBIN/psql" -X -d "$CONSOLE" -v VERBOSITY=verbose -c "$1" 2>&1; }
admin_at() { "$PGBIN/psql" -XAt -F '|' -d "$CONSOLE" -c "$1"; }
# expect COMMAND TEXT...: the command's output holds every TEXT.
expect() {
  local command=$1 out
  shift
  out=$(admin "$command") || fail "$command failed: $out"
  for text in "$@"; do grep -qF -- "$text" <<<"$out" || fail "$command: no '$text' in: $out"; done
}

# --- every command through psql ---
"$PGBIN/psql" -XAtq -d "$APP" -c "SELECT 1" >/dev/null || fail "app login"
expect "SHOW POOLS" "cl_active" "cl_waiting" "sv_active" "sv_idle" "sv_used" "maxwait" "maxwait_us" "pool_mode" " app " "transaction"
expect "SHOW CLIENTS" "connect_time" " ops " "admin"
expect "SHOW SERVERS" "state" "remote_pid" "connect_time" "pinned" " idle "
spid=$(admin_at "SHOW SERVERS" | awk -F'|' '$4 == "idle" { print $5 }' | head -1)
[ -n "$spid" ] && [ "$spid" -gt 0 ] || fail "SHOW SERVERS: no backend pid: $(admin_at "SHOW SERVERS")"
[ "$("$PGBIN/psql" -XAtq -d "$ADMIN_URL" -c "SELECT count(*) FROM pg_stat_activity WHERE pid = $spid AND usename = '$ROLE'")" = 1 ] ||
  fail "SHOW SERVERS' remote_pid $spid is not a backend of $ROLE"
expect "SHOW STATS" "total_xact_count" "total_query_count" "total_received" "total_sent" "total_wait_time" "avg_xact_time" "p99_xact_time"
[ "$(admin_at "SHOW STATS" | cut -d'|' -f2)" -ge 1 ] || fail "SHOW STATS counted no transaction"
expect "SHOW CACHE" "endpoint" "client" "hits" "misses" "stores" "evictions" "bytes" "fingerprint"
expect "SHOW PINS" "temp_table" "advisory_lock" "set_role"
expect "SHOW CONFIG" "pool-size" "| 4 " "admin-user" "ops,root"
admin "SHOW CONFIG" | grep -qF "$ROLE_PW" && fail "SHOW CONFIG shows the origin password"
admin "SHOW CONFIG" | grep -qF "$APP_PW" && fail "SHOW CONFIG shows the app password"
expect "SHOW VERSION" "hyperpool "
expect "SHOW HELP" "SHOW POOLS" "KILL_CLIENT id" "SHUTDOWN"
expect "RECONNECT" "RECONNECT"
expect "show pools; show version" "cl_active" "hyperpool "
out=$(admin "SHOW NOTHING") && fail "an unknown command succeeded"
grep -q "ERROR:  42601" <<<"$out" || fail "unknown command: $out"
grep -q "SHOW POOLS" <<<"$out" || fail "the 42601 error does not list the commands: $out"
out=$(admin "PAUSE nosuchdb") && fail "PAUSE of an unknown database succeeded"
grep -q "ERROR:  3D000" <<<"$out" || fail "PAUSE nosuchdb: $out"

# Non-admins get 42501; the extended protocol gets 0A000 (no hang).
"$PY" - "$port" "$APP_PW" <<'PYEOF' || fail "42501 / 0A000 checks"
import asyncio, sys, asyncpg
port, pw = int(sys.argv[1]), sys.argv[2]
async def main():
    try:
        await asyncpg.connect(host="127.0.0.1", port=port, user="app", password=pw, database="hyperpool", ssl=False)
        sys.exit("a non-admin user reached the console")
    except asyncpg.PostgresError as e:
        assert e.sqlstate == "42501", (e.sqlstate, str(e))
    c = await asyncpg.connect(host="127.0.0.1", port=port, user="root", password=pw, database="hyperpool", ssl=False)
    try:
        await asyncio.wait_for(c.fetch("SHOW POOLS"), 10)  # asyncpg: Parse/Describe first
        sys.exit("the extended protocol was answered")
    except asyncpg.PostgresError as e:
        assert e.sqlstate == "0A000", (e.sqlstate, str(e))
    await c.close()
asyncio.run(main())
PYEOF

# --- PAUSE: a transaction in flight finishes; a new query waits until RESUME ---
"$PY" - "$port" "$APP_PW" "$tmp" >"$tmp/inflight.out" 2>&1 <<'PYEOF' &
import os, sys, time, psycopg
port, pw, tmp = sys.argv[1], sys.argv[2], sys.argv[3]
c = psycopg.connect(f"host=127.0.0.1 port={port} user=app password={pw} dbname=app sslmode=disable")
c.execute("SELECT 1")  # BEGIN ...: holds its origin connection
open(f"{tmp}/inflight.ready", "w").close()
deadline = time.monotonic() + 20
while not os.path.exists(f"{tmp}/inflight.go") and time.monotonic() < deadline:
    time.sleep(0.05)
print(c.execute("SELECT 2").fetchone()[0])
c.commit()
print("committed")
PYEOF
bg=$!
wait_for 10 test -e "$tmp/inflight.ready" || fail "the in-flight client did not start"
expect "PAUSE" "PAUSE"
touch "$tmp/inflight.go"
wait_for 10 bash -c "! kill -0 $bg 2>/dev/null" || fail "a transaction in flight did not finish while paused"
wait "$bg" || true
bg=
grep -q "committed" "$tmp/inflight.out" || fail "in-flight transaction while paused: $(cat "$tmp/inflight.out")"
admin_at "SHOW POOLS" | grep -q "|yes$" || fail "SHOW POOLS does not say paused"
"$PGBIN/psql" -XAtq -d "$APP" -c "SELECT 42, random() > 2" >"$tmp/paused.out" 2>&1 &
bg=$!
waiting() { [ "$(admin_at "SHOW POOLS" | cut -d'|' -f4)" -ge 1 ]; }
wait_for 10 waiting || fail "no query waiting in SHOW POOLS while paused"
kill -0 "$bg" 2>/dev/null || fail "the query finished while paused: $(cat "$tmp/paused.out")"
waited() { [ "$(admin_at "SHOW POOLS" | awk -F'|' '{ print $9 * 1000000 + $10 }')" -gt 0 ]; }
wait_for 10 waited || fail "SHOW POOLS maxwait stays 0 while a query waits: $(admin_at "SHOW POOLS")"
expect "RESUME" "RESUME"
wait_for 10 bash -c "! kill -0 $bg 2>/dev/null" || fail "the paused query did not finish after RESUME"
wait "$bg" || fail "the paused query failed: $(cat "$tmp/paused.out")"
bg=
grep -q "^42|f$" "$tmp/paused.out" || fail "paused query answered: $(cat "$tmp/paused.out")"

# --- KILL_CLIENT: FATAL 57P01 to that client ---
"$PY" - "$port" "$APP_PW" "$tmp" >"$tmp/victim.out" 2>&1 <<'PYEOF' &
import os, sys, time, psycopg
port, pw, tmp = sys.argv[1], sys.argv[2], sys.argv[3]
c = psycopg.connect(f"host=127.0.0.1 port={port} user=app password={pw} dbname=app sslmode=disable", autocommit=True)
c.execute("SELECT 1")
open(f"{tmp}/victim.ready", "w").close()
# Idle now: the FATAL arrives while nothing runs, as after pg_terminate_backend.
deadline = time.monotonic() + 20
while not os.path.exists(f"{tmp}/victim.go") and time.monotonic() < deadline:
    time.sleep(0.05)
try:
    c.execute("SELECT 1")
    print("no error")
except psycopg.Error as e:
    print(getattr(e, "sqlstate", None), str(e).strip().splitlines()[0])
PYEOF
bg=$!
wait_for 10 test -e "$tmp/victim.ready" || fail "the victim client did not start"
id=$(admin_at "SHOW CLIENTS" | awk -F'|' '$3 == "app" && $5 == "idle" { print $2 }' | head -1)
[ -n "$id" ] || fail "no idle app client in SHOW CLIENTS: $(admin_at "SHOW CLIENTS")"
expect "KILL_CLIENT $id" "KILL_CLIENT"
gone() { ! admin_at "SHOW CLIENTS" | awk -F'|' '{ print $2 }' | grep -qx "$id"; }
wait_for 10 gone || fail "client $id still listed after KILL_CLIENT"
touch "$tmp/victim.go"
wait "$bg" || true
bg=
grep -q "terminating connection due to administrator command" "$tmp/victim.out" || fail "victim saw: $(cat "$tmp/victim.out")"
out=$(admin "KILL_CLIENT 999999") && fail "KILL_CLIENT of an unknown id succeeded"

# --- reload under pgbench load ---
"$PGBIN/pgbench" -n -T 5 -c 8 -j 2 "$url" >"$tmp/bench.out" 2>&1 &
bg=$!
pool_size() { admin_at "SHOW POOLS" | cut -d'|' -f12; }
write_config 6
kill -HUP "$pid"
wait_for 10 bash -c "[ \"\$(\"$PGBIN/psql\" -XAt -F '|' -d \"$CONSOLE\" -c 'SHOW POOLS' | cut -d'|' -f12)\" = 6 ]" ||
  fail "pool size after SIGHUP: $(pool_size)"
admin_at "SHOW CONFIG" | grep -qx "pool-size|6|yes" || fail "SHOW CONFIG after SIGHUP: $(admin_at "SHOW CONFIG")"
printf 'threads = 2\n[pool\nsize = 9\n' >"$tmp/hp.toml"
kill -HUP "$pid"
wait_for 10 grep -q "reload rejected, keeping the running configuration" "$tmp/err" || fail "broken file not rejected in the log"
out=$(admin "RELOAD") && fail "RELOAD of a broken file succeeded"
grep -q "ERROR:  F0000" <<<"$out" || fail "RELOAD of a broken file: $out"
[ "$(pool_size)" = 6 ] || fail "the broken file changed the pool size to $(pool_size)"
write_config 3 1
expect "RELOAD" "RELOAD"
[ "$(pool_size)" = 3 ] || wait_for 10 bash -c "[ \"\$(\"$PGBIN/psql\" -XAt -F '|' -d \"$CONSOLE\" -c 'SHOW POOLS' | cut -d'|' -f12)\" = 3 ]" ||
  fail "pool size after RELOAD: $(pool_size)"
grep -q "reload: threads changed; needs a restart" "$tmp/err" || fail "no needs-restart line for threads"
admin_at "SHOW CONFIG" | grep -qx "threads|2|no" || fail "SHOW CONFIG should still show the running threads"
wait "$bg" || { cat "$tmp/bench.out" >&2; fail "pgbench failed"; }
bg=
cat "$tmp/bench.out" | grep -E "processed|failed" || true
grep -q "number of failed transactions: 0 " "$tmp/bench.out" || { cat "$tmp/bench.out" >&2; fail "failed transactions across the reloads"; }
grep -qE "number of transactions actually processed: [1-9]" "$tmp/bench.out" || fail "pgbench processed nothing"

# --- SHUTDOWN: drain and exit 0 ---
admin "SHUTDOWN" >"$tmp/shutdown.out" || true  # the console may close before its answer arrives
wait_for 20 bash -c "! kill -0 $pid 2>/dev/null" || fail "serve still running 20 s after SHUTDOWN"
set +e
wait "$pid"
rc=$?
set -e
pid=
[ "$rc" = 0 ] || fail "serve exited with $rc after SHUTDOWN"
grep -q "SHUTDOWN from the admin console" "$tmp/err" || fail "no SHUTDOWN line in the log"
echo "admin_test: ok"
