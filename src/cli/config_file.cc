#include "cli/config_file.h"

#include <sys/stat.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <toml++/toml.h>

namespace hyperpool::cli {

namespace {

enum class Type { kString, kInteger, kBool, kStringArray };

struct KeySpec {
  std::string_view key;   // "pool.size"; top-level keys have no dot
  Type type;
  std::string_view flag;  // the flag it stands for; empty for the special keys
};

// The file's layout, one row per key: the flag each stands for.
constexpr KeySpec kKeys[] = {
    {"threads", Type::kInteger, "--threads"},
    {"listen.address", Type::kString, "--listen"},
    {"listen.unix_socket_dir", Type::kString, "--listen-unix"},
    {"metrics.listen", Type::kString, "--metrics-listen"},
    {"origin.url", Type::kString, "--origin"},
    {"origin.password_file", Type::kString, "--origin-password-file"},
    {"origin.password", Type::kString, ""},
    {"client.user", Type::kString, "--user"},
    {"client.database", Type::kString, "--database"},
    {"client.password_file", Type::kString, "--password-file"},
    {"client.password", Type::kString, ""},
    {"pool.size", Type::kInteger, "--pool-size"},
    {"pool.min_idle", Type::kInteger, "--min-idle"},
    {"pool.mode", Type::kString, "--pool-mode"},
    {"pool.acquire_timeout_ms", Type::kInteger, "--acquire-timeout"},
    {"pool.idle_timeout_s", Type::kInteger, "--idle-timeout"},
    {"pool.max_lifetime_s", Type::kInteger, "--max-lifetime"},
    {"pool.max_pending_to_origin", Type::kInteger, "--max-pending-to-origin"},
    {"cache.enabled", Type::kBool, "--no-cache"},
    {"cache.max_age_s", Type::kInteger, "--cache-max-age"},
    {"cache.swr_s", Type::kInteger, "--cache-swr"},
    {"tls.cert", Type::kString, "--ssl-cert"},
    {"tls.key", Type::kString, "--ssl-key"},
    {"tls.mode", Type::kString, "--ssl-mode"},
    {"client.replication", Type::kString, "--replication"},
    {"log.format", Type::kString, "--log-format"},
    {"log.level", Type::kString, "--log-level"},
    {"log.connections", Type::kBool, "--log-connections"},
    {"log.disconnections", Type::kBool, "--log-disconnections"},
    // The admin console (docs/architecture.md, "Admin console"): one
    // --admin-user setting per name.
    {"admin.users", Type::kStringArray, "--admin-user"},
    {"cache.redis", Type::kString, "--redis-url"},
    {"cache.stale_if_error_s", Type::kInteger, "--stale-if-error"},
    {"cache.wal_invalidation", Type::kString, "--wal-invalidation"},
    {"cache.wal_max_lag_ms", Type::kInteger, "--wal-max-lag"},
    {"cache.wal_hard_lag_ms", Type::kInteger, "--wal-hard-lag"},
    // The link between the halves (`hyperpool endpoint` / `hyperpool client`
    // --config FILE; serve has no link and refuses them).
    {"link.tls_cert", Type::kString, "--tls-cert"},
    {"link.tls_key", Type::kString, "--tls-key"},
    {"link.tls_ca", Type::kString, "--tls-ca"},
    {"link.tls_server_name", Type::kString, "--tls-server-name"},
    {"link.secret_file", Type::kString, "--link-secret-file"},
    {"link.endpoints", Type::kStringArray, "--endpoint"},
    {"link.region", Type::kString, "--region"},
};

// [users] and [databases]: any name, so not in kKeys.
constexpr std::string_view kUsersSection = "users";
constexpr std::string_view kDatabasesSection = "databases";

// The keys of a [databases.NAME] table: the flag each stands for, applied
// to that database's Endpoint only.
constexpr KeySpec kDatabaseKeys[] = {
    {"url", Type::kString, "--origin"},
    {"password_file", Type::kString, "--origin-password-file"},
    {"password", Type::kString, ""},
    {"pool_size", Type::kInteger, "--pool-size"},
    {"min_idle", Type::kInteger, "--min-idle"},
    {"pool_mode", Type::kString, "--pool-mode"},
    {"max_pinned", Type::kInteger, "--max-pinned"},
    {"acquire_timeout_ms", Type::kInteger, "--acquire-timeout"},
    {"query_timeout_ms", Type::kInteger, "--query-timeout"},
    {"cache", Type::kBool, "--no-cache"},
    {"cache_max_age_s", Type::kInteger, "--cache-max-age"},
    // Only in [databases."*"]: how many databases it serves at once.
    {"max_databases", Type::kInteger, "--max-any-databases"},
};

const KeySpec* FindKey(std::string_view key) {
  for (const KeySpec& spec : kKeys) {
    if (spec.key == key) return &spec;
  }
  return nullptr;
}

bool IsSection(std::string_view name) {
  if (name == kUsersSection || name == kDatabasesSection) return true;
  for (const KeySpec& spec : kKeys) {
    if (spec.key.size() > name.size() && spec.key.substr(0, name.size()) == name && spec.key[name.size()] == '.') {
      return true;
    }
  }
  return false;
}

const char* TypeName(Type type) {
  switch (type) {
    case Type::kString:
      return "a string";
    case Type::kInteger:
      return "an integer";
    case Type::kBool:
      return "true or false";
    case Type::kStringArray:
      return "an array of strings";
  }
  return "";
}

std::string Where(const std::string& name, const toml::node& node, std::string_view key) {
  return fmt::format("{}:{}: {}", name, node.source().begin.line, key);
}

class Parser {
 public:
  Parser(const std::string& name, ConfigFile& out) : name_(name), out_(out) {}

