// The statement analysis half of sql_analysis.h. The judge is PostgreSQL's
// own grammar (libpg_query, sql_parse_tree.cc); this file keys its answers
// by statement shape so that a text is parsed once per shape, not once per
// literal: the key is the lexer's normalized text (literals replaced by '?')
// except that a string literal holding a time word ('now', 'today', ...)
// stays verbatim, because its value changes the answer (has_time_literal).

#include <algorithm>
#include <array>
#include <cstddef>
#include <list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "cache/sql_analysis.h"
#include "cache/string_hash.h"

namespace hyperpool::cache {

StatementKind KindOfKeyword(std::string_view kw);                    // sql_parse_tree.cc

bool ContainsTimeWord(std::string_view value) {
  for (std::string_view w : {"now", "today", "tomorrow", "yesterday"}) {
    if (value.size() < w.size()) continue;
    for (size_t i = 0; i + w.size() <= value.size(); ++i) {
      size_t k = 0;
      while (k < w.size() && (value[i + k] | 0x20) == w[k]) ++k;
      if (k == w.size()) return true;
    }
  }
  return false;
}

namespace {

// Feeds the normalized text (StatementAnalysis::normalized) to `sink` piece
// by piece: building it and hashing it are two sinks over the one walk.
template <typename Sink>
void ForEachNormalizedPiece(const std::vector<Token>& tokens, Sink&& sink) {
  bool first = true;
  for (const Token& t : tokens) {
    if (!first) sink(std::string_view(" "));
    first = false;
    switch (t.kind) {
      case TokenKind::kString:
      case TokenKind::kNumber:
        sink(std::string_view("?"));
        break;
      case TokenKind::kIdentifier:
        sink(std::string_view(t.value));
        break;
      default:
        sink(t.text);
        break;
    }
  }
}

std::string NormalizedText(const std::vector<Token>& tokens) {
  std::string n;
  ForEachNormalizedPiece(tokens, [&n](std::string_view piece) { n.append(piece); });
  return n;
}

// Fnv1a64(NormalizedText(tokens)), without building the text.
uint64_t NormalizedFingerprint(const std::vector<Token>& tokens) {
  uint64_t h = kFnvOffsetBasis;
  ForEachNormalizedPiece(tokens, [&h](std::string_view piece) { h = Fnv1a64(piece, h); });
  return h;
}


// The shape key of `tokens` into `out` (see the file comment).
void ShapeKey(const std::vector<Token>& tokens, std::string& out) {
  out.clear();
  for (const Token& t : tokens) {
    if (!out.empty()) out.push_back(' ');
    switch (t.kind) {
      case TokenKind::kString:
        if (ContainsTimeWord(t.value)) {
          out.append(t.text);
        } else {
          out.push_back('?');
        }
        break;
      case TokenKind::kNumber:
        out.push_back('?');
        break;
      case TokenKind::kIdentifier:
        out.append(t.value);
        break;
      default:
        out.append(t.text);
        break;
    }
  }
}

// A VALUES row that adds nothing to an analysis: `( v {, v} )` with each v a
// parameter, NULL, DEFAULT or a run of decimal digits (a ParamRef, an
// A_Const or a SetToDefault in the parse tree: no name, call, cast or
// literal the walk records). `i` is at the '('; returns the index after the
// ')', or 0 when the row is anything else.
size_t InertRowEnd(const std::vector<Token>& t, size_t i) {
  if (i >= t.size() || t[i].kind != TokenKind::kLParen) return 0;
  for (++i;; ++i) {
    if (i >= t.size()) return 0;
    const Token& v = t[i];
    const bool inert =
        v.kind == TokenKind::kParam ||
        (v.kind == TokenKind::kIdentifier && (v.value == "null" || v.value == "default")) ||
        (v.kind == TokenKind::kNumber && !v.text.empty() &&
         std::all_of(v.text.begin(), v.text.end(), [](char c) { return c >= '0' && c <= '9'; }));
    if (!inert || ++i >= t.size()) return 0;
    if (t[i].kind == TokenKind::kRParen) return i + 1;
    if (t[i].kind != TokenKind::kComma) return 0;
  }
}

}  // namespace

std::optional<std::string> CollapsedValuesText(const std::vector<Token>& t, std::string_view sql) {
  std::string out;
  size_t copied = 0;  // sql[copied, ...) not yet in `out`
  for (size_t i = 0; i + 1 < t.size(); ++i) {
    if (t[i].kind != TokenKind::kIdentifier || t[i].value != "values" || t[i + 1].kind != TokenKind::kLParen) continue;
    // The first row stays as written (the parser reads it); it ends at its
    // matching ')'.
    size_t j = i + 1;
    for (int depth = 0; j < t.size(); ++j) {
      if (t[j].kind == TokenKind::kLParen) ++depth;
      if (t[j].kind == TokenKind::kRParen && --depth == 0) break;
    }
    if (j >= t.size()) return std::nullopt;
    const size_t first_end = j + 1;
    size_t k = first_end;  // after the last inert ", (row)" that follows
    while (k + 1 < t.size() && t[k].kind == TokenKind::kComma) {
      const size_t e = InertRowEnd(t, k + 1);
      if (e == 0) break;
      k = e;
    }
    if (k == first_end) continue;
    const size_t cut_from = t[first_end - 1].offset + t[first_end - 1].text.size();
    const size_t cut_to = k < t.size() ? t[k].offset : sql.size();
    out.append(sql.substr(copied, cut_from - copied));
    copied = cut_to;
    i = k - 1;
  }
  if (copied == 0) return std::nullopt;
  out.append(sql.substr(copied));  // (a ')' ends a token: nothing to separate)
  return out;
}

namespace {

// The analyses of the shapes this thread parsed last, most recently used
// first. A memo of a pure function (the key decides the answer), so sharing
// it between two hyperpool instances in one process changes nothing either
// sees; one per thread, so no lock is taken on the per-query path.
class AnalysisMemo {
 public:
  static constexpr size_t kCapacity = 4096;
  static constexpr size_t kMaxKeyBytes = 16 << 10;  // longer texts: by their bytes, below
  // A longer text is kept by its exact bytes in one of kBigSlots, up to
  // kMaxBigBytes: the Endpoint's write tracking and the Client's statement
  // bookkeeping each ask about a statement, so a bulk INSERT of 60,000
  // parameters (600 kB; ~1 s in libpg_query's protobuf) was parsed twice.
  // Longer still: parsed each time (they are judged conservatively anyway).
  static constexpr size_t kBigSlots = 2;
  static constexpr size_t kMaxBigBytes = 1 << 20;

