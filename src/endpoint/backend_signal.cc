#include "endpoint/backend_signal.h"

#include <cctype>
#include <cstdint>
#include <span>
#include <vector>

#include "cache/sql_analysis.h"
#include "protocol/codec.h"

namespace hyperpool::endpoint {
namespace {

constexpr protocol::Oid kBoolOid = 16;
constexpr std::int64_t kMaxPid = 0x7fffffff;

// A cursor over the statement text: whitespace and comments are skipped
// only where the grammar allows them (between tokens).
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  void Space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  // A keyword or name (case-insensitive), not followed by an identifier character.
  bool Word(std::string_view word) {
    Space();
    if (s_.size() - i_ < word.size()) return false;
    for (std::size_t k = 0; k < word.size(); ++k) {
      if (std::tolower(static_cast<unsigned char>(s_[i_ + k])) != word[k]) return false;
    }
    const std::size_t end = i_ + word.size();
    if (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_' || s_[end] == '$')) {
      return false;
    }
    i_ = end;
    return true;
  }
  bool Char(char c) {
    Space();
    if (i_ >= s_.size() || s_[i_] != c) return false;
    ++i_;
    return true;
  }
  // An unsigned integer constant (optionally quoted as '123').
  std::optional<std::int64_t> Integer() {
    Space();
    const bool quoted = i_ < s_.size() && s_[i_] == '\'';
    if (quoted) ++i_;
    std::int64_t n = 0;
    std::size_t digits = 0;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
      n = n * 10 + (s_[i_] - '0');
      if (n > kMaxPid) return std::nullopt;
      ++i_;
      ++digits;
    }
    if (digits == 0) return std::nullopt;
    if (quoted && !Char('\'')) return std::nullopt;
    if (i_ < s_.size() && (std::isalpha(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.')) return std::nullopt;
    return n;
  }
  // `$1` and any `::type` casts after it; sets `text` to all of it.
  bool Param(std::string_view& text) {
    Space();
    const std::size_t start = i_;
    if (s_.substr(i_, 2) != "$1" || (i_ + 2 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_ + 2])))) {
      return false;
    }
    i_ += 2;
    for (;;) {
      std::size_t save = i_;
      Space();
      if (s_.substr(i_, 2) != "::") {
        i_ = save;
        break;
      }
      i_ += 2;
      Space();
      const std::size_t name = i_;
      while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) ++i_;
      if (i_ == name) return false;
    }
    text = s_.substr(start, i_ - start);
    return true;
  }
  // The text after the cursor.
  std::string_view Rest() const { return s_.substr(i_); }
  bool AtEnd() {
    Space();
    if (i_ < s_.size() && s_[i_] == ';') ++i_;
    Space();
    return i_ == s_.size();
  }

 private:
  std::string_view s_;
  std::size_t i_ = 0;
};

// `SELECT [pg_catalog.]pg_{terminate,cancel}_backend(ARG[, timeout])`: the
// function, and either the constant pid or (`param`) the `$1...` text.
// What may follow the call: nothing, or `AS name` (the lexer's identifier:
// unquoted folded to lowercase, quoted as written), then an optional ';'.
// The alias ("" for none), or nullopt for anything else (a bare alias, more).
std::optional<std::string> ColumnAlias(std::string_view rest) {
  const absl::StatusOr<std::vector<cache::Token>> tokens = cache::Lex(rest);
  if (!tokens.ok()) return std::nullopt;
  std::span<const cache::Token> t(*tokens);
  if (!t.empty() && t.back().kind == cache::TokenKind::kSemicolon) t = t.first(t.size() - 1);
  if (t.empty()) return std::string();
  if (t.size() != 2 || !t[0].IsKeyword("as") ||
      (t[1].kind != cache::TokenKind::kIdentifier && t[1].kind != cache::TokenKind::kQuotedIdentifier)) {
    return std::nullopt;
  }
  // (PostgreSQL truncates a longer name with a NOTICE: left to it.)
  if (t[1].value.empty() || t[1].value.size() > 63) return std::nullopt;
  return t[1].value;
}

struct Call {
  bool terminate = false;
  std::int64_t pid = 0;
  std::string_view param;
  std::string column;  // the alias, else the function's name

  BackendSignal Signal(std::int64_t signalled) const {
    return BackendSignal{terminate, static_cast<std::int32_t>(signalled), column};
  }
};

