#include "cli/reload_plan.h"

#include <set>

namespace hyperpool::cli {

bool IsReloadable(std::string_view flag) {
  // The pool takes these between units of work (Pool::Update); the admin
  // users are read at each console login. Everything else is wired into
  // listeners, TLS, caches or sessions when they start.
  static constexpr std::string_view kLive[] = {
      "--pool-size", "--min-idle", "--acquire-timeout", "--idle-timeout", "--max-lifetime", "--admin-user",
  };
  for (std::string_view live : kLive) {
    if (flag == live) return true;
  }
  // [users.NAME] databases: the login asks serve's directory, which a reload replaces.
  return flag.rfind("(databases of ", 0) == 0;
}

ReloadPlan PlanReload(const SettingMap& running, const SettingMap& next) {
  std::set<std::string> flags;
  for (const auto& [flag, value] : running) flags.insert(flag);
  for (const auto& [flag, value] : next) flags.insert(flag);
  ReloadPlan plan;
  for (const std::string& flag : flags) {
    auto a = running.find(flag);
    auto b = next.find(flag);
    const bool same = a != running.end() && b != next.end() && a->second == b->second;
    if (same) continue;
    (IsReloadable(flag) ? plan.live : plan.restart).push_back(flag);
  }
  return plan;
}

}  // namespace hyperpool::cli
