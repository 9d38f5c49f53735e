#pragma once
// The request line and headers of an HTTP/1.x request, parsed without I/O
// (the shape of Asio's request_parser): feed the bytes received so far and
// get need-more, a bad request, or the method and path. The metrics
// listener answers one GET per connection, so bodies are not read.

#include <cstddef>
#include <string>
#include <string_view>

namespace hyperpool::ops {

// Most bytes of request line + headers accepted before the request is bad
// (431/400): what a peer declares never sizes our buffer.
inline constexpr std::size_t kMaxRequestHeadBytes = 8192;

struct HttpRequestHead {
  enum class Result {
    kNeedMore,  // no blank line yet, and under kMaxRequestHeadBytes
    kBad,       // malformed, or too large
    kComplete,  // method and path are set
  };
  Result result = Result::kNeedMore;
  std::string method;
  std::string path;  // the target without its query string
  std::string error;  // why kBad
};

// Parses `received` (all bytes so far, from the start of the connection).
HttpRequestHead ParseRequestHead(std::string_view received);

}  // namespace hyperpool::ops
