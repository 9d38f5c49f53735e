#include "protocol/auth/password.h"

#include "protocol/auth/auth_util.h"
#include "protocol/auth/digest.h"

namespace hyperpool::auth {
namespace {

constexpr size_t kMd5HashSize = 35;  // "md5" + 32 hex digits

bool IsMd5Hash(std::string_view s) {
  if (s.size() != kMd5HashSize || s.substr(0, 3) != "md5") return false;
  for (char c : s.substr(3)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string SaltedResponse(std::string_view hex_hash, std::string_view salt) {
  std::string input(hex_hash);
  input.append(salt);
  return "md5" + internal::Md5Hex(input);
}

}  // namespace

std::string Md5StoredHash(std::string_view user, std::string_view password) {
  std::string input(password);
  input.append(user);
  return "md5" + internal::Md5Hex(input);
}

absl::StatusOr<std::string> Md5PasswordResponse(std::string_view user, std::string_view password,
                                                std::string_view salt) {
  if (salt.size() != kMd5SaltSize) return absl::InvalidArgumentError("MD5 salt must be 4 bytes");
  return SaltedResponse(std::string_view(Md5StoredHash(user, password)).substr(3), salt);
}

absl::StatusOr<std::string> Md5PasswordResponseFromStoredHash(std::string_view stored_hash,
                                                              std::string_view salt) {
  if (salt.size() != kMd5SaltSize) return absl::InvalidArgumentError("MD5 salt must be 4 bytes");
  if (!IsMd5Hash(stored_hash)) {
    return absl::InvalidArgumentError("stored MD5 hash must be \"md5\" + 32 lowercase hex digits");
  }
  return SaltedResponse(stored_hash.substr(3), salt);
}

absl::Status VerifyMd5Response(std::string_view stored_hash, std::string_view salt,
                               std::string_view response) {
  absl::StatusOr<std::string> expected = Md5PasswordResponseFromStoredHash(stored_hash, salt);
  if (!expected.ok()) return expected.status();
  // Length is public (always 35 for a well-formed response); content is not.
  if (!ConstantTimeEquals(*expected, response)) {
    return absl::UnauthenticatedError("password authentication failed (MD5)");
  }
  return absl::OkStatus();
}

absl::Status VerifyCleartextPassword(std::string_view expected, std::string_view received) {
  // Hashing first makes the comparison fixed-size, so not even the password
  // length leaks.
  if (!ConstantTimeEquals(internal::Sha256(expected), internal::Sha256(received))) {
    return absl::UnauthenticatedError("password authentication failed");
  }
  return absl::OkStatus();
}

}  // namespace hyperpool::auth
