#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then a host application built
# out of tree against it: examples/ with find_package(hyperpool REQUIRED),
# whose connect_and_query then runs its queries through hyperpool against
# the test PostgreSQL. Also checks the installed tree's layout (binary,
# headers, library, package config with FindBoringSSL, share/hyperpool/).
# Usage: install_test.sh SOURCE_DIR BUILD_DIR; needs HYPERPOOL_TEST_PG_ENV.
set -euo pipefail
src=${1:?source dir} build=${2:?build dir}
: "${HYPERPOOL_TEST_PG_ENV:?}"
env_get() { grep "^$1=" "$HYPERPOOL_TEST_PG_ENV" | head -1 | cut -d= -f2-; }
PGBIN=$(env_get PGBIN)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }
for f in bin/hyperpool include/hyperpool/hyperpool.h include/hyperpool/version.h include/hyperpool/histogram.h \
         lib/libhyperpool.a lib/cmake/hyperpool/hyperpoolConfig.cmake lib/cmake/hyperpool/hyperpoolConfigVersion.cmake \
         lib/cmake/hyperpool/hyperpoolTargets.cmake lib/cmake/hyperpool/FindBoringSSL.cmake \
         share/hyperpool/hyperpool.toml.example share/hyperpool/hyperpool.service; do
  [ -e "$prefix/$f" ] || fail "not installed: $f (have: $(cd "$prefix" && find . -type f | sort | tr '\n' ' '))"
done
"$prefix/bin/hyperpool" --version | grep -q "^hyperpool " || fail "installed binary does not run"
grep -q "^ExecStart=$prefix/bin/hyperpool serve --config " "$prefix/share/hyperpool/hyperpool.service" \
  || fail "the unit does not start the installed binary: $(grep ExecStart "$prefix/share/hyperpool/hyperpool.service")"
# The example config holds only keys serve knows: its first error is about a
# file it names (the password file), not about a key or a type.
set +e
"$prefix/bin/hyperpool" serve --config "$prefix/share/hyperpool/hyperpool.toml.example" >/dev/null 2>"$tmp/cfg.err"
set -e
grep -q "client.password_file" "$tmp/cfg.err" || fail "example config: $(head -1 "$tmp/cfg.err")"

# A host application: examples/ on its own, against the installed package only.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src/examples" -B "$tmp/example" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  "${launcher[@]}" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log" >&2; fail "find_package(hyperpool) failed"; }
grep -q "hyperpool_DIR:PATH=$prefix/lib/cmake/hyperpool" "$tmp/example/CMakeCache.txt" \
  || fail "the example did not use the installed package"
cmake --build "$tmp/example" >"$tmp/build.log" 2>&1 || { tail -40 "$tmp/build.log" >&2; fail "the example did not build"; }
origin="postgresql://$(env_get ADMIN_USER)@$(env_get PGHOST):$(env_get PGPORT)/$(env_get PGDATABASE)?sslmode=disable"
PGPASSWORD=$(env_get ADMIN_PASSWORD) "$tmp/example/example_connect_and_query" "$origin" "$PGBIN/psql" >"$tmp/run.log" 2>&1 \
  || { cat "$tmp/run.log" >&2; fail "the example failed"; }
grep -q "^42$" "$tmp/run.log" || { cat "$tmp/run.log" >&2; fail "the example's query did not answer 42"; }
echo "install_test: ok"