  absl::Status Value(std::string_view key, const toml::node& node) {
    const KeySpec* spec = FindKey(key);
    if (spec == nullptr) return absl::InvalidArgumentError(fmt::format("{}: unknown key", Where(name_, node, key)));
    const std::string where = Where(name_, node, key);
    std::string value;
    switch (spec->type) {
      case Type::kString:
        if (!node.is_string()) return WrongType(where, *spec);
        value = **node.as_string();
        break;
      case Type::kInteger: {
        if (!node.is_integer()) return WrongType(where, *spec);
        const int64_t number = **node.as_integer();
        if (number < 0) return absl::InvalidArgumentError(fmt::format("{}: must not be negative", where));
        value = fmt::format("{}", number);
        break;
      }
      case Type::kBool:
        if (!node.is_boolean()) return WrongType(where, *spec);
        value = **node.as_boolean() ? "true" : "false";
        break;
      case Type::kStringArray: {
        const toml::array* array = node.as_array();
        if (array == nullptr) return WrongType(where, *spec);
        for (const toml::node& element : *array) {
          if (!element.is_string() || element.as_string()->get().empty()) {
            return absl::InvalidArgumentError(fmt::format("{}: must hold non-empty strings", where));
          }
          out_.settings.push_back({std::string(spec->flag), **element.as_string(), where});
        }
        return absl::OkStatus();
      }
    }
    if (key == "origin.password") {
      out_.origin_password = value;
      has_password_ = true;
    } else if (key == "client.password") {
      out_.client_password = value;
      has_password_ = true;
    } else if (key == "cache.enabled") {
      if (value == "false") out_.settings.push_back({std::string(spec->flag), "", where});
    } else if (key == "log.connections" || key == "log.disconnections") {
      out_.settings.push_back({std::string(spec->flag), value, where});
    } else {
      out_.settings.push_back({std::string(spec->flag), value, where});
    }
    return absl::OkStatus();
  }

