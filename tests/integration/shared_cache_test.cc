// The shared cache tier on Redis and stale-if-error, against the real
// PostgreSQL 15 fixture and a Debian redis-server this test starts on a
// free port (its own directory, no persistence, stopped even when a test
// fails). Two Endpoints (each on its own thread, as on two machines) share
// the origin and Redis. "Reached the origin" is the Endpoint's own count of
// units the origin answered (EndpointStats::queries).

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <asio/connect.hpp>
#include <asio/ip/tcp.hpp>
#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include "client/client_util.h"
#include "hyperpool/endpoint.h"
#include "integration/endpoint_origin_util.h"
#include "support/pg_fixture.h"
#include "support/recording_cache.h"
#include "unit/endpoint/endpoint_test_util.h"
#include "wan/wan_proxy.h"

extern char** environ;

namespace hyperpool::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Polls `done` every 10 ms until it holds or `limit` passes.
bool PollUntil(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return done();
}

// redis-server on 127.0.0.1:<port>, in a directory of its own, saving
// nothing. Stopped (SIGTERM, then SIGKILL) by Stop() and the destructor.
class RedisServer {
 public:
  RedisServer() {
    auto port = PickFreePort();
    REQUIRE(port.ok());
    port_ = *port;
    char tmpl[] = "/tmp/hp-redis-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir_ = tmpl;
    Start();
  }
  ~RedisServer() {
    Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  uint16_t port() const { return port_; }
  std::string url() const { return fmt::format("redis://127.0.0.1:{}", port_); }

  void Start() {
    REQUIRE(pid_ == 0);
    std::vector<std::string> args{"/usr/bin/redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--dir", dir_, "--daemonize", "no",
                                  "--logfile", dir_ + "/redis.log"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    REQUIRE(::posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
    // Ready once it accepts connections (bounded).
    REQUIRE(PollUntil([this] { return Accepts(); }, 10s));
  }
  void Stop() {
    if (pid_ == 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    const auto deadline = Clock::now() + 5s;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    pid_ = 0;
  }
  // SIGSTOP / SIGCONT: a Redis that accepts connections and answers nothing.
  void Pause() { REQUIRE(::kill(pid_, SIGSTOP) == 0); }
  void Resume() { REQUIRE(::kill(pid_, SIGCONT) == 0); }
  // Entries stored under the shared tier's prefix.
  size_t Entries() const {
    auto r = RunCommand({"redis-cli", "-p", std::to_string(port_), "--scan", "--pattern", "hp1:e:*"});
    if (!r.ok() || r->exit_code != 0) return 0;
    size_t n = 0;
    for (char ch : r->out) n += ch == '\n';
    return n;
  }

 private:
  bool Accepts() const {
    asio::io_context io;
    asio::ip::tcp::socket s(io);
    std::error_code ec;
    s.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);
    return !ec;
  }

  uint16_t port_ = 0;
  std::string dir_;
  pid_t pid_ = 0;
};

std::string RoleOrigin(const PgCluster& c, const PgRole& role, const std::string& host, uint16_t port) {
  return fmt::format("postgresql://{}:{}@{}:{}/{}?sslmode=disable", client::PercentEncode(role.user),
                     client::PercentEncode(role.password), host, port, c.database);
}

std::unique_ptr<Endpoint> MakeShared(IoThread& io, std::string origin, const std::string& redis_url,
                                     const std::function<void(EndpointOptions&)>& tweak = {}) {
  return MakeEndpointWith(io, std::move(origin), 4, 5s, [&](EndpointOptions& o) {
    o.cache.redis_url = redis_url;
    o.cache.redis_timeout = 200ms;  // a loaded CI machine; the default is 50 ms
    if (tweak) tweak(o);
  });
}

std::unique_ptr<LinkClient> Session(IoThread& io, Endpoint& ep) { return OpenSession(io, ep); }

Result Run(IoThread& io, LinkClient& s, const std::string& sql) { return Await(io, s.Query(sql)); }

std::string Value(IoThread& io, LinkClient& s, const std::string& sql) {
  Result r = Run(io, s, sql);
  INFO(sql << " -> " << r.sqlstate << " " << r.error_message);
  REQUIRE(r.sqlstate.empty());
  REQUIRE(r.status == 'I');
  return r.Cell();
}

// Until its catalog is loaded an Endpoint caches nothing: asks until it is.
void WarmCatalog(IoThread& io, LinkClient& s, Endpoint& ep, const std::string& table) {
  REQUIRE(PollUntil([&] {
    // No function call: before its catalog is loaded the Endpoint would
    // take one for a possible write (and bar stale-if-error for the session).
    (void)Value(io, s, fmt::format("SELECT 1 FROM {} WHERE false", table));
    return ep.CacheReport(0).find("catalog refreshes 0") == std::string::npos;
  }));
}

void Admin(const PgCluster& c, const std::string& sql) {
  auto r = RunPsql(c, sql);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
}

TEST_CASE("two Endpoints share results through Redis; writes through either reach both; Redis down and back") {
  const PgCluster& c = SharedPgCluster();
  Admin(c, "DROP TABLE IF EXISTS h9_shared; CREATE TABLE h9_shared(id int primary key, v text); "
           "INSERT INTO h9_shared VALUES (1, 'one'), (2, 'two'), (3, 'three')");
  RedisServer redis;
  IoThread io1, io2;
  auto ep1 = MakeShared(io1, Origin(c, "h9_ep1"), redis.url());
  auto ep2 = MakeShared(io2, Origin(c, "h9_ep2"), redis.url());
  REQUIRE(PollUntil([&] { return ep1->Stats().redis_up && ep2->Stats().redis_up; }));
  auto s1 = Session(io1, *ep1);
  auto s2 = Session(io2, *ep2);
  WarmCatalog(io1, *s1, *ep1, "h9_shared");
  WarmCatalog(io2, *s2, *ep2, "h9_shared");

  const std::string q = "SELECT v FROM h9_shared WHERE id = 1";
  // (Counters as deltas: the warm-up reads above are shared too.)
  const size_t served_before = ep2->Stats().shared_served;
  const size_t hits_before = ep2->Stats().shared_hits;
  CHECK(Value(io1, *s1, q) == "one");
  REQUIRE(PollUntil([&] { return redis.Entries() >= 1; }));  // the Put is asynchronous

  // Endpoint 2 has never run it: served from Redis, the origin not asked.
  size_t origin2 = ep2->Stats().queries;
  CHECK(Value(io2, *s2, q) == "one");
  CHECK(ep2->Stats().queries == origin2);
  CHECK(ep2->Stats().shared_served == served_before + 1);
  CHECK(ep2->Stats().shared_hits == hits_before + 1);
  // ...and it filled Endpoint 2's local tier: the next one does not ask Redis.
  CHECK(Value(io2, *s2, q) == "one");
  CHECK(ep2->Stats().shared_hits == hits_before + 1);
  CHECK(ep2->Stats().queries == origin2);

  // A write through Endpoint 2: Endpoint 1's next read is fresh once the
  // invalidation arrives (pub/sub; measured here).
  const size_t received = ep1->Stats().shared_invalidations_received;
  const auto write_sent = Clock::now();
  CHECK(Run(io2, *s2, "UPDATE h9_shared SET v = 'uno' WHERE id = 1").sqlstate.empty());
  REQUIRE(PollUntil([&] { return ep1->Stats().shared_invalidations_received > received; }, 5s));
  const auto delay = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - write_sent);
  WARN("the invalidation reached the other Endpoint within " << delay.count() << " us of sending the write");
  size_t origin1 = ep1->Stats().queries;
  Result fresh = Run(io1, *s1, q);
  CHECK(fresh.Cell() == "uno");
  CHECK(ep1->Stats().queries == origin1 + 1);  // from the origin, not a stale copy in Redis
  // ...and Endpoint 1 told its Client to drop the entry too (an 'I' link
  // control message, pushed to the idle session before this answer).
  bool told_client = false;
  for (const Message& m : fresh.messages) told_client |= m.tag == 'h' && !m.payload.empty() && m.payload[0] == 'I';
  CHECK(told_client);
  // ...and Endpoint 2 does not serve the old Redis entry either.
  CHECK(Value(io2, *s2, q) == "uno");

  // Redis stops: both keep answering correctly, from their local tiers and
  // the origin, and say so.
  redis.Stop();
  REQUIRE(PollUntil([&] { return !ep1->Stats().redis_up && !ep2->Stats().redis_up; }));
  CHECK(ep1->Stats().redis_errors > 0);
  CHECK(Value(io1, *s1, "SELECT v FROM h9_shared WHERE id = 2") == "two");
  CHECK(Value(io2, *s2, "SELECT v FROM h9_shared WHERE id = 2") == "two");
  CHECK(Run(io1, *s1, "UPDATE h9_shared SET v = 'dos' WHERE id = 2").sqlstate.empty());
  CHECK(Value(io1, *s1, "SELECT v FROM h9_shared WHERE id = 2") == "dos");

  // Redis returns: both reconnect; Endpoint 2 dropped what it may have
  // missed while unsubscribed (Endpoint 1's write above), and sharing works.
  redis.Start();
  REQUIRE(PollUntil([&] { return ep1->Stats().redis_up && ep2->Stats().redis_up; }));
  CHECK(Value(io2, *s2, "SELECT v FROM h9_shared WHERE id = 2") == "dos");
  const std::string q3 = "SELECT v FROM h9_shared WHERE id = 3";
  CHECK(Value(io1, *s1, q3) == "three");
  REQUIRE(PollUntil([&] { return redis.Entries() >= 1; }));
  origin2 = ep2->Stats().queries;
  const size_t served2 = ep2->Stats().shared_served;
  CHECK(Value(io2, *s2, q3) == "three");
  CHECK(ep2->Stats().queries == origin2);
  CHECK(ep2->Stats().shared_served == served2 + 1);
}

TEST_CASE("a Redis that stops answering costs at most its timeout, then is left alone until it answers") {
  const PgCluster& c = SharedPgCluster();
  Admin(c, "DROP TABLE IF EXISTS h9_slow; CREATE TABLE h9_slow(id int, v text); "
           "INSERT INTO h9_slow SELECT g, 'v' || g FROM generate_series(1, 20) g");
  RedisServer redis;
  IoThread io;
  auto ep = MakeShared(io, Origin(c, "h9_slow"), redis.url());  // redis_timeout 200 ms
  REQUIRE(PollUntil([&] { return ep->Stats().redis_up; }));
  auto s = Session(io, *ep);
  WarmCatalog(io, *s, *ep, "h9_slow");
  redis.Pause();
  // The first miss waits for Redis at most its timeout, then goes to the origin.
  auto started = Clock::now();
  CHECK(Value(io, *s, "SELECT v FROM h9_slow WHERE id = 1") == "v1");
  const auto first = Clock::now() - started;
  CHECK(first < 2s);
  REQUIRE(PollUntil([&] { return !ep->Stats().redis_up; }));
  CHECK(ep->Stats().redis_errors > 0);
  // While it is down, misses do not wait for it at all.
  started = Clock::now();
  for (int id = 2; id <= 11; ++id) CHECK(Value(io, *s, fmt::format("SELECT v FROM h9_slow WHERE id = {}", id)) == fmt::format("v{}", id));
  const auto ten = Clock::now() - started;
  WARN("first miss with Redis stopped: " << std::chrono::duration_cast<std::chrono::milliseconds>(first).count()
       << " ms; ten more misses: " << std::chrono::duration_cast<std::chrono::milliseconds>(ten).count() << " ms");
  CHECK(ten < 2s);
  redis.Resume();
  REQUIRE(PollUntil([&] { return ep->Stats().redis_up; }));
  CHECK(Value(io, *s, "SELECT v FROM h9_slow WHERE id = 12") == "v12");
  REQUIRE(PollUntil([&] { return redis.Entries() >= 1; }));
}

TEST_CASE("entries never cross roles through Redis") {
  const PgCluster& c = SharedPgCluster();
  Admin(c, fmt::format("DROP TABLE IF EXISTS h9_roles; CREATE TABLE h9_roles(id int, v text); "
                       "INSERT INTO h9_roles VALUES (1, 'x'); GRANT SELECT ON h9_roles TO {}",
                       c.scram.user));
  RedisServer redis;
  IoThread io1, io2;
  auto admin_ep = MakeShared(io1, RoleOrigin(c, c.admin, c.host, c.port), redis.url());
  auto scram_ep = MakeShared(io2, RoleOrigin(c, c.scram, c.host, c.port), redis.url());
  REQUIRE(PollUntil([&] { return admin_ep->Stats().redis_up && scram_ep->Stats().redis_up; }));
  auto s1 = Session(io1, *admin_ep);
  auto s2 = Session(io2, *scram_ep);
  WarmCatalog(io1, *s1, *admin_ep, "h9_roles");
  WarmCatalog(io2, *s2, *scram_ep, "h9_roles");
  const std::string q = "SELECT v FROM h9_roles WHERE id = 1";
  CHECK(Value(io1, *s1, q) == "x");
  REQUIRE(PollUntil([&] { return redis.Entries() >= 1; }));
  const size_t origin2 = scram_ep->Stats().queries;
  CHECK(Value(io2, *s2, q) == "x");
  CHECK(scram_ep->Stats().queries == origin2 + 1);  // its own origin query
  CHECK(scram_ep->Stats().shared_hits == 0);
  CHECK(scram_ep->Stats().shared_misses >= 1);
  // Same role, other Endpoint: shared.
  IoThread io3;
  auto admin_ep2 = MakeShared(io3, RoleOrigin(c, c.admin, c.host, c.port), redis.url());
  REQUIRE(PollUntil([&] { return admin_ep2->Stats().redis_up; }));
  auto s3 = Session(io3, *admin_ep2);
  WarmCatalog(io3, *s3, *admin_ep2, "h9_roles");
  const size_t origin3 = admin_ep2->Stats().queries;
  CHECK(Value(io3, *s3, q) == "x");
  CHECK(admin_ep2->Stats().queries == origin3);
}

TEST_CASE("the Endpoint tier uses the Cache its options' factory makes") {
  const PgCluster& c = SharedPgCluster();
  Admin(c, "DROP TABLE IF EXISTS h9_plugin; CREATE TABLE h9_plugin(id int, v text); "
           "INSERT INTO h9_plugin VALUES (1, 'p')");
  auto log = std::make_shared<RecordingCache::Log>();
  IoThread io;
  auto ep = MakeEndpointWith(io, Origin(c, "h9_plugin"), 2, 5s, [log](EndpointOptions& o) {
    o.cache.factory = [log](const MemoryCacheLimits& limits) {
      return std::make_unique<RecordingCache>(log, MakeMemoryCache(limits));
    };
  });
  auto s = Session(io, *ep);
  WarmCatalog(io, *s, *ep, "h9_plugin");
  const size_t lookups = log->Count("Lookup");
  CHECK(Value(io, *s, "SELECT v FROM h9_plugin WHERE id = 1") == "p");
  CHECK(Value(io, *s, "SELECT v FROM h9_plugin WHERE id = 1") == "p");
  CHECK(log->Count("Lookup") == lookups + 2);
  CHECK(log->Count("Complete") >= 1);
  CHECK(ep->Stats().cache_served >= 1);
  CHECK(Run(io, *s, "UPDATE h9_plugin SET v = 'q'").sqlstate.empty());
  CHECK(log->Count("InvalidateTables") >= 1);
}

// An origin that can be made to refuse: a pass-through proxy in front of
// the fixture, stopped to take the origin away.
struct Refusable {
  std::unique_ptr<wan::WanProxy> proxy;
  explicit Refusable(const PgCluster& c) {
    wan::WanOptions o;
    o.target_host = c.host;
    o.target_port = c.port;
    auto p = wan::WanProxy::StartThread(o);
    REQUIRE(p.ok());
    proxy = std::move(*p);
  }
};

TEST_CASE("stale-if-error serves an expired result when the origin refuses; off by default; never after a write") {
  const PgCluster& c = SharedPgCluster();
  Admin(c, "DROP TABLE IF EXISTS h9_stale; CREATE TABLE h9_stale(id int, v text); "
           "INSERT INTO h9_stale VALUES (1, 'old')");
  Refusable origin(c);
  const std::string url = RoleOrigin(c, c.admin, "127.0.0.1", origin.proxy->port());
  auto short_lived = [](std::chrono::milliseconds stale_if_error) {
    return [stale_if_error](EndpointOptions& o) {
      o.cache.max_age = 1s;
      o.cache.stale_while_revalidate = 0ms;
      o.cache.stale_if_error = stale_if_error;
      o.pool.connect_timeout = 1s;
      o.pool.acquire_timeout = 3s;
    };
  };
  IoThread io_on, io_off;
  auto on = MakeEndpointWith(io_on, url, 2, 3s, short_lived(60s));
  auto off = MakeEndpointWith(io_off, url, 2, 3s, short_lived(0ms));
  auto reader = Session(io_on, *on);
  auto writer = Session(io_on, *on);
  auto plain = Session(io_off, *off);
  WarmCatalog(io_on, *reader, *on, "h9_stale");
  WarmCatalog(io_off, *plain, *off, "h9_stale");
  const std::string q = "SELECT v FROM h9_stale WHERE id = 1";
  CHECK(Value(io_on, *reader, q) == "old");
  CHECK(Value(io_off, *plain, q) == "old");
  // The writer's own write (of another table: the entry stays) bars it.
  Admin(c, "DROP TABLE IF EXISTS h9_stale_w; CREATE TABLE h9_stale_w(id int)");
  CHECK(Run(io_on, *writer, "INSERT INTO h9_stale_w VALUES (1)").sqlstate.empty());
  // (A write to a table created after the catalog was read drops every
  // entry: this read re-stores its result.)
  CHECK(Value(io_on, *writer, q) == "old");
  // The same read in the extended protocol (a unit up to its Sync):
  // Parse, Bind, Describe, Execute, Sync, and after them a simple Query
  // that must not be taken for the rest of that unit.
  const std::string eq = "SELECT v FROM h9_stale WHERE id = $1";
  auto extended_then_query = [&](LinkClient& s) {
    std::string batch;
    protocol::Encode(protocol::Parse{"", eq, {}}, batch);
    protocol::Bind bind;
    bind.parameters.push_back(std::string_view("1"));
    protocol::Encode(bind, batch);
    protocol::Encode(protocol::Describe{protocol::ObjectKind::kPortal, ""}, batch);
    protocol::Encode(protocol::Execute{"", 0}, batch);
    protocol::Encode(protocol::Sync{}, batch);
    protocol::Encode(protocol::Query{"SELECT 'after', now()"}, batch);  // never cached
    REQUIRE(Await(io_on, s.Send(batch)).ok());
    Result unit = Await(io_on, s.ReadUntilReady());
    Result after = Await(io_on, s.ReadUntilReady());
    return std::make_pair(unit, after);
  };
  {
    auto [unit, after] = extended_then_query(*reader);
    CHECK(unit.status == 'I');
    CHECK(unit.Cell() == "old");
    CHECK(after.sqlstate.empty());
    CHECK(after.Cell() == "after");
  }

  origin.proxy->Stop();
  // Past max_age (1 s), and the pools' connections gone.
  const auto expired = Clock::now() + 1100ms;
  REQUIRE(PollUntil([&] {
    return Clock::now() > expired && on->Stats().origin_open == 0 && off->Stats().origin_open == 0;
  }));

  Result stale = Run(io_on, *reader, q);
  INFO(stale.sqlstate << " " << stale.error_message);
  CHECK(stale.sqlstate.empty());
  CHECK(stale.Cell() == "old");
  CHECK(on->Stats().cache_stale_if_error == 1);

  {
    // Stale-if-error answers the extended unit up to its Sync, once: the
    // Query after it is the session's next unit (and, with the origin
    // gone, refused).
    auto [unit, after] = extended_then_query(*reader);
    INFO(unit.sqlstate << " " << unit.error_message);
    CHECK(unit.sqlstate.empty());
    CHECK(unit.status == 'I');
    CHECK(unit.Cell() == "old");
    CHECK(after.sqlstate == "08001");
    CHECK(after.status == 'I');
    CHECK(on->Stats().cache_stale_if_error == 2);
  }

  Result refused = Run(io_off, *plain, q);  // default: off
  CHECK(refused.sqlstate == "08001");
  CHECK(off->Stats().cache_stale_if_error == 0);

  Result after_write = Run(io_on, *writer, q);
  CHECK(after_write.sqlstate == "08001");
  CHECK(on->Stats().cache_stale_if_error == 2);

  // Still within the bound: served again; a session keeps working after it.
  Result again = Run(io_on, *reader, q);
  INFO(again.sqlstate << " " << again.error_message);
  CHECK(again.Cell() == "old");
  CHECK(on->Stats().cache_stale_if_error == 3);
}

}  // namespace
}  // namespace hyperpool::testing
