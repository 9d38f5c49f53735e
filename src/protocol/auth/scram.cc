#include "protocol/auth/scram.h"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>

#include "protocol/auth/auth_util.h"
#include "protocol/auth/digest.h"
#include "protocol/auth/saslprep.h"

namespace hyperpool::auth {
namespace {

constexpr std::string_view kCbindName = "tls-server-end-point";

// Concatenation of std::string_view pieces. absl::StrCat is not usable here:
// Debian's abseil has its own absl::string_view that std::string_view does
// not convert to.
std::string Cat(std::initializer_list<std::string_view> parts) {
  size_t size = 0;
  for (std::string_view p : parts) size += p.size();
  std::string out;
  out.reserve(size);
  for (std::string_view p : parts) out.append(p);
  return out;
}

// absl::Status::message() is an absl::string_view; copy it out.
std::string_view Message(const absl::Status& s) { return {s.message().data(), s.message().size()}; }

// Fails with `code` and a message prefixed by the SCRAM message it concerns,
// so a log line says which peer message was wrong and how.
absl::Status Error(absl::StatusCode code, std::string_view where, std::string_view what) {
  return absl::Status(code, Cat({"SCRAM ", where, ": ", what}));
}
absl::Status Malformed(std::string_view where, std::string_view what) {
  return Error(absl::StatusCode::kInvalidArgument, where, what);
}

// RFC 5802 "printable": %x21-2B / %x2D-7E (no ',').
bool IsPrintableNonce(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x21 && c <= 0x7E && c != ','; });
}

// Checks what every SCRAM message must satisfy before parsing: bounded size
// and no NUL (PostgreSQL handles these as C strings; RFC 5802 excludes NUL
// from every attribute value).
absl::Status CheckMessage(std::string_view where, std::string_view msg, const ScramLimits& limits) {
  if (msg.empty()) return Malformed(where, "empty message");
  if (msg.size() > limits.max_message_size) {
    return Error(absl::StatusCode::kOutOfRange, where, "message too long");
  }
  if (msg.find('\0') != std::string_view::npos) return Malformed(where, "NUL byte in message");
  return absl::OkStatus();
}

std::vector<std::string_view> SplitComma(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    if (comma == std::string_view::npos) {
      parts.push_back(s.substr(start));
      return parts;
    }
    parts.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
}

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// An attribute is "<ALPHA>=<value>". Returns its name, or nullopt if the
// field does not have that shape.
std::optional<char> AttrName(std::string_view field) {
  if (field.size() < 2 || !IsAlpha(field[0]) || field[1] != '=') return std::nullopt;
  return field[0];
}

// Reads attribute `name` from `field`, which must be exactly "<name>=<value>".
absl::StatusOr<std::string_view> ExpectAttr(std::string_view where, std::string_view field, char name) {
  const std::optional<char> got = AttrName(field);
  if (!got) return Malformed(where, Cat({"expected attribute '", std::string(1, name), "='"}));
  if (*got == 'm') return Error(absl::StatusCode::kUnimplemented, where, "unsupported mandatory extension (m=)");
  if (*got != name) {
    return Malformed(where, Cat({"expected attribute '", std::string(1, name), "=', got '",
                                         std::string(1, *got), "='"}));
  }
  return field.substr(2);
}

// Optional extensions ("<ALPHA>=<value>", not 'm'): validated and ignored.
absl::Status CheckExtensions(std::string_view where, absl::Span<const std::string_view> fields) {
  for (std::string_view f : fields) {
    const std::optional<char> name = AttrName(f);
    if (!name) return Malformed(where, "malformed attribute");
    if (*name == 'm') return Error(absl::StatusCode::kUnimplemented, where, "unsupported mandatory extension (m=)");
  }
  return absl::OkStatus();
}

std::string EscapeSaslName(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '=') {
      out += "=3D";
    } else if (c == ',') {
      out += "=2C";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

absl::StatusOr<std::string> UnescapeSaslName(std::string_view where, std::string_view name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] != '=') {
      out.push_back(name[i]);
      continue;
    }
    const std::string_view esc = name.substr(i + 1, 2);
    if (esc == "3D") {
      out.push_back('=');
    } else if (esc == "2C") {
      out.push_back(',');
    } else {
      return Malformed(where, "invalid '=' escape in username");
    }
    i += 2;
  }
  return out;
}

