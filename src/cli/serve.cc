// `hyperpool serve`: both halves in one process via hyperpool::connect().
// Prints the local connection string as the first line of stdout once it
// accepts connections; logs to stderr; drains and exits 0 on SIGINT/SIGTERM.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <fmt/format.h>

#include "absl/strings/numbers.h"
#include "cli/cli_options.h"
#include "cli/commands.h"
#include "client/client_util.h"
#include "hyperpool/hyperpool.h"

namespace hyperpool::cli {

const char* const kServeUsage = R"(usage: hyperpool serve --origin URL [options]

Runs a local PostgreSQL endpoint for applications (the Client half) and the
pool towards the origin database (the Endpoint half) in this process. Prints
the local connection string as the first line of stdout, logs to stderr,
drains and exits 0 on SIGINT or SIGTERM.

Options:
  --origin URL            origin database: postgresql://user:pass@host:port/db?sslmode=...
                          or a key=value string (default: $HYPERPOOL_ORIGIN)
  --listen HOST:PORT      local address for applications (default 127.0.0.1:0, a free port)
  --pool-size N           most origin connections open at once (default 10)
  --min-idle N            origin connections kept open while idle (default 0)
  --acquire-timeout MS    wait for a pooled connection before failing with 53300 (default 15000)
  --idle-timeout S        close idle origin connections above min-idle after S seconds (default 600)
  --max-lifetime S        close origin connections older than S seconds (default 3600)
  --pool-mode MODE        transaction (default) or session
  --user U                user name applications log in with (default hyperpool)
  --password P            their password (default: a random one, shown in the connection string)
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

}  // namespace

int Serve(int argc, char** argv) {
  ConnectOptions options;
  if (const char* env = std::getenv("HYPERPOOL_ORIGIN")) options.endpoint.origin = env;
  for (int i = 2; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kServeUsage, stdout);
      return 0;
    }
    if (arg == "--no-cache") {
      options.endpoint.cache.enabled = false;
      options.client.cache.enabled = false;
      continue;
    }
    std::string value;
    size_t eq = arg.find('=');
    std::string_view name = arg;
    if (arg.substr(0, 2) == "--" && eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = std::string(arg.substr(eq + 1));
    } else {
      if (i + 1 >= argc) return UsageError(fmt::format("option {} needs a value", std::string(arg)));
      value = argv[++i];
    }
    // Both halves run here: a cache option sets both tiers.
    std::optional<std::string> endpoint_error = ApplyEndpointOption(name, value, options.endpoint);
    std::optional<std::string> client_error = ApplyClientOption(name, value, options.client, options.threads);
    if (!endpoint_error && !client_error) return UsageError(fmt::format("unknown option {}", std::string(name)));
    if (endpoint_error && !endpoint_error->empty()) return UsageError(*endpoint_error);
    if (client_error && !client_error->empty()) return UsageError(*client_error);
  }
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
  absl::StatusOr<std::unique_ptr<Connection>> connection = connect(std::move(options));
  if (!connection.ok()) {
    LogLine(fmt::format("cannot start: {}", std::string(connection.status().message())));
    return 1;
  }
  std::fputs(((*connection)->connection_string() + "\n").c_str(), stdout);
  std::fflush(stdout);
  LogLine(fmt::format("ready; origin {} (pool {} connections, {} mode)", redacted, pool_size, mode));

  int received = 0;
  signals.async_wait([&](const asio::error_code& ec, int signo) {
    if (!ec) received = signo;
  });
  signals_io.run();
  LogLine(fmt::format("received {}, draining", received == SIGINT ? "SIGINT" : "SIGTERM"));
  EndpointStats stats = (*connection)->endpoint_stats();
  std::string cache_report = (*connection)->cache_report();
  (*connection)->Close();
  LogLine(fmt::format("stopped after {} transactions; origin connections discarded {}, acquire timeouts {}, "
                      "cancels forwarded {} ignored {}, pins {}",
                      stats.transactions, stats.discarded, stats.acquire_timeouts, stats.cancels_forwarded,
                      stats.cancels_ignored, stats.pins_total));
  if (!cache_report.empty()) LogLine(fmt::format("query cache:\n{}", cache_report));
  return 0;
}

}  // namespace hyperpool::cli
