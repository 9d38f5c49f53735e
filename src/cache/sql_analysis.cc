// The statement analysis half of sql_analysis.h: a single pass over the
// tokens of each statement with a stack of parenthesis frames. It is not a
// parser; it recognises the few shapes that matter for caching and
// invalidation and errs towards "function call" / "relation" when unsure.

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "cache/sql_analysis.h"
#include "cache/string_hash.h"

namespace hyperpool::cache {
namespace {

using Set = absl::flat_hash_set<std::string_view, StringHash, StringEq>;

// Keywords that may be followed by '(' without being a function call.
const Set& NotFunctionKeywords() {
  static const Set* s = new Set{
      "all", "and", "any", "array", "as", "asc", "between", "by", "case", "cast", "check",
      "coalesce", "collate", "conflict", "constraint", "default", "delete", "desc", "distinct",
      "do", "else", "end", "except", "exists", "filter", "for", "from", "greatest", "group",
      "grouping", "having", "if", "ilike", "in", "insert", "intersect", "into", "is", "join",
      "key", "lateral", "least", "like", "limit", "merge", "not", "nullif", "offset", "on",
      "only", "or", "order", "over", "partition", "primary", "recursive", "references",
      "returning", "row", "rows", "select", "set", "sets", "similar", "some", "table", "then",
      "union", "unique", "update", "using", "values", "when", "where", "window", "with",
      "within", "zone", "materialized", "to", "escape", "xmlattributes", "xmlconcat",
      "xmlelement", "xmlforest", "xmlnamespaces", "xmlparse", "xmlpi", "xmlroot",
      "xmlserialize", "xmltable", "ordinality", "nothing", "matched", "overriding"};
  return *s;
}

// SQL type names that take a typmod in parentheses: numeric(10,2), varchar(20).
const Set& TypmodTypeNames() {
  static const Set* s = new Set{"numeric", "decimal",   "dec",      "varchar", "char",
                                "character", "varying", "nchar",    "bit",     "time",
                                "timestamp", "interval", "float",   "national"};
  return *s;
}

// SQL-standard value functions (no parentheses needed), never immutable.
const Set& ValueFunctions() {
  static const Set* s = new Set{"current_date",     "current_time",   "current_timestamp",
                                "localtime",        "localtimestamp", "current_user",
                                "session_user",     "user",           "current_role",
                                "current_schema",   "current_catalog", "system_user"};
  return *s;
}

// Words after a FROM item that cannot be its alias.
const Set& AliasTerminators() {
  static const Set* s = new Set{
      "where", "join", "inner", "left", "right", "full", "cross", "natural", "on", "using",
      "group", "order", "limit", "offset", "fetch", "for", "union", "intersect", "except",
      "window", "having", "tablesample", "returning", "set", "when", "into", "values",
      "default", "select", "overriding", "with", "do", "from", "and", "or", "then", "else",
      "end", "as", "to", "lateral", "only", "outer", "table", "delete", "update", "insert",
      "merge", "not", "is", "in"};
  return *s;
}

// Words that end a FROM list in the current parenthesis frame.
const Set& FromListEnd() {
  static const Set* s = new Set{"where",     "group", "having", "window",    "order",
                                "limit",     "offset", "fetch", "for",       "union",
                                "intersect", "except", "returning", "set",   "values",
                                "select",    "into",  "when",   "conflict"};
  return *s;
}

// Casting a time word to one of these keeps it a plain string.
const Set& NonTimeTypes() {
  static const Set* s = new Set{"text",  "varchar", "character", "char",    "bpchar",  "name",
                                "json",  "jsonb",   "xml",       "bytea",   "citext",  "uuid",
                                "bool",  "boolean", "jsonpath",  "tsquery", "tsvector", "regclass"};
  return *s;
}

bool ContainsTimeWord(std::string_view value) {
  std::string lower(value);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  for (std::string_view w : {"now", "today", "tomorrow", "yesterday"}) {
    if (lower.find(w) != std::string::npos) return true;
  }
  return false;
}

bool IsName(const Token& t) {
  return t.kind == TokenKind::kIdentifier || t.kind == TokenKind::kQuotedIdentifier;
}

template <typename T>
void AddUnique(std::vector<T>& v, T x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(std::move(x));
}

StatementKind KindOfKeyword(std::string_view kw) {
  static const std::pair<std::string_view, StatementKind> kTable[] = {
      {"select", StatementKind::kSelect},       {"values", StatementKind::kSelect},
      {"table", StatementKind::kSelect},        {"insert", StatementKind::kInsert},
      {"update", StatementKind::kUpdate},       {"delete", StatementKind::kDelete},
      {"merge", StatementKind::kMerge},         {"truncate", StatementKind::kTruncate},
      {"create", StatementKind::kDdl},          {"alter", StatementKind::kDdl},
      {"drop", StatementKind::kDdl},            {"comment", StatementKind::kDdl},
      {"grant", StatementKind::kDdl},           {"revoke", StatementKind::kDdl},
      {"security", StatementKind::kDdl},        {"refresh", StatementKind::kDdl},
      {"import", StatementKind::kDdl},          {"reassign", StatementKind::kDdl},
      {"vacuum", StatementKind::kMaintenance},  {"analyze", StatementKind::kMaintenance},
      {"analyse", StatementKind::kMaintenance}, {"cluster", StatementKind::kMaintenance},
      {"reindex", StatementKind::kMaintenance}, {"checkpoint", StatementKind::kMaintenance},
      {"begin", StatementKind::kTransaction},   {"start", StatementKind::kTransaction},
      {"commit", StatementKind::kTransaction},  {"end", StatementKind::kTransaction},
      {"rollback", StatementKind::kTransaction}, {"abort", StatementKind::kTransaction},
      {"savepoint", StatementKind::kTransaction}, {"release", StatementKind::kTransaction},
      {"set", StatementKind::kSet},             {"reset", StatementKind::kSet},
      {"show", StatementKind::kShow},           {"prepare", StatementKind::kPrepare},
      {"execute", StatementKind::kExecute},     {"deallocate", StatementKind::kDeallocate},
      {"discard", StatementKind::kDiscard},     {"listen", StatementKind::kListen},
      {"unlisten", StatementKind::kUnlisten},   {"notify", StatementKind::kNotify},
      {"lock", StatementKind::kLock},           {"call", StatementKind::kCall},
      {"do", StatementKind::kDo},               {"explain", StatementKind::kExplain},
      {"declare", StatementKind::kCursor},      {"fetch", StatementKind::kCursor},
      {"move", StatementKind::kCursor},         {"close", StatementKind::kCursor},
  };
  for (const auto& [k, v] : kTable) {
    if (k == kw) return v;
  }
  return StatementKind::kOther;
}

class Analyzer {
 public:
  Analyzer(const std::vector<Token>& tokens, StatementAnalysis& out) : t_(tokens), out_(out) {
    // Matching parentheses; an unmatched '(' matches the end.
    match_.assign(t_.size(), t_.size());
    std::vector<size_t> stack;
    for (size_t i = 0; i < t_.size(); ++i) {
      if (t_[i].kind == TokenKind::kLParen) {
        stack.push_back(i);
      } else if (t_[i].kind == TokenKind::kRParen && !stack.empty()) {
        match_[stack.back()] = i;
        match_[i] = stack.back();
        stack.pop_back();
      }
    }
  }

