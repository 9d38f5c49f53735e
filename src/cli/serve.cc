// `hyperpool serve`: both halves in one process via hyperpool::connect().
// Prints the local connection string as the first line of stdout once it
// accepts connections; logs to stderr; drains and exits 0 on SIGINT/SIGTERM
// or the admin console's SHUTDOWN; re-reads the config on SIGHUP or RELOAD.
// Options come from --config FILE first, then the flags (which override it).

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <string>
#include <string_view>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/signal_set.hpp>
#include <fmt/format.h>

#include "absl/strings/numbers.h"
#include "cli/cli_options.h"
#include "cli/commands.h"
#include "cli/config_file.h"
#include "cli/reload_plan.h"
#include "cli/serve_admin.h"
#include "client/client_util.h"
#include "endpoint/origin_config.h"
#include "hyperpool/hyperpool.h"
#include "cli/metrics_flag.h"

namespace hyperpool::cli {

const char* const kServeUsage = R"(usage: hyperpool serve --origin URL [options]
       hyperpool serve --config FILE [options]

Runs a local PostgreSQL endpoint for applications (the Client half) and the
pool towards the origin database (the Endpoint half) in this process. Prints
the local connection string as the first line of stdout, logs to stderr,
drains and exits 0 on SIGINT or SIGTERM.

Options:
  --config FILE           read options from a TOML file (see share/hyperpool/hyperpool.toml.example);
                          flags given as well override it; it may hold the origin password;
                          its [databases.NAME] tables serve several databases (instead of --origin)
  --origin URL            origin database: postgresql://user:pass@host:port/db?sslmode=...
                          or a key=value string (default: $HYPERPOOL_ORIGIN); keep the
                          password out of it (argv is public): see --origin-password-file
  --origin-password-file FILE  the origin's password (first line; mode 0600) when the
                          origin string has none; else PGPASSWORD, then PGPASSFILE or ~/.pgpass
  --listen HOST:PORT      local address for applications (default 127.0.0.1:0, a free port)
  --listen-unix DIR       also listen on the Unix socket DIR/.s.PGSQL.<port> (psql -h DIR -p PORT)
  --metrics-listen HOST:PORT  serve /metrics (Prometheus), /healthz and a live read-only dashboard
                          (/dashboard) over HTTP there, to whoever reaches it: keep it on loopback;
                          port 0 picks a free one; the bound address is logged: "metrics on http://HOST:PORT"
  --pool-size N           most origin connections open at once (default 10)
  --min-idle N            origin connections kept open while idle (default 0)
  --acquire-timeout MS    wait for a pooled connection before failing with 53300 (default 15000)
  --server-connect-timeout MS  limit for opening one origin connection (default 5000)
  --query-timeout MS      cancel a statement running longer on the origin: 57014 (default 0, off)
  --idle-in-transaction-timeout MS  end a session idle in a transaction: 25P03 (default 0, off)
  --idle-timeout S        close idle origin connections above min-idle after S seconds (default 600)
  --max-lifetime S        close origin connections older than S seconds (default 3600)
  --pool-mode MODE        transaction (default) or session
  --max-pinned N          sessions pinned to a connection (temp table, advisory lock, ...)
                          hold at most N connections beyond --pool-size (default: the pool size);
                          a statement that would pin one more waits for a slot
  --pinned-idle-timeout S close a pinned session idle for S seconds (default 600, 0 = never)
  --max-pending-to-origin N  stop reading a client whose bytes not yet written to its busy
                          origin connection pass N (suffix K, M, G; default 4M)
  --user U                user name applications log in with (default hyperpool)
  --password P            their password (default: a random one, shown in the connection string)
  --password-file FILE    read that password from FILE (first line; mode 0600)
  --scram-iterations N    PBKDF2 iterations of the app login, for every driver (default
                          4096, and 16 with a generated password for drivers known to
                          accept it; PgJDBC refuses counts below 4096)
  --database D            database name applications use (default hyperpool)
  --threads N             worker threads (default 0 = one per core)
  --client-login-timeout S  close an application that has not logged in after S seconds
                          (or Nms; default 15), without a message, as PostgreSQL does
  --client-idle-timeout S close an application idle outside a transaction for S seconds
                          (or Nms) with FATAL 57P05 (default 0 = never)
  --max-message-size N    largest message an application may send, in bytes (suffix K, M,
                          G; default 64M); larger ones get FATAL 54000
  --no-cache              turn the query cache off (both tiers; it is on by default)
  --ssl-cert FILE         TLS towards applications: PEM certificate chain (with --ssl-key);
                          SSLRequest is then answered 'S' (else 'N')
  --ssl-key FILE          its PEM private key
  --ssl-mode MODE         allow (default: TLS or plaintext) or require (a plaintext login
                          gets FATAL 28000, as a pg_hba.conf with only hostssl lines)
  --replication MODE      replication logins, carried to a walsender of their own as the
                          origin role: logical (default: replication=database, this
                          database only), all (physical too: the whole cluster) or off
  --log-format FORMAT     event log lines as text (key=value, default) or json
  --log-level LEVEL       debug, info (default), warn or error
  --log-connections       log session_start after each login (off by default, like PostgreSQL)
  --log-disconnections    log session_end with the session's duration (off by default)
  --cache-max-age S       seconds a cached result is served fresh (default 60, at most 3600)
  --cache-swr S           seconds a stale result is served while one refresh runs (default 15)
  --admin-user NAME       may use the admin console (database "hyperpool"; repeatable; the
                          same password as --user); [admin] users in the config file
  --redis-url URL         a shared cache tier on Redis (redis://HOST:PORT[/DB]) behind the local
                          one, shared with every Endpoint of the same origin (default: none)
  --redis-timeout MS      a Redis command slower than this counts as Redis down (default 50)
  --stale-if-error S      serve a cached result up to S seconds past its max age when the origin
                          cannot be reached (default 0 = off)
  --wal-invalidation M    on|off|auto: invalidate the cache from the origin's WAL (a logical
                          replication connection, temporary slot, test_decoding), so writes that
                          bypass hyperpool are seen within --wal-max-lag; auto: when the origin
                          allows it (wal_level = logical, REPLICATION), else by max age;
                          on: required, no cached rows while it is down; with on the default
                          --cache-max-age is 600 (default auto)
  --wal-max-lag MS        serve cached rows only while the feed lags less than this (default 100)
  --wal-hard-lag MS       past this lag drop the slot and start a fresh one (default 10000)
  --help                  print this help

Signals: SIGHUP re-reads --config FILE (databases added or removed, pool size and timeouts,
per-user databases and admin users take effect
for new units of work; other changes are logged as needing a restart; a file that does
not parse is rejected whole). SIGINT/SIGTERM drain and exit 0.
)";

