#include "endpoint/session_settings.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <span>

#include "absl/strings/ascii.h"
#include "cache/sql_analysis.h"
#include "endpoint/notification_pid.h"
#include "endpoint/sequence_state.h"
#include "protocol/link_protocol.h"

namespace hyperpool::endpoint {
namespace {

using cache::Token;
using cache::TokenKind;

// Per-transaction settings that pg_settings reports with source 'session'
// after SET TRANSACTION; they never outlive a transaction.
constexpr std::string_view kTransactionSettings[] = {"transaction_isolation", "transaction_read_only",
                                                     "transaction_deferrable"};

bool IsTransactionSetting(std::string_view name) {
  return std::find(std::begin(kTransactionSettings), std::end(kTransactionSettings), name) !=
         std::end(kTransactionSettings);
}

std::string Lower(std::string_view s) { return absl::AsciiStrToLower(std::string(s)); }

// E'...' literal: correct whether or not standard_conforming_strings is on.
void AppendLiteral(std::string& out, std::string_view value) {
  out += "E'";
  for (char c : value) {
    if (c == '\'' || c == '\\') out += c;
    out += c;
  }
  out += '\'';
}

void AppendIdentifier(std::string& out, std::string_view name) {
  out += '"';
  for (char c : name) {
    if (c == '"') out += c;
    out += c;
  }
  out += '"';
}

constexpr std::array<bool, 256> kWordChars = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) {
    t[c] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
           c >= 0x80;
  }
  return t;
}();

inline bool IsWordChar(char c) { return kWordChars[static_cast<unsigned char>(c)]; }

// Words whose presence makes the full analysis worthwhile.
constexpr std::string_view kTriggerWords[] = {
    "set",  "reset",   "set_config", "discard", "temp",   "temporary",        "listen",
    "hold", "prepare", "do",         "call",    "pg_advisory_lock", "pg_advisory_lock_shared",
    "pg_try_advisory_lock", "pg_try_advisory_lock_shared"};

// The words that matter wherever they stand (AnalyzeOne's scan of every
// token) are temp, temporary (INTO TEMP), set_config and the four
// advisory-lock functions; the other trigger words matter only as a
// statement's first keyword.

// For each lowercase first letter, a bit per length (< 32) of the words in
// `words` that begin with it: most words of a statement are ruled out by
// their first byte and length, without lowering or comparing them.
template <std::size_t N>
constexpr std::array<uint32_t, 26> FirstLetterLengths(const std::string_view (&words)[N]) {
  std::array<uint32_t, 26> masks{};
  for (std::string_view w : words) masks[static_cast<std::size_t>(w[0] - 'a')] |= uint32_t{1} << w.size();
  return masks;
}
constexpr std::array<uint32_t, 26> kTriggerMasks = FirstLetterLengths(kTriggerWords);

// Leading keywords for which AnalyzeOne reads nothing but the words that
// matter anywhere
// (none of its first-keyword branches: SET, RESET, DISCARD, CREATE,
// DECLARE, PREPARE, DO, CALL).
bool OnlyAnywhereWordsMatter(std::string_view keyword) {
  // SELECT, VALUES, INSERT, UPDATE, DELETE, WITH and the transaction
  // keywords (BEGIN START COMMIT END ROLLBACK ABORT SAVEPOINT RELEASE);
  // not TABLE.
  if (keyword == "with") return true;
  const std::optional<cache::StatementKind> kind = cache::StatementKindOfKeyword(keyword);
  if (!kind) return false;
  switch (*kind) {
    case cache::StatementKind::kSelect:
      return keyword != "table";
    case cache::StatementKind::kInsert:
    case cache::StatementKind::kUpdate:
    case cache::StatementKind::kDelete:
    case cache::StatementKind::kTransaction:
      return true;
    default:
      return false;
  }
}