  void Run() {
    size_t b = 0;
    for (size_t i = 0; i <= t_.size(); ++i) {
      if (i == t_.size() || t_[i].kind == TokenKind::kSemicolon) {
        if (i > b) Statement(b, i);
        b = i + 1;
      }
    }
    out_.statement_count = out_.kinds.size();
    out_.kind = out_.kinds.empty() ? StatementKind::kEmpty : out_.kinds.front();
  }

 private:
  struct Frame {
    bool function_args = false;  // The parentheses of a function call.
    bool from_list = false;      // Inside a FROM / USING list at this depth.
  };

  const Token* At(size_t i) const { return i < end_ ? &t_[i] : nullptr; }
  bool Kw(size_t i, std::string_view kw) const {
    const Token* t = At(i);
    return t != nullptr && t->IsKeyword(kw);
  }
  bool KindAt(size_t i, TokenKind k) const {
    const Token* t = At(i);
    return t != nullptr && t->kind == k;
  }
  // The previous token inside the statement, or nullptr at its start.
  const Token* Prev(size_t i) const { return i > begin_ ? &t_[i - 1] : nullptr; }
  bool PrevIsKw(size_t i, std::string_view kw) const {
    const Token* p = Prev(i);
    return p != nullptr && p->IsKeyword(kw);
  }

