// `hyperpool demo`: the seed's benchmark (Hyperdrive write-up: origin in
// London, Worker in Chicago, ~125 ms RTT; direct 1200 ms, via Hyperdrive
// 500 ms, with cache 320 ms) on one machine. A simulated WAN (a WanProxy delay
// line) sits in front of the database; a fresh short-lived client connects,
// runs a handful of OLTP statements and disconnects, N times, three ways:
//
//   direct  client ──WAN──▶ origin
//   pooled  client ──▶ hyperpool Client ──▶ in-process Endpoint ──WAN──▶ origin   (cache off)
//   cached  the same with the query cache on
//
// and compares each with its physical limit: the round trips that must cross
// the WAN times the RTT.

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
#include "cli/demo_png.h"
#include "cli/demo_postgres.h"
#include "endpoint/origin_config.h"
#include "hyperpool/hyperpool.h"
#include "protocol/auth/auth_util.h"
#include "wan/wan_proxy.h"

namespace hyperpool::cli {

const char* const kDemoUsage = R"(usage: hyperpool demo [--rtt MS] [--origin URL] [--iterations N] [--out DIR] [--no-chart]

Runs the Hyperdrive write-up's benchmark on this machine: a simulated WAN of
RTT MS milliseconds in front of PostgreSQL, and a fresh short-lived client
that connects, runs a typical handful of OLTP statements and disconnects, N
times each way: direct, through hyperpool with the cache off (pooled), and
with the cache on (cached). Prints mean and median milliseconds per connection
next to the physical limit (unavoidable round trips x RTT) and writes
demo.csv, demo_iterations.csv and demo.png into DIR.

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
  --out DIR         where to write the CSV files and the chart (default ./demo-results)
  --no-chart        do not write demo.png
  --help            print this help
)";

namespace {

using Clock = std::chrono::steady_clock;
using demo::PgClient;
using demo::PgLogin;
using demo::PgResult;

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

// A value for a libpq key=value string.
std::string QuoteConnValue(std::string_view value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\'' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "'";
}

// The port of "postgresql://user:pass@host:port/db?...".
std::optional<uint16_t> PortOfUrl(const std::string& url) {
  size_t at = url.rfind('@');
  size_t slash = url.find('/', at == std::string::npos ? 0 : at);
  if (at == std::string::npos || slash == std::string::npos) return std::nullopt;
  std::string hostport = url.substr(at + 1, slash - at - 1);
  size_t colon = hostport.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(hostport.substr(colon + 1), &port) || port == 0 || port > 65535) {
    return std::nullopt;
  }
  return static_cast<uint16_t>(port);
}

// ---------------------------------------------------------------------------
// The workload: what one short-lived client does.
// ---------------------------------------------------------------------------

// Hot accounts every connection reads by primary key (literal ids, so the
// statements are identical across connections and cacheable).
constexpr int kHotIds[] = {42, 1337, 4242};
constexpr int kAccounts = 10000;
constexpr int kBranches = 10;
constexpr int kRangeFirst = 100, kRangeRows = 20;

struct Statement {
  std::string sql;
  bool cacheable;  // a read-only statement outside a transaction
  // Checks the result; returns an empty string when it is right.
  std::function<std::string(const PgResult&)> check;
};

struct Workload {
  std::string schema;
  // The statements of the connection with index `i` (the write varies with i).
  std::vector<Statement> For(int i) const {
    std::vector<Statement> out;
    for (int id : kHotIds) {
      out.push_back({fmt::format("SELECT id, balance, name FROM {}.accounts WHERE id = {}", schema, id), true,
                     [id](const PgResult& r) -> std::string {
                       if (r.rows.size() != 1 || r.rows[0].size() != 3 || r.rows[0][0] != std::to_string(id)) {
                         return fmt::format("expected account {} (1 row), got {} rows", id, r.rows.size());
                       }
                       return "";
                     }});
    }
    out.push_back({fmt::format("SELECT id, balance FROM {}.accounts WHERE id BETWEEN {} AND {} ORDER BY id", schema,
                               kRangeFirst, kRangeFirst + kRangeRows - 1),
                   true, [](const PgResult& r) -> std::string {
                     if (r.rows.size() != kRangeRows || r.rows.front()[0] != std::to_string(kRangeFirst)) {
                       return fmt::format("expected {} rows from id {}, got {}", kRangeRows, kRangeFirst, r.rows.size());
                     }
                     return "";
                   }});
    // The write: one transaction sent as ONE simple-query string (one round
    // trip). It updates the branches table, as TPC-B does, so that the cached
    // reads of accounts stay valid under hyperpool's per-table invalidation.
    out.push_back({fmt::format("BEGIN; UPDATE {}.branches SET balance = balance + 1 WHERE id = {}; COMMIT", schema,
                               i % kBranches + 1),
                   false, [](const PgResult& r) -> std::string {
                     if (r.command_tags != std::vector<std::string>{"BEGIN", "UPDATE 1", "COMMIT"}) {
                       std::string tags;
                       for (const std::string& t : r.command_tags) tags += (tags.empty() ? "" : ", ") + t;
                       return fmt::format("expected tags BEGIN, UPDATE 1, COMMIT; got [{}]", tags);
                     }
                     return "";
                   }});
    return out;
  }
  int Queries() const { return static_cast<int>(For(0).size()); }
  int Uncacheable() const {
    int n = 0;
    for (const Statement& s : For(0)) n += s.cacheable ? 0 : 1;
    return n;
  }
};

