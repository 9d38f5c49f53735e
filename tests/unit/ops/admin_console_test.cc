// The admin console without sockets (src/ops/admin_console.h,
// admin_session.h): command strings against a fake backend, the answer's
// frames decoded back into result sets.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "ops/admin_console.h"
#include "ops/admin_session.h"
#include "protocol/backend_messages.h"
#include "protocol/frame_reader.h"

namespace hyperpool::ops {
namespace {

namespace pr = protocol;

class FakeBackend : public AdminBackend {
 public:
  AdminSnapshot Snapshot() override { return snapshot; }
  std::vector<OriginServerInfo> Servers() override { return servers; }
  void Pause(std::string_view db) override { calls.push_back(Call("pause", db)); }
  void Resume(std::string_view db) override { calls.push_back(Call("resume", db)); }
  void Reconnect(std::string_view db) override { calls.push_back(Call("reconnect", db)); }
  static std::string Call(std::string verb, std::string_view db) {
    return db.empty() ? verb : verb + " " + std::string(db);
  }
  bool KillClient(std::uint64_t id) override {
    calls.push_back("kill " + std::to_string(id));
    return id == 7;
  }
  absl::Status Reload() override {
    calls.push_back("reload");
    return reload_result;
  }
  void Shutdown() override { calls.push_back("shutdown"); }

