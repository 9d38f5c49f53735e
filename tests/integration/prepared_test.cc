// Prepared statements through the transaction pool, against the fixture's
// real PostgreSQL 15, with Endpoint sessions over in-process links
// (statement_session.h): client names never collide on a shared origin
// connection, statements follow their client to any connection, unnamed
// statements and pipelines behave as on a direct connection, stale plans
// after DDL re-prepare, and SQL-level PREPARE pins the client.
#include <chrono>
#include <string>
#include <thread>
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


std::unique_ptr<Endpoint> MakeEndpoint(IoThread& io, std::string origin, std::size_t pool_size) {
  return MakeEndpointWith(io, std::move(origin), pool_size, 5s);
}

std::string BindExec(std::string_view statement, std::vector<std::string> values = {}) {
  return Bind(statement, std::move(values)) + Execute() + Sync();
}

// Sends `bytes` and reads one Result per ReadyForQuery expected.
std::vector<Result> Send(IoThread& io, LinkClient& client, std::string bytes, int ready_count = 1) {
  REQUIRE(Await(io, client.Send(std::move(bytes))).ok());
  std::vector<Result> results;
  for (int i = 0; i < ready_count; ++i) results.push_back(Await(io, client.ReadUntilReady(), 10s));
  return results;
}
Result Send1(IoThread& io, LinkClient& client, std::string bytes) { return Send(io, client, std::move(bytes))[0]; }

// The tags of a result, errors with their SQLSTATE ("1 2 T D C Z", "E:26000 Z").
std::string Tags(const Result& r) {
  std::string s;
  for (const auto& m : r.messages) {
    if (m.tag == 'h') continue;  // link control (cache invalidations), not PostgreSQL's
    if (!s.empty()) s += ' ';
    s += m.tag;
    if (m.tag == 'E') {
      auto e = protocol::DecodeErrorResponse(m.payload);
      if (e.ok()) s += ":" + std::string(e->sqlstate());
    }
  }
  return s;
}

TEST_CASE("two sessions use one statement name for different texts on a pool of 1") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_prep_names"), 1);
  auto a = OpenSession(io, *ep);
  auto b = OpenSession(io, *ep);
  Result ra = Send1(io, *a, Parse("S_1", "SELECT 'a' || $1::text") + DescribeS("S_1") + Sync());
  CHECK(ra.sqlstate.empty());
  Result rb = Send1(io, *b, Parse("S_1", "SELECT 'b' || $1::text") + DescribeS("S_1") + Sync());
  CHECK(rb.sqlstate.empty());  // no 42P05
  for (int i = 0; i < 3; ++i) {
    Result x = Send1(io, *a, BindExec("S_1", {std::to_string(i)}));
    CHECK(x.Cell() == "a" + std::to_string(i));
    Result y = Send1(io, *b, BindExec("S_1", {std::to_string(i)}));
    CHECK(y.Cell() == "b" + std::to_string(i));
  }
  ep->Stop();
}

TEST_CASE("a statement prepared on one connection is used after the pool gives another") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_prep_move"), 2);
  auto a = OpenSession(io, *ep);
  auto h1 = OpenSession(io, *ep);
  auto h2 = OpenSession(io, *ep);
  // h1 holds one connection while a prepares on the other.
  REQUIRE(Send1(io, *h1, QueryBytes("BEGIN")).status == 'T');
  Result prepared = Send1(io, *a, Parse("S_1", "SELECT pg_backend_pid()") + BindExec("S_1"));
  REQUIRE(prepared.sqlstate.empty());
  const std::string pid_a = prepared.Cell();
  REQUIRE(Send1(io, *h1, QueryBytes("COMMIT")).status == 'I');
  // Now h1 and h2 take both connections; the one holding a's keeps it.
  Result p1 = Send(io, *h1, QueryBytes("BEGIN") + QueryBytes("SELECT pg_backend_pid()"), 2)[1];
  Result p2 = Send(io, *h2, QueryBytes("BEGIN") + QueryBytes("SELECT pg_backend_pid()"), 2)[1];
  LinkClient& other = p1.Cell() == pid_a ? *h2 : *h1;
  const std::string pid_other = p1.Cell() == pid_a ? p2.Cell() : p1.Cell();
  REQUIRE(pid_other != pid_a);
  REQUIRE(Send1(io, other, QueryBytes("COMMIT")).status == 'I');
  Result moved = Send1(io, *a, BindExec("S_1"));
  CHECK(moved.sqlstate.empty());  // no 26000
  CHECK(moved.Cell() == pid_other);
  Result described = Send1(io, *a, DescribeS("S_1") + Sync());
  CHECK(Tags(described) == "t T Z");
  ep->Stop();
}

