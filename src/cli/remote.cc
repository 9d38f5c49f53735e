// `hyperpool endpoint` and `hyperpool client`: the two halves in separate
// processes (usually on separate machines), joined by the socket transport
// (docs/architecture.md, "Socket transport").
//
//   endpoint: an Endpoint behind a LinkListener (TLS + link secret), near the
//             origin database. Prints the address it listens on first.
//   client:   a Client whose links go to that Endpoint, beside the
//             application. Prints the local connection string first.
//
// Both log to stderr, drain and exit 0 on SIGINT/SIGTERM, like `serve`.

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/co_spawn.hpp>
#include <asio/use_future.hpp>
#include <fmt/format.h>

#include "absl/strings/numbers.h"
#include "cli/cli_options.h"
#include "cli/commands.h"
#include "cli/config_file.h"
#include "cli/metrics_flag.h"
#include "client/client_util.h"
#include "hyperpool/hyperpool.h"
#include "hyperpool/placement.h"
#include "placement/endpoint_ranking.h"

namespace hyperpool::cli {

const char* const kEndpointUsage = R"(usage: hyperpool endpoint --listen HOST:PORT --origin URL --tls-cert FILE --tls-key FILE
                          --link-secret-file FILE [options]

Runs only the Endpoint half, near the origin database: it pools origin
connections for the Clients (`hyperpool client`) that connect to it over TLS
and prove they know the link secret. Prints the address it listens on
(HOST:PORT) as the first line of stdout, logs to stderr, drains and exits 0 on
SIGINT or SIGTERM.

Options:
  --config FILE           read options from a TOML file (serve's keys: [listen], [origin], [pool],
                          [cache], [log], [metrics]; plus [link] tls_cert, tls_key, secret_file);
                          flags given as well override it
  --listen HOST:PORT      address for Clients' links (an IP address; 0.0.0.0 for all;
                          port 0 picks a free port, printed)
  --origin URL            origin database: postgresql://user:pass@host:port/db?sslmode=...
                          or a key=value string (default: $HYPERPOOL_ORIGIN); keep the
                          password out of it (argv is public): see --origin-password-file
  --origin-password-file FILE  the origin's password (first line; mode 0600) when the
                          origin string has none; else PGPASSWORD, then PGPASSFILE or ~/.pgpass
  --tls-cert FILE         PEM certificate chain presented to Clients (leaf first); its
                          subjectAltName must name the host Clients connect to
  --tls-key FILE          its PEM private key
  --link-secret-file FILE the secret Clients must know (at least 16 bytes; a trailing
                          newline is ignored), e.g. from `openssl rand -hex 32`
  --handshake-timeout MS  limit for a new link's TLS handshake and secret (default 10000)
  --metrics-listen HOST:PORT  serve /metrics, /healthz and /dashboard over HTTP (as for serve)
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
                          hold at most N connections beyond --pool-size (default: the pool size);
                          a statement that would pin one more waits for a slot
  --pinned-idle-timeout S close a pinned session idle for S seconds (default 600, 0 = never)
  --max-pending-to-origin N  stop reading a client whose bytes not yet written to its busy
                          origin connection pass N (suffix K, M, G; default 4M)
  --no-cache              turn the Endpoint's query-cache tier off
  --log-format, --log-level, --log-connections, --log-disconnections
                          event logs as for serve (origin_connect/origin_close with the backend pid)
  --cache-max-age S       seconds a cached result is served fresh (default 60, at most 3600)
  --cache-swr S           seconds a stale result is served while one refresh runs (default 15)
  --redis-url URL         a shared cache tier on Redis (redis://HOST:PORT[/DB]) behind the local
                          one, shared with every Endpoint of the same origin (default: none)
  --redis-timeout MS      a Redis command slower than this counts as Redis down (default 50)
  --stale-if-error S      serve a cached result up to S seconds past its max age when the origin
                          cannot be reached (default 0 = off)
  --wal-invalidation M    on|off|auto: invalidate the cache from the origin's WAL (a logical
                          replication connection, temporary slot, test_decoding), so writes that
                          bypass hyperpool are seen within --wal-max-lag; auto: when the origin
                          allows it (wal_level = logical, REPLICATION), else by max age;
                          on: required, no cached rows while it is down; with on the default
                          --cache-max-age is 600 (default auto)
  --wal-max-lag MS        serve cached rows only while the feed lags less than this (default 100)
  --wal-hard-lag MS       past this lag drop the slot and start a fresh one (default 10000)
  --help                  print this help
)";

