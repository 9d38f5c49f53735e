// libFuzzer target: the Client half's server-side handshake
// (src/client/server_handshake.h) fed what a hostile app might send.
//
// Input byte 0 picks how the rest is delivered: its low 4 bits give the
// chunk size per Advance() (0 = everything at once), bit 4 makes the harness
// first play a legitimate StartupMessage + SASLInitialResponse so that the
// rest lands on the client-final parser, bit 5 offers TLS (an SSLRequest
// gets 'S' and the harness plays a completed TLS handshake) and bit 6 also
// requires it. Invariants checked on every step:
// consumption within the input, need-more always asks for more than is
// buffered and never more than one bounded frame, output is whole protocol
// messages (or the single 'N' of a refusal), and final states stay final.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "client/server_handshake.h"
#include "protocol/auth/scram.h"
#include "protocol/codec.h"

namespace hc = hyperpool::client;
namespace hp = hyperpool::protocol;

namespace {

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "fuzz_client_handshake: %s\n", what);
  std::abort();
}

const hc::HandshakeConfig& BaseConfig() {
  static const hc::HandshakeConfig config = [] {
    hc::HandshakeConfig c;
    c.user = "app";
    c.database = "appdb";
    absl::StatusOr<hyperpool::auth::ScramVerifier> v =
        hyperpool::auth::MakeScramVerifier("s3cret", "fuzz-salt-16byte", 4096);
    if (!v.ok()) Die("verifier");
    c.verifier = *v;
    c.mock_secret = "fuzz-mock-secret";
    c.server_nonce = "FuzzServerNonce";
    c.other_users.emplace("reporting", *v);
    return c;
  }();
  return config;
}

hc::HandshakeConfig Config(uint8_t selector) {
  hc::HandshakeConfig c = BaseConfig();
  c.offer_tls = (selector & 0x20) != 0;
  c.require_tls = c.offer_tls && (selector & 0x40) != 0;
  return c;
}

// Output must split into whole messages (or be the single refusal byte).
void CheckOutput(const hc::ServerHandshake::Step& step) {
  if (step.event == hc::ServerHandshake::Event::kEncryptionRefused) {
    if (step.output != "N") Die("refusal is not exactly 'N'");
    return;
  }
  if (step.event == hc::ServerHandshake::Event::kTlsAccepted) {
    if (step.output != "S") Die("acceptance is not exactly 'S'");
    return;
  }
  hp::FrameReader reader(hp::FrameReader::Mode::kTagged);
  std::string_view rest = step.output;
  while (!rest.empty()) {
    hp::FrameReader::Result r = reader.Read(rest);
    if (!r.is_frame()) Die("output is not whole messages");
    rest.remove_prefix(r.frame().size());
  }
}

std::string LegitimatePrefix() {
  std::string out;
  hp::StartupMessage m;
  m.parameters = {{"user", "app"}, {"database", "appdb"}};
  hp::Encode(m, out);
  hp::Encode(hp::SaslInitialResponse{hyperpool::auth::kScramSha256, std::string_view("n,,n=,r=FuzzClientNonce")},
             out);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = data[0] & 0x0f;
  std::string input = (data[0] & 0x10) ? LegitimatePrefix() : std::string();
  input.append(reinterpret_cast<const char*>(data) + 1, size - 1);

  hc::ServerHandshake hs(Config(data[0]));
  std::string pending;
  size_t fed = 0;
  auto feed = [&] {
    const size_t n = chunk == 0 ? input.size() - fed : std::min(chunk, input.size() - fed);
    pending.append(input, fed, n);
    fed += n;
  };
  feed();
  for (int steps = 0;; ++steps) {
    if (steps > 1'000'000) Die("no progress");
    hc::ServerHandshake::Step step = hs.Advance(pending);
    if (step.consumed > pending.size()) Die("consumed more than the input");
    pending.erase(0, step.consumed);
    CheckOutput(step);
    switch (step.event) {
      case hc::ServerHandshake::Event::kNeedMore:
        if (step.bytes_needed <= pending.size()) Die("need-more for bytes already buffered");
        if (step.bytes_needed > hp::kMaxStartupPacketLength + hc::kAuthMaxMessageLength) Die("unbounded need-more");
        if (fed == input.size()) return 0;
        feed();
        continue;
      case hc::ServerHandshake::Event::kEncryptionRefused:
        continue;
      case hc::ServerHandshake::Event::kTlsAccepted:
        if (!pending.empty()) Die("'S' with unencrypted bytes buffered");
        hs.OnTlsEstablished();
        continue;
      case hc::ServerHandshake::Event::kAuthenticated:
        Die("authenticated without knowing the password");
      case hc::ServerHandshake::Event::kCancelRequest:
      case hc::ServerHandshake::Event::kClose: {
        hc::ServerHandshake::Step after = hs.Advance(pending);
        if (after.event != hc::ServerHandshake::Event::kClose || !after.output.empty() || after.consumed != 0) {
          Die("a final state did not stay final");
        }
        return 0;
      }
    }
  }
}