namespace {

int UsageError(const std::string& message) {
  std::fprintf(stderr, "hyperpool serve: %s\n\n%s", message.c_str(), kServeUsage);
  return 2;
}

void LogLine(const std::string& line) {
  std::string text = "hyperpool serve: " + line + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

// The options of the command line as (flag, value) settings, after pulling
// out --config. Returns the usage error, if any.
std::optional<std::string> CollectArgs(int argc, char** argv, std::string& config_path,
                                       std::vector<ConfigSetting>& settings, bool& help) {
  for (int i = 2; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help = true;
      return std::nullopt;
    }
    if (arg == "--no-cache" || IsBareLogFlag(arg)) {
      settings.push_back({std::string(arg), "", ""});
      continue;
    }
    std::string value;
    size_t eq = arg.find('=');
    std::string_view name = arg;
    if (arg.substr(0, 2) == "--" && eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = std::string(arg.substr(eq + 1));
    } else {
      if (i + 1 >= argc) return fmt::format("option {} needs a value", std::string(arg));
      value = argv[++i];
    }
    if (name == "--config") {
      config_path = value;
    } else {
      settings.push_back({std::string(name), std::move(value), ""});
    }
  }
  return std::nullopt;
}

// Everything the file and the flags say, validated: what starts the
// process and what a reload compares with the running one.
struct ServeSettings {
  ConnectOptions options;
  std::string metrics_listen;
  std::vector<std::string> admin_users;
  LoggerOptions log;
  SettingMap map;  // for PlanReload and SHOW CONFIG
  // [databases.NAME] (options.databases holds their Endpoint options, the
  // default database first): each one's own settings, for a reload.
  std::map<std::string, SettingMap> database_maps;
  // [users.NAME] databases = [...]: user -> the databases allowed.
  std::map<std::string, std::set<std::string>> permissions;
};

// Which databases serve has and who may use them (ClientOptions::databases);
// replaced whole by a reload.
class ServeDirectory final : public DatabaseDirectory {
 public:
  // `any`: a [databases."*"] entry serves every other name.
  void Update(std::set<std::string> names, std::map<std::string, std::set<std::string>> permissions,
              bool any = false) {
    std::lock_guard lock(mu_);
    names_ = std::move(names);
    permissions_ = std::move(permissions);
    any_ = any;
  }

  Access Check(std::string_view user, std::string_view database) const override {
    std::lock_guard lock(mu_);
    const std::string db(database);
    if (names_.count(db) == 0 && !any_) return Access::kUnknown;
    auto it = permissions_.find(std::string(user));
    if (it != permissions_.end() && it->second.count(db) == 0) return Access::kDenied;
    return Access::kAllowed;
  }

