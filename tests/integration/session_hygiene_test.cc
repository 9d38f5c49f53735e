// Session hygiene across pooled clients against the fixture's real
// PostgreSQL 15 (docs/architecture.md, "Session state"): a role change in
// any spelling never reaches the next client of an origin connection, a
// sequence's currval from one session is never visible in another, and an
// app that sets no application_name sees ''.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <fmt/format.h>

#include "hyperpool/endpoint.h"
#include "integration/endpoint_origin_util.h"
#include "support/pg_fixture.h"
#include "unit/endpoint/endpoint_test_util.h"
#include "unit/endpoint/frontend_builders.h"

namespace hyperpool::testing {
namespace {

using namespace std::chrono_literals;
using Params = std::vector<std::pair<std::string, std::string>>;


std::unique_ptr<Endpoint> MakeEndpoint(IoThread& io, std::string origin, std::size_t size) {
  return MakeEndpointWith(io, std::move(origin), size, 5s);
}

std::unique_ptr<LinkClient> Open(IoThread& io, Endpoint& ep, const std::string& id, Params params = {}) {
  LinkPair pair = MakeInProcessLinkPair(io.executor(), io.executor());
  ep.Accept(std::move(pair.second));
  auto client = std::make_unique<LinkClient>(std::move(pair.first));
  params.emplace_back("hyperpool.session_id", id);
  protocol::StartupMessage hello;
  for (const auto& [n, v] : params) hello.parameters.emplace_back(n, v);
  std::string bytes;
  protocol::Encode(hello, bytes);
  REQUIRE(Await(io, client->Send(bytes)).ok());
  Result ready = Await(io, client->ReadUntilReady());
  REQUIRE(ready.status == 'I');
  return client;
}

Result Run(IoThread& io, LinkClient& c, const std::string& sql) {
  Result r = Await(io, c.Query(sql));
  INFO(sql << " -> " << r.sqlstate << " " << r.error_message);
  CHECK(r.sqlstate.empty());
  return r;
}
std::string Q(IoThread& io, LinkClient& c, const std::string& sql) { return Run(io, c, sql).Cell(); }

void Terminate(IoThread& io, LinkClient& c) {
  std::string x;
  protocol::Encode(protocol::Terminate{}, x);
  (void)Await(io, c.Send(x));
}

void EnsureRole(const PgCluster& pg) {
  auto made = RunPsql(pg,
                      "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'hp_r_a') THEN "
                      "CREATE ROLE hp_r_a; END IF; END $$; "
                      "CREATE OR REPLACE FUNCTION hp_become_r_a() RETURNS void LANGUAGE plpgsql AS "
                      "$$ BEGIN PERFORM set_config('role', 'hp_r_a', false); END $$; "
                      "GRANT EXECUTE ON FUNCTION hp_become_r_a() TO PUBLIC");
  REQUIRE(made.ok());
}

struct RoleSpelling {
  std::string label;
  std::string sql;  // a simple Query; empty: the extended form below
};

// Issue 10 item 1: session A changes its role in some spelling; it keeps
// that role on its next statement, and a fresh session B on the same pool
// of one connection runs as the login role.
TEST_CASE("a role change in any spelling stays with its session and never reaches the next client") {
  const PgCluster& pg = SharedPgCluster();
  EnsureRole(pg);
  auto spelling = GENERATE(values<RoleSpelling>({
      {"SET ROLE", "SET ROLE hp_r_a"},
      {"quoted role", "SET \"role\" = 'hp_r_a'"},
      {"SET SESSION quoted mixed case", "SET SESSION \"RoLe\" TO 'hp_r_a'"},
      {"inside a transaction", "BEGIN; SET \"role\" = 'hp_r_a'; COMMIT"},
      {"set_config", "SELECT set_config('role', 'hp_r_a', false)"},
      {"pg_catalog.set_config", "SELECT pg_catalog.set_config('ROLE', 'hp_r_a', false)"},
      {"SESSION AUTHORIZATION", "SET SESSION AUTHORIZATION hp_r_a"},
      {"set_config session_authorization", "SELECT set_config('session_authorization', 'hp_r_a', false)"},
      {"quoted session_authorization", "SET \"Session_Authorization\" = 'hp_r_a'"},
      {"in a DO block", "DO $$ BEGIN PERFORM set_config('role', 'hp_r_a', false); END $$"},
      {"hidden in a function (caught by the release check)", "SELECT hp_become_r_a()"},
      {"extended protocol, name bound as $1", ""},
  }));
  CAPTURE(spelling.label);
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_role_leak"), 1);
  auto a = Open(io, *ep, "a0000000000000r1");
  if (spelling.sql.empty()) {
    REQUIRE(Await(io, a->Send(Parse("", "SELECT pg_catalog.set_config($1, $2, false)") + Bind("", {"role", "hp_r_a"}) +
                                  Execute() + Sync()))
                .ok());
    Result r = Await(io, a->ReadUntilReady());
    CHECK(r.sqlstate.empty());
  } else {
    Run(io, *a, spelling.sql);
  }
  CHECK(Q(io, *a, "SELECT current_user") == "hp_r_a");
  CHECK(Q(io, *a, "SELECT current_user") == "hp_r_a");  // again, after a release point
  Terminate(io, *a);
  auto b = Open(io, *ep, "b0000000000000r1");
  Result who = Run(io, *b, "SELECT current_user, session_user");
  CHECK(who.Cell(0, 0) == pg.admin.user);
  CHECK(who.Cell(0, 1) == pg.admin.user);
  ep->Stop();
}

TEST_CASE("SET LOCAL ROLE lasts for its transaction and neither pins nor leaks") {
  const PgCluster& pg = SharedPgCluster();
  EnsureRole(pg);
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_role_local"), 1);
  auto a = Open(io, *ep, "a0000000000000r2");
  auto b = Open(io, *ep, "b0000000000000r2");
  const std::string pid = Q(io, *b, "SELECT pg_backend_pid()");
  Result r = Run(io, *a, "BEGIN; SET LOCAL ROLE hp_r_a; SELECT current_user; COMMIT");
  CHECK(r.Cell() == "hp_r_a");
  // set_config(name bound as $1, ..., true): local too, so not pinned.
  REQUIRE(Await(io, a->Send(Parse("", "SELECT pg_catalog.set_config($1, $2, true)") + Bind("", {"role", "hp_r_a"}) +
                                Execute() + Sync()))
              .ok());
  CHECK(Await(io, a->ReadUntilReady()).sqlstate.empty());
  CHECK(Q(io, *b, "SELECT current_user") == pg.admin.user);
  CHECK(Q(io, *b, "SELECT pg_backend_pid()") == pid);  // not pinned: the one connection serves both
  CHECK(Q(io, *a, "SELECT current_user") == pg.admin.user);
  CHECK(ep->Stats().pins_set_role == 0);
  ep->Stop();
}

// Issue 10 item 7: a backend's currval/lastval state from one session is
// never visible in the next session that borrows it; a fresh session gets
// 55000 exactly as on a new backend.
TEST_CASE("currval and lastval never show another session's value") {
  const PgCluster& pg = SharedPgCluster();
  auto made = RunPsql(pg,
                      "DROP TABLE IF EXISTS hp_seq_t; DROP SEQUENCE IF EXISTS hp_seq_s; "
                      "CREATE TABLE hp_seq_t (id serial PRIMARY KEY, v int); CREATE SEQUENCE hp_seq_s; "
                      "CREATE OR REPLACE FUNCTION hp_seq_next() RETURNS bigint LANGUAGE sql AS "
                      "$$ SELECT nextval('hp_seq_s') $$");
  REQUIRE(made.ok());
  auto writer = GENERATE(as<std::string>{}, "INSERT INTO hp_seq_t (v) VALUES (1)", "SELECT nextval('hp_seq_s')",
                         "SELECT hp_seq_next()");
  CAPTURE(writer);
  const std::string seq = writer.starts_with("INSERT") ? "hp_seq_t_id_seq" : "hp_seq_s";
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_seq"), 1);
  auto a = Open(io, *ep, "a0000000000000s1");
  auto b = Open(io, *ep, "b0000000000000s1");
  Run(io, *a, writer);
  const std::string value = Q(io, *a, fmt::format("SELECT currval('{}')", seq));
  CHECK(value != "<none>");
  CHECK(Q(io, *a, "SELECT lastval()") == value);  // its own value, in a later transaction

  Result other = Await(io, b->Query(fmt::format("SELECT currval('{}')", seq)));
  CHECK(other.sqlstate == "55000");
  CHECK(other.status == 'I');
  Result last = Await(io, b->Query("SELECT lastval()"));
  CHECK(last.sqlstate == "55000");
  ep->Stop();
}

TEST_CASE("within one session, currval is its latest value or undefined, never an older one of its own") {
  const PgCluster& pg = SharedPgCluster();
  REQUIRE(RunPsql(pg, "DROP SEQUENCE IF EXISTS hp_seq_own; CREATE SEQUENCE hp_seq_own").ok());
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_seq_own"), 2);
  auto a = Open(io, *ep, "a0000000000000s2");
  auto b = Open(io, *ep, "b0000000000000s2");
  // a takes nextval on connection X, then (X held by b's open transaction) on Y.
  Run(io, *a, "SELECT nextval('hp_seq_own')");
  const std::string x = Q(io, *a, "SELECT pg_backend_pid()");
  Run(io, *b, "BEGIN");
  CHECK(Q(io, *b, "SELECT pg_backend_pid()") == x);  // b holds X now (the idle one a just used)
  CHECK(Q(io, *a, "SELECT pg_backend_pid()") != x);
  const std::string latest = Q(io, *a, "SELECT nextval('hp_seq_own')");  // on Y
  Run(io, *b, "COMMIT");
  // Wherever a lands now, currval is its latest value or 55000, never the older 1.
  for (int i = 0; i < 4; ++i) {
    Result r = Await(io, a->Query("SELECT currval('hp_seq_own')"));
    if (r.sqlstate.empty()) {
      CHECK(r.Cell() == latest);
    } else {
      CHECK(r.sqlstate == "55000");
    }
    Run(io, *b, "BEGIN");  // alternate which connection a gets
    Run(io, *b, "SELECT 1");
    Result r2 = Await(io, a->Query("SELECT currval('hp_seq_own')"));
    if (r2.sqlstate.empty()) {
      CHECK(r2.Cell() == latest);
    } else {
      CHECK(r2.sqlstate == "55000");
    }
    Run(io, *b, "COMMIT");
  }
  ep->Stop();
}

// Issue 15 item 4: the origin login's application_name never shows through.
TEST_CASE("an app that sets no application_name sees '', an app's own name is shown") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_appname"), 1);
  auto named = Open(io, *ep, "a0000000000000n1", {{"application_name", "my_app"}});
  auto plain = Open(io, *ep, "b0000000000000n1");
  const std::string activity = "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()";
  CHECK(Q(io, *plain, "SHOW application_name") == "");
  CHECK(Q(io, *plain, activity) == "");
  CHECK(Q(io, *named, "SHOW application_name") == "my_app");
  CHECK(Q(io, *named, activity) == "my_app");
  CHECK(Q(io, *plain, "SHOW application_name") == "");  // the same backend, replayed back
  Run(io, *plain, "SET application_name = 'later'");
  CHECK(Q(io, *named, "SHOW application_name") == "my_app");
  CHECK(Q(io, *plain, "SHOW application_name") == "later");
  Run(io, *plain, "RESET application_name");
  CHECK(Q(io, *plain, "SHOW application_name") == "");
  Terminate(io, *plain);
  Terminate(io, *named);
  ep->Stop();
}

// The Endpoint tier's completed catalog reads, from its report.
long long CatalogRefreshes(const Endpoint& ep) {
  const std::string report = ep.CacheReport(0);
  const std::size_t at = report.find("catalog refreshes ");
  REQUIRE(at != std::string::npos);
  return std::stoll(report.substr(at + 18));
}

// Issue 10 item 11: a table created on the origin directly after the
// catalog was read becomes cacheable within about a second, not after
// max_age.
TEST_CASE("a table created on the origin after the catalog was read is cached after one background refresh") {
  const PgCluster& pg = SharedPgCluster();
  REQUIRE(RunPsql(pg, "DROP TABLE IF EXISTS hp_late_table; CREATE TABLE IF NOT EXISTS hp_known (a int)").ok());
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_late"), 2);
  auto a = Open(io, *ep, "a0000000000000c1");
  // Load the catalog (a decision that needs it) and wait for it.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (CatalogRefreshes(*ep) == 0 && std::chrono::steady_clock::now() < deadline) {
    Run(io, *a, "SELECT count(*) FROM hp_known");
  }
  const long long loaded = CatalogRefreshes(*ep);
  REQUIRE(loaded > 0);

