#include "endpoint/origin_config.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"

namespace hyperpool {
namespace {

// PostgreSQL truncates identifiers to NAMEDATALEN - 1 bytes; a longer user or
// database name would silently log in as someone else's truncated name.
constexpr std::size_t kMaxNameLength = 63;

// Concatenation for std::string_view and numbers (Debian's absl::StrCat takes
// only its own absl::string_view).
void AppendPart(std::string& out, std::string_view part) { out.append(part); }
template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int>>>
void AppendPart(std::string& out, Int number) {
  out.append(std::to_string(number));
}
template <typename... Parts>
std::string Cat(const Parts&... parts) {
  std::string out;
  (AppendPart(out, parts), ...);
  return out;
}
template <typename... Parts>
void Append(std::string* out, const Parts&... parts) {
  (AppendPart(*out, parts), ...);
}

constexpr std::string_view kUriPrefixes[] = {"postgresql://", "postgres://"};

// libpq keywords we know but refuse (see the header for why).
constexpr std::string_view kUnsupportedKeywords[] = {
    "hostaddr",         "service",       "client_encoding",
    "replication",      "require_auth",  "sslpassword",       "sslcertmode",
    "sslcompression",   "sslcrl",        "sslcrldir",         "ssl_min_protocol_version",
    "ssl_max_protocol_version",          "sslnegotiation",    "requirepeer",
    "krbsrvname",       "gsslib",        "gssdelegation",     "load_balance_hosts",
    "requiressl",       "tty",           "authtype",
};

constexpr std::string_view kKnownKeywords[] = {
    "host",          "port",          "user",           "password",
    "dbname",        "sslmode",       "sslrootcert",    "sslcert",
    "sslkey",        "sslsni",        "connect_timeout", "application_name",
    "fallback_application_name",      "options",        "keepalives",
    "keepalives_idle", "keepalives_interval",            "keepalives_count",
    "tcp_user_timeout", "target_session_attrs",          "gssencmode",
    "channel_binding", "passfile",
};

template <std::size_t N>
bool Contains(const std::string_view (&list)[N], std::string_view word) {
  return std::find(std::begin(list), std::end(list), word) != std::end(list);
}

bool IsKnownKeyword(std::string_view word) {
  return Contains(kKnownKeywords, word) || Contains(kUnsupportedKeywords, word);
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::optional<int> ParseNonNegativeInt(std::string_view text) {
  int value = 0;
  if (text.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Never echoes `text`: it may be (part of) the password.
absl::StatusOr<std::string> PercentDecode(std::string_view text, std::string_view what) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) {
      return absl::InvalidArgumentError(Cat("invalid percent-encoding in ", what));
    }
    int hi = HexValue(text[i + 1]);
    int lo = HexValue(text[i + 2]);
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(Cat("invalid percent-encoding in ", what));
    }
    char c = static_cast<char>(hi * 16 + lo);
    if (c == '\0') {
      return absl::InvalidArgumentError(Cat("forbidden %00 in ", what));
    }
    out.push_back(c);
    i += 2;
  }
  return out;
}

// Keeps RFC 3986 unreserved characters, encodes everything else.
std::string PercentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : text) {
    unsigned char u = static_cast<unsigned char>(c);
    if ((u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') || u == '-' ||
        u == '.' || u == '_' || u == '~') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xF]);
    }
  }
  return out;
}

class Parser {
 public:
  // Text that may hold the password when a URI is malformed (say, a raw '/'
  // in the password moves the split points); anything quoted from inside it
  // is hidden.
  void set_secret_region(std::string_view region) { secret_region_ = region; }