 private:
  mutable std::mutex mu_;
  std::set<std::string> names_;
  std::map<std::string, std::set<std::string>> permissions_;
  bool any_ = false;
};

std::set<std::string> DatabaseNames(const ServeSettings& s) {
  std::set<std::string> names;
  if (s.options.databases.empty()) names.insert(s.options.client.database);
  for (const ConnectOptions::Database& db : s.options.databases) names.insert(db.name);
  return names;
}

const char* ModeName(PoolMode mode) { return mode == PoolMode::kTransaction ? "transaction" : "session"; }

// PgBouncer's "*" entry: [databases."*"], with the keys of any database
// plus max_databases.
constexpr std::string_view kAnyDatabase = "*";
constexpr std::string_view kMaxAnyDatabasesFlag = "--max-any-databases";

// A [databases.NAME] table's Endpoint options: the global ones (the file's
// and the flags'), then the table's own keys over them. `max_any`: where
// max_databases goes (the "*" entry only; null: not a key of this table).
std::optional<std::string> DatabaseEndpoint(const ConfigDatabase& db, ServeSettings& out, EndpointOptions& endpoint,
                                            std::size_t* max_any) {
  endpoint = out.options.endpoint;
  endpoint.origin.clear();
  endpoint.origin_password.clear();
  endpoint.origin_password_file.clear();
  SettingMap& map = out.database_maps[db.name];
  for (const ConfigSetting& setting : db.settings) {
    map[setting.flag] = setting.value;
    if (setting.flag == kMaxAnyDatabasesFlag && max_any != nullptr) {
      uint64_t n = 0;
      if (!ParseNumber(setting.value, n) || n == 0 || n > 10000) {
        return fmt::format("{}: max_databases needs a number from 1 to 10000", setting.where);
      }
      *max_any = n;
      continue;
    }
    if (setting.flag == "--no-cache") {
      endpoint.cache.enabled = false;
      continue;
    }
    std::optional<std::string> error = ApplyEndpointOption(setting.flag, setting.value, endpoint);
    if (!error) return fmt::format("{}: not a database setting", setting.where);
    if (!error->empty()) return fmt::format("{}: {}", setting.where, *error);
  }
  endpoint.origin_password = db.origin_password;
  if (!db.origin_password.empty()) map["(origin password)"] = db.origin_password;
  if (endpoint.pool.min_idle > endpoint.pool.max_size) {
    return fmt::format("{}: min_idle cannot exceed pool_size", db.where);
  }
  return std::nullopt;
}

// [databases.NAME] as Endpoint options: the global ones (the file's and
// the flags'), then the database's own keys over them. The default
// database (--database / [client] database, else the first) goes first.
std::optional<std::string> BuildDatabases(const std::vector<ConfigDatabase>& databases, ServeSettings& out) {
  if (databases.empty()) return std::nullopt;
  if (out.map.count("--origin") != 0) {
    return "--origin / [origin] url cannot be combined with [databases]: give each database its url";
  }
  const bool named_default = out.map.count("--database") != 0;
  bool default_found = false;
  for (const ConfigDatabase& db : databases) {
    EndpointOptions endpoint;
    if (db.name == kAnyDatabase) {
      // PgBouncer's "*" entry: not routed by name (ConnectOptions::any_database).
      if (auto error = DatabaseEndpoint(db, out, endpoint, &out.options.max_any_databases)) return error;
      if (endpoint.origin.empty()) return fmt::format("{}: needs a url", db.where);
      out.options.any_database = std::move(endpoint);
      continue;
    }
    if (db.name == out.options.client.admin_database) {
      return fmt::format("{}: \"{}\" is the admin console's name", db.where, db.name);
    }
    if (auto error = DatabaseEndpoint(db, out, endpoint, nullptr)) return error;
    ConnectOptions::Database entry{db.name, std::move(endpoint)};
    if (named_default && db.name == out.options.client.database) {
      default_found = true;
      out.options.databases.insert(out.options.databases.begin(), std::move(entry));
    } else {
      out.options.databases.push_back(std::move(entry));
    }
  }
  if (out.options.databases.empty() && out.options.any_database) {
    // Only "*": its url's own database is the default (the origin
    // parameters' probe needs one).
    absl::StatusOr<OriginConfig> origin = ParseOriginConfig(out.options.any_database->origin);
    if (!origin.ok()) return fmt::format("databases.\"*\": {}", std::string(origin.status().message()));
    out.options.databases.push_back({origin->dbname, *out.options.any_database});
    default_found = origin->dbname == out.options.client.database;
  }
  if (named_default && !default_found) {
    return fmt::format("--database \"{}\" is none of [databases]", out.options.client.database);
  }
  out.options.client.database = out.options.databases.front().name;
  return std::nullopt;
}

// [users.NAME] databases = [...]: each must name a database served.
std::optional<std::string> BuildPermissions(const std::vector<ConfigUser>& users, ServeSettings& out) {
  const std::set<std::string> names = DatabaseNames(out);
  for (const ConfigUser& user : users) {
    if (!user.databases) continue;
    std::set<std::string>& allowed = out.permissions[user.name];
    for (const std::string& name : *user.databases) {
      if (names.count(name) == 0 && !out.options.any_database) {
        return fmt::format("{}.databases: no database \"{}\"", user.where, name);
      }
      allowed.insert(name);
    }
    std::string joined;
    for (const std::string& name : allowed) joined += (joined.empty() ? "" : ",") + name;
    out.map[fmt::format("(databases of {})", user.name)] = joined;
  }
  return std::nullopt;
}

// [users] of the config file as the Client's app users.
std::optional<std::string> ApplyConfigUsers(const std::vector<ConfigUser>& users, ClientOptions& options) {
  for (const ConfigUser& user : users) {
    ClientOptions::AppUser app{user.name, user.scram_verifier, ""};
    if (!user.password_file.empty()) {
      absl::StatusOr<std::string> password = ReadPasswordFile(user.password_file);
      if (!password.ok()) return fmt::format("{}: {}", user.where, std::string(password.status().message()));
      app.password = *std::move(password);
    }
    options.users.push_back(std::move(app));
  }
  return std::nullopt;
}

// Applies one setting to both halves' options; returns the error to print.
std::optional<std::string> ApplyServeSetting(const ConfigSetting& setting, ServeSettings& out) {
  auto located = [&](const std::string& message) {
    return setting.where.empty() ? message : fmt::format("{}: {}", setting.where, message);
  };
  ConnectOptions& options = out.options;
  if (setting.flag == "--admin-user") {
    if (setting.value.empty()) return located("--admin-user needs a user name");
    out.admin_users.push_back(setting.value);
    std::string& joined = out.map[setting.flag];
    joined += (joined.empty() ? "" : ",") + setting.value;
    return std::nullopt;
  }
  out.map[setting.flag] = setting.value;
  if (setting.flag == "--no-cache") {
    options.endpoint.cache.enabled = false;
    options.client.cache.enabled = false;
    return std::nullopt;
  }
  if (std::optional<std::string> log_error = ApplyLogOption(setting.flag, setting.value, out.log)) {
    if (!log_error->empty()) return located(*log_error);
    return std::nullopt;
  }
  if (setting.flag == "--metrics-listen") {
    std::string host;
    uint16_t port = 0;
    if (!ParseHostPort(setting.value, host, port)) return located("--metrics-listen needs HOST:PORT");
    out.metrics_listen = setting.value;
    return std::nullopt;
  }
  // Both halves run here: a cache option sets both tiers.
  std::optional<std::string> endpoint_error = ApplyEndpointOption(setting.flag, setting.value, options.endpoint);
  std::optional<std::string> client_error =
      ApplyClientOption(setting.flag, setting.value, options.client, options.threads);
  if (!endpoint_error && !client_error) return located(fmt::format("unknown option {}", setting.flag));
  if (endpoint_error && !endpoint_error->empty()) return located(*endpoint_error);
  if (client_error && !client_error->empty()) return located(*client_error);
  return std::nullopt;
}

// Reads `config_path` (if set) and applies `args` over it. The error is a
// message for the user (file, line and key when the file is at fault).
absl::StatusOr<ServeSettings> BuildSettings(const std::string& config_path, const std::vector<ConfigSetting>& args,
                                            std::vector<std::string>& warnings) {
  ServeSettings out;
  if (const char* env = std::getenv("HYPERPOOL_ORIGIN")) out.options.endpoint.origin = env;
  bool args_set_origin_password = false;
  std::optional<ConfigFile> config;
  if (!config_path.empty()) {
    absl::StatusOr<ConfigFile> loaded = LoadConfigFile(config_path);
    if (!loaded.ok()) return loaded.status();
    config = *std::move(loaded);
    warnings = config->warnings;
    for (const ConfigSetting& setting : config->settings) {
      if (auto error = ApplyServeSetting(setting, out)) return absl::InvalidArgumentError(*error);
    }
    if (auto error = ApplyConfigUsers(config->users, out.options.client)) return absl::InvalidArgumentError(*error);
    out.options.endpoint.origin_password = config->origin_password;
    if (!config->client_password.empty()) out.options.client.password = config->client_password;
    // Compared by a reload, never shown.
    if (!config->origin_password.empty()) out.map["(origin password)"] = config->origin_password;
    if (!config->client_password.empty()) out.map["(client password)"] = config->client_password;
  }
  // The flags override the file, including its admin users.
  bool args_set_admin_users = false;
  for (const ConfigSetting& setting : args) {
    if (setting.flag == "--admin-user" && !args_set_admin_users) {
      args_set_admin_users = true;
      out.admin_users.clear();
      out.map.erase("--admin-user");
    }
    if (auto error = ApplyServeSetting(setting, out)) return absl::InvalidArgumentError(*error);
    if (setting.flag == "--origin-password-file") args_set_origin_password = true;
  }
  // A password file named by a flag overrides a password in the config file.
  if (args_set_origin_password) out.options.endpoint.origin_password.clear();
  if (config) {
    if (auto error = BuildDatabases(config->databases, out)) return absl::InvalidArgumentError(*error);
    if (auto error = BuildPermissions(config->users, out)) return absl::InvalidArgumentError(*error);
  }
  if (!out.options.databases.empty()) return out;
  if (out.options.endpoint.origin.empty()) return absl::InvalidArgumentError("--origin is required");
  if (out.options.endpoint.pool.min_idle > out.options.endpoint.pool.max_size) {
    return absl::InvalidArgumentError("--min-idle cannot exceed --pool-size");
  }
  return out;
}

// SHOW CONFIG: the running settings, secrets hidden.
std::vector<ops::AdminSnapshot::ConfigRow> ConfigRows(const SettingMap& map) {
  std::vector<ops::AdminSnapshot::ConfigRow> rows;
  for (const auto& [flag, value] : map) {
    if (flag.front() == '(') continue;
    std::string shown = value;
    if (flag.find("password") != std::string::npos && flag.find("file") == std::string::npos) shown = "***";
    if (flag == "--origin") shown = client::RedactOrigin(value);
    if (flag == "--no-cache") shown = "true";
    rows.push_back({flag.substr(2), std::move(shown), IsReloadable(flag)});
  }
  return rows;
}

ServeAdmin::Static AdminStatic(const ServeSettings& s) {
  ServeAdmin::Static st;
  st.database = s.options.client.database;
  st.user = s.options.client.user;
  st.pool_mode = ModeName(s.options.endpoint.pool.mode);
  st.config = ConfigRows(s.map);
  for (const ConnectOptions::Database& db : s.options.databases) {
    st.pool_modes[db.name] = ModeName(db.endpoint.pool.mode);
    auto own = s.database_maps.find(db.name);
    if (own == s.database_maps.end()) continue;
    for (ops::AdminSnapshot::ConfigRow& row : ConfigRows(own->second)) {
      row.key = fmt::format("databases.{}.{}", db.name, row.key);
      st.config.push_back(std::move(row));
    }
  }
  return st;
}

// Re-reads the config file for SIGHUP and the admin console's RELOAD (any
// thread; one at a time). A file that fails to load or validate changes
// nothing.
class Reloader {
 public:
  Reloader(std::string config_path, std::vector<ConfigSetting> args, ServeSettings running, ServeAdmin& admin)
      : config_path_(std::move(config_path)), args_(std::move(args)), running_(std::move(running)), admin_(admin) {}

