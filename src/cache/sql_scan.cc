// Byte-level readings of SQL text that spare the lexer (sql_analysis.h):
// one plain SELECT (IsPlainSelect, SqlText::simple_read and plain_select)
// and one statement's leading keyword (LeadingKeywordOfPlainText). Each
// must conclude exactly what the lexer and the analysis would, or decline.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "cache/byte_scan.h"
#include "cache/sql_analysis.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace hyperpool::cache {
namespace {

// The bytes ScanSelect must look at; the others (most of a query) it skips.
constexpr std::string_view kScanStops = "'\"&\\;/-$(sShHiIkKzZ.:~!@#%^|`?";

// Bit k set for each stop byte at sql[block + k], k < 16 (fewer at the end).
uint32_t StopMask(std::string_view sql, size_t block) {
#if defined(__SSE2__)
  if (block + 16 <= sql.size()) {
    // The same set as kScanStops in about half the operations of one
    // compare per byte: `c | 0x20` is exact for the pairs that differ only
    // in that bit (s/S h/H i/I k/K z/Z, ^ and ~, \ and |, @ and `), and
    // three ranges hold the rest but ':' ';' '?': ! " # $ % & ' ( are
    // 0x21..0x28, - . / 0x2d..0x2f (tier_test holds it to kScanStops).
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sql.data() + block));
    const __m128i f = _mm_or_si128(c, _mm_set1_epi8(0x20));
    __m128i hit = EqualToAny<'s', 'h', 'i', 'k', 'z', '~', '|', '`'>(f);
    // c - lo <= hi - lo, unsigned: max(c - lo, hi - lo) == hi - lo.
    const __m128i r1 = _mm_sub_epi8(c, _mm_set1_epi8(0x21));
    hit = _mm_or_si128(hit, _mm_cmpeq_epi8(_mm_max_epu8(r1, _mm_set1_epi8(7)), _mm_set1_epi8(7)));
    const __m128i r2 = _mm_sub_epi8(c, _mm_set1_epi8(0x2d));
    hit = _mm_or_si128(hit, _mm_cmpeq_epi8(_mm_max_epu8(r2, _mm_set1_epi8(2)), _mm_set1_epi8(2)));
    hit = _mm_or_si128(hit, EqualToAny<':', ';', '?'>(c));
    return static_cast<uint32_t>(_mm_movemask_epi8(hit));
  }
#endif
  static const ByteSet<kScanStops.size()> kStops(kScanStops);
  return kStops.Mask(sql, block);
}

// `word` (lowercase) at `at` in `sql`, ASCII case-insensitively.
bool LoweredAt(std::string_view sql, size_t at, std::string_view word) {
  if (sql.size() - at < word.size()) return false;
  for (size_t k = 0; k < word.size(); ++k) {
    if (absl::ascii_tolower(static_cast<unsigned char>(sql[at + k])) != word[k]) return false;
  }
  return true;
}

bool WordChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' ||
         static_cast<unsigned char>(c) >= 0x80;
}

// Whether the opening quote at `at` follows a word (skipping blanks) that
// is not one of the keywords a plain string literal may follow.
bool TypedLiteralAt(std::string_view sql, size_t at) {
  size_t end = at;
  while (end > 0 && absl::ascii_isspace(static_cast<unsigned char>(sql[end - 1]))) --end;
  size_t begin = end;
  while (begin > 0 && WordChar(sql[begin - 1])) --begin;
  if (begin == end) return false;  // after an operator, a comma, a parenthesis or a quote
  static constexpr std::string_view kPlainBefore[] = {"select", "where", "and",  "or",   "not",      "then", "else",
                                                      "when",   "case",  "from", "on",   "between", "having", "all",
                                                      "distinct"};
  const std::string_view word = sql.substr(begin, end - begin);
  for (std::string_view k : kPlainBefore) {
    if (word.size() == k.size() && LoweredAt(sql, begin, k)) return false;
  }
  return true;
}

enum class SelectScan : uint8_t {
  kNotPlain,  // not IsPlainSelect
  kPlain,     // IsPlainSelect, but it has '(' or INTO
  kSimple,    // IsPlainSelect, no '(' and no INTO word: SqlText::simple_read
};