const char* const kClientUsage = R"(usage: hyperpool client --endpoint HOST:PORT --tls-ca FILE --link-secret-file FILE [options]

Runs only the Client half, beside the application: a local PostgreSQL
endpoint whose sessions go to a remote `hyperpool endpoint` over TLS. Prints
the local connection string as the first line of stdout, logs to stderr,
drains and exits 0 on SIGINT or SIGTERM. Links are opened ahead, so a new
session costs no round trip to the Endpoint before its first query goes out.

Options:
  --config FILE           read options from a TOML file (serve's keys: [listen], [client], [cache],
                          [tls], [log], [metrics]; plus [link] endpoints, tls_ca, tls_server_name,
                          secret_file, region); flags given as well override it
  --endpoint HOST:PORT    the Endpoint's link address (host name or IP address). Give it
                          more than once and the Client ranks them by the lowest client
                          + 2 x origin round trip (latency placement; each answers its
                          own origin round trip), re-measures every --probe-interval and
                          when a link cannot be opened, and sends new sessions to the
                          next Endpoint when the one in use cannot be reached
  --probe-interval S      several --endpoint: seconds (or Nms) between probe rounds
                          (default 10)
  --settle-probes N       several --endpoint: probe rounds a better Endpoint must stay
                          healthy and better before new sessions move to it (default 3)
  --region NAME           several --endpoint: until measured, Endpoints are ordered by
                          rendezvous hashing of (NAME, address), so all Clients given the
                          same NAME agree (default: empty)
  --tls-ca FILE           PEM CA certificates that may sign the Endpoint's certificate
                          ("system": the system trust store)
  --tls-server-name NAME  name the Endpoint's certificate must carry (default: the
                          --endpoint host)
  --link-secret-file FILE the secret shared with the Endpoint (at least 16 bytes; a
                          trailing newline is ignored)
  --preopen N             links kept open ahead of need (default 4; 0 = none)
  --preopen-max-idle S    replace a link opened ahead after S seconds unused (default 30)
  --connect-timeout MS    limit for reaching the Endpoint (TCP + TLS) (default 5000)
  --listen HOST:PORT      local address for applications (default 127.0.0.1:0, a free port)
  --listen-unix DIR       also listen on the Unix socket DIR/.s.PGSQL.<port> (as for serve)
  --metrics-listen HOST:PORT  serve /metrics, /healthz and /dashboard over HTTP (as for serve)
  --user U                user name applications log in with (default hyperpool)
  --password P            their password (default: a random one, shown in the connection string)
  --password-file FILE    read that password from FILE (first line; mode 0600)
  --scram-iterations N    PBKDF2 iterations of the app login, for every driver (default
                          4096, and 16 with a generated password for drivers known to
                          accept it; PgJDBC refuses counts below 4096)
  --database D            database name applications use (default hyperpool)
  --threads N             worker threads (default 0 = one per core)
  --client-login-timeout S  close an application that has not logged in after S seconds
                          (or Nms; default 15), without a message, as PostgreSQL does
  --client-idle-timeout S close an application idle outside a transaction for S seconds
                          (or Nms) with FATAL 57P05 (default 0 = never)
  --max-message-size N    largest message an application may send, in bytes (suffix K, M,
                          G; default 64M); larger ones get FATAL 54000
  --no-cache              turn the Client's query-cache tier off
  --no-cache-watch        no invalidation watch: the Client tier then hears of other
                          Clients' writes only over a session open at the time (it
                          keeps its copies up to --cache-max-age otherwise)
  --cache-watch-heartbeat S  how often the invalidation watch checks its link (default 2;
                          or Nms); one unanswered by the next beat drops the Client tier
  --ssl-cert FILE, --ssl-key FILE, --ssl-mode allow|require
                          TLS towards applications (as for serve)
  --replication off|logical|all
                          replication logins (as for serve; default logical)
  --log-format, --log-level, --log-connections, --log-disconnections
                          event logs as for serve (session_start/session_end)
  --cache-max-age S       at most this many seconds for a locally cached result (default 60)
  --cache-swr S           as for serve (default 15)
  --help                  print this help
)";

const char* const kPlaceUsage = R"(usage: hyperpool place --endpoint HOST:PORT [--endpoint HOST:PORT ...] --tls-ca FILE
                       --link-secret-file FILE [options]

