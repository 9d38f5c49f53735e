// Session settings, pins, cancel routing and session pool mode against the
// fixture's real PostgreSQL 15, through Endpoint sessions over in-process
// links (the Client's hello and cancel hello built by hand, as
// docs/architecture.md "The link protocol" describes them).
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include "hyperpool/endpoint.h"
#include "integration/endpoint_origin_util.h"
#include "support/pg_fixture.h"
#include "unit/endpoint/endpoint_test_util.h"

namespace hyperpool::testing {
namespace {

using namespace std::chrono_literals;
using Params = std::vector<std::pair<std::string, std::string>>;


std::unique_ptr<Endpoint> MakeEndpoint(IoThread& io, std::string origin, std::size_t size,
                                       PoolMode mode = PoolMode::kTransaction) {
  return MakeEndpointWith(io, std::move(origin), size, 5s, [mode](EndpointOptions& o) { o.pool.mode = mode; });
}

std::string Hello(const Params& params) {
  protocol::StartupMessage hello;
  for (const auto& [n, v] : params) hello.parameters.emplace_back(n, v);
  std::string out;
  protocol::Encode(hello, out);
  return out;
}

// A session link with hyperpool.session_id = `id` plus `params`.
std::unique_ptr<LinkClient> Open(IoThread& io, Endpoint& ep, const std::string& id, Params params = {}) {
  LinkPair pair = MakeInProcessLinkPair(io.executor(), io.executor());
  ep.Accept(std::move(pair.second));
  auto client = std::make_unique<LinkClient>(std::move(pair.first));
  params.emplace_back("hyperpool.session_id", id);
  REQUIRE(Await(io, client->Send(Hello(params))).ok());
  Result ready = Await(io, client->ReadUntilReady());
  REQUIRE(ready.status == 'I');
  return client;
}

// A cancel link for session `id` (the Client closes it right after the hello).
void SendCancel(IoThread& io, Endpoint& ep, const std::string& id) {
  LinkPair pair = MakeInProcessLinkPair(io.executor(), io.executor());
  ep.Accept(std::move(pair.second));
  LinkClient link(std::move(pair.first));
  REQUIRE(Await(io, link.Send(Hello({{"hyperpool.cancel_session", id}}))).ok());
  Result r = Await(io, link.ReadUntilReady());
  CHECK(r.closed);  // nothing answers a cancel link
}

std::string Q(IoThread& io, LinkClient& c, const std::string& sql) {
  Result r = Await(io, c.Query(sql));
  INFO(sql << " -> " << r.sqlstate << " " << r.error_message);
  CHECK(r.sqlstate.empty());
  return r.Cell();
}

bool HasParameterStatus(const Result& r, std::string_view name) {
  for (const auto& m : r.messages)
    if (m.tag == 'S' && std::string_view(m.payload).starts_with(name)) return true;
  return false;
}

void Terminate(IoThread& io, LinkClient& c) {
  std::string x;
  protocol::Encode(protocol::Terminate{}, x);
  (void)Await(io, c.Send(x));
}

TEST_CASE("a SET holds for its own session across transactions and never shows in another") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_settings"), 1);
  auto a = Open(io, *ep, "a000000000000001");
  auto b = Open(io, *ep, "b000000000000001");
  const std::string origin_zone = Q(io, *b, "SHOW TimeZone");
  const std::string pid = Q(io, *b, "SELECT pg_backend_pid()");

  Result set = Await(io, a->Query("SET TimeZone = 'Asia/Tokyo'"));
  CHECK(set.status == 'I');
  CHECK(HasParameterStatus(set, "TimeZone"));  // as on a direct connection
  CHECK(Q(io, *a, "SHOW TimeZone") == "Asia/Tokyo");
  CHECK(Q(io, *a, "SELECT pg_backend_pid()") == pid);  // one backend for both

