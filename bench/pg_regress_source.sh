#!/usr/bin/env bash
# Prints the directory of PostgreSQL 15's regression suite (src/test/regress
# of Debian's postgresql-15 source package), fetching and unpacking the
# source first when it is not there yet. Used by bench/pg_regress.sh and by
# scripts/setup.sh (so a fresh Debian 12 machine has it before the tests).
#
# Where: $REGRESS_SRC (default /var/cache/hyperpool-pgsrc); the source comes
# from apt-get source through a deb-src entry in a list file of its own
# (/etc/apt/sources.list.d/hyperpool-deb-src.sources, made from
# debian.sources, which stays untouched). The main suite's version is taken:
# the security archive keeps no sources.
set -uo pipefail
SRC_CACHE=${REGRESS_SRC:-/var/cache/hyperpool-pgsrc}

found() { ls -d "$SRC_CACHE"/postgresql-15.*/src/test/regress 2>/dev/null | head -1; }

dir=$(found)
if [ -n "$dir" ] && [ -d "$dir/sql" ]; then echo "$dir"; exit 0; fi
[ "$(id -u)" = 0 ] || { echo "pg_regress_source.sh: no suite under $SRC_CACHE and not root to fetch it" >&2; exit 1; }
LIST=/etc/apt/sources.list.d/hyperpool-deb-src.sources
if [ ! -f "$LIST" ]; then
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > "$LIST"
  else
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' > "$LIST"
  fi
  apt-get update -qq >/dev/null
fi
mkdir -p "$SRC_CACHE"
for v in $(apt-cache showsrc postgresql-15 | awk '/^Version:/{print $2}'); do
  (cd "$SRC_CACHE" && apt-get source -qq --download-only "postgresql-15=$v" >/dev/null 2>&1) && break
done
(cd "$SRC_CACHE" && tar xjf postgresql-15_*.orig.tar.bz2) || { echo "pg_regress_source.sh: no postgresql-15 source" >&2; exit 1; }
dir=$(found)
[ -n "$dir" ] && [ -d "$dir/sql" ] || { echo "pg_regress_source.sh: no regression suite under $SRC_CACHE" >&2; exit 1; }
echo "$dir"