TEST_CASE("Close then re-Parse of the same name with another text") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_prep_close"), 1);
  auto a = OpenSession(io, *ep);
  CHECK(Send1(io, *a, Parse("S_1", "SELECT 1") + BindExec("S_1")).Cell() == "1");
  Result closed = Send1(io, *a, CloseS("S_1") + Sync());
  CHECK(Tags(closed) == "3 Z");
  Result again = Send1(io, *a, Parse("S_1", "SELECT 2") + BindExec("S_1"));
  CHECK(again.sqlstate.empty());
  CHECK(again.Cell() == "2");
  // Closed and not re-made: as on a direct connection.
  Send1(io, *a, CloseS("S_1") + Sync());
  CHECK(Send1(io, *a, BindExec("S_1")).sqlstate == "26000");
  ep->Stop();
}

TEST_CASE("several unnamed Parses in one pipeline, and the unnamed statement across Syncs") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_prep_unnamed"), 1);
  auto a = OpenSession(io, *ep);
  auto b = OpenSession(io, *ep);
  std::string flight;
  for (int i = 1; i <= 3; ++i) flight += Parse("", fmt::format("SELECT {}", i)) + Bind("") + Execute();
  flight += Sync();
  Result r = Send1(io, *a, flight);
  CHECK(Tags(r) == "1 2 D C 1 2 D C 1 2 D C Z");
  REQUIRE(r.rows.size() == 3);
  CHECK(r.Cell(2) == "3");
  // Parse / Sync, then Bind / Sync: b's work in between replaced the
  // connection's unnamed statement; a's is re-parsed before its Bind.
  CHECK(Send1(io, *a, Parse("", "SELECT 'mine'") + Sync()).sqlstate.empty());
  CHECK(Send1(io, *b, Parse("", "SELECT 'theirs'") + BindExec("")).Cell() == "theirs");
  CHECK(Send1(io, *a, BindExec("")).Cell() == "mine");
  ep->Stop();
}

TEST_CASE("an error mid-pipeline with several Syncs affects only its own Sync group") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_prep_pipeline"), 1);
  auto a = OpenSession(io, *ep);
  CHECK(Send1(io, *a, Parse("S_ok", "SELECT 'ok'") + DescribeS("S_ok") + Sync()).sqlstate.empty());
  std::string flight = Parse("S_1", "SELECT 1") + BindExec("S_1") +                 // group 1: fine
                       Parse("S_bad", "SELECT * FROM no_such_table") + BindExec("S_bad") +  // group 2: fails
                       Parse("S_ok2", "SELECT 'ok'") + Parse("S_2", "SELECT 2") + BindExec("S_2") +  // group 3
                       BindExec("S_ok");                                              // group 4
  std::vector<Result> r = Send(io, *a, flight, 4);
  CHECK(Tags(r[0]) == "1 2 D C Z");
  CHECK(Tags(r[1]) == "E:42P01 Z");
  CHECK(Tags(r[2]) == "1 1 2 D C Z");
  CHECK(r[2].Cell() == "2");
  CHECK(r[3].Cell() == "ok");
  // In one Sync group: the error skips the rest, including a synthetic ParseComplete.
  std::string group = Bind("S_missing") + Execute() + Parse("S_ok3", "SELECT 'ok'") + Sync();
  CHECK(Tags(Send1(io, *a, group)) == "E:26000 Z");
  CHECK(Send1(io, *a, BindExec("S_ok")).Cell() == "ok");
  // A name the client holds: 42P05 "prepared statement ... already exists",
  // and the statement stays as it was.
  CHECK(Tags(Send1(io, *a, Parse("S_ok", "SELECT 'other'") + BindExec("S_ok"))) == "E:42P05 Z");
  CHECK(Send1(io, *a, BindExec("S_ok")).Cell() == "ok");
  ep->Stop();
}

TEST_CASE("after DDL, cached plan must not change result type until the client prepares again, as directly") {
  const PgCluster& pg = SharedPgCluster();
  REQUIRE(RunPsql(pg, "DROP TABLE IF EXISTS hp_prep_ddl; CREATE TABLE hp_prep_ddl(a int); "
                      "INSERT INTO hp_prep_ddl VALUES (1); GRANT ALL ON hp_prep_ddl TO PUBLIC")
              .ok());
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_prep_ddl"), 1);
  auto a = OpenSession(io, *ep);
  Result first = Send1(io, *a, Parse("S_1", "SELECT * FROM hp_prep_ddl") + BindExec("S_1"));
  REQUIRE(first.sqlstate.empty());
  CHECK(first.rows.at(0).size() == 1);
  REQUIRE(RunPsql(pg, "ALTER TABLE hp_prep_ddl ADD COLUMN b int DEFAULT 2").ok());
  // PostgreSQL 15 on a direct connection: every Bind of S_1 fails from now on
  // (the statement stays invalid) until the client prepares it again.
  for (int i = 0; i < 2; ++i) {
    Result stale = Send1(io, *a, BindExec("S_1"));
    CHECK(stale.sqlstate == "0A000");
    CHECK(stale.status == 'I');
  }
  Result fresh = Send1(io, *a, CloseS("S_1") + Parse("S_1", "SELECT * FROM hp_prep_ddl") + BindExec("S_1"));
  CHECK(fresh.sqlstate.empty());
  REQUIRE(fresh.rows.size() == 1);
  CHECK(fresh.rows[0].size() == 2);
  ep->Stop();
}

