// The errors hyperpool itself reports to an app, named: what each means,
// its SQLSTATE and its wording live here once, and every layer builds its
// ErrorResponse through them (docs/architecture.md, "The link protocol").
//
// A PoolerError is a value (SQLSTATE + message); the severity is the
// caller's: the same "pool exhausted" ends a login (FATAL) but only fails a
// statement once the session is up (ERROR).
//
// A failed pool acquire or origin login travels inside the Endpoint as an
// absl::Status; ErrorForAcquire() turns it into the app's error. A status
// may carry the SQLSTATE to report as a payload under kSqlStatePayload (the
// origin's own code from a failed login or settings replay, 57014 for a
// cancel before the work started).
#ifndef HYPERPOOL_PROTOCOL_POOLER_ERRORS_H_
#define HYPERPOOL_PROTOCOL_POOLER_ERRORS_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "protocol/sqlstate.h"

namespace hyperpool::protocol {

struct PoolerError {
  std::string sqlstate;  // five characters: sqlstate.h's, or the origin's own
  std::string message;

  bool operator==(const PoolerError&) const = default;
};

// The absl::Status payload key that carries a SQLSTATE.
inline constexpr char kSqlStatePayload[] = "type.hyperpool/sqlstate";

// 53300: no origin connection became free within the pool's acquire timeout.
PoolerError PoolExhausted();
// 08001 (or `sqlstate`, e.g. the origin's own 28P01): the origin could not be
// reached or refused the login; `why` says which.
PoolerError OriginUnavailable(std::string_view why, std::string_view sqlstate = kSqlStateCannotConnect);
// 08P01: a peer (app, link or origin) sent what the protocol does not allow.
PoolerError ProtocolViolation(std::string_view what);
// 08006: the link between the Client and the Endpoint failed or could not
// be opened; `what` says how.
PoolerError LinkFailure(std::string_view what);
// 57P01: the pooler is stopping.
PoolerError ShuttingDown();
// 57P01, PostgreSQL's words: an operator ended the session (admin KILL,
// a Client stopping).
PoolerError AdminTermination();
// 57P05, PostgreSQL's words: the session was idle past its
// idle-session timeout (either half may enforce it).
PoolerError IdleSessionTimeout();

// The error to report for a failed acquire / origin login:
// ResourceExhausted → PoolExhausted(); Cancelled → ShuttingDown(); Aborted
// (the origin's own error, e.g. from a settings replay) → its message and
// payload SQLSTATE; anything else → OriginUnavailable(message), with the
// payload's SQLSTATE when it has one.
PoolerError ErrorForAcquire(const absl::Status& status);

// `status` with `sqlstate` attached under kSqlStatePayload.
absl::Status WithSqlState(absl::Status status, std::string_view sqlstate);

// Appends `error` as an ErrorResponse of `severity` ("ERROR", "FATAL").
void AppendError(std::string& out, std::string_view severity, const PoolerError& error);

}  // namespace hyperpool::protocol

#endif  // HYPERPOOL_PROTOCOL_POOLER_ERRORS_H_