struct IterationResult {
  double ms = 0;
  int login_round_trips = 0;
  std::string auth_method;
};

// One short-lived client: connect, the workload, disconnect. Timed from
// before connect() to after close().
absl::StatusOr<IterationResult> RunConnection(const PgLogin& login, const Workload& workload, int index) {
  std::vector<Statement> statements = workload.For(index);
  Clock::time_point start = Clock::now();
  absl::StatusOr<std::unique_ptr<PgClient>> client = PgClient::Connect(login);
  if (!client.ok()) {
    return absl::Status(client.status().code(), fmt::format("login: {}", std::string(client.status().message())));
  }
  for (const Statement& s : statements) {
    absl::StatusOr<PgResult> result = (*client)->Query(s.sql);
    if (!result.ok()) {
      return absl::Status(result.status().code(),
                          fmt::format("{} -> {}", s.sql, std::string(result.status().message())));
    }
    std::string wrong = s.check(*result);
    if (!wrong.empty()) return absl::DataLossError(fmt::format("{} -> wrong result: {}", s.sql, wrong));
  }
  IterationResult out;
  out.login_round_trips = (*client)->login_round_trips();
  out.auth_method = (*client)->auth_method();
  (*client)->Close();
  out.ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return out;
}

// ---------------------------------------------------------------------------
// Modes and results.
// ---------------------------------------------------------------------------

struct ModeResult {
  std::string name;
  std::vector<double> samples;  // ms per measured connection
  int limit_round_trips = 0;
  std::string limit_formula;
  std::optional<size_t> origin_transactions;  // at the Endpoint, measured connections only
  double mean() const { return samples.empty() ? 0 : std::accumulate(samples.begin(), samples.end(), 0.0) / samples.size(); }
  double median() const {
    if (samples.empty()) return 0;
    std::vector<double> s = samples;
    std::sort(s.begin(), s.end());
    size_t n = s.size();
    return n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  }
  double min() const { return samples.empty() ? 0 : *std::min_element(samples.begin(), samples.end()); }
  double max() const { return samples.empty() ? 0 : *std::max_element(samples.begin(), samples.end()); }
};

// Runs the warm-up connection and `iterations` measured ones.
absl::Status RunMode(ModeResult& mode, const PgLogin& login, const Workload& workload, int iterations,
                     int& connection_index, IterationResult* first = nullptr) {
  Log(fmt::format("{}: warm-up connection (not counted), then {} measured", mode.name, iterations));
  for (int i = 0; i <= iterations; ++i) {
    absl::StatusOr<IterationResult> r = RunConnection(login, workload, connection_index++);
    if (!r.ok()) {
      return absl::Status(r.status().code(), fmt::format("{} mode, {}: {}", mode.name,
                                                         i == 0 ? std::string("warm-up") : fmt::format("connection {}", i),
                                                         std::string(r.status().message())));
    }
    if (i == 0) {
      if (first != nullptr) *first = *r;
      continue;
    }
    mode.samples.push_back(r->ms);
  }
  Log(fmt::format("{}: mean {:.1f} ms, median {:.1f} ms", mode.name, mode.mean(), mode.median()));
  return absl::OkStatus();
}

