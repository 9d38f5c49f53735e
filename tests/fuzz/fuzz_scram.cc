// libFuzzer target for the SCRAM state machines (and the parsers they use):
// the input plays a hostile server against ScramClient and a hostile client
// against ScramServer. Must never crash, leak or hit UB.
//
// Input: byte 0 selects the scenario; the rest is one or two messages
// separated by the first '\n' (a byte SCRAM messages never need), so the
// fuzzer can reach the final-message stage with a first message it built.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/auth/auth_util.h"
#include "protocol/auth/password.h"
#include "protocol/auth/saslprep.h"
#include "protocol/auth/scram.h"

namespace {

using hyperpool::auth::ChannelBinding;
using hyperpool::auth::ScramClient;
using hyperpool::auth::ScramLimits;
using hyperpool::auth::ScramServer;
using hyperpool::auth::ScramVerifier;

// Cheap PBKDF2 keeps executions fast: accept at most 8 iterations from a
// "server" and give the server a 1-iteration verifier.
ScramLimits FuzzLimits() {
  ScramLimits limits;
  limits.max_iterations = 8;
  return limits;
}

const ScramVerifier& Verifier() {
  static const ScramVerifier v = *hyperpool::auth::MakeScramVerifier("pencil", "salty", 1);
  return v;
}

ScramClient NewClient(ChannelBinding binding) {
  return *ScramClient::Create({.password = "pencil",
                               .binding = binding,
                               .cert_hash = binding == ChannelBinding::kTlsServerEndPoint ? "hash" : "",
                               .client_nonce = "fuzz",
                               .limits = FuzzLimits()});
}

ScramServer NewServer(bool tls) {
  return *ScramServer::Create(
      {.verifier = Verifier(), .cert_hash = tls ? "hash" : "", .server_nonce = "XYZ", .limits = FuzzLimits()});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nl = input.find('\n');
  const std::string_view first = input.substr(0, nl);
  const std::string_view second = nl == std::string_view::npos ? std::string_view() : input.substr(nl + 1);
  const auto binding = static_cast<ChannelBinding>((mode >> 3) % 3);
  const bool tls = (mode >> 5) & 1;

  switch (mode & 7) {
    case 0: {  // hostile server: server-first then server-final
      ScramClient c = NewClient(binding);
      if (c.HandleServerFirst(first).ok()) (void)c.HandleServerFinal(second);
      break;
    }
    case 1: {  // hostile server-final after a valid server-first
      ScramClient c = NewClient(binding);
      if (c.HandleServerFirst("r=fuzzX,s=QUJD,i=1").ok()) (void)c.HandleServerFinal(input);
      break;
    }
    case 2: {  // hostile client: client-first then client-final
      ScramServer s = NewServer(tls);
      const std::string_view mech = (mode >> 6) & 1 ? hyperpool::auth::kScramSha256Plus : hyperpool::auth::kScramSha256;
      if (s.HandleClientFirst(mech, first).ok()) (void)s.HandleClientFinal(second);
      break;
    }
    case 3: {  // hostile client-final after a valid client-first
      ScramServer s = NewServer(tls);
      if (s.HandleClientFirst(hyperpool::auth::kScramSha256, "n,,n=,r=abc").ok()) (void)s.HandleClientFinal(input);
      break;
    }
    case 4: {  // a real client talking to a server whose final we mutate
      ScramClient c = NewClient(ChannelBinding::kNone);
      ScramServer s = NewServer(false);
      auto sf = s.HandleClientFirst(c.mechanism(), c.ClientFirstMessage());
      if (!sf.ok()) __builtin_trap();  // a valid exchange must work
      auto cf = c.HandleServerFirst(*sf);
      if (!cf.ok()) __builtin_trap();
      (void)s.HandleClientFinal(input);
      break;
    }
    case 5:
      (void)hyperpool::auth::ParseScramVerifier(input, FuzzLimits());
      (void)hyperpool::auth::Base64Decode(input);
      break;
    case 6: {
      (void)hyperpool::auth::SaslPrep(input);
      std::vector<std::string_view> offered = {first, second};
      (void)hyperpool::auth::ChooseScramMechanism(absl::MakeConstSpan(offered), tls);
      break;
    }
    case 7:
      (void)hyperpool::auth::VerifyMd5Response("md53175bce1d3201d16594cebf9d7eb3f9d", first.substr(0, 4), second);
      (void)hyperpool::auth::Md5PasswordResponse(first, second, "salt");
      break;
  }
  return 0;
}
