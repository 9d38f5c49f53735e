#include "endpoint/settings_replay.h"

#include <utility>

#include "absl/strings/cord.h"
#include "endpoint/origin_connection.h"
#include "protocol/codec.h"

namespace hyperpool::endpoint {

asio::awaitable<absl::StatusOr<SimpleQueryResult>> RunSimpleQuery(OriginConnection& conn, std::string sql) {
  std::string out;
  protocol::Encode(protocol::Query{sql}, out);
  absl::Status written = co_await conn.Write(out);
  if (!written.ok()) co_return written;
  SimpleQueryResult result;
  for (;;) {
    auto frame = co_await conn.ReadFrame();
    if (!frame.ok()) co_return frame.status();
    switch (frame->tag) {
      case 'D': {
        auto row = protocol::DecodeDataRow(frame->payload);
        if (!row.ok()) {
          conn.MarkBroken();
          co_return row.status();
        }
        std::vector<std::optional<std::string>> cells;
        for (auto v : *row) cells.push_back(v ? std::optional<std::string>(std::string(*v)) : std::nullopt);
        result.rows.push_back(std::move(cells));
        break;
      }
      case 'E': {
        if (result.failed()) break;
        auto e = protocol::DecodeErrorResponse(frame->payload);
        if (e.ok()) {
          result.sqlstate = std::string(e->sqlstate());
          result.message = std::string(e->message());
        }
        if (result.sqlstate.empty()) result.sqlstate = "XX000";
        if (result.message.empty()) result.message = "error";
        break;
      }
      case 'Z':
        co_return result;
      case 'T':  // RowDescription
      case 'C':  // CommandComplete
      case 'I':  // EmptyQueryResponse
      case 'N':  // NoticeResponse
      case 'S':  // ParameterStatus (tracked by the connection, not forwarded)
      case 'A':  // NotificationResponse
        break;
      default:
        // COPY or anything else has no place in these statements.
        conn.MarkBroken();
        co_return absl::InternalError(std::string("unexpected message '") + frame->tag +
                                      "' in answer to a settings query");
    }
  }
}

asio::awaitable<absl::Status> ApplySettings(OriginConnection& conn, const SettingMap& desired,
                                            bool discard_sequences) {
  std::string diff = BuildSettingsDiff(conn.carried_settings(), desired);
  if (discard_sequences) diff.insert(0, "DISCARD SEQUENCES; ");
  if (diff.empty()) co_return absl::OkStatus();
  auto result = co_await RunSimpleQuery(conn, std::move(diff));
  if (!result.ok()) co_return result.status();
  if (result->failed()) {
    co_return protocol::WithSqlState(absl::AbortedError(result->message), result->sqlstate);
  }
  conn.carried_settings() = desired;
  if (discard_sequences) conn.sequence_owner().Discarded();
  co_return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<CaptureOutcome>> CaptureSettings(OriginConnection& conn, SessionSettings& session,
                                                                std::string_view login_role) {
  const std::string role(login_role);  // outlives the suspension below
  auto result = co_await RunSimpleQuery(conn, session.CaptureQuery());
  if (!result.ok()) co_return result.status();
  if (result->failed()) co_return absl::AbortedError(result->message);
  if (conn.transaction_status() != 'I') co_return absl::FailedPreconditionError("not idle after the capture");
  CapturedState captured = ParseCapture(result->rows);
  conn.carried_settings() = captured.settings;
  session.OnCaptured(captured.settings);
  co_return CaptureOutcome{.role_changed = !captured.RoleIs(role)};
}

asio::awaitable<absl::Status> ResetConnection(OriginConnection& conn) {
  auto result = co_await RunSimpleQuery(conn, "DISCARD ALL");
  if (!result.ok()) co_return result.status();
  if (result->failed()) co_return absl::AbortedError(result->message);
  if (conn.transaction_status() != 'I') co_return absl::FailedPreconditionError("not idle after DISCARD ALL");
  conn.carried_settings().clear();
  conn.sequence_owner().Discarded();
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> RollbackConnection(OriginConnection& conn) {
  auto result = co_await RunSimpleQuery(conn, "ROLLBACK");
  if (!result.ok()) co_return result.status();
  if (result->failed()) co_return absl::AbortedError(result->message);
  if (conn.transaction_status() != 'I') co_return absl::FailedPreconditionError("not idle after ROLLBACK");
  co_return absl::OkStatus();
}

}  // namespace hyperpool::endpoint