// A pooled run: hyperpool::connect() with its Endpoint's origin at the WAN proxy.
absl::Status RunPooledMode(ModeResult& mode, bool cache, const PgLogin& origin_via_wan, const Workload& workload,
                           int iterations, int& connection_index) {
  ConnectOptions options;
  options.endpoint.origin = fmt::format("host={} port={} user={} password={} dbname={} sslmode=disable",
                                        origin_via_wan.host, origin_via_wan.port, QuoteConnValue(origin_via_wan.user),
                                        QuoteConnValue(origin_via_wan.password),
                                        QuoteConnValue(origin_via_wan.database));
  options.endpoint.cache.enabled = cache;
  options.client.cache.enabled = cache;
  options.client.user = "demo";
  options.client.password = HexRandom(16);
  options.client.database = "demo";
  options.threads = 2;
  absl::StatusOr<std::unique_ptr<Connection>> pooler = connect(options);
  if (!pooler.ok()) {
    return absl::Status(pooler.status().code(),
                        fmt::format("hyperpool::connect failed: {}", std::string(pooler.status().message())));
  }
  std::optional<uint16_t> port = PortOfUrl((*pooler)->connection_string());
  if (!port) return absl::InternalError("cannot find the port in hyperpool's connection string");
  PgLogin login;
  login.host = "127.0.0.1";
  login.port = *port;
  login.user = options.client.user;
  login.password = options.client.password;
  login.database = options.client.database;

  // Warm-up separately, so that the Endpoint's transaction count covers the
  // measured connections only. It also opens the pool's first origin
  // connection across the WAN (and, with the cache on, fills the cache).
  Log(fmt::format("{}: warm-up connection (not counted)", mode.name));
  absl::StatusOr<IterationResult> warm = RunConnection(login, workload, connection_index++);
  if (!warm.ok()) {
    return absl::Status(warm.status().code(),
                        fmt::format("{} mode, warm-up: {}", mode.name, std::string(warm.status().message())));
  }
  size_t before = (*pooler)->endpoint_stats().transactions;
  Log(fmt::format("{}: {} measured connections", mode.name, iterations));
  for (int i = 1; i <= iterations; ++i) {
    absl::StatusOr<IterationResult> r = RunConnection(login, workload, connection_index++);
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          fmt::format("{} mode, connection {}: {}", mode.name, i, std::string(r.status().message())));
    }
    mode.samples.push_back(r->ms);
  }
  mode.origin_transactions = (*pooler)->endpoint_stats().transactions - before;
  (*pooler)->Close();
  Log(fmt::format("{}: mean {:.1f} ms, median {:.1f} ms", mode.name, mode.mean(), mode.median()));
  return absl::OkStatus();
}