std::string_view Gs2Header(ChannelBinding binding) {
  switch (binding) {
    case ChannelBinding::kNone:
      return "n,,";
    case ChannelBinding::kClientSupported:
      return "y,,";
    case ChannelBinding::kTlsServerEndPoint:
      return "p=tls-server-end-point,,";
  }
  return "n,,";
}

std::string XorBytes(std::string_view a, std::string_view b) {
  std::string out(a);
  for (size_t i = 0; i < out.size() && i < b.size(); ++i) out[i] = static_cast<char>(out[i] ^ b[i]);
  return out;
}

struct Keys {
  std::string client_key;
  std::string stored_key;
  std::string server_key;
};

Keys DeriveKeys(std::string_view password, std::string_view salt, uint32_t iterations) {
  const std::string salted = internal::Pbkdf2Sha256(SaslPrep(password), salt, iterations);
  Keys k;
  k.client_key = internal::HmacSha256(salted, "Client Key");
  k.stored_key = internal::Sha256(k.client_key);
  k.server_key = internal::HmacSha256(salted, "Server Key");
  return k;
}

// Parses a decimal iteration count: digits only, no sign or leading zero,
// 1 <= value <= max. Bounded digit count so nothing can overflow.
absl::StatusOr<uint32_t> ParseIterations(std::string_view where, std::string_view s, uint32_t max) {
  if (s.empty()) return Malformed(where, "empty iteration count");
  if (!std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Malformed(where, "iteration count is not a decimal number");
  }
  if (s[0] == '0') return Malformed(where, "iteration count must be positive, without leading zeros");
  if (s.size() > 10) return Error(absl::StatusCode::kOutOfRange, where, "iteration count too large");
  uint64_t v = 0;
  for (char c : s) v = v * 10 + static_cast<uint64_t>(c - '0');
  if (v > max) return Error(absl::StatusCode::kOutOfRange, where, "iteration count too large");
  return static_cast<uint32_t>(v);
}

absl::StatusOr<std::string> DecodeSalt(std::string_view where, std::string_view b64, const ScramLimits& limits) {
  if (b64.empty()) return Malformed(where, "empty salt");
  // Check the encoded size first so an oversized salt is never decoded.
  if (b64.size() / 4 * 3 > limits.max_salt_size + 2) return Error(absl::StatusCode::kOutOfRange, where, "salt too long");
  absl::StatusOr<std::string> salt = Base64Decode(b64);
  if (!salt.ok()) return Malformed(where, Cat({"invalid salt: ", Message(salt.status())}));
  if (salt->empty()) return Malformed(where, "empty salt");
  if (salt->size() > limits.max_salt_size) return Error(absl::StatusCode::kOutOfRange, where, "salt too long");
  return salt;
}

template <typename StringLike>
absl::StatusOr<ScramMechanismChoice> ChooseImpl(absl::Span<const StringLike> offered, bool have_cert_hash,
                                                ChannelBindingPolicy policy) {
  bool plain = false;
  bool plus = false;
  for (const auto& m : offered) {
    plain = plain || std::string_view(m) == kScramSha256;
    plus = plus || std::string_view(m) == kScramSha256Plus;
  }
  if (!plain && !plus) {
    return absl::InvalidArgumentError("SCRAM: server offers no SCRAM-SHA-256 mechanism");
  }
  const bool can_bind = have_cert_hash && policy != ChannelBindingPolicy::kDisable;
  if (plus && can_bind) return ScramMechanismChoice{kScramSha256Plus, ChannelBinding::kTlsServerEndPoint};
  if (policy == ChannelBindingPolicy::kRequire) {
    return absl::PermissionDeniedError(
        plus ? "SCRAM: channel binding required but no TLS server certificate hash is available"
             : "SCRAM: channel binding required but the server does not offer SCRAM-SHA-256-PLUS");
  }
  if (!plain) {
    // Only -PLUS offered and we cannot bind (no TLS, or binding disabled).
    return absl::PermissionDeniedError(
        "SCRAM: server offers only SCRAM-SHA-256-PLUS but channel binding is not possible");
  }
  // "y": we could bind but the server did not offer it. A -PLUS server that
  // receives "y" knows a MITM stripped -PLUS from its list (RFC 5802 6).
  return ScramMechanismChoice{kScramSha256, can_bind ? ChannelBinding::kClientSupported : ChannelBinding::kNone};
}

}  // namespace

