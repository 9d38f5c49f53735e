// The event log (include/hyperpool/log.h): one line per event, fields in
// order, escaping that keeps one event on one line, levels and the switches.

#include "hyperpool/log.h"

#include <chrono>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

namespace hyperpool {
namespace {

// 2026-12-01T19:42:20.123Z
std::chrono::system_clock::time_point FixedTime() {
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(1796154140123));
}

TEST_CASE("text lines are key=value in order, quoting only what needs it") {
  std::string line = FormatLogLine(LogFormat::kText, FixedTime(), LogLevel::kInfo, "session_start",
                                   {{"client", "127.0.0.1:5555"}, {"session", "17"}, {"user", "app"}, {"db", "app"}});
  CHECK(line ==
        "ts=2026-12-01T19:42:20.123Z level=info event=session_start client=127.0.0.1:5555 session=17 user=app "
        "db=app\n");
  line = FormatLogLine(LogFormat::kText, FixedTime(), LogLevel::kWarn, "auth_failed",
                       {{"reason", "password authentication failed for user \"x\""}, {"empty", ""}, {"eq", "a=b"}});
  CHECK(line ==
        "ts=2026-12-01T19:42:20.123Z level=warn event=auth_failed "
        "reason=\"password authentication failed for user \\\"x\\\"\" empty=\"\" eq=\"a=b\"\n");
}

TEST_CASE("a value with a newline or control byte stays on one line in both formats") {
  for (LogFormat format : {LogFormat::kText, LogFormat::kJson}) {
    std::string line = FormatLogLine(format, FixedTime(), LogLevel::kError, "e", {{"msg", "a\nb\r\x01\\"}});
    CHECK(line.find('\n') == line.size() - 1);
    CHECK(line.find('\r') == std::string::npos);
    CHECK(line.find('\x01') == std::string::npos);
    CHECK(line.find("a\\nb\\r\\u0001\\\\") != std::string::npos);
  }
}

TEST_CASE("json lines are one object with ts, level, event, then the fields") {
  std::string line = FormatLogLine(LogFormat::kJson, FixedTime(), LogLevel::kDebug, "session_end",
                                   {{"client", "[::1]:9"}, {"why", "said \"bye\""}});
  CHECK(line ==
        "{\"ts\":\"2026-12-01T19:42:20.123Z\",\"level\":\"debug\",\"event\":\"session_end\","
        "\"client\":\"[::1]:9\",\"why\":\"said \\\"bye\\\"\"}\n");
}

TEST_CASE("a Logger writes events at or above its level to its sink") {
  std::vector<std::string> lines;
  LoggerOptions options;
  options.level = LogLevel::kWarn;
  options.sink = [&](std::string_view line) { lines.emplace_back(line); };
  options.now = FixedTime;
  Logger logger(options);
  logger.Log(LogLevel::kInfo, "dropped", {});
  logger.Log(LogLevel::kDebug, "dropped", {});
  logger.Log(LogLevel::kWarn, "kept", {{"k", "v"}});
  logger.Log(LogLevel::kError, "kept", {});
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "ts=2026-12-01T19:42:20.123Z level=warn event=kept k=v\n");
  CHECK_FALSE(logger.log_connections());
  CHECK_FALSE(logger.log_disconnections());
}

TEST_CASE("levels and formats parse from their flag spellings") {
  CHECK(*ParseLogLevel("debug") == LogLevel::kDebug);
  CHECK(*ParseLogLevel("info") == LogLevel::kInfo);
  CHECK(*ParseLogLevel("warn") == LogLevel::kWarn);
  CHECK(*ParseLogLevel("error") == LogLevel::kError);
  CHECK_FALSE(ParseLogLevel("verbose").ok());
  CHECK(*ParseLogFormat("text") == LogFormat::kText);
  CHECK(*ParseLogFormat("json") == LogFormat::kJson);
  CHECK_FALSE(ParseLogFormat("xml").ok());
}

}  // namespace
}  // namespace hyperpool