  Result seen_by_b = Await(io, b->Query("SHOW TimeZone"));
  CHECK(seen_by_b.Cell() == origin_zone);
  CHECK_FALSE(HasParameterStatus(seen_by_b, "TimeZone"));  // the replay's ParameterStatus is swallowed

  CHECK(Q(io, *a, "BEGIN") == "<none>");
  CHECK(Q(io, *a, "SHOW TimeZone") == "Asia/Tokyo");
  CHECK(Q(io, *a, "COMMIT") == "<none>");
  CHECK(Q(io, *b, "SELECT current_setting('TimeZone')") == origin_zone);
  CHECK(Q(io, *a, "SELECT current_setting('TimeZone')") == "Asia/Tokyo");

  // search_path (a list) and a custom placeholder via set_config, in the extended-free simple protocol.
  Q(io, *a, "SELECT set_config('search_path', 'pg_catalog, \"My Schema\", public', false)");
  Q(io, *a, "SET app.tenant = 'tenant-a'");
  CHECK(Q(io, *b, "SHOW search_path") != "pg_catalog, \"My Schema\", public");
  CHECK(Q(io, *b, "SELECT coalesce(current_setting('app.tenant', true), '')") == "");
  CHECK(Q(io, *a, "SHOW search_path") == "pg_catalog, \"My Schema\", public");
  CHECK(Q(io, *a, "SELECT current_setting('app.tenant')") == "tenant-a");

  // A SET the statement text does not show (inside a function): the origin's
  // ParameterStatus makes the Endpoint read the settings anyway.
  Q(io, *b, "CREATE OR REPLACE FUNCTION hp_set_zone() RETURNS text LANGUAGE sql "
            "AS $$ SELECT set_config('TimeZone', 'Europe/Paris', false) $$");
  Q(io, *b, "SELECT hp_set_zone()");
  CHECK(Q(io, *a, "SHOW TimeZone") == "Asia/Tokyo");
  CHECK(Q(io, *b, "SHOW TimeZone") == "Europe/Paris");
  Q(io, *b, "DROP FUNCTION hp_set_zone()");
  ep->Stop();
}

TEST_CASE("SET in a rolled-back transaction and SET LOCAL do not stick; RESET ALL returns to startup values") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_settings2"), 1);
  auto a = Open(io, *ep, "a000000000000002", {{"TimeZone", "UTC"}, {"DateStyle", "ISO, MDY"}});
  auto b = Open(io, *ep, "b000000000000002");
  const std::string origin_datestyle = Q(io, *b, "SHOW DateStyle");

  CHECK(Q(io, *a, "SHOW TimeZone") == "UTC");
  Await(io, a->Query("BEGIN; SET DateStyle = 'German'; SET TimeZone = 'Asia/Tokyo'; ROLLBACK"));
  Q(io, *b, "SELECT 1");
  CHECK(Q(io, *a, "SHOW DateStyle") == "ISO, MDY");
  CHECK(Q(io, *a, "SHOW TimeZone") == "UTC");

  Await(io, a->Query("BEGIN; SET LOCAL TimeZone = 'Asia/Tokyo'; COMMIT"));
  Q(io, *b, "SELECT 1");
  CHECK(Q(io, *a, "SHOW TimeZone") == "UTC");

  // A function's SET clause lasts for the call only.
  Q(io, *a, "CREATE OR REPLACE FUNCTION hp_f() RETURNS text LANGUAGE sql SET TimeZone = 'Asia/Tokyo' "
            "AS $$ SELECT current_setting('TimeZone') $$");
  CHECK(Q(io, *a, "SELECT hp_f()") == "Asia/Tokyo");
  Q(io, *b, "SELECT 1");
  CHECK(Q(io, *a, "SHOW TimeZone") == "UTC");
  Q(io, *a, "DROP FUNCTION hp_f()");

