#!/usr/bin/env bash
# `hyperpool endpoint` and `hyperpool client` as two processes joined over TLS
# (the socket transport): psql and pgbench -S through the client reach the
# origin; a client with the wrong link secret and a plaintext peer are refused
# while the endpoint keeps serving; killing the endpoint gives the app a prompt
# 08006 error (no hang); a restarted endpoint is used again without restarting
# the client; both exit 0 on SIGTERM; given two endpoints, a client probes
# both and uses the one near the origin (latency placement).
# Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
set -euo pipefail
: "${HYPERPOOL_BINARY:?}" "${HYPERPOOL_TEST_PG_ENV:?}"
SOURCE_DIR=$(cd "$(dirname "$0")/../.." && pwd)
env_get() { grep "^$1=" "$HYPERPOOL_TEST_PG_ENV" | head -1 | cut -d= -f2-; }
urlencode() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
PGBIN=$(env_get PGBIN)
ADMIN_URL="postgresql://$(env_get ADMIN_USER):$(urlencode "$(env_get ADMIN_PASSWORD)")@$(env_get PGHOST):$(env_get PGPORT)/$(env_get PGDATABASE)?sslmode=disable"
# A role (and schema, for pgbench's tables) of this test's own.
ROLE="hp_remote_$$"
ROLE_PW="pw_$RANDOM$RANDOM"
"$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$ADMIN_URL" \
  -c "CREATE ROLE $ROLE LOGIN PASSWORD '$ROLE_PW'; CREATE SCHEMA $ROLE AUTHORIZATION $ROLE" >/dev/null
ORIGIN="postgresql://$ROLE:$ROLE_PW@$(env_get PGHOST):$(env_get PGPORT)/$(env_get PGDATABASE)?sslmode=disable"