// IsPlainSelect and simple_read in one pass over the text (every Query a
// session forwards goes through this, on both halves).
SelectScan ScanSelect(std::string_view sql) {
  size_t i = 0;
  while (i < sql.size() && absl::ascii_isspace(static_cast<unsigned char>(sql[i]))) ++i;
  constexpr std::string_view kSelect = "select";
  if (sql.size() - i <= kSelect.size() || !LoweredAt(sql, i, kSelect)) return SelectScan::kNotPlain;
  if (WordChar(sql[i + kSelect.size()])) return SelectScan::kNotPlain;
  size_t end = sql.size();
  while (end > i && (sql[end - 1] == ';' || absl::ascii_isspace(static_cast<unsigned char>(sql[end - 1])))) --end;
  size_t quotes = 0;
  bool calls_or_into = false;
  // Sixteen bytes at a time: the stops in each block, in order.
  for (size_t block = i; block < sql.size(); block += 16) {
    for (uint32_t stops = StopMask(sql, block); stops != 0; stops &= stops - 1) {
      const size_t j = block + static_cast<size_t>(__builtin_ctz(stops));
      const char c = sql[j];
      const char next = j + 1 < sql.size() ? sql[j + 1] : '\0';
      switch (c) {
        case '\'':
          // An opening quote after a word other than a few keywords is a
          // typed literal (bool 't', date '...', E'...'): a cast, which runs
          // the type's input function.
          if (quotes % 2 == 0 && !calls_or_into && TypedLiteralAt(sql, j)) calls_or_into = true;
          ++quotes;
          break;
        // Operators and calls spelled with keywords: LIKE / ILIKE (~~, ~~*),
        // AT TIME ZONE (timezone()), IS [form] NORMALIZED (is_normalized()).
        case 'k':
        case 'K':
          if (j >= 3 && LoweredAt(sql, j - 3, "like") && (j + 1 == sql.size() || !WordChar(sql[j + 1]))) {
            calls_or_into = true;
          }
          break;
        case 'z':
        case 'Z':
          if ((LoweredAt(sql, j, "zone") && (j == 0 || !WordChar(sql[j - 1])) &&
               (j + 4 == sql.size() || !WordChar(sql[j + 4]))) ||
              (j >= 7 && LoweredAt(sql, j - 7, "normalized"))) {
            calls_or_into = true;
          }
          break;
        case '"':
        case '&':
        case '\\':
          return SelectScan::kNotPlain;
        case ';':
          if (j < end) return SelectScan::kNotPlain;
          break;
        case '/':
          if (next == '*') return SelectScan::kNotPlain;
          break;
        case '-':
          if (next == '-') return SelectScan::kNotPlain;
          break;
        case '$':
          if (!absl::ascii_isdigit(static_cast<unsigned char>(next))) return SelectScan::kNotPlain;
          break;
        case '(':
        // A call without parentheses: t.f (attribute notation), a cast
        // (::t runs the type's input or cast function), an operator with a
        // character no built-in arithmetic or comparison uses (a user
        // operator may call a volatile function that writes).
        case '.':
        case ':':
        case '~':
        case '!':
        case '@':
        case '#':
        case '%':
        case '^':
        case '|':
        case '`':
        case '?':
          calls_or_into = true;
          break;
        // Anywhere, even in a literal (conservative): set_config and hyperpool.
        case 's':
        case 'S':
          if (LoweredAt(sql, j, "set_config")) return SelectScan::kNotPlain;
          break;
        case 'h':
        case 'H':
          if (LoweredAt(sql, j, "hyperpool")) return SelectScan::kNotPlain;
          break;
        // INTO as a word: SELECT ... INTO t creates t (INTO TEMP pins).
        case 'i':
        case 'I':
          if (!calls_or_into && LoweredAt(sql, j, "into") && (j == 0 || !WordChar(sql[j - 1])) &&
              (j + 4 == sql.size() || !WordChar(sql[j + 4]))) {
            calls_or_into = true;
          }
          break;
        default:
          break;
      }
    }
  }
  if (quotes % 2 != 0) return SelectScan::kNotPlain;
  return calls_or_into ? SelectScan::kPlain : SelectScan::kSimple;
}

}  // namespace

size_t NextScanStop(std::string_view sql, size_t from) {
  for (size_t block = from; block < sql.size(); block += 16) {
    if (const uint32_t stops = StopMask(sql, block); stops != 0) return block + static_cast<size_t>(__builtin_ctz(stops));
  }
  return sql.size();
}

// (sql_analysis.h) Starts with the keyword SELECT, has no ';' before its
// trailing ones, calls no set_config and names nothing hyperpool; and has
// none of the bytes that could make it lex differently from how it reads
// here (quoted identifiers, U& escapes, backslashes, comments, dollar
// quotes) or fail to lex (an odd number of single quotes). Such a text is
// classified exactly as the lexer would (no effects); anything else is left
// to the lexer.
bool IsPlainSelect(std::string_view sql) { return ScanSelect(sql) != SelectScan::kNotPlain; }