Probes each Endpoint (`hyperpool endpoint`) as a Client given them would and
prints the ranking latency placement uses: the measured Client <-> Endpoint
round trip, the Endpoint's own origin round trip and the cost
(client + 2 x origin). Endpoints that cannot be probed, or cannot reach the
origin, are listed last with the reason. Exits 0 when at least one Endpoint
reaches the origin, 1 when none does, 2 on a usage error.

Options:
  --endpoint HOST:PORT    an Endpoint's link address (give it once per Endpoint)
  --tls-ca FILE           PEM CA certificates that may sign the Endpoints' certificates
                          ("system": the system trust store)
  --tls-server-name NAME  name the certificates must carry (default: each --endpoint host)
  --link-secret-file FILE the secret shared with the Endpoints
  --connect-timeout MS    limit for reaching an Endpoint and for its answer (default 5000)
  --region NAME           the rendezvous order among Endpoints that cannot be measured
                          (as for `hyperpool client --region`)
  --help                  print this help
)";

namespace {

// How long shutdown lets links and sessions unwind before stopping outright.
constexpr std::chrono::seconds kDrainLimit{5};
// A secret file is a few dozen bytes; refuse anything that is clearly not one.
constexpr std::size_t kMaxSecretFileBytes = 4096;

void LogLine(std::string_view command, const std::string& line) {
  std::string text = fmt::format("hyperpool {}: {}\n", command, line);
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

int UsageError(std::string_view command, const char* usage, const std::string& message) {
  std::fprintf(stderr, "hyperpool %s: %s\n\n%s", std::string(command).c_str(), message.c_str(), usage);
  return 2;
}

// The link secret: the file's bytes without trailing whitespace (so that
// `openssl rand -hex 32 > f` and `printf %s ... > f` give the same secret).
absl::StatusOr<std::string> ReadSecretFile(std::string_view command, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(fmt::format("cannot read the link secret file '{}'", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  std::string secret = buffer.str();
  if (secret.size() > kMaxSecretFileBytes) {
    return absl::InvalidArgumentError(fmt::format("the link secret file '{}' is larger than {} bytes", path,
                                                  kMaxSecretFileBytes));
  }
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r' || secret.back() == ' ' ||
                             secret.back() == '\t')) {
    secret.pop_back();
  }
  if (secret.size() < 16) {
    return absl::InvalidArgumentError(
        fmt::format("the link secret in '{}' is shorter than 16 bytes (try `openssl rand -hex 32`)", path));
  }
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    LogLine(command, fmt::format("warning: the link secret file '{}' is readable by other users", path));
  }
  return secret;
}

// One "--name value" or "--name=value" argument at a time.
//
// With --config FILE (endpoint and client) the file's settings come first,
// as the same (flag, value) pairs `serve --config` uses (config_file.h), so
// flags given as well override them; check error() before the loop.
class Args {
 public:
  Args(int argc, char** argv) : argc_(argc), argv_(argv) {}
  Args(int argc, char** argv, std::string_view command) : argc_(argc), argv_(argv) {
    for (int i = 2; i < argc; ++i) {
      std::string_view arg = argv[i];
      std::string path;
      if (arg == "--config" && i + 1 < argc) {
        path = argv[i + 1];
      } else if (arg.substr(0, 9) == "--config=") {
        path = std::string(arg.substr(9));
      } else {
        continue;
      }
      absl::StatusOr<ConfigFile> config = LoadConfigFile(path);
      if (!config.ok()) {
        error_ = std::string(config.status().message());
        return;
      }
      for (const std::string& warning : config->warnings) LogLine(command, fmt::format("warning: {}", warning));
      if (!config->origin_password.empty() || !config->client_password.empty() || !config->users.empty() ||
          !config->databases.empty()) {
        error_ = fmt::format("{}: origin.password, client.password, [users] and [databases] are for serve only",
                             path);
        return;
      }
      for (ConfigSetting& setting : config->settings) {
        // A switch the file turns off is the default: no flag.
        if (IsBareLogFlag(setting.flag) && setting.value == "false") continue;
        if (IsBareLogFlag(setting.flag)) setting.value.clear();
        file_.push_back(std::move(setting));
      }
    }
  }
  // The config file could not be used (the message names file and line).
  const std::optional<std::string>& error() const { return error_; }
  // "FILE:LINE: key: " for a setting of the file, else "".
  std::string where() const { return where_.empty() ? "" : where_ + ": "; }
  // Advances to the next argument; false at the end.
  bool Next() {
    where_.clear();
    if (next_file_ < file_.size()) {
      const ConfigSetting& setting = file_[next_file_++];
      name_ = setting.flag;
      value_ = setting.value;
      has_inline_ = true;  // bare switches are matched by name before any value is read
      where_ = setting.where;
      return true;
    }
    if (i_ >= argc_) return false;
    std::string_view arg = argv_[i_++];
    if (arg == "--config" && i_ < argc_) {  // read by the constructor
      ++i_;
      return Next();
    }
    if (arg.substr(0, 9) == "--config=") return Next();
    has_inline_ = false;
    name_ = arg;
    if (arg.substr(0, 2) == "--") {
      size_t eq = arg.find('=');
      if (eq != std::string_view::npos) {
        name_ = arg.substr(0, eq);
        value_ = std::string(arg.substr(eq + 1));
        has_inline_ = true;
      }
    }
    return true;
  }
  std::string_view name() const { return name_; }
  // The option's value; false if there is none.
  bool Value(std::string& out) {
    if (has_inline_) {
      out = value_;
      return true;
    }
    if (i_ >= argc_) return false;
    out = argv_[i_++];
    return true;
  }