  // Applies one keyword. Later values override earlier ones, as in libpq.
  absl::Status Set(std::string_view key, std::string_view value, bool from_uri_query) {
    if (key == "host") {
      if (value.find(',') != std::string_view::npos) {
        return Invalid("several hosts are not supported; give one origin host");
      }
      config_.host = value.empty() ? "localhost" : std::string(value);
    } else if (key == "port") {
      if (value.find(',') != std::string_view::npos) {
        return Invalid("several ports are not supported; give one origin port");
      }
      if (value.empty()) {
        config_.port = 5432;
      } else {
        auto port = ParseNonNegativeInt(value);
        if (!port || *port < 1 || *port > 65535) {
          return Invalid(Cat("invalid port ", Quote(value), ": must be a number from 1 to 65535"));
        }
        config_.port = static_cast<std::uint16_t>(*port);
      }
    } else if (key == "user") {
      if (value.size() > kMaxNameLength) {
        return Invalid(Cat("user name is longer than ", kMaxNameLength, " bytes"));
      }
      config_.user = std::string(value);
    } else if (key == "password") {
      config_.password = std::string(value);
    } else if (key == "passfile") {
      config_.passfile = std::string(value);
    } else if (key == "dbname") {
      if (value.size() > kMaxNameLength) {
        return Invalid(Cat("database name is longer than ", kMaxNameLength, " bytes"));
      }
      config_.dbname = std::string(value);
    } else if (key == "sslmode") {
      static constexpr std::array<SslMode, 6> kModes = {SslMode::kDisable, SslMode::kAllow,
                                                        SslMode::kPrefer,  SslMode::kRequire,
                                                        SslMode::kVerifyCa, SslMode::kVerifyFull};
      auto it = std::find_if(kModes.begin(), kModes.end(),
                             [&](SslMode m) { return SslModeName(m) == value; });
      if (it == kModes.end()) {
        return Invalid(Cat("invalid sslmode ", Quote(value),
                                    ": use disable, allow, prefer, require, verify-ca or verify-full"));
      }
      config_.sslmode = *it;
    } else if (key == "ssl" && from_uri_query) {
      // libpq's JDBC compatibility: ?ssl=true means sslmode=require.
      if (value != "true") return Invalid(Cat("invalid ssl ", Quote(value), ": only ssl=true is accepted"));
      config_.sslmode = SslMode::kRequire;
    } else if (key == "sslrootcert") {
      config_.sslrootcert = std::string(value);
    } else if (key == "sslcert") {
      config_.sslcert = std::string(value);
    } else if (key == "sslkey") {
      config_.sslkey = std::string(value);
    } else if (key == "sslsni") {
      if (value != "0" && value != "1") return Invalid(Cat("invalid sslsni ", Quote(value), ": use 0 or 1"));
      config_.sslsni = value == "1";
    } else if (key == "connect_timeout") {
      auto seconds = value.empty() ? std::optional<int>(0) : ParseNonNegativeInt(value);
      if (!seconds) {
        return Invalid(Cat("invalid connect_timeout ", Quote(value), ": must be a whole number of seconds"));
      }
      config_.connect_timeout = std::chrono::seconds(*seconds);
    } else if (key == "application_name") {
      config_.application_name = std::string(value);
    } else if (key == "fallback_application_name") {
      fallback_application_name_ = std::string(value);
    } else if (key == "options") {
      auto settings = ParseStartupOptions(value);
      if (!settings.ok()) return Invalid(Cat("invalid options: ", std::string(settings.status().message())));
      config_.options = std::string(value);
      config_.settings = *std::move(settings);
    } else if (key == "keepalives" || key == "keepalives_idle" || key == "keepalives_interval" ||
               key == "keepalives_count" || key == "tcp_user_timeout") {
      if (!value.empty() && !ParseNonNegativeInt(value)) {
        return Invalid(Cat("invalid ", key, " ", Quote(value), ": must be a whole number"));
      }
    } else if (key == "target_session_attrs") {
      if (value != "any") return Unsupported(key, value, "any");
    } else if (key == "gssencmode" || key == "channel_binding") {
      if (value != "disable" && value != "prefer") return Unsupported(key, value, "disable or prefer");
    } else if (Contains(kUnsupportedKeywords, key)) {
      return Invalid(Cat("unsupported parameter ", Quote(key)));
    } else {
      return Invalid(Cat("unknown parameter ", Quote(key)));
    }
    return absl::OkStatus();
  }

