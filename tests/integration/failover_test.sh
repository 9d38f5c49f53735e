#!/usr/bin/env bash
# Many Endpoints (docs/architecture.md, "Many Endpoints: failover and
# re-placement"): two `hyperpool endpoint`s in front of the fixture's
# PostgreSQL, A directly and B through a 20 ms WAN simulator, each logging in
# as a role of its own (so `SELECT current_user` through the client names the
# Endpoint that served). One `hyperpool client` given both (B first):
#   - it uses A (latency placement);
#   - A is killed: every new session succeeds, through B, from the first one;
#   - links opened ahead, and the invalidation watch, exist for the Endpoint
#     in use only (ss);
#   - A restarts: new sessions move back to A after --settle-probes healthy
#     probe rounds (the log says so), and none fails meanwhile;
#   - `hyperpool place` ranks A before B with both round trips, lists an
#     Endpoint that cannot reach its origin as not usable, and exits 1 when
#     no Endpoint can reach the origin.
# Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
set -euo pipefail
: "${HYPERPOOL_BINARY:?}" "${HYPERPOOL_TEST_PG_ENV:?}"
SOURCE_DIR=$(cd "$(dirname "$0")/../.." && pwd)
env_get() { grep "^$1=" "$HYPERPOOL_TEST_PG_ENV" | head -1 | cut -d= -f2-; }
urlencode() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
PGBIN=$(env_get PGBIN)
PGHOST_=$(env_get PGHOST)
PGPORT_=$(env_get PGPORT)
DB=$(env_get PGDATABASE)
ADMIN_URL="postgresql://$(env_get ADMIN_USER):$(urlencode "$(env_get ADMIN_PASSWORD)")@$PGHOST_:$PGPORT_/$DB?sslmode=disable"
ROLE_A="hp_fo_a_$$"
ROLE_B="hp_fo_b_$$"
PW="pw_$RANDOM$RANDOM"
"$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$ADMIN_URL" \
  -c "CREATE ROLE $ROLE_A LOGIN PASSWORD '$PW'; CREATE ROLE $ROLE_B LOGIN PASSWORD '$PW'" >/dev/null

tmp=$(mktemp -d)
epa= epb= epc= cl= cl2= wan=
cleanup() {
  [ "$BASHPID" = "$$" ] || return 0
  for p in $epa $epb $epc $cl $cl2 $wan; do kill -KILL "$p" 2>/dev/null || true; done
  "$PGBIN/psql" -XAtq -d "$ADMIN_URL" -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename IN ('$ROLE_A', '$ROLE_B')" >/dev/null 2>&1 || true
  "$PGBIN/psql" -XAtq -d "$ADMIN_URL" -c "DROP ROLE IF EXISTS $ROLE_A; DROP ROLE IF EXISTS $ROLE_B" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in a.err b.err c.err cl.err cl2.err place.out place.err; do
    [ -f "$tmp/$f" ] && { echo "--- $f (tail):" >&2; tail -25 "$tmp/$f" >&2; }
  done
  exit 1
}
wait_for() { local secs=$1; shift; local end=$((SECONDS + secs)); until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.1; done; }
gone() { ! kill -0 "$1" 2>/dev/null; }
stop_ok() {  # name pid
  kill -TERM "$2"
  wait_for 15 gone "$2" || { kill -KILL "$2"; fail "$1 did not stop within 15 s of SIGTERM"; }
  local rc=0
  wait "$2" || rc=$?
  [ "$rc" = 0 ] || fail "$1 exited with $rc after SIGTERM"
}

bash "$SOURCE_DIR/tests/support/gencerts.sh" "$tmp/certs" >/dev/null
openssl rand -hex 32 >"$tmp/secret"
chmod 600 "$tmp/secret"
LINK=(--tls-ca "$tmp/certs/ca.crt" --link-secret-file "$tmp/secret")

start_endpoint() {  # name listen-address origin-url; sets ep_pid and ep_addr
  rm -f "$tmp/$1.out"
  "$HYPERPOOL_BINARY" endpoint --listen "$2" --origin "$3" --tls-cert "$tmp/certs/server.crt" \
    --tls-key "$tmp/certs/server.key" --link-secret-file "$tmp/secret" --pool-size 2 >"$tmp/$1.out" 2>>"$tmp/$1.err" &
  ep_pid=$!
  wait_for 15 test -s "$tmp/$1.out" || fail "endpoint $1 printed no address"
  ep_addr=$(head -1 "$tmp/$1.out")
}

