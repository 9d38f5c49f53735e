#!/usr/bin/env bash
# pgcluster.sh start DIR | stop DIR
#
# A throwaway PostgreSQL 15 for integration tests, entirely inside DIR:
#   DIR/data   the cluster          DIR/sock  the Unix socket directory
#   DIR/certs  CA, server and client certificates (see gencerts.sh)
#   DIR/log    the server log       DIR/env   KEY=VALUE lines describing it all
# It listens on 127.0.0.1 at a port free at start time, with TLS on, and has one
# role per authentication method (pg_hba.conf below) plus a superuser.
#
# start always starts fresh: a cluster left by a crashed run in DIR is stopped
# and removed first. stop succeeds even if start failed halfway, and it only
# deletes DIR if DIR is ours (carries the marker file) or is empty.
# Both are safe to call from ctest fixtures (FIXTURES_SETUP / FIXTURES_CLEANUP).
set -euo pipefail

PGBIN=${HYPERPOOL_PGBIN:-/usr/lib/postgresql/15/bin}
SCRIPT_DIR=$(cd "$(dirname "$0")" && pwd)
MARKER=.hyperpool-pgcluster
READY_TIMEOUT_S=30

die() { echo "pgcluster.sh: $*" >&2; exit 1; }

# initdb and postgres refuse to run as root: drop to the postgres OS user.
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || die "running as root but there is no 'postgres' OS user"
  as_pg() { runuser -u postgres -- "$@"; }
  PG_OWNER=postgres
else
  as_pg() { "$@"; }
  PG_OWNER=$(id -un)
fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

random_password() { openssl rand -hex 16; }