bool MayMatter(const cache::SqlText& text) {
  const std::string_view sql = text.sql();
  // One plain statement (no quotes, comments, inner ';' or U& escapes)
  // that begins with such a keyword: UPDATE ... SET is no SET.
  const std::optional<std::string>& keyword = text.leading_keyword();
  if (keyword && OnlyAnywhereWordsMatter(*keyword)) {
    // Three substrings cover the words that matter anywhere ("temp" is in "temporary",
    // "advisory_lock" in the four lock functions): a text holding one
    // elsewhere (a column "attempts") is only analysed needlessly.
    return cache::ContainsCaseless(sql, "temp") || cache::ContainsCaseless(sql, "set_config") ||
           cache::ContainsCaseless(sql, "advisory_lock");
  }
  std::size_t i = 0;
  while (i < sql.size()) {
    if (!IsWordChar(sql[i])) {
      // U&"..." spells any identifier (set_config included) in escapes.
      if (sql[i] == '&' && i + 1 < sql.size() && sql[i + 1] == '"') return true;
      ++i;
      continue;
    }
    std::size_t start = i;
    while (i < sql.size() && IsWordChar(sql[i])) ++i;
    std::string_view word = sql.substr(start, i - start);
    if (word.size() > 27) continue;
    const unsigned first = absl::ascii_tolower(static_cast<unsigned char>(word[0])) - 'a';
    if (first >= 26) continue;  // every trigger word begins with a letter
    if ((kTriggerMasks[first] & (uint32_t{1} << word.size())) == 0) continue;
    char lower[28];
    for (std::size_t k = 0; k < word.size(); ++k) lower[k] = absl::ascii_tolower(static_cast<unsigned char>(word[k]));
    std::string_view w(lower, word.size());
    for (std::string_view t : kTriggerWords) {
      if (w == t) return true;
    }
  }
  return false;
}

bool IsAdvisoryLockFunction(std::string_view name) {
  return name == "pg_advisory_lock" || name == "pg_advisory_lock_shared" || name == "pg_try_advisory_lock" ||
         name == "pg_try_advisory_lock_shared";
}

bool IsWord(std::span<const Token> t, std::size_t i, std::string_view word) {
  return i < t.size() && t[i].IsKeyword(word);
}

// The setting name starting at token `i` (name or class.name), lowercased;
// empty if there is none.
std::string SettingNameAt(std::span<const Token> t, std::size_t i) {
  if (i >= t.size()) return {};
  auto part = [&](std::size_t k) -> std::string {
    if (t[k].kind == TokenKind::kIdentifier) return t[k].value;
    if (t[k].kind == TokenKind::kQuotedIdentifier) return Lower(t[k].value);
    return {};
  };
  std::string name = part(i);
  if (name.empty()) return {};
  if (i + 2 < t.size() && t[i + 1].kind == TokenKind::kDot) {
    std::string second = part(i + 2);
    if (!second.empty()) name += "." + second;
  }
  return name;
}

// Settings that change who the session is: pg_settings never lists them (so
// the capture cannot carry them) and the next client must never inherit them.
bool IsIdentitySetting(std::string_view lowered_name) {
  return lowered_name == "role" || lowered_name == "session_authorization";
}

// A U&'...' string or U&"..." identifier: the lexer keeps its escapes
// undecoded, so its value is not the name PostgreSQL will see.
bool IsUnicodeEscaped(const Token& tok) {
  return tok.text.size() > 2 && (tok.text[0] == 'u' || tok.text[0] == 'U') && tok.text[1] == '&';
}

// A string literal whose decoded value the lexer knows exactly: no U&
// escapes, and no backslash escape in an E'...' string (the lexer leaves
// octal, hex and unicode escapes undecoded).
bool IsExactLiteral(const Token& tok) {
  if (tok.kind != TokenKind::kString || IsUnicodeEscaped(tok)) return false;
  const bool escapes = !tok.text.empty() && (tok.text[0] == 'e' || tok.text[0] == 'E');
  return !escapes || tok.text.find('\\') == std::string_view::npos;
}

// SET [SESSION | LOCAL] ...: every spelling of a role change (keywords,
// quoted names in any case, SESSION AUTHORIZATION) pins unless it is LOCAL;
// a LOCAL one only asks for the capture, whose role check proves it ended
// with the transaction (CapturedState::RoleIs).
void AnalyzeSet(std::span<const Token> t, SessionEffects& fx) {
  std::size_t k = 1;
  bool local = false;
  if (IsWord(t, 1, "local")) {
    local = true;
    k = 2;
  } else if (IsWord(t, 1, "session") && !IsWord(t, 2, "authorization")) {
    k = 2;  // SET SESSION x; but SET SESSION AUTHORIZATION names the setting itself
  }
  const std::string name = SettingNameAt(t, k);
  const bool identity = IsIdentitySetting(name) || (IsWord(t, k, "session") && IsWord(t, k + 1, "authorization"));
  if (identity) {
    if (local) {
      fx.settings = true;
    } else {
      fx.pins.push_back(PinReason::kSetRole);
    }
    return;
  }
  if (local || IsWord(t, k, "constraints") || (k == 1 && IsWord(t, 1, "transaction"))) return;  // per transaction
  fx.settings = true;
  if (IsCustomSettingName(name)) fx.custom_names.insert(name);
}