// scan_: -1 not yet scanned, else the SelectScan.
signed char SqlText::scan() const {
  if (scan_ < 0) scan_ = static_cast<signed char>(ScanSelect(sql_));
  return scan_;
}

bool SqlText::simple_read() const { return scan() == static_cast<signed char>(SelectScan::kSimple); }

bool SqlText::plain_select() const { return scan() != static_cast<signed char>(SelectScan::kNotPlain); }

const std::optional<std::string>& SqlText::leading_keyword() const {
  if (!leading_keyword_) leading_keyword_.emplace(LeadingKeywordOfPlainText(sql_));
  return *leading_keyword_;
}

bool ContainsCaseless(std::string_view hay, std::string_view needle) {
  const size_t n = needle.size();
  if (n == 0) return true;
  if (n > hay.size()) return false;
  auto matches_at = [&](size_t i) { return LoweredAt(hay, i, needle); };
  // A byte that is not a letter (the ':' of "hyperpool:nocache", the '_'
  // of "set_config"): only the places where it occurs are compared
  // (memchr): most texts hold it rarely or never.
  size_t anchor = 0;
  while (anchor < n && needle[anchor] >= 'a' && needle[anchor] <= 'z') ++anchor;
  if (anchor < n) {
    const size_t last = hay.size() - n + anchor;  // the anchor's last possible place
    for (size_t from = anchor; from <= last;) {
      const void* hit = std::memchr(hay.data() + from, needle[anchor], last - from + 1);
      if (hit == nullptr) return false;
      const size_t j = static_cast<size_t>(static_cast<const char*>(hit) - hay.data());
      if (matches_at(j - anchor)) return true;
      from = j + 1;
    }
    return false;
  }
  const size_t end = hay.size() - n + 1;  // the places a match may start: [0, end)
  size_t i = 0;
#if defined(__SSE2__)
  // All letters: a lowercase letter's only preimages under `| 0x20` are
  // itself and its capital, so comparing `byte | 0x20` is exact.
  const __m128i first = _mm_set1_epi8(needle[0]);
  const __m128i last = _mm_set1_epi8(needle[n - 1]);
  const __m128i fold = _mm_set1_epi8(0x20);
  for (; i + 16 <= end; i += 16) {  // (the last load ends at i + 15 + n - 1 < hay.size())
    const __m128i a = _mm_or_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hay.data() + i)), fold);
    const __m128i b = _mm_or_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hay.data() + i + n - 1)), fold);
    auto mask = static_cast<uint32_t>(_mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(a, first), _mm_cmpeq_epi8(b, last))));
    while (mask != 0) {
      if (matches_at(i + static_cast<size_t>(__builtin_ctz(mask)))) return true;
      mask &= mask - 1;
    }
  }
#endif
  for (; i < end; ++i) {
    if (matches_at(i)) return true;
  }
  return false;
}

std::optional<std::string> LeadingKeywordOfPlainText(std::string_view sql) {
  size_t end = sql.size();
  while (end > 0 && (sql[end - 1] == ';' || absl::ascii_isspace(static_cast<unsigned char>(sql[end - 1])))) --end;
  const std::string_view body = sql.substr(0, end);
  // Nothing that could end a statement early, hide one, or fail to lex:
  // quotes, dollar quotes, backslashes, comments, U& escapes. One pass.
  static constexpr std::string_view kStopBytes = ";'\"$\\&-/";
  static const ByteSet<kStopBytes.size()> kStops(kStopBytes);
  const bool plain = kStops.ForEach(body, [&](size_t j) {
    const char c = body[j];
    if (c != '-' && c != '/') return false;  // pgbench's "+ -1234" has a '-' that stops nothing
    const char next = j + 1 < body.size() ? body[j + 1] : '\0';
    return !((c == '-' && next == '-') || (c == '/' && next == '*'));
  });
  if (!plain) return std::nullopt;
  size_t i = 0;
  while (i < body.size() && (absl::ascii_isspace(static_cast<unsigned char>(body[i])) || body[i] == '(')) ++i;
  const size_t start = i;
  while (i < body.size() && (absl::ascii_isalpha(static_cast<unsigned char>(body[i])) || body[i] == '_')) ++i;
  if (i == start) return std::nullopt;
  // The lexer's identifier goes on through digits, '$' and non-ASCII bytes.
  if (i < body.size() && WordChar(body[i])) return std::nullopt;
  std::string kw(body.substr(start, i - start));
  for (char& c : kw) c = absl::ascii_tolower(static_cast<unsigned char>(c));
  return kw;
}

}  // namespace hyperpool::cache