  // Index one past a dotted name chain starting at i (i must be a name).
  size_t NameChainEnd(size_t i) const {
    size_t j = i + 1;
    while (KindAt(j, TokenKind::kDot) && At(j + 1) != nullptr && IsName(*At(j + 1))) j += 2;
    return j;
  }
  QualifiedName NameOf(size_t i, size_t end) const {
    std::vector<const Token*> parts;
    for (size_t j = i; j < end; j += 2) parts.push_back(&t_[j]);
    QualifiedName n;
    n.name = parts.back()->value;
    if (parts.size() >= 2) n.schema = parts[parts.size() - 2]->value;
    return n;
  }

  StatementKind Classify(size_t b) {
    size_t i = b;
    while (KindAt(i, TokenKind::kLParen)) ++i;
    const Token* first = At(i);
    if (first == nullptr || first->kind != TokenKind::kIdentifier) return StatementKind::kOther;
    const std::string& kw = first->value;
    if (kw == "with") return MainKindAfterWith(i);
    if (kw == "prepare") {
      return Kw(i + 1, "transaction") ? StatementKind::kTransaction : StatementKind::kPrepare;
    }
    if (kw == "copy") {
      for (size_t j = i + 1; j < end_; ++j) {
        if (t_[j].kind == TokenKind::kLParen) {
          j = match_[j];
          continue;
        }
        if (t_[j].IsKeyword("to")) return StatementKind::kCopyTo;
        if (t_[j].IsKeyword("from")) return StatementKind::kCopyFrom;
      }
      return StatementKind::kCopyFrom;
    }
    return KindOfKeyword(kw);
  }

  // WITH [RECURSIVE] name [(cols)] AS [NOT] [MATERIALIZED] (body)
  //   [SEARCH ... SET col] [CYCLE ... USING col] [, ...] main-statement.
  // Records CTE names (not relations) and their column-list parentheses
  // (not function calls). Returns the index of the main statement's first
  // token (or end_).
  size_t ParseWith(size_t i) {
    size_t j = i + 1;
    if (Kw(j, "recursive")) ++j;
    while (j < end_) {
      if (!IsName(t_[j])) return j;
      if (t_[j].kind == TokenKind::kIdentifier) cte_names_.insert(t_[j].value);
      not_function_.insert(j);
      ++j;
      if (KindAt(j, TokenKind::kLParen)) {
        not_function_paren_.insert(j);
        j = match_[j] + 1;
      }
      if (!Kw(j, "as")) return j;
      ++j;
      if (Kw(j, "not")) ++j;
      if (Kw(j, "materialized")) ++j;
      if (!KindAt(j, TokenKind::kLParen)) return j;
      j = match_[j] + 1;
      if (Kw(j, "search")) {
        while (j < end_ && !t_[j].IsKeyword("set")) ++j;
        j += 2;
      }
      if (Kw(j, "cycle")) {
        while (j < end_ && !t_[j].IsKeyword("using")) ++j;
        j += 2;
      }
      if (!KindAt(j, TokenKind::kComma)) return j;
      ++j;
    }
    return j;
  }

  StatementKind MainKindAfterWith(size_t i) {
    size_t j = ParseWith(i);
    while (KindAt(j, TokenKind::kLParen)) ++j;
    if (At(j) == nullptr || t_[j].kind != TokenKind::kIdentifier) return StatementKind::kOther;
    StatementKind k = KindOfKeyword(t_[j].value);
    switch (k) {
      case StatementKind::kSelect:
      case StatementKind::kInsert:
      case StatementKind::kUpdate:
      case StatementKind::kDelete:
      case StatementKind::kMerge:
        return k;
      default:
        return StatementKind::kOther;
    }
  }

  void AddRelation(QualifiedName n, bool write) {
    if (!collect_relations_) return;
    if (!write && n.schema.empty() && cte_names_.contains(n.name)) return;
    AddUnique(write ? out_.relations_written : out_.relations_read, std::move(n));
  }