// The tokens of argument `n` (0-based) of the call whose '(' is at `open`,
// as [begin, end) indexes; nullopt if the call has fewer arguments.
std::optional<std::pair<std::size_t, std::size_t>> CallArgument(std::span<const Token> t, std::size_t open,
                                                                std::size_t n) {
  int depth = 0;
  std::size_t begin = open + 1;
  std::size_t index = 0;
  for (std::size_t i = open + 1; i < t.size(); ++i) {
    const TokenKind kind = t[i].kind;
    if (kind == TokenKind::kLParen || kind == TokenKind::kLBracket) {
      ++depth;
    } else if ((kind == TokenKind::kRParen || kind == TokenKind::kRBracket) && depth > 0) {
      --depth;
    } else if (depth == 0 && (kind == TokenKind::kComma || kind == TokenKind::kRParen)) {
      if (index == n) return std::make_pair(begin, i);
      if (kind == TokenKind::kRParen) return std::nullopt;
      ++index;
      begin = i + 1;
    }
  }
  return std::nullopt;
}

// set_config(name, value, is_local) whose name is at `i` (its '(' at i+1).
// Unless is_local is literally true (the change ends with the transaction;
// the capture's role check proves it), a role change pins: a literal
// 'role' / 'session_authorization', or any other first argument (a
// parameter bound later, an expression, named notation, an undecoded
// escape), which may name anything, role included. A literal name is noted.
void AnalyzeSetConfig(std::span<const Token> t, std::size_t i, SessionEffects& fx) {
  fx.settings = true;
  auto third = CallArgument(t, i + 1, 2);
  const bool local = third && third->second == third->first + 1 && t[third->first].IsKeyword("true");
  auto first = CallArgument(t, i + 1, 0);
  if (!first || first->second != first->first + 1 || !IsExactLiteral(t[first->first])) {
    if (!local) fx.pins.push_back(PinReason::kSetRole);
    return;
  }
  const std::string name = Lower(t[first->first].value);
  if (IsCustomSettingName(name)) fx.custom_names.insert(name);
  if (IsIdentitySetting(name) && !local) fx.pins.push_back(PinReason::kSetRole);
}

void AnalyzeOne(std::span<const Token> t, SessionEffects& fx) {
  if (t.empty()) return;
  auto note_name = [&](const std::string& name) {
    if (IsCustomSettingName(name)) fx.custom_names.insert(name);
  };
  const Token& first = t[0];
  if (first.IsKeyword("set")) {
    AnalyzeSet(t, fx);
  } else if (first.IsKeyword("reset")) {
    // RESET ROLE / SESSION AUTHORIZATION do not un-pin: simple and safe.
    fx.settings = true;
    note_name(SettingNameAt(t, 1));
  } else if (first.IsKeyword("discard")) {
    fx.settings = true;
  } else if (first.IsKeyword("create")) {
    for (std::size_t i = 1; i < t.size() && i < 6; ++i) {
      if (t[i].IsKeyword("temp") || t[i].IsKeyword("temporary")) {
        fx.pins.push_back(PinReason::kTempTable);
        break;
      }
      if (t[i].IsKeyword("table") || t[i].IsKeyword("view") || t[i].IsKeyword("sequence")) break;
    }
  } else if (first.IsKeyword("declare")) {
    for (std::size_t i = 1; i + 1 < t.size(); ++i) {
      if (t[i].IsKeyword("with") && t[i + 1].IsKeyword("hold")) {
        fx.pins.push_back(PinReason::kWithHoldCursor);
        break;
      }
    }
  } else if (first.IsKeyword("prepare")) {
    if (!IsWord(t, 1, "transaction")) fx.pins.push_back(PinReason::kPreparedSql);
  } else if (first.IsKeyword("do") || first.IsKeyword("call")) {
    fx.settings = true;  // may call set_config
  }
  for (std::size_t i = 0; i < t.size(); ++i) {
    const Token& tok = t[i];
    if (tok.kind == TokenKind::kQuotedIdentifier && i + 1 < t.size() && t[i + 1].kind == TokenKind::kLParen) {
      // "set_config"(...) is the same function; a U&"..." name is not
      // decoded here, so it may be set_config too.
      if (tok.value == "set_config" || IsUnicodeEscaped(tok)) AnalyzeSetConfig(t, i, fx);
      continue;
    }
    if (tok.kind != TokenKind::kIdentifier) continue;
    if (tok.value == "into" && (IsWord(t, i + 1, "temp") || IsWord(t, i + 1, "temporary") ||
                                ((IsWord(t, i + 1, "local") || IsWord(t, i + 1, "global")) &&
                                 (IsWord(t, i + 2, "temp") || IsWord(t, i + 2, "temporary"))))) {
      fx.pins.push_back(PinReason::kTempTable);
      continue;
    }
    if (i + 1 >= t.size() || t[i + 1].kind != TokenKind::kLParen) continue;
    if (IsAdvisoryLockFunction(tok.value)) {
      fx.pins.push_back(PinReason::kAdvisoryLock);
    } else if (tok.value == "set_config") {
      AnalyzeSetConfig(t, i, fx);
    }
  }
}

