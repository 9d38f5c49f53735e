// `serve --config FILE`: the TOML layout maps to the flags; unknown keys,
// wrong types, bad TOML and misplaced keys are errors naming key and line;
// inline passwords are returned (never as flags) and warned about when
// group or others can read the file.

#include "cli/config_file.h"

#include <algorithm>
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

namespace hyperpool::cli {
namespace {

std::string ValueOf(const ConfigFile& config, const std::string& flag) {
  for (const ConfigSetting& s : config.settings) {
    if (s.flag == flag) return s.value;
  }
  return "<absent>";
}

constexpr const char* kFull = R"(
threads = 4
[listen]
address = "0.0.0.0:6432"
unix_socket_dir = "/run/hyperpool"
[metrics]
listen = "127.0.0.1:9187"
[origin]
url = "postgresql://app@db/app"
password_file = "/etc/hyperpool/pw"
[client]
user = "app"
database = "appdb"
password_file = "/etc/hyperpool/app"
replication = "all"
[pool]
size = 20
min_idle = 2
mode = "session"
acquire_timeout_ms = 500
idle_timeout_s = 60
max_lifetime_s = 120
max_pending_to_origin = 8388608
[cache]
enabled = false
max_age_s = 30
swr_s = 5
redis = "redis://10.0.0.5:6379"
stale_if_error_s = 300
wal_invalidation = "auto"
wal_max_lag_ms = 250
wal_hard_lag_ms = 20000
[tls]
cert = "/etc/hyperpool/app.crt"
key = "/etc/hyperpool/app.key"
mode = "require"
[log]
format = "json"
level = "warn"
connections = true
disconnections = false
[admin]
users = ["ops"]
[link]
tls_cert = "/etc/hyperpool/link.crt"
tls_key = "/etc/hyperpool/link.key"
tls_ca = "/etc/hyperpool/ca.crt"
tls_server_name = "db-near.example.com"
secret_file = "/etc/hyperpool/link.secret"
endpoints = ["db-near.example.com:6433"]
region = "eu"
)";

TEST_CASE("every key of a full file maps to its flag") {
  auto config = ParseConfig(kFull, "hp.toml", 0100600);
  REQUIRE(config.ok());
  CHECK(ValueOf(*config, "--threads") == "4");
  CHECK(ValueOf(*config, "--listen") == "0.0.0.0:6432");
  CHECK(ValueOf(*config, "--listen-unix") == "/run/hyperpool");
  CHECK(ValueOf(*config, "--metrics-listen") == "127.0.0.1:9187");
  CHECK(ValueOf(*config, "--origin") == "postgresql://app@db/app");
  CHECK(ValueOf(*config, "--origin-password-file") == "/etc/hyperpool/pw");
  CHECK(ValueOf(*config, "--user") == "app");
  CHECK(ValueOf(*config, "--database") == "appdb");
  CHECK(ValueOf(*config, "--password-file") == "/etc/hyperpool/app");
  CHECK(ValueOf(*config, "--pool-size") == "20");
  CHECK(ValueOf(*config, "--min-idle") == "2");
  CHECK(ValueOf(*config, "--pool-mode") == "session");
  CHECK(ValueOf(*config, "--acquire-timeout") == "500");
  CHECK(ValueOf(*config, "--idle-timeout") == "60");
  CHECK(ValueOf(*config, "--max-lifetime") == "120");
  CHECK(ValueOf(*config, "--max-pending-to-origin") == "8388608");
  CHECK(ValueOf(*config, "--no-cache") == "");
  CHECK(ValueOf(*config, "--cache-max-age") == "30");
  CHECK(ValueOf(*config, "--cache-swr") == "5");
  CHECK(ValueOf(*config, "--redis-url") == "redis://10.0.0.5:6379");
  CHECK(ValueOf(*config, "--stale-if-error") == "300");
  CHECK(ValueOf(*config, "--wal-invalidation") == "auto");
  CHECK(ValueOf(*config, "--wal-max-lag") == "250");
  CHECK(ValueOf(*config, "--wal-hard-lag") == "20000");
  CHECK(ValueOf(*config, "--ssl-cert") == "/etc/hyperpool/app.crt");
  CHECK(ValueOf(*config, "--ssl-key") == "/etc/hyperpool/app.key");
  CHECK(ValueOf(*config, "--ssl-mode") == "require");
  CHECK(ValueOf(*config, "--replication") == "all");
  CHECK(ValueOf(*config, "--log-format") == "json");
  CHECK(ValueOf(*config, "--log-level") == "warn");
  CHECK(ValueOf(*config, "--log-connections") == "true");
  CHECK(ValueOf(*config, "--log-disconnections") == "false");
  CHECK(ValueOf(*config, "--admin-user") == "ops");
  CHECK(ValueOf(*config, "--tls-cert") == "/etc/hyperpool/link.crt");
  CHECK(ValueOf(*config, "--endpoint") == "db-near.example.com:6433");
  CHECK(ValueOf(*config, "--link-secret-file") == "/etc/hyperpool/link.secret");
  // All but the two inline passwords, users.<name> and databases.<name>.*.
  const std::vector<std::string> keys = ConfigKeys();
  const auto per_database = std::count_if(keys.begin(), keys.end(),
                                          [](const std::string& k) { return k.rfind("databases.", 0) == 0; });
  CHECK(per_database > 0);
  CHECK(config->settings.size() == keys.size() - 3 - static_cast<size_t>(per_database));
  CHECK(config->warnings.empty());
  for (const ConfigSetting& s : config->settings) CHECK(s.where.rfind("hp.toml:", 0) == 0);
}

TEST_CASE("[users] holds stored verifiers or password files, sorted by name") {
  auto config = ParseConfig(R"([users]
reporting = { password_file = "/etc/hyperpool/reporting" }
app = "SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy"
batch = { verifier = "SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy" }
)",
                            "f", 0600);
  REQUIRE(config.ok());
  REQUIRE(config->users.size() == 3);
  CHECK(config->users[0].name == "app");
  CHECK(config->users[0].scram_verifier == "SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy");
  CHECK(config->users[1].name == "batch");
  CHECK(config->users[1].scram_verifier.rfind("SCRAM-SHA-256$", 0) == 0);
  CHECK(config->users[2].name == "reporting");
  CHECK(config->users[2].password_file == "/etc/hyperpool/reporting");
  CHECK(config->users[2].where == "f:2: users.reporting");
  CHECK(config->settings.empty());
}