  // Checks what only the whole string can tell and fills in defaults.
  absl::StatusOr<OriginConfig> Finish() && {
    if (config_.user.empty()) {
      // libpq would fall back to the operating system user; a pooler running
      // as some service account must not guess who to log in as.
      return Invalid("user is required");
    }
    if (config_.dbname.empty()) config_.dbname = config_.user;
    if (config_.application_name.empty()) config_.application_name = fallback_application_name_;
    return std::move(config_);
  }

  // Quotes user input for an error message, unless it might be the password.
  std::string Quote(std::string_view text) const {
    if (!config_.password.empty() && text.find(config_.password) != std::string_view::npos) {
      return "(hidden)";
    }
    if (!text.empty() && !secret_region_.empty()) {
      // `text` is usually a view into the input: hide it if it overlaps the
      // region, else (a decoded copy) if the region contains it.
      const char* begin = secret_region_.data();
      const char* end = begin + secret_region_.size();
      bool overlaps = std::less<>()(begin, text.data() + text.size()) &&
                      std::less<>()(text.data(), end);
      if (overlaps || secret_region_.find(text) != std::string_view::npos) return "(hidden)";
    }
    return Cat("'", text, "'");
  }

  const std::string& password() const { return config_.password; }

 private:
  absl::Status Invalid(std::string message) const { return absl::InvalidArgumentError(std::move(message)); }

  absl::Status Unsupported(std::string_view key, std::string_view value, std::string_view allowed) const {
    return Invalid(Cat("unsupported ", key, " ", Quote(value), ": only ", allowed, " is supported"));
  }

  OriginConfig config_;
  std::string fallback_application_name_;
  std::string_view secret_region_;
};

absl::Status ParseKeyValue(std::string_view text, Parser& parser) {
  std::size_t i = 0;
  // After an unquoted password, a stray word is most likely the rest of a
  // password with a space in it: do not quote it back.
  bool after_unquoted_password = false;
  auto skip_space = [&] {
    while (i < text.size() && IsSpace(text[i])) ++i;
  };
  while (true) {
    skip_space();
    if (i >= text.size()) break;
    std::size_t key_start = i;
    while (i < text.size() && !IsSpace(text[i]) && text[i] != '=') ++i;
    std::string_view key = text.substr(key_start, i - key_start);
    bool hide_key = after_unquoted_password && !IsKnownKeyword(key);
    skip_space();
    if (key.empty()) return absl::InvalidArgumentError("missing parameter name before '='");
    if (i >= text.size() || text[i] != '=') {
      if (hide_key) {
        return absl::InvalidArgumentError(
            "missing '=' after the word following the password (quote a password that contains spaces)");
      }
      return absl::InvalidArgumentError(Cat("missing '=' after ", parser.Quote(key)));
    }
    if (hide_key) {
      return absl::InvalidArgumentError(
          "unknown parameter after the password (quote a password that contains spaces)");
    }
    ++i;  // '='
    skip_space();
    std::string value;
    bool quoted = i < text.size() && text[i] == '\'';
    if (quoted) {
      ++i;
      bool closed = false;
      while (i < text.size()) {
        char c = text[i++];
        if (c == '\\' && i < text.size()) {
          value.push_back(text[i++]);
        } else if (c == '\'') {
          closed = true;
          break;
        } else {
          value.push_back(c);
        }
      }
      if (!closed) {
        return absl::InvalidArgumentError(Cat("unterminated quoted value for ", parser.Quote(key)));
      }
    } else {
      while (i < text.size() && !IsSpace(text[i])) {
        char c = text[i++];
        if (c == '\\' && i < text.size()) c = text[i++];
        value.push_back(c);
      }
    }
    if (absl::Status s = parser.Set(key, value, /*from_uri_query=*/false); !s.ok()) return s;
    after_unquoted_password = key == "password" && !quoted;
  }
  return absl::OkStatus();
}