std::optional<Call> ParseCall(std::string_view sql, bool allow_param) {
  // Both names end so, unquoted (Cursor::Word reads no quoted name): a text
  // without it is no such call. One SIMD scan instead of four word
  // comparisons, for every Query and Parse a session sends.
  if (!cache::ContainsCaseless(sql, "_backend")) return std::nullopt;
  Cursor c(sql);
  if (!c.Word("select")) return std::nullopt;
  Call call;
  (void)(c.Word("pg_catalog") && c.Char('.'));
  if (c.Word("pg_terminate_backend")) {
    call.terminate = true;
  } else if (!c.Word("pg_cancel_backend")) {
    return std::nullopt;
  }
  if (!c.Char('(')) return std::nullopt;
  if (!allow_param || !c.Param(call.param)) {
    const std::optional<std::int64_t> pid = c.Integer();
    if (!pid || *pid == 0) return std::nullopt;
    call.pid = *pid;
  }
  if (call.terminate && c.Char(',')) {
    if (!c.Integer()) return std::nullopt;  // the timeout (ms): the session ends at once here
  }
  if (!c.Char(')')) return std::nullopt;
  std::optional<std::string> alias = ColumnAlias(c.Rest());
  if (!alias) return std::nullopt;
  call.column = alias->empty() ? (call.terminate ? "pg_terminate_backend" : "pg_cancel_backend") : std::move(*alias);
  return call;
}

// The pid a Bind's only parameter carries: text digits, or a binary int2/int4/int8.
std::optional<std::int64_t> BoundPid(const protocol::Bind& bind) {
  if (bind.parameters.size() != 1 || !bind.parameters[0]) return std::nullopt;
  const std::string_view v = *bind.parameters[0];
  const bool binary = !bind.parameter_formats.empty() && bind.parameter_formats[0] == 1;
  if (!binary) {
    Cursor c(v);
    std::optional<std::int64_t> n = c.Integer();
    return n && c.AtEnd() ? n : std::nullopt;
  }
  // int2 too: psycopg sends a small pid (an origin's, from pg_backend_pid()) so.
  if (v.size() != 2 && v.size() != 4 && v.size() != 8) return std::nullopt;
  std::uint64_t n = 0;
  for (char ch : v) n = (n << 8) | static_cast<unsigned char>(ch);
  const std::int64_t value = v.size() == 2   ? static_cast<std::int16_t>(n)
                             : v.size() == 4 ? static_cast<std::int32_t>(n)
                                             : static_cast<std::int64_t>(n);
  if (value <= 0 || value > kMaxPid) return std::nullopt;
  return value;
}

// The signal's one column: boolean, named after the function, in `format`.
void AppendSignalRowDescription(std::string& out, const BackendSignal& signal, std::int16_t format) {
  protocol::RowDescription rd;
  rd.fields.push_back(protocol::FieldDescription{.name = signal.column,
                                                 .type_oid = kBoolOid,
                                                 .type_size = 1,
                                                 .format = format});
  protocol::Encode(rd, out);
}

// Its one row: `result` as text ('t'/'f') or binary (one byte 1/0).
void AppendSignalDataRow(std::string& out, bool result, std::int16_t format) {
  const char value = format == protocol::kFormatBinary ? static_cast<char>(result ? 1 : 0) : (result ? 't' : 'f');
  const char row[] = {0, 0, 0, 1, value};
  protocol::Encode(protocol::DataRow{1, std::string_view(row, sizeof row)}, out);
}

// Walks a batch that starts at a Bind of the signal statement: the Bind
// (unnamed portal), then only Describe / Execute of the unnamed portal and
// Flush, up to and including a Sync. Its length in bytes, or 0 if the batch
// is anything else or not complete. With `out`, appends the answers
// PostgreSQL gives to each message but the Sync.
std::size_t WalkSignalBatch(std::string_view batch, const BackendSignal& signal, std::string* out) {
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  std::string_view rest = batch;
  std::int16_t format = protocol::kFormatText;
  bool row_left = true;  // the portal's one row is not fetched yet
  for (bool first = true;; first = false) {
    auto r = reader.Read(rest);
    if (!r.is_frame()) return 0;
    const protocol::Frame f = r.frame();
    rest.remove_prefix(f.size());
    if (first) {
      auto bind = protocol::DecodeBind(f.payload);
      if (f.tag != 'B' || !bind.ok() || !bind->portal.empty() || bind->result_formats.size() > 1) return 0;
      if (!bind->result_formats.empty()) format = bind->result_formats[0];
      if (format != protocol::kFormatText && format != protocol::kFormatBinary) return 0;
      if (out != nullptr) protocol::Encode(protocol::BindComplete{}, *out);
      continue;
    }
    switch (f.tag) {
      case 'D': {
        auto d = protocol::DecodeDescribe(f.payload);
        if (!d.ok() || d->kind != protocol::ObjectKind::kPortal || !d->name.empty()) return 0;
        if (out != nullptr) AppendSignalRowDescription(*out, signal, format);
        break;
      }
      case 'E': {
        auto e = protocol::DecodeExecute(f.payload);
        if (!e.ok() || !e->portal.empty()) return 0;
        if (out == nullptr) break;
        if (!row_left) {
          protocol::Encode(protocol::CommandComplete{"SELECT 0"}, *out);
          break;
        }
        row_left = false;
        AppendSignalDataRow(*out, true, format);
        if (e->max_rows == 1) {
          protocol::Encode(protocol::PortalSuspended{}, *out);  // the limit reached: not known to be done
        } else {
          protocol::Encode(protocol::CommandComplete{"SELECT 1"}, *out);
        }
        break;
      }
      case 'H':
        break;
      case 'S':
        return batch.size() - rest.size();
      default:
        return 0;
    }
  }
}

}  // namespace