TEST_CASE("[databases.NAME] holds each database's own settings; users may be limited to some") {
  auto config = ParseConfig(R"([databases.app]
url = "postgresql://app@db1/app"
pool_size = 8
pool_mode = "transaction"
[databases.reports]
url = "postgresql://rep@db2/reports"
password = "s3cret"
pool_mode = "session"
cache = false
cache_max_age_s = 5
[users]
batch = { password_file = "/etc/hyperpool/batch", databases = ["reports"] }
)",
                            "f", 0600);
  REQUIRE(config.ok());
  REQUIRE(config->databases.size() == 2);
  const ConfigDatabase& app = config->databases[0];
  CHECK(app.name == "app");
  CHECK(app.where == "f:1: databases.app");
  REQUIRE(app.settings.size() == 3);
  CHECK(app.settings[0].flag == "--pool-mode");  // sorted by key
  CHECK(app.settings[1].flag == "--pool-size");
  CHECK(app.settings[1].value == "8");
  CHECK(app.settings[2].flag == "--origin");
  CHECK(app.settings[2].where == "f:2: databases.app.url");
  const ConfigDatabase& reports = config->databases[1];
  CHECK(reports.origin_password == "s3cret");
  std::vector<std::string> flags;
  for (const ConfigSetting& setting : reports.settings) flags.push_back(setting.flag + "=" + setting.value);
  CHECK(flags == std::vector<std::string>{"--no-cache=", "--cache-max-age=5", "--pool-mode=session",
                                          "--origin=postgresql://rep@db2/reports"});
  CHECK(config->settings.empty());  // nothing global
  REQUIRE(config->users.size() == 1);
  REQUIRE(config->users[0].databases.has_value());
  CHECK(*config->users[0].databases == std::vector<std::string>{"reports"});
}

TEST_CASE("bad [databases] entries are errors naming the database and key") {
  auto [text, message] = GENERATE(table<std::string, std::string>({
      {"[databases.a]\npool_size = 3\n", "f:1: databases.a: needs url"},
      {"[databases.a]\nurl = \"x\"\nbogus = 1\n", "f:3: databases.a.bogus: unknown key"},
      {"[databases.a]\nurl = \"x\"\npool_size = \"big\"\n", "f:3: databases.a.pool_size: must be an integer"},
      {"[databases]\na = \"x\"\n", "databases.a: must be a table"},
      {"[users]\nu = { verifier = \"SCRAM-SHA-256$x\", databases = [1] }\n", "users.u.databases: must hold"},
  }));
  auto config = ParseConfig(text, "f", 0600);
  REQUIRE_FALSE(config.ok());
  INFO(config.status().message());
  CHECK(std::string(config.status().message()).find(message) != std::string::npos);
}

TEST_CASE("cache.enabled = true adds no setting; an empty file none at all") {
  auto on = ParseConfig("[cache]\nenabled = true\n", "f", 0600);
  REQUIRE(on.ok());
  CHECK(on->settings.empty());
  auto empty = ParseConfig("", "f", 0600);
  REQUIRE(empty.ok());
  CHECK(empty->settings.empty());
}

