// Small security primitives shared by the authentication mechanisms:
// constant-time comparison, CSPRNG output, nonces and strict base64.
// Pure functions, no I/O; the crypto library stays out of this header.
#ifndef HYPERPOOL_PROTOCOL_AUTH_AUTH_UTIL_H_
#define HYPERPOOL_PROTOCOL_AUTH_AUTH_UTIL_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace hyperpool::auth {

// True iff `a` and `b` hold the same bytes. The running time depends only on
// the lengths (the length is not secret for proofs, signatures and hashes,
// which have a fixed size), never on where the first difference is.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// `n` bytes from the crypto library's CSPRNG (RAND_bytes). Fails only if the
// CSPRNG does (OpenSSL can report an unseeded generator); callers must then
// abort the authentication rather than fall back to anything weaker.
absl::StatusOr<std::string> RandomBytes(size_t n);

// A SCRAM nonce: base64 of `random_bytes` CSPRNG bytes, as PostgreSQL does
// (18 bytes -> 24 characters). Every character is printable ASCII and none is
// ',' (RFC 5802 "printable"), so it can go in r= unescaped.
absl::StatusOr<std::string> MakeNonce(size_t random_bytes = 18);

// Standard base64 (RFC 4648 section 4) with '=' padding.
std::string Base64Encode(std::string_view bytes);

// Strict base64 decoding: the length must be a multiple of 4, only the
// standard alphabet, '=' only as the final one or two characters, and unused
// trailing bits must be zero (one canonical encoding per value). No
// whitespace. Anything else is InvalidArgument: SCRAM attributes come from a
// peer, and a lenient decoder would accept several spellings of one proof.
absl::StatusOr<std::string> Base64Decode(std::string_view text);

}  // namespace hyperpool::auth

#endif  // HYPERPOOL_PROTOCOL_AUTH_AUTH_UTIL_H_
