#include "protocol/auth/auth_util.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <set>
#include <string>

namespace hyperpool::auth {
namespace {

TEST_CASE("ConstantTimeEquals compares bytes and lengths") {
  CHECK(ConstantTimeEquals("", ""));
  CHECK(ConstantTimeEquals("abc", "abc"));
  CHECK_FALSE(ConstantTimeEquals("abc", "abd"));
  CHECK_FALSE(ConstantTimeEquals("abc", "ab"));
  CHECK(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0b", 3)));
  CHECK_FALSE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST_CASE("RandomBytes returns the requested size and differs between calls") {
  auto a = RandomBytes(32);
  auto b = RandomBytes(32);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->size() == 32);
  CHECK(*a != *b);
  CHECK(RandomBytes(0)->empty());
}

TEST_CASE("MakeNonce is printable without commas and unique") {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    auto n = MakeNonce();
    REQUIRE(n.ok());
    CHECK(n->size() == 24);
    for (char c : *n) {
      CHECK(c >= 0x21);
      CHECK(c <= 0x7E);
      CHECK(c != ',');
    }
    seen.insert(*n);
  }
  CHECK(seen.size() == 100);
}

TEST_CASE("Base64 RFC 4648 vectors round-trip") {
  auto [plain, encoded] = GENERATE(table<std::string, std::string>({
      {"", ""},
      {"f", "Zg=="},
      {"fo", "Zm8="},
      {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="},
      {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"},
      {std::string("\xff\xfe\x00", 3), "//4A"},
  }));
  CHECK(Base64Encode(plain) == encoded);
  auto decoded = Base64Decode(encoded);
  REQUIRE(decoded.ok());
  CHECK(*decoded == plain);
}

TEST_CASE("Base64Decode rejects non-canonical or invalid input") {
  auto bad = GENERATE(as<std::string>{}, "Zg", "Zg=", "Zh==", "Zm9=", "Z===", "====", "Zm9v\n", "Zm 9", "Zm-9",
                      "Zm_9", "Zg==Zg==", "=Zm9", "Zm=v", std::string("Zm\0v", 4));
  CAPTURE(bad);
  auto r = Base64Decode(bad);
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hyperpool::auth