// Reads a NUL-terminated string at `pos`; advances `pos` past the NUL.
std::optional<std::string_view> ReadCString(std::string_view payload, std::size_t& pos) {
  std::size_t end = payload.find('\0', pos);
  if (end == std::string_view::npos) return std::nullopt;
  std::string_view s = payload.substr(pos, end - pos);
  pos = end + 1;
  return s;
}

}  // namespace

bool IsCustomSettingName(std::string_view name) { return name.find('.') != std::string_view::npos; }

std::vector<std::pair<std::string, std::string>> ParseStartupOptions(std::string_view options) {
  // pg_split_opts.
  std::vector<std::string> args;
  std::size_t i = 0;
  while (i < options.size()) {
    while (i < options.size() && absl::ascii_isspace(static_cast<unsigned char>(options[i]))) ++i;
    if (i >= options.size()) break;
    std::string arg;
    while (i < options.size() && !absl::ascii_isspace(static_cast<unsigned char>(options[i]))) {
      if (options[i] == '\\' && i + 1 < options.size()) ++i;
      arg += options[i++];
    }
    args.push_back(std::move(arg));
  }
  // process_postgres_switches: -c name=value, -cname=value, --name=value.
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](std::string_view assignment) {
    std::size_t eq = assignment.find('=');
    if (eq == std::string_view::npos || eq == 0) return;  // PostgreSQL rejects it; so will the replay
    std::string name = Lower(assignment.substr(0, eq));
    std::replace(name.begin(), name.end(), '-', '_');
    out.emplace_back(std::move(name), std::string(assignment.substr(eq + 1)));
  };
  for (std::size_t k = 0; k < args.size(); ++k) {
    std::string_view a = args[k];
    if (a == "-c") {
      if (k + 1 < args.size()) add(args[++k]);
    } else if (a.starts_with("-c")) {
      add(a.substr(2));
    } else if (a.starts_with("--")) {
      add(a.substr(2));
    }
  }
  return out;
}

SettingMap SettingsFromStartup(const std::vector<std::pair<std::string, std::string>>& parameters) {
  SettingMap out;
  for (const auto& [raw_name, value] : parameters) {
    std::string name = Lower(raw_name);
    if (name == "user" || name == "database" || name == "replication" || name.starts_with("_pq_.") ||
        name.starts_with(link::kParamPrefix)) {
      continue;
    }
    if (name == "options") {
      for (auto& [n, v] : ParseStartupOptions(value)) out[n] = v;
      continue;
    }
    out[name] = value;
  }
  return out;
}

std::string BuildSettingsDiff(const SettingMap& from, const SettingMap& to) {
  std::string resets;
  std::string sets;
  for (const auto& [name, value] : from) {
    if (to.count(name) == 0) {
      resets += "RESET ";
      AppendIdentifier(resets, name);
      resets += "; ";
    }
  }
  for (const auto& [name, value] : to) {
    auto it = from.find(name);
    if (it != from.end() && it->second == value) continue;
    sets += sets.empty() ? "SELECT " : ", ";
    sets += "pg_catalog.set_config(";
    AppendLiteral(sets, name);
    sets += ", ";
    AppendLiteral(sets, value);
    sets += ", false)";
  }
  return resets + sets;
}