"$HYPERPOOL_BINARY" wan --target "$PGHOST_:$PGPORT_" --rtt 20 >"$tmp/wan.out" 2>"$tmp/wan.err" &
wan=$!
wait_for 15 test -s "$tmp/wan.out" || fail "wan printed no address"
start_endpoint a 127.0.0.1:0 "postgresql://$ROLE_A:$PW@$PGHOST_:$PGPORT_/$DB?sslmode=disable"
epa=$ep_pid a_addr=$ep_addr
start_endpoint b 127.0.0.1:0 "postgresql://$ROLE_B:$PW@$(head -1 "$tmp/wan.out")/$DB?sslmode=disable"
epb=$ep_pid b_addr=$ep_addr

# `hyperpool place`: A (near the origin) first, B second with its 20 ms origin.
"$HYPERPOOL_BINARY" place --endpoint "$b_addr" --endpoint "$a_addr" "${LINK[@]}" >"$tmp/place.out" 2>"$tmp/place.err" \
  || fail "place exited non-zero with two usable Endpoints"
sed 's/^/  place: /' "$tmp/place.out"
head -1 "$tmp/place.out" | grep -q "client_rtt_ms.*origin_rtt_ms" || fail "place printed no header"
awk 'NR == 2 { print $1, $2 }' "$tmp/place.out" | grep -qx "1 $a_addr" || fail "place did not rank A first"
b_origin=$(awk -v b="$b_addr" '$2 == b && $1 == 2 { print $4 }' "$tmp/place.out")
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 20 else 1)" "${b_origin:-0}" \
  || fail "place did not rank B second with an origin round trip >= 20 ms (got '${b_origin}')"
# C cannot reach its origin (nothing listens on its port); D does not exist.
dead_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_endpoint c 127.0.0.1:0 "postgresql://$ROLE_A:$PW@127.0.0.1:$dead_port/$DB?sslmode=disable&connect_timeout=2"
epc=$ep_pid c_addr=$ep_addr
"$HYPERPOOL_BINARY" place --endpoint "$c_addr" --endpoint "127.0.0.1:$dead_port" --endpoint "$a_addr" "${LINK[@]}" \
  >"$tmp/place.out" 2>"$tmp/place.err" || fail "place exited non-zero although A is usable"
sed 's/^/  place: /' "$tmp/place.out"
awk 'NR == 2 { print $1, $2 }' "$tmp/place.out" | grep -qx "1 $a_addr" || fail "place did not rank A first among A, C, D"
grep -q -- "^- *$c_addr .*not usable" "$tmp/place.out" || fail "place did not list C as not usable"
grep -q -- "^- *127.0.0.1:$dead_port .*not usable" "$tmp/place.out" || fail "place did not list D as not usable"
rc=0
"$HYPERPOOL_BINARY" place --endpoint "$c_addr" --endpoint "127.0.0.1:$dead_port" "${LINK[@]}" \
  >"$tmp/place.out" 2>"$tmp/place.err" || rc=$?
[ "$rc" = 1 ] || fail "place exited $rc (not 1) when no Endpoint can reach the origin"
stop_ok "endpoint C" "$epc"
epc=

# The client: B listed first, probes every 300 ms, 3 rounds to settle.
"$HYPERPOOL_BINARY" client --endpoint "$b_addr" --endpoint "$a_addr" "${LINK[@]}" --threads 2 --preopen 2 \
  --probe-interval 300ms --settle-probes 3 --region test >"$tmp/cl.out" 2>"$tmp/cl.err" &
