#!/usr/bin/env bash
# wan_rounds.sh ORIGIN_URL [RTT_MS] — the split deployment through the WAN
# simulator (app -> `hyperpool client` -> `hyperpool wan` -> `hyperpool
# endpoint` -> PostgreSQL) and what a fresh postgres.js client running 5
# distinct reads costs in WAN round trips: elapsed time (connect + type
# query + 5 reads) / RTT, for the first client (nothing known), a second
# client (statement metadata known; texts differ per client so nothing is
# cached) and a third running the second's texts again (cached). Run once
# with the caches off (--no-cache on both halves) and once on.
# Needs HYPERPOOL_BINARY; run from anywhere. With DIRECT=1, the same client
# straight through the WAN simulator to PostgreSQL, for comparison.
set -euo pipefail
ORIGIN=$1
RTT=${2:-50}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${HYPERPOOL_BINARY:?}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
wait_line() { for _ in $(seq 150); do [ -s "$1" ] && return 0; sleep 0.1; done; echo "no output in $1" >&2; exit 1; }
bash "$HERE/../support/gencerts.sh" "$tmp/certs" >/dev/null 2>&1
openssl rand -hex 32 >"$tmp/secret"; chmod 600 "$tmp/secret"
run() {  # label, extra flags for both halves
  local label=$1; shift
  rm -f "$tmp"/*.out
  "$BIN" endpoint --listen 127.0.0.1:0 --origin "$ORIGIN" --tls-cert "$tmp/certs/server.crt" \
    --tls-key "$tmp/certs/server.key" --link-secret-file "$tmp/secret" --pool-size 4 "$@" >"$tmp/ep.out" 2>"$tmp/ep.err" &
  pids+=($!); local ep=$!
  wait_line "$tmp/ep.out"
  "$BIN" wan --target "$(head -1 "$tmp/ep.out")" --rtt "$RTT" >"$tmp/wan.out" 2>"$tmp/wan.err" &
  pids+=($!); local wan=$!
  wait_line "$tmp/wan.out"
  "$BIN" client --endpoint "$(head -1 "$tmp/wan.out")" --tls-ca "$tmp/certs/ca.crt" --link-secret-file "$tmp/secret" \
    --threads 1 "$@" >"$tmp/cl.out" 2>"$tmp/cl.err" &
  pids+=($!); local cl=$!
  wait_line "$tmp/cl.out"
  local url; url=$(head -1 "$tmp/cl.out")
  node "$HERE/extended_postgresjs.mjs" "$url" setup >/dev/null
  local tag=$RANDOM
  for step in first second third; do
    local line ms; line=$(node "$HERE/extended_postgresjs.mjs" "$url" reads "t$tag" 1 2>>"$tmp/debug.log")
    ms=$(sed -n 's/.*"ms":\([0-9]*\).*/\1/p' <<<"$line")
    local c; c=$(sed -n 's/.*"connected_ms":\([0-9]*\).*/\1/p' <<<"$line")
    echo "$label $step client: ${ms} ms, of which $((ms - c)) ms after the local handshake" \
      "(~$(( (ms - c) / RTT )) round trips of ${RTT} ms; reads done at $(sed -n 's/.*"marks":\[\([0-9,]*\)\].*/\1/p' <<<"$line") ms)"
  done
  kill -TERM "$cl" "$wan" "$ep"; wait "$cl" "$wan" "$ep" 2>/dev/null || true
  grep -h 'statement metadata\|client tier' "$tmp/cl.err" | sed "s/^/$label client: /" || true
  pids=()
  [ -z "${EXT_DEBUG:-}" ] || cat "$tmp/debug.log"
  rm -f "$tmp/debug.log"
}
if [ -n "${DIRECT:-}" ]; then
  "$BIN" wan --target "$(sed -E 's|.*@([^/]*)/.*|\1|' <<<"$ORIGIN")" --rtt "$RTT" >"$tmp/wan.out" 2>/dev/null &
  pids+=($!)
  wait_line "$tmp/wan.out"
  direct=$(sed -E "s|@[^/]*/|@$(head -1 "$tmp/wan.out")/|" <<<"$ORIGIN")
  node "$HERE/extended_postgresjs.mjs" "$direct" setup >/dev/null
  line=$(node "$HERE/extended_postgresjs.mjs" "$direct" reads "d$RANDOM" 1)
  ms=$(sed -n 's/.*"ms":\([0-9]*\).*/\1/p' <<<"$line"); c=$(sed -n 's/.*"connected_ms":\([0-9]*\).*/\1/p' <<<"$line")
  echo "direct:    a client: ${ms} ms, of which $((ms - c)) ms after connecting (~$(( (ms - c) / RTT )) round trips)"
fi
run "cache off:" --no-cache
run "cache on: "
