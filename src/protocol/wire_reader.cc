#include "protocol/wire_reader.h"

#include <fmt/format.h>

#include "protocol/protocol_error.h"

namespace hyperpool::protocol {
namespace {

uint32_t LoadBigEndian32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}

}  // namespace

bool WireReader::Fail(std::string_view detail) {
  if (status_.ok()) status_ = ProtocolError(fmt::format("{}: {}", message_, detail));
  return false;
}

bool WireReader::Need(size_t n, const char* what, const char* field) {
  if (!status_.ok()) return false;
  if (remaining() >= n) return true;
  return Fail(fmt::format("truncated {} (needs {} {}, {} left)", field, n,
                          n == 1 ? "byte" : "bytes", remaining()));
}

bool WireReader::ReadByte(uint8_t& value, const char* field) {
  if (!Need(1, "byte", field)) return false;
  value = static_cast<uint8_t>(data_[pos_]);
  pos_ += 1;
  return true;
}

bool WireReader::ReadUint16(uint16_t& value, const char* field) {
  if (!Need(2, "Int16", field)) return false;
  const auto* u = reinterpret_cast<const unsigned char*>(data_.data() + pos_);
  value = static_cast<uint16_t>((u[0] << 8) | u[1]);
  pos_ += 2;
  return true;
}

bool WireReader::ReadInt16(int16_t& value, const char* field) {
  uint16_t v;
  if (!ReadUint16(v, field)) return false;
  value = static_cast<int16_t>(v);
  return true;
}

bool WireReader::ReadUint32(uint32_t& value, const char* field) {
  if (!Need(4, "Int32", field)) return false;
  value = LoadBigEndian32(data_.data() + pos_);
  pos_ += 4;
  return true;
}

bool WireReader::ReadInt32(int32_t& value, const char* field) {
  uint32_t v;
  if (!ReadUint32(v, field)) return false;
  value = static_cast<int32_t>(v);
  return true;
}

bool TakeCString(std::string_view& in, std::string_view& value) {
  const size_t nul = in.find('\0');
  if (nul == std::string_view::npos) return false;
  value = in.substr(0, nul);
  in.remove_prefix(nul + 1);
  return true;
}

bool WireReader::ReadCString(std::string_view& value, const char* field) {
  if (!status_.ok()) return false;
  const size_t nul = data_.find('\0', pos_);
  if (nul == std::string_view::npos) {
    return Fail(fmt::format("{} is missing its NUL terminator", field));
  }
  value = data_.substr(pos_, nul - pos_);
  pos_ = nul + 1;
  return true;
}

bool WireReader::ReadBytes(size_t n, std::string_view& value, const char* field) {
  if (!Need(n, "bytes", field)) return false;
  value = data_.substr(pos_, n);
  pos_ += n;
  return true;
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
