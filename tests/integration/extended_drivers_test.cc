// Real drivers through hyperpool's extended-protocol work against the
// PostgreSQL 15 fixture (docs/architecture.md, "Statement metadata at the
// Client" and "Query cache"): each driver program of tests/drivers/
// (extended_*) runs as a child process against an in-process pooler, which
// counts what reached the origin (EndpointStats.transactions) and what the
// Client answered itself (Connection::cache_report()).
//
// Drivers: postgres.js (prepare: true), asyncpg, psycopg 3
// (prepare_threshold=0), node-postgres (named statements), PgJDBC
// (prepareThreshold=1).

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "client/client_util.h"
#include "hyperpool/hyperpool.h"
#include "support/pg_fixture.h"

namespace hyperpool {
namespace {

const std::string kDrivers = std::string(HYPERPOOL_SOURCE_DIR) + "/tests/drivers/";

std::string Origin(const testing::PgCluster& c) {
  return "postgresql://" + client::PercentEncode(c.admin.user) + ":" + client::PercentEncode(c.admin.password) + "@" +
         c.host + ":" + std::to_string(c.port) + "/" + c.database + "?sslmode=disable";
}

// Runs one driver program; returns its stdout (one JSON line per step).
std::string Run(const std::string& driver, const std::string& url, std::vector<std::string> args) {
  std::vector<std::string> argv;
  if (driver == "postgresjs") {
    argv = {"node", kDrivers + "extended_postgresjs.mjs", url};
  } else if (driver == "pg") {
    argv = {"node", kDrivers + "extended_pg.mjs", url};
  } else if (driver == "asyncpg" || driver == "psycopg") {
    argv = {"/usr/bin/python3", kDrivers + "extended_py.py", driver, url};
  } else {
    argv = {"java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", "/usr/share/java/postgresql.jar",
            kDrivers + "ExtendedJdbc.java", url};
  }
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = testing::RunCommand(argv);
  REQUIRE(r.ok());
  INFO(driver << " " << args[0] << "\nstdout: " << r->out << "\nstderr: " << r->err);
  REQUIRE(r->exit_code == 0);
  return r->out;
}

struct Pooler {
  std::unique_ptr<Connection> connection;
  std::string url;
  size_t origin_units() const { return connection->endpoint_stats().transactions; }
  // A counter of the cache report ("<name> N").
  long long Counter(const std::string& name) const {
    std::string r = connection->cache_report();
    size_t at = r.find(name + " ");
    REQUIRE(at != std::string::npos);
    return std::stoll(r.substr(at + name.size() + 1));
  }
};

Pooler Start(const testing::PgCluster& c, bool cache) {
  ConnectOptions options;
  options.endpoint.origin = Origin(c);
  options.endpoint.pool.max_size = 4;
  options.endpoint.cache.enabled = cache;
  options.client.cache.enabled = cache;
  options.threads = 2;
  auto connection = connect(std::move(options));
  REQUIRE(connection.ok());
  Pooler p;
  p.url = (*connection)->connection_string();
  p.connection = std::move(*connection);
  return p;
}

// The tables exist, and (cache on) the Endpoint has read the catalog since
// they were made: until it has, nothing reading them is cacheable.
void Setup(const testing::PgCluster& c, Pooler& p, bool cache) {
  Run("asyncpg", Origin(c), {"setup"});
  Run("postgresjs", Origin(c), {"setup"});
  if (!cache) return;
  const long long refreshes = p.Counter("catalog refreshes");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (p.Counter("catalog refreshes") == refreshes && std::chrono::steady_clock::now() < deadline) {
    Run("postgresjs", p.url, {"reads", "catalog", "1"});  // a cacheable read asks for the catalog
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(p.Counter("catalog refreshes") > refreshes);
}

TEST_CASE("each driver's repeated cacheable read reaches the origin once") {
  const auto& c = testing::SharedPgCluster();
  const std::string driver = GENERATE("postgresjs", "asyncpg", "psycopg", "pg", "jdbc");
  Pooler p = Start(c, /*cache=*/true);
  Setup(c, p, true);
  // Whatever the driver runs at connect (postgres.js's type query) is cached
  // by the first run.
  Run(driver, p.url, {"reads", "warm" + driver, "1"});
  // Distinct texts per run: a run of N repetitions costs the origin what a
  // run of one does.
  size_t before = p.origin_units();
  Run(driver, p.url, {"reads", "once" + driver, "1"});
  const size_t once = p.origin_units() - before;
  before = p.origin_units();
  const long long hits = p.Counter("local hits");
  const std::string got = Run(driver, p.url, {"reads", "six" + driver, "6"});
  const size_t six = p.origin_units() - before;
  INFO(driver << ": one run " << once << " origin units, six runs " << six << "\n" << p.connection->cache_report());
  CHECK(once >= 5);
  CHECK(six == once);
  CHECK(p.Counter("local hits") - hits >= 25);  // the five repeated five times more, from the Client tier
  CHECK(got.find("v5") != std::string::npos);
}

TEST_CASE("each driver's write through hyperpool makes its next read fresh") {
  const auto& c = testing::SharedPgCluster();
  const std::string driver = GENERATE("postgresjs", "asyncpg", "psycopg", "pg", "jdbc");
  Pooler p = Start(c, /*cache=*/true);
  Setup(c, p, true);
  const std::string got = Run(driver, p.url, {"write"});
  INFO(got);
  if (driver == "postgresjs") {
    CHECK(got.find("\"changed\":true") != std::string::npos);
  } else {
    const bool fresh = got.find("\"after\": \"w") != std::string::npos || got.find("\"after\":\"w") != std::string::npos;
    CHECK(fresh);
  }
}

TEST_CASE("postgres.js: a second fresh client gets its Parse/Describe answered locally, cache off") {
  const auto& c = testing::SharedPgCluster();
  Pooler p = Start(c, /*cache=*/false);
  Setup(c, p, false);
  Run("postgresjs", p.url, {"reads", "meta", "1"});
  const long long answered = p.Counter("local answers");
  const long long flights = p.Counter("link flights");
  const size_t before = p.origin_units();
  const std::string got = Run("postgresjs", p.url, {"reads", "meta", "1"});
  INFO(p.connection->cache_report());
  CHECK(got.find("\"reads\":[\"v1\",\"v2\",\"v3\",\"v4\",\"v5\"]") != std::string::npos);
  // The type query and five reads; each read's Parse + Describe was answered
  // at the Client and sent with its Bind, so one flight per read.
  CHECK(p.Counter("local answers") - answered >= 5);
  CHECK(p.origin_units() - before == 6);
  // The WAN cost: one link flight per statement execution (the type query
  // and the five reads), nothing for the login, the Describes or the close.
  CHECK(p.Counter("link flights") - flights == 6);
  CHECK(p.Counter("mismatches") == 0);
}

TEST_CASE("postgres.js: a read calling functions before the Endpoint knows the catalog keeps the metadata") {
  // A fresh Endpoint has not read the origin's catalog: the first client's
  // aggregate (count, max) may call anything, so it invalidates every cached
  // row; it is no DDL, so the statement metadata its Describes taught the
  // Client stays and the second fresh client pays one flight per execution
  // (it paid 12 when every "all" also dropped the metadata).
  const auto& c = testing::SharedPgCluster();
  const bool cache = GENERATE(false, true);
  Pooler p = Start(c, cache);
  Run("postgresjs", Origin(c), {"setup"});  // directly: the Endpoint sees no DDL
  const long long first = p.Counter("link flights");
  Run("postgresjs", p.url, {"reads", cache ? "cold1" : "cold0", "1", "agg"});
  INFO(p.connection->cache_report());
  CHECK(p.Counter("link flights") - first == 11);  // type query + 5 x (describe, execute)
  const long long flights = p.Counter("link flights");
  const std::string got = Run("postgresjs", p.url, {"reads", cache ? "cold1" : "cold0", "1", "agg"});
  CHECK(got.find("\"reads\":[\"v1\",\"v2\",\"v3\",\"v4\",\"v5\"]") != std::string::npos);
  if (!cache) CHECK(p.Counter("link flights") - flights == 6);
  if (cache) CHECK(p.Counter("link flights") - flights <= 6);
  CHECK(p.Counter("mismatches") == 0);
}

TEST_CASE("postgres.js: a fresh client on a warm cache sends nothing over the link") {
  const auto& c = testing::SharedPgCluster();
  Pooler p = Start(c, /*cache=*/true);
  Setup(c, p, true);
  // Two clients warm it: the first one's Describe(statement) answers fill
  // the statement metadata, the second one's units are then cache candidates
  // in the form every later client sends them.
  Run("postgresjs", p.url, {"reads", "warm", "1"});
  Run("postgresjs", p.url, {"reads", "warm", "1"});
  const long long flights = p.Counter("link flights");
  const size_t before = p.origin_units();
  const std::string got = Run("postgresjs", p.url, {"reads", "warm", "1"});
  INFO(p.connection->cache_report());
  CHECK(got.find("\"reads\":[\"v1\",\"v2\",\"v3\",\"v4\",\"v5\"]") != std::string::npos);
  // Login, type query, five reads and close all answered beside the app.
  CHECK(p.Counter("link flights") - flights == 0);
  CHECK(p.origin_units() - before == 0);
}

// A driver's transcript of a scenario through hyperpool equals its
// transcript on a direct connection.
void SameAsDirect(const std::string& driver, const std::vector<std::string>& args, bool cache) {
  const auto& c = testing::SharedPgCluster();
  Pooler p = Start(c, cache);
  Setup(c, p, cache);
  const std::string through = Run(driver, p.url, args);
  const std::string direct = Run(driver, Origin(c), args);
  INFO(p.connection->cache_report());
  CHECK(through == direct);
}

TEST_CASE("asyncpg: DDL between prepare and execute gives 0A000; it recovers as directly") {
  const auto& c = testing::SharedPgCluster();
  // DDL made directly on the origin (only the Client's check can see it;
  // with the cache off, as cached rows would hide it until max_age), and
  // DDL through hyperpool (its invalidation drops metadata and rows).
  const bool cache = GENERATE(false, true);
  const bool ddl_through_hyperpool = GENERATE(false, true);
  if (cache && !ddl_through_hyperpool) {
    SUCCEED("cached rows hide DDL made elsewhere until max_age (docs/architecture.md)");
    return;
  }
  Pooler p = Start(c, cache);
  Setup(c, p, cache);
  const long long answered = p.Counter("local answers");
  const std::string through = Run("asyncpg", p.url, {"ddl", ddl_through_hyperpool ? p.url : Origin(c)});
  const std::string direct = Run("asyncpg", Origin(c), {"ddl", Origin(c)});
  INFO(p.connection->cache_report());
  CHECK(through == direct);
  CHECK(through.find("\"after ddl\", \"error\": \"InvalidCachedStatementError\", \"sqlstate\": \"0A000\"") !=
        std::string::npos);
  // The prepare was answered locally (its Parse deferred to the Bind). The
  // 0A000 then comes from the Client's own check when the deferred Parse
  // makes a new server statement, or from the origin when the Endpoint runs
  // the server statement an earlier session prepared; either way the
  // metadata is dropped and the re-prepare reaches the origin.
  CHECK(p.Counter("local answers") - answered >= 1);
}

TEST_CASE("search_path set by SET or at startup never reuses another session's metadata or rows") {
  const std::string driver = GENERATE("asyncpg", "psycopg");
  SameAsDirect(driver, {"search_path"}, true);
}

TEST_CASE("SET ROLE (and set_config('role')) never reuses another session's metadata or rows") {
  // The role's own schema ("$user" in the default search_path) holds a
  // table of the same name with other columns: the same text resolves to
  // another relation, as directly. A server statement another session
  // prepared under the login role is never reused under the role (psycopg
  // failed with 0A000 here while the Endpoint keyed statements by text and
  // types alone; StatementSession::set_scope).
  const bool cache = GENERATE(false, true);
  const std::string driver = GENERATE("asyncpg", "psycopg");
  SameAsDirect(driver, {"role"}, cache);
}

TEST_CASE("postgres.js: DDL made elsewhere between a locally answered Describe and the Bind; it recovers as directly") {
  // The Describe is answered at the Client (a first client taught it the
  // statement); the ALTER runs directly on the origin, where the Endpoint
  // cannot see it; the Bind's result shape is checked and the driver gets
  // what it gets directly.
  SameAsDirect("postgresjs", {"ddl", Origin(testing::SharedPgCluster())}, false);
}

TEST_CASE("a driver's catalog look-up at connect is served by the Client tier until DDL through hyperpool") {
  // postgres.js's type query (pg_catalog.pg_type) runs on every new
  // connection, as Parse + Describe + Bind + Execute + Sync.
  const auto& c = testing::SharedPgCluster();
  Pooler p = Start(c, /*cache=*/true);
  Setup(c, p, true);
  Run("postgresjs", p.url, {"reads", "cat0", "1"});
  size_t before = p.origin_units();
  Run("postgresjs", p.url, {"reads", "cat1", "1"});
  CHECK(p.origin_units() - before == 5);  // the five new reads; the type query was a local hit
  Run("asyncpg", p.url, {"setup"});  // DDL through hyperpool: every tier and all metadata dropped
  before = p.origin_units();
  Run("postgresjs", p.url, {"reads", "cat1", "1"});
  INFO(p.connection->cache_report());
  CHECK(p.origin_units() - before == 6);  // the type query again, and the reads
}

TEST_CASE("postgres.js: 20 statements pipelined on one connection") { SameAsDirect("postgresjs", {"pipeline"}, true); }

}  // namespace
}  // namespace hyperpool
