#include "protocol/auth/saslprep.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <string>

namespace hyperpool::auth {
namespace {

TEST_CASE("SaslPrep follows PostgreSQL for inputs it can decide") {
  auto [input, expected] = GENERATE(table<std::string, std::string>({
      {"pencil", "pencil"},
      {"", ""},
      {"p a\tss\x01", "p a\tss\x01"},                         // ASCII: unchanged, controls too
      {"pass\xC2\xA0word", "pass word"},                    // U+00A0 -> space
      {"pass\xE3\x80\x80word", "pass word"},                // U+3000 -> space
      {"a\xC2\xAD" "b", "ab"},                              // soft hyphen mapped to nothing
      {"\xC2\xAD", "\xC2\xAD"},                             // empty after mapping: raw
      {"w\xC3\xB6rd", "w\xC3\xB6rd"},                       // precomposed o-umlaut: NFKC-stable
      {"\xD0\xBF\xD0\xB0\xD1\x80\xD0\xBE\xD0\xBB\xD1\x8C", "\xD0\xBF\xD0\xB0\xD1\x80\xD0\xBE\xD0\xBB\xD1\x8C"},
      {"\xE5\xAF\x86\xE7\xA0\x81", "\xE5\xAF\x86\xE7\xA0\x81"},  // CJK
      {"\xC3\xB6\x01", "\xC3\xB6\x01"},                     // ASCII control in non-ASCII: prohibited, raw
      {"\xC2\xA0\x01", "\xC2\xA0\x01"},                     // mapped but prohibited: raw, not " \x01"
      {"\xFF\xFE", "\xFF\xFE"},                             // invalid UTF-8: raw
      {"\xC0\xAF", "\xC0\xAF"},                             // overlong: raw
      {"\xED\xA0\x80", "\xED\xA0\x80"},                     // surrogate: raw
      {"\xC3", "\xC3"},                                     // truncated: raw
  }));
  CAPTURE(input);
  CHECK(SaslPrep(input) == expected);
}

TEST_CASE("SaslPrep falls back to raw bytes where it cannot normalise (documented limitation)") {
  // PostgreSQL would NFKC-compose "e" + U+0301 to U+00E9; we return it raw.
  CHECK(SaslPrep("e\xCC\x81") == "e\xCC\x81");
  // Full-width 'A' (NFKC -> 'A'): raw here.
  CHECK(SaslPrep("\xEF\xBC\xA1") == "\xEF\xBC\xA1");
}

}  // namespace
}  // namespace hyperpool::auth
