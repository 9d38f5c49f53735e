#pragma once
// The sender pid of a NotificationResponse (PostgreSQL protocol, "Message
// Formats": 'A', Int32 process id of the notifying backend, channel,
// payload), translated for the app. Without I/O (unit-tested in
// tests/unit/endpoint/notification_pid_test.cc).
//
// A driver tells its own notifications from others' by comparing that pid
// with the pid of its BackendKeyData (psycopg's Notify.pid against
// conn.info.backend_pid, node-postgres's processId). Through hyperpool the
// BackendKeyData pid is one the Client made up (docs/architecture.md, "The
// link protocol", cancel links) and travels to the Endpoint in the hello as
// `hyperpool.backend_pid`; the origin reports its own backend's pid. So the
// Endpoint keeps, for every origin backend, the app pid of the session that
// holds it or held it last (NotifierPids), and rewrites the pid of every
// NotificationResponse it forwards: a session sees its own notifications
// with its own pid and another session's with that session's app pid.
// Notifications from outside hyperpool keep the origin pid. The listener
// fan-out (src/endpoint/listener*) uses the same map and function.

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "protocol/link_protocol.h"

namespace hyperpool::endpoint {

// The hello parameter that carries the app-facing pid of a session.
using link::kBackendPidParam;  // protocol/link_protocol.h

// Parses a hyperpool.backend_pid value: a positive decimal int32; nullopt
// otherwise (then nothing is translated for that session).
std::optional<std::int32_t> ParseBackendPid(std::string_view value);

// Origin backend pid -> app pid of the session that holds or last held it.
class NotifierPids {
 public:
  using Clock = std::chrono::steady_clock;
  // How long a session that ended still names the backends it was last on:
  // the listener's copy of its last NOTIFY may arrive after it closed
  // (psycopg's test_notifies notifies and closes at once).
  static constexpr std::chrono::seconds kKeepAfterEnd{2};

  // Session with app pid `app_pid` (0: it gave none) now holds origin
  // backend `origin_pid`.
  void Lend(std::int32_t origin_pid, std::int32_t app_pid) {
    if (app_pid == 0) {
      map_.erase(origin_pid);
    } else {
      map_[origin_pid] = Holder{app_pid, false};
    }
  }
  // Lend() unless `origin_pid` already has a session that has not ended.
  void LendIfUnknown(std::int32_t origin_pid, std::int32_t app_pid) {
    auto it = map_.find(origin_pid);
    if (it == map_.end() || it->second.ended) Lend(origin_pid, app_pid);
  }
  // The session with `app_pid` ended: the backends it was last on keep its
  // pid for kKeepAfterEnd (until lent again), then show their own. Entries
  // of sessions that ended earlier than that are dropped here.
  void Forget(std::int32_t app_pid, Clock::time_point now = Clock::now());
  // The app pid for `origin_pid`, or `origin_pid` itself when no session
  // of this Endpoint is known to have used that backend.
  std::int32_t Translate(std::int32_t origin_pid) const;
  std::size_t size() const { return map_.size(); }

 private:
  struct Holder {
    std::int32_t app_pid;
    bool ended;  // its session ended (Forget); replaced by LendIfUnknown too
  };
  absl::flat_hash_map<std::int32_t, Holder> map_;
  std::deque<std::pair<Clock::time_point, std::int32_t>> ended_;  // (when, app pid), oldest first
};

// Whether a Query or Parse payload may send a notification: it mentions
// NOTIFY or pg_notify (any case). A function that notifies without its name
// in the text is not seen; its notifications keep the pid of the backend's
// last notifying session (or the origin pid).
bool MayNotify(std::string_view payload);

// Appends the NotificationResponse frame `raw` (tag, length, payload) to
// `out` with its sender pid translated by `pids`. A frame too short to hold
// a pid is appended unchanged (the app's driver reports it as PostgreSQL
// would have).
void AppendTranslatedNotification(std::string& out, std::string_view raw, const NotifierPids& pids);

}  // namespace hyperpool::endpoint