  // After a FROM item: [AS] alias [(columns)]. Returns the next index to walk.
  size_t ParseAlias(size_t j) {
    bool as = Kw(j, "as");
    if (as) ++j;
    const Token* a = At(j);
    if (a == nullptr) return j;
    bool is_alias = a->kind == TokenKind::kQuotedIdentifier ||
                    (a->kind == TokenKind::kIdentifier &&
                     (as || !AliasTerminators().contains(a->value)));
    if (!is_alias) return j;
    not_function_.insert(j);
    ++j;
    if (KindAt(j, TokenKind::kLParen)) not_function_paren_.insert(j);
    return j;
  }

  // One FROM item (or a write target) starting at j. Returns the next index
  // to walk.
  size_t ParseFromItem(size_t j, bool write) {
    while (Kw(j, "only") || Kw(j, "lateral")) ++j;
    if (Kw(j, "rows") && Kw(j + 1, "from")) return j + 2;  // ROWS FROM (f(), g())
    const Token* t = At(j);
    if (t == nullptr) return j;
    if (t->kind == TokenKind::kLParen) {
      alias_after_paren_.insert(match_[j]);
      return j;
    }
    if (!IsName(*t)) return j;
    if (t->kind == TokenKind::kIdentifier && AliasTerminators().contains(t->value)) {
      return j;
    }
    size_t end = NameChainEnd(j);
    if (!write && KindAt(end, TokenKind::kLParen)) {
      // A table function: the walk reports it; alias after its ')'.
      alias_after_paren_.insert(match_[end]);
      return j;
    }
    AddRelation(NameOf(j, end), write);
    for (size_t k = j; k < end; k += 2) not_function_.insert(k);
    if (KindAt(end, TokenKind::kOperator) && t_[end].text == "*") ++end;  // legacy "t *"
    if (write && KindAt(end, TokenKind::kLParen)) {
      not_function_paren_.insert(end);
      return end;
    }
    return ParseAlias(end);
  }

  size_t ParseTruncate(size_t j) {
    if (Kw(j, "table")) ++j;
    while (j < end_) {
      if (Kw(j, "only")) ++j;
      if (At(j) == nullptr || !IsName(t_[j])) return j;
      size_t end = NameChainEnd(j);
      AddRelation(NameOf(j, end), /*write=*/true);
      j = end;
      if (KindAt(j, TokenKind::kOperator) && t_[j].text == "*") ++j;
      if (!KindAt(j, TokenKind::kComma)) return j;
      ++j;
    }
    return j;
  }

  void CheckTimeLiteral(size_t i) {
    if (!ContainsTimeWord(t_[i].value)) return;
    // 'pattern' after LIKE / ILIKE / SIMILAR TO / ~ is matched as text.
    const Token* p = Prev(i);
    if (p != nullptr && (p->IsKeyword("like") || p->IsKeyword("ilike") || p->IsKeyword("to") ||
                         p->IsKeyword("escape") ||
                         (p->kind == TokenKind::kOperator &&
                          (p->text.starts_with("~") || p->text.starts_with("!~"))))) {
      return;
    }
    // 'now'::text is a string; 'now'::text::timestamptz is not.
    if (KindAt(i + 1, TokenKind::kDoubleColon) && At(i + 2) != nullptr &&
        t_[i + 2].kind == TokenKind::kIdentifier && NonTimeTypes().contains(t_[i + 2].value)) {
      size_t k = i + 3;
      if (KindAt(k, TokenKind::kLParen)) k = match_[k] + 1;
      if (!KindAt(k, TokenKind::kDoubleColon)) return;
    }
    out_.has_time_literal = true;
  }

  // Name chain [i, end) followed by '(' at `end`: a function call?
  bool IsFunctionCall(size_t i, size_t end) const {
    if (not_function_paren_.contains(end) || not_function_.contains(i)) return false;
    const Token* p = Prev(i);
    if (p != nullptr) {
      if (p->kind == TokenKind::kDoubleColon || p->kind == TokenKind::kRParen) return false;
      if (p->IsKeyword("as")) return false;
    }
    if (end == i + 1 && t_[i].kind == TokenKind::kIdentifier) {
      const std::string& v = t_[i].value;
      if (NotFunctionKeywords().contains(v) || TypmodTypeNames().contains(v) ||
          ValueFunctions().contains(v)) {
        return false;
      }
      if ((v == "rollup" || v == "cube") && p != nullptr && p->IsKeyword("by")) return false;
    }
    return true;
  }

