// The statement analysis half of sql_analysis.h. The judge is PostgreSQL's
// own grammar (libpg_query, sql_parse_tree.cc); this file keys its answers
// by statement shape so that a text is parsed once per shape, not once per
// literal: the key is the lexer's normalized text (literals replaced by '?')
// except that a string literal holding a time word ('now', 'today', ...)
// stays verbatim, because its value changes the answer (has_time_literal).

#include <algorithm>
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

// The analyses of the shapes this thread parsed last, most recently used
// first. A memo of a pure function (the key decides the answer), so sharing
// it between two hyperpool instances in one process changes nothing either
// sees; one per thread, so no lock is taken on the per-query path.
class AnalysisMemo {
 public:
  static constexpr size_t kCapacity = 4096;
  static constexpr size_t kMaxKeyBytes = 16 << 10;  // longer texts are parsed each time

  const absl::StatusOr<StatementAnalysis>& Get(const std::vector<Token>& tokens, std::string_view sql) {
    ShapeKey(tokens, key_);
    if (key_.size() > kMaxKeyBytes) {
      uncached_ = ParseAnalysis(sql);
      return uncached_;
    }
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

 private:
  using Entry = std::pair<std::string, absl::StatusOr<StatementAnalysis>>;
  std::string key_;
  absl::StatusOr<StatementAnalysis> uncached_;
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
