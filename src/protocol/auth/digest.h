// Internal: the few hash primitives the mechanisms need, wrapped so that no
// header outside digest.cc sees the crypto library (BoringSSL or OpenSSL 3:
// only APIs both provide are used).
#ifndef HYPERPOOL_PROTOCOL_AUTH_DIGEST_H_
#define HYPERPOOL_PROTOCOL_AUTH_DIGEST_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace hyperpool::auth::internal {

// SHA-256 of `data`: 32 raw bytes.
std::string Sha256(std::string_view data);

// HMAC-SHA-256(key, data): 32 raw bytes.
std::string HmacSha256(std::string_view key, std::string_view data);

// PBKDF2-HMAC-SHA-256 with a 32-byte output: SCRAM's Hi(). Callers bound
// `iterations` (>= 1) and the input sizes before calling.
std::string Pbkdf2Sha256(std::string_view password, std::string_view salt, uint32_t iterations);

// MD5 of `data` as 32 lowercase hex digits.
std::string Md5Hex(std::string_view data);

// Lowercase hex of raw bytes.
std::string HexEncode(std::string_view bytes);

}  // namespace hyperpool::auth::internal

#endif  // HYPERPOOL_PROTOCOL_AUTH_DIGEST_H_
