#include "ops/http_request.h"

namespace hyperpool::ops {

namespace {

HttpRequestHead Bad(std::string why) {
  HttpRequestHead head;
  head.result = HttpRequestHead::Result::kBad;
  head.error = std::move(why);
  return head;
}

bool IsTokenChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

}  // namespace

HttpRequestHead ParseRequestHead(std::string_view received) {
  // Tolerate bare LF line ends as well as CRLF (RFC 9112 section 2.2).
  std::size_t end = received.find("\r\n\r\n");
  std::size_t lf_end = received.find("\n\n");
  if (end == std::string_view::npos || (lf_end != std::string_view::npos && lf_end < end)) end = lf_end;
  if (end == std::string_view::npos) {
    if (received.size() >= kMaxRequestHeadBytes) return Bad("request head too large");
    // A request line that is not even plausibly HTTP need not be waited for.
    std::size_t first_line = received.find('\n');
    if (first_line == std::string_view::npos) first_line = received.size();
    for (std::size_t i = 0; i < first_line && received[i] != ' '; ++i) {
      if (!IsTokenChar(received[i])) return Bad("bad method");
    }
    return {};
  }
  if (end > kMaxRequestHeadBytes) return Bad("request head too large");
  std::string_view line = received.substr(0, received.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // METHOD SP TARGET SP HTTP/1.x
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || sp1 == 0 || sp2 == sp1 + 1) {
    return Bad("bad request line");
  }
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  for (char c : method) {
    if (!IsTokenChar(c)) return Bad("bad method");
  }
  if (version != "HTTP/1.0" && version != "HTTP/1.1") return Bad("unsupported HTTP version");
  if (target.front() != '/') return Bad("target is not a path");
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return Bad("bad target");
  }
  HttpRequestHead head;
  head.result = HttpRequestHead::Result::kComplete;
  head.method = std::string(method);
  head.path = std::string(target.substr(0, target.find('?')));
  return head;
}

}  // namespace hyperpool::ops
