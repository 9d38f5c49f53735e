// `hyperpool demo`: the seed's benchmark (Hyperdrive write-up: origin in
// London, Worker in Chicago, ~125 ms RTT; direct 1200 ms, via Hyperdrive
// 500 ms, with cache 320 ms) on one machine, in the seed's topology. A
// simulated WAN (a WanProxy delay line) is the distance between the app and
// the database; a fresh short-lived client connects, runs a handful of OLTP
// statements and disconnects, N times, three ways:
//
//   direct  app ──WAN──▶ origin
//   pooled  app ──▶ hyperpool Client ──WAN (TLS link)──▶ Endpoint ──▶ origin   (cache off)
//   cached  the same with the query cache on
//
// each in two protocols: the extended protocol as postgres.js (the seed's
// driver) speaks it, and the simple protocol (demo_workload.h); and compares
// each with its physical limit: the round trips that must cross the WAN times
// the RTT.

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "cli/commands.h"
#include "cli/demo_cleanup.h"
#include "cli/demo_pg_client.h"
#include "cli/demo_postgres.h"
#include "cli/demo_report.h"
#include "cli/demo_split.h"
#include "cli/demo_workload.h"
#include "endpoint/origin_config.h"
#include "protocol/auth/auth_util.h"
#include "wan/wan_proxy.h"

