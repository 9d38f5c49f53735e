#!/usr/bin/env bash
# Many Clients, many Endpoints, one shared tier (issue 13's end-to-end check;
# docs/architecture.md "Many Endpoints" and "Shared cache tier"): two
# `hyperpool endpoint`s A and B in front of the fixture's PostgreSQL, both
# with --redis-url on one Debian redis-server this test starts, and two
# `hyperpool client`s:
#   client 1 is given A and W, where W is B behind a 20 ms WAN simulator, so
#            latency placement picks A;
#   client 2 is given W only (so it is served by B).
# Where each answer came from is proven with the origin's pg_stat_statements
# (calls of the test's query text):
#   - a read through client 1 / A reaches the origin once; the same read
#     through client 2 / B is served from Redis (calls unchanged);
#   - a write through client 2 / B makes client 1's next read fresh, with
#     both Clients' own tiers on: client 1 hears of it over its invalidation
#     watch (B -> Redis pub/sub -> A -> client 1's watch link), whether it
#     has no session open at the time of the write (psql runs one per read)
#     or one session open throughout (psycopg); polled with a deadline of
#     2 s, the delays printed;
#   - Redis stopped: reads and writes through both clients keep working and
#     stay correct (from the origin);
#   - A killed: new sessions through client 1 succeed through W/B from the
#     first one on; A restarted: client 1 moves back after --settle-probes.
# Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both); the
# fixture preloads pg_stat_statements (tests/support/pgcluster.sh).
set -euo pipefail
: "${HYPERPOOL_BINARY:?}" "${HYPERPOOL_TEST_PG_ENV:?}"
SOURCE_DIR=$(cd "$(dirname "$0")/../.." && pwd)
env_get() { grep "^$1=" "$HYPERPOOL_TEST_PG_ENV" | head -1 | cut -d= -f2-; }
urlencode() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PGBIN=$(env_get PGBIN)
PGHOST_=$(env_get PGHOST)
PGPORT_=$(env_get PGPORT)
DB=$(env_get PGDATABASE)
ADMIN_URL="postgresql://$(env_get ADMIN_USER):$(urlencode "$(env_get ADMIN_PASSWORD)")@$PGHOST_:$PGPORT_/$DB?sslmode=disable"
ROLE="hp_me_$$"
TABLE="hp_me_t_$$"
PW="pw_$RANDOM$RANDOM"
admin_sql() { "$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$ADMIN_URL" -c "$1"; }
admin_sql "CREATE ROLE $ROLE LOGIN PASSWORD '$PW'; CREATE TABLE $TABLE (k int PRIMARY KEY, v text);
           INSERT INTO $TABLE VALUES (1, 'one'); GRANT SELECT, UPDATE ON $TABLE TO $ROLE;
           CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null

tmp=$(mktemp -d)
epa= epb= cl1= cl2= wan= redis=
cleanup() {
  [ "$BASHPID" = "$$" ] || return 0
  for p in $epa $epb $cl1 $cl2 $wan $redis; do kill -KILL "$p" 2>/dev/null || true; done
  "$PGBIN/psql" -XAtq -d "$ADMIN_URL" -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '$ROLE'" >/dev/null 2>&1 || true
  "$PGBIN/psql" -XAtq -d "$ADMIN_URL" -c "DROP TABLE IF EXISTS $TABLE; DROP ROLE IF EXISTS $ROLE" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in a.err b.err cl1.err cl2.err wan.err redis.log psql.err; do
    [ -f "$tmp/$f" ] && { echo "--- $f (tail):" >&2; tail -25 "$tmp/$f" >&2; }
  done
  exit 1
}
wait_for() { local secs=$1; shift; local end=$((SECONDS + secs)); until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.05; done; }
gone() { ! kill -0 "$1" 2>/dev/null; }

# Redis, on a free port in a directory of its own, nothing saved.
REDIS_PORT=$(free_port)
start_redis() {
  /usr/bin/redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
    --logfile "$tmp/redis.log" &
  redis=$!
  wait_for 10 redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 || fail "redis-server did not answer PING"
}
start_redis

bash "$SOURCE_DIR/tests/support/gencerts.sh" "$tmp/certs" >/dev/null
openssl rand -hex 32 >"$tmp/secret"
chmod 600 "$tmp/secret"
LINK=(--tls-ca "$tmp/certs/ca.crt" --link-secret-file "$tmp/secret")
ORIGIN="postgresql://$ROLE:$PW@$PGHOST_:$PGPORT_/$DB?sslmode=disable"

