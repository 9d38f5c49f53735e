#include "protocol/frame_reader.h"

#include <fmt/format.h>

#include <utility>

#include "protocol/protocol_error.h"

namespace hyperpool::protocol {
namespace {

constexpr size_t kTaggedHeaderSize = 5;   // Byte1 tag + Int32 length.
constexpr size_t kStartupHeaderSize = 4;  // Int32 length.
// A startup packet must at least hold its length and the Int32 code.
constexpr uint32_t kMinStartupLength = 8;

std::string DescribeTag(char tag) {
  const auto u = static_cast<unsigned char>(tag);
  if (u >= 0x20 && u < 0x7f) return fmt::format("'{}'", tag);
  return fmt::format("0x{:02x}", u);
}

}  // namespace

FrameReader::Result FrameReader::Result::NeedMore(size_t bytes_needed, bool size_known) {
  Result r;
  r.kind_ = Kind::kNeedMore;
  r.bytes_needed_ = bytes_needed;
  r.size_known_ = size_known;
  return r;
}

FrameReader::Result FrameReader::Result::Error(absl::Status status) {
  Result r;
  r.kind_ = Kind::kError;
  r.status_ = std::move(status);
  return r;
}

FrameReader::Result FrameReader::ReadSlow(std::string_view buffer) const {
  if (mode_ == Mode::kStartup) {
    if (buffer.size() < kStartupHeaderSize) return Result::NeedMore(kStartupHeaderSize, false);
    const uint32_t length = LoadUint32(buffer.data());
    // Validate before waiting for the body so a peer cannot make us buffer it.
    if (length >= 0x80000000u) {
      return Result::Error(ProtocolError(
          fmt::format("startup packet has negative length {}", static_cast<int32_t>(length))));
    }
    if (length < kMinStartupLength) {
      return Result::Error(ProtocolError(
          fmt::format("startup packet length {} is less than the minimum {}", length,
                      kMinStartupLength)));
    }
    if (length > limits_.max_startup_length) {
      return Result::Error(ProtocolError(fmt::format(
          "startup packet length {} exceeds the limit {}", length, limits_.max_startup_length)));
    }
    if (buffer.size() < length) return Result::NeedMore(length, true);
    Frame frame;
    frame.tag = '\0';
    frame.raw = buffer.substr(0, length);
    frame.payload = frame.raw.substr(kStartupHeaderSize);
    return Result::Complete(frame);
  }

  if (buffer.size() < kTaggedHeaderSize) return Result::NeedMore(kTaggedHeaderSize, false);
  const char tag = buffer[0];
  const uint32_t length = LoadUint32(buffer.data() + 1);
  if (length >= 0x80000000u) {
    return Result::Error(ProtocolError(fmt::format("message {} has negative length {}",
                                                   DescribeTag(tag),
                                                   static_cast<int32_t>(length))));
  }
  if (length < 4) {
    return Result::Error(ProtocolError(
        fmt::format("message {} has invalid length {} (less than 4)", DescribeTag(tag), length)));
  }
  if (length > limits_.max_message_length) {
    return Result::Error(ProtocolError(fmt::format("message {} length {} exceeds the limit {}",
                                                   DescribeTag(tag), length,
                                                   limits_.max_message_length)));
  }
  const size_t total = size_t{length} + 1;
  if (buffer.size() < total) return Result::NeedMore(total, true);
  Frame frame;
  frame.tag = tag;
  frame.raw = buffer.substr(0, total);
  frame.payload = frame.raw.substr(kTaggedHeaderSize);
  return Result::Complete(frame);
}

std::optional<Frame> PeekStartupPacket(std::string_view bytes) {
  if (bytes.size() < 8) return std::nullopt;
  const uint32_t length = LoadUint32(bytes.data());
  if (length < 8 || length > bytes.size()) return std::nullopt;
  Frame frame;
  frame.raw = bytes.substr(0, length);
  frame.payload = frame.raw.substr(4);
  return frame;
}

}  // namespace hyperpool::protocol