  const absl::StatusOr<StatementAnalysis>& Get(const std::vector<Token>& tokens, std::string_view sql) {
    ShapeKey(tokens, key_);
    if (key_.size() > kMaxKeyBytes) return GetBig(tokens, sql);
    return GetShape(sql);
  }

 private:
  using Entry = std::pair<std::string, absl::StatusOr<StatementAnalysis>>;

  // The analysis of the shape in key_ (of `sql`).
  const absl::StatusOr<StatementAnalysis>& GetShape(std::string_view sql) {
    auto it = index_.find(std::string_view(key_));
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
    if (lru_.size() >= kCapacity) {
      index_.erase(std::string_view(lru_.back().first));
      lru_.pop_back();
    }
    lru_.emplace_front(key_, ParseAnalysis(sql));
    index_.emplace(std::string_view(lru_.front().first), lru_.begin());
    return lru_.front().second;
  }

  const absl::StatusOr<StatementAnalysis>& GetBig(const std::vector<Token>& tokens, std::string_view sql) {
    // A bulk INSERT's (or a VALUES list's) rows of parameters and constants
    // change nothing the analysis reports: it is the analysis of the text
    // with one row, which is short and shaped like every other batch's
    // (60,000 rows: the memo's answer instead of ~1 s in the parser).
    if (std::optional<std::string> one_row = CollapsedValuesText(tokens, sql)) {
      absl::StatusOr<std::vector<Token>> short_tokens = Lex(*one_row);
      if (short_tokens.ok()) {
        ShapeKey(*short_tokens, key_);
        if (key_.size() <= kMaxKeyBytes) return GetShape(*one_row);
      }
    }
    if (sql.size() > kMaxBigBytes) {
      uncached_ = ParseAnalysis(sql);
      return uncached_;
    }
    for (Entry& e : big_) {
      if (e.first == sql) return e.second;
    }
    Entry& slot = big_[next_big_];
    next_big_ = (next_big_ + 1) % kBigSlots;
    slot.first.assign(sql);
    slot.second = ParseAnalysis(sql);
    return slot.second;
  }

