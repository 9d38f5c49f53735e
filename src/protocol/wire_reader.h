// WireReader: a bounds-checked cursor over a message payload, used by the
// decoders and available to anyone parsing protocol data types (PostgreSQL
// docs, "Frontend/Backend Protocol" > "Message Data Types").
//
// Reads never go past the end: each returns false and records a specific
// error ("Bind: truncated parameter count (needs 2 bytes, 1 left)") that
// status() returns. After the first failure every further read fails too, so
// a decoder may check once at the end.
#ifndef HYPERPOOL_PROTOCOL_WIRE_READER_H_
#define HYPERPOOL_PROTOCOL_WIRE_READER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"

namespace hyperpool::protocol {

// The big-endian (network order) 32-bit integer in the four bytes at `p`:
// a frame's length, a pid, a cancel key. For code that peeks at bytes
// without a WireReader (frame headers in a buffer, a length to patch).
inline uint32_t LoadUint32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | u[3];
}

// Splits a NUL-terminated string off the front of `in` (the view excludes
// the NUL); false, leaving `in` alone, if there is no NUL. For callers that
// look into a payload without decoding all of it.
bool TakeCString(std::string_view& in, std::string_view& value);

class WireReader {
 public:
  // `message` names the message in errors (e.g. "Bind"); it must outlive the
  // reader (a string literal).
  WireReader(std::string_view data, const char* message)
      : data_(data), message_(message) {}

  // Each Read* stores the value and returns true, or records an error naming
  // `field` and returns false. (The fixed-size reads and ReadCString are
  // inline: every decoder calls them per field, on the forwarding path.)
  bool ReadByte(uint8_t& value, const char* field) {
    if (!Need(1, field)) return false;
    value = static_cast<uint8_t>(data_[pos_]);
    pos_ += 1;
    return true;
  }
  bool ReadInt16(int16_t& value, const char* field) {
    uint16_t v;
    if (!ReadUint16(v, field)) return false;
    value = static_cast<int16_t>(v);
    return true;
  }
  // Int16 counts: PostgreSQL reads them unsigned (0..65535).
  bool ReadUint16(uint16_t& value, const char* field) {
    if (!Need(2, field)) return false;
    const auto* u = reinterpret_cast<const unsigned char*>(data_.data() + pos_);
    value = static_cast<uint16_t>((u[0] << 8) | u[1]);
    pos_ += 2;
    return true;
  }
  bool ReadInt32(int32_t& value, const char* field) {
    uint32_t v;
    if (!ReadUint32(v, field)) return false;
    value = static_cast<int32_t>(v);
    return true;
  }
  bool ReadUint32(uint32_t& value, const char* field) {
    if (!Need(4, field)) return false;
    value = LoadUint32(data_.data() + pos_);
    pos_ += 4;
    return true;
  }
  // NUL-terminated string; the view excludes the NUL.
  bool ReadCString(std::string_view& value, const char* field) {
    if (!status_.ok()) return false;
    const size_t nul = data_.find('\0', pos_);
    if (nul == std::string_view::npos) return MissingNul(field);
    value = data_.substr(pos_, nul - pos_);
    pos_ = nul + 1;
    return true;
  }
  // Exactly `n` bytes.
  bool ReadBytes(size_t n, std::string_view& value, const char* field) {
    if (!Need(n, field)) return false;
    value = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  // Int32 length followed by that many bytes; length -1 yields std::nullopt
  // (SQL NULL); any other negative length is an error.
  bool ReadNullableBytes(std::optional<std::string_view>& value, const char* field);
  // Everything that is left (possibly empty).
  std::string_view ReadRest();

  // Fails (and records the error) unless `count` items of at least
  // `min_item_size` bytes each can still fit in the remaining bytes. Decoders
  // call it before reserving space for an attacker-controlled count.
  bool CheckCount(size_t count, size_t min_item_size, const char* field);

  size_t remaining() const { return data_.size() - pos_; }
  size_t position() const { return pos_; }
  bool ok() const { return status_.ok(); }

  // The first error, or OK.
  const absl::Status& status() const { return status_; }
  // The first error; otherwise an error if bytes remain ("trailing garbage");
  // otherwise OK. Decoders end with `return reader.Finish()`-style checks.
  absl::Status Finish();
  // Records a custom error (if none yet) and returns false.
  bool Fail(std::string_view detail);

 private:
  bool Need(size_t n, const char* field) { return (status_.ok() && remaining() >= n) || NeedFailed(n, field); }
  bool NeedFailed(size_t n, const char* field);
  bool MissingNul(const char* field);

  std::string_view data_;
  size_t pos_ = 0;
  const char* message_;
  absl::Status status_;
};

}  // namespace hyperpool::protocol

#endif  // HYPERPOOL_PROTOCOL_WIRE_READER_H_
