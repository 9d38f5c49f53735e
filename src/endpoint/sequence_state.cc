#include "endpoint/sequence_state.h"

#include <algorithm>
#include <array>

#include "absl/strings/ascii.h"

namespace hyperpool::endpoint {
namespace {

bool IsWordChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' ||
         static_cast<unsigned char>(c) >= 0x80;
}

// Words that make a statement possibly call nextval wherever they appear.
constexpr std::array<std::string_view, 16> kSequenceWords = {
    "nextval", "setval", "insert", "update", "delete", "merge",   "copy",  "truncate",
    "do",      "call",   "execute", "refresh", "create", "alter", "import", "fetch"};

// Names that may stand before '(' in a plain read without calling a user
// function: SQL keywords and common built-in functions (none calls
// nextval; currval and lastval only read the state). Sorted, for binary
// search.
constexpr std::array<std::string_view, 96> kHarmlessCalls = {
    "abs", "all", "and", "any", "array", "array_agg", "array_length", "as", "avg", "between", "bigint",
    "bit", "bool_and", "bool_or", "btrim", "by", "case", "cast", "ceil", "char", "char_length", "character",
    "coalesce", "concat", "concat_ws", "count", "current_setting", "currval", "date_part", "date_trunc", "decimal",
    "distinct", "else", "exists", "extract", "filter", "float", "floor", "format", "from", "generate_series",
    "greatest", "group", "having", "in", "int", "integer", "interval", "is", "join", "json_agg",
    "json_build_object", "jsonb_agg", "jsonb_build_object", "lastval", "lateral", "least", "left", "length", "like",
    "limit", "lower", "lpad", "ltrim", "max", "md5", "min", "not", "now", "nullif", "numeric", "octet_length",
    "offset", "on", "or", "over", "partition", "pg_backend_pid", "position", "rank", "replace", "right",
    "round", "row", "row_number", "rpad", "rtrim", "select", "split_part", "string_agg", "substr",
    "substring", "sum", "then", "to_char", "upper"};

// The rest of the harmless list (kept apart so each array stays sorted).
constexpr std::array<std::string_view, 14> kHarmlessCalls2 = {
    "timestamp", "timestamptz", "to_timestamp", "trim", "union", "unnest", "using", "values",
    "varchar", "version", "when", "where", "with", "within"};

bool IsHarmlessCall(std::string_view lowered) {
  return std::binary_search(kHarmlessCalls.begin(), kHarmlessCalls.end(), lowered) ||
         std::binary_search(kHarmlessCalls2.begin(), kHarmlessCalls2.end(), lowered);
}

}  // namespace

bool MayUseSequences(std::string_view sql) {
  std::size_t i = 0;
  while (i < sql.size()) {
    const char c = sql[i];
    if (c == '"') {
      // A quoted name: a call of it counts (its body is skipped).
      std::size_t end = sql.find('"', i + 1);
      while (end != std::string_view::npos && end + 1 < sql.size() && sql[end + 1] == '"') {
        end = sql.find('"', end + 2);
      }
      if (end == std::string_view::npos) return true;
      std::size_t k = end + 1;
      while (k < sql.size() && absl::ascii_isspace(static_cast<unsigned char>(sql[k]))) ++k;
      if (k < sql.size() && sql[k] == '(') return true;
      i = end + 1;
      continue;
    }
    if (!IsWordChar(c) || absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      ++i;
      while (i < sql.size() && absl::ascii_isdigit(static_cast<unsigned char>(sql[i]))) ++i;
      continue;
    }
    const std::size_t start = i;
    while (i < sql.size() && IsWordChar(sql[i])) ++i;
    const std::string_view word = sql.substr(start, i - start);
    std::size_t k = i;
    while (k < sql.size() && absl::ascii_isspace(static_cast<unsigned char>(sql[k]))) ++k;
    const bool call = k < sql.size() && sql[k] == '(';
    if (word.size() > 24) {
      if (call) return true;  // longer than every listed name
      continue;
    }
    char buffer[25];
    for (std::size_t k = 0; k < word.size(); ++k) buffer[k] = absl::ascii_tolower(static_cast<unsigned char>(word[k]));
    const std::string_view lower(buffer, word.size());
    if (std::find(kSequenceWords.begin(), kSequenceWords.end(), lower) != kSequenceWords.end()) return true;
    if (call) {
      const bool qualified = start > 0 && sql[start - 1] == '.';
      if (qualified || !IsHarmlessCall(lower)) return true;
    }
  }
  return false;
}

}  // namespace hyperpool::endpoint