  AdminSnapshot snapshot;
  std::vector<OriginServerInfo> servers;
  std::vector<std::string> calls;
  absl::Status reload_result;
};

AdminSnapshot Sample() {
  AdminSnapshot s;
  s.database = "app";
  s.user = "app_user";
  s.pool_mode = "transaction";
  EndpointStats e;
  e.origin_open = 5;
  e.origin_idle = 2;
  e.origin_lent = 2;
  e.waiting = 3;
  e.pool_max_size = 8;
  e.max_wait_us = 2500000;
  e.transactions = 40;
  e.queries = 90;
  e.transaction_time.count = 100;
  e.transaction_time.sum_us = 50000;
  e.transaction_time.counts[3] = 98;  // <= 1000 us
  e.transaction_time.counts[6] = 2;   // <= 10000 us
  e.pins_temp_table = 4;
  e.pins_total = 4;
  e.pinned_sessions = 1;
  e.cache_hits = 11;
  e.cache_misses = 12;
  s.endpoint = e;
  ClientStats c;
  c.bytes_received = 1000;
  c.bytes_sent = 2000;
  c.cache_enabled = true;
  c.cache_local_hits = 5;
  s.client = c;
  ClientSessionInfo a;
  a.id = 3;
  a.user = "app_user";
  a.database = "app";
  a.address = "127.0.0.1:5555";
  a.state = "active";
  ClientSessionInfo b = a;
  b.id = 4;
  b.state = "idle";
  ClientSessionInfo admin = a;
  admin.id = 5;
  admin.user = "ops";
  admin.database = "hyperpool";
  admin.state = "admin";
  s.clients = {a, b, admin};
  s.config = {{"pool-size", "8", true}, {"threads", "2", false}};
  s.cache_report = "endpoint tier: hits 11 ...\n  00000000000000ab        cacheable        9  select ?\n";
  s.version = "hyperpool 9.9";
  return s;
}

// One result set or error as decoded from the answer.
struct Answer {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
  std::string tag;
  std::string sqlstate;  // of an ErrorResponse
  std::string message;
  std::string detail;
  bool empty_query = false;
};

std::vector<Answer> Decode(const std::string& bytes, bool* ready = nullptr) {
  std::vector<Answer> out;
  Answer current;
  pr::FrameReader reader(pr::FrameReader::Mode::kTagged);
  std::string_view rest = bytes;
  while (!rest.empty()) {
    pr::FrameReader::Result r = reader.Read(rest);
    REQUIRE(r.is_frame());
    const pr::Frame& f = r.frame();
    switch (f.tag) {
      case 'T': {
        auto d = pr::DecodeRowDescription(f.payload);
        REQUIRE(d.ok());
        for (const auto& field : d->fields) current.columns.emplace_back(field.name);
        break;
      }
      case 'D': {
        auto d = pr::DecodeDataRow(f.payload);
        REQUIRE(d.ok());
        std::vector<std::string> row;
        for (pr::NullableValue v : *d) row.emplace_back(v ? std::string(*v) : "NULL");
        REQUIRE(row.size() == current.columns.size());
        current.rows.push_back(std::move(row));
        break;
      }
      case 'C': {
        auto d = pr::DecodeCommandComplete(f.payload);
        REQUIRE(d.ok());
        current.tag = std::string(d->tag);
        out.push_back(std::move(current));
        current = {};
        break;
      }
      case 'E': {
        auto d = pr::DecodeErrorResponse(f.payload);
        REQUIRE(d.ok());
        current.sqlstate = std::string(d->sqlstate());
        current.message = std::string(d->message());
        current.detail = std::string(d->detail());
        out.push_back(std::move(current));
        current = {};
        break;
      }
      case 'I':
        current.empty_query = true;
        out.push_back(std::move(current));
        current = {};
        break;
      case 'Z':
        if (ready) *ready = true;
        break;
      default:
        break;
    }
    rest.remove_prefix(f.size());
  }
  return out;
}

std::vector<Answer> Run(std::string_view query, FakeBackend& backend) {
  return Decode(ExecuteAdminQuery(query, backend));
}

// The value in column `name` of `row`.
std::string Cell(const Answer& a, std::size_t row, std::string_view name) {
  for (std::size_t i = 0; i < a.columns.size(); ++i) {
    if (a.columns[i] == name) return a.rows.at(row).at(i);
  }
  FAIL("no column " << name);
  return {};
}

TEST_CASE("SHOW POOLS has PgBouncer's columns and counts the pool and the app clients") {
  FakeBackend b;
  b.snapshot = Sample();
  auto answers = Run("SHOW POOLS", b);
  REQUIRE(answers.size() == 1);
  const Answer& a = answers[0];
  for (const char* column : {"database", "user", "cl_active", "cl_waiting", "sv_active", "sv_idle", "sv_used",
                             "maxwait", "pool_mode"}) {
    CHECK(std::find(a.columns.begin(), a.columns.end(), column) != a.columns.end());
  }
  REQUIRE(a.rows.size() == 1);
  CHECK(Cell(a, 0, "database") == "app");
  CHECK(Cell(a, 0, "cl_waiting") == "3");
  CHECK(Cell(a, 0, "sv_active") == "2");
  CHECK(Cell(a, 0, "sv_idle") == "2");
  CHECK(Cell(a, 0, "sv_login") == "1");
  CHECK(Cell(a, 0, "maxwait") == "2");
  CHECK(Cell(a, 0, "maxwait_us") == "500000");
  CHECK(Cell(a, 0, "pool_mode") == "transaction");
  CHECK(Cell(a, 0, "pool_size") == "8");
  CHECK(Cell(a, 0, "paused") == "no");
  CHECK(a.tag == "SHOW");
}

TEST_CASE("SHOW STATS reports totals, averages and the p99 bucket bound") {
  FakeBackend b;
  b.snapshot = Sample();
  auto a = Run("show stats;", b);
  REQUIRE(a.size() == 1);
  CHECK(Cell(a[0], 0, "total_xact_count") == "40");
  CHECK(Cell(a[0], 0, "total_query_count") == "90");
  CHECK(Cell(a[0], 0, "total_received") == "1000");
  CHECK(Cell(a[0], 0, "total_sent") == "2000");
  CHECK(Cell(a[0], 0, "avg_xact_time") == "500");
  CHECK(Cell(a[0], 0, "p99_xact_time") == "10000");
}

TEST_CASE("SHOW CLIENTS lists every connection with its id, SHOW CACHE both tiers and the fingerprints") {
  FakeBackend b;
  b.snapshot = Sample();
  auto clients = Run("SHOW CLIENTS", b);
  REQUIRE(clients[0].rows.size() == 3);
  CHECK(Cell(clients[0], 0, "id") == "3");
  CHECK(Cell(clients[0], 0, "addr") == "127.0.0.1");
  CHECK(Cell(clients[0], 0, "port") == "5555");
  CHECK(Cell(clients[0], 2, "state") == "admin");
  auto cache = Run("SHOW CACHE", b);
  REQUIRE(cache.size() == 2);
  CHECK(Cell(cache[0], 0, "tier") == "endpoint");
  CHECK(Cell(cache[0], 0, "misses") == "12");
  CHECK(Cell(cache[0], 1, "tier") == "client");
  CHECK(Cell(cache[0], 1, "hits") == "5");
  REQUIRE(cache[1].rows.size() == 1);
  CHECK(Cell(cache[1], 0, "fingerprint") == "00000000000000ab");
  CHECK(Cell(cache[1], 0, "decision") == "cacheable");
  CHECK(Cell(cache[1], 0, "count") == "9");
  CHECK(Cell(cache[1], 0, "query") == "select ?");
}

TEST_CASE("SHOW CACHE adds the WAL feed's state, lag and counters when it runs") {
  FakeBackend b;
  b.snapshot = Sample();
  REQUIRE(Run("SHOW CACHE", b).size() == 2);  // off: no third result set
  b.snapshot.endpoint->wal_state = "streaming";
  b.snapshot.endpoint->wal_serving = true;
  b.snapshot.endpoint->wal_lag_ms = 12;
  b.snapshot.endpoint->wal_transactions = 40;
  b.snapshot.endpoint->wal_reconnects = 1;
  auto cache = Run("SHOW CACHE", b);
  REQUIRE(cache.size() == 3);
  CHECK(Cell(cache[2], 0, "wal_feed") == "streaming");
  CHECK(Cell(cache[2], 0, "serving") == "yes");
  CHECK(Cell(cache[2], 0, "lag_ms") == "12");
  CHECK(Cell(cache[2], 0, "transactions") == "40");
  CHECK(Cell(cache[2], 0, "reconnects") == "1");
}

TEST_CASE("SHOW SERVERS lists each origin connection with its state, backend pid, connect time and pin") {
  FakeBackend b;
  b.snapshot = Sample();
  OriginServerInfo lent{.state = "active", .backend_pid = 4242, .connect_time = std::chrono::system_clock::from_time_t(86400),
                        .pinned = true, .retired = false};
  OriginServerInfo opening{.state = "login"};
  opening.retired = true;
  b.servers = {lent, opening};
  auto a = Run("SHOW SERVERS", b);
  REQUIRE(a.size() == 1);
  REQUIRE(a[0].rows.size() == 2);
  CHECK(Cell(a[0], 0, "state") == "active");
  CHECK(Cell(a[0], 0, "remote_pid") == "4242");
  CHECK(Cell(a[0], 0, "connect_time") == "1970-01-02 00:00:00 UTC");
  CHECK(Cell(a[0], 0, "pinned") == "yes");
  CHECK(Cell(a[0], 0, "close_needed") == "0");
  CHECK(Cell(a[0], 1, "state") == "login");
  CHECK(Cell(a[0], 1, "connect_time") == "");
  CHECK(Cell(a[0], 1, "close_needed") == "1");
}

TEST_CASE("every SHOW command answers a result set") {
  const char* command = GENERATE("SHOW POOLS", "SHOW CLIENTS", "SHOW SERVERS", "SHOW STATS", "SHOW CACHE",
                                 "SHOW PINS", "SHOW CONFIG", "SHOW VERSION", "SHOW HELP", "  show   Pools  ");
  FakeBackend b;
  b.snapshot = Sample();
  auto a = Run(command, b);
  REQUIRE_FALSE(a.empty());
  CHECK(a[0].sqlstate.empty());
  CHECK(a[0].tag == "SHOW");
  CHECK_FALSE(a[0].columns.empty());
  CHECK(b.calls.empty());  // SHOW changes nothing
}

TEST_CASE("SHOW CONFIG, PINS, VERSION and HELP") {
  FakeBackend b;
  b.snapshot = Sample();
  auto config = Run("SHOW CONFIG", b)[0];
  CHECK(Cell(config, 0, "key") == "pool-size");
  CHECK(Cell(config, 0, "changeable") == "yes");
  CHECK(Cell(config, 1, "changeable") == "no");
  auto pins = Run("SHOW PINS", b)[0];
  CHECK(Cell(pins, 1, "reason") == "temp_table");
  CHECK(Cell(pins, 1, "total") == "4");
  CHECK(Run("SHOW VERSION", b)[0].rows[0][0] == "hyperpool 9.9");
  CHECK(Run("SHOW HELP", b)[0].rows.size() == AdminCommands().size());
}

TEST_CASE("the control commands call the backend and answer their tag") {
  auto [command, call, tag] = GENERATE(table<std::string, std::string, std::string>({
      {"PAUSE", "pause", "PAUSE"},
      {"pause app", "pause app", "PAUSE"},
      {"RESUME", "resume", "RESUME"},
      {"RESUME app;", "resume app", "RESUME"},
      {"RECONNECT", "reconnect", "RECONNECT"},
      {"KILL_CLIENT 7", "kill 7", "KILL_CLIENT"},
      {"RELOAD", "reload", "RELOAD"},
      {"SHUTDOWN", "shutdown", "SHUTDOWN"},
  }));
  FakeBackend b;
  b.snapshot = Sample();
  auto a = Run(command, b);
  REQUIRE(a.size() == 1);
  CHECK(a[0].sqlstate.empty());
  CHECK(a[0].tag == tag);
  CHECK(b.calls == std::vector<std::string>{call});
}

TEST_CASE("several databases: a row each in SHOW POOLS and SHOW STATS, PAUSE takes any of their names") {
  FakeBackend b;
  b.snapshot = Sample();
  EndpointStats one;
  one.pool_max_size = 3;
  one.transactions = 7;
  EndpointStats two;
  two.pool_max_size = 5;
  two.origin_idle = 2;
  b.snapshot.pools = {{"app", "transaction", one}, {"reports", "session", two}};
  auto pools = Run("SHOW POOLS", b)[0];
  REQUIRE(pools.rows.size() == 2);
  CHECK(Cell(pools, 0, "database") == "app");
  CHECK(Cell(pools, 0, "pool_size") == "3");
  CHECK(Cell(pools, 1, "database") == "reports");
  CHECK(Cell(pools, 1, "pool_mode") == "session");
  CHECK(Cell(pools, 1, "sv_idle") == "2");
  auto stats = Run("SHOW STATS", b)[0];
  REQUIRE(stats.rows.size() == 2);
  CHECK(Cell(stats, 0, "total_xact_count") == "7");
  CHECK(Cell(stats, 1, "total_xact_count") == "0");
  CHECK(Run("PAUSE reports", b)[0].tag == "PAUSE");
  CHECK(Run("RECONNECT app", b)[0].tag == "RECONNECT");
  CHECK(Run("PAUSE nothere", b)[0].sqlstate == "3D000");
  CHECK(b.calls == std::vector<std::string>{"pause reports", "reconnect app"});
}

TEST_CASE("bad commands get the SQLSTATE PostgreSQL would use and change nothing") {
  auto [command, sqlstate] = GENERATE(table<std::string, std::string>({
      {"SELECT 1", "42601"},
      {"SHOW", "42601"},
      {"SHOW POOLS EXTRA", "42601"},
      {"SHOW NOTHING", "42601"},
      {"PAUSE otherdb", "3D000"},
      {"PAUSE app extra", "42601"},
      {"KILL_CLIENT", "42601"},
      {"KILL_CLIENT x", "42601"},
      {"KILL_CLIENT -1", "42601"},
      {"RELOAD now", "42601"},
      {std::string(100000, 'x'), "42601"},
  }));
  FakeBackend b;
  b.snapshot = Sample();
  auto a = Run(command, b);
  REQUIRE(a.size() == 1);
  CHECK(a[0].sqlstate == sqlstate);
  CHECK(a[0].message.size() < 400);  // the command is quoted, truncated
  CHECK(b.calls.empty());
}

TEST_CASE("an unknown command's error lists the commands") {
  FakeBackend b;
  auto a = Run("FLY", b);
  REQUIRE(a.size() == 1);
  CHECK(a[0].sqlstate == "42601");
  CHECK(a[0].detail.find("SHOW POOLS") != std::string::npos);
  CHECK(a[0].detail.find("KILL_CLIENT id") != std::string::npos);
}

TEST_CASE("KILL_CLIENT of an unknown id is 42704; a rejected reload is F0000 with the reason") {
  FakeBackend b;
  auto kill = Run("KILL_CLIENT 8", b);
  CHECK(kill[0].sqlstate == "42704");
  b.reload_result = absl::InvalidArgumentError("hp.toml:3: unknown key");
  auto reload = Run("RELOAD", b);
  CHECK(reload[0].sqlstate == "F0000");
  CHECK(reload[0].detail == "hp.toml:3: unknown key");
}

TEST_CASE("several commands in one query answer in order; the first error ends the string; empty is empty") {
  FakeBackend b;
  b.snapshot = Sample();
  auto a = Run("SHOW VERSION; PAUSE; ;", b);
  REQUIRE(a.size() == 2);
  CHECK(a[0].columns == std::vector<std::string>{"version"});
  CHECK(a[1].tag == "PAUSE");
  b.calls.clear();
  auto e = Run("BOGUS; PAUSE", b);
  REQUIRE(e.size() == 1);
  CHECK(e[0].sqlstate == "42601");
  CHECK(b.calls.empty());
  auto empty = Run("  ;  ", b);
  REQUIRE(empty.size() == 1);
  CHECK(empty[0].empty_query);
}

TEST_CASE("HistogramPercentileUs is the bound of the bucket holding the rank") {
  LatencyHistogramSnapshot h;
  CHECK(HistogramPercentileUs(h, 99) == 0);
  h.counts[0] = 50;
  h.counts[4] = 50;
  h.count = 100;
  CHECK(HistogramPercentileUs(h, 50) == 100);
  CHECK(HistogramPercentileUs(h, 99) == 2500);
  h.counts.back() = 100;
  h.count = 200;
  CHECK(HistogramPercentileUs(h, 99) == kLatencyBucketBoundsUs.back());
}

// ---- The protocol (admin_session.h) ----

std::string Frame(char tag, std::string_view body) {
  std::string out(1, tag);
  const uint32_t len = static_cast<uint32_t>(body.size() + 4);
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((len >> shift) & 0xff));
  out.append(body);
  return out;
}

TEST_CASE("a session greets with parameters and ReadyForQuery, answers Query with ReadyForQuery, ends at Terminate") {
  FakeBackend b;
  b.snapshot = Sample();
  AdminProtocolSession s(b, AdminLogin{.client_id = 9, .user = "ops", .address = "unix"});
  std::string out;
  s.Greeting(out);
  bool ready = false;
  Decode(out, &ready);
  CHECK(ready);
  CHECK(out.find("server_version") != std::string::npos);
  out.clear();
  CHECK(s.OnMessage('Q', std::string_view("SHOW VERSION\0", 13), out));
  ready = false;
  auto a = Decode(out, &ready);
  CHECK(ready);
  REQUIRE(a.size() == 1);
  CHECK(a[0].rows[0][0] == "hyperpool 9.9");
  out.clear();
  CHECK_FALSE(s.OnMessage('X', "", out));
  CHECK(out.empty());
}

TEST_CASE("the extended protocol gets one 0A000 at once, the rest is skipped up to Sync, which answers ReadyForQuery") {
  FakeBackend b;
  AdminProtocolSession s(b, AdminLogin{});
  std::string out;
  CHECK(s.OnMessage('P', std::string_view("\0SHOW POOLS\0\0\0", 14), out));
  auto a = Decode(out);
  REQUIRE(a.size() == 1);
  CHECK(a[0].sqlstate == "0A000");
  for (char tag : {'B', 'D', 'E', 'H'}) {
    out.clear();
    CHECK(s.OnMessage(tag, "", out));
    CHECK(out.empty());
  }
  out.clear();
  CHECK(s.OnMessage('Q', std::string_view("PAUSE\0", 6), out));  // ignored until Sync, as PostgreSQL does
  CHECK(out.empty());
  CHECK(b.calls.empty());
  CHECK(s.OnMessage('S', "", out));
  bool ready = false;
  Decode(out, &ready);
  CHECK(ready);
  out.clear();
  CHECK(s.OnMessage('Q', std::string_view("PAUSE\0", 6), out));
  CHECK(b.calls == std::vector<std::string>{"pause"});
}

TEST_CASE("a malformed Query or an unknown message is FATAL 08P01 and closes") {
  FakeBackend b;
  AdminProtocolSession s(b, AdminLogin{});
  std::string out;
  CHECK_FALSE(s.OnMessage('Q', "no terminator", out));
  CHECK(Decode(out)[0].sqlstate == "08P01");
  out.clear();
  CHECK_FALSE(s.OnMessage('d', "copy data", out));
  CHECK(Decode(out)[0].sqlstate == "08P01");
}

}  // namespace
}  // namespace hyperpool::ops
