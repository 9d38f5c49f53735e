#pragma once
// `hyperpool serve --config FILE`: a TOML file (parsed with toml++) holding
// the options the flags take (packaging/hyperpool.toml.example shows every
// key). The file is turned into the same (flag, value) settings the command
// line gives, so one validation applies to both and flags given after it
// override it. Unknown keys and wrong types are errors naming the key and
// its line.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace hyperpool::cli {

struct ConfigSetting {
  std::string flag;   // "--pool-size"; "--no-cache" has an empty value
  std::string value;  // as the flag's argument
  std::string where;  // "FILE:LINE: pool.size", to prefix errors with
};

// One entry of [users] (an app user, ClientOptions::AppUser).
struct ConfigUser {
  std::string name;
  std::string scram_verifier;  // PostgreSQL's stored form, or empty
  std::string password_file;   // or a file holding the password
  std::string where;           // "FILE:LINE: users.NAME"
  // databases = ["a", "b"]: the only databases the user may use (others:
  // 42501 after authentication). Absent: all.
  std::optional<std::vector<std::string>> databases;
};

// One entry of [databases] (PgBouncer's [databases]): an app-facing name
// with its own origin and pool, as (flag, value) settings applied over the
// global ones for that database's Endpoint.
struct ConfigDatabase {
  std::string name;
  std::vector<ConfigSetting> settings;  // --origin, --pool-size, ... (sorted by key)
  std::string origin_password;          // inline `password`, or empty
  std::string where;                    // "FILE:LINE: databases.NAME"
};

struct ConfigFile {
  std::vector<ConfigSetting> settings;  // sorted by key (toml++ tables are ordered maps)
  // Passwords the file holds inline (flags can never carry them: argv is
  // public). Empty when absent.
  std::string origin_password;
  std::string client_password;
  // [users], sorted by name (toml++ tables are ordered maps).
  std::vector<ConfigUser> users;
  // [databases.NAME], sorted by name. Empty: the one database of [origin].
  std::vector<ConfigDatabase> databases;
  // Warnings to print (a file holding a password that group or others can read).
  std::vector<std::string> warnings;
};

// Parses TOML text; `name` is used in messages. `mode` is the file's
// st_mode (permission bits are checked when the text holds a password).
absl::StatusOr<ConfigFile> ParseConfig(const std::string& text, const std::string& name, unsigned mode);

// Reads and parses FILE.
absl::StatusOr<ConfigFile> LoadConfigFile(const std::string& path);

// Every key the file accepts, "section.key" (for --help and docs).
std::vector<std::string> ConfigKeys();

}  // namespace hyperpool::cli
