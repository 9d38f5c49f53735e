#include "cli/cli_options.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "endpoint/origin_config.h"
#include "endpoint/origin_password.h"

namespace hyperpool::cli {

bool ParseHostPort(const std::string& value, std::string& host, uint16_t& port) {
  size_t colon = value.rfind(':');
  if (colon == std::string::npos) return false;
  host = value.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return ParseNumber(std::string_view(value).substr(colon + 1), port);
}

std::string FormatHostPort(const std::string& host, uint16_t port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

absl::StatusOr<std::string> ReadPasswordFile(const std::string& path) {
  OriginConfig unused;
  endpoint::PasswordSources sources;
  sources.password_file = path;
  if (absl::Status s = endpoint::ResolveOriginPassword(unused, sources); !s.ok()) return s;
  return unused.password;
}

void HideSecretsInArgv(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value = arg;
    bool app_password = false;
    if (arg.substr(0, 9) == "--origin=") value = arg.substr(9);
    if (arg.substr(0, 11) == "--password=") {
      value = arg.substr(11);
      app_password = true;
    }
    if ((arg == "--password") && i + 1 < argc) {
      value = argv[++i];
      app_password = true;
      arg = value;
    }
    std::string replacement;
    if (app_password) {
      if (value.empty()) continue;
      std::fputs("hyperpool: warning: a password given on the command line is visible to every local user "
                 "(/proc/PID/cmdline); use --password-file\n", stderr);
      replacement = std::string(arg.substr(0, arg.size() - value.size())) + "***";
    } else {
      auto config = ParseOriginConfig(value);
      if (!config.ok() || config->password.empty()) continue;
      std::fputs("hyperpool: warning: the origin password on the command line is visible to every local user "
                 "(/proc/PID/cmdline); use --origin-password-file, PGPASSWORD or a pgpass file\n", stderr);
      replacement = std::string(arg.substr(0, arg.size() - value.size())) + RedactedOriginString(*config);
    }
    // Overwrite in place: the kernel shows the process's own argv memory.
    char* bytes = argv[i];
    std::size_t size = std::strlen(bytes);
    std::size_t n = std::min(size, replacement.size());
    std::memcpy(bytes, replacement.data(), n);
    std::memset(bytes + n, 0, size - n);
  }
}

namespace {

// --cache-max-age / --cache-swr for either half's tier.
std::optional<std::string> ApplyCacheOption(std::string_view name, const std::string& value, CacheOptions& cache) {
  uint64_t number = 0;
  const bool numeric = ParseNumber(value, number);
  if (name == "--cache-max-age") {
    if (!numeric || number > 3600) return "--cache-max-age needs seconds (at most 3600)";
    cache.max_age = std::chrono::seconds(number);
  } else if (name == "--cache-swr") {
    if (!numeric || number > 3600) return "--cache-swr needs seconds (at most 3600)";
    cache.stale_while_revalidate = std::chrono::seconds(number);
  } else {
    return std::nullopt;
  }
  return std::string();
}

}  // namespace

std::optional<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  uint64_t number = 0;
  if (text.size() > 2 && text.substr(text.size() - 2) == "ms") {
    if (!ParseNumber(text.substr(0, text.size() - 2), number) || number > 86'400'000'000ull) return std::nullopt;
    return std::chrono::milliseconds(number);
  }
  if (text.size() > 1 && text.back() == 's') text.remove_suffix(1);
  if (!ParseNumber(text, number) || number > 86'400'000ull) return std::nullopt;
  return std::chrono::milliseconds(number * 1000);
}

std::optional<uint64_t> ParseSize(std::string_view text) {
  uint64_t multiplier = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': case 'k': multiplier = uint64_t{1} << 10; break;
      case 'M': case 'm': multiplier = uint64_t{1} << 20; break;
      case 'G': case 'g': multiplier = uint64_t{1} << 30; break;
      default: break;
    }
    if (multiplier != 1) text.remove_suffix(1);
  }
  uint64_t number = 0;
  if (!ParseNumber(text, number) || number > (uint64_t{1} << 40)) return std::nullopt;
  return number * multiplier;
}

