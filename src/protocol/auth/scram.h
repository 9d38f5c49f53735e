// SCRAM-SHA-256 and SCRAM-SHA-256-PLUS (RFC 5802, RFC 7677) as PostgreSQL
// uses them (protocol "SASL Authentication", sasl-authentication.html), both
// roles, sans-I/O: every method takes the SASL payload bytes a peer sent
// (the data of SASLInitialResponse / SASLResponse / AuthenticationSASLContinue
// / AuthenticationSASLFinal) and returns the payload to send; the caller
// wraps them in protocol messages.
//
// Every byte from the peer is untrusted: each attribute and the whole message
// are bounded (ScramLimits), and each malformed message yields a distinct
// absl error, never a crash. Error codes:
//   InvalidArgument    malformed message / attribute, bad base64, nonce
//                      mismatch, unknown mechanism
//   OutOfRange         a size or iteration limit was exceeded
//   Unimplemented      an unknown mandatory extension (m=) or an
//                      unsupported channel-binding type
//   PermissionDenied   channel-binding negotiation or check failure
//                      (possible downgrade / MITM)
//   Unauthenticated    wrong password (bad ClientProof), bad server
//                      signature, or a server-final "e=" error
//   FailedPrecondition method called in the wrong state
// After any error the object is in State::kFailed and must be discarded.
#ifndef HYPERPOOL_PROTOCOL_AUTH_SCRAM_H_
#define HYPERPOOL_PROTOCOL_AUTH_SCRAM_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace hyperpool::auth {

inline constexpr std::string_view kScramSha256 = "SCRAM-SHA-256";
inline constexpr std::string_view kScramSha256Plus = "SCRAM-SHA-256-PLUS";

// PostgreSQL's default scram_iterations, used when we generate verifiers.
inline constexpr uint32_t kDefaultScramIterations = 4096;
// Salt length PostgreSQL generates (SCRAM_DEFAULT_SALT_LEN).
inline constexpr size_t kDefaultScramSaltSize = 16;
// SHA-256 output: size of ClientKey, StoredKey, ServerKey, proofs.
inline constexpr size_t kScramKeySize = 32;

// Bounds on what a peer may send. The defaults are generous for real peers
// and keep a hostile one from making us allocate much or spin in PBKDF2.
struct ScramLimits {
  // Whole SASL payload, either direction.
  size_t max_message_size = 4096;
  // Full nonce (client + server part), in characters.
  size_t max_nonce_size = 512;
  // Decoded salt, in bytes.
  size_t max_salt_size = 256;
  // Iteration count accepted from a server (or in a verifier). The minimum
  // is always 1. 10^6 PBKDF2-SHA-256 rounds are about 0.3 s of CPU.
  uint32_t max_iterations = 1'000'000;
};

// The gs2 channel-binding flag of client-first (RFC 5802 section 7).
enum class ChannelBinding {
  kNone,              // "n,,": the client does not support channel binding
  kClientSupported,   // "y,,": the client could bind but the server did not offer -PLUS
  kTlsServerEndPoint  // "p=tls-server-end-point,,": SCRAM-SHA-256-PLUS (RFC 5929)
};

// How much the client insists on channel binding (libpq's channel_binding=).
enum class ChannelBindingPolicy {
  kDisable,  // never bind, send "n"
  kPrefer,   // bind when both sides can
  kRequire   // fail unless SCRAM-SHA-256-PLUS is used
};

// The mechanism to name in SASLInitialResponse and the gs2 flag to use.
struct ScramMechanismChoice {
  std::string_view mechanism;  // kScramSha256 or kScramSha256Plus
  ChannelBinding binding;
};

// Client role: picks a mechanism from the AuthenticationSASL list `offered`.
// `have_cert_hash` says whether the connection is TLS and we hold the
// tls-server-end-point hash of the server certificate. Prefers -PLUS when
// offered and available; sends "y" when we could bind but the server did not
// offer -PLUS (so a MITM that strips -PLUS is detected by a -PLUS server).
// Errors: InvalidArgument if no SCRAM-SHA-256 variant is offered;
// PermissionDenied if `policy` is kRequire and binding is impossible.
absl::StatusOr<ScramMechanismChoice> ChooseScramMechanism(
    absl::Span<const std::string_view> offered, bool have_cert_hash,
    ChannelBindingPolicy policy = ChannelBindingPolicy::kPrefer);
