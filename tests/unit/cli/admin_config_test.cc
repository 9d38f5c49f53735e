// The admin parts of `serve --config FILE`: [admin] users becomes one
// --admin-user setting per name; wrong shapes are errors naming key and
// line. And the reload rules (reload_plan.h): which changed settings a
// reload applies and which need a restart.

#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "cli/config_file.h"
#include "cli/reload_plan.h"

namespace hyperpool::cli {
namespace {

TEST_CASE("[admin] users gives one --admin-user per name, in order") {
  absl::StatusOr<ConfigFile> c = ParseConfig("[admin]\nusers = [\"ops\", \"root\"]\n", "hp.toml", 0600);
  REQUIRE(c.ok());
  std::vector<std::string> users;
  for (const ConfigSetting& s : c->settings) {
    if (s.flag == "--admin-user") users.push_back(s.value);
  }
  CHECK(users == std::vector<std::string>{"ops", "root"});
  CHECK(c->settings.front().where == "hp.toml:2: admin.users");
}

TEST_CASE("[admin] users must be an array of non-empty strings") {
  const char* text = GENERATE("[admin]\nusers = \"ops\"\n", "[admin]\nusers = [1]\n", "[admin]\nusers = [\"\"]\n",
                              "[admin]\nuser = [\"ops\"]\n", "admin = 1\n");
  absl::StatusOr<ConfigFile> c = ParseConfig(text, "hp.toml", 0600);
  REQUIRE_FALSE(c.ok());
  CHECK(std::string(c.status().message()).find("hp.toml:") == 0);
}

TEST_CASE("a reload applies the pool's size and timeouts and the admin users; the rest needs a restart") {
  const SettingMap running = {{"--pool-size", "4"}, {"--threads", "2"}, {"--admin-user", "ops"},
                              {"--listen", "127.0.0.1:6432"}, {"--acquire-timeout", "1000"}};
  SECTION("nothing changed") { CHECK(PlanReload(running, running).live.empty()); }
  SECTION("live and restart changes are told apart, including added and removed keys") {
    SettingMap next = running;
    next["--pool-size"] = "6";
    next["--threads"] = "4";
    next["--admin-user"] = "ops,root";
    next.erase("--acquire-timeout");
    next["--min-idle"] = "1";
    next["--query-timeout"] = "500";
    next.erase("--listen");
    const ReloadPlan plan = PlanReload(running, next);
    CHECK(plan.live == std::vector<std::string>{"--acquire-timeout", "--admin-user", "--min-idle", "--pool-size"});
    CHECK(plan.restart == std::vector<std::string>{"--listen", "--query-timeout", "--threads"});
  }
}

TEST_CASE("IsReloadable") {
  auto [flag, live] = GENERATE(table<std::string, bool>({
      {"--pool-size", true},
      {"--min-idle", true},
      {"--acquire-timeout", true},
      {"--idle-timeout", true},
      {"--max-lifetime", true},
      {"--admin-user", true},
      {"--pool-mode", false},
      {"--origin", false},
      {"--listen", false},
      {"--cache-max-age", false},
      {"(origin password)", false},
  }));
  CHECK(IsReloadable(flag) == live);
}

}  // namespace
}  // namespace hyperpool::cli
