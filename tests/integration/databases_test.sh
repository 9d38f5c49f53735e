#!/usr/bin/env bash
# Several databases in one `hyperpool serve --config FILE` and per-user
# database permissions (docs/architecture.md, "Several databases"), against
# a real PostgreSQL 15 holding three origin databases:
#  - [databases.alpha] (transaction mode, pool 1) and [databases.beta]
#    (session mode) reach their own origin database (current_database());
#    two sessions of alpha share its one backend between transactions, two
#    of beta each keep their own backend for every transaction;
#  - a cancel reaches the query of its session in a non-default database;
#  - user rep may use only beta: beta works, alpha gets 42501 after a correct
#    password; an unknown database gets 3D000 after a correct password and
#    the same 28P01 as a wrong password otherwise (asyncpg reads SQLSTATEs);
#  - SHOW POOLS has a row per database with its pool mode;
#  - a reload (SIGHUP) that removes beta, adds gamma and grows alpha's pool
#    while pgbench runs against alpha: zero failed transactions, gamma
#    reaches its database (and its own rows for a read alpha has cached),
#    beta is gone (3D000) and its origin connections
#    closed, SHOW POOLS follows; alpha's changed url is logged as needing a
#    restart.
# Every wait polls a condition with a deadline. Needs HYPERPOOL_BINARY and
# HYPERPOOL_TEST_PG_ENV (ctest sets both).
set -euo pipefail
: "${HYPERPOOL_BINARY:?}" "${HYPERPOOL_TEST_PG_ENV:?}"
PY=/usr/bin/python3
env_get() { grep "^$1=" "$HYPERPOOL_TEST_PG_ENV" | head -1 | cut -d= -f2-; }
urlencode() { "$PY" -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
PGBIN=$(env_get PGBIN)
PGH=$(env_get PGHOST)
PGP=$(env_get PGPORT)
ADMIN_URL="postgresql://$(env_get ADMIN_USER):$(urlencode "$(env_get ADMIN_PASSWORD)")@$PGH:$PGP/$(env_get PGDATABASE)?sslmode=disable"
ROLE="hp_dbs_test_$$"
ROLE_PW="pw_$RANDOM$RANDOM"
DB_A="${ROLE}_a"
DB_B="${ROLE}_b"
DB_C="${ROLE}_c"
tmp=$(mktemp -d)
pid=
bg=
cleanup() {
  [ -n "$bg" ] && kill "$bg" 2>/dev/null
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  for db in "$DB_A" "$DB_B" "$DB_C"; do
    "$PGBIN/psql" -XAtq -d "$ADMIN_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  done
  "$PGBIN/psql" -XAtq -d "$ADMIN_URL" -c "DROP ROLE IF EXISTS $ROLE" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; echo "--- serve stderr (tail):" >&2; tail -30 "$tmp/err" >&2 || true; exit 1; }
wait_for() { local secs=$1; shift; local end=$((SECONDS + secs)); until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.05; done; }

"$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$ADMIN_URL" -c "CREATE ROLE $ROLE LOGIN PASSWORD '$ROLE_PW'" \
  -c "CREATE DATABASE $DB_A OWNER $ROLE" -c "CREATE DATABASE $DB_B OWNER $ROLE" -c "CREATE DATABASE $DB_C OWNER $ROLE" >/dev/null
origin() { echo "postgresql://$ROLE@$PGH:$PGP/$1?sslmode=disable"; }
"$PGBIN/pgbench" -i -s 1 -q "postgresql://$ROLE:$ROLE_PW@$PGH:$PGP/$DB_A?sslmode=disable" >"$tmp/init.out" 2>&1 ||
  { cat "$tmp/init.out" >&2; fail "pgbench -i"; }

APP_PW="app_$RANDOM$RANDOM"
REP_PW="rep_$RANDOM$RANDOM"
printf '%s\n' "$ROLE_PW" >"$tmp/origin-pw"
printf '%s\n' "$REP_PW" >"$tmp/rep-pw"
chmod 600 "$tmp/origin-pw" "$tmp/rep-pw"
# write_config SECOND_NAME SECOND_DB [ALPHA_POOL [ALPHA_URL_EXTRA]]: alpha, plus SECOND_NAME in session mode.
write_config() {
  cat >"$tmp/hp.toml.new" <<TOML
threads = 2
[client]
user = "app"
database = "alpha"
password = "$APP_PW"
[admin]
users = ["app"]
[metrics]
listen = "127.0.0.1:0"
[databases.alpha]
url = "$(origin "$DB_A")${4:-}"
password_file = "$tmp/origin-pw"
pool_size = ${3:-1}
pool_mode = "transaction"
[databases.$1]
url = "$(origin "$2")"
password = "$ROLE_PW"
pool_size = 3
pool_mode = "session"
cache = false
[users]
rep = { password_file = "$tmp/rep-pw", databases = ["$1"] }
TOML
  chmod 600 "$tmp/hp.toml.new"
  mv "$tmp/hp.toml.new" "$tmp/hp.toml"
}
write_config beta "$DB_B"

"$HYPERPOOL_BINARY" serve --config "$tmp/hp.toml" >"$tmp/out" 2>"$tmp/err" &
pid=$!
wait_for 15 test -s "$tmp/out" || fail "no connection string on stdout"
url=$(head -1 "$tmp/out")
port=$(sed -E 's|.*:([0-9]+)/alpha.*|\1|' <<<"$url")
[ -n "$port" ] && [ "$port" != "$url" ] || fail "connection string does not name alpha: $url"
grep -q "database alpha: origin" "$tmp/err" && grep -q "database beta: origin" "$tmp/err" || fail "ready line lacks a database"
export PGPASSWORD="$APP_PW"
CONSOLE="host=127.0.0.1 port=$port user=app dbname=hyperpool sslmode=disable"
admin_at() { "$PGBIN/psql" -XAt -F '|' -d "$CONSOLE" -c "$1"; }
q() { "$PGBIN/psql" -XAtq -d "host=127.0.0.1 port=$port user=app dbname=$1 sslmode=disable" -c "$2"; }

# --- each database reaches its own origin database ---
[ "$(q alpha 'SELECT current_database()')" = "$DB_A" ] || fail "alpha reached $(q alpha 'SELECT current_database()')"
[ "$(q beta 'SELECT current_database()')" = "$DB_B" ] || fail "beta reached $(q beta 'SELECT current_database()')"

# --- pool modes, cancel, permissions (asyncpg reads SQLSTATEs) ---
"$PY" - "$port" "$APP_PW" "$REP_PW" <<'PYEOF' || fail "modes / cancel / permissions"
import asyncio, sys, asyncpg
port, app_pw, rep_pw = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def conn(user, pw, db):
    return asyncpg.connect(host="127.0.0.1", port=port, user=user, password=pw, database=db, ssl=False,
                           statement_cache_size=0)
async def pids(c):
    out = []
    for _ in range(3):
        async with c.transaction():
            out.append(await c.fetchval("SELECT pg_backend_pid()"))
    return out
async def refused(user, pw, db):
    try:
        c = await conn(user, pw, db)
    except asyncpg.PostgresError as e:
        return e.sqlstate, str(e)
    await c.close()
    return None, "logged in"
async def main():
    # transaction mode, pool 1: two open sessions share the one backend
    a1, a2 = await conn("app", app_pw, "alpha"), await conn("app", app_pw, "alpha")
    p1, p2 = await pids(a1), await pids(a2)
    assert len(set(p1 + p2)) == 1, ("alpha (transaction mode, pool 1) used several backends", p1, p2)
    # session mode: each session keeps its own backend for all its transactions
    b1, b2 = await conn("app", app_pw, "beta"), await conn("app", app_pw, "beta")
    q1, q2 = await pids(b1), await pids(b2)
    assert len(set(q1)) == 1 and len(set(q2)) == 1 and q1[0] != q2[0], ("beta (session mode)", q1, q2)
    assert q1[0] not in p1, "beta's backend is alpha's"
    # a cancel of a beta session's query (beta is not the default database)
    # reaches beta's Endpoint and that query, within seconds
    slow = asyncio.ensure_future(b1.fetchval("SELECT pg_sleep(30)"))
    await asyncio.sleep(0.5)
    started = asyncio.get_running_loop().time()
    slow.cancel()  # asyncpg sends a CancelRequest with b1's key and waits for the query's end
    try:
        await asyncio.wait_for(slow, 10)
    except asyncio.CancelledError:
        pass
    assert asyncio.get_running_loop().time() - started < 10, "the cancel did not reach beta's query"
    assert await b1.fetchval("SELECT 1", timeout=10) == 1
    assert await a1.fetchval("SELECT current_database()") == await a2.fetchval("SELECT current_database()")
    for c in (a1, a2, b1, b2):
        await c.close()
    # permissions: rep may use beta only; known after authentication only
    r = await conn("rep", rep_pw, "beta")
    assert (await r.fetchval("SELECT 1")) == 1
    await r.close()
    state, text = await refused("rep", rep_pw, "alpha")
    assert state == "42501" and 'permission denied for database "alpha"' in text, (state, text)
    state, text = await refused("app", app_pw, "nosuchdb")
    assert state == "3D000", (state, text)
    wrong = await refused("rep", "wrong", "alpha")
    unknown_db = await refused("rep", "wrong", "nosuchdb")
    assert wrong[0] == "28P01" and unknown_db == wrong, (wrong, unknown_db)
asyncio.run(main())
PYEOF

# --- /metrics: one sample per database ---
maddr=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$tmp/err" | head -1)
[ -n "$maddr" ] || fail "no metrics listener logged"
metrics=$(curl -sf "http://$maddr/metrics") || fail "/metrics did not answer"
grep -q '^hyperpool_transactions_total{database="alpha"} [1-9]' <<<"$metrics" &&
  grep -q '^hyperpool_transactions_total{database="beta"} ' <<<"$metrics" &&
  grep -q '^hyperpool_pool_max_connections{database="beta"} 3$' <<<"$metrics" ||
  fail "/metrics lacks per-database samples: $(grep -E 'transactions_total|pool_max' <<<"$metrics")"

# --- SHOW POOLS: one row per database ---
pools=$(admin_at "SHOW POOLS")
grep -q "^alpha|app|.*|transaction|1|no$" <<<"$pools" || fail "SHOW POOLS lacks alpha: $pools"
grep -q "^beta|app|.*|session|3|no$" <<<"$pools" || fail "SHOW POOLS lacks beta: $pools"
[ "$(admin_at "SHOW STATS" | wc -l)" = 2 ] || fail "SHOW STATS: $(admin_at "SHOW STATS")"
servers=$(admin_at "SHOW SERVERS")
grep -q "^S|app|beta|" <<<"$servers" || fail "SHOW SERVERS lacks beta's connections: $servers"

# --- reload: beta removed, gamma added, pgbench on alpha keeps going ---
"$PGBIN/pgbench" -n -T 5 -c 4 -j 2 "$url" >"$tmp/bench.out" 2>&1 &
bg=$!
wait_for 10 bash -c "[ \"\$(\"$PGBIN/psql\" -XAt -F '|' -d \"$CONSOLE\" -c 'SHOW STATS' | awk -F'|' '\$1 == \"alpha\" { print \$2 }')\" -gt 50 ]" ||
  fail "pgbench made no progress"
write_config gamma "$DB_C" 2 "&application_name=changed"
kill -HUP "$pid"
wait_for 10 grep -q "reloaded .*removed database beta.*added database gamma" "$tmp/err" || fail "no reload line"
pools=$(admin_at "SHOW POOLS")
grep -q "^gamma|" <<<"$pools" && ! grep -q "^beta|" <<<"$pools" || fail "SHOW POOLS after the reload: $pools"
grep -q "^alpha|app|.*|transaction|2|no$" <<<"$pools" || fail "alpha's pool size not reloaded: $pools"
grep -q "reload: databases.alpha origin changed; needs a restart" "$tmp/err" || fail "no needs-restart line for alpha's url"
[ "$(q gamma 'SELECT current_database()')" = "$DB_C" ] || fail "gamma reached $(q gamma 'SELECT current_database()')"
# The same cacheable read in two databases: each gets its own rows, never the
# other's cached result (the Client's cache tier is shared by its databases).
for db in "$DB_A" "$DB_C"; do
  "$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "postgresql://$ROLE:$ROLE_PW@$PGH:$PGP/$db?sslmode=disable" \
    -c "CREATE TABLE hp_same(v text)" -c "INSERT INTO hp_same VALUES ('rows of $db')" >/dev/null
done
for _ in 1 2 3; do
  [ "$(q alpha 'SELECT v FROM hp_same')" = "rows of $DB_A" ] || fail "alpha read $(q alpha 'SELECT v FROM hp_same')"
done
[ "$(q gamma 'SELECT v FROM hp_same')" = "rows of $DB_C" ] || fail "gamma read $(q gamma 'SELECT v FROM hp_same')"
"$PY" - "$port" "$APP_PW" "$REP_PW" <<'PYEOF' || fail "after the reload"
import asyncio, sys, asyncpg
port, app_pw, rep_pw = int(sys.argv[1]), sys.argv[2], sys.argv[3]
async def main():
    try:
        await asyncpg.connect(host="127.0.0.1", port=port, user="app", password=app_pw, database="beta", ssl=False)
        sys.exit("beta still served")
    except asyncpg.PostgresError as e:
        assert e.sqlstate == "3D000", (e.sqlstate, str(e))
    c = await asyncpg.connect(host="127.0.0.1", port=port, user="rep", password=rep_pw, database="gamma", ssl=False)
    assert await c.fetchval("SELECT current_database()") != ""
    await c.close()
asyncio.run(main())
PYEOF
wait "$bg" || { cat "$tmp/bench.out" >&2; fail "pgbench failed"; }
bg=
grep -E "processed|failed" "$tmp/bench.out" || true
grep -q "number of failed transactions: 0 " "$tmp/bench.out" || { cat "$tmp/bench.out" >&2; fail "failed transactions across the reload"; }
grep -qE "number of transactions actually processed: [1-9]" "$tmp/bench.out" || fail "pgbench processed nothing"
# beta's origin connections are closed once free (its sessions ended)
beta_backends() { "$PGBIN/psql" -XAtq -d "$ADMIN_URL" -c "SELECT count(*) FROM pg_stat_activity WHERE datname = '$DB_B'"; }
wait_for 10 bash -c "[ \"\$(\"$PGBIN/psql\" -XAtq -d \"$ADMIN_URL\" -c \"SELECT count(*) FROM pg_stat_activity WHERE datname = '$DB_B'\")\" = 0 ]" ||
  fail "beta's origin connections still open: $(beta_backends)"

kill -TERM "$pid"
set +e
wait "$pid"
rc=$?
set -e
pid=
[ "$rc" = 0 ] || fail "serve exited with $rc"
echo "PASS databases_test"