absl::StatusOr<ScramMechanismChoice> ChooseScramMechanism(
    absl::Span<const std::string> offered, bool have_cert_hash,
    ChannelBindingPolicy policy = ChannelBindingPolicy::kPrefer);

// What a server stores instead of the password (RFC 5802 section 3).
struct ScramVerifier {
  uint32_t iterations = 0;
  std::string salt;        // raw bytes
  std::string stored_key;  // raw, kScramKeySize bytes: H(ClientKey)
  std::string server_key;  // raw, kScramKeySize bytes: HMAC(SaltedPassword, "Server Key")
};

// Computes a verifier: SaltedPassword = PBKDF2-HMAC-SHA-256(SaslPrep(password),
// salt, iterations). InvalidArgument for an empty salt or iterations == 0.
absl::StatusOr<ScramVerifier> MakeScramVerifier(std::string_view password, std::string_view salt,
                                                uint32_t iterations);

// Same with a fresh CSPRNG salt of kDefaultScramSaltSize bytes and
// kDefaultScramIterations iterations, like PostgreSQL's CREATE ROLE.
absl::StatusOr<ScramVerifier> MakeScramVerifier(std::string_view password);

// A deterministic verifier for a user that does not exist, so that an
// unknown user gets the same salt on every attempt and cannot be told apart
// from a known one (PostgreSQL's scram_mock_salt). `mock_secret` is a
// per-instance random secret. Use with ScramServer::Options::always_fail.
ScramVerifier MakeMockScramVerifier(std::string_view user, std::string_view mock_secret);

// Parses PostgreSQL's stored form
// "SCRAM-SHA-256$<iterations>:<salt b64>$<StoredKey b64>:<ServerKey b64>".
// InvalidArgument if malformed; OutOfRange if the iterations exceed `limits`.
absl::StatusOr<ScramVerifier> ParseScramVerifier(std::string_view stored,
                                                 const ScramLimits& limits = {});

// Formats a verifier in PostgreSQL's stored form (inverse of ParseScramVerifier).
std::string FormatScramVerifier(const ScramVerifier& verifier);

// True iff `password` matches `verifier` (PostgreSQL's scram_verify_plain_password):
// lets a server that stores SCRAM verifiers accept a cleartext PasswordMessage.
// Constant-time comparison.
bool VerifyScramPassword(const ScramVerifier& verifier, std::string_view password);

// Client role (hyperpool's Endpoint logging in to an origin).
//
//   auto c = ScramClient::Create({.password = pw, .binding = choice.binding, ...});
//   send SASLInitialResponse(c->mechanism(), c->ClientFirstMessage());
//   auto client_final = c->HandleServerFirst(sasl_continue_data);   send it
//   auto st = c->HandleServerFinal(sasl_final_data);                OK = server proved itself
class ScramClient {
 public:
  enum class State {
    kAwaitingServerFirst,  // client-first is ready; waiting for AuthenticationSASLContinue
    kAwaitingServerFinal,  // client-final sent; waiting for AuthenticationSASLFinal
    kDone,                 // server signature verified
    kFailed                // an error was returned; discard
  };

  struct Options {
    // The password as configured; SaslPrep is applied internally.
    std::string password;
    // Sent in n=. PostgreSQL ignores it (it uses the startup packet's user)
    // and libpq sends "", so leave it empty except for RFC test vectors.
    // Escaped per RFC 5802 ('=' -> "=3D", ',' -> "=2C").
    std::string username;
    // From ChooseScramMechanism.
    ChannelBinding binding = ChannelBinding::kNone;
    // tls-server-end-point data (RFC 5929: hash of the server certificate).
    // Required (non-empty) iff binding == kTlsServerEndPoint.
    std::string cert_hash;
    // Empty: a fresh MakeNonce(). Tests set a fixed one. Must be printable
    // ASCII without ',' (InvalidArgument otherwise).
    std::string client_nonce;
    ScramLimits limits;
  };

  // Validates `options` and builds client-first. InvalidArgument for bad
  // options; whatever RandomBytes returns if the CSPRNG fails.
  static absl::StatusOr<ScramClient> Create(Options options);

  // The mechanism name to send in SASLInitialResponse (matches the binding).
  std::string_view mechanism() const;

