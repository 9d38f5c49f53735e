#pragma once
// Command-line pieces the hyperpool commands share (serve, endpoint,
// client): numbers, HOST:PORT, and the options of each half, so that one
// option means the same in every command.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "hyperpool/log.h"
#include "hyperpool/options.h"

namespace hyperpool::cli {

// A non-negative decimal that fits `T`.
template <typename T>
bool ParseNumber(std::string_view text, T& out) {
  uint64_t value;
  if (!absl::SimpleAtoi(std::string(text), &value)) return false;
  out = static_cast<T>(value);
  return static_cast<uint64_t>(out) == value;
}

// "N" or "Ns" seconds, or "Nms" milliseconds.
std::optional<std::chrono::milliseconds> ParseDuration(std::string_view text);
// Bytes, optionally with a binary suffix K, M or G.
std::optional<uint64_t> ParseSize(std::string_view text);

// "HOST:PORT" or "[v6]:PORT" (HOST may be empty).
bool ParseHostPort(const std::string& value, std::string& host, uint16_t& port);
// The inverse, bracketing IPv6 literals.
std::string FormatHostPort(const std::string& host, uint16_t port);

// The first line of a password file that only its owner may read.
absl::StatusOr<std::string> ReadPasswordFile(const std::string& path);

// Replaces every password in the process's argv (an origin string with a
// password, --password VALUE) by *** in place, so /proc/PID/cmdline stops
// showing it, and warns on stderr for each. Call before any thread starts;
// the caller keeps its own copies of the arguments.
void HideSecretsInArgv(int argc, char** argv);

// Each returns nullopt when `name` is not one of its options, "" when it
// applied `value`, or the usage error to print.
//
// The Endpoint's: --origin, --origin-password-file, --pool-size, --min-idle,
// --acquire-timeout, --idle-timeout, --max-lifetime, --max-pinned,
// --pinned-idle-timeout, --max-pending-to-origin, --pool-mode, --cache-max-age, --cache-swr,
// --server-connect-timeout, --query-timeout, --idle-in-transaction-timeout
// (milliseconds, like --acquire-timeout).
std::optional<std::string> ApplyEndpointOption(std::string_view name, const std::string& value,
                                               EndpointOptions& options);
// The Client's: --listen, --listen-unix, --user, --password, --password-file, --database, --threads,
// --client-login-timeout, --client-idle-timeout, --max-message-size,
// --cache-max-age, --cache-swr (its own tier), --ssl-cert, --ssl-key, --ssl-mode.
std::optional<std::string> ApplyClientOption(std::string_view name, const std::string& value,
                                             ClientOptions& options, unsigned& threads);
// The event log's: --log-format, --log-level, --log-connections,
// --log-disconnections (the last two bare flags: value "" or true/false).
std::optional<std::string> ApplyLogOption(std::string_view name, const std::string& value, LoggerOptions& options);
// --log-connections and --log-disconnections take no value on the command line.
bool IsBareLogFlag(std::string_view name);

}  // namespace hyperpool::cli
