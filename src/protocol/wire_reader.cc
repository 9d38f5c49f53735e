#include "protocol/wire_reader.h"

#include <fmt/format.h>

#include "protocol/protocol_error.h"

namespace hyperpool::protocol {
bool WireReader::Fail(std::string_view detail) {
  if (status_.ok()) status_ = ProtocolError(fmt::format("{}: {}", message_, detail));
  return false;
}

bool WireReader::NeedFailed(size_t n, const char* field) {
  if (!status_.ok()) return false;
  return Fail(fmt::format("truncated {} (needs {} {}, {} left)", field, n,
                          n == 1 ? "byte" : "bytes", remaining()));
}

bool TakeCString(std::string_view& in, std::string_view& value) {
  const size_t nul = in.find('\0');
  if (nul == std::string_view::npos) return false;
  value = in.substr(0, nul);
  in.remove_prefix(nul + 1);
  return true;
}

bool WireReader::MissingNul(const char* field) {
  return Fail(fmt::format("{} is missing its NUL terminator", field));
}

bool WireReader::ReadNullableBytes(std::optional<std::string_view>& value, const char* field) {
  int32_t length;
  if (!ReadInt32(length, field)) return false;
  if (length == -1) {
    value = std::nullopt;
    return true;
  }
  if (length < 0) return Fail(fmt::format("{} has invalid length {}", field, length));
  std::string_view bytes;
  if (!ReadBytes(static_cast<size_t>(length), bytes, field)) return false;
  value = bytes;
  return true;
}

std::string_view WireReader::ReadRest() {
  if (!status_.ok()) return {};
  std::string_view rest = data_.substr(pos_);
  pos_ = data_.size();
  return rest;
}

bool WireReader::CheckCount(size_t count, size_t min_item_size, const char* field) {
  if (!status_.ok()) return false;
  // Division instead of multiplication: no overflow for any count.
  if (min_item_size == 0 || count <= remaining() / min_item_size) return true;
  return Fail(fmt::format("{} {} declared but only {} bytes left", count, field, remaining()));
}

absl::Status WireReader::Finish() {
  if (!status_.ok()) return status_;
  if (remaining() != 0) {
    Fail(fmt::format("{} unexpected trailing {}", remaining(),
                     remaining() == 1 ? "byte" : "bytes"));
  }
  return status_;
}

}  // namespace hyperpool::protocol