absl::StatusOr<ScramMechanismChoice> ChooseScramMechanism(absl::Span<const std::string_view> offered,
                                                          bool have_cert_hash, ChannelBindingPolicy policy) {
  return ChooseImpl(offered, have_cert_hash, policy);
}

absl::StatusOr<ScramMechanismChoice> ChooseScramMechanism(absl::Span<const std::string> offered,
                                                          bool have_cert_hash, ChannelBindingPolicy policy) {
  return ChooseImpl(offered, have_cert_hash, policy);
}

// ---------------------------------------------------------------- verifiers

absl::StatusOr<ScramVerifier> MakeScramVerifier(std::string_view password, std::string_view salt,
                                                uint32_t iterations) {
  if (salt.empty()) return absl::InvalidArgumentError("SCRAM verifier: empty salt");
  if (iterations == 0) return absl::InvalidArgumentError("SCRAM verifier: iterations must be >= 1");
  Keys k = DeriveKeys(password, salt, iterations);
  return ScramVerifier{iterations, std::string(salt), std::move(k.stored_key), std::move(k.server_key)};
}

absl::StatusOr<ScramVerifier> MakeScramVerifier(std::string_view password) {
  absl::StatusOr<std::string> salt = RandomBytes(kDefaultScramSaltSize);
  if (!salt.ok()) return salt.status();
  return MakeScramVerifier(password, *salt, kDefaultScramIterations);
}

ScramVerifier MakeMockScramVerifier(std::string_view user, std::string_view mock_secret) {
  ScramVerifier v;
  v.iterations = kDefaultScramIterations;
  v.salt = internal::HmacSha256(mock_secret, Cat({"salt:", user})).substr(0, kDefaultScramSaltSize);
  v.stored_key = internal::HmacSha256(mock_secret, Cat({"stored:", user}));
  v.server_key = internal::HmacSha256(mock_secret, Cat({"server:", user}));
  return v;
}

absl::StatusOr<ScramVerifier> ParseScramVerifier(std::string_view stored, const ScramLimits& limits) {
  constexpr std::string_view kWhere = "stored verifier";
  constexpr std::string_view kPrefix = "SCRAM-SHA-256$";
  if (stored.size() > limits.max_message_size) return Error(absl::StatusCode::kOutOfRange, kWhere, "too long");
  if (stored.substr(0, kPrefix.size()) != kPrefix) return Malformed(kWhere, "missing SCRAM-SHA-256$ prefix");
  stored.remove_prefix(kPrefix.size());
  const size_t dollar = stored.find('$');
  if (dollar == std::string_view::npos) return Malformed(kWhere, "missing '$' before keys");
  const std::string_view iter_salt = stored.substr(0, dollar);
  const std::string_view keys = stored.substr(dollar + 1);
  const size_t colon1 = iter_salt.find(':');
  const size_t colon2 = keys.find(':');
  if (colon1 == std::string_view::npos || colon2 == std::string_view::npos) {
    return Malformed(kWhere, "expected <iterations>:<salt>$<StoredKey>:<ServerKey>");
  }
  absl::StatusOr<uint32_t> iterations = ParseIterations(kWhere, iter_salt.substr(0, colon1), limits.max_iterations);
  if (!iterations.ok()) return iterations.status();
  absl::StatusOr<std::string> salt = DecodeSalt(kWhere, iter_salt.substr(colon1 + 1), limits);
  if (!salt.ok()) return salt.status();
  absl::StatusOr<std::string> stored_key = Base64Decode(keys.substr(0, colon2));
  absl::StatusOr<std::string> server_key = Base64Decode(keys.substr(colon2 + 1));
  if (!stored_key.ok() || !server_key.ok() || stored_key->size() != kScramKeySize ||
      server_key->size() != kScramKeySize) {
    return Malformed(kWhere, "keys must be base64 of 32 bytes");
  }
  return ScramVerifier{*iterations, std::move(*salt), std::move(*stored_key), std::move(*server_key)};
}