namespace hyperpool::cli {

const char* const kDemoUsage = R"(usage: hyperpool demo [--rtt MS] [--origin URL] [--iterations N] [--out DIR] [--no-chart]
       hyperpool demo --report-from DIR [--out DIR]

Runs the Hyperdrive write-up's benchmark on this machine in its topology: a
simulated WAN of RTT MS milliseconds between the app and PostgreSQL, and a
fresh short-lived client that connects, runs a typical handful of OLTP
statements and disconnects, N times each way: direct (app --WAN--> database),
through hyperpool with the cache off (pooled: app -> Client --WAN--> Endpoint
-> database, the halves joined by a TLS link as `hyperpool client` and
`hyperpool endpoint` are) and with the cache on (cached). Each way runs twice:
with the extended protocol as postgres.js speaks it (named statements, a
Describe round trip before each first Bind, a type lookup at connect) and
with the simple protocol. Prints mean and median milliseconds per connection,
the same in round trips (ms / RTT), next to the physical limit (unavoidable
round trips x RTT) and writes demo.csv, demo_iterations.csv and report.html
(the chart and the tables; open it in a browser) into DIR.

Without --origin it starts a scratch PostgreSQL 15 (initdb in a temp
directory, a free port, SCRAM logins; as root the tools run as the postgres
user) and removes it at exit, also on Ctrl-C.

Options:
  --rtt MS          simulated round-trip time (default 125, as in the write-up)
  --origin URL      use this database instead (postgresql://user:pass@host:port/db,
                    plaintext: the demo's direct client speaks no TLS); the demo
                    creates its tables in a schema hyperpool_demo_<random> and drops it
  --iterations N    measured connections per mode (default 10; one more warm-up
                    connection per mode is run first and not counted)
  --out DIR         where to write the CSV files and report.html (default ./demo-results)
  --no-chart        do not write report.html
  --report-from DIR run nothing: read DIR/demo.csv and DIR/demo_iterations.csv of an
                    earlier run and write report.html into --out (default: DIR)
  --help            print this help
)";

namespace {

using demo::IterationResult;
using demo::ModeResult;
using demo::PgClient;
using demo::PgLogin;
using demo::PgResult;
using demo::Protocol;
using demo::ProtocolName;

// Set by the signal watcher: from then on only its own lines are printed (the
// main thread's errors would be about the cluster being removed under it).
std::atomic<bool> interrupted{false};
std::atomic<std::thread::id> watcher_thread{};

void Log(const std::string& line) {
  if (interrupted.load() && std::this_thread::get_id() != watcher_thread.load()) return;
  std::string text = "hyperpool demo: " + line + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

int UsageError(const std::string& message) {
  std::fprintf(stderr, "hyperpool demo: %s\n\n%s", message.c_str(), kDemoUsage);
  return 2;
}

std::string HexRandom(size_t bytes) {
  absl::StatusOr<std::string> random = auth::RandomBytes(bytes);
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    unsigned c = random.ok() ? static_cast<unsigned char>((*random)[i]) : static_cast<unsigned>(std::rand() & 0xff);
    out += fmt::format("{:02x}", c);
  }
  return out;
}

// Sets up the scratch cluster's demo role and database; returns the login.
absl::StatusOr<PgLogin> PrepareScratch(const demo::ScratchPostgres& pg) {
  PgLogin admin;
  admin.port = pg.port();
  admin.user = pg.admin_user();
  admin.password = pg.admin_password();
  admin.database = "postgres";
  PgLogin demo_login = admin;
  demo_login.user = "hyperpool_demo";
  demo_login.password = HexRandom(16);
  demo_login.database = "hyperpool_demo";
  absl::StatusOr<std::unique_ptr<PgClient>> c = PgClient::Connect(admin);
  if (!c.ok()) return c.status();
  for (const std::string& sql : {
           fmt::format("CREATE ROLE {} LOGIN PASSWORD '{}'", demo_login.user, demo_login.password),
           fmt::format("CREATE DATABASE {} OWNER {}", demo_login.database, demo_login.user),
       }) {
    absl::StatusOr<PgResult> r = (*c)->Query(sql);
    if (!r.ok()) return r.status();
  }
  return demo_login;
}

// Runs `iterations` measured connections (after one warm-up connection that is
// not counted) into `mode`. `before_measured` runs between the two.
absl::Status RunConnections(ModeResult& mode, Protocol protocol, const PgLogin& login, const demo::Workload& workload,
                            int iterations, int& connection_index, IterationResult* warm_up,
                            const std::function<void()>& before_measured = {}) {
  const std::string label = fmt::format("{} {}", ProtocolName(protocol), mode.name);
  Log(fmt::format("{}: warm-up connection (not counted), then {} measured", label, iterations));
  for (int i = 0; i <= iterations; ++i) {
    absl::StatusOr<IterationResult> r = demo::RunConnection(login, workload, protocol, connection_index++);
    if (!r.ok()) {
      return absl::Status(r.status().code(), fmt::format("{}, {}: {}", label,
                                                         i == 0 ? std::string("warm-up") : fmt::format("connection {}", i),
                                                         std::string(r.status().message())));
    }
    if (i == 0) {
      if (warm_up != nullptr) *warm_up = *r;
      if (before_measured) before_measured();
      continue;
    }
    mode.samples.push_back(r->ms);
    mode.client_round_trips = r->round_trips;
  }
  Log(fmt::format("{}: mean {:.1f} ms, median {:.1f} ms", label, mode.mean(), mode.median()));
  return absl::OkStatus();
}

// Both protocols through a fresh split pooler (demo_split.h) with the cache
// off (mode index 1) or on (2).
absl::Status RunSplit(demo::Report& rep, size_t mode_index, bool cache, const PgLogin& origin,
                      const demo::Workload& workload, int& connection_index, const std::string& work_dir) {
  demo::SplitOptions options;
  options.origin = origin;
  options.rtt = std::chrono::microseconds(std::llround(rep.rtt_ms * 1000));
  options.cache = cache;
  options.work_dir = work_dir;
  absl::StatusOr<std::unique_ptr<demo::SplitPooler>> pooler = demo::SplitPooler::Start(options);
  if (!pooler.ok()) {
    return absl::Status(pooler.status().code(), fmt::format("cannot start hyperpool (Client + WAN + Endpoint): {}",
                                                            std::string(pooler.status().message())));
  }
  for (demo::ProtocolRun& run : rep.runs) {
    ModeResult& mode = run.modes[mode_index];
    // The Endpoint's count covers the measured connections only; the warm-up
    // opens the pool's first origin connection (and, cached, fills the cache).
    size_t before = 0;
    absl::Status status = RunConnections(mode, run.protocol, (*pooler)->login(), workload, rep.iterations,
                                         connection_index, nullptr,
                                         [&] { before = (*pooler)->endpoint_stats().transactions; });
    if (!status.ok()) return status;
    mode.origin_transactions = (*pooler)->endpoint_stats().transactions - before;
  }
  (*pooler)->Stop();
  return absl::OkStatus();
}

// The round trips that must cross the WAN in each mode.
void SetLimits(demo::Report& rep, const demo::Workload& workload) {
  for (demo::ProtocolRun& run : rep.runs) {
    const bool extended = run.protocol == Protocol::kExtended;
    const int lookups = extended ? 1 : 0;
    ModeResult& direct = run.modes[0];
    direct.limit_round_trips = 1 + rep.login_round_trips + run.statement_round_trips;
    direct.limit_formula = fmt::format("(1 TCP + {} login + {}{} stmt trips) x RTT", rep.login_round_trips,
                                       extended ? "1 types + " : "", run.statement_round_trips - lookups);
    // Beside the app, a Client can answer the driver's metadata round trips
    // (ParseComplete, ParameterDescription, RowDescription) itself: one WAN
    // crossing per statement, as in the seed.
    ModeResult& pooled = run.modes[1];
    pooled.limit_round_trips = lookups + rep.statements;
    pooled.limit_formula = fmt::format("({}{} stmts) x RTT", extended ? "1 types + " : "", rep.statements);
    ModeResult& cached = run.modes[2];
    cached.limit_round_trips = workload.Uncacheable();
    cached.limit_formula = fmt::format("{} uncacheable stmt x RTT", workload.Uncacheable());
  }
}

// Blocks the termination signals in every thread (call before any thread
// starts) and runs `cleanup` from a watcher thread when one arrives.
class SignalWatcher {
 public:
  explicit SignalWatcher(demo::CleanupList& cleanup) {
    sigemptyset(&set_);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaddset(&set_, s);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    thread_ = std::thread([this, &cleanup] {
      for (;;) {
        int signo = 0;
        if (sigwait(&set_, &signo) != 0) continue;
        if (signo == SIGUSR1) return;  // our own "stop watching"
        watcher_thread.store(std::this_thread::get_id());
        interrupted.store(true);
        Log(fmt::format("received {}, cleaning up", strsignal(signo)));
        cleanup.RunAll();
        _exit(128 + signo);
      }
    });
  }
  ~SignalWatcher() {
    pthread_kill(thread_.native_handle(), SIGUSR1);
    thread_.join();
  }