  REQUIRE(RunPsql(pg, "CREATE TABLE hp_late_table (id int, v text); "
                      "INSERT INTO hp_late_table SELECT g, 'v' || g FROM generate_series(1, 10) g")
              .ok());
  const std::size_t units_before = ep->Stats().transactions;
  const std::string q = "SELECT v FROM hp_late_table WHERE id = 3";
  CHECK(Q(io, *a, q) == "v3");  // unknown to the catalog: starts a background refresh
  // The refresh never blocks a unit; a fast loop would outrun it, so wait
  // for it (bounded), well short of max_age (60 s).
  const auto refreshed_by = std::chrono::steady_clock::now() + 10s;
  while (CatalogRefreshes(*ep) == loaded && std::chrono::steady_clock::now() < refreshed_by) {
    std::this_thread::sleep_for(10ms);
  }
  CHECK(CatalogRefreshes(*ep) > loaded);
  for (int i = 1; i < 40; ++i) CHECK(Q(io, *a, q) == "v3");
  const std::size_t origin_units = ep->Stats().transactions - units_before;
  INFO(ep->CacheReport(5));
  CHECK(origin_units <= 3);
  Terminate(io, *a);
  ep->Stop();  // the origin backends exit, which flushes their table statistics
  auto scans = RunPsql(pg, "SELECT seq_scan + coalesce(idx_scan, 0) FROM pg_stat_user_tables "
                           "WHERE relname = 'hp_late_table'");
  REQUIRE(scans.ok());
  INFO("origin scans of hp_late_table: " << *scans);
  CHECK(std::stoll(*scans) <= 3);
}