std::string FormatScramVerifier(const ScramVerifier& v) {
  return Cat({"SCRAM-SHA-256$", std::to_string(v.iterations), ":", Base64Encode(v.salt), "$", Base64Encode(v.stored_key),
                      ":", Base64Encode(v.server_key)});
}

bool VerifyScramPassword(const ScramVerifier& verifier, std::string_view password) {
  if (verifier.iterations == 0 || verifier.salt.empty()) return false;
  const Keys k = DeriveKeys(password, verifier.salt, verifier.iterations);
  // Both keys, as PostgreSQL checks: a verifier edited by hand must match fully.
  const bool stored_ok = ConstantTimeEquals(k.stored_key, verifier.stored_key);
  const bool server_ok = ConstantTimeEquals(k.server_key, verifier.server_key);
  return stored_ok && server_ok;
}

// ------------------------------------------------------------------ client

absl::StatusOr<ScramClient> ScramClient::Create(Options options) {
  if (options.binding == ChannelBinding::kTlsServerEndPoint && options.cert_hash.empty()) {
    return absl::InvalidArgumentError("SCRAM client: SCRAM-SHA-256-PLUS needs the server certificate hash");
  }
  if (options.client_nonce.empty()) {
    absl::StatusOr<std::string> nonce = MakeNonce();
    if (!nonce.ok()) return nonce.status();
    options.client_nonce = std::move(*nonce);
  }
  if (!IsPrintableNonce(options.client_nonce) || options.client_nonce.size() >= options.limits.max_nonce_size) {
    return absl::InvalidArgumentError("SCRAM client: client nonce must be printable, without ',', and short");
  }
  if (options.username.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("SCRAM client: NUL in username");
  }
  ScramClient c(std::move(options));
  c.client_nonce_ = c.options_.client_nonce;
  c.client_first_bare_ = Cat({"n=", EscapeSaslName(c.options_.username), ",r=", c.client_nonce_});
  c.client_first_ = Cat({Gs2Header(c.options_.binding), c.client_first_bare_});
  return c;
}

std::string_view ScramClient::mechanism() const {
  return options_.binding == ChannelBinding::kTlsServerEndPoint ? kScramSha256Plus : kScramSha256;
}

absl::Status ScramClient::Fail(absl::Status status) {
  state_ = State::kFailed;
  expected_server_signature_.clear();
  return status;
}

