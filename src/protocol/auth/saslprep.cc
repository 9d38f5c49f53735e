#include "protocol/auth/saslprep.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace hyperpool::auth {
namespace {

struct Range {
  char32_t first;
  char32_t last;
};

bool InRanges(char32_t c, const Range* ranges, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (c >= ranges[i].first && c <= ranges[i].last) return true;
  }
  return false;
}

// RFC 3454 C.1.2: non-ASCII space characters, mapped to U+0020 (RFC 4013 2.1).
constexpr Range kNonAsciiSpace[] = {{0x00A0, 0x00A0}, {0x1680, 0x1680}, {0x2000, 0x200B},
                                    {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};
// RFC 3454 B.1: commonly mapped to nothing.
constexpr Range kMappedToNothing[] = {{0x00AD, 0x00AD}, {0x034F, 0x034F}, {0x1806, 0x1806},
                                      {0x180B, 0x180D}, {0x200B, 0x200D}, {0x2060, 0x2060},
                                      {0xFE00, 0xFE0F}, {0xFEFF, 0xFEFF}};
// Characters we know are, in Unicode 3.2: assigned, not prohibited by
// SASLprep, not RandALCat (so the bidi rule cannot fire), unchanged by NFKC
// and unable to combine with a neighbour under NFC (no combining marks,
// no conjoining jamo, no compatibility characters). For a string made only
// of these and printable ASCII, NFKC is the identity, so the SASLprep
// output equals the mapped input.
constexpr Range kNfkcStable[] = {
    {0x00C0, 0x00FF},  // Latin-1 letters (plus x and division sign)
    {0x0100, 0x0131}, {0x0134, 0x013E}, {0x0141, 0x0148}, {0x014A, 0x017E},  // Latin Ext-A,
                       // minus the ligatures/compat forms 0132-0133, 013F-0140, 0149, 017F
    {0x0391, 0x03A1}, {0x03A3, 0x03A9}, {0x03B1, 0x03C9},  // basic Greek letters
    {0x0400, 0x045F},  // Cyrillic
    {0x3041, 0x3094}, {0x30A1, 0x30FA}, {0x30FC, 0x30FC},  // kana (no voicing marks)
    {0x4E00, 0x9FA5},  // CJK unified ideographs
    {0xAC00, 0xD7A3},  // Hangul syllables
};

// Decodes UTF-8 strictly (no overlongs, surrogates or values > U+10FFFF).
std::optional<std::vector<char32_t>> DecodeUtf8(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    size_t len;
    char32_t c;
    char32_t min;
    if (b0 < 0x80) {
      out.push_back(b0);
      ++i;
      continue;
    } else if ((b0 & 0xE0) == 0xC0) {
      len = 2, c = b0 & 0x1F, min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
      len = 3, c = b0 & 0x0F, min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
      len = 4, c = b0 & 0x07, min = 0x10000;
    } else {
      return std::nullopt;
    }
    if (s.size() - i < len) return std::nullopt;
    for (size_t j = 1; j < len; ++j) {
      const auto b = static_cast<unsigned char>(s[i + j]);
      if ((b & 0xC0) != 0x80) return std::nullopt;
      c = (c << 6) | (b & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return std::nullopt;
    out.push_back(c);
    i += len;
  }
  return out;
}

void AppendUtf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

}  // namespace

std::string SaslPrep(std::string_view password) {
  bool ascii = true;
  for (char ch : password) ascii = ascii && static_cast<unsigned char>(ch) < 0x80;
  // PostgreSQL's fast path returns any ASCII string unchanged, controls too.
  if (ascii) return std::string(password);

  std::optional<std::vector<char32_t>> chars = DecodeUtf8(password);
  if (!chars) return std::string(password);

  std::string mapped;
  mapped.reserve(password.size());
  for (char32_t c : *chars) {
    if (InRanges(c, kNonAsciiSpace, std::size(kNonAsciiSpace))) {
      mapped.push_back(' ');
    } else if (InRanges(c, kMappedToNothing, std::size(kMappedToNothing))) {
      continue;
    } else if (c < 0x20 || c == 0x7F) {
      return std::string(password);  // C.2.1 ASCII control: prohibited -> raw
    } else if (c < 0x80 || InRanges(c, kNfkcStable, std::size(kNfkcStable))) {
      AppendUtf8(c, mapped);
    } else {
      // Unknown to our tables: we cannot normalise it, so fall back to the
      // raw bytes (documented limitation in saslprep.h).
      return std::string(password);
    }
  }
  if (mapped.empty()) return std::string(password);  // PostgreSQL: "prohibited"
  return mapped;
}

}  // namespace hyperpool::auth
