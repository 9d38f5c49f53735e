#include "cache/decision_memo.h"

#include <array>
#include <utility>

#include "cache/byte_scan.h"

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

// The bytes KeyOf stops at: digits and single quotes.
constexpr std::array<bool, 256> kKeyStop = [] {
  std::array<bool, 256> t{};
  for (char c = '0'; c <= '9'; ++c) t[static_cast<unsigned char>(c)] = true;
  t[static_cast<unsigned char>('\'')] = true;
  return t;
}();

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

bool MaskableText(std::string_view sql) {
  // Only the places of these bytes are looked at (ByteSet).
  static constexpr std::string_view kInteresting("\\'\"$&-/\0", 8);
  static const ByteSet<kInteresting.size()> kBytes(kInteresting);
  static_assert(kNumberMark == '\0');
  bool in_string = false;
  const bool maskable = kBytes.ForEach(sql, [&](size_t i) {
    const char c = sql[i];
    // A backslash may end a string early (E'', or standard_conforming_strings
    // off): anywhere, the bytes no longer tell where strings are.
    if (c == '\\' || c == kNumberMark) return false;
    if (c == '\'') {
      in_string = !in_string;
      return true;
    }
    if (in_string) return true;
    if (c == '"' || c == '$' || c == '&') return false;
    return !(i + 1 < sql.size() && sql[i + 1] == (c == '-' ? '-' : '*'));  // '-' or '/'
  });
  return maskable && !in_string;
}

void AppendMaskedIntegers(std::string_view sql, std::string& key) {
  // No comments, dollar quotes, quoted identifiers or backslashes, and
  // balanced single quotes ('' inside a string toggles twice): each
  // maximal run of digits outside a string that stands alone is one
  // number token, whatever its digits.
  bool in_string = false;
  size_t copied = 0;  // sql[copied, i) is still to be appended
  for (size_t i = 0; i < sql.size(); ++i) {
    const char c = sql[i];
    if (!kKeyStop[static_cast<unsigned char>(c)]) continue;
    if (c == '\'') {
      in_string = !in_string;
      continue;
    }
    if (in_string || !IsDigit(c) || (i > 0 && JoinsDigits(sql[i - 1]))) continue;
    size_t end = i + 1;
    while (end < sql.size() && IsDigit(sql[end])) ++end;
    if (end == sql.size() || !JoinsDigits(sql[end])) {
      key.append(sql.data() + copied, i - copied);
      key.push_back(kNumberMark);
      copied = end;
    }
    i = end - 1;
  }
  key.append(sql.data() + copied, sql.size() - copied);
}

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

bool EffectMemo::KeyOf(std::string_view sql, bool standard_conforming_strings, std::string& key) {
  if (sql.size() > kMaxTextBytes) return false;
  const bool mask = MaskableText(sql);
  key.clear();
  key.reserve(sql.size() + 1);
  key.push_back(static_cast<char>((mask ? 1 : 0) | (standard_conforming_strings ? 2 : 0)));
  if (mask) {
    AppendMaskedIntegers(sql, key);
  } else {
    key.append(sql);
  }
  return true;
}

const MemoEffect* EffectMemo::Find(const SqlText& text, bool standard_conforming_strings,
                                   const CatalogVersion& version, const VolatilityOracle* oracle) {
  if (!(version == version_) || oracle != oracle_) {
    map_.clear();
    version_ = version;
    oracle_ = oracle;
  }
  keyed_ = KeyOf(text.sql(), standard_conforming_strings, key_);
  if (!keyed_) return nullptr;
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
