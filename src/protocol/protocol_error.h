// Errors produced by the wire codec.
//
// Every malformed input the codec sees comes from a peer, so it is reported as
// a value (never an assertion or exception). All codec errors are
// absl::InvalidArgumentError whose message names the message type and the
// field at fault, e.g. "Bind: 5 parameter values declared but only 3 bytes
// left". When reported to the app they map to SQLSTATE 08P01
// (protocol_violation), the code PostgreSQL itself uses for these cases.
#ifndef HYPERPOOL_PROTOCOL_PROTOCOL_ERROR_H_
#define HYPERPOOL_PROTOCOL_PROTOCOL_ERROR_H_

#include <string_view>

#include "absl/status/status.h"
#include "protocol/sqlstate.h"

namespace hyperpool::protocol {

// SQLSTATE PostgreSQL reports for a malformed or unexpected message.
using ::hyperpool::kSqlStateProtocolViolation;

// Returns an absl::InvalidArgumentError carrying `message`. The codec uses it
// for every malformed input; callers may use it for protocol-level violations
// they detect (e.g. a message that is valid but unexpected in this state).
absl::Status ProtocolError(std::string_view message);

// True if `status` is a codec/protocol error (InvalidArgument).
bool IsProtocolError(const absl::Status& status);

}  // namespace hyperpool::protocol

#endif  // HYPERPOOL_PROTOCOL_PROTOCOL_ERROR_H_