 private:
  int argc_;
  char** argv_;
  int i_ = 2;  // after "hyperpool <command>"
  std::string_view name_;
  std::string value_;
  bool has_inline_ = false;
  std::vector<ConfigSetting> file_;
  size_t next_file_ = 0;
  std::string where_;
  std::optional<std::string> error_;
};

// Blocks until SIGINT or SIGTERM; returns which. The signal set must exist
// before any worker thread starts (so none sees the default disposition).
int WaitForSignal(asio::io_context& signals_io, asio::signal_set& signals) {
  int received = 0;
  signals.async_wait([&](const asio::error_code& ec, int signo) {
    if (!ec) received = signo;
  });
  signals_io.run();
  return received;
}

// Probes each candidate twice through a transport of its own (nothing
// opened ahead); the better round trip counts (the first may wait for the
// Endpoint to measure its origin).
std::vector<EndpointMeasurement> MeasureAll(const std::vector<std::pair<std::string, uint16_t>>& candidates,
                                            const SocketTransportOptions& base) {
  asio::io_context io(1);
  std::vector<EndpointMeasurement> measured;
  for (const auto& [host, port] : candidates) {
    SocketTransportOptions o = base;
    o.host = host;
    o.port = port;
    o.preopen = 0;
    o.log = nullptr;
    const std::string where = FormatHostPort(host, port);
    EndpointMeasurement m;
    m.endpoint = {where, where};
    absl::StatusOr<std::unique_ptr<SocketTransport>> transport = MakeSocketTransport({io.get_executor()}, o);
    if (!transport.ok()) {
      m.status = transport.status();
    } else {
      for (int i = 0; i < 2; ++i) {
        auto future = asio::co_spawn(
            io, MeasureEndpoint(io.get_executor(), **transport, m.endpoint, base.connect_timeout), asio::use_future);
        io.run();
        io.restart();
        EndpointMeasurement next = future.get();
        if (i == 0 || !next.status.ok() || next.client_rtt < m.client_rtt) m = std::move(next);
        if (!m.status.ok()) break;
      }
      (*transport)->Stop();
      transport->reset();
      io.run();  // lets the closed links unwind
      io.restart();
    }
    measured.push_back(std::move(m));
  }
  return measured;
}

// The options `client` and `place` share: which Endpoints and how to reach
// them. nullopt: not one of them; "": applied; else the usage error.
std::optional<std::string> ApplyLinkOption(std::string_view name, const std::string& value,
                                           std::vector<std::pair<std::string, uint16_t>>& endpoints,
                                           SocketTransportOptions& link, std::string& secret_file,
                                           std::string& region) {
  uint64_t number = 0;
  if (name == "--endpoint") {
    std::string host;
    uint16_t port = 0;
    if (!ParseHostPort(value, host, port) || host.empty() || port == 0) return "--endpoint needs HOST:PORT";
    endpoints.emplace_back(std::move(host), port);
  } else if (name == "--tls-ca") {
    link.tls_ca_file = value;
  } else if (name == "--tls-server-name") {
    link.tls_server_name = value;
  } else if (name == "--link-secret-file") {
    secret_file = value;
  } else if (name == "--region") {
    region = value;
  } else if (name == "--connect-timeout") {
    if (!ParseNumber(value, number) || number == 0) return "--connect-timeout needs milliseconds";
    link.connect_timeout = std::chrono::milliseconds(number);
  } else {
    return std::nullopt;
  }
  return std::string();
}

}  // namespace

