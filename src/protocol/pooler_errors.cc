#include "protocol/pooler_errors.h"

#include <utility>

#include "absl/strings/cord.h"
#include "protocol/backend_messages.h"

namespace hyperpool::protocol {

PoolerError PoolExhausted() {
  return {std::string(kSqlStateTooManyConnections), "Failed to acquire a connection from the pool"};
}

PoolerError OriginUnavailable(std::string_view why, std::string_view sqlstate) {
  return {std::string(sqlstate), "hyperpool could not connect to the origin database: " + std::string(why)};
}

PoolerError ProtocolViolation(std::string_view what) {
  return {std::string(kSqlStateProtocolViolation), std::string(what)};
}

PoolerError LinkFailure(std::string_view what) {
  return {std::string(kSqlStateConnectionFailure), std::string(what)};
}

PoolerError ShuttingDown() { return {std::string(kSqlStateAdminShutdown), "hyperpool endpoint is shutting down"}; }

PoolerError AdminTermination() {
  return {std::string(kSqlStateAdminShutdown), "terminating connection due to administrator command"};
}

PoolerError IdleSessionTimeout() {
  return {std::string(kSqlStateIdleSessionTimeout), "terminating connection due to idle-session timeout"};
}

PoolerError ErrorForAcquire(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kResourceExhausted) return PoolExhausted();
  if (status.code() == absl::StatusCode::kCancelled) return ShuttingDown();
  std::string sqlstate(kSqlStateCannotConnect);
  if (auto payload = status.GetPayload(kSqlStatePayload); payload && !payload->empty()) {
    sqlstate = std::string(*payload);
  }
  // The origin's own error (settings replay) or a cancel before the work started.
  if (status.code() == absl::StatusCode::kAborted) return {std::move(sqlstate), std::string(status.message())};
  return OriginUnavailable(std::string_view(status.message().data(), status.message().size()), sqlstate);
}

absl::Status WithSqlState(absl::Status status, std::string_view sqlstate) {
  status.SetPayload(kSqlStatePayload, absl::Cord(std::string(sqlstate)));
  return status;
}

void AppendError(std::string& out, std::string_view severity, const PoolerError& error) {
  EncodeErrorResponse(out, severity, error.sqlstate, error.message);
}

}  // namespace hyperpool::protocol