  void SetConnection(Connection* connection) {
    std::lock_guard lock(mu_);
    connection_ = connection;
  }

  // Several databases: the directory to update and the logger new Endpoints get.
  void SetDatabases(std::shared_ptr<ServeDirectory> directory, std::shared_ptr<const Logger> logger) {
    std::lock_guard lock(mu_);
    directory_ = std::move(directory);
    logger_ = std::move(logger);
  }

  absl::Status Reload() {
    std::lock_guard lock(mu_);
    if (config_path_.empty()) {
      LogLine("reload: nothing to reload (no --config FILE)");
      return absl::FailedPreconditionError("hyperpool serve was started without --config FILE");
    }
    std::vector<std::string> warnings;
    absl::StatusOr<ServeSettings> next = BuildSettings(config_path_, args_, warnings);
    if (!next.ok()) {
      LogLine(fmt::format("reload rejected, keeping the running configuration: {}", std::string(next.status().message())));
      return next.status();
    }
    for (const std::string& warning : warnings) LogLine(fmt::format("warning: {}", warning));
    const ReloadPlan plan = PlanReload(running_.map, next->map);
    for (const std::string& flag : plan.restart) {
      LogLine(fmt::format("reload: {} changed; needs a restart to take effect", flag.front() == '-' ? flag.substr(2) : flag));
    }
    if (!running_.options.databases.empty() || !next->options.databases.empty()) return ReloadDatabases(*next, plan);
    PoolOptions pool = running_.options.endpoint.pool;
    const PoolOptions& want = next->options.endpoint.pool;
    pool.max_size = want.max_size;
    pool.min_idle = want.min_idle;
    pool.acquire_timeout = want.acquire_timeout;
    pool.idle_timeout = want.idle_timeout;
    pool.max_lifetime = want.max_lifetime;
    if (pool.min_idle > pool.max_size) {
      LogLine("reload rejected, keeping the running configuration: min-idle would exceed pool-size");
      return absl::InvalidArgumentError("--min-idle cannot exceed --pool-size");
    }
    if (connection_ != nullptr && connection_->endpoint() != nullptr) {
      if (absl::Status s = connection_->endpoint()->UpdatePool(pool); !s.ok()) {
        LogLine(fmt::format("reload rejected, keeping the running configuration: {}", std::string(s.message())));
        return s;
      }
    }
    running_.options.endpoint.pool = pool;
    running_.permissions = next->permissions;
    if (directory_) directory_->Update(DatabaseNames(running_), running_.permissions, running_.options.any_database.has_value());
    running_.admin_users = next->admin_users;
    admin_.SetAdminUsers(running_.admin_users);
    for (const std::string& flag : plan.live) {
      if (auto it = next->map.find(flag); it != next->map.end()) {
        running_.map[flag] = it->second;
      } else {
        running_.map.erase(flag);
      }
    }
    admin_.SetStatic(AdminStatic(running_));
    std::string applied;
    for (const std::string& flag : plan.live) applied += (applied.empty() ? "" : ", ") + (flag.front() == '-' ? flag.substr(2) : flag);
    LogLine(fmt::format("reloaded {}: {}; pool {} connections", config_path_,
                        applied.empty() ? "no live setting changed" : "applied " + applied, pool.max_size));
    return absl::OkStatus();
  }