std::optional<std::string> ApplyEndpointOption(std::string_view name, const std::string& value,
                                               EndpointOptions& options) {
  uint64_t number = 0;
  const bool numeric = ParseNumber(value, number);
  if (name == "--origin") {
    options.origin = value;
  } else if (name == "--origin-password-file") {
    options.origin_password_file = value;
  } else if (name == "--pool-size") {
    if (!numeric || number == 0) return "--pool-size needs a positive number";
    options.pool.max_size = number;
  } else if (name == "--min-idle") {
    if (!numeric) return "--min-idle needs a number";
    options.pool.min_idle = number;
  } else if (name == "--acquire-timeout") {
    if (!numeric) return "--acquire-timeout needs milliseconds";
    options.pool.acquire_timeout = std::chrono::milliseconds(number);
  } else if (name == "--server-connect-timeout") {
    if (!numeric || number == 0) return "--server-connect-timeout needs positive milliseconds";
    options.pool.connect_timeout = std::chrono::milliseconds(number);
  } else if (name == "--query-timeout") {
    if (!numeric) return "--query-timeout needs milliseconds (0: off)";
    options.query_timeout = std::chrono::milliseconds(number);
  } else if (name == "--idle-in-transaction-timeout") {
    if (!numeric) return "--idle-in-transaction-timeout needs milliseconds (0: off)";
    options.idle_in_transaction_timeout = std::chrono::milliseconds(number);
  } else if (name == "--idle-timeout") {
    if (!numeric) return "--idle-timeout needs seconds";
    options.pool.idle_timeout = std::chrono::seconds(number);
  } else if (name == "--max-lifetime") {
    if (!numeric) return "--max-lifetime needs seconds";
    options.pool.max_lifetime = std::chrono::seconds(number);
  } else if (name == "--max-pinned") {
    if (!numeric || number == 0) return "--max-pinned needs a positive number";
    options.max_pinned = number;
  } else if (name == "--max-pending-to-origin") {
    std::optional<uint64_t> bytes = ParseSize(value);
    if (!bytes || *bytes < 64 * 1024 || *bytes > (uint64_t{1} << 30)) {
      return "--max-pending-to-origin needs bytes (suffix K, M or G allowed), from 64K to 1G";
    }
    options.max_pending_to_origin = static_cast<std::size_t>(*bytes);
  } else if (name == "--pinned-idle-timeout") {
    if (!numeric) return "--pinned-idle-timeout needs seconds (0: never)";
    options.pinned_idle_timeout = std::chrono::seconds(number);
  } else if (name == "--pool-mode") {
    if (value == "transaction") {
      options.pool.mode = PoolMode::kTransaction;
    } else if (value == "session") {
      options.pool.mode = PoolMode::kSession;
    } else {
      return "--pool-mode is transaction or session";
    }
  } else if (name == "--redis-url") {
    // Checked (redis://host[:port][/db]) when the Endpoint is created.
    if (!value.starts_with("redis://")) return "--redis-url needs redis://HOST:PORT";
    options.cache.redis_url = value;
  } else if (name == "--redis-timeout") {
    if (!numeric || number == 0 || number > 10000) return "--redis-timeout needs milliseconds (1 to 10000)";
    options.cache.redis_timeout = std::chrono::milliseconds(number);
  } else if (name == "--wal-invalidation") {
    if (value == "on") {
      options.cache.wal_invalidation = WalInvalidation::kOn;
    } else if (value == "off") {
      options.cache.wal_invalidation = WalInvalidation::kOff;
    } else if (value == "auto") {
      options.cache.wal_invalidation = WalInvalidation::kAuto;
    } else {
      return "--wal-invalidation is on, off or auto";
    }
  } else if (name == "--wal-max-lag") {
    if (!numeric || number == 0 || number > 60000) return "--wal-max-lag needs milliseconds (1 to 60000)";
    options.cache.wal_max_lag = std::chrono::milliseconds(number);
  } else if (name == "--wal-hard-lag") {
    if (!numeric || number == 0 || number > 3600000) return "--wal-hard-lag needs milliseconds (1 to 3600000)";
    options.cache.wal_hard_lag = std::chrono::milliseconds(number);
  } else if (name == "--stale-if-error") {
    if (!numeric || number > 86400) return "--stale-if-error needs seconds (0: off, at most 86400)";
    options.cache.stale_if_error = std::chrono::seconds(number);
  } else {
    return ApplyCacheOption(name, value, options.cache);
  }
  return std::string();
}

