#!/usr/bin/env bash
# TLS towards applications, several app users and connection logs, through
# `hyperpool serve` with real psql/libpq clients as separate processes:
#  - [tls] mode = require: sslmode=verify-full (CA and server certificate made
#    here) and sslmode=require log in; plaintext gets FATAL 28000 "no
#    encryption"; bytes sent together with the SSLRequest get 08P01 and no 'S';
#  - [users]: a stored SCRAM verifier and a password file both log in; a wrong
#    password and an unknown user get the same 28P01 message;
#  - [log] connections = true: a session_start line with the client address;
#  - flags: --ssl-cert/--ssl-key (mode allow) take TLS and plaintext,
#    --log-format json --log-connections writes JSON events.
# Needs HYPERPOOL_BINARY and HYPERPOOL_TEST_PG_ENV (ctest sets both).
set -euo pipefail
: "${HYPERPOOL_BINARY:?}" "${HYPERPOOL_TEST_PG_ENV:?}"
env_get() { grep "^$1=" "$HYPERPOOL_TEST_PG_ENV" | head -1 | cut -d= -f2-; }
urlencode() { /usr/bin/python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
PGBIN=$(env_get PGBIN)
PW=$(env_get ADMIN_PASSWORD)
ORIGIN="postgresql://$(env_get ADMIN_USER):$(urlencode "$PW")@$(env_get PGHOST):$(env_get PGPORT)/$(env_get PGDATABASE)?sslmode=disable"
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; echo "--- serve stderr:" >&2; cat "$tmp/err" >&2 || true; exit 1; }
# Polls `cmd` every 0.1 s until it succeeds or `secs` pass.
wait_for() { local secs=$1; shift; local end=$((SECONDS + secs)); until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.1; done; }

# A CA and a server certificate for localhost / 127.0.0.1 signed by it.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=hyperpool test CA" \
  -keyout "$tmp/ca.key" -out "$tmp/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$tmp/server.key" -out "$tmp/server.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$tmp/san.ext"
openssl x509 -req -in "$tmp/server.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" -CAcreateserial -days 1 \
  -extfile "$tmp/san.ext" -out "$tmp/server.pem" 2>/dev/null
chmod 600 "$tmp/server.key"

# A verifier as PostgreSQL stores it (pg_authid.rolpassword) for "reporting".
verifier=$(/usr/bin/python3 - <<'PY'
import base64, hashlib, hmac, os
salt = os.urandom(16)
salted = hashlib.pbkdf2_hmac("sha256", b"r3ports", salt, 4096)
client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
b = lambda x: base64.b64encode(x).decode()
print(f"SCRAM-SHA-256$4096:{b(salt)}${b(hashlib.sha256(client_key).digest())}:{b(server_key)}")
PY
)
printf 'b4tch\n' >"$tmp/batch-password"
chmod 600 "$tmp/batch-password"

cat >"$tmp/hp.toml" <<TOML
[listen]
address = "127.0.0.1:0"
unix_socket_dir = "$tmp"
[origin]
url = "$ORIGIN"
[client]
user = "app"
database = "appdb"
password = "s3cret"
[users]
reporting = "$verifier"
batch = { password_file = "$tmp/batch-password" }
[tls]
cert = "$tmp/server.pem"
key = "$tmp/server.key"
mode = "require"
[log]
connections = true
TOML
chmod 600 "$tmp/hp.toml"

start_serve() {
  : >"$tmp/out"
  : >"$tmp/err"
  "$HYPERPOOL_BINARY" serve "$@" >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  wait_for 15 test -s "$tmp/out" || fail "no connection string on stdout"
  url=$(head -1 "$tmp/out")
  port=$(sed -E 's/.*@127\.0\.0\.1:([0-9]+)\/.*/\1/' <<<"$url")
}
stop_serve() {
  kill -TERM "$pid"
  wait_for 15 bash -c "! kill -0 $pid 2>/dev/null" || fail "serve did not stop"
  wait "$pid" || true
  pid=
}
# psql with a conninfo; prints stdout+stderr; the exit status is psql's.
run_psql() {
  local password=$1; shift
  PGPASSWORD=$password PGCONNECT_TIMEOUT=10 "$PGBIN/psql" -XAtq -v ON_ERROR_STOP=1 "$@" 2>&1
}

start_serve --config "$tmp/hp.toml" --client-login-timeout 2
base="host=localhost port=$port dbname=appdb"

# verify-full: the chain and the name are checked by libpq itself.
out=$(run_psql s3cret -d "$base user=app sslmode=verify-full sslrootcert=$tmp/ca.pem" -c "SELECT 40 + 2" -c '\conninfo') \
  || fail "verify-full login failed: $out"
grep -qx 42 <<<"$out" || fail "verify-full query printed: $out"
grep -q "SSL connection" <<<"$out" || fail "verify-full session is not TLS: $out"
out=$(run_psql s3cret -d "$base user=app sslmode=require" -c "SELECT 1") || fail "sslmode=require failed: $out"
[ "$out" = 1 ] || fail "sslmode=require printed: $out"
# A CA that did not sign the certificate fails verification.
if out=$(run_psql s3cret -d "$base user=app sslmode=verify-full sslrootcert=$tmp/server.csr" -c "SELECT 1"); then
  fail "verify-full accepted a wrong CA"
fi

# The JavaScript drivers over verified TLS (their own TLS stacks).
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=other CA" -keyout "$tmp/other.key" \
  -out "$tmp/other-ca.pem" 2>/dev/null
node "$(dirname "$0")/../drivers/ssl_test.mjs" localhost "$port" app s3cret appdb "$tmp/ca.pem" "$tmp/other-ca.pem" \
  >"$tmp/node.out" 2>&1 || fail "node drivers over TLS: $(cat "$tmp/node.out")"