absl::StatusOr<std::string> ScramClient::HandleServerFirst(std::string_view server_first) {
  constexpr std::string_view kWhere = "server-first";
  if (state_ != State::kAwaitingServerFirst) {
    return Fail(absl::FailedPreconditionError("SCRAM client: server-first not expected now"));
  }
  const ScramLimits& limits = options_.limits;
  if (absl::Status s = CheckMessage(kWhere, server_first, limits); !s.ok()) return Fail(s);
  const std::vector<std::string_view> f = SplitComma(server_first);
  if (f.size() < 3) {
    if (!f.empty() && AttrName(f[0]) == 'm') {
      return Fail(Error(absl::StatusCode::kUnimplemented, kWhere, "unsupported mandatory extension (m=)"));
    }
    return Fail(Malformed(kWhere, "expected r=,s=,i="));
  }
  absl::StatusOr<std::string_view> nonce = ExpectAttr(kWhere, f[0], 'r');
  if (!nonce.ok()) return Fail(nonce.status());
  if (nonce->size() > limits.max_nonce_size) return Fail(Error(absl::StatusCode::kOutOfRange, kWhere, "nonce too long"));
  if (!IsPrintableNonce(*nonce)) return Fail(Malformed(kWhere, "nonce has non-printable characters"));
  // The server must echo our nonce and append a non-empty part of its own.
  if (nonce->size() <= client_nonce_.size() || nonce->substr(0, client_nonce_.size()) != client_nonce_) {
    return Fail(Malformed(kWhere, "nonce does not extend the client nonce"));
  }
  absl::StatusOr<std::string_view> salt_b64 = ExpectAttr(kWhere, f[1], 's');
  if (!salt_b64.ok()) return Fail(salt_b64.status());
  absl::StatusOr<std::string> salt = DecodeSalt(kWhere, *salt_b64, limits);
  if (!salt.ok()) return Fail(salt.status());
  absl::StatusOr<std::string_view> iter_text = ExpectAttr(kWhere, f[2], 'i');
  if (!iter_text.ok()) return Fail(iter_text.status());
  absl::StatusOr<uint32_t> iterations = ParseIterations(kWhere, *iter_text, limits.max_iterations);
  if (!iterations.ok()) return Fail(iterations.status());
  if (absl::Status s = CheckExtensions(kWhere, absl::MakeConstSpan(f).subspan(3)); !s.ok()) return Fail(s);

  std::string cbind_input(Gs2Header(options_.binding));
  if (options_.binding == ChannelBinding::kTlsServerEndPoint) cbind_input += options_.cert_hash;
  const std::string without_proof = Cat({"c=", Base64Encode(cbind_input), ",r=", *nonce});
  const std::string auth_message = Cat({client_first_bare_, ",", server_first, ",", without_proof});

  const Keys k = DeriveKeys(options_.password, *salt, *iterations);
  const std::string client_signature = internal::HmacSha256(k.stored_key, auth_message);
  const std::string proof = XorBytes(k.client_key, client_signature);
  expected_server_signature_ = internal::HmacSha256(k.server_key, auth_message);
  state_ = State::kAwaitingServerFinal;
  return Cat({without_proof, ",p=", Base64Encode(proof)});
}

absl::Status ScramClient::HandleServerFinal(std::string_view server_final) {
  constexpr std::string_view kWhere = "server-final";
  if (state_ != State::kAwaitingServerFinal) {
    return Fail(absl::FailedPreconditionError("SCRAM client: server-final not expected now"));
  }
  if (absl::Status s = CheckMessage(kWhere, server_final, options_.limits); !s.ok()) return Fail(s);
  const std::vector<std::string_view> f = SplitComma(server_final);
  const std::optional<char> name = AttrName(f[0]);
  if (name == 'e') {
    return Fail(Error(absl::StatusCode::kUnauthenticated, kWhere, Cat({"server error: ", f[0].substr(2)})));
  }
  absl::StatusOr<std::string_view> v = ExpectAttr(kWhere, f[0], 'v');
  if (!v.ok()) return Fail(v.status());
  if (absl::Status s = CheckExtensions(kWhere, absl::MakeConstSpan(f).subspan(1)); !s.ok()) return Fail(s);
  absl::StatusOr<std::string> signature = Base64Decode(*v);
  if (!signature.ok()) return Fail(Malformed(kWhere, Cat({"invalid signature: ", Message(signature.status())})));
  if (signature->size() != kScramKeySize) return Fail(Malformed(kWhere, "signature is not 32 bytes"));
  if (!ConstantTimeEquals(*signature, expected_server_signature_)) {
    return Fail(Error(absl::StatusCode::kUnauthenticated, kWhere, "server signature mismatch"));
  }
  state_ = State::kDone;
  return absl::OkStatus();
}

// ------------------------------------------------------------------ server

absl::StatusOr<ScramServer> ScramServer::Create(Options options) {
  const ScramVerifier& v = options.verifier;
  if (v.iterations == 0 || v.iterations > options.limits.max_iterations || v.salt.empty() ||
      v.salt.size() > options.limits.max_salt_size || v.stored_key.size() != kScramKeySize ||
      v.server_key.size() != kScramKeySize) {
    return absl::InvalidArgumentError("SCRAM server: invalid verifier");
  }
  if (options.server_nonce.empty()) {
    absl::StatusOr<std::string> nonce = MakeNonce();
    if (!nonce.ok()) return nonce.status();
    options.server_nonce = std::move(*nonce);
  }
  if (!IsPrintableNonce(options.server_nonce) || options.server_nonce.size() > options.limits.max_nonce_size) {
    return absl::InvalidArgumentError("SCRAM server: server nonce must be printable, without ',', and short");
  }
  return ScramServer(std::move(options));
}