std::optional<std::string> ApplyClientOption(std::string_view name, const std::string& value,
                                             ClientOptions& options, unsigned& threads) {
  if (name == "--listen") {
    std::string host;
    uint16_t port = 0;
    if (!ParseHostPort(value, host, port)) return "--listen needs HOST:PORT";
    options.listen_host = host.empty() ? "127.0.0.1" : host;
    options.listen_port = port;
  } else if (name == "--listen-unix") {
    if (value.empty()) return "--listen-unix needs a directory";
    options.listen_unix_dir = value;
  } else if (name == "--user") {
    options.user = value;
  } else if (name == "--password") {
    options.password = value;
  } else if (name == "--password-file") {
    auto password = ReadPasswordFile(value);
    if (!password.ok()) return std::string(password.status().message());
    options.password = std::move(*password);
  } else if (name == "--database") {
    options.database = value;
  } else if (name == "--threads") {
    if (!ParseNumber(value, threads)) return "--threads needs a number";
  } else if (name == "--scram-iterations") {
    if (!ParseNumber(value, options.scram_iterations) || options.scram_iterations == 0) {
      return "--scram-iterations needs a positive number";
    }
  } else if (name == "--client-login-timeout") {
    std::optional<std::chrono::milliseconds> d = ParseDuration(value);
    if (!d || *d <= std::chrono::milliseconds(0)) return "--client-login-timeout needs seconds (or Nms), above 0";
    options.handshake_timeout = *d;
  } else if (name == "--client-idle-timeout") {
    std::optional<std::chrono::milliseconds> d = ParseDuration(value);
    if (!d) return "--client-idle-timeout needs seconds (or Nms; 0 = off)";
    options.idle_timeout = *d;
  } else if (name == "--ssl-cert") {
    options.ssl_cert_file = value;
  } else if (name == "--ssl-key") {
    options.ssl_key_file = value;
  } else if (name == "--ssl-mode") {
    if (value != "allow" && value != "require") return "--ssl-mode is allow or require";
    options.ssl_required = value == "require";
  } else if (name == "--replication") {
    if (value == "off") {
      options.replication = ClientOptions::Replication::kOff;
    } else if (value == "logical") {
      options.replication = ClientOptions::Replication::kLogical;
    } else if (value == "all") {
      options.replication = ClientOptions::Replication::kAll;
    } else {
      return "--replication is off, logical or all";
    }
  } else if (name == "--max-message-size") {
    std::optional<uint64_t> bytes = ParseSize(value);
    // At least room for a Query of a few bytes; at most PostgreSQL's 1 GiB.
    if (!bytes || *bytes < 1024 || *bytes > (uint64_t{1} << 30) - 1) {
      return "--max-message-size needs bytes (suffix K, M or G allowed), from 1K to 1G-1";
    }
    options.max_message_size = static_cast<std::size_t>(*bytes);
  } else {
    return ApplyCacheOption(name, value, options.cache);
  }
  return std::string();
}

std::optional<std::string> ApplyLogOption(std::string_view name, const std::string& value, LoggerOptions& options) {
  if (name == "--log-format") {
    absl::StatusOr<LogFormat> format = ParseLogFormat(value);
    if (!format.ok()) return "--log-format is text or json";
    options.format = *format;
  } else if (name == "--log-level") {
    absl::StatusOr<LogLevel> level = ParseLogLevel(value);
    if (!level.ok()) return "--log-level is debug, info, warn or error";
    options.level = *level;
  } else if (name == "--log-connections" || name == "--log-disconnections") {
    // A bare flag on the command line; true/false from the config file.
    if (value != "" && value != "true" && value != "false") return fmt::format("{} takes no value", name);
    (name == "--log-connections" ? options.log_connections : options.log_disconnections) = value != "false";
  } else {
    return std::nullopt;
  }
  return std::string();
}

bool IsBareLogFlag(std::string_view name) { return name == "--log-connections" || name == "--log-disconnections"; }

}  // namespace hyperpool::cli
