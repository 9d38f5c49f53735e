#include "protocol/auth/digest.h"

#if defined(HYPERPOOL_TLS_BORINGSSL)
#include <openssl/is_boringssl.h>  // fails to compile if OpenSSL's headers won
#endif
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <cstdlib>

namespace hyperpool::auth::internal {
namespace {

const uint8_t* Bytes(std::string_view s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// The hash functions fail only on allocation failure or a broken library;
// there is no sensible way to continue authenticating after that.
[[noreturn]] void CryptoFailure() { std::abort(); }

}  // namespace

std::string Sha256(std::string_view data) {
  std::string out(SHA256_DIGEST_LENGTH, '\0');
  SHA256(Bytes(data), data.size(), reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  std::string out(EVP_MAX_MD_SIZE, '\0');
  unsigned int out_len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), Bytes(data), data.size(),
           reinterpret_cast<uint8_t*>(out.data()), &out_len) == nullptr) {
    CryptoFailure();
  }
  out.resize(out_len);
  return out;
}

std::string Pbkdf2Sha256(std::string_view password, std::string_view salt, uint32_t iterations) {
  std::string out(SHA256_DIGEST_LENGTH, '\0');
  // OpenSSL takes int lengths; every caller bounds them far below INT_MAX.
  if (PKCS5_PBKDF2_HMAC(password.data(), static_cast<int>(password.size()), Bytes(salt),
                        static_cast<int>(salt.size()), static_cast<int>(iterations), EVP_sha256(),
                        static_cast<int>(out.size()), reinterpret_cast<uint8_t*>(out.data())) != 1) {
    CryptoFailure();
  }
  return out;
}

std::string Md5Hex(std::string_view data) {
  uint8_t md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &md_len, EVP_md5(), nullptr) != 1) CryptoFailure();
  return HexEncode(std::string_view(reinterpret_cast<const char*>(md), md_len));
}

std::string HexEncode(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xf]);
  }
  return out;
}

}  // namespace hyperpool::auth::internal