// Creates the schema, its tables and rows over a direct (un-delayed) connection.
// `on_schema_created` runs right after CREATE SCHEMA succeeded.
absl::Status LoadTables(const PgLogin& target, const std::string& schema,
                        const std::function<void()>& on_schema_created) {
  absl::StatusOr<std::unique_ptr<PgClient>> c = PgClient::Connect(target);
  if (!c.ok()) return c.status();
  for (const std::string& sql : {
           fmt::format("CREATE SCHEMA {}", schema),
           fmt::format("CREATE TABLE {}.accounts (id int PRIMARY KEY, balance bigint NOT NULL, name text NOT NULL)",
                       schema),
           fmt::format("INSERT INTO {}.accounts SELECT g, 1000 + g % 97, 'account ' || g FROM generate_series(1, {}) g",
                       schema, kAccounts),
           fmt::format("CREATE TABLE {}.branches (id int PRIMARY KEY, balance bigint NOT NULL)", schema),
           fmt::format("INSERT INTO {}.branches SELECT g, 0 FROM generate_series(1, {}) g", schema, kBranches),
           fmt::format("ANALYZE {}.accounts", schema),
           fmt::format("ANALYZE {}.branches", schema),
       }) {
    absl::StatusOr<PgResult> r = (*c)->Query(sql);
    if (!r.ok()) return absl::Status(r.status().code(), fmt::format("{} -> {}", sql, std::string(r.status().message())));
    if (sql.rfind("CREATE SCHEMA", 0) == 0) on_schema_created();
  }
  return absl::OkStatus();
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

std::string Pct(double value) { return fmt::format("{:+.0f}%", value); }

struct Report {
  double rtt_ms = 0;
  int iterations = 0;
  int queries = 0;
  int uncacheable = 0;
  int login_round_trips = 0;
  std::string auth_method;
  std::string database;
  std::vector<ModeResult> modes;  // direct, pooled, cached
};

std::string RenderTable(const Report& rep) {
  const ModeResult& direct = rep.modes[0];
  std::string out;
  out += fmt::format(
      "\nhyperpool demo: {} short-lived connections per mode (after 1 warm-up connection per mode, not counted),\n"
      "simulated WAN RTT {:g} ms, origin {}\n"
      "each connection: {} login, {} statements (3 primary-key reads of hot ids, 1 range read of {} rows,\n"
      "1 write transaction sent as one string \"BEGIN; UPDATE ...; COMMIT\" = 1 round trip), disconnect\n\n",
      rep.iterations, rep.rtt_ms, rep.database, rep.auth_method, rep.queries, kRangeRows);
  out += fmt::format("{:<8} {:>9} {:>10} {:>9}   {:<38} {:>9} {:>11}\n", "mode", "mean ms", "median ms", "vs direct",
                     "physical limit", "limit ms", "mean/limit");
  for (const ModeResult& m : rep.modes) {
    double limit = m.limit_round_trips * rep.rtt_ms;
    std::string saved = &m == &direct ? std::string("-") : Pct(100.0 * (m.mean() - direct.mean()) / direct.mean());
    std::string ratio = limit > 0 ? fmt::format("{:.3f}", m.mean() / limit) : std::string("-");
    out += fmt::format("{:<8} {:>9.1f} {:>10.1f} {:>9}   {:<38} {:>9.1f} {:>11}\n", m.name, m.mean(), m.median(),
                       saved, m.limit_formula, limit, ratio);
  }
  const ModeResult& pooled = rep.modes[1];
  const ModeResult& cached = rep.modes[2];
  double pooled_limit = pooled.limit_round_trips * rep.rtt_ms;
  out += "\n";
  if (pooled_limit > 0) {
    double over = 100.0 * (pooled.mean() / pooled_limit - 1);
    out += fmt::format("pooled is {:.1f}% {} its physical limit (goal: within +5%): {}\n", std::abs(over),
                       over >= 0 ? "above" : "below", over <= 5 ? "met" : "NOT met");
  }
  // Time above the limit per WAN round trip: the delay line's own timer slop
  // and scheduling show up here for every mode, the pooler's cost only in
  // pooled/cached; direct is the yardstick.
  if (direct.limit_round_trips > 0 && pooled.limit_round_trips > 0) {
    out += fmt::format("time above the limit per WAN round trip: direct {:.2f} ms, pooled {:.2f} ms\n",
                       (direct.mean() - direct.limit_round_trips * rep.rtt_ms) / direct.limit_round_trips,
                       (pooled.mean() - pooled_limit) / pooled.limit_round_trips);
  }
  if (pooled.origin_transactions && cached.origin_transactions) {
    out += fmt::format(
        "units of work that reached the origin (Endpoint count, measured connections): pooled {}, cached {}{}\n",
        *pooled.origin_transactions, *cached.origin_transactions,
        *cached.origin_transactions >= *pooled.origin_transactions ? "  (the cache served nothing)" : "");
  }
  out += fmt::format(
      "seed (Hyperdrive write-up, RTT ~125 ms, postgres.js, TLS): direct 1200 ms, via Hyperdrive 500 ms (-58%), "
      "with cache 320 ms (-73%)\n");
  return out;
}

absl::Status WriteCsv(const Report& rep, const std::filesystem::path& dir) {
  std::ofstream summary(dir / "demo.csv", std::ios::trunc);
  summary << "mode,iterations,rtt_ms,mean_ms,median_ms,min_ms,max_ms,saved_vs_direct_pct,limit_round_trips,"
             "limit_formula,limit_ms,mean_over_limit,origin_transactions\n";
  const double direct_mean = rep.modes[0].mean();
  for (const ModeResult& m : rep.modes) {
    double limit = m.limit_round_trips * rep.rtt_ms;
    summary << fmt::format("{},{},{:g},{:.2f},{:.2f},{:.2f},{:.2f},{:.1f},{},\"{}\",{:.1f},{},{}\n", m.name,
                           m.samples.size(), rep.rtt_ms, m.mean(), m.median(), m.min(), m.max(),
                           100.0 * (direct_mean - m.mean()) / direct_mean, m.limit_round_trips, m.limit_formula, limit,
                           limit > 0 ? fmt::format("{:.3f}", m.mean() / limit) : std::string(),
                           m.origin_transactions ? std::to_string(*m.origin_transactions) : std::string());
  }
  std::ofstream each(dir / "demo_iterations.csv", std::ios::trunc);
  each << "mode,connection,ms\n";
  for (const ModeResult& m : rep.modes) {
    for (size_t i = 0; i < m.samples.size(); ++i) each << fmt::format("{},{},{:.2f}\n", m.name, i + 1, m.samples[i]);
  }
  summary.close();
  each.close();
  if (!summary || !each) return absl::InternalError(fmt::format("cannot write the CSV files in {}", dir.string()));
  return absl::OkStatus();
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

}  // namespace

int Demo(int argc, char** argv) {
  double rtt_ms = 125;
  int iterations = 10;
  std::string origin;
  std::string out_dir = "demo-results";
  bool chart = true;
  for (int i = 2; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kDemoUsage, stdout);
      return 0;
    }
    if (arg == "--no-chart") {
      chart = false;
      continue;
    }
    std::string name(arg), value;
    if (size_t eq = arg.find('='); arg.substr(0, 2) == "--" && eq != std::string_view::npos) {
      name = std::string(arg.substr(0, eq));
      value = std::string(arg.substr(eq + 1));
    } else if (name == "--rtt" || name == "--origin" || name == "--iterations" || name == "--out") {
      if (i + 1 >= argc) return UsageError(fmt::format("option {} needs a value", name));
      value = argv[++i];
    }
    if (name == "--rtt") {
      if (!absl::SimpleAtod(value, &rtt_ms) || !(rtt_ms >= 0) || rtt_ms > 10000) {
        return UsageError("--rtt needs milliseconds between 0 and 10000");
      }
    } else if (name == "--iterations") {
      if (!absl::SimpleAtoi(value, &iterations) || iterations < 1 || iterations > 10000) {
        return UsageError("--iterations needs a number from 1 to 10000");
      }
    } else if (name == "--origin") {
      origin = value;
    } else if (name == "--out") {
      if (value.empty()) return UsageError("--out needs a directory");
      out_dir = value;
    } else {
      return UsageError(fmt::format("unknown option {}", name));
    }
  }

  std::signal(SIGPIPE, SIG_IGN);
  demo::CleanupList cleanup;
  SignalWatcher watcher(cleanup);  // before any other thread exists
  struct RunCleanupAtExit {
    demo::CleanupList& list;
    ~RunCleanupAtExit() { list.RunAll(); }
  } run_cleanup_at_exit{cleanup};

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    Log(fmt::format("cannot create {}: {}", out_dir, ec.message()));
    return 1;
  }

  // 1. The database.
  PgLogin target;
  std::string database_label;
  if (origin.empty()) {
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
    database_label = fmt::format("scratch PostgreSQL 15 on 127.0.0.1:{}", target.port);
  } else {
    absl::StatusOr<OriginConfig> config = ParseOriginConfig(origin);
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
    database_label = RedactedOriginString(*config);
  }

  Workload workload;
  workload.schema = "hyperpool_demo_" + HexRandom(4);
  Log(fmt::format("loading {} accounts and {} branches into schema {}", kAccounts, kBranches, workload.schema));
  // Dropped at exit once it exists (also on Ctrl-C).
  auto on_schema_created = [&] {
    PgLogin drop_login = target;
    drop_login.timeout = std::chrono::milliseconds(10000);
    std::string schema = workload.schema;
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
  if (absl::Status loaded = LoadTables(target, workload.schema, on_schema_created); !loaded.ok()) {
    Log(fmt::format("cannot load the tables: {}", std::string(loaded.message())));
    return 1;
  }

  // 2. The WAN.
  wan::WanOptions wan_options;
  wan_options.target_host = target.host;
  wan_options.target_port = target.port;
  wan_options.rtt = std::chrono::microseconds(std::llround(rtt_ms * 1000));
  absl::StatusOr<std::unique_ptr<wan::WanProxy>> proxy = wan::WanProxy::StartThread(wan_options);
  if (!proxy.ok()) {
    Log(fmt::format("cannot start the WAN simulator: {}", std::string(proxy.status().message())));
    return 1;
  }
  Log(fmt::format("WAN simulator on {} -> {}:{}, RTT {:g} ms", (*proxy)->listen_address(), target.host, target.port,
                  rtt_ms));
  PgLogin via_wan = target;
  via_wan.host = "127.0.0.1";
  via_wan.port = (*proxy)->port();

  // 3. The three modes.
  Report rep;
  rep.rtt_ms = rtt_ms;
  rep.iterations = iterations;
  rep.queries = workload.Queries();
  rep.uncacheable = workload.Uncacheable();
  rep.database = database_label;
  int connection_index = 0;
  rep.modes = {ModeResult{"direct"}, ModeResult{"pooled"}, ModeResult{"cached"}};
  IterationResult first;
  absl::Status status = RunMode(rep.modes[0], via_wan, workload, iterations, connection_index, &first);
  if (status.ok()) {
    rep.login_round_trips = first.login_round_trips;
    rep.auth_method = first.auth_method;
    status = RunPooledMode(rep.modes[1], /*cache=*/false, via_wan, workload, iterations, connection_index);
  }
  if (status.ok()) {
    status = RunPooledMode(rep.modes[2], /*cache=*/true, via_wan, workload, iterations, connection_index);
  }
  if (!status.ok()) {
    Log(fmt::format("FAILED: {}", std::string(status.message())));
    return 1;
  }
  (*proxy)->Stop();

  // Every write went through exactly once: the branch balances add up.
  {
    absl::StatusOr<std::unique_ptr<PgClient>> c = PgClient::Connect(target);
    absl::StatusOr<PgResult> sum = c.ok() ? (*c)->Query(fmt::format("SELECT sum(balance) FROM {}.branches", workload.schema))
                                          : absl::StatusOr<PgResult>(c.status());
    std::string expected = std::to_string(connection_index);
    if (!sum.ok() || sum->rows.size() != 1 || sum->rows[0][0] != expected) {
      Log(fmt::format("FAILED: the {} write transactions did not all commit exactly once (sum of branch balances: {})",
                      connection_index,
                      sum.ok() && !sum->rows.empty() && sum->rows[0][0] ? *sum->rows[0][0] : std::string("?")));
      return 1;
    }
    Log(fmt::format("checked: all {} write transactions committed exactly once; every read returned the right rows",
                    connection_index));
  }

  // Physical limits: the round trips that must cross the WAN.
  rep.modes[0].limit_round_trips = 1 + rep.login_round_trips + rep.queries;
  rep.modes[0].limit_formula =
      fmt::format("(1 TCP + {} login + {} stmts) x RTT", rep.login_round_trips, rep.queries);
  rep.modes[1].limit_round_trips = rep.queries;
  rep.modes[1].limit_formula = fmt::format("{} stmts x RTT", rep.queries);
  rep.modes[2].limit_round_trips = rep.uncacheable;
  rep.modes[2].limit_formula = fmt::format("{} uncacheable stmt x RTT", rep.uncacheable);

  std::string table = RenderTable(rep);
  std::fputs(table.c_str(), stdout);
  std::fflush(stdout);

  std::filesystem::path dir(out_dir);
  if (absl::Status wrote = WriteCsv(rep, dir); !wrote.ok()) {
    Log(std::string(wrote.message()));
    return 1;
  }
  std::string written = (dir / "demo.csv").string() + ", " + (dir / "demo_iterations.csv").string();
  if (chart) {
    const double direct_mean = rep.modes[0].mean();
    const demo::Rgb colors[] = {{217, 83, 79}, {51, 122, 183}, {92, 184, 92}};
    std::vector<demo::ChartGroup> groups;
    for (size_t i = 0; i < rep.modes.size(); ++i) {
      const ModeResult& m = rep.modes[i];
      double limit = m.limit_round_trips * rtt_ms;
      std::string note = limit > 0 ? fmt::format("{:.2f}X LIMIT", m.mean() / limit) : std::string();
      if (i > 0) note = fmt::format("{} VS DIRECT\n{}", Pct(100.0 * (m.mean() - direct_mean) / direct_mean), note);
      std::string label = m.name;
      for (char& c : label) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      groups.push_back({label, note, m.mean(), limit, colors[i % 3]});
    }
    std::string title = "HYPERPOOL DEMO: MS PER SHORT-LIVED CONNECTION";
    std::string subtitle = fmt::format("RTT {:g} MS, MEAN OF {} CONNECTIONS PER MODE, {} LOGIN + {} STATEMENTS EACH",
                                       rtt_ms, iterations, rep.auth_method == "SCRAM-SHA-256" ? "SCRAM" : rep.auth_method,
                                       rep.queries);
    absl::Status drawn = demo::WriteBarChartPng((dir / "demo.png").string(), title, subtitle, groups);
    if (!drawn.ok()) {
      Log(std::string(drawn.message()));
      return 1;
    }
    written += ", " + (dir / "demo.png").string();
  }
  Log("wrote " + written);
  return 0;
}

}  // namespace hyperpool::cli
