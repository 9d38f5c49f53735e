// libFuzzer target: everything a (possibly hostile) app can send the Client
// half. Splits the input with FrameReader in startup mode until a
// StartupMessage (as a real session does), then in tagged mode; separately
// reads the whole input in tagged mode. Every decoded message must re-encode
// to the exact bytes received and decode back to an equal value.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "protocol/codec.h"

namespace hp = hyperpool::protocol;

namespace {

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "fuzz_frontend_decoder: %s\n", what);
  std::abort();
}

void CheckStartup(const hp::Frame& frame) {
  absl::StatusOr<hp::StartupPacket> decoded = hp::DecodeStartupPacket(frame.payload);
  if (!decoded.ok()) {
    if (!hp::IsProtocolError(decoded.status())) Die("non-protocol error");
    return;
  }
  std::string out;
  hp::Encode(*decoded, out);
  if (out != frame.raw) Die("startup packet re-encoding differs");
  absl::StatusOr<hp::StartupPacket> again = hp::DecodeStartupPacket(std::string_view(out).substr(4));
  if (!again.ok() || !(*again == *decoded)) Die("startup packet round trip mismatch");
}

void CheckTagged(const hp::Frame& frame) {
  constexpr hp::PasswordKind kKinds[] = {
      hp::PasswordKind::kPassword, hp::PasswordKind::kSaslInitialResponse,
      hp::PasswordKind::kSaslResponse, hp::PasswordKind::kGssResponse};
  for (hp::PasswordKind kind : kKinds) {
    absl::StatusOr<hp::FrontendMessage> decoded = hp::DecodeFrontendMessage(frame, kind);
    if (!decoded.ok()) {
      if (!hp::IsProtocolError(decoded.status())) Die("non-protocol error");
    } else {
      std::string out;
      hp::Encode(*decoded, out);
      if (out != frame.raw) Die("frontend message re-encoding differs");
      hp::FrameReader::Result r = hp::FrameReader().Read(out);
      if (!r.is_frame() || r.frame().size() != out.size()) Die("re-encoded frame unreadable");
      absl::StatusOr<hp::FrontendMessage> again = hp::DecodeFrontendMessage(r.frame(), kind);
      if (!again.ok() || !(*again == *decoded)) Die("frontend message round trip mismatch");
    }
    if (frame.tag != 'p') break;  // The kind only matters for 'p'.
  }
}

// Reads and checks every frame of `data` until need-more or an error.
void ReadStream(std::string_view data, hp::FrameReader reader) {
  while (!data.empty()) {
    hp::FrameReader::Result r = reader.Read(data);
    if (r.is_need_more()) {
      if (r.bytes_needed() <= data.size()) Die("need-more with enough bytes");
      return;
    }
    if (r.is_error()) {
      if (!hp::IsProtocolError(r.status())) Die("non-protocol frame error");
      return;
    }
    const hp::Frame& frame = r.frame();
    if (frame.size() == 0 || frame.size() > data.size()) Die("bad frame size");
    if (reader.mode() == hp::FrameReader::Mode::kStartup) {
      CheckStartup(frame);
      absl::StatusOr<hp::StartupPacket> p = hp::DecodeStartupPacket(frame.payload);
      if (p.ok() && std::holds_alternative<hp::StartupMessage>(*p)) {
        reader.set_mode(hp::FrameReader::Mode::kTagged);
      }
    } else {
      CheckTagged(frame);
    }
    data.remove_prefix(frame.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  ReadStream(input, hp::FrameReader(hp::FrameReader::Mode::kStartup));
  ReadStream(input, hp::FrameReader(hp::FrameReader::Mode::kTagged));
  // A tight limit, as during authentication, exercises the length checks.
  ReadStream(input, hp::FrameReader(hp::FrameReader::Mode::kTagged,
                                    hp::FrameLimits{.max_message_length = 64,
                                                    .max_startup_length = 64}));
  return 0;
}
