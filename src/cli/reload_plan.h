#pragma once
// What a reload of `hyperpool serve --config FILE` may change live
// (docs/architecture.md, "Reload"): the settings are compared as the
// (flag, value) pairs the file and the command line give; those that can
// change under running sessions are applied for new units of work, the rest
// are reported as needing a restart.

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace hyperpool::cli {

// flag -> value; a repeated flag (--admin-user) holds its values joined by ','.
using SettingMap = std::map<std::string, std::string>;

struct ReloadPlan {
  std::vector<std::string> live;     // changed, applied now (flags, sorted)
  std::vector<std::string> restart;  // changed, ignored until a restart
};

// Whether a reload applies `flag`: the pool's size and timeouts, the
// admin users and the users' databases ("(databases of NAME)").
bool IsReloadable(std::string_view flag);

// The flags whose value differs (set, changed or removed) between the two.
ReloadPlan PlanReload(const SettingMap& running, const SettingMap& next);

}  // namespace hyperpool::cli
