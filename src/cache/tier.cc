#include "cache/tier.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <optional>
#include <span>

#include "absl/strings/ascii.h"
#include "protocol/codec.h"

namespace hyperpool::cache {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ull;

template <typename T>
T LoadLittle(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  if constexpr (std::endian::native == std::endian::big) {
    if constexpr (sizeof(T) == 8) {
      v = __builtin_bswap64(v);
    } else {
      v = __builtin_bswap32(v);
    }
  }
  return v;
}

}  // namespace

uint64_t UnitDigest(std::string_view frames) {
  const char* p = frames.data();
  const char* const end = p + frames.size();
  uint64_t h = kP5 + frames.size();
  for (; end - p >= 8; p += 8) {
    const uint64_t k = std::rotl(LoadLittle<uint64_t>(p) * kP2, 31) * kP1;
    h = std::rotl(h ^ k, 27) * kP1 + kP4;
  }
  if (end - p >= 4) {
    h = std::rotl(h ^ (LoadLittle<uint32_t>(p) * kP1), 23) * kP2 + kP3;
    p += 4;
  }
  for (; p < end; ++p) h = std::rotl(h ^ (static_cast<unsigned char>(*p) * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

namespace {

// Big-endian, one append each (push_back per byte costs a capacity check
// and, without a reserve, reallocations).
void PutU64(std::string& out, uint64_t v) {
  char b[8];
  protocol::StoreUint64(b, v);
  out.append(b, sizeof(b));
}
void PutU32(std::string& out, uint32_t v) {
  char b[4];
  protocol::StoreUint32(b, v);
  out.append(b, sizeof(b));
}



std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

UnitShape ParseCandidateUnit(std::string_view bytes, CandidateUnit& out, const StatementLookup* lookup) {
  out = CandidateUnit{};
  std::optional<protocol::Frame> f = protocol::PeekTaggedFrame(bytes);
  if (!f) return UnitShape::kNotCandidate;
  if (f->tag == 'Q') {
    auto q = protocol::DecodeQuery(f->payload);
    if (!q.ok()) return UnitShape::kNotCandidate;
    out.frames = f->raw;
    out.form = ProtocolForm::kSimple;
    out.sql = q->query;
    out.replay.form = ProtocolForm::kSimple;
    return UnitShape::kCandidate;
  }
  if (f->tag != 'P' && !(f->tag == 'B' && lookup != nullptr)) return UnitShape::kNotCandidate;
  // [Parse] [Describe(statement)] Bind [Describe(portal)] Execute(no limit) Sync,
  // one statement and one portal throughout.
  enum Stage { kWantParseOrBind, kWantDescribeOrBind, kWantBind, kWantDescribeOrExecute, kWantExecute, kWantSync };
  Stage stage = kWantParseOrBind;
  size_t pos = 0;
  std::string_view statement;
  std::string_view portal;
  out.form = ProtocolForm::kExtended;
  out.replay = ReplayRequest{};
  out.replay.form = ProtocolForm::kExtended;
  for (;;) {
    std::optional<protocol::Frame> fr = protocol::PeekTaggedFrame(bytes.substr(pos));
    if (!fr) {
      // Partial frame or nothing more: the Sync has not arrived (yet).
      return UnitShape::kIncomplete;
    }
    pos += fr->size();
    switch (fr->tag) {
      case 'P': {
        if (stage != kWantParseOrBind) return UnitShape::kNotCandidate;
        auto p = protocol::DecodeParse(fr->payload);
        if (!p.ok()) return UnitShape::kNotCandidate;
        statement = p->statement;
        out.sql = p->query;
        out.param_types.assign(p->parameter_types.begin(), p->parameter_types.end());
        out.replay.parse = true;
        out.named_parse = !statement.empty();
        stage = kWantDescribeOrBind;
        break;
      }
      case 'B': {
        if (stage != kWantParseOrBind && stage != kWantDescribeOrBind && stage != kWantBind) {
          return UnitShape::kNotCandidate;
        }
        auto b = protocol::DecodeBind(fr->payload);
        if (!b.ok()) return UnitShape::kNotCandidate;
        if (stage == kWantParseOrBind) {
          // No Parse in the unit: the session's own statement, by name.
          std::vector<uint32_t> types;
          if (!(*lookup)(b->statement, &out.sql, &types, &out.result_type)) return UnitShape::kNotCandidate;
          out.param_types = std::move(types);
        } else if (b->statement != statement) {
          return UnitShape::kNotCandidate;
        }
        portal = b->portal;
        out.params.clear();
        for (size_t i = 0; i < b->parameters.size(); ++i) {
          int16_t format = 0;
          if (b->parameter_formats.size() == 1) format = b->parameter_formats[0];
          if (b->parameter_formats.size() > 1) format = b->parameter_formats[i];
          out.params.push_back(ParamValue{b->parameters[i], format});
        }
        out.result_formats.assign(b->result_formats.begin(), b->result_formats.end());
        out.replay.bind = true;
        stage = kWantDescribeOrExecute;
        break;
      }
      case 'D': {
        auto d = protocol::DecodeDescribe(fr->payload);
        if (!d.ok()) return UnitShape::kNotCandidate;
        if (d->kind == protocol::ObjectKind::kStatement) {
          // Before the Bind, of the statement just parsed: answered before
          // BindComplete (ParameterDescription + RowDescription with zero
          // format codes), as the replay's statement form does.
          if (stage != kWantDescribeOrBind || d->name != statement) return UnitShape::kNotCandidate;
          out.replay.describe = ReplayRequest::Describe::kStatement;
          out.describe = 'S';
          stage = kWantBind;
        } else {
          if (stage != kWantDescribeOrExecute || d->name != portal) return UnitShape::kNotCandidate;
          out.replay.describe = ReplayRequest::Describe::kPortal;
          out.describe = 'P';
          stage = kWantExecute;
        }
        break;
      }
      case 'E': {
        if (stage != kWantDescribeOrExecute && stage != kWantExecute) return UnitShape::kNotCandidate;
        auto e = protocol::DecodeExecute(fr->payload);
        if (!e.ok() || e->portal != portal) return UnitShape::kNotCandidate;
        out.replay.execute = true;
        // A row limit (asyncpg's fetchrow/fetchval): a stored complete result
        // answers it truncated (AppendReplay); <= 0 means none in PostgreSQL.
        out.replay.max_rows = e->max_rows > 0 ? e->max_rows : 0;
        stage = kWantSync;
        break;
      }
      case 'S': {
        if (stage != kWantSync) return UnitShape::kNotCandidate;
        out.replay.sync = true;
        out.frames = bytes.substr(0, pos);
        return UnitShape::kCandidate;
      }
      default:
        return UnitShape::kNotCandidate;
    }
  }
}

// ---------------------------------------------------------------------------
// Session controls.
// ---------------------------------------------------------------------------

bool ApplyCacheSetting(std::string_view name, std::optional<std::string_view> value,
                       SessionCacheSettings& settings) {
  std::string n = Lower(name);
  if (n == link::kCacheSetting) {
    if (!value) {
      settings.enabled = true;
      return true;
    }
    std::string v = Lower(*value);
    if (v == "on" || v == "true" || v == "1" || v == "yes" || v == "default") {
      settings.enabled = true;
    } else {
      settings.enabled = false;  // off, false, 0, no, or anything unparsable
    }
    return true;
  }
  if (n == link::kCacheTtlSetting) {
    if (!value || Lower(*value) == "default") {
      settings.ttl.reset();
      return true;
    }
    double seconds = -1;
    std::string v(*value);
    char* end = nullptr;
    seconds = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || !(seconds >= 0) || seconds > 86400) {
      settings.enabled = false;  // unparsable: be safe
      return true;
    }
    settings.ttl = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    return true;
  }
  return false;
}

void ApplyStartupParameters(const std::vector<std::pair<std::string, std::string>>& params,
                            SessionCacheSettings& settings) {
  for (const auto& [name, value] : params) {
    if (ApplyCacheSetting(name, value, settings)) continue;
    if (name != "options") continue;
    // "-c name=value" or "--name=value", whitespace separated.
    std::string_view rest = value;
    std::vector<std::string> words;
    std::string w;
    for (size_t i = 0; i < rest.size(); ++i) {
      char c = rest[i];
      if (c == '\\' && i + 1 < rest.size()) {
        w.push_back(rest[++i]);
      } else if (c == ' ' || c == '\t') {
        if (!w.empty()) words.push_back(std::move(w));
        w.clear();
      } else {
        w.push_back(c);
      }
    }
    if (!w.empty()) words.push_back(std::move(w));
    for (size_t i = 0; i < words.size(); ++i) {
      std::string_view assignment;
      if (words[i] == "-c" && i + 1 < words.size()) {
        assignment = words[++i];
      } else if (words[i].rfind("--", 0) == 0) {
        assignment = std::string_view(words[i]).substr(2);
      } else if (words[i].rfind("-c", 0) == 0) {
        assignment = std::string_view(words[i]).substr(2);
      } else {
        continue;
      }
      size_t eq = assignment.find('=');
      if (eq == std::string_view::npos) continue;
      ApplyCacheSetting(assignment.substr(0, eq), assignment.substr(eq + 1), settings);
    }
  }
}

namespace {

// The setting name a SET/RESET statement names: tokens[i..] as ident [. ident].
std::string SettingName(const std::vector<Token>& t, size_t& i) {
  std::string name;
  if (i < t.size() && (t[i].kind == TokenKind::kIdentifier || t[i].kind == TokenKind::kQuotedIdentifier)) {
    name = t[i].kind == TokenKind::kIdentifier ? t[i].value : Lower(t[i].value);
    ++i;
    while (i + 1 < t.size() && t[i].kind == TokenKind::kDot &&
           (t[i + 1].kind == TokenKind::kIdentifier || t[i + 1].kind == TokenKind::kQuotedIdentifier)) {
      name += "." + Lower(t[i + 1].value);
      i += 2;
    }
  }
  return name;
}

// Startup parameters / settings no result depends on: left out of keys.
constexpr std::string_view kUnkeyedSettings[] = {
    "application_name", "fallback_application_name", "statement_timeout", "lock_timeout",
    "idle_in_transaction_session_timeout", "idle_session_timeout", "geqo", "jit",
};
bool IsUnkeyedSetting(std::string_view name) {
  return std::find(std::begin(kUnkeyedSettings), std::end(kUnkeyedSettings), name) != std::end(kUnkeyedSettings);
}

// Settings whose SET/RESET is not a plain GUC change a capture can describe.
bool IsIdentitySetting(std::string_view name) { return name == "role" || name == "session_authorization"; }

// Statements that change session state in ways ClassifySet does not read
// (DISCARD, DO and CALL may run anything; kOther is unknown).
bool ChangesStateByKind(StatementKind k) {
  return k == StatementKind::kDiscard || k == StatementKind::kDo || k == StatementKind::kCall ||
         k == StatementKind::kOther;
}

// One statement's tokens [b, e). Returns: 0 not a SET/RESET, 1 hyperpool.*
// setting (applied), 2 local-only SET (no lasting effect), 3 state change,
// 4 a session-level change of ordinary settings (see only_setting_changes),
// 5 the same of a setting no key depends on (only_unkeyed_settings).
int ClassifySet(const std::vector<Token>& t, size_t b, size_t e, SessionCacheSettings* settings) {
  if (b >= e) return 0;
  if (!t[b].IsKeyword("reset") && !t[b].IsKeyword("set")) return 0;  // before copying the tokens
  std::vector<Token> s(t.begin() + b, t.begin() + e);
  if (s[0].IsKeyword("reset")) {
    size_t i = 1;
    if (i < s.size() && s[i].IsKeyword("all")) return 4;
    std::string name = SettingName(s, i);
    if (name.rfind(link::kParamPrefix, 0) == 0 && i == s.size()) {
      SessionCacheSettings scratch;
      ApplyCacheSetting(name, std::nullopt, settings ? *settings : scratch);
      return 1;
    }
    if (name.empty() || IsIdentitySetting(name)) return 3;
    return IsUnkeyedSetting(name) && i == s.size() ? 5 : 4;
  }
  if (!s[0].IsKeyword("set")) return 0;
  size_t i = 1;
  if (i < s.size() && (s[i].IsKeyword("local") || s[i].IsKeyword("transaction") || s[i].IsKeyword("constraints"))) {
    return 2;
  }
  if (i < s.size() && s[i].IsKeyword("session")) {
    ++i;
    if (i < s.size() && (s[i].IsKeyword("authorization") || s[i].IsKeyword("characteristics"))) return 3;
  }
  std::string name = SettingName(s, i);
  if (name.rfind(link::kParamPrefix, 0) != 0) {
    if (name.empty() || IsIdentitySetting(name)) return 3;
    return IsUnkeyedSetting(name) ? 5 : 4;
  }
  if (i < s.size() && (s[i].IsKeyword("to") || (s[i].kind == TokenKind::kOperator && s[i].text == "="))) ++i;
  std::optional<std::string_view> value;
  std::string joined;
  for (; i < s.size(); ++i) {
    if (s[i].kind == TokenKind::kString || s[i].kind == TokenKind::kIdentifier ||
        s[i].kind == TokenKind::kQuotedIdentifier) {
      joined += s[i].value;
    } else {
      joined += std::string(s[i].text);
    }
  }
  value = joined;
  SessionCacheSettings scratch;
  ApplyCacheSetting(name, value, settings ? *settings : scratch);
  return 1;
}

}  // namespace

StatementEffects ClassifyStatements(std::string_view sql, SessionCacheSettings* settings) {
  SqlText text(sql);
  return ClassifyStatements(text, settings);
}

StatementEffects ClassifyStatements(const SqlText& text, SessionCacheSettings* settings) {
  StatementEffects fx;
  const std::string_view sql = text.sql();
  if (text.plain_select()) return fx;  // what the lexer would conclude, without it
  fx.nocache_hint = ContainsCaseless(sql, "hyperpool:nocache");
  // One statement whose leading keyword decides it (an UPDATE, INSERT,
  // BEGIN ...): what the lexer and the analysis below would conclude,
  // without them. SET and RESET go on to ClassifySet.
  if (const std::optional<std::string>& kw = text.leading_keyword();
      kw && *kw != "set" && *kw != "reset" && !ContainsCaseless(sql, "set_config")) {
    if (std::optional<StatementKind> kind = StatementKindOfKeyword(*kw)) {
      fx.changes_session_state = ChangesStateByKind(*kind);
      return fx;
    }
  }
  const absl::StatusOr<std::vector<Token>>& tokens = text.tokens();
  if (!tokens.ok()) {
    fx.changes_session_state = true;
    return fx;
  }
  const std::vector<Token>& t = *tokens;
  bool any = false;
  bool all_cache_settings = true;
  bool has_other = false;  // statements that are not SET/RESET
  bool setting_changes = false;  // plain session-level SET/RESET of ordinary settings
  bool keyed_changes = false;    // ...of settings a key depends on
  size_t b = 0;
  for (size_t i = 0; i <= t.size(); ++i) {
    if (i < t.size() && t[i].kind != TokenKind::kSemicolon) continue;
    if (i > b) {
      any = true;
      int c = ClassifySet(t, b, i, settings);
      if (c != 1) all_cache_settings = false;
      if (c == 3) fx.changes_session_state = true;
      if (c == 4 || c == 5) setting_changes = true;
      if (c == 4) keyed_changes = true;
      if (c == 0) has_other = true;
    }
    b = i + 1;
  }
  fx.only_cache_settings = any && all_cache_settings;
  if (has_other) {
    // The statements' kinds and calls are the parser's (a lexer split
    // would cut a BEGIN ATOMIC body or a rule's action list at its ';').
    const absl::StatusOr<StatementAnalysis>& a = text.analysis();
    if (!a.ok()) {
      fx.changes_session_state = true;
      return fx;
    }
    for (StatementKind k : a->kinds) {
      if (ChangesStateByKind(k)) fx.changes_session_state = true;
    }
    for (const QualifiedName& f : a->functions) {
      if (f.name == "set_config") fx.changes_session_state = true;
    }
  }
  // Only now: the other statements may have changed state in other ways.
  fx.only_setting_changes = setting_changes && !fx.changes_session_state;
  fx.only_unkeyed_settings = fx.only_setting_changes && !keyed_changes;
  if (setting_changes) fx.changes_session_state = true;
  return fx;
}

namespace {

// The -c name=value and --name=value switches of a startup "options" value
// (split at unescaped whitespace, a backslash escaping the next byte, as
// PostgreSQL's pg_split_opts does), names lowercased with '-' read as '_';
// nullopt when it holds anything else.
std::optional<std::vector<std::pair<std::string, std::string>>> OptionSwitches(std::string_view options) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < options.size(); ++i) {
    const char c = options[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\\' && i + 1 < options.size()) {
      word.push_back(options[++i]);
    } else {
      word.push_back(c);
    }
  }
  if (in_word) words.push_back(std::move(word));
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < words.size(); ++i) {
    std::string_view w = words[i];
    std::string_view setting;
    if (w == "-c" && i + 1 < words.size()) {
      setting = words[++i];
    } else if (w.starts_with("-c") && w.size() > 2) {
      setting = w.substr(2);
    } else if (w.starts_with("--") && w.size() > 2) {
      setting = w.substr(2);
    } else {
      return std::nullopt;
    }
    const size_t eq = setting.find('=');
    if (eq == std::string_view::npos || eq == 0) return std::nullopt;
    std::string name = Lower(setting.substr(0, eq));
    std::replace(name.begin(), name.end(), '-', '_');
    out.emplace_back(std::move(name), std::string(setting.substr(eq + 1)));
  }
  return out;
}

}  // namespace

