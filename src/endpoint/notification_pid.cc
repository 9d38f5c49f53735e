#include "endpoint/notification_pid.h"

#include "absl/strings/numbers.h"
#include "cache/sql_analysis.h"
#include "protocol/backend_messages.h"

namespace hyperpool::endpoint {

std::optional<std::int32_t> ParseBackendPid(std::string_view value) {
  std::int32_t pid = 0;
  if (!absl::SimpleAtoi(absl::string_view(value.data(), value.size()), &pid) || pid <= 0) return std::nullopt;
  return pid;
}

void NotifierPids::Forget(std::int32_t app_pid, Clock::time_point now) {
  // First the sessions whose time is up (their backends show their own pid
  // again unless lent since), then this one's backends are marked ended.
  while (!ended_.empty() && now - ended_.front().first >= kKeepAfterEnd) {
    const std::int32_t gone = ended_.front().second;
    ended_.pop_front();
    absl::erase_if(map_, [gone](const auto& e) { return e.second.ended && e.second.app_pid == gone; });
  }
  bool held = false;
  for (auto& [origin, holder] : map_) {
    if (holder.app_pid == app_pid) {
      holder.ended = true;
      held = true;
    }
  }
  if (held) ended_.emplace_back(now, app_pid);
}

std::int32_t NotifierPids::Translate(std::int32_t origin_pid) const {
  auto it = map_.find(origin_pid);
  return it == map_.end() ? origin_pid : it->second.app_pid;
}

void AppendTranslatedNotification(std::string& out, std::string_view raw, const NotifierPids& pids) {
  const std::size_t at = out.size();
  out.append(raw.data(), raw.size());
  if (std::optional<std::int32_t> origin = protocol::PeekNotificationPid(raw)) {
    protocol::PatchNotificationPid(out.data() + at, pids.Translate(*origin));
  }
}

bool MayNotify(std::string_view payload) { return cache::ContainsCaseless(payload, "notify"); }

}  // namespace hyperpool::endpoint