  std::string key_;
  absl::StatusOr<StatementAnalysis> uncached_;
  std::array<Entry, kBigSlots> big_;
  size_t next_big_ = 0;
  std::list<Entry> lru_;
  absl::flat_hash_map<std::string_view, std::list<Entry>::iterator, StringHash, StringEq> index_;
};

const absl::StatusOr<StatementAnalysis>& Memoized(const std::vector<Token>& tokens, std::string_view sql) {
  thread_local AnalysisMemo memo;
  return memo.Get(tokens, sql);
}

}  // namespace

std::string_view StatementKindName(StatementKind kind) {
  switch (kind) {
    case StatementKind::kEmpty: return "empty";
    case StatementKind::kSelect: return "select";
    case StatementKind::kInsert: return "insert";
    case StatementKind::kUpdate: return "update";
    case StatementKind::kDelete: return "delete";
    case StatementKind::kMerge: return "merge";
    case StatementKind::kTruncate: return "truncate";
    case StatementKind::kCopyFrom: return "copy-from";
    case StatementKind::kCopyTo: return "copy-to";
    case StatementKind::kDdl: return "ddl";
    case StatementKind::kMaintenance: return "maintenance";
    case StatementKind::kTransaction: return "transaction";
    case StatementKind::kSet: return "set";
    case StatementKind::kShow: return "show";
    case StatementKind::kPrepare: return "prepare";
    case StatementKind::kExecute: return "execute";
    case StatementKind::kDeallocate: return "deallocate";
    case StatementKind::kDiscard: return "discard";
    case StatementKind::kListen: return "listen";
    case StatementKind::kUnlisten: return "unlisten";
    case StatementKind::kNotify: return "notify";
    case StatementKind::kLock: return "lock";
    case StatementKind::kCall: return "call";
    case StatementKind::kDo: return "do";
    case StatementKind::kExplain: return "explain";
    case StatementKind::kCursor: return "cursor";
    case StatementKind::kOther: return "other";
  }
  return "unknown";
}

std::optional<StatementKind> StatementKindOfKeyword(std::string_view kw) {
  if (kw == "with" || kw == "copy" || kw == "prepare") return std::nullopt;
  return KindOfKeyword(kw);
}

absl::StatusOr<StatementAnalysis> AnalyzeStatement(std::string_view sql, LexOptions options) {
  absl::StatusOr<std::vector<Token>> tokens = Lex(sql, options);
  if (!tokens.ok()) return tokens.status();
  if (!options.standard_conforming_strings && sql.find('\\') != std::string_view::npos) {
    // libpg_query lexes as if standard_conforming_strings were on: a
    // backslash in a plain string would be read differently. Not judged.
    return absl::InvalidArgumentError("standard_conforming_strings is off and the text has a backslash");
  }
  const absl::StatusOr<StatementAnalysis>& a = Memoized(*tokens, sql);
  if (!a.ok()) return a.status();
  StatementAnalysis out = *a;
  out.normalized = NormalizedText(*tokens);
  out.fingerprint = Fnv1a64(out.normalized);
  return out;
}

const absl::StatusOr<std::vector<Token>>& SqlText::tokens() const {
  if (!tokens_) tokens_.emplace(Lex(sql_));
  return *tokens_;
}

const absl::StatusOr<StatementAnalysis>& SqlText::analysis() const {
  if (!analysis_) {
    const absl::StatusOr<std::vector<Token>>& tokens = this->tokens();
    if (!tokens.ok()) {
      analysis_.emplace(tokens.status());
    } else {
      analysis_.emplace(Memoized(*tokens, sql_));  // a copy; normalized on demand
    }
  }
  return *analysis_;
}

const StatementAnalysis* SqlText::normalized_analysis_if_done() const {
  if (!analysis_ || !analysis_->ok()) return nullptr;
  if (!normalized_) {
    (*analysis_)->fingerprint = NormalizedFingerprint(**tokens_);
    normalized_ = true;
  }
  return &**analysis_;
}

std::string SqlText::normalized_text() const {
  const absl::StatusOr<std::vector<Token>>& t = tokens();
  return t.ok() ? NormalizedText(*t) : std::string();
}

}  // namespace hyperpool::cache