std::string HelloFingerprint(const std::vector<std::pair<std::string, std::string>>& params, bool* unsupported) {
  static constexpr std::string_view kKeyed[] = {
      "client_encoding", "datestyle",   "timezone",    "intervalstyle", "extra_float_digits",
      "bytea_output",    "lc_monetary", "lc_numeric",  "lc_time",       "standard_conforming_strings",
  };
  std::vector<std::pair<std::string, std::string>> keyed;
  bool bad = false;
  for (const auto& [name, value] : params) {
    std::string n = Lower(name);
    if (n.rfind(link::kParamPrefix, 0) == 0) continue;
    if (IsUnkeyedSetting(n)) continue;
    if (n == "options") {
      // Each -c name=value switch is a setting like a startup parameter:
      // hyperpool.* ones are ours, the others keyed or ignored as above
      // (pg_regress sends "-c intervalstyle=postgres_verbose"). Anything
      // else (another switch, a setting no key can hold) is not keyable.
      std::optional<std::vector<std::pair<std::string, std::string>>> switches = OptionSwitches(value);
      if (!switches) {
        bad = true;
        continue;
      }
      for (auto& [sn, sv] : *switches) {
        if (sn.rfind(link::kParamPrefix, 0) == 0 || IsUnkeyedSetting(sn)) continue;
        if (std::find(std::begin(kKeyed), std::end(kKeyed), sn) == std::end(kKeyed)) {
          bad = true;
          continue;
        }
        keyed.emplace_back("-c " + sn, std::move(sv));  // apart from a startup parameter of that name
      }
      continue;
    }
    if (std::find(std::begin(kKeyed), std::end(kKeyed), n) != std::end(kKeyed)) {
      keyed.emplace_back(n, value);
      continue;
    }
    bad = true;  // search_path, role, session_authorization, unknown: not safely keyable
  }
  std::sort(keyed.begin(), keyed.end());
  std::string out;
  for (const auto& [n, v] : keyed) {
    PutU32(out, static_cast<uint32_t>(n.size()));
    out += n;
    PutU32(out, static_cast<uint32_t>(v.size()));
    out += v;
  }
  if (unsupported != nullptr) *unsupported = bad;
  return out;
}