std::string BuildCaptureQuery(const std::set<std::string>& custom) {
  // Four columns: name and value of a setting, or (one last row) who the
  // session is now. pg_catalog-qualified throughout: the session may have
  // set any search_path.
  std::string q =
      "SELECT name, setting, NULL::pg_catalog.text, NULL::pg_catalog.text FROM pg_catalog.pg_settings "
      "WHERE source = 'session' AND name NOT IN "
      "('transaction_isolation', 'transaction_read_only', 'transaction_deferrable')";
  if (!custom.empty()) {
    q += " UNION ALL SELECT n, pg_catalog.current_setting(n, true), NULL, NULL FROM pg_catalog.unnest(ARRAY[";
    bool first = true;
    for (const auto& name : custom) {
      if (!first) q += ", ";
      first = false;
      AppendLiteral(q, name);
    }
    q += "]::pg_catalog.text[]) AS n";
  }
  q += " UNION ALL SELECT NULL, NULL, current_user::pg_catalog.text, session_user::pg_catalog.text";
  return q;
}

SettingMap ParseCapturedSettings(const std::vector<std::vector<std::optional<std::string>>>& rows) {
  SettingMap out;
  for (const auto& row : rows) {
    if (row.size() < 2 || !row[0] || !row[1]) continue;
    std::string name = Lower(*row[0]);
    if (IsTransactionSetting(name)) continue;
    if (IsCustomSettingName(name) && row[1]->empty()) continue;
    out[name] = *row[1];
  }
  return out;
}

CapturedState ParseCapture(const std::vector<std::vector<std::optional<std::string>>>& rows) {
  CapturedState state;
  state.settings = ParseCapturedSettings(rows);
  for (const auto& row : rows) {
    if (row.size() < 4 || row[0] || !row[2] || !row[3]) continue;
    state.current_user = *row[2];
    state.session_user = *row[3];
  }
  return state;
}

bool CapturedState::RoleIs(std::string_view login_role) const {
  return current_user && session_user && *current_user == login_role && *session_user == login_role;
}

SettingMap MergeWithStartup(const SettingMap& captured, const SettingMap& startup) {
  SettingMap out = captured;
  for (const auto& [name, value] : startup) out.emplace(name, value);  // keeps captured values
  return out;
}

SessionEffects AnalyzeSessionEffects(std::string_view sql) {
  cache::SqlText text(sql);
  return AnalyzeSessionEffects(text);
}

SessionEffects AnalyzeSessionEffects(const cache::SqlText& text) {
  SessionEffects fx;
  if (text.simple_read()) return fx;  // one SELECT calling no function: no effects
  const std::string_view sql = text.sql();
  fx.sequences = MayUseSequences(sql);
  fx.notifies = MayNotify(sql);
  fx.reads_backend_pid = cache::ContainsCaseless(sql, "pg_backend_pid");
  if (!MayMatter(text)) return fx;
  const auto& tokens = text.tokens();
  if (!tokens.ok()) {
    fx.settings = true;  // PostgreSQL will reject it too; capturing is harmless
    return fx;
  }
  cache::ForEachStatement(*tokens, [&](std::span<const Token> statement) { AnalyzeOne(statement, fx); });
  // One pin reason once.
  std::sort(fx.pins.begin(), fx.pins.end());
  fx.pins.erase(std::unique(fx.pins.begin(), fx.pins.end()), fx.pins.end());
  return fx;
}

bool PinSet::Add(PinReason reason) {
  if (reason == PinReason::kNone) return false;
  const bool added = !Has(reason);
  bits_ |= Bit(reason);
  return added;
}

PinReason PinSet::First() const {
  for (unsigned r = 1; r <= static_cast<unsigned>(kLastPinReason); ++r) {
    if ((bits_ & (1u << r)) != 0) return static_cast<PinReason>(r);
  }
  return PinReason::kNone;
}

std::shared_ptr<const SettingMap> StartupSettingsTable::Intern(SettingMap settings) {
  std::string content;
  for (const auto& [name, value] : settings) {
    // Length-prefixed: no two maps make the same content.
    content += std::to_string(name.size());
    content += ':';
    content += name;
    content += std::to_string(value.size());
    content += ':';
    content += value;
  }
  return maps_.Intern(content, [&settings] { return std::move(settings); });
}