stop_cluster() {  # stop_cluster DIR
  local dir=$1 pid
  [ -d "$dir" ] || return 0
  if [ -e "$dir" ] && [ ! -e "$dir/$MARKER" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
    die "refusing to touch $dir: not empty and not created by pgcluster.sh"
  fi
  if [ -f "$dir/data/postmaster.pid" ]; then
    pid=$(head -n1 "$dir/data/postmaster.pid" 2>/dev/null || true)
    # Immediate: a throwaway cluster needs no checkpoint, and it is fast.
    if ! as_pg "$PGBIN/pg_ctl" stop -D "$dir/data" -m immediate -w -t 20 >/dev/null 2>&1; then
      if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        echo "pgcluster.sh: pg_ctl stop failed; killing postmaster $pid" >&2
        kill -KILL "$pid" 2>/dev/null || true
        # Backends exit on their own once they notice the postmaster is gone.
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      fi
    fi
  fi
  rm -rf "$dir"
}

write_config() {  # write_config DIR PORT
  local dir=$1 port=$2
  cat >>"$dir/data/postgresql.conf" <<EOF

# --- hyperpool test settings (pgcluster.sh) ---
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir/sock'
max_connections = 200
shared_buffers = 16MB
fsync = off
synchronous_commit = off
full_page_writes = off
dynamic_shared_memory_type = mmap
ssl = on
ssl_cert_file = '$dir/certs/server.crt'
ssl_key_file = '$dir/certs/server.key'
ssl_ca_file = '$dir/certs/ca.crt'
ssl_min_protocol_version = 'TLSv1.2'
password_encryption = 'scram-sha-256'
# Tests prove where an answer came from by the origin's own counts.
shared_preload_libraries = 'pg_stat_statements'
log_connections = on
log_disconnections = on
log_line_prefix = '%m [%p] %u@%d '
EOF
  # A test that needs more (wal_level = logical, ...) passes its own lines.
  if [ -n "${PGCLUSTER_EXTRA_CONF:-}" ]; then
    printf '%s\n' "$PGCLUSTER_EXTRA_CONF" >>"$dir/data/postgresql.conf"
  fi
  # One method per role, so a test picks the method by picking the user. "host"
  # matches TCP with and without TLS; hp_sslonly is rejected without TLS.
  cat >"$dir/data/pg_hba.conf" <<EOF
# TYPE    DATABASE  USER         ADDRESS       METHOD
local     all       $PG_OWNER                  peer
local     all       hp_admin                   scram-sha-256
host      all       hp_admin     127.0.0.1/32  scram-sha-256
local     all       hp_scram                   scram-sha-256
host      all       hp_scram     127.0.0.1/32  scram-sha-256
local     all       hp_md5                     md5
host      all       hp_md5       127.0.0.1/32  md5
local     all       hp_password                password
host      all       hp_password  127.0.0.1/32  password
local     all       hp_trust                   trust
host      all       hp_trust     127.0.0.1/32  trust
hostssl   all       hp_sslonly   127.0.0.1/32  scram-sha-256
hostnossl all       hp_sslonly   127.0.0.1/32  reject
local     all       hp_sslonly                 reject
host      all       all          127.0.0.1/32  scram-sha-256
EOF
}

create_roles() {  # create_roles DIR PORT
  local dir=$1 port=$2
  as_pg "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir/sock" -p "$port" -U "$PG_OWNER" -d postgres <<EOF
CREATE ROLE hp_admin LOGIN SUPERUSER PASSWORD '$ADMIN_PASSWORD';
CREATE ROLE hp_scram LOGIN PASSWORD '$SCRAM_PASSWORD';
CREATE ROLE hp_password LOGIN PASSWORD '$PASSWORD_PASSWORD';
CREATE ROLE hp_trust LOGIN;
CREATE ROLE hp_sslonly LOGIN PASSWORD '$SSLONLY_PASSWORD';
-- md5 auth needs an md5-hashed password: with the default (SCRAM) storage the
-- server would answer an md5 login with a SCRAM challenge.
SET password_encryption = 'md5';
CREATE ROLE hp_md5 LOGIN PASSWORD '$MD5_PASSWORD';
RESET password_encryption;
CREATE DATABASE hp_test OWNER hp_admin;
\\connect hp_test
-- PostgreSQL 15 no longer lets every role create in public; tests do.
GRANT ALL ON SCHEMA public TO PUBLIC;
EOF
}

start_cluster() {  # start_cluster DIR
  local dir=$1 port attempt
  stop_cluster "$dir"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  touch "$dir/$MARKER"
  mkdir -p "$dir/sock" "$dir/log"
  # 107 bytes is the sun_path limit; the socket file name adds 16.
  [ ${#dir} -lt 85 ] || die "DIR path too long for a Unix socket: $dir"

  "$SCRIPT_DIR/gencerts.sh" "$dir/certs"
  chown -R "$PG_OWNER" "$dir"

  as_pg "$PGBIN/initdb" -D "$dir/data" -U "$PG_OWNER" --auth-local=peer --auth-host=reject \
    -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/log/initdb.log" 2>&1 \
    || { cat "$dir/log/initdb.log" >&2; die "initdb failed"; }

  ADMIN_PASSWORD=$(random_password)
  SCRAM_PASSWORD=$(random_password)
  MD5_PASSWORD=$(random_password)
  PASSWORD_PASSWORD=$(random_password)
  SSLONLY_PASSWORD=$(random_password)

  # The free port can be taken between choosing and binding it: retry a few times.
  local started=0 conf_backup="$dir/data/postgresql.conf.orig"
  cp "$dir/data/postgresql.conf" "$conf_backup"
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    cp "$conf_backup" "$dir/data/postgresql.conf"
    write_config "$dir" "$port"
    chown "$PG_OWNER" "$dir/data/postgresql.conf" "$dir/data/pg_hba.conf"
    if as_pg "$PGBIN/pg_ctl" start -D "$dir/data" -l "$dir/log/postgresql.log" -w -t "$READY_TIMEOUT_S" \
        >/dev/null 2>&1; then
      started=1
      break
    fi
    echo "pgcluster.sh: start on port $port failed (attempt $attempt)" >&2
    as_pg "$PGBIN/pg_ctl" stop -D "$dir/data" -m immediate >/dev/null 2>&1 || true
  done
  if [ $started != 1 ]; then
    tail -n 30 "$dir/log/postgresql.log" >&2 || true
    die "could not start PostgreSQL in $dir"
  fi

  local deadline=$((SECONDS + READY_TIMEOUT_S))
  until "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$port" -t 1; do
    [ $SECONDS -lt $deadline ] || die "PostgreSQL not ready after ${READY_TIMEOUT_S}s (log: $dir/log/postgresql.log)"
    sleep 0.2
  done

  create_roles "$dir" "$port" || die "creating roles failed"

  local env_tmp="$dir/env.tmp"
  cat >"$env_tmp" <<EOF
PGBIN=$PGBIN
PGDATA=$dir/data
PGHOST=127.0.0.1
PGPORT=$port
PGSOCKDIR=$dir/sock
PGDATABASE=hp_test
CA_CERT=$dir/certs/ca.crt
CLIENT_CERT=$dir/certs/client.crt
CLIENT_KEY=$dir/certs/client.key
SERVER_CERT=$dir/certs/server.crt
SERVER_KEY=$dir/certs/server.key
ADMIN_USER=hp_admin
ADMIN_PASSWORD=$ADMIN_PASSWORD
SCRAM_USER=hp_scram
SCRAM_PASSWORD=$SCRAM_PASSWORD
MD5_USER=hp_md5
MD5_PASSWORD=$MD5_PASSWORD
PASSWORD_USER=hp_password
PASSWORD_PASSWORD=$PASSWORD_PASSWORD
TRUST_USER=hp_trust
TRUST_PASSWORD=
SSLONLY_USER=hp_sslonly
SSLONLY_PASSWORD=$SSLONLY_PASSWORD
EOF
  # Readers poll for env: it appears complete or not at all.
  mv "$env_tmp" "$dir/env"
  echo "pgcluster.sh: PostgreSQL 15 on 127.0.0.1:$port, env in $dir/env"
}

[ $# = 2 ] || die "usage: pgcluster.sh start|stop DIR"
[ -n "$2" ] && [ "$2" != / ] || die "bad DIR '$2'"
case $1 in
  start) start_cluster "$2" ;;
  stop) stop_cluster "$2" ;;
  *) die "usage: pgcluster.sh start|stop DIR" ;;
esac