cat "$tmp/node.out"

# require: plaintext is refused before authentication.
if out=$(run_psql s3cret -d "host=127.0.0.1 port=$port dbname=appdb user=app sslmode=disable" -c "SELECT 1"); then
  fail "plaintext login accepted under require"
fi
grep -q 'no pg_hba.conf entry for host "127.0.0.1", user "app", database "appdb", no encryption' <<<"$out" \
  || fail "plaintext refusal said: $out"

# A Unix socket needs no TLS, as with PostgreSQL's "local" lines.
out=$(run_psql s3cret -d "host=$tmp port=$port dbname=appdb user=app" -c "SELECT 'unix'") || fail "Unix socket login failed: $out"
[ "$out" = unix ] || fail "Unix socket printed: $out"

# CVE-2021-23222: SSLRequest and a StartupMessage in one write: 08P01, never 'S'.
/usr/bin/python3 - "$port" <<'PY' || fail "bytes after SSLRequest were not refused"
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
ssl_request = struct.pack("!ii", 8, 80877103)
params = b"user\0app\0database\0appdb\0\0"
startup = struct.pack("!ii", 8 + len(params), 196608) + params
s.sendall(ssl_request + startup)
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
assert data[:1] == b"E", data
assert b"C08P01\0" in data, data
assert b"received unencrypted data after SSL request" in data, data
PY

# The login timeout also bounds the TLS handshake: 'S', then silence, then a close.
/usr/bin/python3 - "$port" <<'PY' || fail "a silent TLS handshake was not closed by the login timeout"
import socket, struct, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(struct.pack("!ii", 8, 80877103))
assert s.recv(1) == b"S"
start = time.monotonic()
assert s.recv(4096) == b"", "expected EOF"
assert time.monotonic() - start < 8, "closed too late"
PY

# [users]: both extra users log in, over TLS, to the one origin role.
out=$(run_psql r3ports -d "$base user=reporting sslmode=verify-full sslrootcert=$tmp/ca.pem" -c "SELECT 'rep'") \
  || fail "user with a stored verifier failed: $out"
[ "$out" = rep ] || fail "reporting printed: $out"
out=$(run_psql b4tch -d "$base user=batch sslmode=require" -c "SELECT 'bat'") || fail "user with a password file failed: $out"
[ "$out" = bat ] || fail "batch printed: $out"
# A wrong password and an unknown user: the same message apart from the name.
if wrong=$(run_psql s3cret -d "$base user=reporting sslmode=require" -c "SELECT 1"); then fail "wrong password accepted"; fi
if unknown=$(run_psql s3cret -d "$base user=reportinh sslmode=require" -c "SELECT 1"); then fail "unknown user accepted"; fi
grep -q 'password authentication failed for user "reporting"' <<<"$wrong" || fail "wrong password said: $wrong"
[ "${wrong//reporting/X}" = "${unknown//reportinh/X}" ] || fail "wrong password '$wrong' vs unknown user '$unknown'"

# [log] connections = true: one session_start line per login, with the address.
wait_for 10 grep -q 'event=session_start client=127.0.0.1:[0-9]* session=[0-9]* user=reporting db=appdb tls=on' "$tmp/err" \
  || fail "no session_start line for reporting"
grep -q 'level=warn event=auth_failed client=127.0.0.1:' "$tmp/err" || fail "no auth_failed line"
# Origin connections carry the origin backend's pid.
grep -Eq 'event=origin_connect origin=[^ ]+ backend_pid=[1-9][0-9]*' "$tmp/err" || fail "no origin_connect line with a pid"
if grep -q 'event=session_end' "$tmp/err"; then fail "session_end logged without log.disconnections"; fi
stop_serve

# Flags, mode allow (the default with a certificate): TLS and plaintext both
# work; JSON events; the connection string stays plaintext.
start_serve --origin "$ORIGIN" --user app --password s3cret --database appdb \
  --ssl-cert "$tmp/server.pem" --ssl-key "$tmp/server.key" --log-format json --log-connections --log-disconnections
base="host=localhost port=$port dbname=appdb"
[[ "$url" == *sslmode=disable ]] || fail "connection string changed: $url"
out=$(run_psql s3cret -d "$url" -c "SELECT 'plain'") || fail "plaintext under allow failed: $out"
[ "$out" = plain ] || fail "plaintext printed: $out"
out=$(run_psql s3cret -d "$base user=app sslmode=verify-full sslrootcert=$tmp/ca.pem" -c '\conninfo') \
  || fail "TLS under allow failed: $out"
grep -q "SSL connection" <<<"$out" || fail "allow: not TLS: $out"
wait_for 10 grep -q '"event":"session_start","client":"127.0.0.1:[0-9]*","session":"[0-9]*","user":"app","db":"appdb","tls":"on"' "$tmp/err" \
  || fail "no JSON session_start line"
wait_for 10 grep -q '"event":"session_end"' "$tmp/err" || fail "no JSON session_end line"
stop_serve
grep -Eq '"event":"origin_close","backend_pid":"[1-9][0-9]*"' "$tmp/err" || fail "no origin_close line with a pid"
if "$HYPERPOOL_BINARY" serve --origin "$ORIGIN" --ssl-mode require >/dev/null 2>&1; then
  fail "--ssl-mode require without a certificate was accepted"
fi
if "$HYPERPOOL_BINARY" serve --origin "$ORIGIN" --ssl-cert "$tmp/server.pem" --ssl-key "$tmp/ca.key" >/dev/null 2>&1; then
  fail "a key that does not match the certificate was accepted"
fi
echo "app_tls_test: ok"
