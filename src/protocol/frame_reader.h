// FrameReader: splits a byte stream into PostgreSQL protocol frames without
// doing any I/O (PostgreSQL docs, "Frontend/Backend Protocol" > "Overview" >
// "Messaging Overview").
//
// Usage: append received bytes to a buffer, call Read(buffer) until it stops
// returning frames, consume `frame.size()` bytes per frame, read more from the
// socket when it reports need-more.
//
//   FrameReader reader(FrameReader::Mode::kTagged);
//   for (;;) {
//     FrameReader::Result r = reader.Read(buffer);
//     if (r.is_need_more()) break;            // read >= r.bytes_needed() total
//     if (r.is_error()) return r.status();    // protocol violation: close
//     Handle(r.frame());                      // views into `buffer`
//     buffer.remove_prefix(r.frame().size());
//   }
//
// Lengths are validated from the header alone: a declared length < 4, with
// the top bit set, or above the limit is an error as soon as the header is
// complete, so a peer can never make us wait for or buffer a huge body.
#ifndef HYPERPOOL_PROTOCOL_FRAME_READER_H_
#define HYPERPOOL_PROTOCOL_FRAME_READER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "protocol/tags.h"
#include "protocol/wire_reader.h"

namespace hyperpool::protocol {

// One complete message. Views point into the buffer passed to Read() and are
// valid as long as it is.
struct Frame {
  // Message tag; '\0' for an untagged startup-mode packet.
  char tag = '\0';
  // Message body after the length field (for startup packets this starts with
  // the Int32 protocol version / request code).
  std::string_view payload;
  // The whole frame as received (tag, length, payload): forward it verbatim
  // with AppendRawFrame() instead of re-encoding.
  std::string_view raw;

  // Bytes of input this frame occupies (== raw.size()).
  size_t size() const { return raw.size(); }
  FrontendTag frontend_tag() const { return static_cast<FrontendTag>(tag); }
  BackendTag backend_tag() const { return static_cast<BackendTag>(tag); }
};

// Size limits for FrameReader (values of the Int32 length field, which counts
// itself). Declared outside the class so it can be a default argument.
struct FrameLimits {
  // Largest accepted length in tagged mode. Callers use a small limit while
  // authenticating.
  uint32_t max_message_length = kDefaultMaxMessageLength;
  // Largest accepted length in startup mode.
  uint32_t max_startup_length = kMaxStartupPacketLength;
};

class FrameReader {
 public:
  enum class Mode {
    // Untagged: Int32 length + Int32 code (StartupMessage, SSLRequest,
    // GSSENCRequest, CancelRequest). A server reads its client's first packet
    // (and the one after an SSL/GSSENC refusal or TLS handshake) in this mode.
    kStartup,
    // Every other message: Byte1 tag + Int32 length.
    kTagged,
  };

  using Limits = FrameLimits;

  // Outcome of one Read(): exactly one of need-more, frame, or error.
  class Result {
   public:
    static Result NeedMore(size_t bytes_needed, bool size_known);
    static Result Complete(Frame frame) {
      Result r;
      r.kind_ = Kind::kFrame;
      r.frame_ = frame;
      return r;
    }
    static Result Error(absl::Status status);

    bool is_need_more() const { return kind_ == Kind::kNeedMore; }
    bool is_frame() const { return kind_ == Kind::kFrame; }
    bool is_error() const { return kind_ == Kind::kError; }

    // Need-more: total buffer size (from the start of the frame) required
    // before the next Read() can make progress. When size_known() it is the
    // exact size of the pending frame; otherwise the header is still
    // incomplete and this is the header size.
    size_t bytes_needed() const { return bytes_needed_; }
    bool size_known() const { return size_known_; }
    // Frame: the complete frame. Only meaningful if is_frame().
    const Frame& frame() const { return frame_; }
    // Error: the protocol error (InvalidArgument). OK otherwise.
    const absl::Status& status() const { return status_; }

   private:
    enum class Kind { kNeedMore, kFrame, kError };
    Kind kind_ = Kind::kNeedMore;
    size_t bytes_needed_ = 0;
    bool size_known_ = false;
    Frame frame_;
    absl::Status status_;
  };

  explicit FrameReader(Mode mode = Mode::kTagged, Limits limits = {})
      : mode_(mode), limits_(limits) {}

  // Examines the bytes at the start of `buffer` (bytes received so far, not
  // yet consumed) and reports the first frame, need-more, or an error. Does
  // not consume anything and keeps no reference to `buffer`; calling it again
  // with the same bytes gives the same answer.
  // (Inline for the common case, a whole well-formed tagged frame within
  // the limit: every frame of both halves goes through it.)
  Result Read(std::string_view buffer) const;

  Mode mode() const { return mode_; }
  // Switches between startup and tagged mode, e.g. after the StartupMessage.
  void set_mode(Mode mode) { mode_ = mode; }
  const Limits& limits() const { return limits_; }
  void set_limits(Limits limits) { limits_ = limits; }
  void set_max_message_length(uint32_t max) { limits_.max_message_length = max; }

 private:
  Result ReadSlow(std::string_view buffer) const;

  Mode mode_;
  Limits limits_;
};

// A tagged frame's header (Byte1 tag + Int32 length) read at the start of
// bytes without a FrameReader: for code that walks frames a FrameReader has
// already split once (a unit held in a buffer, a stored result, the frame a
// caller just appended) or follows a stream it forwards as it arrives. The
// only places outside src/protocol/ that read a frame's length go through
// these (cmake/LayeringCheck.cmake fails on a hand-read one).
struct FrameHeader {
  char tag = '\0';
  uint32_t length = 0;  // the Int32 length field (counts itself, not the tag)
  // A length PostgreSQL could send: at least 4, top bit clear.
  bool well_formed() const { return length >= 4 && length < 0x80000000u; }
  // Bytes the whole frame takes, tag included.
  size_t size() const { return size_t{length} + 1; }
};
// The header at the start of `bytes`; nullopt when fewer than 5 bytes.
// (Inline, as PeekTaggedFrame: both run per frame on the forwarding path.)
inline std::optional<FrameHeader> PeekTaggedHeader(std::string_view bytes) {
  if (bytes.size() < 5) return std::nullopt;
  return FrameHeader{bytes[0], LoadUint32(bytes.data() + 1)};
}
// The whole well-formed tagged frame at the start of `bytes`; nullopt when
// it is not all there or its length is malformed. No size limit but the
// bytes themselves (they are already held).
inline std::optional<Frame> PeekTaggedFrame(std::string_view bytes) {
  std::optional<FrameHeader> h = PeekTaggedHeader(bytes);
  if (!h || !h->well_formed() || h->size() > bytes.size()) return std::nullopt;
  Frame frame;
  frame.tag = h->tag;
  frame.raw = bytes.substr(0, h->size());
  frame.payload = frame.raw.substr(5);
  return frame;
}
inline FrameReader::Result FrameReader::Read(std::string_view buffer) const {
  if (mode_ == Mode::kTagged) {
    // (raw.size() - 1: the frame's length field.)
    if (std::optional<Frame> f = PeekTaggedFrame(buffer); f && f->raw.size() - 1 <= limits_.max_message_length) {
      return Result::Complete(*f);
    }
  }
  return ReadSlow(buffer);
}

// The same for an untagged startup-mode packet (Int32 length, at least 8,
// then the Int32 code and the body); Frame::tag is '\0'.
std::optional<Frame> PeekStartupPacket(std::string_view bytes);

}  // namespace hyperpool::protocol

#endif  // HYPERPOOL_PROTOCOL_FRAME_READER_H_