cl=$!
wait_for 30 test -s "$tmp/cl.out" || fail "client printed no connection string"
url=$(head -1 "$tmp/cl.out")
served_by() { timeout 20 "$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -d "$url" -c "SELECT current_user"; }
grep -q "placement: chose endpoint $a_addr (latency placement" "$tmp/cl.err" || fail "the client did not choose A by latency"
# Links opened ahead (--preopen 2) and the Client tier's invalidation watch
# (one link) go to the Endpoint in use only: the client's established
# connections to each (probe links are short-lived).
links_to() { ss -tnpH state established "dst $1" 2>/dev/null | grep -c "pid=$cl," || true; }
ahead_on() {  # in-use other
  [ "$(links_to "$1")" -ge 3 ] && [ "$(links_to "$2")" = 0 ]
}
wait_for 10 ahead_on "$a_addr" "$b_addr" \
  || fail "links opened ahead: $(links_to "$a_addr") to A, $(links_to "$b_addr") to B (want >= 3: 2 ahead + the watch, and 0)"
for i in 1 2 3 4 5; do
  who=$(served_by) || fail "session $i before the kill failed"
  [ "$who" = "$ROLE_A" ] || fail "session $i before the kill was served by $who, not A"
done

# A second client that probes only every 60 s: its sessions after the kill can
# only succeed by trying B when a link to A cannot be opened.
"$HYPERPOOL_BINARY" client --endpoint "$a_addr" --endpoint "$b_addr" "${LINK[@]}" --threads 1 --preopen 2 \
  --probe-interval 60 >"$tmp/cl2.out" 2>"$tmp/cl2.err" &
cl2=$!
wait_for 30 test -s "$tmp/cl2.out" || fail "the second client printed no connection string"
url2=$(head -1 "$tmp/cl2.out")
grep -q "placement: chose endpoint $a_addr (latency placement" "$tmp/cl2.err" || fail "the second client did not choose A"

# Kill A: from the first new session on, every one succeeds through B.
kill -KILL "$epa"
wait "$epa" 2>/dev/null || true
epa=
killed_at=$(date +%s.%N)
for i in $(seq 1 10); do
  who=$(served_by 2>"$tmp/psql.err") || fail "session $i after the kill failed: $(cat "$tmp/psql.err")"
  [ "$who" = "$ROLE_B" ] || fail "session $i after the kill was served by $who, not B"
done
for i in 1 2 3; do
  who=$(url=$url2 served_by 2>"$tmp/psql.err") || fail "session $i of the second client after the kill failed: $(cat "$tmp/psql.err")"
  [ "$who" = "$ROLE_B" ] || fail "session $i of the second client after the kill was served by $who, not B"
done
grep -q "placement: chose endpoint $b_addr (a link to $a_addr could not be opened)" "$tmp/cl2.err" \
  || fail "the second client did not move to B at link-open time"
stop_ok "the second client" "$cl2"
cl2=
wait_for 10 ahead_on "$b_addr" "$a_addr" \
  || fail "after the kill, links opened ahead: $(links_to "$b_addr") to B, $(links_to "$a_addr") to A (want >= 3: 2 ahead + the watch, and 0)"
echo "10 of 10 sessions after A was killed served by B (in $(python3 -c "import sys, time; print(round(time.time() - float(sys.argv[1]), 2))" "$killed_at") s)"
wait_for 10 grep -q "placement: chose endpoint $b_addr ($a_addr is down\|placement: chose endpoint $b_addr (a link to $a_addr" "$tmp/cl.err" \
  || fail "the client did not log the move to B"

# A comes back on the same address: sessions move back after it settled; none fails on the way.
start_endpoint a "$a_addr" "postgresql://$ROLE_A:$PW@$PGHOST_:$PGPORT_/$DB?sslmode=disable"
epa=$ep_pid
sessions=0
moved_back() {
  local who
  who=$(served_by 2>"$tmp/psql.err") || fail "a session failed while A came back: $(cat "$tmp/psql.err")"
  sessions=$((sessions + 1))
  [ "$who" = "$ROLE_A" ]
}
wait_for 20 moved_back || fail "new sessions did not move back to A within 20 s"
grep -q "placement: chose endpoint $a_addr (cheaper than $b_addr for 3 consecutive probes)" "$tmp/cl.err" \
  || fail "the move back to A was not after 3 settled probes"
echo "back on A after $sessions sessions (all succeeded)"
for i in 1 2 3; do
  who=$(served_by) || fail "session $i after the move back failed"
  [ "$who" = "$ROLE_A" ] || fail "session $i after the move back was served by $who, not A"
done
wait_for 10 ahead_on "$a_addr" "$b_addr" \
  || fail "after the move back, links opened ahead: $(links_to "$a_addr") to A, $(links_to "$b_addr") to B"
grep "placement:" "$tmp/cl.err" | sed 's/^/  /'

stop_ok client "$cl"
cl=
stop_ok "endpoint A" "$epa"
epa=
stop_ok "endpoint B" "$epb"
epb=
kill "$wan" 2>/dev/null; wait "$wan" 2>/dev/null || true
wan=
echo "failover_test: ok"
