#pragma once
// The placement probe on the link (docs/architecture.md, "The link
// protocol", 7), without I/O: the hello a Client sends and the reading of
// the Endpoint's answer.

#include <chrono>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "protocol/link_protocol.h"

namespace hyperpool::placement {

// The hello parameter that makes a link a probe, and the ParameterStatus
// the Endpoint answers with (its origin round trip in microseconds).
using link::kOriginRttParam;  // protocol/link_protocol.h
using link::kProbeParam;

// A StartupMessage (protocol 3.0) whose only parameter is hyperpool.probe=1.
std::string BuildProbeHello();

struct ProbeAnswer {
  std::chrono::microseconds origin_rtt{0};
  bool has_origin_rtt = false;
};

// Consumes complete backend messages from the front of `buffer` into
// `answer`. True once the answer is complete (its ReadyForQuery), false if
// more bytes are needed; an error for an ErrorResponse (its SQLSTATE and
// message), a malformed message, or a ReadyForQuery without the round trip.
absl::StatusOr<bool> ParseProbeAnswer(std::string& buffer, ProbeAnswer& answer);

}  // namespace hyperpool::placement
