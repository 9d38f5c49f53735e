// A tiny blocking PostgreSQL client for `hyperpool demo`: a plain TCP socket,
// the project's wire codec (src/protocol) and authentication mechanisms
// (SCRAM-SHA-256, MD5, cleartext), no TLS. It speaks the simple query
// protocol and the extended one as postgres.js does (named statements,
// Describe before the first Bind), so the demo can show both.
//
// Why not libpq: libpq and BoringSSL in one process crash (docs/STYLE.md), and
// the demo must measure round trips, not a driver's extras. It plays the
// "short-lived serverless client" of the seed's benchmark: connect, a few
// queries, disconnect.
#ifndef HYPERPOOL_CLI_DEMO_PG_CLIENT_H_
#define HYPERPOOL_CLI_DEMO_PG_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace hyperpool::cli::demo {

// Where and as whom to log in.
struct PgLogin {
  std::string host = "127.0.0.1";
  uint16_t port = 5432;
  std::string user;
  std::string password;
  std::string database;
  // Bound on connect + login, and on each query.
  std::chrono::milliseconds timeout{30000};
};

// Everything a simple Query returned (all statements of a multi-statement string).
struct PgResult {
  std::vector<std::string> command_tags;                       // one per statement
  std::vector<std::vector<std::optional<std::string>>> rows;  // every DataRow, in order
};

class PgClient {
 public:
  // Connects (TCP_NODELAY, close-on-exec), sends the StartupMessage and
  // answers the server's authentication request, then waits for
  // ReadyForQuery. Errors: Unavailable (network), DeadlineExceeded,
  // PermissionDenied (an ErrorResponse during login, with its SQLSTATE),
  // Unimplemented (an authentication method other than SCRAM/MD5/cleartext/trust).
  static absl::StatusOr<std::unique_ptr<PgClient>> Connect(const PgLogin& login);

  // Sends Terminate and closes, like a driver's end().
  ~PgClient();
  PgClient(const PgClient&) = delete;
  PgClient& operator=(const PgClient&) = delete;

  // Runs `sql` with the simple query protocol ("Message Flow" > "Simple
  // Query") and reads up to ReadyForQuery. An ErrorResponse becomes
  // FailedPrecondition "SQLSTATE: message" (the connection stays usable).
  absl::StatusOr<PgResult> Query(std::string_view sql);

  // Runs `sql` as the named statement `name` with the extended query
  // protocol ("Message Flow" > "Extended Query"), as postgres.js does for a
  // statement it has not prepared on this connection: with parameters,
  // Parse + Describe(statement) + Flush, then (after ParseComplete,
  // ParameterDescription and RowDescription/NoData arrive) Bind + Execute +
  // Sync: two round trips; without parameters all five in one write (one
  // round trip). Parameters are text, their types left to the server. An
  // ErrorResponse becomes FailedPrecondition "SQLSTATE: message" (after a
  // Sync, so the connection stays usable).
  absl::StatusOr<PgResult> PreparedQuery(std::string_view name, std::string_view sql,
                                         const std::vector<std::string>& parameters);

  // Terminate ('X', a half round trip: nothing is awaited) and close. Idempotent.
  void Close();

  // Times this client sent something and then had to wait for the server:
  // during login (StartupMessage and each authentication answer) and in total.
  int login_round_trips() const { return login_round_trips_; }
  int round_trips() const { return round_trips_; }
  // "SCRAM-SHA-256", "MD5", "cleartext" or "trust".
  const std::string& auth_method() const { return auth_method_; }

 private:
  explicit PgClient(int fd, std::chrono::milliseconds timeout) : fd_(fd), timeout_(timeout) {}
  absl::Status Login(const PgLogin& login);
  absl::Status SendAll(std::string_view bytes);
  // The next backend frame, blocking up to the deadline. Its views stay valid
  // until the next call.
  struct RawFrame {
    char tag;
    std::string_view payload;
    std::string_view raw;
  };
  absl::StatusOr<RawFrame> ReadFrame(std::chrono::steady_clock::time_point deadline);
  // Reads up to ReadyForQuery, collecting rows and command tags into `result`
  // and the first ErrorResponse into `error`.
  absl::Status ReadUntilReady(std::chrono::steady_clock::time_point deadline, PgResult& result, std::string& error);

  int fd_ = -1;
  std::chrono::milliseconds timeout_;
  std::string buffer_;
  size_t consumed_ = 0;
  bool awaiting_reply_ = false;
  int login_round_trips_ = 0;
  int round_trips_ = 0;
  std::string auth_method_ = "trust";
};

}  // namespace hyperpool::cli::demo

#endif  // HYPERPOOL_CLI_DEMO_PG_CLIENT_H_