TEST_CASE("a name that exists nowhere re-reads the catalog at most once a second") {
  const PgCluster& pg = SharedPgCluster();
  REQUIRE(RunPsql(pg, "CREATE TABLE IF NOT EXISTS hp_known (a int)").ok());
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_no_such"), 2);
  auto a = Open(io, *ep, "a0000000000000c2");
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (CatalogRefreshes(*ep) == 0 && std::chrono::steady_clock::now() < deadline) {
    Run(io, *a, "SELECT count(*) FROM hp_known");
  }
  const long long loaded = CatalogRefreshes(*ep);
  REQUIRE(loaded > 0);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 60; ++i) {
    Result r = Await(io, a->Query("SELECT * FROM hp_no_such_table"));
    CHECK(r.sqlstate == "42P01");
  }
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start);
  // The first query's refresh runs in the background: wait for it (bounded).
  const auto refreshed_by = std::chrono::steady_clock::now() + 10s;
  while (CatalogRefreshes(*ep) == loaded && std::chrono::steady_clock::now() < refreshed_by) {
    std::this_thread::sleep_for(10ms);
  }
  const long long now = CatalogRefreshes(*ep);
  INFO("60 queries took " << seconds.count() << " s; refreshes " << loaded << " -> " << now);
  CHECK(now - loaded >= 1);
  CHECK(now - loaded <= 1 + seconds.count() + 1);
  ep->Stop();
}