// ---------------------------------------------------------------------------
// Writes.
// ---------------------------------------------------------------------------

void WriteEffect::Merge(const WriteEffect& other) {
  all = all || other.all;
  schema = schema || other.schema;
  if (all) {
    tables.clear();
    return;
  }
  for (const std::string& t : other.tables) {
    if (std::find(tables.begin(), tables.end(), t) == tables.end()) tables.push_back(t);
  }
}

WriteEffect WriteEffectOf(std::string_view sql, const VolatilityOracle* oracle, bool precise_names) {
  SqlText text(sql);
  return WriteEffectOf(text, oracle, precise_names);
}

WriteEffect WriteEffectOf(const SqlText& text, const VolatilityOracle* oracle, bool precise_names,
                          bool standard_conforming_strings) {
  WriteEffect fx;
  if (text.simple_read()) return fx;  // one SELECT without functions: writes nothing
  if (text.sql().size() > (8u << 20) ||
      (!standard_conforming_strings && text.sql().find('\\') != std::string_view::npos)) {
    fx.all = fx.schema = true;
    return fx;
  }
  const absl::StatusOr<StatementAnalysis>& a = text.analysis();
  if (!a.ok()) {
    fx.all = fx.schema = true;
    return fx;
  }
  for (StatementKind k : a->kinds) {
    if (k == StatementKind::kDdl || k == StatementKind::kDo || k == StatementKind::kCall ||
        k == StatementKind::kOther || k == StatementKind::kExplain) {
      fx.all = fx.schema = true;  // EXPLAIN ANALYZE CREATE TABLE AS creates a table
    }
    // COMMIT PREPARED commits what a PREPARE TRANSACTION left, perhaps in
    // another session and with DDL: nothing here says what it wrote. (Its
    // own session's invalidation came at the PREPARE, before this commit.)
    if (k == StatementKind::kTransaction && ContainsCaseless(text.sql(), "prepared")) fx.all = fx.schema = true;
  }
  for (StatementKind k : a->kinds) {
    if (k == StatementKind::kExplain || k == StatementKind::kCursor) {
      // EXPLAIN ANALYZE executes its statement; a cursor may run a volatile
      // function declared elsewhere.
      if (k == StatementKind::kExplain || !a->functions.empty()) fx.all = true;
    }
  }
  if (fx.all) return fx;
  std::optional<std::vector<std::string>> tables = TablesToInvalidate(*a, oracle);
  if (!tables) {
    fx.all = true;
    return fx;
  }
  if (!tables->empty() && !precise_names) {
    fx.all = true;
    return fx;
  }
  fx.tables = std::move(*tables);
  return fx;
}