absl::Status ParseUri(std::string_view text, std::string_view prefix, Parser& parser) {
  std::string_view rest = text.substr(prefix.size());
  if (std::size_t last_at = rest.rfind('@'); last_at != std::string_view::npos) {
    parser.set_secret_region(rest.substr(0, last_at));
  }
  std::string_view query;
  if (std::size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  std::string_view path;
  bool has_path = false;
  if (std::size_t slash = rest.find('/'); slash != std::string_view::npos) {
    path = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    has_path = true;
  }
  std::string_view authority = rest;
  // An '@' after the host part means a raw '/' or '?' in the user info moved
  // the split points: say how to fix it, since the echo is hidden.
  const bool stray_at = authority.find('@') == std::string_view::npos &&
                        text.find('@', prefix.size()) != std::string_view::npos;
  auto hint = [stray_at](absl::Status s) {
    if (!stray_at) return s;
    return absl::InvalidArgumentError(
        Cat(std::string(s.message()), " (percent-encode '/', '?' and '@' in the user name and password)"));
  };

  // The last '@' splits user info from the host, so a raw '@' in a password
  // still works (libpq would split at the first one and fail).
  if (std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    std::string_view user = userinfo;
    if (std::size_t colon = userinfo.find(':'); colon != std::string_view::npos) {
      user = userinfo.substr(0, colon);
      auto password = PercentDecode(userinfo.substr(colon + 1), "the password");
      if (!password.ok()) return password.status();
      if (absl::Status s = parser.Set("password", *password, false); !s.ok()) return s;
    }
    auto decoded_user = PercentDecode(user, "the user name");
    if (!decoded_user.ok()) return decoded_user.status();
    if (absl::Status s = parser.Set("user", *decoded_user, false); !s.ok()) return s;
  }

  if (authority.find(',') != std::string_view::npos) {
    return absl::InvalidArgumentError("several hosts are not supported; give one origin host");
  }
  std::string_view host = authority;
  std::string_view port;
  bool has_port = false;
  if (!authority.empty() && authority.front() == '[') {
    std::size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return absl::InvalidArgumentError("missing ']' after the IPv6 address in the URI");
    }
    host = authority.substr(1, close - 1);
    if (host.empty()) return absl::InvalidArgumentError("empty IPv6 address in the URI");
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        return absl::InvalidArgumentError("unexpected text after the IPv6 address in the URI");
      }
      port = after.substr(1);
      has_port = true;
    }
    if (absl::Status s = parser.Set("host", host, false); !s.ok()) return s;
  } else {
    if (std::size_t colon = authority.find(':'); colon != std::string_view::npos) {
      host = authority.substr(0, colon);
      port = authority.substr(colon + 1);
      has_port = true;
    }
    auto decoded_host = PercentDecode(host, "the host");
    if (!decoded_host.ok()) return decoded_host.status();
    if (!decoded_host->empty()) {
      if (absl::Status s = parser.Set("host", *decoded_host, false); !s.ok()) return s;
    }
  }
  if (has_port) {
    auto decoded_port = PercentDecode(port, "the port");
    if (!decoded_port.ok()) return hint(decoded_port.status());
    if (absl::Status s = parser.Set("port", *decoded_port, false); !s.ok()) return hint(s);
  }

  if (has_path && !path.empty()) {
    auto dbname = PercentDecode(path, "the database name");
    if (!dbname.ok()) return dbname.status();
    if (absl::Status s = parser.Set("dbname", *dbname, false); !s.ok()) return s;
  }

  while (!query.empty()) {
    std::size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    std::size_t eq = pair.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(
          Cat("missing '=' in URI query parameter ", parser.Quote(pair)));
    }
    auto key = PercentDecode(pair.substr(0, eq), "a URI query parameter name");
    if (!key.ok()) return key.status();
    auto value = PercentDecode(pair.substr(eq + 1), Cat("the value of ", parser.Quote(*key)));
    if (!value.ok()) return value.status();
    if (absl::Status s = parser.Set(*key, *value, /*from_uri_query=*/true); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseStartupOptions(
    std::string_view options) {
  // Split as the server does (pg_split_opts): unescaped whitespace separates
  // words, a backslash makes the next character part of the word.
  std::vector<std::string> words;
  std::size_t i = 0;
  while (true) {
    while (i < options.size() && IsSpace(options[i])) ++i;
    if (i >= options.size()) break;
    std::string word;
    while (i < options.size() && !IsSpace(options[i])) {
      if (options[i] == '\\' && i + 1 < options.size()) ++i;
      word.push_back(options[i++]);
    }
    words.push_back(std::move(word));
  }

  // Then interpret them as the server interprets startup switches: only the
  // run-time settings (-c / --) make sense for a pooled connection.
  std::vector<std::pair<std::string, std::string>> settings;
  for (std::size_t w = 0; w < words.size(); ++w) {
    std::string_view word = words[w];
    std::string_view assignment;
    if (word.starts_with("--")) {
      assignment = word.substr(2);
    } else if (word == "-c") {
      if (w + 1 == words.size()) return absl::InvalidArgumentError("'-c' without name=value");
      assignment = words[++w];
    } else if (word.starts_with("-c")) {
      assignment = word.substr(2);
    } else {
      return absl::InvalidArgumentError(
          Cat("unsupported switch '", word, "' (only -c name=value and --name=value)"));
    }
    std::size_t eq = assignment.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(Cat("setting '", assignment, "' has no value"));
    }
    if (eq == 0) return absl::InvalidArgumentError("setting with an empty name");
    std::string name(assignment.substr(0, eq));
    std::replace(name.begin(), name.end(), '-', '_');  // as the server's ParseLongOption
    settings.emplace_back(std::move(name), std::string(assignment.substr(eq + 1)));
  }
  return settings;
}