  auto c = Open(io, *ep, "c000000000000002", {{"TimeZone", "UTC"}});
  Q(io, *c, "SET TimeZone = 'Asia/Tokyo'; SET DateStyle = 'German'");
  CHECK(Q(io, *c, "SHOW TimeZone") == "Asia/Tokyo");
  Q(io, *c, "RESET ALL");
  Terminate(io, *a);
  Q(io, *b, "SELECT 1");
  CHECK(Q(io, *c, "SHOW TimeZone") == "UTC");          // the startup value, as on a direct connection
  CHECK(Q(io, *c, "SHOW DateStyle") == origin_datestyle);
  Q(io, *c, "SET TimeZone = 'Asia/Tokyo'");
  Q(io, *c, "RESET TimeZone");
  Q(io, *b, "SELECT 1");
  CHECK(Q(io, *c, "SHOW TimeZone") == "UTC");
  ep->Stop();
}

TEST_CASE("startup options (-c, --name=value) and GUC startup parameters apply to that session only") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_settings3"), 1);
  auto a = Open(io, *ep, "a000000000000003",
                {{"options", "-c statement_timeout=1234 --lock-timeout=4321"},
                 {"extra_float_digits", "2"},
                 {"application_name", "hp_app_a"}});
  auto b = Open(io, *ep, "b000000000000003");
  CHECK(Q(io, *a, "SHOW statement_timeout") == "1234ms");
  CHECK(Q(io, *a, "SHOW lock_timeout") == "4321ms");
  CHECK(Q(io, *a, "SHOW extra_float_digits") == "2");
  CHECK(Q(io, *a, "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()") == "hp_app_a");
  CHECK(Q(io, *b, "SHOW statement_timeout") == "0");
  CHECK(Q(io, *b, "SHOW lock_timeout") == "0");
  CHECK(Q(io, *b, "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()") == "");
  CHECK(Q(io, *a, "SHOW statement_timeout") == "1234ms");

  // An invalid startup value fails that session's work with the origin's error; others are unaffected.
  auto bad = Open(io, *ep, "d000000000000003", {{"TimeZone", "No/Such_Zone"}});
  Result r = Await(io, bad->Query("SELECT 1"));
  CHECK(r.sqlstate == "22023");
  CHECK(r.status == 'I');
  CHECK(Q(io, *b, "SELECT 1") == "1");
  ep->Stop();
}

TEST_CASE("a temporary table pins its session to one backend; others use another") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_pin_temp"), 2);
  // Named, so that pg_stat_activity can count the backends they hold.
  auto a = Open(io, *ep, "a000000000000004", {{"application_name", "hp_pin_temp"}});
  auto b = Open(io, *ep, "b000000000000004", {{"application_name", "hp_pin_temp"}});
  Q(io, *a, "CREATE TEMP TABLE hp_t (x int)");
  const std::string pid = Q(io, *a, "SELECT pg_backend_pid()");
  for (int i = 0; i < 3; ++i) {
    CHECK(Q(io, *b, "SELECT pg_backend_pid()") != pid);
    Q(io, *a, fmt::format("INSERT INTO hp_t VALUES ({})", i));
  }
  CHECK(Q(io, *a, "SELECT count(*) FROM hp_t") == "3");
  CHECK(Q(io, *a, "SELECT pg_backend_pid()") == pid);
  EndpointStats stats = ep->Stats();
  CHECK(stats.pinned_sessions == 1);
  CHECK(stats.pins_temp_table == 1);
  // The backend is held by the pinned session even while it is idle, outside
  // the pool's cap of 2 (max_pinned defaults to 1).
  auto held = RunPsql(pg, "SELECT count(*) FROM pg_stat_activity WHERE pid = " + pid);
  REQUIRE(held.ok());
  CHECK(*held == "1");
  auto active = RunPsql(pg, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'hp_pin_temp'");
  REQUIRE(active.ok());
  CHECK(std::stoi(*active) <= 3);
  CHECK(stats.pinned_connections == 1);
  Terminate(io, *a);
  for (int i = 0; i < 200 && ep->Stats().pinned_sessions > 0; ++i) std::this_thread::sleep_for(10ms);
  CHECK(ep->Stats().pinned_sessions == 0);
  ep->Stop();
}

