#include "placement/probe.h"

#include <charconv>
#include <string>

#include <fmt/format.h>

#include "protocol/codec.h"

namespace hyperpool::placement {

std::string BuildProbeHello() {
  protocol::StartupMessage hello;
  hello.protocol_version = protocol::kProtocolVersion30;
  hello.parameters.emplace_back(kProbeParam, "1");
  std::string out;
  protocol::Encode(hello, out);
  return out;
}

absl::StatusOr<bool> ParseProbeAnswer(std::string& buffer, ProbeAnswer& answer) {
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  std::size_t used = 0;
  for (;;) {
    auto r = reader.Read(std::string_view(buffer).substr(used));
    if (r.is_need_more()) break;
    if (r.is_error()) return absl::DataLossError(fmt::format("malformed probe answer: {}", std::string(r.status().message())));
    const protocol::Frame f = r.frame();
    used += f.size();
    switch (f.tag) {
      case 'E': {
        auto e = protocol::DecodeErrorResponse(f.payload);
        if (!e.ok()) return absl::DataLossError("malformed ErrorResponse in the probe answer");
        return absl::UnavailableError(
            fmt::format("{} (SQLSTATE {})", std::string(e->message()), std::string(e->sqlstate())));
      }
      case 'S': {
        auto ps = protocol::DecodeParameterStatus(f.payload);
        if (ps.ok() && ps->name == kOriginRttParam) {
          long long us = 0;
          const char* begin = ps->value.data();
          const char* end = begin + ps->value.size();
          auto [ptr, ec] = std::from_chars(begin, end, us);
          if (ec != std::errc() || ptr != end || us < 0) {
            return absl::DataLossError("the probe answer's origin round trip is not a number");
          }
          answer.origin_rtt = std::chrono::microseconds(us);
          answer.has_origin_rtt = true;
        }
        break;
      }
      case 'Z':
        buffer.erase(0, used);
        if (!answer.has_origin_rtt) return absl::DataLossError("the probe answer carries no origin round trip");
        return true;
      default:
        break;  // NoticeResponse and the like: ignored
    }
  }
  buffer.erase(0, used);
  return false;
}

}  // namespace hyperpool::placement