start_endpoint() {  # name listen-address; sets ep_pid and ep_addr
  rm -f "$tmp/$1.out"
  "$HYPERPOOL_BINARY" endpoint --listen "$2" --origin "$ORIGIN" --tls-cert "$tmp/certs/server.crt" \
    --tls-key "$tmp/certs/server.key" --link-secret-file "$tmp/secret" --pool-size 2 \
    --redis-url "redis://127.0.0.1:$REDIS_PORT" --redis-timeout 500 >"$tmp/$1.out" 2>>"$tmp/$1.err" &
  ep_pid=$!
  wait_for 15 test -s "$tmp/$1.out" || fail "endpoint $1 printed no address"
  ep_addr=$(head -1 "$tmp/$1.out")
}
start_endpoint a 127.0.0.1:0
epa=$ep_pid a_addr=$ep_addr
start_endpoint b 127.0.0.1:0
epb=$ep_pid b_addr=$ep_addr
"$HYPERPOOL_BINARY" wan --target "$b_addr" --rtt 20 >"$tmp/wan.out" 2>"$tmp/wan.err" &
wan=$!
wait_for 15 test -s "$tmp/wan.out" || fail "wan printed no address"
w_addr=$(head -1 "$tmp/wan.out")

# The Clients' own tiers are on (the default), each with its invalidation
# watch (docs/architecture.md, "Invalidation").
"$HYPERPOOL_BINARY" client --endpoint "$w_addr" --endpoint "$a_addr" "${LINK[@]}" --threads 1 --preopen 1 \
  --probe-interval 300ms --settle-probes 3 --region test >"$tmp/cl1.out" 2>"$tmp/cl1.err" &
cl1=$!
"$HYPERPOOL_BINARY" client --endpoint "$w_addr" "${LINK[@]}" --threads 1 --preopen 1 >"$tmp/cl2.out" 2>"$tmp/cl2.err" &
cl2=$!
wait_for 30 test -s "$tmp/cl1.out" || fail "client 1 printed no connection string"
wait_for 30 test -s "$tmp/cl2.out" || fail "client 2 printed no connection string"
url1=$(head -1 "$tmp/cl1.out")
url2=$(head -1 "$tmp/cl2.out")
grep -q "placement: chose endpoint $a_addr (latency placement" "$tmp/cl1.err" || fail "client 1 did not choose A by latency"

READ="SELECT v FROM $TABLE WHERE k = 1"
via() { timeout 20 "$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$1" -c "$2" 2>"$tmp/psql.err"; }
# The origin's executions of the read (pg_stat_statements normalises the
# constant; the text names this test's table).
origin_calls() {
  admin_sql "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
             WHERE query LIKE 'SELECT v FROM $TABLE WHERE k = %'"
}

# 0. Until an Endpoint has read the origin's catalog, a read may not be
# cacheable yet: warm each with another query until Redis holds one more entry.
entries() { redis-cli -p "$REDIS_PORT" --scan --pattern '*:e:*' | wc -l; }
warm() {  # url query
  local before got
  before=$(entries)
  stored() {
    got=$(via "$1" "$2") || fail "warm-up read failed: $(cat "$tmp/psql.err")"
    [ "$(entries)" -gt "$before" ]
  }
  wait_for 10 stored "$1" "$2" || fail "nothing was stored in Redis for '$2': keys $(redis-cli -p "$REDIS_PORT" --scan | tr '\n' ' ')"
}
warm "$url1" "SELECT k FROM $TABLE WHERE v = 'warm a'"
warm "$url2" "SELECT k FROM $TABLE WHERE v = 'warm b'"

# 1. A read through client 1 / A: one origin execution, then stored in Redis.
c0=$(origin_calls)
before=$(entries)
got=$(via "$url1" "$READ") || fail "read through client 1 failed: $(cat "$tmp/psql.err")"
[ "$got" = one ] || fail "read through client 1 returned '$got'"
c1=$(origin_calls)
[ "$c1" = $((c0 + 1)) ] || fail "the first read reached the origin $((c1 - c0)) times, not once"
wait_for 10 test "$(entries)" -gt "$before" || fail "the read was not stored in Redis"

# 2. The same read through client 2 / B: from the shared tier, no origin execution.
got=$(via "$url2" "$READ") || fail "read through client 2 failed: $(cat "$tmp/psql.err")"
[ "$got" = one ] || fail "read through client 2 returned '$got'"
c2=$(origin_calls)
[ "$c2" = "$c1" ] || fail "client 2's read reached the origin ($((c2 - c1)) executions): not served from Redis"
echo "a read through client 1 / A reached the origin once; the same read through client 2 / B was served from Redis"

# Client 1's own tier holds the read now: answered with no origin execution.
got=$(via "$url1" "$READ") || fail "second read through client 1 failed: $(cat "$tmp/psql.err")"
[ "$got" = one ] || fail "second read through client 1 returned '$got'"
[ "$(origin_calls)" = "$c2" ] || fail "client 1's second read reached the origin"
grep -q "cache_watch_up" "$tmp/cl1.err" || fail "client 1 logged no subscribed invalidation watch"

