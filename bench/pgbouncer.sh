# shellcheck shell=bash disable=SC2034  # sets variables for the scripts that source it
# bench/pgbouncer.sh — sourced by bench/run.sh and bench/seed_postgresjs.sh.
#
# find_pgbouncer125: sets PGB125_BIN to a PgBouncer 1.25.2 binary, building it
#   with ../shared/anchors/build-pgbouncer.sh (into $BENCH_PGBOUNCER_PREFIX,
#   default /opt/pgbouncer-1.25; about a minute, once) when it is not there.
#   If it cannot be built, PGB125_BIN is Debian's pgbouncer (1.18) and
#   PGB125_NOTE says so. PGB125_VERSION is what the binary reports.
# start_pgbouncer_instance DIR BIN PORT DB HOST PORT USER PASS SECRET POOL MAXCLIENT
#   writes DIR/pgbouncer.ini (transaction mode, SCRAM auth_file) for one
#   database at HOST:PORT, starts BIN as the postgres OS user, waits until it
#   accepts connections and sets PGB_STARTED_PID.
# Needs: ROOT, log(), die().

find_pgbouncer125() {
  local prefix=${BENCH_PGBOUNCER_PREFIX:-/opt/pgbouncer-1.25}
  local anchors=$ROOT/../shared/anchors
  PGB125_NOTE=""
  PGB125_BIN=$prefix/bin/pgbouncer
  if [ ! -x "$PGB125_BIN" ]; then
    if [ -x "$anchors/build-pgbouncer.sh" ]; then
      log "building PgBouncer 1.25.2 into $prefix (once, ~1 min)"
      local deps="libevent-dev libssl-dev pkg-config autoconf automake libtool"
      # shellcheck disable=SC2086
      if ! dpkg -s $deps >/dev/null 2>&1; then
        apt-get install -y --no-install-recommends $deps >/dev/null 2>&1 \
          || { apt-get update -qq >/dev/null 2>&1; apt-get install -y --no-install-recommends $deps >/dev/null 2>&1; } \
          || true
      fi
      nice -n 10 bash "$anchors/build-pgbouncer.sh" "$prefix" >"${WORK:-/tmp}/pgbouncer-build.log" 2>&1 || true
    fi
  fi
  if [ ! -x "$PGB125_BIN" ]; then
    PGB125_BIN=$(command -v pgbouncer || true)
    [ -n "$PGB125_BIN" ] || die "no PgBouncer: 1.25.2 could not be built and there is no pgbouncer package"
    PGB125_NOTE="PgBouncer 1.25.2 could not be built ($anchors/build-pgbouncer.sh); using Debian's $("$PGB125_BIN" --version 2>/dev/null | head -1)"
    log "warning: $PGB125_NOTE"
  fi
  PGB125_VERSION=$("$PGB125_BIN" --version 2>/dev/null | head -1)
}

start_pgbouncer_instance() {
  local d=$1 bin=$2 port=$3 db=$4 host=$5 pgport=$6 user=$7 pass=$8 secret=$9 pool=${10} maxclient=${11}
  mkdir -p "$d"
  printf '"%s" "%s"\n' "$user" "$secret" > "$d/userlist.txt"
  # max_prepared_statements: 1.21+ tracks protocol-level named statements in
  # transaction mode; 1.18 does not know the setting (and cannot do that).
  local prepared=""
  "$bin" --version 2>/dev/null | head -1 | grep -q 'PgBouncer 1\.1[0-9]\.' || prepared="max_prepared_statements = 200"
  cat > "$d/pgbouncer.ini" <<EOF
[databases]
$db = host=$host port=$pgport dbname=$db user=$user password=$pass

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $d/userlist.txt
pool_mode = transaction
default_pool_size = $pool
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = $maxclient
max_db_connections = $pool
server_tls_sslmode = disable
client_tls_sslmode = disable
logfile = $d/pgbouncer.log
pidfile = $d/pgbouncer.pid
log_connections = 0
log_disconnections = 0
ignore_startup_parameters = extra_float_digits
$prepared
EOF
  chown -R postgres "$d"
  chmod 600 "$d/userlist.txt"
  runuser -u postgres -- "$bin" -d "$d/pgbouncer.ini" >"$d/start.log" 2>&1 \
    || { cat "$d/start.log" "$d/pgbouncer.log" >&2 2>/dev/null; die "pgbouncer ($bin) did not start"; }
  local _
  for _ in $(seq 50); do [ -s "$d/pgbouncer.pid" ] && break; sleep 0.1; done
  PGB_STARTED_PID=$(cat "$d/pgbouncer.pid")
  # runuser's pam_limits gives PgBouncer a soft open-file limit of 1024
  # whatever the caller's is, and PgBouncer does not raise it (its log says
  # "kernel file descriptor limit"): raise it to its hard limit, as postgres
  # (root here may lack CAP_SYS_RESOURCE, which prlimit on another user's
  # process needs). PGB_STARTED_NOFILE: the soft limit it runs with.
  local hard
  hard=$(awk '/^Max open files/ {print $5}' "/proc/$PGB_STARTED_PID/limits")
  runuser -u postgres -- prlimit --pid "$PGB_STARTED_PID" --nofile="$hard:$hard" 2>/dev/null \
    || echo "warning: could not raise pgbouncer's open-file limit (prlimit)" >&2
  PGB_STARTED_NOFILE=$(awk '/^Max open files/ {print $4}' "/proc/$PGB_STARTED_PID/limits")
  for _ in $(seq 50); do pg_isready -q -h 127.0.0.1 -p "$port" -t 1 && break; sleep 0.1; done
}
