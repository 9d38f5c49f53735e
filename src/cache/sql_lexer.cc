// The lexer half of sql_analysis.h (PostgreSQL docs, "Lexical Structure";
// src/backend/parser/scan.l for the corner cases).

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/sql_analysis.h"

namespace hyperpool::cache {
namespace {

// absl::StrCat takes absl::string_view, which is not std::string_view in
// Debian's abseil: concatenate std::string_views ourselves.
template <typename... Parts>
std::string Cat(const Parts&... parts) {
  std::string out;
  (out.append(std::string_view(parts)), ...);
  return out;
}

bool IsSpace(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsDigit(unsigned char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
// scan.l: ident_start [A-Za-z\200-\377_], ident_cont adds [0-9\$].
bool IsIdentStart(unsigned char c) { return IsAlpha(c) || c == '_' || c >= 0x80; }
bool IsIdentCont(unsigned char c) { return IsIdentStart(c) || IsDigit(c) || c == '$'; }
bool IsOpChar(unsigned char c) {
  return std::string_view("+-*/<>=~!@#%^&|`?").find(static_cast<char>(c)) != std::string_view::npos;
}
char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

absl::Status Unterminated(std::string_view what, size_t offset) {
  return absl::InvalidArgumentError(Cat("unterminated ", what, " at offset ", std::to_string(offset)));
}

class Lexer {
 public:
  Lexer(std::string_view sql, LexOptions options) : s_(sql), options_(options) {}

  absl::StatusOr<std::vector<Token>> Run() {
    std::vector<Token> tokens;
    // A guess for short statements only: a Token is 64 bytes, so reserving
    // by the text's size would make a 50 MB literal cost 800 MB up front
    // (issue: memory must stay proportional to what arrived, not multiply it).
    tokens.reserve(std::min<size_t>(s_.size() / 4 + 1, 256));
    while (true) {
      SkipSpaceAndComments();
      if (!status_.ok()) return status_;
      if (pos_ >= s_.size()) break;
      Token t;
      if (!Next(t)) return status_;
      tokens.push_back(std::move(t));
    }
    return tokens;
  }

 private:
  unsigned char At(size_t i) const { return i < s_.size() ? static_cast<unsigned char>(s_[i]) : 0; }

  void SkipSpaceAndComments() {
    while (pos_ < s_.size()) {
      unsigned char c = At(pos_);
      if (IsSpace(c)) {
        ++pos_;
      } else if (c == '-' && At(pos_ + 1) == '-') {
        while (pos_ < s_.size() && s_[pos_] != '\n' && s_[pos_] != '\r') ++pos_;
      } else if (c == '/' && At(pos_ + 1) == '*') {
        // Block comments nest in PostgreSQL (unlike the SQL standard's C style).
        size_t start = pos_;
        int depth = 0;
        while (pos_ < s_.size()) {
          if (At(pos_) == '/' && At(pos_ + 1) == '*') {
            ++depth;
            pos_ += 2;
          } else if (At(pos_) == '*' && At(pos_ + 1) == '/') {
            --depth;
            pos_ += 2;
            if (depth == 0) break;
          } else {
            ++pos_;
          }
        }
        if (depth != 0) {
          status_ = Unterminated("block comment", start);
          return;
        }
      } else {
        return;
      }
    }
  }

  Token Make(TokenKind kind, size_t start, std::string value = {}) {
    Token t;
    t.kind = kind;
    t.text = s_.substr(start, pos_ - start);
    t.value = std::move(value);
    t.offset = start;
    return t;
  }

  // Reads a quoted body starting after the opening quote `q`. A doubled
  // quote is an escaped quote; `backslash` also enables C-style escapes.
  bool ReadQuoted(char q, bool backslash, std::string& value) {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == q) {
        if (At(pos_ + 1) == static_cast<unsigned char>(q)) {
          value.push_back(q);
          pos_ += 2;
          continue;
        }
        ++pos_;
        return true;
      }
      if (backslash && c == '\\' && pos_ + 1 < s_.size()) {
        char e = s_[pos_ + 1];
        switch (e) {
          case 'n': value.push_back('\n'); break;
          case 't': value.push_back('\t'); break;
          case 'r': value.push_back('\r'); break;
          case 'b': value.push_back('\b'); break;
          case 'f': value.push_back('\f'); break;
          default: value.push_back(e); break;  // \' \\ and (undecoded) octal/hex/unicode
        }
        pos_ += 2;
        continue;
      }
      value.push_back(c);
      ++pos_;
    }
    return false;
  }

  bool String(size_t start, size_t quote_pos, bool backslash, Token& out) {
    pos_ = quote_pos + 1;
    std::string value;
    if (!ReadQuoted('\'', backslash, value)) {
      status_ = Unterminated("quoted string", start);
      return false;
    }
    out = Make(TokenKind::kString, start, std::move(value));
    return true;
  }

  bool QuotedIdentifier(size_t start, size_t quote_pos, Token& out) {
    pos_ = quote_pos + 1;
    std::string value;
    if (!ReadQuoted('"', false, value)) {
      status_ = Unterminated("quoted identifier", start);
      return false;
    }
    if (value.empty()) {
      status_ = absl::InvalidArgumentError(
          Cat("zero-length delimited identifier at offset ", std::to_string(start)));
      return false;
    }
    out = Make(TokenKind::kQuotedIdentifier, start, std::move(value));
    return true;
  }

  bool Next(Token& out) {
    size_t start = pos_;
    unsigned char c = At(pos_);
    unsigned char c1 = At(pos_ + 1);

    // Prefixed strings: E'..' (escapes), B'..', X'..', N'..', U&'..' / U&"..".
    if ((c == 'e' || c == 'E') && c1 == '\'') return String(start, pos_ + 1, true, out);
    if ((c == 'b' || c == 'B' || c == 'x' || c == 'X' || c == 'n' || c == 'N') && c1 == '\'') {
      return String(start, pos_ + 1, !options_.standard_conforming_strings, out);
    }
    if ((c == 'u' || c == 'U') && c1 == '&') {
      if (At(pos_ + 2) == '\'') return String(start, pos_ + 2, false, out);
      if (At(pos_ + 2) == '"') return QuotedIdentifier(start, pos_ + 2, out);
    }
    if (c == '\'') return String(start, pos_, !options_.standard_conforming_strings, out);
    if (c == '"') return QuotedIdentifier(start, pos_, out);

    if (c == '$') {
      if (IsDigit(c1)) {
        ++pos_;
        while (IsDigit(At(pos_))) ++pos_;
        out = Make(TokenKind::kParam, start);
        return true;
      }
      // Dollar quote: $tag$ ... $tag$ with tag = ident_start ident_cont* minus '$'.
      size_t p = pos_ + 1;
      if (IsIdentStart(At(p))) {
        while (IsIdentStart(At(p)) || IsDigit(At(p))) ++p;
      }
      if (At(p) == '$') {
        std::string_view delim = s_.substr(pos_, p + 1 - pos_);
        size_t body = p + 1;
        size_t end = s_.find(delim, body);
        if (end == std::string_view::npos) {
          status_ = Unterminated("dollar-quoted string", start);
          return false;
        }
        pos_ = end + delim.size();
        out = Make(TokenKind::kString, start, std::string(s_.substr(body, end - body)));
        return true;
      }
      status_ = absl::InvalidArgumentError(Cat("stray '$' at offset ", std::to_string(start)));
      return false;
    }

    if (IsDigit(c) || (c == '.' && IsDigit(c1))) {
      Number();
      out = Make(TokenKind::kNumber, start);
      return true;
    }

    if (IsIdentStart(c)) {
      while (pos_ < s_.size() && IsIdentCont(At(pos_))) ++pos_;
      // One copy, lowered in place (not a push_back per byte).
      std::string value(s_.substr(start, pos_ - start));
      for (char& ch : value) ch = AsciiLower(ch);
      out = Make(TokenKind::kIdentifier, start, std::move(value));
      return true;
    }

    switch (c) {
      case '(': ++pos_; out = Make(TokenKind::kLParen, start); return true;
      case ')': ++pos_; out = Make(TokenKind::kRParen, start); return true;
      case '[': ++pos_; out = Make(TokenKind::kLBracket, start); return true;
      case ']': ++pos_; out = Make(TokenKind::kRBracket, start); return true;
      case ',': ++pos_; out = Make(TokenKind::kComma, start); return true;
      case ';': ++pos_; out = Make(TokenKind::kSemicolon, start); return true;
      case '.': ++pos_; out = Make(TokenKind::kDot, start); return true;
      case ':':
        if (c1 == ':') {
          pos_ += 2;
          out = Make(TokenKind::kDoubleColon, start);
        } else {
          ++pos_;
          out = Make(TokenKind::kColon, start);
        }
        return true;
      default: break;
    }

    if (IsOpChar(c)) {
      // An operator ends before "--" or "/*" (they start comments).
      while (pos_ < s_.size() && IsOpChar(At(pos_))) {
        if (pos_ > start && ((At(pos_) == '-' && At(pos_ + 1) == '-') ||
                             (At(pos_) == '/' && At(pos_ + 1) == '*'))) {
          break;
        }
        ++pos_;
      }
      out = Make(TokenKind::kOperator, start);
      return true;
    }
    // Anything else (e.g. '\\' or '{'): a one-byte operator; the server
    // will reject it, and it never hides a keyword from us.
    ++pos_;
    out = Make(TokenKind::kOperator, start);
    return true;
  }

  void Number() {
    auto digits = [&] {
      while (IsDigit(At(pos_)) || (At(pos_) == '_' && IsDigit(At(pos_ + 1)))) ++pos_;
    };
    if (At(pos_) == '0' && (At(pos_ + 1) == 'x' || At(pos_ + 1) == 'X' || At(pos_ + 1) == 'o' ||
                            At(pos_ + 1) == 'O' || At(pos_ + 1) == 'b' || At(pos_ + 1) == 'B')) {
      pos_ += 2;
      while (IsDigit(At(pos_)) || IsAlpha(At(pos_)) || At(pos_) == '_') ++pos_;
      return;
    }
    digits();
    // "1..2" is two tokens in PostgreSQL (used by PL/pgSQL ranges).
    if (At(pos_) == '.' && At(pos_ + 1) != '.') {
      ++pos_;
      digits();
    }
    if ((At(pos_) == 'e' || At(pos_) == 'E') &&
        (IsDigit(At(pos_ + 1)) ||
         ((At(pos_ + 1) == '+' || At(pos_ + 1) == '-') && IsDigit(At(pos_ + 2))))) {
      pos_ += 2;
      digits();
    }
  }

  std::string_view s_;
  LexOptions options_;
  size_t pos_ = 0;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view sql, LexOptions options) {
  return Lexer(sql, options).Run();
}

uint64_t Fnv1a64(std::string_view data, uint64_t h) {
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace hyperpool::cache
