// `hyperpool serve`: both halves in one process via hyperpool::connect().
// Prints the local connection string as the first line of stdout once it
// accepts connections; logs to stderr; drains and exits 0 on SIGINT/SIGTERM.
// Options come from --config FILE first, then the flags (which override it).

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <fmt/format.h>

#include "absl/strings/numbers.h"
#include "cli/cli_options.h"
#include "cli/commands.h"
#include "cli/config_file.h"
#include "client/client_util.h"
#include "hyperpool/hyperpool.h"
#include "cli/metrics_flag.h"

namespace hyperpool::cli {

const char* const kServeUsage = R"(usage: hyperpool serve --origin URL [options]
       hyperpool serve --config FILE [options]

Runs a local PostgreSQL endpoint for applications (the Client half) and the
pool towards the origin database (the Endpoint half) in this process. Prints
the local connection string as the first line of stdout, logs to stderr,
drains and exits 0 on SIGINT or SIGTERM.

Options:
  --config FILE           read options from a TOML file (see share/hyperpool/hyperpool.toml.example);
                          flags given as well override it; it may hold the origin password
  --origin URL            origin database: postgresql://user:pass@host:port/db?sslmode=...
                          or a key=value string (default: $HYPERPOOL_ORIGIN); keep the
                          password out of it (argv is public): see --origin-password-file
  --origin-password-file FILE  the origin's password (first line; mode 0600) when the
                          origin string has none; else PGPASSWORD, then PGPASSFILE or ~/.pgpass
  --listen HOST:PORT      local address for applications (default 127.0.0.1:0, a free port)
  --listen-unix DIR       also listen on the Unix socket DIR/.s.PGSQL.<port> (psql -h DIR -p PORT)
  --metrics-listen HOST:PORT  serve /metrics (Prometheus) and /healthz over HTTP there; port 0
                          picks a free one; the bound address is logged: "metrics on http://HOST:PORT"
  --pool-size N           most origin connections open at once (default 10)
  --min-idle N            origin connections kept open while idle (default 0)
  --acquire-timeout MS    wait for a pooled connection before failing with 53300 (default 15000)
  --server-connect-timeout MS  limit for opening one origin connection (default 5000)
  --query-timeout MS      cancel a statement running longer on the origin: 57014 (default 0, off)
  --idle-in-transaction-timeout MS  end a session idle in a transaction: 25P03 (default 0, off)
  --idle-timeout S        close idle origin connections above min-idle after S seconds (default 600)
  --max-lifetime S        close origin connections older than S seconds (default 3600)
  --pool-mode MODE        transaction (default) or session
  --max-pinned N          sessions pinned to a connection (temp table, advisory lock, ...)
                          hold at most N connections beyond --pool-size (default pool-size/4, >= 1)
  --pinned-idle-timeout S close a pinned session idle for S seconds (default 600, 0 = never)
  --user U                user name applications log in with (default hyperpool)
  --password P            their password (default: a random one, shown in the connection string)
  --password-file FILE    read that password from FILE (first line; mode 0600)
  --scram-iterations N    PBKDF2 iterations of the app login (default 4096; lower is a
                          faster login, but PgJDBC refuses counts below 4096)
  --database D            database name applications use (default hyperpool)
  --threads N             worker threads (default 0 = one per core)
  --client-login-timeout S  close an application that has not logged in after S seconds
                          (or Nms; default 15), without a message, as PostgreSQL does
  --client-idle-timeout S close an application idle outside a transaction for S seconds
                          (or Nms) with FATAL 57P05 (default 0 = never)
  --max-message-size N    largest message an application may send, in bytes (suffix K, M,
                          G; default 64M); larger ones get FATAL 54000
  --no-cache              turn the query cache off (both tiers; it is on by default)
  --cache-max-age S       seconds a cached result is served fresh (default 60, at most 3600)
  --cache-swr S           seconds a stale result is served while one refresh runs (default 15)
  --redis-url URL         a shared cache tier on Redis (redis://HOST:PORT[/DB]) behind the local
                          one, shared with every Endpoint of the same origin (default: none)
  --redis-timeout MS      a Redis command slower than this counts as Redis down (default 50)
  --stale-if-error S      serve a cached result up to S seconds past its max age when the origin
                          cannot be reached (default 0 = off)
  --help                  print this help
)";

namespace {

int UsageError(const std::string& message) {
  std::fprintf(stderr, "hyperpool serve: %s\n\n%s", message.c_str(), kServeUsage);
  return 2;
}

void LogLine(const std::string& line) {
  std::string text = "hyperpool serve: " + line + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

// The options of the command line as (flag, value) settings, after pulling
// out --config. Returns the usage error, if any.
std::optional<std::string> CollectArgs(int argc, char** argv, std::string& config_path,
                                       std::vector<ConfigSetting>& settings, bool& help) {
  for (int i = 2; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help = true;
      return std::nullopt;
    }
    if (arg == "--no-cache") {
      settings.push_back({"--no-cache", "", ""});
      continue;
    }
    std::string value;
    size_t eq = arg.find('=');
    std::string_view name = arg;
    if (arg.substr(0, 2) == "--" && eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = std::string(arg.substr(eq + 1));
    } else {
      if (i + 1 >= argc) return fmt::format("option {} needs a value", std::string(arg));
      value = argv[++i];
    }
    if (name == "--config") {
      config_path = value;
    } else {
      settings.push_back({std::string(name), std::move(value), ""});
    }
  }
  return std::nullopt;
}

// Applies one setting to both halves' options; returns the error to print.
std::optional<std::string> ApplyServeSetting(const ConfigSetting& setting, ConnectOptions& options,
                                             std::string& metrics_listen) {
  auto located = [&](const std::string& message) {
    return setting.where.empty() ? message : fmt::format("{}: {}", setting.where, message);
  };
  if (setting.flag == "--no-cache") {
    options.endpoint.cache.enabled = false;
    options.client.cache.enabled = false;
    return std::nullopt;
  }
  if (setting.flag == "--metrics-listen") {
    std::string host;
    uint16_t port = 0;
    if (!ParseHostPort(setting.value, host, port)) return located("--metrics-listen needs HOST:PORT");
    metrics_listen = setting.value;
    return std::nullopt;
  }
  // Both halves run here: a cache option sets both tiers.
  std::optional<std::string> endpoint_error = ApplyEndpointOption(setting.flag, setting.value, options.endpoint);
  std::optional<std::string> client_error =
      ApplyClientOption(setting.flag, setting.value, options.client, options.threads);
  if (!endpoint_error && !client_error) return located(fmt::format("unknown option {}", setting.flag));
  if (endpoint_error && !endpoint_error->empty()) return located(*endpoint_error);
  if (client_error && !client_error->empty()) return located(*client_error);
  return std::nullopt;
}

}  // namespace

int Serve(int argc, char** argv) {
  ConnectOptions options;
  if (const char* env = std::getenv("HYPERPOOL_ORIGIN")) options.endpoint.origin = env;
  std::string config_path;
  std::vector<ConfigSetting> args;
  bool help = false;
  if (auto error = CollectArgs(argc, argv, config_path, args, help)) return UsageError(*error);
  if (help) {
    std::fputs(kServeUsage, stdout);
    return 0;
  }
  std::string metrics_listen;
  bool args_set_origin_password = false;
  if (!config_path.empty()) {
    absl::StatusOr<ConfigFile> config = LoadConfigFile(config_path);
    if (!config.ok()) return UsageError(std::string(config.status().message()));
    for (const std::string& warning : config->warnings) LogLine(fmt::format("warning: {}", warning));
    for (const ConfigSetting& setting : config->settings) {
      if (auto error = ApplyServeSetting(setting, options, metrics_listen)) return UsageError(*error);
    }
    options.endpoint.origin_password = config->origin_password;
    if (!config->client_password.empty()) options.client.password = config->client_password;
  }
  for (const ConfigSetting& setting : args) {
    if (auto error = ApplyServeSetting(setting, options, metrics_listen)) return UsageError(*error);
    if (setting.flag == "--origin-password-file") args_set_origin_password = true;
  }
  // A password file named by a flag overrides a password in the config file.
  if (args_set_origin_password) options.endpoint.origin_password.clear();
  if (options.endpoint.origin.empty()) return UsageError("--origin is required");
  if (options.endpoint.pool.min_idle > options.endpoint.pool.max_size) {
    return UsageError("--min-idle cannot exceed --pool-size");
  }

  // Installed before any worker thread starts, so no thread ever sees the
  // default disposition of SIGINT/SIGTERM.
  asio::io_context signals_io(1);
  asio::signal_set signals(signals_io, SIGINT, SIGTERM);
  std::signal(SIGPIPE, SIG_IGN);

  const std::string redacted = client::RedactOrigin(options.endpoint.origin);
  const size_t pool_size = options.endpoint.pool.max_size;
  const char* mode = options.endpoint.pool.mode == PoolMode::kTransaction ? "transaction" : "session";
  const std::string options_unix_dir = options.client.listen_unix_dir;
  absl::StatusOr<std::unique_ptr<Connection>> connection = connect(std::move(options));
  if (!connection.ok()) {
    LogLine(fmt::format("cannot start: {}", std::string(connection.status().message())));
    return 1;
  }
  const std::string unix_dir = options_unix_dir;
  Connection& running = **connection;
  absl::StatusOr<std::unique_ptr<ops::MetricsServer>> metrics = StartMetricsListener(
      metrics_listen,
      [&running, pool_size] {
        ops::ProcessMetrics m;
        m.endpoint = running.endpoint_stats();
        m.pool_max = pool_size;
        m.client = running.client_stats();
        return m;
      },
      LogLine);
  if (!metrics.ok()) {
    LogLine(fmt::format("cannot start: {}", std::string(metrics.status().message())));
    (*connection)->Close();
    return 1;
  }
  std::fputs(((*connection)->connection_string() + "\n").c_str(), stdout);
  std::fflush(stdout);
  if (!unix_dir.empty()) LogLine(fmt::format("also listening on the Unix socket in {}", unix_dir));
  LogLine(fmt::format("ready; origin {} (pool {} connections, {} mode)", redacted, pool_size, mode));

  int received = 0;
  signals.async_wait([&](const asio::error_code& ec, int signo) {
    if (!ec) received = signo;
  });
  signals_io.run();
  LogLine(fmt::format("received {}, draining", received == SIGINT ? "SIGINT" : "SIGTERM"));
  if (*metrics) (*metrics)->SetDraining(true);
  EndpointStats stats = (*connection)->endpoint_stats();
  std::string cache_report = (*connection)->cache_report();
  (*connection)->Close();
  if (*metrics) (*metrics)->Stop();  // it reads the connection's stats
  LogLine(fmt::format("stopped after {} transactions; origin connections discarded {}, acquire timeouts {}, "
                      "cancels forwarded {} ignored {}, pins {}",
                      stats.transactions, stats.discarded, stats.acquire_timeouts, stats.cancels_forwarded,
                      stats.cancels_ignored, stats.pins_total));
  if (!cache_report.empty()) LogLine(fmt::format("query cache:\n{}", cache_report));
  return 0;
}

}  // namespace hyperpool::cli