TEST_CASE("SQL-level PREPARE pins the client to its connection until DEALLOCATE") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_prep_sql"), 2);
  auto a = OpenSession(io, *ep);
  auto b = OpenSession(io, *ep);
  Result prep = Send1(io, *a, QueryBytes("PREPARE q(int) AS SELECT $1 * 2, pg_backend_pid()"));
  REQUIRE(prep.command_tags == std::vector<std::string>{"PREPARE"});
  Result first = Send1(io, *a, QueryBytes("EXECUTE q(21)"));
  REQUIRE(first.Cell() == "42");
  const std::string pid = first.Cell(0, 1);
  // The pinned connection is not lent to b, whatever b does.
  for (int i = 0; i < 5; ++i) {
    Result other = Send1(io, *b, QueryBytes("SELECT pg_backend_pid()"));
    CHECK(other.Cell() != pid);
    Result again = Send1(io, *a, QueryBytes("EXECUTE q(1)"));
    CHECK(again.sqlstate.empty());
    CHECK(again.Cell(0, 1) == pid);
  }
  auto in_use = RunPsql(pg, fmt::format("SELECT state FROM pg_stat_activity WHERE pid = {}", pid));
  REQUIRE(in_use.ok());
  CHECK(*in_use == "idle");  // open, idle between a's transactions, and a's alone
  // a's connection is outside the pool's cap (max_pinned); only unpinned
  // ones (b's, perhaps one more) are back in the pool.
  CHECK(ep->Stats().pinned_connections == 1);
  CHECK(ep->Stats().origin_idle >= 1);
  CHECK(ep->Stats().origin_idle <= 2);
  REQUIRE(Send1(io, *a, QueryBytes("DEALLOCATE q")).command_tags == std::vector<std::string>{"DEALLOCATE"});
  CHECK(Send1(io, *a, QueryBytes("EXECUTE q(1)")).sqlstate == "26000");
  ep->Stop();
}

TEST_CASE("DISCARD ALL clears the client's statements; they can be prepared again") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_prep_discard"), 1);
  auto a = OpenSession(io, *ep);
  auto b = OpenSession(io, *ep);
  REQUIRE(Send1(io, *a, Parse("S_1", "SELECT 1") + BindExec("S_1")).Cell() == "1");
  REQUIRE(Send1(io, *b, Parse("T_1", "SELECT 'b'") + BindExec("T_1")).Cell() == "b");
  Result discard = Send1(io, *a, QueryBytes("DISCARD ALL"));
  REQUIRE(discard.command_tags == std::vector<std::string>{"DISCARD ALL"});
  CHECK(Send1(io, *a, BindExec("S_1")).sqlstate == "26000");  // gone, as on a direct connection
  CHECK(Send1(io, *a, Parse("S_1", "SELECT 11") + BindExec("S_1")).Cell() == "11");
  // b's statement vanished from the shared connection too: it is re-prepared.
  CHECK(Send1(io, *b, BindExec("T_1")).Cell() == "b");
  ep->Stop();
}

TEST_CASE("a Parse-only unit (PQprepare) of a statement the origin parsed is answered without waiting") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_prep_local"), 1);
  auto holder = OpenSession(io, *ep);
  auto a = OpenSession(io, *ep);
  auto first = OpenSession(io, *ep);
  // The first prepare of a text goes to the origin (pgbench: one client's).
  REQUIRE(Tags(Send1(io, *first, Parse("P_0", "SELECT $1::int + 1") + Sync())) == "1 Z");
  REQUIRE(Send1(io, *holder, QueryBytes("BEGIN")).status == 'T');  // the only connection
  Result prep = Send1(io, *a, Parse("P_0", "SELECT $1::int + 1") + Sync());
  CHECK(Tags(prep) == "1 Z");
  REQUIRE(Send1(io, *holder, QueryBytes("COMMIT")).status == 'I');
  CHECK(Send1(io, *a, BindExec("P_0", {"41"})).Cell() == "42");
  // A statement the origin rejects reports its error at the Parse, as
  // directly (libpq's PQprepare fails): it goes to the origin.
  CHECK(Tags(Send1(io, *a, Parse("P_1", "SELEC 1") + Sync())) == "E:42601 Z");
  CHECK(Tags(Send1(io, *a, Parse("P_2", "SELECT * FROM no_such_table") + Sync())) == "E:42P01 Z");
  CHECK(Send1(io, *a, BindExec("P_1")).sqlstate == "26000");  // never made
  ep->Stop();
}

}  // namespace
}  // namespace hyperpool::testing