  absl::Status Table(std::string_view prefix, const toml::table& table) {
    for (const auto& [k, node] : table) {
      const std::string key = prefix.empty() ? std::string(k.str()) : fmt::format("{}.{}", prefix, k.str());
      if (node.is_table()) {
        if (!prefix.empty() || !IsSection(key)) {
          return absl::InvalidArgumentError(fmt::format("{}: unknown section", Where(name_, node, key)));
        }
        if (key == kUsersSection) {
          if (absl::Status s = Users(*node.as_table()); !s.ok()) return s;
          continue;
        }
        if (key == kDatabasesSection) {
          if (absl::Status s = Databases(*node.as_table()); !s.ok()) return s;
          continue;
        }
        if (absl::Status s = Table(key, *node.as_table()); !s.ok()) return s;
        continue;
      }
      if (prefix.empty() && IsSection(key)) {
        return absl::InvalidArgumentError(fmt::format("{}: must be a table ([{}])", Where(name_, node, key), key));
      }
      if (absl::Status s = Value(key, node); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  bool has_password() const { return has_password_; }

 private:
  // [users]: name = "SCRAM-SHA-256$..." (PostgreSQL's stored verifier), or
  // name = { password_file = "FILE" } (first line; mode 0600).
  absl::Status Users(const toml::table& table) {
    for (const auto& [k, node] : table) {
      const std::string name(k.str());
      const std::string where = Where(name_, node, fmt::format("users.{}", name));
      ConfigUser user{name, "", "", where};
      if (const auto* text = node.as_string()) {
        user.scram_verifier = **text;
        if (user.scram_verifier.rfind("SCRAM-SHA-256$", 0) != 0) {
          return absl::InvalidArgumentError(fmt::format(
              "{}: must be a SCRAM-SHA-256 verifier as PostgreSQL stores it, or {{ password_file = \"FILE\" }}",
              where));
        }
      } else if (const auto* fields = node.as_table()) {
        for (const auto& [field, value] : *fields) {
          const std::string field_where = fmt::format("{}.{}", where, field.str());
          if (field.str() == "password_file" && value.is_string()) {
            user.password_file = **value.as_string();
          } else if (field.str() == "verifier" && value.is_string()) {
            user.scram_verifier = **value.as_string();
          } else if (field.str() == "databases" && value.is_array()) {
            user.databases.emplace();
            for (const toml::node& element : *value.as_array()) {
              if (!element.is_string() || element.as_string()->get().empty()) {
                return absl::InvalidArgumentError(fmt::format("{}: must hold non-empty strings", field_where));
              }
              user.databases->push_back(**element.as_string());
            }
          } else {
            return absl::InvalidArgumentError(fmt::format(
                "{}: unknown key or wrong type (password_file, verifier: strings; databases: array of strings)",
                field_where));
          }
        }
        if (user.password_file.empty() == user.scram_verifier.empty()) {
          return absl::InvalidArgumentError(fmt::format("{}: needs exactly one of password_file, verifier", where));
        }
      } else {
        return absl::InvalidArgumentError(
            fmt::format("{}: must be a verifier string or {{ password_file = \"FILE\" }}", where));
      }
      out_.users.push_back(std::move(user));
    }
    return absl::OkStatus();
  }

  // [databases.NAME]: url = "postgresql://...", and the keys of kDatabaseKeys.
  absl::Status Databases(const toml::table& table) {
    for (const auto& [k, node] : table) {
      const std::string name(k.str());
      const std::string where = Where(name_, node, fmt::format("databases.{}", name));
      const toml::table* fields = node.as_table();
      if (fields == nullptr) {
        return absl::InvalidArgumentError(fmt::format("{}: must be a table ([databases.{}])", where, name));
      }
      if (name.empty()) return absl::InvalidArgumentError(fmt::format("{}: needs a name", where));
      ConfigDatabase db{name, {}, "", where};
      for (const auto& [field, value] : *fields) {
        const std::string field_where = Where(name_, value, fmt::format("databases.{}.{}", name, field.str()));
        const KeySpec* spec = nullptr;
        for (const KeySpec& s : kDatabaseKeys) {
          if (s.key == field.str()) spec = &s;
        }
        if (spec == nullptr) {
          std::string keys;
          for (const KeySpec& s : kDatabaseKeys) keys += (keys.empty() ? "" : ", ") + std::string(s.key);
          return absl::InvalidArgumentError(fmt::format("{}: unknown key (known: {})", field_where, keys));
        }
        std::string text;
        if (spec->type == Type::kString) {
          if (!value.is_string()) return WrongType(field_where, *spec);
          text = **value.as_string();
        } else if (spec->type == Type::kInteger) {
          if (!value.is_integer()) return WrongType(field_where, *spec);
          if (**value.as_integer() < 0) {
            return absl::InvalidArgumentError(fmt::format("{}: must not be negative", field_where));
          }
          text = fmt::format("{}", **value.as_integer());
        } else {
          if (!value.is_boolean()) return WrongType(field_where, *spec);
          text = **value.as_boolean() ? "true" : "false";
        }
        if (field.str() == "password") {
          db.origin_password = text;
          has_password_ = true;
        } else if (field.str() == "cache") {
          if (text == "false") db.settings.push_back({std::string(spec->flag), "", field_where});
        } else {
          db.settings.push_back({std::string(spec->flag), text, field_where});
        }
      }
      bool has_url = false;
      for (const ConfigSetting& s : db.settings) has_url |= s.flag == "--origin";
      if (!has_url) return absl::InvalidArgumentError(fmt::format("{}: needs url (the origin)", where));
      out_.databases.push_back(std::move(db));
    }
    return absl::OkStatus();
  }

  static absl::Status WrongType(const std::string& where, const KeySpec& spec) {
    return absl::InvalidArgumentError(fmt::format("{}: must be {}", where, TypeName(spec.type)));
  }

  const std::string& name_;
  ConfigFile& out_;
  bool has_password_ = false;
};

}  // namespace

absl::StatusOr<ConfigFile> ParseConfig(const std::string& text, const std::string& name, unsigned mode) {
  toml::table root;
  try {
    root = toml::parse(text, std::string_view(name));
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(
        fmt::format("{}:{}: {}", name, e.source().begin.line, std::string(e.description())));
  }
  ConfigFile out;
  Parser parser(name, out);
  if (absl::Status s = parser.Table("", root); !s.ok()) return s;
  if (parser.has_password() && (mode & (S_IRWXG | S_IRWXO)) != 0) {
    out.warnings.push_back(fmt::format(
        "{} holds a password and can be read by group or others (mode {:04o}); chmod 600 it", name, mode & 07777));
  }
  return out;
}

absl::StatusOr<ConfigFile> LoadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  struct stat st;
  if (!in || ::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(fmt::format("cannot read config file {}", path));
  }
  // A config file is a few hundred bytes; refuse what cannot be one.
  constexpr std::size_t kMaxConfigBytes = 1 << 20;
  if (static_cast<std::size_t>(st.st_size) > kMaxConfigBytes) {
    return absl::InvalidArgumentError(fmt::format("config file {} is larger than 1 MiB", path));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseConfig(text.str(), path, st.st_mode);
}

std::vector<std::string> ConfigKeys() {
  std::vector<std::string> keys;
  for (const KeySpec& spec : kKeys) keys.emplace_back(spec.key);
  keys.emplace_back("users.<name>");
  for (const KeySpec& spec : kDatabaseKeys) keys.push_back(fmt::format("databases.<name>.{}", spec.key));
  return keys;
}

}  // namespace hyperpool::cli
