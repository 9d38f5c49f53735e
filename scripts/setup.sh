#!/usr/bin/env bash
# Installs what is missing on a Debian 12 machine (run as root). Idempotent:
# a machine that already has everything runs no apt-get or npm at all.
set -euo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
APT_PACKAGES=(
  # build
  cmake ninja-build g++ pkg-config git ca-certificates ccache
  libasio-dev android-libboringssl-dev libabsl-dev libfmt-dev libssl-dev
  libtomlplusplus-dev  # hyperpool serve --config (src/cli/config_file.cc)
  libhiredis-dev redis-server  # the shared cache tier (src/cache/redis_store.cc) and its test
  libpg-query-dev libprotobuf-c-dev  # the query cache's SQL analysis (src/cache/sql_parse_tree.cc)
  # fuzzing: clang with libFuzzer
  clang libclang-rt-14-dev
  # integration tests and benchmarks
  postgresql-15 postgresql-client-15 postgresql-contrib libpq-dev pgbouncer openssl procps util-linux iproute2
  postgresql-server-dev-15 bzip2  # pg_regress, server headers, and unpacking the suite (bench/pg_regress*.sh)
  # drivers
  python3 python3-psycopg python3-asyncpg libpostgresql-jdbc-java default-jre-headless nodejs npm
  libbenchmark-dev
  python3-matplotlib  # bench/report.py plots
  chromium fonts-dejavu-core  # tests/browser/ (headless, driven by playwright-core from npm)
)
# Catch2 v3 comes from bookworm-backports (the default suite has only v2).
BACKPORTS_PACKAGES=(libcatch2-dev)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
need_catch=0
dpkg-query -W -f='${Version}' libcatch2-dev 2>/dev/null | grep -q '^3' || need_catch=1
# node/npm may come from elsewhere (nodesource); accept any working binary.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<< "${missing[*]:-}"

if [ "${#missing[@]}" -gt 0 ] || [ "$need_catch" = 1 ]; then
  if [ "$need_catch" = 1 ] && ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "deb http://deb.debian.org/debian bookworm-backports main" > /etc/apt/sources.list.d/hyperpool-bookworm-backports.list
  fi
  apt-get update -qq
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  if [ "$need_catch" = 1 ]; then
    echo "setup: installing Catch2 v3 from bookworm-backports"
    apt-get install -y -qq --no-install-recommends -t bookworm-backports "${BACKPORTS_PACKAGES[@]}" >/dev/null
  fi
fi

# JavaScript drivers for the driver tests and playwright-core for the browser
# tests, pinned by tests/drivers/package-lock.json; installed again when a
# dependency of package.json is missing (one was added since the last install).
npm_missing() {
  node -e 'const p = require("./tests/drivers/package.json"); const fs = require("fs");
    process.exit(Object.keys(p.dependencies).every((d) => fs.existsSync("tests/drivers/node_modules/" + d)) ? 1 : 0)'
}
if [ -f tests/drivers/package.json ] && { [ ! -d tests/drivers/node_modules ] || npm_missing; }; then
  echo "setup: installing npm drivers"
  (cd tests/drivers && npm ci --no-audit --no-fund --loglevel=error)
fi

# PostgreSQL 15's regression suite (Debian's postgresql-15 source package, via
# a deb-src list file of its own) for the cache's differential test
# (bench/pg_regress_diff.sh, ctest integration_cache_differential) and the
# fast-path corpus test; fetched once, kept in /var/cache/hyperpool-pgsrc.
bench/pg_regress_source.sh >/dev/null || { echo "setup: could not fetch the regression suite"; exit 1; }
