// The pre-SCRAM password mechanisms of the PostgreSQL v3 protocol
// (protocol-flow.html "Start-up": AuthenticationCleartextPassword and
// AuthenticationMD5Password, answered with a PasswordMessage), for both roles.
// These functions produce/verify the PasswordMessage *payload* without its
// terminating NUL; the wire codec adds framing.
#ifndef HYPERPOOL_PROTOCOL_AUTH_PASSWORD_H_
#define HYPERPOOL_PROTOCOL_AUTH_PASSWORD_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hyperpool::auth {

// Size of the salt in AuthenticationMD5Password.
inline constexpr size_t kMd5SaltSize = 4;

// The value PostgreSQL stores in pg_authid.rolpassword for MD5:
// "md5" + hex(md5(password + user)). 35 characters.
std::string Md5StoredHash(std::string_view user, std::string_view password);

// Client role: the PasswordMessage payload answering AuthenticationMD5Password,
// "md5" + hex(md5(hex(md5(password + user)) + salt)). `salt` must be exactly
// kMd5SaltSize bytes (InvalidArgument otherwise: it comes from the server).
absl::StatusOr<std::string> Md5PasswordResponse(std::string_view user, std::string_view password,
                                                std::string_view salt);

// Same, from an already stored hash ("md5" + 32 lowercase hex digits), so a
// pooler that keeps only the stored hash can still answer an origin.
absl::StatusOr<std::string> Md5PasswordResponseFromStoredHash(std::string_view stored_hash,
                                                              std::string_view salt);

// Server role: checks the client's MD5 `response` against `stored_hash`
// ("md5<32 hex>", as from Md5StoredHash) and the `salt` we sent.
// OK on match; Unauthenticated on mismatch (including a malformed response);
// InvalidArgument if `stored_hash` or `salt` is malformed (our config error).
// The comparison is constant-time.
absl::Status VerifyMd5Response(std::string_view stored_hash, std::string_view salt,
                               std::string_view response);

// Server role: checks a cleartext PasswordMessage payload against the
// expected password. Both are hashed (SHA-256) before a constant-time
// comparison so neither content nor length leaks through timing.
// OK on match, Unauthenticated otherwise.
absl::Status VerifyCleartextPassword(std::string_view expected, std::string_view received);

}  // namespace hyperpool::auth

#endif  // HYPERPOOL_PROTOCOL_AUTH_PASSWORD_H_