 private:
  sigset_t set_;
  std::thread thread_;
};

struct DemoArgs {
  double rtt_ms = 125;
  int iterations = 10;
  std::string origin;
  std::string out_dir = "demo-results";
  bool chart = true;
  std::string report_from;  // --report-from: only re-render report.html
  bool out_given = false;
};

// The command line; an exit code when the demo must stop at once (help, or
// a usage error).
std::optional<int> ParseDemoArgs(int argc, char** argv, DemoArgs& a) {
  for (int i = 2; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kDemoUsage, stdout);
      return 0;
    }
    if (arg == "--no-chart") {
      a.chart = false;
      continue;
    }
    std::string name(arg), value;
    if (size_t eq = arg.find('='); arg.substr(0, 2) == "--" && eq != std::string_view::npos) {
      name = std::string(arg.substr(0, eq));
      value = std::string(arg.substr(eq + 1));
    } else if (name == "--rtt" || name == "--origin" || name == "--iterations" || name == "--out" ||
               name == "--report-from") {
      if (i + 1 >= argc) return UsageError(fmt::format("option {} needs a value", name));
      value = argv[++i];
    }
    if (name == "--rtt") {
      if (!absl::SimpleAtod(value, &a.rtt_ms) || !(a.rtt_ms >= 0) || a.rtt_ms > 10000) {
        return UsageError("--rtt needs milliseconds between 0 and 10000");
      }
    } else if (name == "--iterations") {
      if (!absl::SimpleAtoi(value, &a.iterations) || a.iterations < 1 || a.iterations > 10000) {
        return UsageError("--iterations needs a number from 1 to 10000");
      }
    } else if (name == "--origin") {
      a.origin = value;
    } else if (name == "--out") {
      if (value.empty()) return UsageError("--out needs a directory");
      a.out_dir = value;
      a.out_given = true;
    } else if (name == "--report-from") {
      if (value.empty()) return UsageError("--report-from needs a directory");
      a.report_from = value;
    } else {
      return UsageError(fmt::format("unknown option {}", name));
    }
  }
  return std::nullopt;
}

