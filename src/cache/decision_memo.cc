#include "cache/decision_memo.h"

#include <algorithm>
#include <array>
#include <utility>

#include "cache/byte_scan.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace hyperpool::cache {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// A byte that would make a digit next to it part of something other than a
// standalone integer: an identifier or keyword ('$' and non-ASCII bytes
// included, as the lexer reads them), a parameter ($1), a decimal point,
// or a number's own exponent, underscore or 0x prefix.
bool JoinsDigits(char c) {
  const auto u = static_cast<unsigned char>(c);
  return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || c == '.' ||
         u >= 0x80;
}

constexpr char kNumberMark = '\0';  // never in a Query or Parse text (NUL-terminated)

// Bit k set when sql[block + k] (k < 16; fewer at the end) is a byte
// MaskScan must look at: a digit, or one of \ ' " $ & - / and NUL.
uint32_t ShapeStops(std::string_view sql, size_t block) {
#if defined(__SSE2__)
  if (sql.size() >= 16) {
    // The last, partial block: the sixteen bytes that end the text, the
    // ones before `block` shifted out.
    const size_t at = std::min(block, sql.size() - 16);
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sql.data() + at));
    // c - '0' <= 9, unsigned: max(c - '0', 9) == 9.
    const __m128i d = _mm_sub_epi8(c, _mm_set1_epi8('0'));
    const __m128i digits = _mm_cmpeq_epi8(_mm_max_epu8(d, _mm_set1_epi8(9)), _mm_set1_epi8(9));
    const __m128i hit = _mm_or_si128(digits, EqualToAny<'\\', '\'', '"', '$', '&', '-', '/', '\0'>(c));
    return static_cast<uint32_t>(_mm_movemask_epi8(hit)) >> (block - at);
  }
#endif
  uint32_t mask = 0;
  const size_t end = std::min(sql.size(), block + 16);
  for (size_t i = block; i < end; ++i) {
    const char c = sql[i];
    if (IsDigit(c) || c == '\\' || c == '\'' || c == '"' || c == '$' || c == '&' || c == '-' || c == '/' || c == '\0') {
      mask |= 1u << (i - block);
    }
  }
  return mask;
}

// The one scan behind MaskableText, AppendMaskedIntegers and the shape: it
// looks only at the bytes any of them reads (ShapeStops, sixteen at a time)
// and copies the rest in runs. `check`: return false at the first byte
// that makes the text not maskable (backslash, NUL, quoted identifier,
// dollar quote, '&', comment, an unbalanced quote); else those are plain
// bytes. `out`: where the text goes with its standalone integers masked
// (null: nowhere; after a false return it holds part of a key).
bool MaskScan(std::string_view sql, std::string* out, bool check) {
  const size_t n = sql.size();
  bool in_string = false;
  size_t copied = 0;  // sql[copied, i) is still to be appended
  size_t next = 0;    // bytes before this one were read as part of a run of digits
  for (size_t block = 0; block < n; block += 16) {
    for (uint32_t stops = ShapeStops(sql, block); stops != 0; stops &= stops - 1) {
      const size_t i = block + static_cast<size_t>(__builtin_ctz(stops));
      if (i < next) continue;
      const char c = sql[i];
      // A backslash may end a string early (E'', or standard_conforming_strings
      // off): anywhere, the bytes no longer tell where strings are.
      if (c == '\\' || c == kNumberMark) {
        if (check) return false;
        continue;
      }
      if (c == '\'') {
        in_string = !in_string;
        continue;
      }
      if (in_string) continue;
      if (c == '"' || c == '$' || c == '&' || c == '-' || c == '/') {
        if (check && (c == '"' || c == '$' || c == '&' || (i + 1 < n && sql[i + 1] == (c == '-' ? '-' : '*')))) {
          return false;  // a quoted identifier, dollar quote, U& escape or comment
        }
        continue;
      }
      // A digit outside a string: its whole run is one number token if it
      // stands alone, else part of a word, parameter or other number.
      size_t end = i + 1;
      while (end < n && IsDigit(sql[end])) ++end;
      if (out != nullptr && !(i > 0 && JoinsDigits(sql[i - 1])) && (end == n || !JoinsDigits(sql[end]))) {
        out->append(sql.data() + copied, i - copied);
        out->push_back(kNumberMark);
        copied = end;
      }
      next = end;
    }
  }
  if (check && in_string) return false;
  if (out != nullptr) out->append(sql.data() + copied, n - copied);
  return true;
}

// The shape (SqlText::shape), appended to `key`: a byte, 1 when the rest
// is `sql` masked, 0 when it is `sql` itself (not maskable).
void AppendShape(std::string_view sql, std::string& key) {
  const size_t at = key.size();
  key.push_back(1);
  if (!MaskScan(sql, &key, /*check=*/true)) {
    key.resize(at);
    key.push_back(0);
    key.append(sql);
  }
}

}  // namespace

bool DecisionMemo::KeyOf(const SqlText& text, const DecisionContext& ctx, std::string& key) {
  const std::string_view sql = text.sql();
  if (sql.size() > kMaxTextBytes) return false;
  const bool mask = text.plain_select() && sql.find(kNumberMark) == std::string_view::npos;
  key.clear();
  key.reserve(sql.size() + 1);
  key.push_back(static_cast<char>((mask ? 1 : 0) | (ctx.standard_conforming_strings ? 2 : 0) |
                                  (ctx.in_transaction ? 4 : 0)));
  if (!mask) {
    key.append(sql);
    return true;
  }
  AppendMaskedIntegers(sql, key);
  return true;
}