# 3. A write through client 2 / B while client 1 has NO session open (each
# psql above has exited): client 1's next reads turn fresh within 2 s.
via "$url2" "UPDATE $TABLE SET v = 'two' WHERE k = 1" >/dev/null || fail "write through client 2 failed: $(cat "$tmp/psql.err")"
written_at=$(date +%s.%N)
stale_reads=0
fresh1() { [ "$(via "$url1" "$READ")" = two ] || { stale_reads=$((stale_reads + 1)); false; }; }
wait_for 2 fresh1 || fail "client 1 (no session open at the write) still read '$(via "$url1" "$READ")' 2 s after client 2's write"
echo "client 1 (no session open) read the write made through client 2 after $(python3 -c "import sys, time; print(round((time.time() - float(sys.argv[1])) * 1000, 1))" "$written_at") ms ($stale_reads stale reads before)"
[ "$(origin_calls)" -gt "$c2" ] || fail "client 1's fresh read did not come from the origin"

# 3b. The same with one session of client 1 open throughout (read, cached in
# its tier, the write through client 2, then reads on the same session).
/usr/bin/python3 - "$url1" "$url2" "$TABLE" <<'PY' >"$tmp/open.out" 2>"$tmp/psql.err" || fail "the open-session case failed: $(cat "$tmp/open.out" "$tmp/psql.err")"
import sys, time
import psycopg
url1, url2, table = sys.argv[1:4]
read = f"SELECT v FROM {table} WHERE k = 1"
with psycopg.connect(url1, autocommit=True) as c1, psycopg.connect(url2, autocommit=True) as c2:
    for _ in range(3):  # stored in client 1's tier (and served from it)
        assert c1.execute(read).fetchone()[0] == "two", "client 1 did not read 'two' first"
    c2.execute(f"UPDATE {table} SET v = 'two and a half' WHERE k = 1")
    t0 = time.monotonic()
    stale = 0
    while c1.execute(read).fetchone()[0] != "two and a half":
        stale += 1
        if time.monotonic() - t0 > 2:
            sys.exit(f"client 1 (session open) still read the old value 2 s after client 2's write")
        time.sleep(0.002)
    print(f"{(time.monotonic() - t0) * 1000:.1f} ms ({stale} stale reads before)")
PY
echo "client 1 (one session open throughout) read the write made through client 2 after $(cat "$tmp/open.out")"

# 4. Redis stopped: both clients keep reading and writing correctly.
kill -TERM "$redis"
wait_for 10 gone "$redis" || fail "redis-server did not stop"
wait "$redis" 2>/dev/null || true
redis=
via "$url1" "UPDATE $TABLE SET v = 'three' WHERE k = 1" >/dev/null || fail "write through client 1 without Redis failed: $(cat "$tmp/psql.err")"
fresh_both() { [ "$(via "$url1" "$READ")" = three ] && [ "$(via "$url2" "$READ")" = three ]; }
wait_for 5 fresh_both || fail "without Redis, the clients read '$(via "$url1" "$READ")' / '$(via "$url2" "$READ")', not 'three'"
for i in 1 2 3; do
  via "$url2" "$READ" >/dev/null || fail "read $i through client 2 without Redis failed: $(cat "$tmp/psql.err")"
done
grep -qi "redis" "$tmp/a.err" || fail "endpoint A did not log the loss of Redis"
echo "without Redis both clients read and wrote correctly"
start_redis

# 5. A killed: client 1's new sessions go through W/B from the first one on.
kill -KILL "$epa"
wait "$epa" 2>/dev/null || true
epa=
for i in $(seq 1 5); do
  got=$(via "$url1" "$READ") || fail "session $i through client 1 after A was killed failed: $(cat "$tmp/psql.err")"
  [ "$got" = three ] || fail "session $i through client 1 after A was killed read '$got'"
done
wait_for 10 grep -q "placement: chose endpoint $w_addr" "$tmp/cl1.err" || fail "client 1 did not log its move to W"
echo "5 of 5 sessions through client 1 after A was killed succeeded (through B)"

# 6. A back on its address: client 1 returns after it settled; no session fails meanwhile.
start_endpoint a "$a_addr"
epa=$ep_pid
back_on_a() {
  via "$url1" "$READ" >/dev/null || fail "a session through client 1 failed while A came back: $(cat "$tmp/psql.err")"
  grep -q "placement: chose endpoint $a_addr (cheaper than $w_addr" "$tmp/cl1.err"
}
wait_for 20 back_on_a || fail "client 1 did not move back to A within 20 s"
via "$url1" "$READ" >/dev/null || fail "a session through client 1 after the move back failed"
echo "client 1 moved back to A"

for p in $cl1 $cl2 $epa $epb; do kill -TERM "$p" 2>/dev/null || true; done
for p in $cl1 $cl2 $epa $epb; do wait_for 15 gone "$p" || fail "process $p did not stop within 15 s of SIGTERM"; done
cl1= cl2= epa= epb=
echo "multi_endpoint_test: ok"
