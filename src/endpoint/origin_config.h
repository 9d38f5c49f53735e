#pragma once
// The origin connection string: what the Endpoint needs to open and log in to
// an origin PostgreSQL connection, parsed from either libpq form
// (https://www.postgresql.org/docs/15/libpq-connect.html#LIBPQ-CONNSTRING):
//
//   postgresql://user:password@host:port/dbname?sslmode=require&...
//   host=db.internal port=5432 user=app password='it''s \' quoted'
//
// Only one host: hyperpool pools connections to one origin, and failover
// across hosts belongs in front of it, so a multi-host string is an error
// rather than something silently half-honoured.
//
// Keywords (libpq spelling):
//   used:     host port user password passfile dbname sslmode sslrootcert
//             sslcert sslkey sslsni connect_timeout application_name
//             fallback_application_name options
//             ssl=true (URI query only, as libpq: means sslmode=require)
//   accepted and ignored, because ignoring them cannot weaken security or
//   change results: keepalives keepalives_idle keepalives_interval
//             keepalives_count tcp_user_timeout (the Endpoint manages TCP
//             itself), target_session_attrs=any (one host: any is the only
//             meaning that needs no check), gssencmode=disable|prefer (we never
//             use GSS; prefer falls back like against a server without GSS),
//             channel_binding=disable|prefer
//   rejected as "unsupported parameter": every other libpq keyword (hostaddr,
//             service, client_encoding, sslcrl, require_auth,
//             channel_binding=require, ...): each would change who we connect
//             to, how we authenticate, or what the session looks like, so
//             pretending to honour it is worse than refusing.
//   rejected as "unknown parameter": anything else.
//
// Error messages name the offending keyword or part and never contain the
// password (not even fragments of a malformed one).

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tls/tls_context.h"

namespace hyperpool {

// libpq's sslmode values and their spelling: the TLS layer's own type, so
// the origin string and the TLS context share one definition.
using tls::SslMode;
using tls::SslModeName;

struct OriginConfig {
  // A name or address; one starting with '/' is the directory of a Unix
  // socket (the socket itself is <host>/.s.PGSQL.<port>).
  std::string host = "localhost";
  std::uint16_t port = 5432;
  std::string user;       // required, at most 63 bytes
  std::string password;   // may be empty (trust, peer, or a certificate login)
  // libpq's pgpass file for the password when the string has none
  // (origin_password.h resolves it).
  std::string passfile;
  std::string dbname;     // defaults to user; at most 63 bytes
  SslMode sslmode = SslMode::kPrefer;
  std::string sslrootcert;  // file of trusted CA certificates ("system" as in libpq 16)
  std::string sslcert;      // client certificate file
  std::string sslkey;       // client key file
  bool sslsni = true;       // send the host name as TLS SNI (never for an IP address)
  // Limit for opening one connection; zero means "not set" (the pool's
  // PoolOptions::connect_timeout applies).
  std::chrono::seconds connect_timeout{0};
  std::string application_name;  // empty: not sent
  // The raw libpq `options` value ("-c search_path=app -c statement_timeout=5s").
  std::string options;
  // `options` parsed into (name, value) run-time settings, in order, with
  // libpq's backslash escapes resolved and "--name-with-dashes=v" turned into
  // name_with_dashes. The Endpoint sends these as startup parameters.
  std::vector<std::pair<std::string, std::string>> settings;

  bool is_unix_socket() const { return !host.empty() && host.front() == '/'; }
  bool operator==(const OriginConfig&) const = default;
};

// Parses a libpq URI or key=value connection string. Errors are
// InvalidArgument and never include the password.
absl::StatusOr<OriginConfig> ParseOriginConfig(std::string_view text);

// Parses a libpq `options` value into (name, value) settings. Accepts
// "-c name=value", "-cname=value" and "--name=value"; a backslash makes the
// next character literal (so "-c search_path=a\ b" keeps the space).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseStartupOptions(
    std::string_view options);

// The configuration as a URI for logs, with the password replaced by ***.
// Parsing the result gives back the same configuration (password aside).
std::string RedactedOriginString(const OriginConfig& config);

}  // namespace hyperpool
