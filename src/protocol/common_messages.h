// Types shared by both directions of the protocol, and the COPY sub-protocol
// messages that both sides send with the same tag and layout (PostgreSQL docs,
// "Message Formats": CopyData (F & B), CopyDone (F & B); "Message Flow" >
// "COPY Operations").
//
// Conventions for every message in this library:
//  - `DecodeX(payload)` takes Frame::payload (no tag or length) and returns
//    absl::StatusOr<X>; string_view fields point into the payload, so the
//    payload must outlive the decoded value. Any malformation (truncation,
//    missing NUL, impossible count, trailing bytes) is a ProtocolError.
//  - `Encode(const X&, std::string& out)` appends the complete frame (tag,
//    length, payload) to `out`. C-string fields are truncated at an embedded
//    NUL (see AppendCString); counts must fit the wire type (65535 for Int16
//    counts), which decoded values always do.
//  - Every struct compares with ==, so decode(encode(x)) == x is testable.
#ifndef HYPERPOOL_PROTOCOL_COMMON_MESSAGES_H_
#define HYPERPOOL_PROTOCOL_COMMON_MESSAGES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace hyperpool::protocol {

// A value that may be SQL NULL (Int32 length -1 on the wire).
using NullableValue = std::optional<std::string_view>;

// Format codes of parameters and result columns.
inline constexpr int16_t kFormatText = 0;
inline constexpr int16_t kFormatBinary = 1;

// Object IDs are unsigned 32-bit on the wire (sent as Int32).
using Oid = uint32_t;

// CopyData ('d', both directions): a chunk of COPY data stream.
struct CopyData {
  std::string_view data;
  bool operator==(const CopyData&) const = default;
};
absl::StatusOr<CopyData> DecodeCopyData(std::string_view payload);
void Encode(const CopyData& msg, std::string& out);

// CopyDone ('c', both directions): end of the COPY data stream.
struct CopyDone {
  bool operator==(const CopyDone&) const = default;
};
absl::StatusOr<CopyDone> DecodeCopyDone(std::string_view payload);
void Encode(const CopyDone& msg, std::string& out);

}  // namespace hyperpool::protocol

#endif  // HYPERPOOL_PROTOCOL_COMMON_MESSAGES_H_