absl::StatusOr<OriginConfig> ParseOriginConfig(std::string_view text) {
  Parser parser;
  absl::Status status;
  auto prefix = std::find_if(std::begin(kUriPrefixes), std::end(kUriPrefixes),
                             [&](std::string_view p) { return text.starts_with(p); });
  if (prefix != std::end(kUriPrefixes)) {
    status = ParseUri(text, *prefix, parser);
  } else {
    status = ParseKeyValue(text, parser);
  }
  if (!status.ok()) {
    // Last line of defence: no message may carry the password verbatim.
    std::string message(status.message().data(), status.message().size());
    const std::string& password = parser.password();
    if (!password.empty()) {
      for (std::size_t at = message.find(password); at != std::string::npos;
           at = message.find(password, at + 3)) {
        message.replace(at, password.size(), "***");
      }
    }
    return absl::InvalidArgumentError(message);
  }
  return std::move(parser).Finish();
}

std::string RedactedOriginString(const OriginConfig& config) {
  std::string out = "postgresql://";
  Append(&out, PercentEncode(config.user), config.password.empty() ? "" : ":***", "@");
  if (config.host.find(':') != std::string::npos) {
    Append(&out, "[", config.host, "]");  // IPv6
  } else {
    Append(&out, PercentEncode(config.host));
  }
  Append(&out, ":", config.port, "/", PercentEncode(config.dbname), "?sslmode=",
                  SslModeName(config.sslmode));
  auto param = [&](std::string_view key, std::string_view value) {
    if (!value.empty()) Append(&out, "&", key, "=", PercentEncode(value));
  };
  param("sslrootcert", config.sslrootcert);
  param("sslcert", config.sslcert);
  param("sslkey", config.sslkey);
  param("passfile", config.passfile);
  if (!config.sslsni) param("sslsni", "0");
  if (config.connect_timeout.count() > 0) param("connect_timeout", std::to_string(config.connect_timeout.count()));
  param("application_name", config.application_name);
  param("options", config.options);
  return out;
}

}  // namespace hyperpool
