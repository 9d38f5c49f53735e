#pragma once
// Where the origin's password comes from when it should not sit in a
// command line (/proc/PID/cmdline is readable by every local user), in
// libpq's order of precedence
// (https://www.postgresql.org/docs/15/libpq-envars.html, libpq-pgpass.html):
//
//   1. the connection string's own `password`
//   2. an explicit password handed in by the host (EndpointOptions::origin_password)
//   3. a password file of one line (EndpointOptions::origin_password_file;
//      `hyperpool ... --origin-password-file FILE`)
//   4. PGPASSWORD
//   5. a pgpass file: the connection string's `passfile`, else PGPASSFILE,
//      else ~/.pgpass; lines host:port:database:user:password with `*`
//      wildcards and backslash escapes; ignored, as libpq does, when group
//      or others may read it.
//
// 4 and 5 read the process environment only when the caller passes it in
// (PasswordSources::environment), so an embedding host decides.

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "endpoint/origin_config.h"
#include "hyperpool/options.h"

namespace hyperpool::endpoint {

struct PasswordSources {
  std::string password;       // 2: used when non-empty
  std::string password_file;  // 3: used when non-empty
  // 4 and 5: the values of PGPASSWORD, PGPASSFILE and HOME, when the
  // environment may be consulted (nullopt: that variable is unset).
  bool environment = false;
  std::optional<std::string> pgpassword;
  std::optional<std::string> pgpassfile;
  std::optional<std::string> home;
};

// The current process's PGPASSWORD, PGPASSFILE and HOME.
PasswordSources SourcesFromEnvironment();

// The sources EndpointOptions name (the environment's when it allows).
PasswordSources PasswordSourcesOf(const EndpointOptions& options);

// Fills `config.password` from the first source that has one. A password
// file that cannot be read, is empty, or is readable by group or others is
// an error (it was asked for explicitly); a pgpass file with such problems
// is skipped, as libpq does. Messages never contain a password.
absl::Status ResolveOriginPassword(OriginConfig& config, const PasswordSources& sources);

// The password of the first pgpass line matching the origin (pure, for tests).
// `host` for a Unix socket directory matches "localhost" as in libpq.
std::optional<std::string> MatchPgpass(std::string_view contents, const OriginConfig& config);

// True when `origin` (an origin string) carries a password itself, so a
// command line holding it exposes the password to every local user.
bool OriginStringHasPassword(std::string_view origin);

}  // namespace hyperpool::endpoint
