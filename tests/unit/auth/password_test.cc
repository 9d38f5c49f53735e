#include "protocol/auth/password.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <string>

namespace hyperpool::auth {
namespace {

// Expected values computed independently with Python's hashlib:
//   h = md5(b"postgres" + b"postgres").hexdigest()
//   "md5" + md5(h.encode() + bytes([1, 2, 3, 4])).hexdigest()
constexpr std::string_view kSalt("\x01\x02\x03\x04", 4);
constexpr std::string_view kStored = "md53175bce1d3201d16594cebf9d7eb3f9d";
constexpr std::string_view kResponse = "md568be9ed08db75f318087ab337aaea044";

TEST_CASE("Md5StoredHash matches PostgreSQL's pg_authid value") {
  CHECK(Md5StoredHash("postgres", "postgres") == kStored);
}

TEST_CASE("Md5PasswordResponse matches an independently computed value") {
  auto r = Md5PasswordResponse("postgres", "postgres", kSalt);
  REQUIRE(r.ok());
  CHECK(*r == kResponse);
  auto from_stored = Md5PasswordResponseFromStoredHash(kStored, kSalt);
  REQUIRE(from_stored.ok());
  CHECK(*from_stored == kResponse);
}

TEST_CASE("Md5PasswordResponse rejects a salt that is not 4 bytes") {
  auto salt = GENERATE(as<std::string>{}, "", "abc", "abcde");
  CHECK(Md5PasswordResponse("u", "p", salt).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("VerifyMd5Response accepts the right response and rejects others") {
  CHECK(VerifyMd5Response(kStored, kSalt, kResponse).ok());
  auto wrong = GENERATE(as<std::string>{}, "", "md5", "md568be9ed08db75f318087ab337aaea045",
                        "md568BE9ED08DB75F318087AB337AAEA044", "md568be9ed08db75f318087ab337aaea044x");
  CHECK(VerifyMd5Response(kStored, kSalt, wrong).code() == absl::StatusCode::kUnauthenticated);
}

TEST_CASE("VerifyMd5Response reports a malformed stored hash as a config error") {
  auto stored = GENERATE(as<std::string>{}, "", "md5", "3175bce1d3201d16594cebf9d7eb3f9d",
                         "md53175BCE1d3201d16594cebf9d7eb3f9d", "md53175bce1d3201d16594cebf9d7eb3f9dz");
  CHECK(VerifyMd5Response(stored, kSalt, kResponse).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("VerifyCleartextPassword") {
  CHECK(VerifyCleartextPassword("secret", "secret").ok());
  CHECK(VerifyCleartextPassword("secret", "secreT").code() == absl::StatusCode::kUnauthenticated);
  CHECK(VerifyCleartextPassword("secret", "secret2").code() == absl::StatusCode::kUnauthenticated);
  CHECK(VerifyCleartextPassword("secret", "").code() == absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace hyperpool::auth