bool MaskableText(std::string_view sql) { return MaskScan(sql, nullptr, /*check=*/true); }

// (For a text the caller knows to be maskable: no comments, dollar quotes,
// quoted identifiers or backslashes, and balanced single quotes, so that
// each maximal run of digits outside a string that stands alone is one
// number token, whatever its digits.)
void AppendMaskedIntegers(std::string_view sql, std::string& key) { (void)MaskScan(sql, &key, /*check=*/false); }

MemoDecision DecisionMemo::Answer(const Entry& e, const DecisionContext& ctx) {
  MemoDecision out;
  out.analysed = true;
  out.wants_catalog = e.wants_catalog;
  out.fingerprint = e.fingerprint;
  if (!e.before_params) {
    if (std::optional<Decision> d = DecideParams(ctx.params)) {
      out.decision = std::move(*d);
      return out;
    }
  }
  out.decision = e.decision;
  return out;
}

MemoDecision DecisionMemo::Decide(const SqlText& text, const DecisionContext& ctx, const CatalogVersion& version) {
  // DecideSql's checks on the text before it lexes: made here, every time.
  if (!ctx.enabled || (ctx.max_query_bytes != 0 && text.sql().size() > ctx.max_query_bytes) ||
      (!ctx.standard_conforming_strings && text.sql().find('\\') != std::string_view::npos)) {
    MemoDecision out;
    out.decision = DecideSql(text, ctx);
    return out;
  }
  if (!(version == version_) || ctx.oracle != oracle_) {
    current_.clear();
    previous_.clear();
    version_ = version;
    oracle_ = ctx.oracle;
  }
  const bool keyed = KeyOf(text, ctx, key_);
  if (keyed) {
    if (auto it = current_.find(std::string_view(key_)); it != current_.end()) {
      ++hits_;
      MemoDecision out = Answer(it->second, ctx);
      out.from_memo = true;
      return out;
    }
    if (auto it = previous_.find(std::string_view(key_)); it != previous_.end()) {
      ++hits_;
      Entry e = std::move(it->second);
      previous_.erase(it);
      MemoDecision out = Answer(e, ctx);
      out.from_memo = true;
      Keep(std::move(e));
      return out;
    }
  }
  const absl::StatusOr<StatementAnalysis>& a = text.analysis();
  if (!a.ok()) {
    MemoDecision out;
    out.decision = DecideSql(text, ctx);  // the parse error, with its position
    return out;
  }
  Entry e;
  if (std::optional<Decision> d = DecideBeforeParams(*a, ctx)) {
    e.decision = std::move(*d);
    e.before_params = true;
  } else {
    e.decision = DecideAfterParams(*a, ctx);
  }
  e.wants_catalog = !a->functions.empty() || !a->relations_read.empty();
  e.fingerprint = text.normalized_analysis_if_done()->fingerprint;
  MemoDecision out = Answer(e, ctx);
  if (keyed) Keep(std::move(e));
  return out;
}

void DecisionMemo::Keep(Entry e) {
  if (current_.size() >= kCapacity) {
    previous_ = std::move(current_);
    current_ = Map();
  }
  current_.insert_or_assign(key_, std::move(e));
}

const std::string& SqlText::shape() const {
  if (shape_) return *shape_;
  std::string& s = shape_.emplace();
  if (sql_.size() > kMaxShapeBytes) return s;
  s.reserve(sql_.size() + 1);
  AppendShape(sql_, s);
  return s;
}

bool EffectMemo::KeyOf(std::string_view sql, bool standard_conforming_strings, std::string& key) {
  if (sql.size() > kMaxTextBytes) return false;
  key.clear();
  key.reserve(sql.size() + 1);
  AppendShape(sql, key);
  if (standard_conforming_strings) key[0] = static_cast<char>(key[0] | 2);
  return true;
}

const MemoEffect* EffectMemo::Find(const SqlText& text, bool standard_conforming_strings,
                                   const CatalogVersion& version, const VolatilityOracle* oracle) {
  if (!(version == version_) || oracle != oracle_) {
    map_.clear();
    version_ = version;
    oracle_ = oracle;
  }
  // KeyOf(text.sql(), ...), from the shape the text's other memos share.
  static_assert(kMaxTextBytes == SqlText::kMaxShapeBytes);
  const std::string& shape = text.shape();
  keyed_ = !shape.empty();
  if (!keyed_) return nullptr;
  key_.assign(shape);
  if (standard_conforming_strings) key_[0] = static_cast<char>(key_[0] | 2);
  auto it = map_.find(std::string_view(key_));
  if (it == map_.end()) return nullptr;
  ++hits_;
  return &it->second;
}

void EffectMemo::Keep(MemoEffect effect) {
  if (!keyed_) return;
  keyed_ = false;
  if (map_.size() >= kCapacity) map_.clear();
  map_.insert_or_assign(key_, std::move(effect));
}

}  // namespace hyperpool::cache