TEST_CASE("a setting knows its line and key for error messages") {
  auto config = ParseConfig("\n[pool]\n\nsize = 3\n", "hp.toml", 0600);
  REQUIRE(config.ok());
  REQUIRE(config->settings.size() == 1);
  CHECK(config->settings[0].where == "hp.toml:4: pool.size");
}

struct BadCase {
  const char* text;
  const char* message;
};

TEST_CASE("bad files are errors that name the key and line") {
  auto c = GENERATE(values<BadCase>({
      {"[pool]\nsise = 3\n", "f:2: pool.sise: unknown key"},
      {"treads = 3\n", "f:1: treads: unknown key"},
      {"[pools]\nsize = 3\n", "f:1: pools: unknown section"},
      {"[pool]\nsize = \"ten\"\n", "f:2: pool.size: must be an integer"},
      {"[pool]\nsize = 1.5\n", "f:2: pool.size: must be an integer"},
      {"[pool]\nsize = -1\n", "f:2: pool.size: must not be negative"},
      {"[pool]\nmode = 1\n", "f:2: pool.mode: must be a string"},
      {"[cache]\nenabled = \"no\"\n", "f:2: cache.enabled: must be true or false"},
      {"[origin]\nurl = [\"a\"]\n", "f:2: origin.url: must be a string"},
      {"pool = 3\n", "f:1: pool: must be a table ([pool])"},
      {"[pool.inner]\nx = 1\n", "pool.inner: unknown section"},
      {"[pool]\nsize = 3\nsize = 4\n", "f:3:"},     // TOML: a key defined twice
      {"[pool\nsize = 3\n", "f:1:"},                // TOML syntax
  }));
  INFO(c.text);
  auto config = ParseConfig(c.text, "f", 0600);
  REQUIRE(!config.ok());
  CHECK(std::string(config.status().message()).find(c.message) != std::string::npos);
}

TEST_CASE("bad [users] entries are errors naming the user") {
  auto c = GENERATE(values<BadCase>({
      {"[users]\napp = \"plain\"\n", "f:2: users.app: must be a SCRAM-SHA-256 verifier"},
      {"[users]\napp = 3\n", "f:2: users.app: must be a verifier string"},
      {"[users]\napp = { password = \"x\" }\n", "users.app.password: unknown key"},
      {"[users]\napp = { }\n", "users.app: needs exactly one of password_file, verifier"},
  }));
  INFO(c.text);
  auto config = ParseConfig(c.text, "f", 0600);
  REQUIRE(!config.ok());
  CHECK(std::string(config.status().message()).find(c.message) != std::string::npos);
}

TEST_CASE("inline passwords are returned apart from the flags") {
  auto config = ParseConfig("[origin]\npassword = \"s3cret\"\n[client]\npassword = \"app\"\n", "f", 0100600);
  REQUIRE(config.ok());
  CHECK(config->origin_password == "s3cret");
  CHECK(config->client_password == "app");
  CHECK(config->settings.empty());
  CHECK(config->warnings.empty());
}

TEST_CASE("a file with a password that group or others can read is warned about") {
  const unsigned mode = GENERATE(0100640u, 0100604u, 0100644u);
  auto config = ParseConfig("[origin]\npassword = \"s3cret\"\n", "hp.toml", mode);
  REQUIRE(config.ok());
  REQUIRE(config->warnings.size() == 1);
  CHECK(config->warnings[0].find("hp.toml holds a password and can be read by group or others") == 0);
  CHECK(config->warnings[0].find("s3cret") == std::string::npos);
}

TEST_CASE("a readable file without a password is not warned about") {
  auto config = ParseConfig("[pool]\nsize = 2\n", "f", 0100644);
  REQUIRE(config.ok());
  CHECK(config->warnings.empty());
}

TEST_CASE("a missing file is an error naming it") {
  auto config = LoadConfigFile("/nonexistent/hyperpool.toml");
  REQUIRE(!config.ok());
  CHECK(std::string(config.status().message()).find("/nonexistent/hyperpool.toml") != std::string::npos);
}

TEST_CASE("the shipped example config (packaging/hyperpool.toml.example) parses and sets every flag") {
  auto config = LoadConfigFile(std::string(HYPERPOOL_SOURCE_DIR) + "/packaging/hyperpool.toml.example");
  REQUIRE(config.ok());
  for (const char* flag : {"--threads", "--listen", "--listen-unix", "--metrics-listen", "--origin",
                           "--origin-password-file", "--user", "--database", "--password-file", "--pool-size",
                           "--min-idle", "--pool-mode", "--acquire-timeout", "--idle-timeout", "--max-lifetime",
                           "--cache-max-age", "--cache-swr", "--log-format", "--log-level", "--log-connections",
                           "--log-disconnections"}) {
    INFO(flag);
    CHECK(ValueOf(*config, flag) != "<absent>");
  }
  CHECK(config->origin_password.empty());  // commented out in the example
}

}  // namespace
}  // namespace hyperpool::cli