// 1. The database: a scratch PostgreSQL 15 (removed at exit), or --origin.
// An exit code when it cannot be had.
std::optional<int> PrepareDatabase(const DemoArgs& a, demo::CleanupList& cleanup, PgLogin& target,
                                   std::string& label) {
  if (a.origin.empty()) {
    Log("starting a scratch PostgreSQL 15 (removed at exit)");
    absl::StatusOr<std::shared_ptr<demo::ScratchPostgres>> pg = demo::ScratchPostgres::Start(cleanup, Log);
    if (!pg.ok()) {
      Log(fmt::format("cannot start the scratch PostgreSQL: {}", std::string(pg.status().message())));
      return 1;
    }
    Log(fmt::format("scratch PostgreSQL 15 on 127.0.0.1:{} (data {})", (*pg)->port(), (*pg)->data_dir()));
    absl::StatusOr<PgLogin> login = PrepareScratch(**pg);
    if (!login.ok()) {
      Log(fmt::format("cannot prepare the scratch PostgreSQL: {}", std::string(login.status().message())));
      return 1;
    }
    target = *login;
    label = fmt::format("scratch PostgreSQL 15 on 127.0.0.1:{}", target.port);
    return std::nullopt;
  }
  absl::StatusOr<OriginConfig> config = ParseOriginConfig(a.origin);
  if (!config.ok()) return UsageError(fmt::format("bad --origin: {}", std::string(config.status().message())));
  if (config->is_unix_socket()) return UsageError("--origin must be a TCP address (the WAN simulator relays TCP)");
  if (config->sslmode > SslMode::kPrefer) {
    return UsageError(fmt::format(
        "--origin has sslmode={}: the demo's direct client speaks no TLS, so every mode runs in plaintext; "
        "use an origin that accepts sslmode=disable",
        std::string(SslModeName(config->sslmode))));
  }
  target.host = config->host;
  target.port = config->port;
  target.user = config->user;
  target.password = config->password;
  target.database = config->dbname.empty() ? config->user : config->dbname;
  label = RedactedOriginString(*config);
  return std::nullopt;
}

// Loads the workload's tables (dropped again at exit, also on Ctrl-C).
absl::Status LoadWorkload(const PgLogin& target, demo::Workload& workload, demo::CleanupList& cleanup) {
  Log(fmt::format("loading {} accounts and {} branches into schema {}", demo::kAccounts, demo::kBranches,
                  workload.schema()));
  auto on_schema_created = [&] {
    PgLogin drop_login = target;
    drop_login.timeout = std::chrono::milliseconds(10000);
    std::string schema = workload.schema();
    cleanup.Add([drop_login, schema] {
      absl::StatusOr<std::unique_ptr<PgClient>> c = PgClient::Connect(drop_login);
      absl::Status status = c.status();
      if (c.ok()) status = (*c)->Query(fmt::format("DROP SCHEMA IF EXISTS {} CASCADE", schema)).status();
      if (!status.ok()) {
        Log(fmt::format("could not drop schema {}: {}", schema, std::string(status.message())));
      } else {
        Log(fmt::format("dropped schema {}", schema));
      }
    });
  };
  absl::StatusOr<std::unique_ptr<PgClient>> c = PgClient::Connect(target);
  return c.ok() ? workload.LoadTables(**c, on_schema_created) : c.status();
}

// Every write went through exactly once: the branch balances add up.
bool WritesAddUp(const PgLogin& target, const demo::Workload& workload, int connections) {
  absl::StatusOr<std::unique_ptr<PgClient>> c = PgClient::Connect(target);
  absl::StatusOr<PgResult> sum = c.ok() ? (*c)->Query(fmt::format("SELECT sum(balance) FROM {}.branches", workload.schema()))
                                        : absl::StatusOr<PgResult>(c.status());
  const std::string expected = std::to_string(connections);
  if (!sum.ok() || sum->rows.size() != 1 || sum->rows[0][0] != expected) {
    Log(fmt::format("FAILED: the {} write transactions did not all commit exactly once (sum of branch balances: {})",
                    connections, sum.ok() && !sum->rows.empty() && sum->rows[0][0] ? *sum->rows[0][0] : std::string("?")));
    return false;
  }
  Log(fmt::format("checked: all {} write transactions committed exactly once; every read returned the right rows",
                  connections));
  return true;
}

// The tables on stdout, the CSV files and the chart in --out.
int WriteResults(demo::Report& rep, const demo::Workload& workload, const DemoArgs& a) {
  SetLimits(rep, workload);
  std::string tables = demo::RenderTables(rep);
  std::fputs(tables.c_str(), stdout);
  std::fflush(stdout);
  std::filesystem::path dir(a.out_dir);
  if (absl::Status wrote = demo::WriteCsv(rep, a.out_dir); !wrote.ok()) {
    Log(std::string(wrote.message()));
    return 1;
  }
  std::string written = (dir / "demo.csv").string() + ", " + (dir / "demo_iterations.csv").string();
  if (a.chart) {
    if (absl::Status drawn = demo::WriteHtmlReport(rep, a.out_dir); !drawn.ok()) {
      Log(std::string(drawn.message()));
      return 1;
    }
    written += ", " + (dir / "report.html").string();
  }
  Log("wrote " + written);
  return 0;
}

