#pragma once
// Origin validation: connect, log in, run an empty query, and say precisely
// what is wrong (the seed's "Edge Validator").

#include <chrono>
#include <string>

#include "hyperpool/options.h"

namespace hyperpool {

enum class ValidationFailure {
  kNone = 0,            // everything worked
  kBadOriginString,     // the URI / key=value string does not parse
  kUnknownHost,         // the host name does not resolve
  kConnectionRefused,   // nothing listens at host:port
  kTimeout,             // no answer within the timeout
  kTlsUnavailable,      // TLS required (sslmode) but the server does not offer it
  kTlsCertificate,      // the server certificate could not be verified
  kBadCredentials,      // the server rejected user/password (28P01, 28000)
  kNoSuchDatabase,      // 3D000
  kQueryFailed,         // logged in, but the test query failed
  kOther,               // anything else (the message says what)
};

struct ValidationResult {
  ValidationFailure failure = ValidationFailure::kNone;
  std::string message;  // one line, for people
  // After a successful check: whether the origin allows invalidation from
  // its WAL (CacheOptions::wal_invalidation): wal_level and the role's
  // REPLICATION. One line; empty when the check could not run.
  std::string wal_invalidation;
  // Process exit code for `hyperpool validate`: 0 on success, distinct non-zero per failure.
  int exit_code() const { return static_cast<int>(failure) == 0 ? 0 : 10 + static_cast<int>(failure); }
};

// Blocking: runs its own io_context. `timeout` bounds the whole check. The
// password comes from `options` as for an Endpoint (origin_password,
// origin_password_file, PGPASSWORD, pgpass).
ValidationResult ValidateOrigin(const EndpointOptions& options, std::chrono::milliseconds timeout);
// The same with only an origin string (and the environment's password sources).
ValidationResult ValidateOrigin(const std::string& origin, std::chrono::milliseconds timeout);

}  // namespace hyperpool