std::vector<std::string_view> ScramServer::AdvertisedMechanisms() const {
  if (options_.cert_hash.empty()) return {kScramSha256};
  return {kScramSha256Plus, kScramSha256};
}

absl::Status ScramServer::Fail(absl::Status status) {
  state_ = State::kFailed;
  return status;
}

absl::StatusOr<std::string> ScramServer::HandleClientFirst(std::string_view mechanism, std::string_view client_first) {
  constexpr std::string_view kWhere = "client-first";
  if (state_ != State::kAwaitingClientFirst) {
    return Fail(absl::FailedPreconditionError("SCRAM server: client-first not expected now"));
  }
  const bool plus_offered = !options_.cert_hash.empty();
  const bool plus_selected = mechanism == kScramSha256Plus;
  if (mechanism != kScramSha256 && !(plus_selected && plus_offered)) {
    return Fail(Malformed(kWhere, "client selected a mechanism we did not offer"));
  }
  if (absl::Status s = CheckMessage(kWhere, client_first, options_.limits); !s.ok()) return Fail(s);
  const std::vector<std::string_view> f = SplitComma(client_first);
  // gs2-cbind-flag "," [authzid] "," [reserved-mext ","] username "," nonce ["," extensions]
  if (f.size() < 4) return Fail(Malformed(kWhere, "expected gs2 header, n= and r="));
  const std::string_view flag = f[0];
  if (flag == "n") {
    client_binding_ = ChannelBinding::kNone;
  } else if (flag == "y") {
    client_binding_ = ChannelBinding::kClientSupported;
  } else if (flag.substr(0, 2) == "p=") {
    client_binding_ = ChannelBinding::kTlsServerEndPoint;
  } else {
    return Fail(Malformed(kWhere, "invalid gs2 channel-binding flag"));
  }
  switch (client_binding_) {
    case ChannelBinding::kNone:
      if (plus_selected) {
        return Fail(Error(absl::StatusCode::kPermissionDenied, kWhere,
                          "client selected SCRAM-SHA-256-PLUS without channel binding data"));
      }
      break;
    case ChannelBinding::kClientSupported:
      // The client could bind but believes we cannot: someone removed -PLUS
      // from our AuthenticationSASL list (downgrade attack).
      if (plus_offered) {
        return Fail(Error(absl::StatusCode::kPermissionDenied, kWhere,
                          "channel binding negotiation error: client supports binding but thinks we do not"));
      }
      if (plus_selected) return Fail(Malformed(kWhere, "\"y\" flag with SCRAM-SHA-256-PLUS"));
      break;
    case ChannelBinding::kTlsServerEndPoint:
      if (!plus_selected) {
        return Fail(Error(absl::StatusCode::kPermissionDenied, kWhere,
                          "client selected SCRAM-SHA-256 but requests channel binding"));
      }
      if (flag.substr(2) != kCbindName) {
        return Fail(Error(absl::StatusCode::kUnimplemented, kWhere, "unsupported channel-binding type"));
      }
      break;
  }
  if (!f[1].empty()) {
    if (AttrName(f[1]) != 'a') return Fail(Malformed(kWhere, "malformed authzid"));
    return Fail(Error(absl::StatusCode::kUnimplemented, kWhere, "authorization identity is not supported"));
  }
  if (AttrName(f[2]) == 'm') {
    return Fail(Error(absl::StatusCode::kUnimplemented, kWhere, "unsupported mandatory extension (m=)"));
  }
  absl::StatusOr<std::string_view> user = ExpectAttr(kWhere, f[2], 'n');
  if (!user.ok()) return Fail(user.status());
  absl::StatusOr<std::string> username = UnescapeSaslName(kWhere, *user);
  if (!username.ok()) return Fail(username.status());
  absl::StatusOr<std::string_view> nonce = ExpectAttr(kWhere, f[3], 'r');
  if (!nonce.ok()) return Fail(nonce.status());
  if (nonce->empty()) return Fail(Malformed(kWhere, "empty nonce"));
  if (nonce->size() > options_.limits.max_nonce_size) {
    return Fail(Error(absl::StatusCode::kOutOfRange, kWhere, "nonce too long"));
  }
  if (!IsPrintableNonce(*nonce)) return Fail(Malformed(kWhere, "nonce has non-printable characters"));
  if (absl::Status s = CheckExtensions(kWhere, absl::MakeConstSpan(f).subspan(4)); !s.ok()) return Fail(s);

  username_ = std::move(*username);
  // gs2 header = everything before the bare message: "<flag>,<authzid>,".
  gs2_header_ = Cat({f[0], ",", f[1], ","});
  client_first_bare_ = std::string(client_first.substr(gs2_header_.size()));
  nonce_ = Cat({*nonce, options_.server_nonce});
  const ScramVerifier& v = options_.verifier;
  server_first_ = Cat({"r=", nonce_, ",s=", Base64Encode(v.salt), ",i=", std::to_string(v.iterations)});
  state_ = State::kAwaitingClientFinal;
  return server_first_;
}