  void Statement(size_t b, size_t e) {
    begin_ = b;
    end_ = e;
    cte_names_.clear();
    StatementKind kind = Classify(b);
    out_.kinds.push_back(kind);
    switch (kind) {
      case StatementKind::kSelect: case StatementKind::kInsert: case StatementKind::kUpdate:
      case StatementKind::kDelete: case StatementKind::kMerge: case StatementKind::kTruncate:
      case StatementKind::kCopyFrom: case StatementKind::kCopyTo: case StatementKind::kExplain:
      case StatementKind::kPrepare:
        collect_relations_ = true;
        break;
      default:
        collect_relations_ = false;
        break;
    }
    bool copy = kind == StatementKind::kCopyFrom || kind == StatementKind::kCopyTo;
    bool using_consumed = false;

    std::vector<Frame> frames(1);
    for (size_t i = b; i < e; ++i) {
      const Token& tok = t_[i];
      switch (tok.kind) {
        case TokenKind::kLParen: {
          Frame f;
          f.function_args = function_paren_.contains(i);
          frames.push_back(f);
          // (INSERT INTO ... | UPDATE x | DELETE FROM | MERGE INTO) inside
          // parentheses: only valid as a data-modifying CTE body.
          if ((Kw(i + 1, "insert") && Kw(i + 2, "into")) ||
              (Kw(i + 1, "delete") && Kw(i + 2, "from")) ||
              (Kw(i + 1, "merge") && Kw(i + 2, "into")) ||
              (Kw(i + 1, "update") && At(i + 2) != nullptr && IsName(t_[i + 2]) &&
               !Kw(i + 2, "set"))) {
            out_.has_data_modifying_cte = true;
          }
          continue;
        }
        case TokenKind::kRParen:
          if (frames.size() > 1) frames.pop_back();
          if (alias_after_paren_.contains(i)) {
            size_t next = ParseAlias(i + 1);
            i = next - 1;
          }
          continue;
        case TokenKind::kComma:
          if (frames.back().from_list) i = ParseFromItem(i + 1, false) - 1;
          continue;
        case TokenKind::kString:
          CheckTimeLiteral(i);
          continue;
        case TokenKind::kIdentifier:
        case TokenKind::kQuotedIdentifier:
          break;
        default:
          continue;
      }

      const Token* prev = Prev(i);
      bool after_dot = prev != nullptr && prev->kind == TokenKind::kDot;
      if (tok.kind == TokenKind::kIdentifier && !after_dot) {
        const std::string& v = tok.value;
        Frame& top = frames.back();
        if (FromListEnd().contains(v)) top.from_list = false;

        if (ValueFunctions().contains(v)) {
          AddUnique(out_.value_functions, v);
          continue;
        }
        if (v == "for") {
          if (Kw(i + 1, "update") || Kw(i + 1, "share") ||
              (Kw(i + 1, "no") && Kw(i + 2, "key") && Kw(i + 3, "update")) ||
              (Kw(i + 1, "key") && Kw(i + 2, "share"))) {
            out_.has_row_locks = true;
          }
          continue;
        }
        if (v == "into") {
          if (kind == StatementKind::kSelect && !PrevIsKw(i, "insert") && !PrevIsKw(i, "merge")) {
            out_.has_select_into = true;
          }
          continue;
        }
        if (v == "with" && (prev == nullptr || prev->kind == TokenKind::kLParen)) {
          ParseWith(i);
          continue;
        }
        if (v == "from") {
          if (top.function_args || (copy && frames.size() == 1) || PrevIsKw(i, "distinct")) continue;
          top.from_list = true;
          i = ParseFromItem(i + 1, false) - 1;
          continue;
        }
        if (v == "join") {
          top.from_list = true;
          i = ParseFromItem(i + 1, false) - 1;
          continue;
        }
        if (v == "using" && !using_consumed && frames.size() == 1 &&
            (kind == StatementKind::kDelete || kind == StatementKind::kMerge)) {
          using_consumed = true;
          top.from_list = kind == StatementKind::kDelete;
          i = ParseFromItem(i + 1, false) - 1;
          continue;
        }
        if (v == "insert" && Kw(i + 1, "into")) {
          i = ParseFromItem(i + 2, true) - 1;
          continue;
        }
        if (v == "delete" && Kw(i + 1, "from")) {
          i = ParseFromItem(i + 2, true) - 1;
          continue;
        }
        if (v == "merge" && Kw(i + 1, "into")) {
          i = ParseFromItem(i + 2, true) - 1;
          continue;
        }
        if (v == "update") {
          static const Set kNotStatement = {"for",   "key", "do",      "then", "on",
                                            "of",    "before", "after", "or",  "instead"};
          if (prev == nullptr || (prev->kind != TokenKind::kComma &&
                                  !(prev->kind == TokenKind::kIdentifier &&
                                    kNotStatement.contains(prev->value)))) {
            i = ParseFromItem(i + 1, true) - 1;
          }
          continue;
        }
        if (v == "truncate" && prev == nullptr) {
          i = ParseTruncate(i + 1) - 1;
          continue;
        }
        if (v == "copy" && prev == nullptr) {
          if (At(i + 1) != nullptr && IsName(t_[i + 1])) {
            size_t end = NameChainEnd(i + 1);
            AddRelation(NameOf(i + 1, end), kind == StatementKind::kCopyFrom);
            if (KindAt(end, TokenKind::kLParen)) not_function_paren_.insert(end);
            i = end - 1;
          }
          continue;
        }
        if (v == "table" &&
            (prev == nullptr || prev->kind == TokenKind::kLParen || prev->IsKeyword("union") ||
             prev->IsKeyword("intersect") || prev->IsKeyword("except") ||
             prev->IsKeyword("all") || prev->IsKeyword("distinct"))) {
          if (At(i + 1) != nullptr && IsName(t_[i + 1])) {
            size_t end = NameChainEnd(i + 1);
            AddRelation(NameOf(i + 1, end), false);
            i = end - 1;
          }
          continue;
        }
      }
      if (after_dot) continue;

      // A (possibly qualified) name followed by '('.
      size_t end = NameChainEnd(i);
      if (KindAt(end, TokenKind::kLParen) && IsFunctionCall(i, end)) {
        QualifiedName n = NameOf(i, end);
        if (n.schema.empty() && n.name == "trim" && t_[i].kind == TokenKind::kIdentifier) {
          n.name = "btrim";
        }
        AddUnique(out_.functions, std::move(n));
        function_paren_.insert(end);
      }
      i = end - 1;
    }
  }

