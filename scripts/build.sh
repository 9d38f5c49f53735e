#!/usr/bin/env bash
# Configures and builds one tree. Usage: scripts/build.sh [DIR] [cmake args...]
# Compiles through ccache when it is installed (scripts/setup.sh installs it):
# a rebuild of an unchanged file, in any tree or worktree, is a cache hit.
# HYPERPOOL_BUILD_TARGET=T builds only target T.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}; shift || true
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-/var/cache/hyperpool-ccache} CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1} CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-10G}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$dir" -G Ninja "${launcher[@]}" "$@" >/dev/null
cmake --build "$dir" ${HYPERPOOL_BUILD_TARGET:+--target "$HYPERPOOL_BUILD_TARGET"}