absl::StatusOr<std::string> ScramServer::HandleClientFinal(std::string_view client_final) {
  constexpr std::string_view kWhere = "client-final";
  if (state_ != State::kAwaitingClientFinal) {
    return Fail(absl::FailedPreconditionError("SCRAM server: client-final not expected now"));
  }
  if (absl::Status s = CheckMessage(kWhere, client_final, options_.limits); !s.ok()) return Fail(s);
  // channel-binding "," nonce ["," extensions] "," proof
  const std::vector<std::string_view> f = SplitComma(client_final);
  if (f.size() < 3) return Fail(Malformed(kWhere, "expected c=,r=,p="));
  absl::StatusOr<std::string_view> cbind_b64 = ExpectAttr(kWhere, f[0], 'c');
  if (!cbind_b64.ok()) return Fail(cbind_b64.status());
  absl::StatusOr<std::string> cbind = Base64Decode(*cbind_b64);
  if (!cbind.ok()) return Fail(Malformed(kWhere, Cat({"invalid channel binding: ", Message(cbind.status())})));
  std::string expected_cbind = gs2_header_;
  if (client_binding_ == ChannelBinding::kTlsServerEndPoint) expected_cbind += options_.cert_hash;
  if (!ConstantTimeEquals(*cbind, expected_cbind)) {
    return Fail(Error(absl::StatusCode::kPermissionDenied, kWhere, "channel binding check failed"));
  }
  absl::StatusOr<std::string_view> nonce = ExpectAttr(kWhere, f[1], 'r');
  if (!nonce.ok()) return Fail(nonce.status());
  if (*nonce != nonce_) return Fail(Malformed(kWhere, "nonce mismatch"));
  if (absl::Status s = CheckExtensions(kWhere, absl::MakeConstSpan(f).subspan(2, f.size() - 3)); !s.ok()) {
    return Fail(s);
  }
  absl::StatusOr<std::string_view> proof_b64 = ExpectAttr(kWhere, f.back(), 'p');
  if (!proof_b64.ok()) return Fail(proof_b64.status());
  absl::StatusOr<std::string> proof = Base64Decode(*proof_b64);
  if (!proof.ok()) return Fail(Malformed(kWhere, Cat({"invalid proof: ", Message(proof.status())})));
  if (proof->size() != kScramKeySize) return Fail(Malformed(kWhere, "proof is not 32 bytes"));

  const std::string_view without_proof = client_final.substr(0, client_final.size() - f.back().size() - 1);
  const std::string auth_message = Cat({client_first_bare_, ",", server_first_, ",", without_proof});
  const ScramVerifier& v = options_.verifier;
  // ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage); accept iff
  // H(ClientKey) == StoredKey.
  const std::string client_key = XorBytes(*proof, internal::HmacSha256(v.stored_key, auth_message));
  const bool match = ConstantTimeEquals(internal::Sha256(client_key), v.stored_key);
  if (!match || options_.always_fail) {
    return Fail(Error(absl::StatusCode::kUnauthenticated, kWhere, "invalid client proof (wrong password)"));
  }
  state_ = State::kDone;
  return Cat({"v=", Base64Encode(internal::HmacSha256(v.server_key, auth_message))});
}

}  // namespace hyperpool::auth
