#include "protocol/protocol_error.h"

#include <string>

namespace hyperpool::protocol {

absl::Status ProtocolError(std::string_view message) {
  // Debian's abseil has its own absl::string_view: convert explicitly.
  return absl::InvalidArgumentError(absl::string_view(message.data(), message.size()));
}

bool IsProtocolError(const absl::Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument;
}

}  // namespace hyperpool::protocol