  const std::vector<Token>& t_;
  StatementAnalysis& out_;
  std::vector<size_t> match_;
  size_t begin_ = 0;
  size_t end_ = 0;
  bool collect_relations_ = true;
  absl::flat_hash_set<std::string> cte_names_;
  absl::flat_hash_set<size_t> not_function_;        // Name tokens that are not calls.
  absl::flat_hash_set<size_t> not_function_paren_;  // '(' of column lists.
  absl::flat_hash_set<size_t> function_paren_;      // '(' of function calls.
  absl::flat_hash_set<size_t> alias_after_paren_;   // ')' ending a FROM item.
};

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

std::optional<StatementKind> LeadingStatementKind(std::span<const Token> statement) {
  // As Analyzer::Classify.
  size_t i = 0;
  while (i < statement.size() && statement[i].kind == TokenKind::kLParen) ++i;
  if (i == statement.size() || statement[i].kind != TokenKind::kIdentifier) return StatementKind::kOther;
  return StatementKindOfKeyword(statement[i].value);
}

std::optional<StatementKind> StatementKindOfKeyword(std::string_view kw) {
  if (kw == "with" || kw == "copy" || kw == "prepare") return std::nullopt;
  return KindOfKeyword(kw);
}

absl::StatusOr<StatementAnalysis> AnalyzeStatement(std::string_view sql, LexOptions options) {
  absl::StatusOr<std::vector<Token>> tokens = Lex(sql, options);
  if (!tokens.ok()) return tokens.status();
  StatementAnalysis out;
  Analyzer(*tokens, out).Run();
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
      StatementAnalysis out;
      Analyzer(*tokens, out).Run();
      analysis_.emplace(std::move(out));  // normalized on demand
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
