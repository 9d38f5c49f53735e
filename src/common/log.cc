#include "hyperpool/log.h"

#include <cstdio>
#include <ctime>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace hyperpool {
namespace {

// RFC 3339 UTC with milliseconds: 2026-12-01T19:42:20.123Z.
std::string FormatTimestamp(std::chrono::system_clock::time_point ts) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(ts.time_since_epoch()).count();
  std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buffer;
}

// Control characters would break "one line per event": escaped in both forms.
void AppendEscaped(std::string& out, std::string_view value) {
  for (char c : value) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\u%04x", static_cast<unsigned char>(c));
          out += hex;
        } else {
          out += c;
        }
    }
  }
}

bool NeedsQuotes(std::string_view value) {
  if (value.empty()) return true;
  for (char c : value) {
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || static_cast<unsigned char>(c) < 0x20) return true;
  }
  return false;
}

void AppendText(std::string& out, std::string_view key, std::string_view value) {
  if (!out.empty()) out += ' ';
  out.append(key);
  out += '=';
  if (!NeedsQuotes(value)) {
    out.append(value);
    return;
  }
  out += '"';
  AppendEscaped(out, value);
  out += '"';
}

void AppendJson(std::string& out, std::string_view key, std::string_view value) {
  out += out.size() == 1 ? "\"" : ",\"";
  AppendEscaped(out, key);
  out += "\":\"";
  AppendEscaped(out, value);
  out += '"';
}

}  // namespace

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "info";
}

absl::StatusOr<LogLevel> ParseLogLevel(std::string_view name) {
  for (LogLevel level : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    if (name == LogLevelName(level)) return level;
  }
  return absl::InvalidArgumentError("log level is debug, info, warn or error");
}

absl::StatusOr<LogFormat> ParseLogFormat(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError("log format is text or json");
}

std::string FormatLogLine(LogFormat format, std::chrono::system_clock::time_point ts, LogLevel level,
                          std::string_view event, std::initializer_list<LogField> fields) {
  std::string out;
  const std::string when = FormatTimestamp(ts);
  if (format == LogFormat::kJson) {
    out = "{";
    AppendJson(out, "ts", when);
    AppendJson(out, "level", LogLevelName(level));
    AppendJson(out, "event", event);
    for (const LogField& f : fields) AppendJson(out, f.key, f.value);
    out += "}\n";
    return out;
  }
  AppendText(out, "ts", when);
  AppendText(out, "level", LogLevelName(level));
  AppendText(out, "event", event);
  for (const LogField& f : fields) AppendText(out, f.key, f.value);
  out += '\n';
  return out;
}

Logger::Logger(LoggerOptions options) : options_(std::move(options)) {}

std::shared_ptr<const Logger> Logger::Default() { return std::make_shared<const Logger>(LoggerOptions{}); }

void Logger::Log(LogLevel level, std::string_view event, std::initializer_list<LogField> fields) const {
  if (!Enabled(level)) return;
  const auto now = options_.now ? options_.now() : std::chrono::system_clock::now();
  const std::string line = FormatLogLine(options_.format, now, level, event, fields);
  if (options_.sink) {
    options_.sink(line);
  } else {
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
}

}  // namespace hyperpool
