// libFuzzer target: what one half of hyperpool reads from the other on a
// link besides verbatim PostgreSQL messages — the cache control frames
// (tag 'h', read by the Client), the unit-of-work shapes the cache tiers
// recognise in frontend bytes, the placement probe's answer, and the hello's
// parameters (read by the Endpoint). A link peer is authenticated, but a
// bug or a version skew on the other side must still only ever produce an
// error, never a crash, an out-of-bounds view or a different re-encoding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <optional>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "cache/tier.h"
#include "placement/probe.h"
#include "protocol/codec.h"

namespace cache = hyperpool::cache;
namespace hp = hyperpool::protocol;

namespace {

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "fuzz_link_control: %s\n", what);
  std::abort();
}

std::string Encode(const cache::Control& control) {
  std::string out;
  std::visit([&](const auto& c) { cache::AppendControl(out, c); }, control);
  return out;
}

// Decode, encode, decode, encode: the two encodings must agree (a decoded
// control message is normalised once, e.g. any non-zero `all` becomes 1).
void CheckControl(std::string_view payload) {
  std::optional<cache::Control> decoded = cache::DecodeControl(payload);
  if (!decoded) return;
  std::string once = Encode(*decoded);
  if (once.size() < 5 || once[0] != cache::kControlTag) Die("control frame without its tag");
  std::optional<cache::Control> again = cache::DecodeControl(std::string_view(once).substr(5));
  if (!again) Die("re-encoded control frame does not decode");
  if (Encode(*again) != once) Die("control frame round trip differs");
}

bool Within(std::string_view inner, std::string_view outer) {
  return inner.empty() || (inner.data() >= outer.data() && inner.data() + inner.size() <= outer.data() + outer.size());
}

void CheckUnit(std::string_view bytes) {
  cache::CandidateUnit unit;
  cache::UnitShape shape = cache::ParseCandidateUnit(bytes, unit);
  if (shape != cache::UnitShape::kCandidate) return;
  if (!Within(unit.frames, bytes) || !Within(unit.sql, bytes)) Die("candidate unit views outside the input");
  for (const auto& param : unit.params) {
    if (param.value && !Within(*param.value, bytes)) Die("parameter view outside the input");
  }
}

void CheckProbeAnswer(std::string_view bytes) {
  std::string buffer(bytes);
  hyperpool::placement::ProbeAnswer answer;
  for (int rounds = 0; rounds < 64; ++rounds) {
    std::size_t before = buffer.size();
    absl::StatusOr<bool> done = hyperpool::placement::ParseProbeAnswer(buffer, answer);
    if (!done.ok() || *done) return;
    if (buffer.size() > before) Die("probe parser grew its buffer");
    if (buffer.size() == before) return;  // needs more bytes
  }
}

void CheckHello(std::string_view bytes) {
  hp::FrameReader reader(hp::FrameReader::Mode::kStartup);
  hp::FrameReader::Result r = reader.Read(bytes);
  if (!r.is_frame()) return;
  absl::StatusOr<hp::StartupPacket> packet = hp::DecodeStartupPacket(r.frame().payload);
  if (!packet.ok()) return;
  const auto* startup = std::get_if<hp::StartupMessage>(&*packet);
  if (startup == nullptr) return;
  std::vector<std::pair<std::string, std::string>> params;
  for (const auto& [name, value] : startup->parameters) params.emplace_back(std::string(name), std::string(value));
  bool unsupported = false;
  (void)cache::HelloFingerprint(params, &unsupported);
  cache::SessionCacheSettings settings;
  cache::ApplyStartupParameters(params, settings);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: CheckControl(input); break;
    case 1: CheckUnit(input); break;
    case 2: CheckProbeAnswer(input); break;
    default: CheckHello(input); break;
  }
  return 0;
}
