#pragma once
// Frontend messages as a driver sends them, encoded with hyperpool's codec:
// the building blocks of the prepared-statement and Endpoint tests.

#include <string>
#include <string_view>
#include <vector>

#include "protocol/codec.h"
#include "protocol/frame_reader.h"

namespace hyperpool::testing {

// Any message the codec encodes (protocol::Encode), as bytes.
template <typename Message>
std::string Encoded(const Message& message) {
  std::string out;
  protocol::Encode(message, out);
  return out;
}

inline std::string Parse(std::string_view name, std::string_view query, std::vector<protocol::Oid> types = {}) {
  return Encoded(protocol::Parse{name, query, types});
}
// Bind of `statement` to the unnamed portal, with text parameters.
inline std::string Bind(std::string_view statement, const std::vector<std::string>& values = {}) {
  protocol::Bind b;
  b.statement = statement;
  for (const auto& v : values) b.parameters.push_back(std::string_view(v));
  return Encoded(b);
}
inline std::string DescribeS(std::string_view name) {
  return Encoded(protocol::Describe{protocol::ObjectKind::kStatement, name});
}
// Execute of the unnamed portal, all rows.
inline std::string Execute() { return Encoded(protocol::Execute{"", 0}); }
inline std::string CloseS(std::string_view name) {
  return Encoded(protocol::Close{protocol::ObjectKind::kStatement, name});
}
inline std::string Sync() { return Encoded(protocol::Sync{}); }
inline std::string Flush() { return Encoded(protocol::Flush{}); }
inline std::string QueryBytes(std::string_view sql) { return Encoded(protocol::Query{sql}); }

// Calls `fn(frame)` for each whole tagged frame of `bytes`, in order; false
// (and stops) at bytes that are not whole frames.
template <typename Fn>
bool ForEachFrame(std::string_view bytes, Fn&& fn) {
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  while (!bytes.empty()) {
    auto r = reader.Read(bytes);
    if (!r.is_frame()) return false;
    const protocol::Frame f = r.frame();
    bytes.remove_prefix(f.size());
    fn(f);
  }
  return true;
}

}  // namespace hyperpool::testing
