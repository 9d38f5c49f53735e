#include "protocol/auth/auth_util.h"

#if defined(HYPERPOOL_TLS_BORINGSSL)
#include <openssl/is_boringssl.h>
#include <openssl/mem.h>
#endif
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "absl/status/status.h"

namespace hyperpool::auth {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Decoding table: 0..63 for alphabet characters, -1 otherwise.
constexpr std::array<int8_t, 256> MakeDecodeTable() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  return t;
}
constexpr std::array<int8_t, 256> kDecode = MakeDecodeTable();

}  // namespace

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

absl::StatusOr<std::string> RandomBytes(size_t n) {
  std::string out(n, '\0');
  // OpenSSL's RAND_bytes takes an int; fill in chunks so any n works.
  size_t done = 0;
  while (done < n) {
    const size_t chunk = std::min<size_t>(n - done, 1 << 20);
    if (RAND_bytes(reinterpret_cast<uint8_t*>(out.data() + done), static_cast<int>(chunk)) != 1) {
      return absl::InternalError("CSPRNG (RAND_bytes) failed");
    }
    done += chunk;
  }
  return out;
}

absl::StatusOr<std::string> MakeNonce(size_t random_bytes) {
  absl::StatusOr<std::string> raw = RandomBytes(random_bytes);
  if (!raw.ok()) return raw.status();
  // Base64 output is printable and never contains ',' (RFC 5802 nonce rule).
  return Base64Encode(*raw);
}

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8) | p[i + 2];
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(kAlphabet[(v >> 6) & 63]);
    out.push_back(kAlphabet[v & 63]);
  }
  const size_t rest = bytes.size() - i;
  if (rest == 1) {
    const uint32_t v = uint32_t{p[i]} << 16;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.append("==");
  } else if (rest == 2) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(kAlphabet[(v >> 6) & 63]);
    out.push_back('=');
  }
  return out;
}

absl::StatusOr<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) {
    return absl::InvalidArgumentError("base64: length is not a multiple of 4");
  }
  size_t padding = 0;
  if (!text.empty() && text.back() == '=') padding = (text[text.size() - 2] == '=') ? 2 : 1;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const size_t pad_here = last ? padding : 0;
    uint32_t v = 0;
    for (size_t j = 0; j < 4; ++j) {
      const unsigned char c = static_cast<unsigned char>(text[i + j]);
      int8_t d;
      if (j >= 4 - pad_here) {
        d = 0;  // a padding position; the character is '=' by construction
      } else {
        d = kDecode[c];
        if (d < 0) {
          return absl::InvalidArgumentError(c == '=' ? "base64: misplaced padding"
                                                     : "base64: invalid character");
        }
      }
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    // Non-zero bits under the padding mean a non-canonical encoding.
    if ((pad_here == 1 && (v & 0xff) != 0) || (pad_here == 2 && (v & 0xffff) != 0)) {
      return absl::InvalidArgumentError("base64: non-zero trailing bits");
    }
    out.push_back(static_cast<char>(v >> 16));
    if (pad_here < 2) out.push_back(static_cast<char>((v >> 8) & 0xff));
    if (pad_here < 1) out.push_back(static_cast<char>(v & 0xff));
  }
  return out;
}

}  // namespace hyperpool::auth
