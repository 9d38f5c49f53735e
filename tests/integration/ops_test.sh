#!/usr/bin/env bash
# Operations (docs/architecture.md, "Operations"): `hyperpool serve`
#  - --metrics-listen 127.0.0.1:0 logs "metrics on http://HOST:PORT/metrics";
#    /metrics is strict Prometheus text (metrics_check.py) whose counters move
#    with queries run by psql, and whose login histogram counts each psql
#    login once (not a refused one); /healthz answers 200 "ok"; other paths 404;
#    /dashboard.json of serve, endpoint and client names the role and link;
#  - --listen-unix DIR serves psql -h DIR -p PORT over DIR/.s.PGSQL.PORT
#    (mode 0777), removed at stop;
#  - --config FILE sets the options (flags override it), warns when a file
#    holding a password is readable by others, and names key and line of
#    unknown keys and wrong types.
# Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
set -euo pipefail
: "${HYPERPOOL_BINARY:?}" "${HYPERPOOL_TEST_PG_ENV:?}"
here=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
env_get() { grep "^$1=" "$HYPERPOOL_TEST_PG_ENV" | head -1 | cut -d= -f2-; }
PGBIN=$(env_get PGBIN)
PW=$(env_get ADMIN_PASSWORD)
BARE="postgresql://$(env_get ADMIN_USER)@$(env_get PGHOST):$(env_get PGPORT)/$(env_get PGDATABASE)?sslmode=disable"
tmp=$(mktemp -d)
pid=
ep_pid=
cleanup() {
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  [ -n "$ep_pid" ] && kill -KILL "$ep_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; echo "--- serve stderr:" >&2; cat "$tmp/err" >&2 || true; exit 1; }
wait_for() { local secs=$1; shift; local end=$((SECONDS + secs)); until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.1; done; }
# http PATH: prints "STATUS\nBODY" from the metrics listener.
http() {
  "$PY" - "$metrics" "$1" <<'PYEOF'
import http.client, sys
host, port = sys.argv[1].rsplit(":", 1)
c = http.client.HTTPConnection(host, int(port), timeout=10)
c.request("GET", sys.argv[2])
r = c.getresponse()
print(r.status)
if r.status == 200 and sys.argv[2] == "/metrics":
    ct = r.getheader("Content-Type")
    assert ct.startswith("text/plain; version=0.0.4"), ct
sys.stdout.write(r.read().decode())
PYEOF
}
stop_serve() {
  kill -TERM "$pid"
  wait_for 15 bash -c "! kill -0 $pid 2>/dev/null" || fail "serve did not stop within 15 s of SIGTERM"
  set +e; wait "$pid"; local rc=$?; set -e
  pid=
  [ "$rc" = 0 ] || fail "serve exited with $rc"
}

# --- metrics, healthz and the Unix socket, options from a config file ---
mkdir "$tmp/sock"
printf '%s\n' "$PW" >"$tmp/origin-pw"
chmod 600 "$tmp/origin-pw"
cat >"$tmp/hp.toml" <<TOML
threads = 2
[listen]
address = "127.0.0.1:0"
unix_socket_dir = "$tmp/sock"
[metrics]
listen = "127.0.0.1:0"
[origin]
url = "$BARE"
password_file = "$tmp/origin-pw"
[client]
user = "fromfile"
database = "appdb"
[pool]
size = 2
TOML
# --user on the command line overrides client.user from the file.
PGPASSWORD= PGPASSFILE=/nonexistent "$HYPERPOOL_BINARY" serve --config "$tmp/hp.toml" --user flaguser \
  >"$tmp/out" 2>"$tmp/err" &
pid=$!
wait_for 15 test -s "$tmp/out" || fail "no connection string on stdout"
url=$(head -1 "$tmp/out")
[[ "$url" == postgresql://flaguser:*@127.0.0.1:*/appdb\?sslmode=disable ]] || fail "flag did not override the file: $url"
metrics=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$tmp/err" | head -1)
[ -n "$metrics" ] || fail "no 'metrics on' line in stderr"
port=$(sed -E 's|.*@127\.0\.0\.1:([0-9]+)/.*|\1|' <<<"$url")
password=$("$PY" -c 'import sys, urllib.parse as u; print(u.unquote(u.urlsplit(sys.argv[1]).password))' "$url")

[ "$(http /healthz)" = "$(printf '200\nok')" ] || fail "/healthz: $(http /healthz)"
nope=$(http /nope); [ "${nope%%$'\n'*}" = 404 ] || fail "/nope did not 404: $nope"
http /metrics >"$tmp/m1.raw"; [ "$(head -1 "$tmp/m1.raw")" = 200 ] || fail "/metrics: $(head -3 "$tmp/m1.raw")"
tail -n +2 "$tmp/m1.raw" >"$tmp/m1"
"$PY" "$here/metrics_check.py" parse "$tmp/m1" >/dev/null || fail "first scrape is not valid exposition text"

# The Unix socket, as PostgreSQL lays it out.
sock="$tmp/sock/.s.PGSQL.$port"
[ -S "$sock" ] || fail "no socket $sock"
[ "$(stat -c %a "$sock")" = 777 ] || fail "socket mode $(stat -c %a "$sock"), not 777"
out=$(PGPASSWORD="$password" "$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -h "$tmp/sock" -p "$port" -U flaguser -d appdb \
  -c "SELECT 'over unix'") || fail "psql over the Unix socket failed"
[ "$out" = "over unix" ] || fail "psql over the Unix socket printed '$out'"

# Work to count: transactions, a repeated cacheable query (a cache hit).
for i in 1 2 3; do
  "$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$url" -c "BEGIN" -c "SELECT $i" -c "COMMIT" >/dev/null || fail "psql $i failed"
  "$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$url" -c "SELECT 12345 AS cached" >/dev/null || fail "psql cached $i failed"
done
# A refused login: accepted, but no login to time.
if PGPASSWORD=wrong "$PGBIN/psql" -XAtq -h 127.0.0.1 -p "$port" -U flaguser -d appdb -c "SELECT 1" >/dev/null 2>&1; then
  fail "a wrong password logged in"
fi
http /metrics >"$tmp/m2.raw"; tail -n +2 "$tmp/m2.raw" >"$tmp/m2"
"$PY" "$here/metrics_check.py" moved "$tmp/m1" "$tmp/m2" || { cat "$tmp/m2" >&2; fail "counters did not move"; }
# The login histogram counted each login above (1 over the Unix socket, 6
# over TCP) once, and not the refused one; accepted counts all 8.
sample() {  # sample FILE NAME: the value of the unlabelled sample NAME
  "$PY" "$here/metrics_check.py" parse "$1" | "$PY" -c '
import json, sys
found = [v for n, l, v in json.load(sys.stdin) if n == sys.argv[1] and not l]
print(int(found[0])) if found else sys.exit(f"no sample {sys.argv[1]}")' "$2"
}
for f in m1 m2; do
  for name in hyperpool_client_login_duration_seconds_count hyperpool_client_connections_accepted_total; do
    sample "$tmp/$f" "$name" >"$tmp/$f.$name" || fail "/metrics ($f) has no $name"
  done
done
delta() { echo $(( $(cat "$tmp/m2.$1") - $(cat "$tmp/m1.$1") )); }
logins=$(delta hyperpool_client_login_duration_seconds_count)
accepted=$(delta hyperpool_client_connections_accepted_total)
[ "$logins" = 7 ] && [ "$accepted" = 8 ] || fail "login histogram counted $logins logins of 7, accepted $accepted of 8"
stop_serve
[ ! -e "$sock" ] || fail "the Unix socket $sock is still there after stop"

# --- config file errors name the key and line; warnings ---
bad() {  # bad LINE_PATTERN TOML...: serve must refuse the file with a message matching the pattern
  local want=$1; shift
  printf '%s\n' "$@" >"$tmp/bad.toml"
  set +e; "$HYPERPOOL_BINARY" serve --config "$tmp/bad.toml" >/dev/null 2>"$tmp/err"; local rc=$?; set -e
  [ "$rc" = 2 ] || fail "bad config ($*) exited $rc, not 2"
  grep -q -- "$want" "$tmp/err" || fail "bad config ($*): message lacks '$want'"
}
bad "bad.toml:2: pool.sise: unknown key" "[pool]" "sise = 3"
bad "bad.toml:4: pool.size: must be an integer" "[origin]" "url = \"$BARE\"" "[pool]" "size = \"ten\""
bad "bad.toml:1: nosuch: unknown section" "[nosuch]" "x = 1"
bad "bad.toml:2: pool.mode: --pool-mode is transaction or session" "[pool]" "mode = \"statement\""
# An inline origin password in a file others can read: used, but warned about.
cat >"$tmp/pw.toml" <<TOML
[origin]
url = "$BARE"
password = "$PW"
[pool]
size = 1
TOML
chmod 644 "$tmp/pw.toml"
: >"$tmp/out"
PGPASSWORD= PGPASSFILE=/nonexistent "$HYPERPOOL_BINARY" serve --config "$tmp/pw.toml" --threads 1 >"$tmp/out" 2>"$tmp/err" &
pid=$!
wait_for 15 test -s "$tmp/out" || fail "no connection string with an inline password"
grep -q "holds a password and can be read by group or others" "$tmp/err" || fail "no warning for a readable file"
out=$("$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$(head -1 "$tmp/out")" -c "SELECT 7") || fail "inline password login failed"
[ "$out" = 7 ] || fail "printed '$out'"
if grep -qF -- "$PW" "$tmp/err"; then fail "the origin password appears in the log"; fi
stop_serve
# --origin-password-file on the command line overrides the file's inline password.
printf 'wrong-password\n' >"$tmp/wrong-pw"; chmod 600 "$tmp/wrong-pw"
: >"$tmp/out"
PGPASSWORD= PGPASSFILE=/nonexistent "$HYPERPOOL_BINARY" serve --config "$tmp/pw.toml" --origin-password-file "$tmp/wrong-pw" \
  --threads 1 >"$tmp/out" 2>"$tmp/err" &
pid=$!
wait_for 15 test -s "$tmp/out" || fail "no connection string with --origin-password-file"
if out=$("$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -d "$(head -1 "$tmp/out")" -c "SELECT 7" 2>&1); then
  fail "the file's password was used although --origin-password-file overrides it"
fi
grep -q "password authentication failed" <<<"$out" || fail "unexpected error with the wrong password: $out"
stop_serve
# A config file that does not exist is a usage error naming it.
set +e; "$HYPERPOOL_BINARY" serve --config "$tmp/none.toml" >/dev/null 2>"$tmp/err"; rc=$?; set -e
[ "$rc" = 2 ] && grep -q "cannot read config file $tmp/none.toml" "$tmp/err" || fail "missing config file: rc $rc"
# --- hyperpool endpoint + hyperpool client, each with --metrics-listen ---
bash "$here/../support/gencerts.sh" "$tmp/certs" >/dev/null 2>&1
openssl rand -hex 32 >"$tmp/secret"; chmod 600 "$tmp/secret"
: >"$tmp/ep.out"
PGPASSWORD="$PW" "$HYPERPOOL_BINARY" endpoint --listen 127.0.0.1:0 --origin "$BARE" --tls-cert "$tmp/certs/server.crt" \
  --tls-key "$tmp/certs/server.key" --link-secret-file "$tmp/secret" --pool-size 2 --metrics-listen 127.0.0.1:0 \
  >"$tmp/ep.out" 2>"$tmp/err" &
pid=$!
wait_for 15 test -s "$tmp/ep.out" || fail "endpoint printed no address"
ep_pid=$pid
ep_metrics=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$tmp/err" | head -1)
[ -n "$ep_metrics" ] || fail "endpoint logged no metrics address"
cp "$tmp/err" "$tmp/ep.err"
: >"$tmp/out"
"$HYPERPOOL_BINARY" client --endpoint "$(head -1 "$tmp/ep.out")" --tls-ca "$tmp/certs/ca.crt" --link-secret-file "$tmp/secret" \
  --threads 1 --listen-unix "$tmp/sock" --metrics-listen 127.0.0.1:0 >"$tmp/out" 2>"$tmp/err" &
pid=$!
wait_for 15 test -s "$tmp/out" || fail "client printed no connection string"
cl_metrics=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$tmp/err" | head -1)
[ -n "$cl_metrics" ] || fail "client logged no metrics address"
url=$(head -1 "$tmp/out")
port=$(sed -E 's|.*@127\.0\.0\.1:([0-9]+)/.*|\1|' <<<"$url")
password=$("$PY" -c 'import sys, urllib.parse as u; print(u.unquote(u.urlsplit(sys.argv[1]).password))' "$url")
out=$(PGPASSWORD="$password" "$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 -h "$tmp/sock" -p "$port" -U hyperpool -d hyperpool \
  -c "BEGIN" -c "SELECT 'remote unix'" -c "COMMIT") || fail "psql over the client's Unix socket failed"
[ "$out" = "remote unix" ] || fail "printed '$out'"
metrics=$ep_metrics; http /metrics | tail -n +2 >"$tmp/ep.m"
metrics=$cl_metrics; http /metrics | tail -n +2 >"$tmp/cl.m"
"$PY" "$here/metrics_check.py" parse "$tmp/ep.m" >"$tmp/ep.json" || fail "endpoint scrape invalid"
"$PY" "$here/metrics_check.py" parse "$tmp/cl.m" >"$tmp/cl.json" || fail "client scrape invalid"
grep -Eq '^hyperpool_transactions_total [1-9]' "$tmp/ep.m" || fail "endpoint counted no transaction: $(grep transactions_total "$tmp/ep.m")"
grep -Eq '^hyperpool_client_connections_accepted_total [1-9]' "$tmp/cl.m" || fail "client counted no connection: $(head -20 "$tmp/cl.m")"
! grep -q '^hyperpool_pool_' "$tmp/cl.m" || fail "the client alone exposes pool metrics"
# Each process's dashboard JSON: its role, how the halves are linked, the
# Endpoint's pool only where an Endpoint runs (tests/browser/ checks the page).
dashboard_json() {  # METRICS_ADDRESS: prints role, link lines, databases, client connections
  "$PY" - "$1" <<'PYEOF'
import json, sys, urllib.request
d = json.load(urllib.request.urlopen(f"http://{sys.argv[1]}/dashboard.json", timeout=10))
print(d["role"], len(d["databases"]), d["client"] is not None)
print("\n".join(d["link"]))
PYEOF
}
ep_dash=$(dashboard_json "$ep_metrics") || fail "endpoint /dashboard.json"
[ "$(head -1 <<<"$ep_dash")" = "endpoint 1 False" ] || fail "endpoint dashboard: $ep_dash"
grep -q "^Client links on .* (TLS): [1-9][0-9]* accepted" <<<"$ep_dash" || fail "endpoint dashboard link: $ep_dash"
cl_dash=$(dashboard_json "$cl_metrics") || fail "client /dashboard.json"
[ "$(head -1 <<<"$cl_dash")" = "client 0 True" ] || fail "client dashboard: $cl_dash"
grep -q "^Endpoint: 127.0.0.1:[0-9]* (TLS" <<<"$cl_dash" || fail "client dashboard link: $cl_dash"
stop_serve
pid=$ep_pid
ep_pid=
stop_serve
echo "ops_test: ok"