  // client-first-message: gs2 header + "n=<user>,r=<client nonce>".
  const std::string& ClientFirstMessage() const { return client_first_; }

  // Consumes server-first ("r=<nonce>,s=<salt>,i=<iterations>[,ext...]"),
  // runs PBKDF2 and returns client-final ("c=<cbind>,r=<nonce>,p=<proof>").
  absl::StatusOr<std::string> HandleServerFirst(std::string_view server_first);

  // Consumes server-final ("v=<ServerSignature>" or "e=<error>") and checks
  // the signature in constant time. OK means the server knows our verifier;
  // the caller must still wait for AuthenticationOk.
  absl::Status HandleServerFinal(std::string_view server_final);

  State state() const { return state_; }

 private:
  explicit ScramClient(Options options) : options_(std::move(options)) {}
  absl::Status Fail(absl::Status status);

  Options options_;
  State state_ = State::kAwaitingServerFirst;
  std::string client_nonce_;
  std::string client_first_bare_;
  std::string client_first_;
  std::string expected_server_signature_;  // raw bytes, set by HandleServerFirst
};

// Server role (hyperpool's Client half verifying an application).
//
//   auto s = ScramServer::Create({.verifier = v, .cert_hash = hash_if_tls});
//   send AuthenticationSASL(s->AdvertisedMechanisms())
//   auto server_first = s->HandleClientFirst(mech, initial_response_data);  -> SASLContinue
//   auto server_final = s->HandleClientFinal(sasl_response_data);           -> SASLFinal, then AuthenticationOk
// On Unauthenticated send ErrorResponse 28P01 (PostgreSQL never sends "e=").
class ScramServer {
 public:
  enum class State {
    kAwaitingClientFirst,  // AuthenticationSASL sent
    kAwaitingClientFinal,  // server-first sent
    kDone,                 // client proof verified; send server-final then AuthenticationOk
    kFailed                // an error was returned; discard
  };

  struct Options {
    ScramVerifier verifier;
    // tls-server-end-point data of *our* certificate. Non-empty means the
    // connection is TLS and SCRAM-SHA-256-PLUS is advertised and supported.
    std::string cert_hash;
    // Empty: a fresh MakeNonce(). Tests set a fixed one. Printable, no ','.
    std::string server_nonce;
    // Run the whole exchange but fail the proof: for unknown users, with a
    // MakeMockScramVerifier verifier, so they look like a wrong password.
    bool always_fail = false;
    ScramLimits limits;
  };

  // Validates the verifier (keys of kScramKeySize bytes, iterations and salt
  // non-empty) and the nonce; InvalidArgument otherwise.
  static absl::StatusOr<ScramServer> Create(Options options);

  // Mechanisms for AuthenticationSASL, in preference order: -PLUS first when
  // we have a certificate hash (as PostgreSQL does).
  std::vector<std::string_view> AdvertisedMechanisms() const;

  // Consumes the SASLInitialResponse: the mechanism the client selected and
  // its client-first. Checks the gs2 flag against the mechanism and what we
  // advertised ("y" while we advertised -PLUS is a downgrade:
  // PermissionDenied). Returns server-first.
  absl::StatusOr<std::string> HandleClientFirst(std::string_view mechanism,
                                                std::string_view client_first);

  // Consumes client-final, checks channel binding, nonce and ClientProof (in
  // constant time) and returns server-final ("v=<ServerSignature>").
  // Unauthenticated on a wrong password.
  absl::StatusOr<std::string> HandleClientFinal(std::string_view client_final);

  // The (unescaped) n= of client-first. Informational only: PostgreSQL
  // authenticates the startup packet's user, and libpq sends "".
  const std::string& username() const { return username_; }

  State state() const { return state_; }

 private:
  explicit ScramServer(Options options) : options_(std::move(options)) {}
  absl::Status Fail(absl::Status status);

  Options options_;
  State state_ = State::kAwaitingClientFirst;
  ChannelBinding client_binding_ = ChannelBinding::kNone;
  std::string username_;
  std::string gs2_header_;
  std::string client_first_bare_;
  std::string server_first_;
  std::string nonce_;  // client nonce + server nonce
};

}  // namespace hyperpool::auth

#endif  // HYPERPOOL_PROTOCOL_AUTH_SCRAM_H_