 private:
  static bool SamePool(const PoolOptions& a, const PoolOptions& b) {
    return a.max_size == b.max_size && a.min_idle == b.min_idle && a.acquire_timeout == b.acquire_timeout &&
           a.idle_timeout == b.idle_timeout && a.max_lifetime == b.max_lifetime;
  }

  // Requires mu_. [databases]: removed ones drain, added ones start, the
  // pool settings of the others are applied; their other changes need a
  // restart. Sessions of databases not removed are not touched.
  absl::Status ReloadDatabases(ServeSettings& next, const ReloadPlan& plan) {
    if (running_.options.databases.empty() || next.options.databases.empty()) {
      LogLine("reload: switching between [origin] and [databases] needs a restart to take effect");
      return absl::OkStatus();
    }
    std::map<std::string, EndpointOptions> want;
    for (ConnectOptions::Database& db : next.options.databases) want[db.name] = db.endpoint;
    std::vector<std::string> changes;
    std::vector<ConnectOptions::Database> kept;
    for (ConnectOptions::Database& db : running_.options.databases) {
      auto it = want.find(db.name);
      if (it == want.end()) {
        absl::Status removed = connection_ ? connection_->RemoveDatabase(db.name) : absl::OkStatus();
        if (removed.ok()) {
          changes.push_back(fmt::format("removed database {}", db.name));
          running_.database_maps.erase(db.name);
          continue;
        }
        LogLine(fmt::format("reload: database {} stays: {}", db.name, std::string(removed.message())));
        kept.push_back(std::move(db));
        continue;
      }
      // Settings a running Endpoint cannot take.
      const SettingMap& old_map = running_.database_maps[db.name];
      const SettingMap& new_map = next.database_maps[db.name];
      for (const std::string& flag : PlanReload(old_map, new_map).restart) {
        LogLine(fmt::format("reload: databases.{} {} changed; needs a restart to take effect", db.name,
                            flag.front() == '-' ? flag.substr(2) : flag));
      }
      for (const std::string& flag : PlanReload(old_map, new_map).live) {
        if (auto v = new_map.find(flag); v != new_map.end()) {
          running_.database_maps[db.name][flag] = v->second;
        } else {
          running_.database_maps[db.name].erase(flag);
        }
      }
      PoolOptions pool = db.endpoint.pool;
      const PoolOptions& target = it->second.pool;
      if (!SamePool(pool, target)) {
        pool.max_size = target.max_size;
        pool.min_idle = target.min_idle;
        pool.acquire_timeout = target.acquire_timeout;
        pool.idle_timeout = target.idle_timeout;
        pool.max_lifetime = target.max_lifetime;
        Endpoint* endpoint = connection_ ? connection_->endpoint(db.name) : nullptr;
        absl::Status s = endpoint ? endpoint->UpdatePool(pool) : absl::OkStatus();
        if (s.ok()) {
          db.endpoint.pool = pool;
          changes.push_back(fmt::format("database {} pool {} connections", db.name, pool.max_size));
        } else {
          LogLine(fmt::format("reload: database {} keeps its pool: {}", db.name, std::string(s.message())));
        }
      }
      want.erase(it);
      kept.push_back(std::move(db));
    }
    for (ConnectOptions::Database& db : next.options.databases) {
      if (want.count(db.name) == 0) continue;  // running already
      EndpointOptions options = db.endpoint;
      options.logger = logger_;
      absl::Status added = connection_ ? connection_->AddDatabase(db.name, std::move(options)) : absl::OkStatus();
      if (!added.ok()) {
        LogLine(fmt::format("reload: database {} not added: {}", db.name, std::string(added.message())));
        continue;
      }
      changes.push_back(fmt::format("added database {}", db.name));
      running_.database_maps[db.name] = next.database_maps[db.name];
      kept.push_back(std::move(db));
    }
    running_.options.databases = std::move(kept);
    running_.permissions = next.permissions;
    if (directory_) directory_->Update(DatabaseNames(running_), running_.permissions, running_.options.any_database.has_value());
    running_.admin_users = next.admin_users;
    admin_.SetAdminUsers(running_.admin_users);
    for (const std::string& flag : plan.live) {
      if (auto it = next.map.find(flag); it != next.map.end()) {
        running_.map[flag] = it->second;
      } else {
        running_.map.erase(flag);
      }
    }
    admin_.SetStatic(AdminStatic(running_));
    std::string applied;
    for (const std::string& change : changes) applied += (applied.empty() ? "" : "; ") + change;
    LogLine(fmt::format("reloaded {}: {}", config_path_, applied.empty() ? "no database changed" : applied));
    return absl::OkStatus();
  }