// `hyperpool endpoint`'s command line (and config file) into the Endpoint's
// and the link listener's options; an exit code when it must stop at once.
std::optional<int> ParseEndpointArgs(int argc, char** argv, EndpointOptions& options, LinkListenerOptions& listen,
                                     std::string& metrics_listen) {
  constexpr std::string_view kCommand = "endpoint";
  auto usage_error = [&](const std::string& message) { return UsageError(kCommand, kEndpointUsage, message); };
  LoggerOptions log;
  if (const char* env = std::getenv("HYPERPOOL_ORIGIN")) options.origin = env;
  listen.host.clear();
  bool have_listen = false;
  std::string secret_file;
  Args args(argc, argv, kCommand);
  if (args.error()) return usage_error(*args.error());
  while (args.Next()) {
    std::string_view name = args.name();
    if (name == "--help" || name == "-h") {
      std::fputs(kEndpointUsage, stdout);
      return 0;
    }
    if (name == "--no-cache") {
      options.cache.enabled = false;
      continue;
    }
    if (IsBareLogFlag(name)) {
      (void)ApplyLogOption(name, "", log);
      continue;
    }
    std::string value;
    if (!args.Value(value)) return usage_error(fmt::format("option {} needs a value", std::string(name)));
    if (auto applied = ApplyEndpointOption(name, value, options)) {
      if (!applied->empty()) return usage_error(*applied);
      continue;
    }
    if (auto log_applied = ApplyLogOption(name, value, log)) {
      if (!log_applied->empty()) return usage_error(*log_applied);
      continue;
    }
    uint64_t number = 0;
    if (name == "--listen") {
      if (!ParseHostPort(value, listen.host, listen.port)) return usage_error("--listen needs HOST:PORT");
      if (listen.host.empty()) listen.host = "0.0.0.0";
      have_listen = true;
    } else if (name == "--tls-cert") {
      listen.tls_cert_file = value;
    } else if (name == "--tls-key") {
      listen.tls_key_file = value;
    } else if (name == "--link-secret-file") {
      secret_file = value;
    } else if (name == "--metrics-listen") {
      metrics_listen = value;
    } else if (name == "--handshake-timeout") {
      if (!ParseNumber(value, number) || number == 0) return usage_error("--handshake-timeout needs milliseconds");
      listen.handshake_timeout = std::chrono::milliseconds(number);
    } else {
      return usage_error(fmt::format("{}unknown option {}", args.where(), std::string(name)));
    }
  }
  if (!have_listen) return usage_error("--listen is required");
  if (options.origin.empty()) return usage_error("--origin is required");
  if (listen.tls_cert_file.empty() || listen.tls_key_file.empty()) {
    return usage_error("--tls-cert and --tls-key are required (links are always encrypted)");
  }
  if (secret_file.empty()) return usage_error("--link-secret-file is required");
  if (options.pool.min_idle > options.pool.max_size) return usage_error("--min-idle cannot exceed --pool-size");
  absl::StatusOr<std::string> secret = ReadSecretFile(kCommand, secret_file);
  if (!secret.ok()) return usage_error(std::string(secret.status().message()));
  listen.link_secret = *std::move(secret);
  listen.log = [kCommand](const std::string& line) { LogLine(kCommand, line); };
  options.logger = std::make_shared<const Logger>(std::move(log));
  return std::nullopt;
}

