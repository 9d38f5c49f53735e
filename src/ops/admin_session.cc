#include "ops/admin_session.h"

#include "protocol/backend_messages.h"
#include "protocol/pooler_errors.h"
#include "protocol/frontend_messages.h"
#include "protocol/sqlstate.h"

namespace hyperpool::ops {

namespace pr = protocol;

void AdminProtocolSession::Greeting(std::string& out) {
  // What psql needs to behave (PostgreSQL sends these at every login);
  // server_version says what answers, so tools do not assume SQL.
  pr::Encode(pr::ParameterStatus{"server_version", "15.0 (hyperpool admin console)"}, out);
  pr::Encode(pr::ParameterStatus{"server_encoding", "UTF8"}, out);
  pr::Encode(pr::ParameterStatus{"client_encoding", "UTF8"}, out);
  pr::Encode(pr::ParameterStatus{"DateStyle", "ISO, MDY"}, out);
  pr::Encode(pr::ParameterStatus{"integer_datetimes", "on"}, out);
  pr::Encode(pr::ParameterStatus{"standard_conforming_strings", "on"}, out);
  pr::Encode(pr::ParameterStatus{"application_name", ""}, out);
  // No cancel key that could reach anything: the console runs nothing to cancel.
  pr::Encode(pr::BackendKeyData{static_cast<int32_t>(login_.client_id & 0x7fffffff), std::string(4, '\0')}, out);
  pr::Encode(pr::ReadyForQuery{pr::TransactionStatus::kIdle}, out);
}

bool AdminProtocolSession::OnMessage(char tag, std::string_view body, std::string& out) {
  switch (tag) {
    case 'Q': {
      if (skipping_to_sync_) return true;  // PostgreSQL ignores it too until Sync
      absl::StatusOr<pr::Query> query = pr::DecodeQuery(body);
      if (!query.ok()) {
        pr::AppendError(out, "FATAL", pr::ProtocolViolation("invalid Query message"));
        return false;
      }
      out += ExecuteAdminQuery(query->query, backend_);
      pr::Encode(pr::ReadyForQuery{pr::TransactionStatus::kIdle}, out);
      return true;
    }
    case 'X':
      return false;
    case 'S':
      skipping_to_sync_ = false;
      pr::Encode(pr::ReadyForQuery{pr::TransactionStatus::kIdle}, out);
      return true;
    case 'P':
    case 'B':
    case 'D':
    case 'E':
    case 'C':
      if (!skipping_to_sync_) {
        pr::EncodeErrorResponse(out, "ERROR", kSqlStateFeatureNotSupported,
                                "the hyperpool admin console supports only the simple query protocol",
                                {}, "Send commands as simple queries, e.g. psql -c 'SHOW POOLS'.");
        skipping_to_sync_ = true;
      }
      return true;
    case 'H':
      return true;  // nothing is pending: nothing to flush
    case 'F':
      pr::EncodeErrorResponse(out, "ERROR", kSqlStateFeatureNotSupported, "the hyperpool admin console has no functions to call");
      pr::Encode(pr::ReadyForQuery{pr::TransactionStatus::kIdle}, out);
      return true;
    default:
      pr::AppendError(out, "FATAL",
                      pr::ProtocolViolation(std::string("unexpected message type '") +
                                            (tag >= 32 && tag < 127 ? tag : '?') + "' on the admin console"));
      return false;
  }
}

}  // namespace hyperpool::ops