std::optional<BackendSignal> ParseBackendSignal(std::string_view sql) {
  std::optional<Call> call = ParseCall(sql, /*allow_param=*/false);
  if (!call) return std::nullopt;
  return call->Signal(call->pid);
}

std::optional<BackendSignal> ParseBackendSignalUnit(std::string_view parse_payload, std::string_view rest) {
  auto parse = protocol::DecodeParse(parse_payload);
  if (!parse.ok() || parse->parameter_types.size() > 1) return std::nullopt;
  std::optional<Call> call = ParseCall(parse->query, /*allow_param=*/true);
  if (!call) return std::nullopt;
  if (call->param.empty()) {
    if (!parse->parameter_types.empty()) return std::nullopt;
    return call->Signal(call->pid);  // a constant
  }
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  auto r = reader.Read(rest);
  if (!r.is_frame() || r.frame().tag != 'B') return std::nullopt;
  auto bind = protocol::DecodeBind(r.frame().payload);
  if (!bind.ok() || bind->statement != parse->statement) return std::nullopt;
  std::optional<std::int64_t> pid = BoundPid(*bind);
  if (!pid || *pid == 0) return std::nullopt;
  return call->Signal(*pid);
}

std::optional<BackendSignal> ParseBackendSignalBind(std::string_view parse_payload, std::string_view batch) {
  // The text first, without decoding: this runs for every Bind that starts
  // a unit, and almost none is of such a statement.
  const std::size_t name_end = parse_payload.find('\0');
  if (name_end == std::string_view::npos) return std::nullopt;
  std::string_view text = parse_payload.substr(name_end + 1);
  text = text.substr(0, text.find('\0'));
  std::optional<Call> call = ParseCall(text, /*allow_param=*/true);
  if (!call || call->param.empty()) return std::nullopt;
  auto parse = protocol::DecodeParse(parse_payload);
  if (!parse.ok() || parse->parameter_types.size() > 1) return std::nullopt;
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  auto r = reader.Read(batch);
  if (!r.is_frame() || r.frame().tag != 'B') return std::nullopt;
  auto bind = protocol::DecodeBind(r.frame().payload);
  if (!bind.ok()) return std::nullopt;
  std::optional<std::int64_t> pid = BoundPid(*bind);
  if (!pid || *pid == 0) return std::nullopt;
  const BackendSignal signal = call->Signal(*pid);
  if (WalkSignalBatch(batch, signal, nullptr) == 0) return std::nullopt;
  return signal;
}

std::size_t AppendBackendSignalBatchAnswer(std::string_view batch, const BackendSignal& signal, std::string& out) {
  if (WalkSignalBatch(batch, signal, nullptr) == 0) return 0;  // nothing appended
  return WalkSignalBatch(batch, signal, &out);
}

std::string BackendSignalStandIn(std::string_view parse_payload) {
  auto parse = protocol::DecodeParse(parse_payload);
  if (!parse.ok()) return {};
  std::optional<Call> call = ParseCall(parse->query, /*allow_param=*/true);
  if (!call) return {};
  std::string name = "\"";  // the column's name, quoted
  for (char ch : call->column) name.append(ch == '"' ? 2 : 1, ch);
  name.push_back('"');
  const std::string text = call->param.empty()
                               ? "SELECT true AS " + name
                               : "SELECT (" + std::string(call->param) + ")::int4 IS NOT NULL AS " + name;
  std::string out;
  protocol::Encode(protocol::Parse{parse->statement, text, parse->parameter_types}, out);
  return out;
}

void AppendBackendSignalAnswer(std::string& out, const BackendSignal& signal, bool result) {
  AppendSignalRowDescription(out, signal, protocol::kFormatText);
  AppendSignalDataRow(out, result, protocol::kFormatText);
  protocol::Encode(protocol::CommandComplete{"SELECT 1"}, out);
}

}  // namespace hyperpool::endpoint
