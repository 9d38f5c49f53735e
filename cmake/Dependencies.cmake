# Every third-party dependency is a Debian package found here; targets link
# the hyperpool::* aliases below and never name a package directly.

set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)
find_package(absl REQUIRED)
find_package(fmt REQUIRED)

# Standalone Asio (libasio-dev) is header-only.
find_path(ASIO_INCLUDE_DIR NAMES asio.hpp REQUIRED)
add_library(hyperpool_asio INTERFACE)
target_include_directories(hyperpool_asio SYSTEM INTERFACE ${ASIO_INCLUDE_DIR})
target_compile_definitions(hyperpool_asio INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED)
target_link_libraries(hyperpool_asio INTERFACE Threads::Threads)
add_library(hyperpool::asio ALIAS hyperpool_asio)

# Asio's event loop: epoll (default) or Asio's io_uring backend (liburing;
# sockets, timers and waits become ring operations). The choice is compile-time
# for every translation unit that includes Asio (they all link hyperpool::asio,
# so they all see the same defines: one backend, no ODR mismatch), and there is
# no fallback at run time: an io_context whose io_uring_queue_init fails (an old
# kernel, a seccomp profile that forbids io_uring) throws, which connect()
# returns as a status and the hyperpool binary reports.
# Experimental, and OFF: with Debian's Asio 1.22 it hangs sessions (a socket
# closed with an operation in flight leaves that operation in per-socket state
# that Asio frees and hands to the next socket), and it measured 5-10% more CPU
# per transaction than epoll despite fewer system calls (docs/performance.md,
# "System calls per transaction": the measurement and the reproduction).
option(HYPERPOOL_IO_URING "Asio's io_uring backend instead of epoll (needs liburing-dev; experimental)" OFF)
set(HYPERPOOL_EVENT_LOOP "epoll")
if(HYPERPOOL_IO_URING)
  message(WARNING "HYPERPOOL_IO_URING=ON: Asio 1.22's io_uring backend hangs sessions whose "
                  "socket is closed with an operation in flight (it reuses their state); for measurement only")
  set(HYPERPOOL_EVENT_LOOP "io_uring")
  find_path(LIBURING_INCLUDE_DIR NAMES liburing.h REQUIRED)
  find_library(LIBURING_LIBRARY NAMES uring REQUIRED)
  target_compile_definitions(hyperpool_asio INTERFACE ASIO_HAS_IO_URING ASIO_DISABLE_EPOLL)
  target_link_libraries(hyperpool_asio INTERFACE ${LIBURING_LIBRARY})
endif()

# TLS library: BoringSSL (default) or the system OpenSSL 3 for hosts that
# already load OpenSSL (a process that loads both crashes in libpq's TLS code).
set(HYPERPOOL_TLS "BoringSSL" CACHE STRING "TLS library: BoringSSL or OpenSSL")
set_property(CACHE HYPERPOOL_TLS PROPERTY STRINGS BoringSSL OpenSSL)
add_library(hyperpool_ssl INTERFACE)
add_library(hyperpool_crypto INTERFACE)
if(HYPERPOOL_TLS STREQUAL "BoringSSL")
  find_package(BoringSSL REQUIRED)
  # SYSTEM + BEFORE: /usr/include/android must precede /usr/include/openssl.
  target_include_directories(hyperpool_crypto SYSTEM BEFORE INTERFACE ${BoringSSL_INCLUDE_DIR})
  target_link_libraries(hyperpool_crypto INTERFACE BoringSSL::Crypto)
  target_link_libraries(hyperpool_ssl INTERFACE hyperpool_crypto BoringSSL::SSL)
  target_compile_definitions(hyperpool_crypto INTERFACE HYPERPOOL_TLS_BORINGSSL=1)
elseif(HYPERPOOL_TLS STREQUAL "OpenSSL")
  find_package(OpenSSL 3 REQUIRED)
  target_link_libraries(hyperpool_crypto INTERFACE OpenSSL::Crypto)
  target_link_libraries(hyperpool_ssl INTERFACE hyperpool_crypto OpenSSL::SSL)
  target_compile_definitions(hyperpool_crypto INTERFACE HYPERPOOL_TLS_OPENSSL=1)
else()
  message(FATAL_ERROR "HYPERPOOL_TLS must be BoringSSL or OpenSSL, not '${HYPERPOOL_TLS}'")
endif()
add_library(hyperpool::crypto ALIAS hyperpool_crypto)
add_library(hyperpool::ssl ALIAS hyperpool_ssl)

# hiredis (libhiredis-dev) for the shared cache tier on Redis
# (src/cache/redis_store.cc): Debian ships only a pkg-config file.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HIREDIS REQUIRED hiredis)
add_library(hyperpool_hiredis INTERFACE)
# Not ${HIREDIS_INCLUDE_DIRS} (/usr/include/hiredis): its sds.h, dict.h, read.h
# would shadow other headers; sources include <hiredis/...>.
target_link_libraries(hyperpool_hiredis INTERFACE ${HIREDIS_LINK_LIBRARIES})
add_library(hyperpool::hiredis ALIAS hyperpool_hiredis)

# libpg_query (libpg-query-dev: PostgreSQL 15's grammar as a library) and the
# protobuf-c runtime its parse trees decode with (libprotobuf-c-dev): the
# query cache's statement analysis (src/cache/sql_parse_tree.cc). Static, so
# the binary needs neither at run time.
find_library(HYPERPOOL_PG_QUERY_LIBRARY NAMES libpg_query.a pg_query REQUIRED)
find_library(HYPERPOOL_PROTOBUF_C_LIBRARY NAMES libprotobuf-c.a protobuf-c REQUIRED)
find_path(HYPERPOOL_PG_QUERY_INCLUDE pg_query.h REQUIRED)

if(HYPERPOOL_BUILD_TESTS)
  find_package(Catch2 3 REQUIRED)
endif()
