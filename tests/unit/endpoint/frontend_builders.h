#pragma once
// Frontend messages as a driver sends them, encoded with hyperpool's codec:
// the building blocks of the prepared-statement and Endpoint tests.

#include <string>
#include <string_view>
#include <vector>

#include "protocol/codec.h"
#include "protocol/frame_reader.h"

namespace hyperpool::testing {

inline std::string Parse(std::string_view name, std::string_view query, std::vector<protocol::Oid> types = {}) {
  std::string out;
  protocol::Encode(protocol::Parse{name, query, types}, out);
  return out;
}
// Bind of `statement` to the unnamed portal, with text parameters.
inline std::string Bind(std::string_view statement, const std::vector<std::string>& values = {}) {
  std::string out;
  protocol::Bind b;
  b.statement = statement;
  for (const auto& v : values) b.parameters.push_back(std::string_view(v));
  protocol::Encode(b, out);
  return out;
}
inline std::string DescribeS(std::string_view name) {
  std::string out;
  protocol::Encode(protocol::Describe{protocol::ObjectKind::kStatement, name}, out);
  return out;
}
// Execute of the unnamed portal, all rows.
inline std::string Execute() {
  std::string out;
  protocol::Encode(protocol::Execute{"", 0}, out);
  return out;
}
inline std::string CloseS(std::string_view name) {
  std::string out;
  protocol::Encode(protocol::Close{protocol::ObjectKind::kStatement, name}, out);
  return out;
}
inline std::string Sync() {
  std::string out;
  protocol::Encode(protocol::Sync{}, out);
  return out;
}
inline std::string Flush() {
  std::string out;
  protocol::Encode(protocol::Flush{}, out);
  return out;
}
inline std::string QueryBytes(std::string_view sql) {
  std::string out;
  protocol::Encode(protocol::Query{sql}, out);
  return out;
}

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