// The sender pids of the NotificationResponses in `r` with `payload`.
std::vector<std::int32_t> NotifierPidsOf(const Result& r, std::string_view payload) {
  std::vector<std::int32_t> out;
  for (const auto& m : r.messages) {
    if (m.tag != 'A' || m.payload.size() < 4) continue;
    if (m.payload.find(std::string(payload) + '\0') == std::string::npos) continue;
    const auto* u = reinterpret_cast<const unsigned char*>(m.payload.data());
    out.push_back(static_cast<std::int32_t>((std::uint32_t{u[0]} << 24) | (std::uint32_t{u[1]} << 16) |
                                            (std::uint32_t{u[2]} << 8) | u[3]));
  }
  return out;
}

// The sender pids of the notifications with `payload` that `session`
// receives, starting with `first` and then polling with SELECT 1 until one
// arrives (LISTEN is served by the listener connection: delivery is
// asynchronous, as from PostgreSQL to an idle client) or 5 s pass.
std::vector<std::int32_t> AwaitNotification(IoThread& io, LinkClient& session, const Result& first,
                                            std::string_view payload) {
  std::vector<std::int32_t> seen = NotifierPidsOf(first, payload);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (seen.empty() && std::chrono::steady_clock::now() < deadline) {
    seen = NotifierPidsOf(Run(io, session, "SELECT 1"), payload);
  }
  return seen;
}

// Issue 15 item 4: psycopg's test_notify_handlers compares Notify.pid with
// the pid of its BackendKeyData.
TEST_CASE("a notification carries the sender session's app-facing pid, not the origin backend's") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_notify_pid"), 2);
  auto a = Open(io, *ep, "a0000000000000p1", {{"hyperpool.backend_pid", "4242"}});
  auto b = Open(io, *ep, "b0000000000000p1", {{"hyperpool.backend_pid", "5151"}});
  const std::string origin_pid = Q(io, *a, "SELECT pg_backend_pid()");
  CHECK(origin_pid != "4242");
  Run(io, *a, "LISTEN hp_chan");
  CHECK(AwaitNotification(io, *a, Run(io, *a, "NOTIFY hp_chan, 'self'"), "self") == std::vector<std::int32_t>{4242});
  Run(io, *b, "NOTIFY hp_chan, 'other'");
  // A's polling queries may run on the backend B just used: still B's pid.
  CHECK(AwaitNotification(io, *a, Result{}, "other") == std::vector<std::int32_t>{5151});
  ep->Stop();
}

}  // namespace
}  // namespace hyperpool::testing