int RunEndpoint(int argc, char** argv) {
  constexpr std::string_view kCommand = "endpoint";
  EndpointOptions options;
  LinkListenerOptions listen;
  std::string metrics_listen;
  if (std::optional<int> done = ParseEndpointArgs(argc, argv, options, listen, metrics_listen)) return *done;

  asio::io_context signals_io(1);
  asio::signal_set signals(signals_io, SIGINT, SIGTERM);
  std::signal(SIGPIPE, SIG_IGN);

  const std::string redacted = client::RedactOrigin(options.origin);
  const size_t pool_size = options.pool.max_size;
  const char* mode = options.pool.mode == PoolMode::kTransaction ? "transaction" : "session";

  // The Endpoint runs on one executor (its sessions and pool share it), and
  // so do its links: one worker thread.
  asio::io_context io(1);
  auto guard = asio::make_work_guard(io);
  std::mutex done_mu;
  std::condition_variable done_cv;
  bool done = false;
  std::thread worker([&] {
    io.run();
    std::lock_guard lock(done_mu);
    done = true;
    done_cv.notify_all();
  });
  std::unique_ptr<Endpoint> endpoint;
  std::unique_ptr<LinkListener> listener;
  std::unique_ptr<ops::MetricsServer> metrics;
  auto shut_down = [&] {
    if (listener) listener->Stop();
    if (endpoint) endpoint->Stop();
    guard.reset();
    {
      std::unique_lock lock(done_mu);
      if (!done_cv.wait_for(lock, kDrainLimit, [&] { return done; })) io.stop();
    }
    worker.join();
    if (metrics) metrics->Stop();  // it reads the Endpoint's stats: stopped first
    listener.reset();
    endpoint.reset();
  };

  absl::StatusOr<std::unique_ptr<Endpoint>> created = Endpoint::Create(io.get_executor(), std::move(options));
  if (!created.ok()) {
    LogLine(kCommand, fmt::format("cannot start: {}", std::string(created.status().message())));
    shut_down();
    return 1;
  }
  endpoint = *std::move(created);
  const std::string listen_host = listen.host;
  absl::StatusOr<std::unique_ptr<LinkListener>> made = MakeLinkListener(io.get_executor(), *endpoint, std::move(listen));
  if (!made.ok()) {
    LogLine(kCommand, fmt::format("cannot start: {}", std::string(made.status().message())));
    shut_down();
    return 1;
  }
  listener = *std::move(made);
  Endpoint* running = endpoint.get();
  auto metrics_started = StartMetricsListener(
      metrics_listen,
      [running, pool_size] {
        ops::ProcessMetrics m;
        m.endpoint = running->Stats();
        m.pool_max = pool_size;
        return m;
      },
      [kCommand](const std::string& line) { LogLine(kCommand, line); },
      [running, links = listener.get(), listen_host] {
        ops::DashboardExtras x;
        x.role = "endpoint";
        const LinkListenerStats l = links->Stats();
        x.link.push_back(fmt::format("Client links on {} (TLS): {} accepted, {} rejected (secret), {} failed TLS, "
                                     "{} timed out",
                                     FormatHostPort(listen_host, links->port()), l.accepted, l.rejected,
                                     l.tls_failures, l.timeouts));
        x.cache_reports[""] = running->CacheReport(10);
        return x;
      });
  if (!metrics_started.ok()) {
    LogLine(kCommand, fmt::format("cannot start: {}", std::string(metrics_started.status().message())));
    shut_down();
    return 1;
  }
  metrics = *std::move(metrics_started);
  const std::string address = FormatHostPort(listen_host, listener->port());
  std::fputs((address + "\n").c_str(), stdout);
  std::fflush(stdout);
  LogLine(kCommand, fmt::format("ready; links on {} (TLS), origin {} (pool {} connections, {} mode)", address,
                                redacted, pool_size, mode));

  int received = WaitForSignal(signals_io, signals);
  LogLine(kCommand, fmt::format("received {}, draining", received == SIGINT ? "SIGINT" : "SIGTERM"));
  if (metrics) metrics->SetDraining(true);
  const EndpointStats stats = endpoint->Stats();
  const LinkListenerStats links = listener->Stats();
  const std::string cache_report = endpoint->CacheReport(10);
  shut_down();
  LogLine(kCommand, fmt::format("stopped after {} transactions; links: {} accepted, {} rejected (secret), "
                                "{} failed TLS, {} timed out",
                                stats.transactions, links.accepted, links.rejected, links.tls_failures,
                                links.timeouts));
  if (!cache_report.empty()) LogLine(kCommand, fmt::format("query cache:\n{}", cache_report));
  return 0;
}

