#include "protocol/wire_writer.h"

#include <cassert>
#include <limits>

namespace hyperpool::protocol {

void AppendInt16(std::string& out, int16_t value) {
  const auto v = static_cast<uint16_t>(value);
  const char bytes[2] = {static_cast<char>(v >> 8), static_cast<char>(v)};
  out.append(bytes, 2);
}

void AppendInt32(std::string& out, int32_t value) {
  const auto v = static_cast<uint32_t>(value);
  const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                         static_cast<char>(v >> 8), static_cast<char>(v)};
  out.append(bytes, 4);
}

void AppendCString(std::string& out, std::string_view value) {
  const size_t nul = value.find('\0');
  if (nul != std::string_view::npos) value = value.substr(0, nul);
  out.append(value.data(), value.size());
  out.push_back('\0');
}

MessageStart BeginMessage(std::string& out, char tag) {
  out.push_back(tag);
  return BeginStartupPacket(out);
}

MessageStart BeginStartupPacket(std::string& out) {
  MessageStart start{out.size()};
  out.append(4, '\0');
  return start;
}

void FinishMessage(std::string& out, MessageStart start) {
  const size_t length = out.size() - start.length_offset;
  // Only our own code builds messages; a 2 GiB message is a caller bug.
  assert(length <= static_cast<size_t>(std::numeric_limits<int32_t>::max()));
  StoreUint32(out.data() + start.length_offset, static_cast<uint32_t>(length));
}

void AppendFrame(std::string& out, char tag, std::string_view payload) {
  out.reserve(out.size() + 5 + payload.size());
  out.push_back(tag);
  AppendInt32(out, static_cast<int32_t>(payload.size() + 4));
  AppendBytes(out, payload);
}

}  // namespace hyperpool::protocol
