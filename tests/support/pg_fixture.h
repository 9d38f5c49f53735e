// The real-PostgreSQL test fixture: a throwaway PostgreSQL 15 started by
// tests/support/pgcluster.sh (TLS on, one role per authentication method), and
// helpers to talk to it without linking libpq (libpq's OpenSSL and our
// BoringSSL in one process crash): psql runs as a child process.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hyperpool::testing {

// A user name and its password ("" for the trust role).
struct PgRole {
  std::string user;
  std::string password;
};

// Everything pgcluster.sh writes to DIR/env. Roles: admin is a superuser
// (scram-sha-256); scram, md5, password (cleartext) and trust log in with that
// pg_hba.conf method over TCP (with or without TLS) and the Unix socket;
// sslonly (scram-sha-256) is accepted over hostssl only.
struct PgCluster {
  std::string pgbin;      // Directory of psql, pg_ctl, ...
  std::string pgdata;     // The data directory.
  std::string host;       // "127.0.0.1".
  uint16_t port = 0;      // TCP port (also the Unix socket's port number).
  std::string sockdir;    // Unix socket directory.
  std::string database;   // "hp_test", owned by admin.
  std::string ca_cert;    // PEM CA that signed server and client certificates.
  std::string client_cert;  // PEM client certificate (CN=hp_admin) ...
  std::string client_key;   // ... and its key.
  std::string server_cert;  // PEM server certificate (SAN localhost, 127.0.0.1).
  std::string server_key;
  PgRole admin;
  PgRole scram;
  PgRole md5;
  PgRole password;
  PgRole trust;
  PgRole sslonly;
};

// Parses an env file written by pgcluster.sh.
absl::StatusOr<PgCluster> LoadPgClusterEnv(const std::string& env_path);

// The cluster shared by all tests of this process: the one described by the
// file named in $HYPERPOOL_TEST_PG_ENV (set by ctest's "postgres" fixture), or
// else one started now into a fresh temporary directory and stopped at process
// exit, so that a test binary run by hand works too. Fails the current test
// (Catch2 FAIL) if no cluster can be had.
const PgCluster& SharedPgCluster();

// Options for RunPsql.
struct PsqlOptions {
  std::string database;  // Defaults to cluster.database.
  bool unix_socket = false;  // Connect through the socket directory, not TCP.
};

// Runs `sql` with psql in a child process as the admin user, unaligned
// tuples-only output (-XAtq), ON_ERROR_STOP. Returns stdout (rows separated by
// '\n', fields by '|', trailing newline removed), or an error carrying stderr.
absl::StatusOr<std::string> RunPsql(const PgCluster& cluster, std::string_view sql,
                                    const PsqlOptions& options = {});

// Result of RunCommand.
struct CommandResult {
  int exit_code = -1;  // 128 + signal number if killed by a signal.
  std::string out;
  std::string err;
};

// Runs argv[0] (searched in PATH) with extra environment entries "KEY=VALUE"
// added to ours; stdin is /dev/null. Errors only if it could not be started.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& extra_env = {});

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then
// released). Prefer binding port 0 yourself where the API allows.
absl::StatusOr<uint16_t> PickFreePort();

// Certificates written by tests/support/gencerts.sh into a directory: all
// absolute PEM file paths. server: SAN localhost + 127.0.0.1, signed by ca;
// wrongname: SAN wrong.example only, signed by ca; other_ca: an unrelated CA.
struct TestCerts {
  std::string dir;
  std::string ca_cert, ca_key;
  std::string other_ca_cert;
  std::string server_cert, server_key;
  std::string client_cert, client_key;
  std::string wrongname_cert, wrongname_key;
};

// Generates TestCerts into a new temporary directory (removed at process exit).
absl::StatusOr<TestCerts> GenerateTestCerts();
// The certificates of GenerateTestCerts, made once per test process (the
// test fails if they cannot be made).
const TestCerts& SharedTestCerts();

// Reads a whole file.
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace hyperpool::testing
