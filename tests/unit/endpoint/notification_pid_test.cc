// NotificationResponse sender pids as the apps know them
// (src/endpoint/notification_pid.h).
#include <chrono>
#include <string>

#include <catch2/catch_test_macros.hpp>

#include "endpoint/notification_pid.h"
#include "protocol/codec.h"

namespace hyperpool::endpoint {
namespace {

std::string Notification(std::int32_t pid, std::string_view channel, std::string_view payload) {
  std::string body;
  for (int shift = 24; shift >= 0; shift -= 8) body.push_back(static_cast<char>((static_cast<std::uint32_t>(pid) >> shift) & 0xff));
  body.append(channel);
  body.push_back('\0');
  body.append(payload);
  body.push_back('\0');
  std::string frame;
  protocol::AppendFrame(frame, 'A', body);
  return frame;
}

TEST_CASE("hyperpool.backend_pid values: positive int32 only") {
  CHECK(ParseBackendPid("4242") == 4242);
  CHECK(ParseBackendPid("2147483647") == 2147483647);
  CHECK_FALSE(ParseBackendPid("0").has_value());
  CHECK_FALSE(ParseBackendPid("-5").has_value());
  CHECK_FALSE(ParseBackendPid("2147483648").has_value());
  CHECK_FALSE(ParseBackendPid("12x").has_value());
  CHECK_FALSE(ParseBackendPid("").has_value());
}

TEST_CASE("a notification's pid becomes the app pid of the session on that backend; others keep theirs") {
  NotifierPids pids;
  pids.Lend(1001, 77);
  pids.Lend(1002, 88);
  CHECK(pids.Translate(1001) == 77);
  CHECK(pids.Translate(1002) == 88);
  CHECK(pids.Translate(5555) == 5555);  // not a backend of this Endpoint's sessions
  pids.Lend(1001, 99);                  // lent to another session: the last holder counts
  CHECK(pids.Translate(1001) == 99);
  pids.Lend(1002, 0);  // a session without an app pid: the origin pid shows
  CHECK(pids.Translate(1002) == 1002);
  pids.Lend(1002, 88);
  const auto t0 = NotifierPids::Clock::time_point{} + std::chrono::hours(1);
  pids.Forget(99, t0);
  // The listener's copy of an ended session's last NOTIFY may come after it
  // closed: its backend still names it for a while...
  CHECK(pids.Translate(1001) == 99);
  // ...then shows its own pid (swept by a later session's end).
  pids.Forget(12345, t0 + NotifierPids::kKeepAfterEnd);
  CHECK(pids.Translate(1001) == 1001);
  CHECK(pids.size() == 1);

  std::string out = "x";
  AppendTranslatedNotification(out, Notification(1002, "chan", "hello"), pids);
  CHECK(out == "x" + Notification(88, "chan", "hello"));
  out.clear();
  AppendTranslatedNotification(out, Notification(4, "c", ""), pids);
  CHECK(out == Notification(4, "c", ""));
  // Too short to carry a pid: forwarded as it is.
  std::string short_frame;
  protocol::AppendFrame(short_frame, 'A', std::string_view("\1\2", 2));
  out.clear();
  AppendTranslatedNotification(out, short_frame, pids);
  CHECK(out == short_frame);
}

}  // namespace
}  // namespace hyperpool::endpoint

namespace hyperpool::endpoint {
namespace {

TEST_CASE("a backend an ended session was on goes to the next session that may notify on it") {
  NotifierPids pids;
  const auto t0 = NotifierPids::Clock::time_point{} + std::chrono::hours(1);
  pids.Lend(2001, 7);
  pids.Forget(7, t0);
  CHECK(pids.Translate(2001) == 7);
  pids.LendIfUnknown(2001, 8);  // the ended session no longer holds it
  CHECK(pids.Translate(2001) == 8);
  pids.LendIfUnknown(2001, 9);  // a live holder is kept
  CHECK(pids.Translate(2001) == 8);
  pids.Forget(8, t0 + std::chrono::seconds(1));
  pids.Lend(2001, 10);  // lent again before the sweep: the sweep leaves it
  pids.Forget(11, t0 + std::chrono::seconds(10));
  CHECK(pids.Translate(2001) == 10);
}

TEST_CASE("MayNotify finds NOTIFY and pg_notify in any case, nothing else") {
  CHECK(MayNotify("NOTIFY chan, 'x'"));
  CHECK(MayNotify("select pg_notify('c', 'p')"));
  CHECK(MayNotify("BEGIN; Notify c; COMMIT"));
  CHECK_FALSE(MayNotify("SELECT 1"));
  CHECK_FALSE(MayNotify("LISTEN chan"));
  CHECK_FALSE(MayNotify("noti"));
}

}  // namespace
}  // namespace hyperpool::endpoint