int RunClient(int argc, char** argv) {
  constexpr std::string_view kCommand = "client";
  auto usage_error = [&](const std::string& message) { return UsageError(kCommand, kClientUsage, message); };
  RemoteConnectOptions options;
  LoggerOptions log;
  std::string secret_file;
  std::vector<std::pair<std::string, uint16_t>> endpoints;
  std::string metrics_listen;
  FailoverOptions failover;
  Args args(argc, argv, kCommand);
  if (args.error()) return usage_error(*args.error());
  while (args.Next()) {
    std::string_view name = args.name();
    if (name == "--help" || name == "-h") {
      std::fputs(kClientUsage, stdout);
      return 0;
    }
    if (name == "--no-cache") {
      options.client.cache.enabled = false;
      continue;
    }
    if (name == "--no-cache-watch") {
      options.client.cache_watch = false;
      continue;
    }
    if (IsBareLogFlag(name)) {
      (void)ApplyLogOption(name, "", log);
      continue;
    }
    std::string value;
    if (!args.Value(value)) return usage_error(fmt::format("option {} needs a value", std::string(name)));
    uint64_t number = 0;
    const bool numeric = ParseNumber(value, number);
    if (auto linked = ApplyLinkOption(name, value, endpoints, options.endpoint, secret_file, failover.region)) {
      if (!linked->empty()) return usage_error(*linked);
    } else if (name == "--cache-watch-heartbeat") {
      std::optional<std::chrono::milliseconds> d = ParseDuration(value);
      if (!d || d->count() <= 0) return usage_error("--cache-watch-heartbeat needs seconds (or Nms)");
      options.client.cache_watch_heartbeat = *d;
    } else if (name == "--metrics-listen") {
      metrics_listen = value;
    } else if (name == "--probe-interval") {
      std::optional<std::chrono::milliseconds> d = ParseDuration(value);
      if (!d || d->count() <= 0) return usage_error("--probe-interval needs seconds (or Nms)");
      failover.probe_interval = *d;
    } else if (name == "--settle-probes") {
      if (!numeric || number == 0 || number > 1000) return usage_error("--settle-probes needs a number (1 to 1000)");
      failover.settle_probes = static_cast<int>(number);
    } else if (name == "--preopen") {
      if (!numeric || number > 1000) return usage_error("--preopen needs a number (at most 1000)");
      options.endpoint.preopen = number;
    } else if (name == "--preopen-max-idle") {
      if (!numeric || number == 0) return usage_error("--preopen-max-idle needs seconds");
      options.endpoint.preopen_max_idle = std::chrono::seconds(number);
    } else if (auto applied = ApplyClientOption(name, value, options.client, options.threads)) {
      if (!applied->empty()) return usage_error(*applied);
    } else if (auto log_applied = ApplyLogOption(name, value, log)) {
      if (!log_applied->empty()) return usage_error(*log_applied);
    } else {
      return usage_error(fmt::format("{}unknown option {}", args.where(), std::string(name)));
    }
  }
  if (endpoints.empty()) return usage_error("--endpoint is required");
  if (options.endpoint.tls_ca_file.empty()) {
    return usage_error("--tls-ca is required (the Endpoint's certificate is always verified)");
  }
  if (secret_file.empty()) return usage_error("--link-secret-file is required");
  absl::StatusOr<std::string> secret = ReadSecretFile(kCommand, secret_file);
  if (!secret.ok()) return usage_error(std::string(secret.status().message()));
  options.endpoint.link_secret = *std::move(secret);
  options.endpoint.host = endpoints[0].first;
  options.endpoint.port = endpoints[0].second;
  options.endpoint.log = [kCommand](const std::string& line) { LogLine(kCommand, line); };
  options.client.logger = std::make_shared<const Logger>(std::move(log));
  std::string where = FormatHostPort(options.endpoint.host, options.endpoint.port);
  auto placement_events = std::make_shared<RecentLines>(6);  // for the dashboard
  if (endpoints.size() > 1) {
    // The first sessions should already go to the measured choice: wait for
    // the first probe round (each probe is bounded by the connect timeout).
    failover.first_round_wait = 2 * options.endpoint.connect_timeout + std::chrono::seconds(1);
    failover.log = [log = options.endpoint.log, placement_events](const std::string& line) {
      placement_events->Add(line);
      log(line);
    };
    failover.endpoints = endpoints;
    where = fmt::format("{} endpoints, probed every {} ms", endpoints.size(), failover.probe_interval.count());
    options.failover = std::move(failover);
  }
  const size_t preopen = options.endpoint.preopen;

  asio::io_context signals_io(1);
  asio::signal_set signals(signals_io, SIGINT, SIGTERM);
  std::signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::unique_ptr<Connection>> connection = connect_remote(std::move(options));
  if (!connection.ok()) {
    LogLine(kCommand, fmt::format("cannot start: {}", std::string(connection.status().message())));
    return 1;
  }
  Connection& running = **connection;
  absl::StatusOr<std::unique_ptr<ops::MetricsServer>> metrics = StartMetricsListener(
      metrics_listen,
      [&running] {
        ops::ProcessMetrics m;
        m.client = running.client_stats();
        return m;
      },
      [kCommand](const std::string& line) { LogLine(kCommand, line); },
      [&running, where, preopen, placement_events] {
        ops::DashboardExtras x;
        x.role = "client";
        x.link.push_back(fmt::format("Endpoint: {} (TLS; {} links opened ahead)", where, preopen));
        x.link.push_back(running.client_stats().cache_watch_subscribed ? "invalidation watch subscribed"
                                                                       : "invalidation watch not subscribed");
        for (const std::string& line : placement_events->Lines()) x.link.push_back("placement: " + line);
        if (Client* c = running.client()) {
          for (const ClientSessionInfo& session : c->Sessions()) ++x.client_states[session.state];
        }
        return x;
      });
  if (!metrics.ok()) {
    LogLine(kCommand, fmt::format("cannot start: {}", std::string(metrics.status().message())));
    return 1;
  }
  std::fputs(((*connection)->connection_string() + "\n").c_str(), stdout);
  std::fflush(stdout);
  LogLine(kCommand, fmt::format("ready; endpoint {} (TLS, {} links opened ahead)", where, preopen));

  int received = WaitForSignal(signals_io, signals);
  LogLine(kCommand, fmt::format("received {}, draining", received == SIGINT ? "SIGINT" : "SIGTERM"));
  if (*metrics) (*metrics)->SetDraining(true);
  std::string cache_report = (*connection)->cache_report();
  (*connection)->Close();
  if (*metrics) (*metrics)->Stop();  // it reads the connection's stats
  LogLine(kCommand, "stopped");
  if (!cache_report.empty()) LogLine(kCommand, fmt::format("query cache:\n{}", cache_report));
  return 0;
}

