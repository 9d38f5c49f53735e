// The two-tier query cache against the real PostgreSQL 15 fixture
// (docs/architecture.md, "Query cache"): hits reach the origin once, volatile
// and transactional work always reaches it, results never cross roles or
// search_path settings, and writes are visible at once.
//
// Apps are psql children (each -c a separate Query on one connection) and
// the demo's blocking client (round-trip timing through a simulated WAN).
// "Reached the origin" is counted by the Endpoint (EndpointStats.transactions:
// units of work the origin answered) and, for the first test, by the origin's
// own pg_stat_user_tables.

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "cli/demo_pg_client.h"
#include "client/client_util.h"
#include "hyperpool/hyperpool.h"
#include "support/pg_fixture.h"
#include "wan/wan_proxy.h"

namespace hyperpool {
namespace {

using Clock = std::chrono::steady_clock;

std::string Origin(const testing::PgCluster& c, const std::string& host, uint16_t port) {
  return "postgresql://" + client::PercentEncode(c.admin.user) + ":" + client::PercentEncode(c.admin.password) + "@" +
         host + ":" + std::to_string(port) + "/" + c.database + "?sslmode=disable";
}

// Runs psql with one -c per statement (separate Query messages, one session).
std::string Psql(const testing::PgCluster& c, const std::string& url, const std::vector<std::string>& sql) {
  std::vector<std::string> argv{c.pgbin + "/psql", "-XAtq", "-v", "ON_ERROR_STOP=1", "-d", url};
  for (const std::string& s : sql) {
    argv.push_back("-c");
    argv.push_back(s);
  }
  auto r = testing::RunCommand(argv);
  REQUIRE(r.ok());
  INFO(r->err);
  REQUIRE(r->exit_code == 0);
  std::string out = r->out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string Admin(const testing::PgCluster& c, const std::string& sql) {
  auto r = testing::RunPsql(c, sql);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return *r;
}

struct Pooler {
  std::unique_ptr<Connection> connection;
  std::string url;
  size_t origin_units() const { return connection->endpoint_stats().transactions; }
};

Pooler Start(const testing::PgCluster& c, const std::string& origin) {
  ConnectOptions options;
  options.endpoint.origin = origin;
  options.endpoint.pool.max_size = 4;
  options.threads = 2;
  auto connection = connect(std::move(options));
  REQUIRE(connection.ok());
  Pooler p;
  p.url = (*connection)->connection_string();
  p.connection = std::move(*connection);
  // The first query makes the Endpoint read the origin's catalog; until it
  // has, nothing is cacheable.
  Psql(c, p.url, {"SELECT count(*) FROM pg_class WHERE false"});
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (p.connection->cache_report().find("catalog refreshes 0") == std::string::npos) break;
    Psql(c, p.url, {"SELECT count(*) FROM pg_class WHERE false"});
  }
  return p;
}

// The Client tier's local hits so far.
long long LocalHits(const Pooler& p) {
  std::string r = p.connection->cache_report();
  size_t at = r.find("local hits ");
  REQUIRE(at != std::string::npos);
  return std::stoll(r.substr(at + 11));
}

// The login of an app connection to the pooler (its connection string:
// postgresql://user:pass@127.0.0.1:port/db?...).
cli::demo::PgLogin AppLogin(const Pooler& p) {
  cli::demo::PgLogin login;
  const std::string& url = p.url;
  size_t at = url.find('@');
  size_t colon = url.find(':', at);
  size_t slash = url.find('/', colon);
  size_t creds = url.find("://") + 3;
  size_t pw = url.find(':', creds);
  login.user = url.substr(creds, pw - creds);
  login.password = url.substr(pw + 1, at - pw - 1);
  login.port = static_cast<uint16_t>(std::stoi(url.substr(colon + 1, slash - colon - 1)));
  login.database = url.substr(slash + 1, url.find('?') - slash - 1);
  return login;
}

// Runs `sql` twice on one connection and twice more on another; returns how
// many of the four reached the origin.
size_t OriginHitsOfFour(const testing::PgCluster& c, Pooler& p, const std::string& sql) {
  size_t before = p.origin_units();
  Psql(c, p.url, {sql, sql});
  Psql(c, p.url, {sql, sql});
  return p.origin_units() - before;
}

TEST_CASE("a repeated cacheable query reaches the origin once, from one app and from another") {
  const auto& c = testing::SharedPgCluster();
  Admin(c, "DROP TABLE IF EXISTS cache_once; CREATE TABLE cache_once(id int, v text); "
           "INSERT INTO cache_once SELECT g, 'v' || g FROM generate_series(1, 50) g; ANALYZE cache_once");
  Pooler p = Start(c, Origin(c, c.host, c.port));
  auto seq_scans = [&] {
    return std::stoll(Admin(c, "SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'cache_once'"));
  };
  // Other backends flush their counters when idle (at most every 10 s).
  auto settle = [&](long long from) {
    long long now = seq_scans();
    for (int i = 0; i < 120 && now == from; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      now = seq_scans();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    return seq_scans();
  };
  long long scans_before = seq_scans();
  size_t before = p.origin_units();
  const std::string q = "SELECT v FROM cache_once WHERE id BETWEEN 3 AND 5 ORDER BY id";
  CHECK(Psql(c, p.url, {q, q, q}) == "v3\nv4\nv5\nv3\nv4\nv5\nv3\nv4\nv5");
  CHECK(Psql(c, p.url, {q}) == "v3\nv4\nv5");
  CHECK(p.origin_units() - before == 1);
  CHECK(settle(scans_before) - scans_before == 1);
  const EndpointStats s = p.connection->endpoint_stats();
  CHECK(s.cache_stores >= 1);
  INFO(p.connection->cache_report());
  CHECK(p.connection->cache_report().find("local hits 0 ") == std::string::npos);  // the Client tier served some
}

TEST_CASE("a cache hit takes far less than an origin round trip") {
  const auto& c = testing::SharedPgCluster();
  Admin(c, "DROP TABLE IF EXISTS cache_rtt; CREATE TABLE cache_rtt(id int primary key, v text); "
           "INSERT INTO cache_rtt VALUES (1, 'one')");
  wan::WanOptions wo;
  wo.target_host = c.host;
  wo.target_port = c.port;
  wo.rtt = std::chrono::milliseconds(20);
  auto proxy = wan::WanProxy::StartThread(wo);
  REQUIRE(proxy.ok());
  Pooler p = Start(c, Origin(c, "127.0.0.1", (*proxy)->port()));
  auto app = cli::demo::PgClient::Connect(AppLogin(p));
  REQUIRE(app.ok());
  auto timed = [&](const std::string& sql) {
    auto t0 = Clock::now();
    auto r = (*app)->Query(sql);
    REQUIRE(r.ok());
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  const std::string q = "SELECT v FROM cache_rtt WHERE id = 1";
  double miss = timed(q);
  double origin = timed("SELECT now()");
  double hit = 1e9;
  for (int i = 0; i < 5; ++i) hit = std::min(hit, timed(q));
  INFO("miss " << miss << " ms, origin " << origin << " ms, hit " << hit << " ms");
  INFO(p.connection->cache_report());
  CHECK(origin >= 19.0);
  CHECK(miss >= 19.0);
  CHECK(hit < 5.0);
  CHECK(hit * 5 < origin);
}

TEST_CASE("volatile functions, row locks and transactions always reach the origin") {
  const auto& c = testing::SharedPgCluster();
  Admin(c, "DROP TABLE IF EXISTS cache_vol; CREATE TABLE cache_vol(id int primary key, v int); "
           "INSERT INTO cache_vol VALUES (1, 10); DROP SEQUENCE IF EXISTS cache_seq; CREATE SEQUENCE cache_seq; "
           "CREATE OR REPLACE FUNCTION cache_volatile_f() RETURNS int LANGUAGE sql VOLATILE AS 'SELECT 7'; "
           "CREATE OR REPLACE FUNCTION cache_immutable_f(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1 * 2'");
  Pooler p = Start(c, Origin(c, c.host, c.port));
  for (const std::string& sql : {
           std::string("SELECT now()"), std::string("SELECT current_timestamp"),
           std::string("SELECT clock_timestamp()"), std::string("SELECT random()"),
           std::string("SELECT nextval('cache_seq')"), std::string("SELECT cache_volatile_f()"),
           std::string("SELECT v FROM cache_vol WHERE id = 1 FOR UPDATE"),
           std::string("SELECT v /* now() */ FROM cache_vol WHERE id = 1 AND now() IS NOT NULL"),
       }) {
    INFO(sql);
    CHECK(OriginHitsOfFour(c, p, sql) == 4);
  }
  // Inside BEGIN ... COMMIT: every statement reaches the origin (neither
  // tier serves anything; the transaction sees its own uncommitted write).
  size_t before = p.origin_units();
  const std::string q = "SELECT v FROM cache_vol WHERE id = 1";
  CHECK(Psql(c, p.url, {q, q}) == "10\n10");  // cached now (one origin unit)
  CHECK(p.origin_units() - before == 1);
  const size_t served = p.connection->endpoint_stats().cache_served;
  const long long local = LocalHits(p);
  CHECK(Psql(c, p.url, {"BEGIN", q, q, "COMMIT"}) == "10\n10");
  CHECK(Psql(c, p.url, {"BEGIN", "UPDATE cache_vol SET v = 11 WHERE id = 1", q, "ROLLBACK", q}) == "11\n10");
  CHECK(p.connection->endpoint_stats().cache_served == served);
  CHECK(LocalHits(p) == local);  // the write (even rolled back) invalidated q: a miss
  // Control: an IMMUTABLE user function over a table is cached.
  CHECK(OriginHitsOfFour(c, p, "SELECT cache_immutable_f(v) FROM cache_vol WHERE id = 1") == 1);
  // Opt-outs: the comment hint, SET hyperpool.cache = off.
  CHECK(OriginHitsOfFour(c, p, "SELECT v /* hyperpool:nocache */ FROM cache_vol WHERE id = 1") == 4);
  before = p.origin_units();
  Psql(c, p.url, {"SET hyperpool.cache = off", q, q});
  CHECK(p.origin_units() - before == 3);  // the SET itself and both reads
}

TEST_CASE("different search_path settings never share cached rows") {
  const auto& c = testing::SharedPgCluster();
  Admin(c, "DROP SCHEMA IF EXISTS cache_a CASCADE; DROP SCHEMA IF EXISTS cache_b CASCADE; "
           "CREATE SCHEMA cache_a; CREATE SCHEMA cache_b; "
           "DROP TABLE IF EXISTS public.cache_sp; CREATE TABLE public.cache_sp(v text); "
           "INSERT INTO public.cache_sp VALUES ('public'); "
           "CREATE TABLE cache_a.cache_sp(v text); INSERT INTO cache_a.cache_sp VALUES ('a'); "
           "CREATE TABLE cache_b.cache_sp(v text); INSERT INTO cache_b.cache_sp VALUES ('b')");
  Pooler p = Start(c, Origin(c, c.host, c.port));
  const std::string q = "SELECT v FROM cache_sp";
  for (int round = 0; round < 2; ++round) {
    CHECK(Psql(c, p.url, {q, q}) == "public\npublic");
    CHECK(Psql(c, p.url, {"SET search_path = cache_a", q, q}) == "a\na");
    CHECK(Psql(c, p.url, {"SET search_path = cache_b", q, q}) == "b\nb");
    CHECK(Psql(c, p.url, {q}) == "public");
  }
}

TEST_CASE("a session's own SET TimeZone keys its cached rows: shared only with sessions whose settings match") {
  // Django and Rails set TimeZone (and more) on every new connection; such
  // sessions still use the Endpoint tier, keyed by their captured settings.
  const auto& c = testing::SharedPgCluster();
  Admin(c, "DROP TABLE IF EXISTS cache_tz; CREATE TABLE cache_tz(id int, t timestamptz); "
           "INSERT INTO cache_tz VALUES (1, '2020-01-01 00:00:00+00')");
  Pooler p = Start(c, Origin(c, c.host, c.port));
  const std::string q = "SELECT t::text FROM cache_tz WHERE id = 1";
  const std::string tokyo = "2020-01-01 09:00:00+09";
  size_t before = p.origin_units();
  CHECK(Psql(c, p.url, {"SET TimeZone = 'Asia/Tokyo'", q, q}) == tokyo + "\n" + tokyo);
  CHECK(p.origin_units() - before == 2);  // the SET and the first read; the second is a hit
  before = p.origin_units();
  CHECK(Psql(c, p.url, {"SET TimeZone = 'America/New_York'", q}) == "2019-12-31 19:00:00-05");
  CHECK(p.origin_units() - before == 2);  // other settings: a miss
  before = p.origin_units();
  CHECK(Psql(c, p.url, {"SET TimeZone = 'Asia/Tokyo'", q}) == tokyo);
  CHECK(p.origin_units() - before == 1);  // same settings as the first session: a hit
  // No SET: the origin's default, never another session's rendering.
  CHECK(Psql(c, p.url, {q, q}) == Admin(c, q) + "\n" + Admin(c, q));
  // SET then RESET: back to the defaults' key; a SET inside a rolled-back
  // transaction changes nothing.
  CHECK(Psql(c, p.url, {"SET TimeZone = 'Asia/Tokyo'", "RESET TimeZone", q}) == Admin(c, q));
  CHECK(Psql(c, p.url, {"BEGIN", "SET TimeZone = 'Asia/Tokyo'", "ROLLBACK", q}) == Admin(c, q));
}

TEST_CASE("roles switched with SET ROLE never see each other's rows under row-level security") {
  const auto& c = testing::SharedPgCluster();
  Admin(c, "DROP TABLE IF EXISTS cache_rls; "
           "DO $$ BEGIN CREATE ROLE cache_alice NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$; "
           "DO $$ BEGIN CREATE ROLE cache_bob NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$; "
           "CREATE TABLE cache_rls(owner text, v text); "
           "INSERT INTO cache_rls VALUES ('cache_alice', 'alice-row'), ('cache_bob', 'bob-row'); "
           "ALTER TABLE cache_rls ENABLE ROW LEVEL SECURITY; "
           "CREATE POLICY own ON cache_rls USING (owner = current_user); "
           "GRANT SELECT ON cache_rls TO cache_alice, cache_bob");
  Pooler p = Start(c, Origin(c, c.host, c.port));
  const std::string q = "SELECT v FROM cache_rls ORDER BY v";
  for (int round = 0; round < 2; ++round) {
    CHECK(Psql(c, p.url, {q, q}) == "alice-row\nbob-row\nalice-row\nbob-row");  // the superuser bypasses RLS
    CHECK(Psql(c, p.url, {"SET ROLE cache_alice", q, q}) == "alice-row\nalice-row");
    CHECK(Psql(c, p.url, {"SET ROLE cache_bob", q, q}) == "bob-row\nbob-row");
    CHECK(Psql(c, p.url, {"SET SESSION AUTHORIZATION cache_alice", q}) == "alice-row");
  }
}

TEST_CASE("an UPDATE is visible at once to the writer and to another app") {
  const auto& c = testing::SharedPgCluster();
  Admin(c, "DROP TABLE IF EXISTS cache_rw; CREATE TABLE cache_rw(id int primary key, v int); "
           "INSERT INTO cache_rw VALUES (1, 100), (2, 200); "
           "DROP VIEW IF EXISTS cache_rw_view; CREATE VIEW cache_rw_view AS SELECT id, v FROM cache_rw");
  Pooler p = Start(c, Origin(c, c.host, c.port));
  const std::string q = "SELECT v FROM cache_rw WHERE id = 1";
  const std::string qv = "SELECT v FROM cache_rw_view WHERE id = 1";
  for (int i = 0; i < 3; ++i) {
    CHECK(Psql(c, p.url, {q, qv, q, qv}) == "100\n100\n100\n100");
    size_t before = p.origin_units();
    std::string writer = Psql(c, p.url, {q, "UPDATE cache_rw SET v = v + 1 WHERE id = 1", q, qv});
    CHECK(writer == std::to_string(100) + "\n" + std::to_string(101) + "\n" + std::to_string(101));
    CHECK(Psql(c, p.url, {q, qv}) == "101\n101");
    CHECK(p.origin_units() - before >= 2);
    // A transaction's write, committed.
    CHECK(Psql(c, p.url, {"BEGIN", "UPDATE cache_rw SET v = v - 1 WHERE id = 1", "COMMIT", q, qv}) == "100\n100");
    CHECK(Psql(c, p.url, {q}) == "100");
  }
  // A write that bypasses hyperpool is not seen until max_age (documented);
  // a write through it always is.
  Psql(c, p.url, {"UPDATE cache_rw SET v = 5 WHERE id = 2"});
  CHECK(Psql(c, p.url, {"SELECT v FROM cache_rw WHERE id = 2"}) == "5");
}

TEST_CASE("a write inside a transaction block leaves others' cached rows until its COMMIT, then drops them") {
  // As directly: until the COMMIT nobody else sees the block's writes, so
  // the cached rows are still the answer (served without the origin); from
  // the COMMIT on they are gone, for every table the block
  // wrote, and the writer always reads its own writes.
  const auto& c = testing::SharedPgCluster();
  Admin(c, "DROP TABLE IF EXISTS cache_txn_a, cache_txn_b; "
           "CREATE TABLE cache_txn_a(id int primary key, v int); CREATE TABLE cache_txn_b(id int primary key, v int); "
           "INSERT INTO cache_txn_a VALUES (1, 10); INSERT INTO cache_txn_b VALUES (1, 20)");
  Pooler p = Start(c, Origin(c, c.host, c.port));
  auto reader = cli::demo::PgClient::Connect(AppLogin(p));
  auto writer = cli::demo::PgClient::Connect(AppLogin(p));
  REQUIRE(reader.ok());
  REQUIRE(writer.ok());
  auto one = [](std::unique_ptr<cli::demo::PgClient>& app, const std::string& sql) {
    auto r = app->Query(sql);
    INFO(sql);
    REQUIRE(r.ok());
    return r->rows.empty() ? std::string("(none)") : r->rows.back()[0].value_or("NULL");
  };
  const std::string qa = "SELECT v FROM cache_txn_a WHERE id = 1";
  const std::string qb = "SELECT v FROM cache_txn_b WHERE id = 1";
  for (int round = 1; round <= 3; ++round) {
    const int a = 10 + round - 1;
    const int b = 20 + round - 1;
    CHECK(one(*reader, qa) == std::to_string(a));
    CHECK(one(*reader, qb) == std::to_string(b));
    CHECK(one(*reader, qa) == std::to_string(a));  // cached from here on
    one(*writer, "BEGIN");
    one(*writer, "UPDATE cache_txn_a SET v = v + 1 WHERE id = 1");
    one(*writer, "UPDATE cache_txn_b SET v = v + 1 WHERE id = 1");
    CHECK(one(*writer, qa) == std::to_string(a + 1));  // its own write, inside the block
    const size_t before = p.origin_units();
    CHECK(one(*reader, qa) == std::to_string(a));  // not committed: the cached row is the answer
    CHECK(one(*reader, qb) == std::to_string(b));
    CHECK(p.origin_units() == before);
    one(*writer, "COMMIT");
    CHECK(one(*reader, qa) == std::to_string(a + 1));
    CHECK(one(*reader, qb) == std::to_string(b + 1));
    CHECK(p.origin_units() == before + 3);  // COMMIT and both reads
    // COMMIT AND CHAIN commits and stays in a block: committed is committed.
    one(*writer, "BEGIN");
    one(*writer, "UPDATE cache_txn_b SET v = v + 100 WHERE id = 1");
    CHECK(one(*reader, qb) == std::to_string(b + 1));
    one(*writer, "COMMIT AND CHAIN");
    CHECK(one(*reader, qb) == std::to_string(b + 101));
    one(*writer, "UPDATE cache_txn_b SET v = v - 100 WHERE id = 1");
    one(*writer, "COMMIT");
    CHECK(one(*reader, qb) == std::to_string(b + 1));
    // Invalidations (EndpointStats::cache_write_invalidations): an
    // autocommit write when sent, at its CommandComplete and at its commit;
    // a block's writes once, at its commit point; a write after the COMMIT
    // in the same Query again at the ReadyForQuery that commits it.
    auto invalidations = [&p] { return p.connection->endpoint_stats().cache_write_invalidations; };
    size_t from = invalidations();
    one(*writer, "UPDATE cache_txn_a SET v = v + 0 WHERE id = 1");
    CHECK(invalidations() == from + 3);
    from = invalidations();
    one(*writer, "BEGIN");
    one(*writer, "UPDATE cache_txn_a SET v = v + 0 WHERE id = 1");
    one(*writer, "UPDATE cache_txn_b SET v = v + 0 WHERE id = 1");
    CHECK(invalidations() == from);
    one(*writer, "COMMIT");
    CHECK(invalidations() == from + 1);
    one(*writer, "BEGIN");
    one(*writer, "UPDATE cache_txn_b SET v = v + 0 WHERE id = 1");
    from = invalidations();
    one(*writer, "COMMIT; UPDATE cache_txn_a SET v = v + 0 WHERE id = 1");
    CHECK(invalidations() == from + 2);
    // A rolled-back block changes nothing anybody reads.
    one(*writer, "BEGIN");
    one(*writer, "UPDATE cache_txn_a SET v = 0 WHERE id = 1");
    one(*writer, "ROLLBACK");
    CHECK(one(*reader, qa) == std::to_string(a + 1));
    CHECK(one(*writer, qa) == std::to_string(a + 1));
  }
}

TEST_CASE("a table created on the origin after start is cacheable from the second read of a burst") {
  const auto& c = testing::SharedPgCluster();
  Admin(c, "DROP TABLE IF EXISTS cache_late");
  Pooler p = Start(c, Origin(c, c.host, c.port));
  // Another connection (not through hyperpool) creates it: no DDL seen.
  Admin(c, "CREATE TABLE cache_late(id int, v text); INSERT INTO cache_late VALUES (1, 'one')");
  const std::string q = "SELECT v FROM cache_late WHERE id = 1";
  size_t before = p.origin_units();
  std::string out = Psql(c, p.url, std::vector<std::string>(40, q));
  CHECK(out.find("one") != std::string::npos);
  INFO(p.connection->cache_report());
  CHECK(p.origin_units() - before <= 2);
}

}  // namespace
}  // namespace hyperpool