SessionSettings::SessionSettings(const std::vector<std::pair<std::string, std::string>>& hello_parameters,
                                 StartupSettingsTable* table) {
  SettingMap startup = SettingsFromStartup(hello_parameters);
  // An app that names itself nothing sees '' as on a direct connection, not
  // the origin login's application_name (hyperpool's own, for the DBA).
  startup.emplace("application_name", "");
  startup_ = table != nullptr ? table->Intern(std::move(startup))
                              : std::make_shared<const SettingMap>(std::move(startup));
  for (const auto& [name, value] : *startup_) {
    if (IsCustomSettingName(name)) changed().custom_names.insert(name);
  }
}

void SessionSettings::Absorb(const SessionEffects& fx) {
  if (fx.settings) capture_owed_ = true;
  if (!fx.custom_names.empty()) changed().custom_names.insert(fx.custom_names.begin(), fx.custom_names.end());
}

SessionEffects SessionEffectsMemo::Of(const cache::SqlText& text) {
  if (text.simple_read()) return {};  // AnalyzeSessionEffects' own first answer, without a key
  const std::string& shape = text.shape();
  if (shape.empty()) return AnalyzeSessionEffects(text);
  if (auto it = map_.find(std::string_view(shape)); it != map_.end()) {
    ++hits_;
    return it->second;
  }
  SessionEffects fx = AnalyzeSessionEffects(text);
  if (map_.size() >= kCapacity) map_.clear();
  map_.emplace(shape, fx);
  return fx;
}

SessionEffects SessionSettings::NoteFrontend(char tag, std::string_view payload, const cache::SqlText* text,
                                             SessionEffectsMemo* memo) {
  std::size_t pos = 0;
  switch (tag) {
    case 'Q': {
      // The text the session decoded once, else decoded here.
      std::optional<cache::SqlText> own;
      if (text == nullptr) {
        auto sql = ReadCString(payload, pos);
        if (!sql) return {};
        text = &own.emplace(*sql);
      }
      SessionEffects fx = memo != nullptr ? memo->Of(*text) : AnalyzeSessionEffects(*text);
      Absorb(fx);
      return fx;
    }
    case 'P': {
      auto name = ReadCString(payload, pos);
      if (!name) return {};
      auto sql = ReadCString(payload, pos);
      if (!sql) return {};
      std::optional<cache::SqlText> own;
      if (text == nullptr) text = &own.emplace(*sql);
      SessionEffects fx = memo != nullptr ? memo->Of(*text) : AnalyzeSessionEffects(*text);
      // A Parse is usually followed by its Execute; count it now as well.
      Absorb(fx);
      if (fx.empty()) {
        if (changed_ && !changed_->statements.empty()) changed_->statements.erase(std::string(*name));
      } else {
        changed().statements[std::string(*name)] = fx;
      }
      return fx;
    }
    case 'B': {
      if (!changed_ || changed_->statements.empty()) return {};
      auto portal = ReadCString(payload, pos);
      if (!portal) return {};
      auto name = ReadCString(payload, pos);
      if (!name) return {};
      auto it = changed_->statements.find(std::string(*name));
      if (it == changed_->statements.end()) return {};
      Absorb(it->second);
      return it->second;
    }
    case 'C': {
      if (!changed_ || changed_->statements.empty() || payload.empty() || payload[0] != 'S') return {};
      pos = 1;
      auto name = ReadCString(payload, pos);
      if (name) changed_->statements.erase(std::string(*name));
      return {};
    }
    case 'F': {
      SessionEffects fx;  // a FunctionCall runs any function
      fx.sequences = true;
      fx.notifies = true;
      return fx;
    }
    default:
      return {};
  }
}

void SessionSettings::OnCaptured(const SettingMap& captured) {
  SettingMap merged = MergeWithStartup(captured, *startup_);
  // Most sessions never change a setting: their desired() is the startup
  // map itself, not a copy (shared with the Endpoint's other sessions that
  // started with the same settings).
  desired_is_startup_ = merged == *startup_;
  if (desired_is_startup_) {
    if (changed_) changed_->desired.clear();
  } else {
    changed().desired = std::move(merged);
  }
  ++captures_;
  capture_owed_ = false;
  committed_uncaptured_ = false;
}

}  // namespace hyperpool::endpoint