TEST_CASE("an advisory lock pins; a vanished pinned client leaves no lock behind") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_pin_lock"), 1);
  auto a = Open(io, *ep, "a000000000000005");
  CHECK(Q(io, *a, "SELECT pg_advisory_lock(424242)") == "");
  CHECK(ep->Stats().pins_advisory_lock == 1);
  auto held = RunPsql(pg, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 424242");
  REQUIRE(held.ok());
  CHECK(*held == "1");
  a->Close();  // vanished: no Terminate
  auto b = Open(io, *ep, "b000000000000005");
  std::string got;
  for (int i = 0; i < 100; ++i) {
    got = Q(io, *b, "SELECT pg_try_advisory_xact_lock(424242)");
    if (got == "t") break;
    std::this_thread::sleep_for(50ms);
  }
  CHECK(got == "t");
  CHECK(ep->Stats().discarded >= 1);
  ep->Stop();
}

TEST_CASE("a cancel link cancels the session's running query within a second; the session stays usable") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_cancel"), 1);
  auto a = Open(io, *ep, "a000000000000006");
  REQUIRE(Await(io, a->Send(QueryBytes("SELECT pg_sleep(30)"))).ok());
  std::this_thread::sleep_for(300ms);
  const auto start = std::chrono::steady_clock::now();
  SendCancel(io, *ep, "a000000000000006");
  Result r = Await(io, a->ReadUntilReady());
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(r.sqlstate == "57014");
  CHECK(r.status == 'I');
  CHECK(elapsed < 1s);
  CHECK(Q(io, *a, "SELECT 42") == "42");
  CHECK(ep->Stats().cancels_forwarded == 1);
  ep->Stop();
}

TEST_CASE("a cancel from an idle session hits no one, even another session's query on the same backend") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_cancel_idle"), 1);
  auto a = Open(io, *ep, "a000000000000007");
  auto b = Open(io, *ep, "b000000000000007");
  const std::string pid = Q(io, *a, "SELECT pg_backend_pid()");
  REQUIRE(Await(io, b->Send(QueryBytes("SELECT pg_sleep(1.5), pg_backend_pid()"))).ok());
  std::this_thread::sleep_for(300ms);
  SendCancel(io, *ep, "a000000000000007");          // a is idle
  SendCancel(io, *ep, "ffffffffffffffff");          // unknown
  Result r = Await(io, b->ReadUntilReady());
  CHECK(r.sqlstate.empty());
  CHECK(r.Cell(0, 1) == pid);
  CHECK(ep->Stats().cancels_ignored == 2);
  CHECK(ep->Stats().cancels_forwarded == 0);
  ep->Stop();
}

TEST_CASE("session pool mode keeps one backend per session and resets it before the next session") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_session_mode"), 1, PoolMode::kSession);
  auto a = Open(io, *ep, "a000000000000008");
  const std::string zone = Q(io, *a, "SHOW TimeZone");
  const std::string pid = Q(io, *a, "SELECT pg_backend_pid()");
  Q(io, *a, "SET TimeZone = 'Asia/Tokyo'");
  CHECK(Q(io, *a, "SELECT pg_backend_pid()") == pid);
  CHECK(Q(io, *a, "SHOW TimeZone") == "Asia/Tokyo");
  Terminate(io, *a);
  auto b = Open(io, *ep, "b000000000000008");
  CHECK(Q(io, *b, "SHOW TimeZone") == zone);
  CHECK(Q(io, *b, "SELECT pg_backend_pid()") == pid);  // the same backend, after DISCARD ALL
  ep->Stop();
}

}  // namespace
}  // namespace hyperpool::testing
