#include "endpoint/session.h"

#include <cctype>
#include <string>
#include <vector>

#include "protocol/backend_messages.h"

namespace hyperpool::endpoint {
namespace {

// A tiny SQL tokenizer: words (ASCII letters, case-folded), ';', and
// anything else as a single "other" token. Skips whitespace and comments.
class Tokens {
 public:
  explicit Tokens(std::string_view sql) : sql_(sql) {}

  // The next token: a lower-case word, ";" , "" at the end, or "?" for anything else.
  std::string Next() {
    SkipSpaceAndComments();
    if (pos_ >= sql_.size()) return "";
    char c = sql_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::string word;
      while (pos_ < sql_.size() && (std::isalnum(static_cast<unsigned char>(sql_[pos_])) || sql_[pos_] == '_')) {
        word.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(sql_[pos_]))));
        ++pos_;
      }
      return word;
    }
    ++pos_;
    return c == ';' ? ";" : "?";
  }

 private:
  void SkipSpaceAndComments() {
    for (;;) {
      while (pos_ < sql_.size() && std::isspace(static_cast<unsigned char>(sql_[pos_]))) ++pos_;
      if (sql_.substr(pos_, 2) == "--") {
        while (pos_ < sql_.size() && sql_[pos_] != '\n') ++pos_;
        continue;
      }
      if (sql_.substr(pos_, 2) == "/*") {
        // PostgreSQL block comments nest.
        int depth = 0;
        while (pos_ < sql_.size()) {
          if (sql_.substr(pos_, 2) == "/*") {
            ++depth;
            pos_ += 2;
          } else if (sql_.substr(pos_, 2) == "*/") {
            pos_ += 2;
            if (--depth == 0) break;
          } else {
            ++pos_;
          }
        }
        continue;
      }
      return;
    }
  }

  std::string_view sql_;
  std::size_t pos_ = 0;
};

}  // namespace

bool IsTransactionEnd(std::string_view sql) {
  Tokens tokens(sql);
  std::string word = tokens.Next();
  if (word != "rollback" && word != "abort" && word != "commit" && word != "end") return false;
  std::string next = tokens.Next();
  if (next == "work" || next == "transaction") next = tokens.Next();
  if (next == "and") {
    next = tokens.Next();
    if (next == "no") next = tokens.Next();
    if (next != "chain") return false;
    next = tokens.Next();
  }
  while (next == ";") next = tokens.Next();
  return next.empty();
}

bool AppendFatalAsError(std::string_view error_payload, std::string& out) {
  auto error = protocol::DecodeErrorResponse(error_payload);
  if (!error.ok()) return false;
  std::string_view severity = error->severity();
  if (severity != "FATAL" && severity != "PANIC") return false;
  protocol::ErrorResponse copy = *error;
  for (auto& field : copy.fields) {
    if (field.code == 'S' || field.code == 'V') field.value = "ERROR";
  }
  protocol::Encode(copy, out);
  return true;
}

}  // namespace hyperpool::endpoint