int RunPlace(int argc, char** argv) {
  constexpr std::string_view kCommand = "place";
  auto usage_error = [&](const std::string& message) { return UsageError(kCommand, kPlaceUsage, message); };
  SocketTransportOptions base;
  std::vector<std::pair<std::string, uint16_t>> endpoints;
  std::string secret_file;
  std::string region;
  Args args(argc, argv);
  while (args.Next()) {
    std::string_view name = args.name();
    if (name == "--help" || name == "-h") {
      std::fputs(kPlaceUsage, stdout);
      return 0;
    }
    std::string value;
    if (!args.Value(value)) return usage_error(fmt::format("option {} needs a value", std::string(name)));
    std::optional<std::string> linked = ApplyLinkOption(name, value, endpoints, base, secret_file, region);
    if (!linked) return usage_error(fmt::format("unknown option {}", std::string(name)));
    if (!linked->empty()) return usage_error(*linked);
  }
  if (endpoints.empty()) return usage_error("--endpoint is required");
  if (base.tls_ca_file.empty()) return usage_error("--tls-ca is required (the Endpoint's certificate is always verified)");
  if (secret_file.empty()) return usage_error("--link-secret-file is required");
  absl::StatusOr<std::string> secret = ReadSecretFile(kCommand, secret_file);
  if (!secret.ok()) return usage_error(std::string(secret.status().message()));
  base.link_secret = *std::move(secret);
  std::signal(SIGPIPE, SIG_IGN);

  const std::vector<EndpointMeasurement> measured = MeasureAll(endpoints, base);
  std::vector<std::string> addresses;
  for (const auto& m : measured) addresses.push_back(m.endpoint.address);
  placement::EndpointRanking ranking(addresses, region);
  for (std::size_t i = 0; i < measured.size(); ++i) {
    ranking.RecordProbe(i, measured[i].status, measured[i].client_rtt, measured[i].origin_rtt);
  }
  ranking.EndRound();
  std::string out = fmt::format("{:<5} {:<28} {:>14} {:>14} {:>10}  {}\n", "rank", "endpoint", "client_rtt_ms",
                                "origin_rtt_ms", "cost_ms", "status");
  std::size_t rank = 0;
  std::size_t usable = 0;
  for (std::size_t i : ranking.Order()) {
    const EndpointMeasurement& m = measured[i];
    if (m.status.ok()) {
      ++usable;
      out += fmt::format("{:<5} {:<28} {:>14.2f} {:>14.2f} {:>10.2f}  ok\n", ++rank, m.endpoint.address,
                         m.client_rtt.count() / 1000.0, m.origin_rtt.count() / 1000.0, ranking.cost(i) / 1000.0);
    } else {
      out += fmt::format("{:<5} {:<28} {:>14} {:>14} {:>10}  not usable: {}\n", "-", m.endpoint.address, "-", "-", "-",
                         std::string(m.status.message()));
    }
  }
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  if (usable == 0) {
    LogLine(kCommand, "no Endpoint can reach the origin");
    return 1;
  }
  return 0;
}

}  // namespace hyperpool::cli