// ---------------------------------------------------------------------------
// Keys.
// ---------------------------------------------------------------------------

std::string ClientLocalKey(std::string_view hello_fingerprint, const SessionCacheSettings& s,
                           std::string_view unit_frames) {
  std::string k;
  k.reserve(4 + 4 + hello_fingerprint.size() + 8 + 4 + unit_frames.size());
  k.append("hpc1");
  PutU32(k, static_cast<uint32_t>(hello_fingerprint.size()));
  k.append(hello_fingerprint);
  PutU64(k, s.ttl ? static_cast<uint64_t>(s.ttl->count()) + 1 : 0);
  PutU32(k, static_cast<uint32_t>(unit_frames.size()));
  k.append(unit_frames);
  return k;
}

std::string ClientExtendedKey(std::string_view hello_fingerprint, const SessionCacheSettings& s,
                              const CandidateUnit& unit) {
  size_t size = 4 + 4 + hello_fingerprint.size() + 8 + 1 + 4 + 4 * unit.param_types.size() + 4 + 4 +
                2 * unit.result_formats.size() + 4 + unit.sql.size();
  for (const ParamValue& v : unit.params) size += 1 + 4 + (v.value ? v.value->size() : 0);
  std::string k;
  k.reserve(size);  // one allocation (it grew four times from "hpx1")
  k.append("hpx1");
  PutU32(k, static_cast<uint32_t>(hello_fingerprint.size()));
  k.append(hello_fingerprint);
  PutU64(k, s.ttl ? static_cast<uint64_t>(s.ttl->count()) + 1 : 0);
  k.push_back(unit.describe);
  PutU32(k, static_cast<uint32_t>(unit.param_types.size()));
  for (uint32_t t : unit.param_types) PutU32(k, t);
  PutU32(k, static_cast<uint32_t>(unit.params.size()));
  for (const ParamValue& v : unit.params) {
    k.push_back(static_cast<char>(v.format));
    if (!v.value) {
      PutU32(k, 0xffffffffu);
      continue;
    }
    PutU32(k, static_cast<uint32_t>(v.value->size()));
    k.append(*v.value);
  }
  PutU32(k, static_cast<uint32_t>(unit.result_formats.size()));
  for (int16_t f : unit.result_formats) k.push_back(static_cast<char>(f)), k.push_back(static_cast<char>(f >> 8));
  PutU32(k, static_cast<uint32_t>(unit.sql.size()));
  k.append(unit.sql);
  return k;
}

void SetKeyResultType(std::string& key, uint64_t result_type) {
  if (key.size() < 9 || key[key.size() - 9] != 'R') return;
  std::string v;
  PutU64(v, result_type);
  key.replace(key.size() - 8, 8, v);
}

void AppendKeySuffix(std::string& key, std::string_view hello_fingerprint, char describe,
                     const SessionCacheSettings& s, uint64_t result_type) {
  key.push_back('H');
  PutU32(key, static_cast<uint32_t>(hello_fingerprint.size()));
  key.append(hello_fingerprint);
  key.push_back('D');
  key.push_back(describe);
  key.push_back('L');
  PutU64(key, s.ttl ? static_cast<uint64_t>(s.ttl->count()) + 1 : 0);
  key.push_back('R');
  PutU64(key, result_type);
}

}  // namespace hyperpool::cache
