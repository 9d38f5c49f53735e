#pragma once
// The I/O half of session settings (src/endpoint/session_settings.h): runs
// the replay, capture and reset queries on an origin connection that the
// caller has exclusive use of (no other ReadFrame or Write outstanding, at
// ReadyForQuery 'I'). Every response is read and swallowed here, including
// ParameterStatus: from the client's view nothing changed.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <asio/awaitable.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "endpoint/session_settings.h"

namespace hyperpool::endpoint {

class OriginConnection;

// What one simple Query returned.
struct SimpleQueryResult {
  std::vector<std::vector<std::optional<std::string>>> rows;
  std::string sqlstate;  // of the first ErrorResponse; empty if none
  std::string message;
  bool failed() const { return !sqlstate.empty() || !message.empty(); }
};

// Sends `sql` as one simple Query and reads up to ReadyForQuery. Transport
// or protocol failures are errors (the connection is then broken); an
// ErrorResponse is a result.
asio::awaitable<absl::StatusOr<SimpleQueryResult>> RunSimpleQuery(OriginConnection& conn, std::string sql);

// Makes `conn` carry exactly `desired` (one round trip, none if it already
// does and `discard_sequences` is false; with it, DISCARD SEQUENCES runs
// first in the same Query: sequence_state.h). An ErrorResponse (e.g. an invalid startup value) comes back as
// kAborted with the origin's message and its SQLSTATE as payload
// protocol::kSqlStatePayload; the connection is unchanged (the statements ran
// in one implicit transaction) and usable.
asio::awaitable<absl::Status> ApplySettings(OriginConnection& conn, const SettingMap& desired,
                                            bool discard_sequences = false);

// What a capture found beyond the settings.
struct CaptureOutcome {
  // current_user or session_user is no longer the login role (SET ROLE or
  // SESSION AUTHORIZATION in a spelling the analysis missed, e.g. inside a
  // function): the connection must never reach another client.
  bool role_changed = false;
};

// Reads the session-level settings of `conn` after the session's work and
// stores them in `session` and as the connection's carried settings; in the
// same query, checks that the connection still runs as `login_role`. On any
// error the connection's state is unknown: close it.
asio::awaitable<absl::StatusOr<CaptureOutcome>> CaptureSettings(OriginConnection& conn, SessionSettings& session,
                                                                std::string_view login_role);

// The pool's reset hook for session mode: DISCARD ALL, then the connection
// carries nothing. OK only if it ended at ReadyForQuery 'I'.
asio::awaitable<absl::Status> ResetConnection(OriginConnection& conn);

// The pool's rollback hook (ReleaseDecision::kRollbackThenReturn): ROLLBACK
// of the block a vanished client left open; OK only when it ends at 'I'.
asio::awaitable<absl::Status> RollbackConnection(OriginConnection& conn);

}  // namespace hyperpool::endpoint