// --report-from: report.html from an earlier run's CSV files.
int RenderReportFrom(const DemoArgs& a) {
  absl::StatusOr<demo::Report> rep = demo::ReadResults(a.report_from);
  const std::string out = a.out_given ? a.out_dir : a.report_from;
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  absl::Status wrote = !rep.ok() ? rep.status()
                       : ec      ? absl::InternalError(fmt::format("cannot create {}: {}", out, ec.message()))
                                 : demo::WriteHtmlReport(*rep, out);
  if (!wrote.ok()) {
    Log(std::string(wrote.message()));
    return 1;
  }
  Log("wrote " + (std::filesystem::path(out) / "report.html").string());
  return 0;
}

}  // namespace

int Demo(int argc, char** argv) {
  DemoArgs a;
  if (std::optional<int> done = ParseDemoArgs(argc, argv, a)) return *done;
  if (!a.report_from.empty()) return RenderReportFrom(a);

  std::signal(SIGPIPE, SIG_IGN);
  demo::CleanupList cleanup;
  SignalWatcher watcher(cleanup);  // before any other thread exists
  struct RunCleanupAtExit {
    demo::CleanupList& list;
    ~RunCleanupAtExit() { list.RunAll(); }
  } run_cleanup_at_exit{cleanup};

  std::error_code ec;
  std::filesystem::create_directories(a.out_dir, ec);
  if (ec) {
    Log(fmt::format("cannot create {}: {}", a.out_dir, ec.message()));
    return 1;
  }

  // 1. The database.
  PgLogin target;
  std::string database_label;
  if (std::optional<int> failed = PrepareDatabase(a, cleanup, target, database_label)) return *failed;
  demo::Workload workload("hyperpool_demo_" + HexRandom(4));
  if (absl::Status loaded = LoadWorkload(target, workload, cleanup); !loaded.ok()) {
    Log(fmt::format("cannot load the tables: {}", std::string(loaded.message())));
    return 1;
  }

  // 2. The WAN in front of the database, for the direct mode.
  wan::WanOptions wan_options;
  wan_options.target_host = target.host;
  wan_options.target_port = target.port;
  wan_options.rtt = std::chrono::microseconds(std::llround(a.rtt_ms * 1000));
  absl::StatusOr<std::unique_ptr<wan::WanProxy>> proxy = wan::WanProxy::StartThread(wan_options);
  if (!proxy.ok()) {
    Log(fmt::format("cannot start the WAN simulator: {}", std::string(proxy.status().message())));
    return 1;
  }
  Log(fmt::format("WAN simulator on {} -> {}:{}, RTT {:g} ms (direct mode; pooled modes get one in front of their "
                  "Endpoint)",
                  (*proxy)->listen_address(), target.host, target.port, a.rtt_ms));
  PgLogin via_wan = target;
  via_wan.host = "127.0.0.1";
  via_wan.port = (*proxy)->port();
  // The link certificate of the pooled modes lives here until exit.
  std::filesystem::path link_dir = std::filesystem::temp_directory_path() / ("hyperpool-demo-" + HexRandom(6));
  std::filesystem::create_directories(link_dir, ec);
  if (ec) {
    Log(fmt::format("cannot create {}: {}", link_dir.string(), ec.message()));
    return 1;
  }
  cleanup.Add([link_dir] {
    std::error_code ignored;
    std::filesystem::remove_all(link_dir, ignored);
  });

  // 3. The three modes in both protocols.
  demo::Report rep;
  rep.rtt_ms = a.rtt_ms;
  rep.iterations = a.iterations;
  rep.statements = workload.Statements();
  rep.database = database_label;
  for (Protocol protocol : {Protocol::kExtended, Protocol::kSimple}) {
    rep.runs.push_back({protocol, workload.ClientRoundTrips(protocol),
                        {ModeResult{"direct"}, ModeResult{"pooled"}, ModeResult{"cached"}}});
  }
  int connection_index = 0;
  absl::Status status = absl::OkStatus();
  for (demo::ProtocolRun& run : rep.runs) {
    IterationResult first;
    status = RunConnections(run.modes[0], run.protocol, via_wan, workload, a.iterations, connection_index, &first);
    if (!status.ok()) break;
    rep.login_round_trips = first.login_round_trips;
    rep.auth_method = first.auth_method;
  }
  (*proxy)->Stop();
  if (status.ok()) status = RunSplit(rep, 1, /*cache=*/false, target, workload, connection_index, link_dir.string());
  if (status.ok()) status = RunSplit(rep, 2, /*cache=*/true, target, workload, connection_index, link_dir.string());
  if (!status.ok()) {
    Log(fmt::format("FAILED: {}", std::string(status.message())));
    return 1;
  }
  if (!WritesAddUp(target, workload, connection_index)) return 1;
  return WriteResults(rep, workload, a);
}

}  // namespace hyperpool::cli