  std::shared_ptr<ServeDirectory> directory_;
  std::shared_ptr<const Logger> logger_;
  std::mutex mu_;
  const std::string config_path_;
  const std::vector<ConfigSetting> args_;
  ServeSettings running_;  // what runs now (restart-only changes stay out)
  ServeAdmin& admin_;
  Connection* connection_ = nullptr;
};

// Graceful drain: new units of work wait (PAUSE) while those holding an
// origin connection finish, for at most `limit`; then Close() ends the rest.
void Drain(Connection& connection, std::chrono::milliseconds limit) {
  std::vector<Endpoint*> endpoints;
  for (const std::string& name : connection.databases()) {
    if (Endpoint* endpoint = connection.endpoint(name)) endpoints.push_back(endpoint);
  }
  if (endpoints.empty() && connection.endpoint() != nullptr) endpoints.push_back(connection.endpoint());
  for (Endpoint* endpoint : endpoints) endpoint->PausePool();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    size_t lent = 0;
    for (Endpoint* endpoint : endpoints) lent += endpoint->Stats().origin_lent;
    if (lent == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The dashboard's details for serve: both halves are in this process.
ops::DashboardExtras ServeDashboardExtras(Connection& running) {
  ops::DashboardExtras x;
  x.role = "serve";
  x.link.push_back("Client and Endpoint in this process (in-process link: no network between them)");
  if (Client* c = running.client()) {
    for (const ClientSessionInfo& session : c->Sessions()) ++x.client_states[session.state];
  }
  const std::vector<std::string> names = running.databases();
  for (const std::string& name : names) {
    if (Endpoint* e = running.endpoint(name)) x.cache_reports[name] = e->CacheReport(10);
  }
  if (names.empty()) {
    if (Endpoint* e = running.endpoint()) x.cache_reports[""] = e->CacheReport(10);
  }
  x.link.push_back(names.empty() ? "one database: the Endpoint's pool serves every login"
                                 : fmt::format("{} databases, one Endpoint and pool each", names.size()));
  return x;
}

}  // namespace

int Serve(int argc, char** argv) {
  std::string config_path;
  std::vector<ConfigSetting> args;
  bool help = false;
  if (auto error = CollectArgs(argc, argv, config_path, args, help)) return UsageError(*error);
  if (help) {
    std::fputs(kServeUsage, stdout);
    return 0;
  }
  std::vector<std::string> warnings;
  absl::StatusOr<ServeSettings> settings = BuildSettings(config_path, args, warnings);
  if (!settings.ok()) return UsageError(std::string(settings.status().message()));
  for (const std::string& warning : warnings) LogLine(fmt::format("warning: {}", warning));
  ConnectOptions options = settings->options;
  const std::string metrics_listen = settings->metrics_listen;
  // One logger for both halves, owned here (no global one).
  options.client.logger = std::make_shared<const Logger>(settings->log);
  options.endpoint.logger = options.client.logger;
  for (ConnectOptions::Database& db : options.databases) db.endpoint.logger = options.client.logger;
  // [databases] or per-user databases: the login asks this directory.
  // Always (also for one database), so that a reload can add permissions.
  auto directory = std::make_shared<ServeDirectory>();
  directory->Update(DatabaseNames(*settings), settings->permissions, settings->options.any_database.has_value());
  options.client.databases = directory;

  // Installed before any worker thread starts, so no thread ever sees the
  // default disposition of SIGINT/SIGTERM/SIGHUP.
  asio::io_context signals_io(1);
  asio::signal_set signals(signals_io, SIGINT, SIGTERM, SIGHUP);
  std::signal(SIGPIPE, SIG_IGN);

  bool shutdown_requested = false;  // signals_io only
  std::unique_ptr<Reloader> reloader;
  auto admin = std::make_shared<ServeAdmin>(
      [&reloader] { return reloader->Reload(); },
      [&] {
        asio::post(signals_io, [&] {
          shutdown_requested = true;
          signals.cancel();
        });
      });
  admin->SetAdminUsers(settings->admin_users);
  admin->SetStatic(AdminStatic(*settings));
  reloader = std::make_unique<Reloader>(config_path, args, *settings, *admin);
  reloader->SetDatabases(directory, options.client.logger);
  // The console's database name must be free: with the default application
  // database ("hyperpool") there is no console unless admins are named,
  // which is then an error rather than a silent shadowing.
  if (options.client.database != options.client.admin_database) {
    options.client.admin = admin;
  } else if (!settings->admin_users.empty()) {
    return UsageError(fmt::format("--admin-user needs an application --database other than \"{}\" "
                                  "(the admin console's name)",
                                  options.client.admin_database));
  }

  std::string ready = fmt::format("origin {} (pool {} connections, {} mode)", client::RedactOrigin(options.endpoint.origin),
                                  options.endpoint.pool.max_size, ModeName(options.endpoint.pool.mode));
  if (!options.databases.empty()) {
    ready.clear();
    for (const ConnectOptions::Database& db : options.databases) {
      ready += fmt::format("{}database {}: origin {} (pool {} connections, {} mode)", ready.empty() ? "" : "; ", db.name,
                           client::RedactOrigin(db.endpoint.origin), db.endpoint.pool.max_size,
                           ModeName(db.endpoint.pool.mode));
    }
  }
  const std::string unix_dir = options.client.listen_unix_dir;
  absl::StatusOr<std::unique_ptr<Connection>> connection = connect(std::move(options));
  if (!connection.ok()) {
    LogLine(fmt::format("cannot start: {}", std::string(connection.status().message())));
    return 1;
  }
  Connection& running = **connection;
  admin->SetConnection(&running);
  reloader->SetConnection(&running);
  absl::StatusOr<std::unique_ptr<ops::MetricsServer>> metrics = StartMetricsListener(
      metrics_listen,
      [&running] {
        ops::ProcessMetrics m;
        m.endpoint = running.endpoint_stats();
        m.pool_max = m.endpoint->pool_max_size;
        m.client = running.client_stats();
        for (const std::string& name : running.databases()) {
          if (Endpoint* e = running.endpoint(name)) m.databases.emplace_back(name, e->Stats());
        }
        return m;
      },
      LogLine, [&running] { return ServeDashboardExtras(running); });
  if (!metrics.ok()) {
    LogLine(fmt::format("cannot start: {}", std::string(metrics.status().message())));
    admin->SetConnection(nullptr);
    reloader->SetConnection(nullptr);
    (*connection)->Close();
    return 1;
  }
  std::fputs(((*connection)->connection_string() + "\n").c_str(), stdout);
  std::fflush(stdout);
  if (!unix_dir.empty()) LogLine(fmt::format("also listening on the Unix socket in {}", unix_dir));
  LogLine(fmt::format("ready; {}", ready));

  int received = 0;
  std::function<void()> wait_for_signal = [&] {
    signals.async_wait([&](const asio::error_code& ec, int signo) {
      if (ec) return;  // cancelled by SHUTDOWN
      if (signo == SIGHUP) {
        LogLine("received SIGHUP, reloading");
        (void)reloader->Reload();
        wait_for_signal();
        return;
      }
      received = signo;
    });
  };
  wait_for_signal();
  signals_io.run();
  if (shutdown_requested && received == 0) {
    LogLine("SHUTDOWN from the admin console, draining");
  } else {
    LogLine(fmt::format("received {}, draining", received == SIGINT ? "SIGINT" : "SIGTERM"));
  }
  if (*metrics) (*metrics)->SetDraining(true);
  Drain(running, std::chrono::seconds(10));
  admin->SetConnection(nullptr);
  reloader->SetConnection(nullptr);
  EndpointStats stats = (*connection)->endpoint_stats();
  std::string cache_report = (*connection)->cache_report();
  (*connection)->Close();
  if (*metrics) (*metrics)->Stop();  // it reads the connection's stats
  LogLine(fmt::format("stopped after {} transactions; origin connections discarded {}, acquire timeouts {}, "
                      "cancels forwarded {} ignored {}, pins {}",
                      stats.transactions, stats.discarded, stats.acquire_timeouts, stats.cancels_forwarded,
                      stats.cancels_ignored, stats.pins_total));
  if (!cache_report.empty()) LogLine(fmt::format("query cache:\n{}", cache_report));
  return 0;
}

}  // namespace hyperpool::cli