tmp=$(mktemp -d)
ep= cl= bad= far= wan=
cleanup() {
  # Only the script itself: a background job (`cmd &`) killed after bash
  # forked it but before it exec'd `cmd` would otherwise run this trap too.
  [ "$BASHPID" = "$$" ] || return 0
  for p in $ep $cl $bad $far $wan; do kill -KILL "$p" 2>/dev/null || true; done
  "$PGBIN/psql" -XAtq -d "$ADMIN_URL" -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '$ROLE'" >/dev/null 2>&1 || true
  "$PGBIN/psql" -XAtq -d "$ADMIN_URL" -c "DROP SCHEMA IF EXISTS $ROLE CASCADE; DROP ROLE IF EXISTS $ROLE" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in ep.err cl.err bad.err far.err pl.err; do
    [ -f "$tmp/$f" ] && { echo "--- $f (tail):" >&2; tail -20 "$tmp/$f" >&2; }
  done
  exit 1
}
# Polls `cmd` every 0.1 s until it succeeds or `secs` pass.
wait_for() { local secs=$1; shift; local end=$((SECONDS + secs)); until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.1; done; }
gone() { ! kill -0 "$1" 2>/dev/null; }
# Sends SIGTERM and waits (bounded, without a background guard whose sleep
# would outlive the test) for exit status 0.
stop_ok() {  # name pid
  kill -TERM "$2"
  wait_for 15 gone "$2" || { kill -KILL "$2"; fail "$1 did not stop within 15 s of SIGTERM"; }
  local rc=0
  wait "$2" || rc=$?
  [ "$rc" = 0 ] || fail "$1 exited with $rc after SIGTERM"
}
psql_via() { timeout 30 "$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -d "$1" "${@:2}"; }

bash "$SOURCE_DIR/tests/support/gencerts.sh" "$tmp/certs"
openssl rand -hex 32 >"$tmp/secret"
openssl rand -hex 32 >"$tmp/wrong-secret"
chmod 600 "$tmp/secret" "$tmp/wrong-secret"

# --help documents the options.
help=$("$HYPERPOOL_BINARY" endpoint --help)
for opt in --listen --origin --tls-cert --tls-key --link-secret-file --pool-size --pool-mode; do
  grep -q -- "$opt" <<<"$help" || fail "endpoint --help lacks $opt"
done
help=$("$HYPERPOOL_BINARY" client --help)
for opt in --endpoint --tls-ca --link-secret-file --preopen --listen --user --threads; do
  grep -q -- "$opt" <<<"$help" || fail "client --help lacks $opt"
done
# TLS is not optional.
if "$HYPERPOOL_BINARY" endpoint --listen 127.0.0.1:0 --origin "$ORIGIN" --link-secret-file "$tmp/secret" \
  >/dev/null 2>"$tmp/usage.err"; then
  fail "endpoint started without a certificate"
fi
grep -q -- "--tls-cert" "$tmp/usage.err" || fail "no usage error naming --tls-cert"

# The endpoint and the client read most of their settings from --config FILE
# (the same TOML keys as serve's, plus [link]); the flags given override it.
cat >"$tmp/ep.toml" <<TOML
[listen]
address = "127.0.0.1:1"
[origin]
url = "$ORIGIN"
[pool]
size = 4
[link]
tls_cert = "$tmp/certs/server.crt"
tls_key = "$tmp/certs/server.key"
secret_file = "$tmp/secret"
[log]
connections = true
TOML
chmod 600 "$tmp/ep.toml"
start_endpoint() {  # listen address
  rm -f "$tmp/ep.out"
  "$HYPERPOOL_BINARY" endpoint --config "$tmp/ep.toml" --listen "$1" >"$tmp/ep.out" 2>>"$tmp/ep.err" &
  ep=$!
  wait_for 15 test -s "$tmp/ep.out" || fail "endpoint printed no address"
  addr=$(head -1 "$tmp/ep.out")
  [[ "$addr" == 127.0.0.1:[0-9]* ]] || fail "unexpected first line from endpoint: $addr"
}
start_endpoint 127.0.0.1:0
port=${addr##*:}

cat >"$tmp/cl.toml" <<TOML
threads = 2
[client]
user = "not_this_one"
database = "appdb"
[link]
endpoints = ["$addr"]
tls_ca = "$tmp/certs/ca.crt"
secret_file = "$tmp/secret"
[log]
connections = true
TOML
"$HYPERPOOL_BINARY" client --config "$tmp/cl.toml" --user app >"$tmp/cl.out" 2>"$tmp/cl.err" &
cl=$!
wait_for 15 test -s "$tmp/cl.out" || fail "client printed no connection string"
url=$(head -1 "$tmp/cl.out")
[[ "$url" == postgresql://app:*@127.0.0.1:*/appdb\?sslmode=disable ]] || fail "unexpected first line from client: $url"

out=$(psql_via "$url" -c "SELECT 40 + 2") || fail "psql through the client failed"
[ "$out" = 42 ] || fail "psql printed '$out'"
# --log-connections on both commands: the app's login at the client, the
# origin backend's pid at the endpoint.
wait_for 10 grep -q 'event=session_start client=127.0.0.1:[0-9]* session=[0-9]* user=app db=appdb tls=off' "$tmp/cl.err" \
  || fail "client logged no session_start"
grep -Eq 'event=origin_connect origin=[^ ]+ backend_pid=[1-9]' "$tmp/ep.err" || fail "endpoint logged no origin_connect"
out=$(psql_via "$url" -c "BEGIN" -c "SELECT current_user" -c "COMMIT") || fail "second psql failed"
[ "$out" = "$ROLE" ] || fail "the origin role seen through the client is '$out', not $ROLE"

# pgbench: initialise and 3 s of select-only with 4 clients through the client.
timeout 120 "$PGBIN/pgbench" -i -s 1 -q "$url" >"$tmp/init.out" 2>&1 || { cat "$tmp/init.out" >&2; fail "pgbench -i failed"; }
timeout 60 "$PGBIN/pgbench" -n -S -c 4 -j 2 -T 3 "$url" >"$tmp/bench.out" 2>&1 || { cat "$tmp/bench.out" >&2; fail "pgbench -S failed"; }
grep -E "number of transactions actually processed|^tps" "$tmp/bench.out" | sed 's/^/pgbench -S -c4 -T3: /'
processed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$tmp/bench.out")
[ "${processed:-0}" -gt 0 ] || fail "pgbench processed no transactions"
if grep -q "number of failed transactions: [1-9]" "$tmp/bench.out"; then cat "$tmp/bench.out" >&2; fail "pgbench had failures"; fi

# A client that knows the wrong secret: its app gets an error, the endpoint says why.
"$HYPERPOOL_BINARY" client --endpoint "$addr" --tls-ca "$tmp/certs/ca.crt" --link-secret-file "$tmp/wrong-secret" \
  --threads 1 >"$tmp/bad.out" 2>"$tmp/bad.err" &
bad=$!
wait_for 15 test -s "$tmp/bad.out" || fail "the second client printed no connection string"
bad_url=$(head -1 "$tmp/bad.out")
rc=0
timeout 20 "$PGBIN/psql" -XAtq -d "$bad_url" -c "SELECT 1" >/dev/null 2>"$tmp/bad.psql" || rc=$?
[ "$rc" != 0 ] || fail "psql through a client with the wrong secret succeeded"
[ "$rc" != 124 ] || fail "psql through a client with the wrong secret hung"
grep -q "hyperpool endpoint" "$tmp/bad.psql" || fail "unexpected error for the wrong secret: $(cat "$tmp/bad.psql")"
wait_for 10 grep -q "wrong link secret" "$tmp/ep.err" || fail "the endpoint did not log the wrong secret"
wait_for 10 grep -q "rejected the link secret" "$tmp/bad.err" || fail "the client did not log the rejected secret"
stop_ok "the client with the wrong secret" "$bad"
bad=

# A plaintext PostgreSQL client pointed at the endpoint is refused at once.
rc=0
timeout 20 "$PGBIN/psql" -XAtq -d "postgresql://x@127.0.0.1:$port/x?sslmode=disable&connect_timeout=10" \
  -c "SELECT 1" >/dev/null 2>&1 || rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "a plaintext client at the endpoint got rc $rc (0 = served, 124 = hung)"
out=$(psql_via "$url" -c "SELECT 'still serving'") || fail "the endpoint stopped serving after bad peers"
[ "$out" = "still serving" ] || fail "psql printed '$out'"

# The endpoint dies during a query: the app gets 08006 promptly, not a hang.
timeout -s KILL 20 "$PGBIN/psql" -XAtq -v VERBOSITY=verbose -d "$url" -c "SELECT pg_sleep(60)" \
  >/dev/null 2>"$tmp/killed.psql" &
sleeper=$!
wait_for 15 bash -c "\"$PGBIN/psql\" -XAtq -d \"$ADMIN_URL\" -c \"SELECT count(*) FROM pg_stat_activity WHERE usename = '$ROLE' AND query LIKE 'SELECT pg_sleep%'\" | grep -qx 1" \
  || fail "the sleeping query never reached the origin"
kill -KILL "$ep"
wait "$ep" 2>/dev/null || true
ep=
start=$SECONDS
rc=0
wait "$sleeper" || rc=$?
[ "$rc" != 0 ] || fail "the query survived the endpoint's death"
[ "$rc" != 137 ] || fail "psql hung after the endpoint died"
echo "psql failed $((SECONDS - start)) s after the endpoint was killed: $(head -1 "$tmp/killed.psql")"
grep -q "08006" "$tmp/killed.psql" || fail "expected SQLSTATE 08006, got: $(cat "$tmp/killed.psql")"

# A new session while no endpoint runs: a prompt 08006 error.
start=$SECONDS
rc=0
out=$(psql_via "$url" -c "SELECT 1" 2>&1) || rc=$?
[ "$rc" != 0 ] || fail "a query succeeded with no endpoint running"
[ "$rc" != 124 ] || fail "psql hung with no endpoint running"
grep -q "08006" <<<"$out" || fail "expected SQLSTATE 08006 with no endpoint, got: $out"
[ $((SECONDS - start)) -lt 10 ] || fail "the error took $((SECONDS - start)) s"

# The endpoint comes back on the same address: the same client serves again.
start_endpoint "127.0.0.1:$port"
wait_for 20 bash -c "out=\$(timeout 10 \"$PGBIN/psql\" -XAtq -d \"$url\" -c \"SELECT 'back'\" 2>/dev/null) && [ \"\$out\" = back ]" \
  || fail "the client did not use the restarted endpoint"

stop_ok client "$cl"
cl=

# Latency placement: a second endpoint whose origin is 40 ms away (through the
# WAN simulator), listed first; the client probes both and uses the near one.
"$HYPERPOOL_BINARY" wan --target "$(env_get PGHOST):$(env_get PGPORT)" --rtt 40 >"$tmp/wan.out" 2>"$tmp/wan.err" &
wan=$!
wait_for 15 test -s "$tmp/wan.out" || fail "wan printed no address"
wan_addr=$(head -1 "$tmp/wan.out")
FAR_ORIGIN="postgresql://$ROLE:$ROLE_PW@$wan_addr/$(env_get PGDATABASE)?sslmode=disable"
"$HYPERPOOL_BINARY" endpoint --listen 127.0.0.1:0 --origin "$FAR_ORIGIN" --tls-cert "$tmp/certs/server.crt" \
  --tls-key "$tmp/certs/server.key" --link-secret-file "$tmp/secret" --pool-size 2 >"$tmp/far.out" 2>"$tmp/far.err" &
far=$!
wait_for 15 test -s "$tmp/far.out" || fail "the far endpoint printed no address"
far_addr=$(head -1 "$tmp/far.out")
"$HYPERPOOL_BINARY" client --endpoint "$far_addr" --endpoint "$addr" --tls-ca "$tmp/certs/ca.crt" \
  --link-secret-file "$tmp/secret" --threads 1 >"$tmp/pl.out" 2>"$tmp/pl.err" &
cl=$!
wait_for 30 test -s "$tmp/pl.out" || fail "the placing client printed no connection string"
url=$(head -1 "$tmp/pl.out")
grep "placement:" "$tmp/pl.err" | sed 's/^/  /' || true
grep -q "placement: chose endpoint $addr" "$tmp/pl.err" || fail "the client did not choose the endpoint near the origin"
far_rtt=$(sed -n "s/.*endpoint $far_addr: round trip [0-9.]* ms, its origin round trip \([0-9.]*\) ms.*/\1/p" "$tmp/pl.err")
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 40 else 1)" "${far_rtt:-0}" \
  || fail "the far endpoint reported an origin round trip of '${far_rtt}' ms, not >= 40"
out=$(psql_via "$url" -c "SELECT 'placed'") || fail "psql through the placing client failed"
[ "$out" = placed ] || fail "psql printed '$out'"
stop_ok "the placing client" "$cl"
cl=
stop_ok "the far endpoint" "$far"
kill "$wan" 2>/dev/null; wait "$wan" 2>/dev/null || true

stop_ok endpoint "$ep"
ep=
grep -q "accepted" "$tmp/ep.err" || fail "the endpoint logged no link summary"
echo "remote_test: ok"
