// Helpers for building raw protocol bytes in codec tests.
#ifndef HYPERPOOL_TESTS_UNIT_PROTOCOL_TEST_UTIL_H_
#define HYPERPOOL_TESTS_UNIT_PROTOCOL_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "protocol/wire_writer.h"

namespace hyperpool::protocol::testing {

inline std::string I16(int16_t v) {
  std::string s;
  AppendInt16(s, v);
  return s;
}
inline std::string I32(int32_t v) {
  std::string s;
  AppendInt32(s, v);
  return s;
}
// A NUL-terminated string.
inline std::string Str(std::string_view v) { return std::string(v) + '\0'; }
inline std::string Byte(char c) { return std::string(1, c); }

// A tagged frame around `payload` with the correct length.
inline std::string Tagged(char tag, std::string_view payload) {
  std::string s;
  AppendFrame(s, tag, payload);
  return s;
}

inline std::string Message(const absl::Status& s) { return std::string(s.message()); }

}  // namespace hyperpool::protocol::testing

#endif  // HYPERPOOL_TESTS_UNIT_PROTOCOL_TEST_UTIL_H_
