#pragma once
// Structured event logs: one line per event, key=value fields (logfmt) or
// one JSON object per line.
//
//   ts=2026-12-01T19:42:20.123Z level=info event=session_start client=127.0.0.1:5555 session=17 user=app db=app
//
// A Logger is an object the command owns and hands to the Client and the
// Endpoint (ClientOptions::logger, EndpointOptions::logger); there is no
// global one, so two hyperpool instances in one process log independently.
// Without one, each half uses Logger::Default() (text, info, to stderr).

#include <chrono>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace hyperpool {

enum class LogLevel { kDebug, kInfo, kWarn, kError };
enum class LogFormat {
  kText,  // key=value pairs; values with spaces, quotes or '=' are quoted
  kJson,  // {"ts":"...","level":"info","event":"...",...}
};

// One field of an event. Keys are fixed identifiers ([a-z_]); values are
// any text, escaped by the formatter.
struct LogField {
  std::string_view key;
  std::string_view value;
};

struct LoggerOptions {
  LogLevel level = LogLevel::kInfo;
  LogFormat format = LogFormat::kText;
  // Like PostgreSQL's log_connections / log_disconnections (off by default):
  // session_start after a login, session_end when a session closes.
  bool log_connections = false;
  bool log_disconnections = false;
  // Where whole lines (with their '\n') go; empty: stderr, one fwrite per line.
  std::function<void(std::string_view line)> sink;
  // Clock for `ts`; empty: the system clock. Tests fix it.
  std::function<std::chrono::system_clock::time_point()> now;
};

// Thread-safe as long as the sink is (the default one is: one fwrite per line).
class Logger {
 public:
  explicit Logger(LoggerOptions options);

  // Text, info, stderr, connections not logged.
  static std::shared_ptr<const Logger> Default();

  bool Enabled(LogLevel level) const { return level >= options_.level; }
  bool log_connections() const { return options_.log_connections; }
  bool log_disconnections() const { return options_.log_disconnections; }

  // Writes one event if `level` is enabled: ts, level, event, then `fields`
  // in order.
  void Log(LogLevel level, std::string_view event, std::initializer_list<LogField> fields) const;

 private:
  LoggerOptions options_;
};

// The line Logger::Log writes (ending in '\n'); exposed for tests.
std::string FormatLogLine(LogFormat format, std::chrono::system_clock::time_point ts, LogLevel level,
                          std::string_view event, std::initializer_list<LogField> fields);

// "debug", "info", "warn", "error"; "text", "json".
absl::StatusOr<LogLevel> ParseLogLevel(std::string_view name);
absl::StatusOr<LogFormat> ParseLogFormat(std::string_view name);
std::string_view LogLevelName(LogLevel level);

}  // namespace hyperpool
