// The origin connection lifecycle against the fixture's real PostgreSQL 15:
// dead idle connections are never lent, a cancel of a unit waiting for the
// pool ends it at once, backend termination ends the session with the
// origin's FATAL, every way out of COPY leaves the pool whole, and the
// operator's query and idle-in-transaction timeouts.
#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <fmt/format.h>

#include "hyperpool/endpoint.h"
#include "support/pg_fixture.h"
#include "unit/endpoint/endpoint_test_util.h"

namespace hyperpool::testing {
namespace {

using namespace std::chrono_literals;

std::string Origin(const PgCluster& pg, const PgRole& role, std::string_view params) {
  return fmt::format("postgresql://{}:{}@{}:{}/{}?{}", role.user, role.password, pg.host, pg.port, pg.database,
                     params);
}

std::unique_ptr<Endpoint> MakeEndpoint(IoThread& io, EndpointOptions options) {
  auto ep = Endpoint::Create(io.executor(), options);
  REQUIRE(ep.ok());
  return std::move(*ep);
}

// A session link with its own hyperpool.session_id, past link-ready.
std::unique_ptr<LinkClient> OpenSessionWithId(IoThread& io, Endpoint& ep, const std::string& id,
                                              const std::string& application_name = "hp_lifecycle") {
  LinkPair pair = MakeInProcessLinkPair(io.executor(), io.executor());
  ep.Accept(std::move(pair.second));
  auto client = std::make_unique<LinkClient>(std::move(pair.first));
  protocol::StartupMessage hello;
  hello.parameters.emplace_back("application_name", application_name);
  hello.parameters.emplace_back("hyperpool.session_id", id);
  std::string out;
  protocol::Encode(hello, out);
  REQUIRE(Await(io, client->Send(std::move(out))).ok());
  REQUIRE(Await(io, client->ReadUntilReady()).status == 'I');
  return client;
}

// A cancel link for session `id` (link protocol, 5).
void SendCancelLink(IoThread& io, Endpoint& ep, const std::string& id) {
  LinkPair pair = MakeInProcessLinkPair(io.executor(), io.executor());
  ep.Accept(std::move(pair.second));
  LinkClient cancel(std::move(pair.first));
  protocol::StartupMessage hello;
  hello.parameters.emplace_back("hyperpool.cancel_session", id);
  std::string out;
  protocol::Encode(hello, out);
  REQUIRE(Await(io, cancel.Send(std::move(out))).ok());
  cancel.Close();
}

// Polls `sql` (as the admin) until it prints `expected`, for up to 10 s.
std::string PollPsql(const PgCluster& pg, const std::string& sql, const std::string& expected) {
  std::string last;
  for (int i = 0; i < 200; ++i) {
    auto out = RunPsql(pg, sql);
    last = out.ok() ? *out : std::string(out.status().message());
    if (last == expected) break;
    std::this_thread::sleep_for(50ms);
  }
  return last;
}

template <typename Done>
bool PollFor(Done done, std::chrono::milliseconds limit = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// Reads raw link bytes until a frame with `tag` arrives (COPY responses come
// without a ReadyForQuery).
asio::awaitable<bool> ReadUntilTag(LinkClient& client, std::string& buffer, char tag) {
  for (;;) {
    std::size_t pos = 0;
    while (buffer.size() - pos >= 5) {
      const auto* p = reinterpret_cast<const unsigned char*>(buffer.data() + pos);
      const std::size_t len = (std::size_t{p[1]} << 24) | (std::size_t{p[2]} << 16) | (std::size_t{p[3]} << 8) | p[4];
      if (buffer.size() - pos < len + 1) break;
      if (static_cast<char>(p[0]) == tag) {
        buffer.erase(0, pos + len + 1);
        co_return true;
      }
      pos += len + 1;
    }
    buffer.erase(0, pos);
    auto n = co_await client.link().Receive(buffer);
    if (!n.ok()) co_return false;
  }
}

// The pool is whole: `n` sessions each run a transaction at the same time
// and all finish within a deadline (each needs its own connection while in
// its transaction, so a leaked or wedged slot makes one wait and fail).
void CheckPoolWhole(IoThread& io, Endpoint& ep, int n) {
  std::vector<std::unique_ptr<LinkClient>> sessions;
  for (int i = 0; i < n; ++i) sessions.push_back(OpenSessionWithId(io, ep, fmt::format("whole{:011d}", i)));
  for (auto& s : sessions) REQUIRE(Await(io, s->Query("BEGIN")).status == 'T');
  for (auto& s : sessions) {
    Result r = Await(io, s->Query("SELECT 1"), 5s);
    CHECK(r.sqlstate.empty());
    CHECK(r.status == 'T');
  }
  for (auto& s : sessions) CHECK(Await(io, s->Query("COMMIT")).status == 'I');
}

TEST_CASE("a pooled connection whose idle backend was terminated is never lent: the next query succeeds") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  EndpointOptions options;
  options.origin = Origin(pg, pg.scram, "sslmode=disable&application_name=hp_idle_dead");
  options.pool.max_size = 1;
  auto ep = MakeEndpoint(io, options);
  auto client = OpenSession(io, *ep);
  Result pid = Await(io, client->Query("SELECT pg_backend_pid()"));
  REQUIRE(pid.status == 'I');
  REQUIRE(ep->Stats().origin_idle == 1);

  REQUIRE(RunPsql(pg, "SELECT pg_terminate_backend(" + pid.Cell() + ")").ok());
  REQUIRE(PollPsql(pg, "SELECT count(*) FROM pg_stat_activity WHERE pid = " + pid.Cell(), "0") == "0");

  Result next = Await(io, client->Query("SELECT pg_backend_pid()"));
  INFO(next.error_message);
  CHECK(next.sqlstate.empty());
  CHECK(next.status == 'I');
  CHECK(next.Cell() != pid.Cell());
  ep->Stop();
}

TEST_CASE("a terminated idle backend lent again before its idle watch is armed is caught at lend (poll), never lent") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  EndpointOptions options;
  options.origin = Origin(pg, pg.scram, "sslmode=require&application_name=hp_idle_poll");
  options.pool.max_size = 1;
  options.pool.idle_watch_delay = std::chrono::hours(1);  // only the check at lend can see it
  auto ep = MakeEndpoint(io, options);
  auto client = OpenSession(io, *ep);
  Result pid = Await(io, client->Query("SELECT pg_backend_pid()"));
  REQUIRE(pid.status == 'I');
  REQUIRE(ep->Stats().origin_idle == 1);
  REQUIRE(RunPsql(pg, "SELECT pg_terminate_backend(" + pid.Cell() + ")").ok());
  REQUIRE(PollPsql(pg, "SELECT count(*) FROM pg_stat_activity WHERE pid = " + pid.Cell(), "0") == "0");
  Result next = Await(io, client->Query("SELECT pg_backend_pid()"));
  INFO(next.error_message);
  CHECK(next.sqlstate.empty());
  CHECK(next.status == 'I');
  CHECK(next.Cell() != pid.Cell());
  CHECK(ep->Stats().discarded == 0);  // no session had to close it
  ep->Stop();
}

TEST_CASE("an idle pooled connection the origin closes is dropped from the pool without any client") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  EndpointOptions options;
  options.origin = Origin(pg, pg.scram, "sslmode=require&application_name=hp_idle_watch");
  options.pool.max_size = 2;
  auto ep = MakeEndpoint(io, options);
  auto client = OpenSession(io, *ep);
  Result pid = Await(io, client->Query("SELECT pg_backend_pid()"));
  REQUIRE(pid.status == 'I');
  REQUIRE(ep->Stats().origin_idle >= 1);
  const std::size_t discarded_before = ep->Stats().origin_discarded;
  REQUIRE(RunPsql(pg, "SELECT pg_terminate_backend(" + pid.Cell() + ")").ok());
  // Over TLS too: the watch sees the socket readable (the FATAL record, then
  // EOF) and the pool closes that connection with no client involved.
  CHECK(PollFor([&] { return ep->Stats().origin_discarded == discarded_before + 1; }));
  CHECK(ep->Stats().discarded == 0);  // no session had to close it
  Result next = Await(io, client->Query("SELECT 1"));
  CHECK(next.sqlstate.empty());
  CHECK(next.Cell() == "1");
  ep->Stop();
}

TEST_CASE("a cancel of a query waiting for a pool connection answers 57014 at once and closes nothing") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  EndpointOptions options;
  options.origin = Origin(pg, pg.scram, "sslmode=disable");
  options.pool.max_size = 1;
  options.pool.acquire_timeout = 20s;
  auto ep = MakeEndpoint(io, options);
  auto holder = OpenSessionWithId(io, *ep, "00000000000000a1");
  auto waiter = OpenSessionWithId(io, *ep, "00000000000000b2");
  REQUIRE(Await(io, holder->Query("BEGIN")).status == 'T');
  Result holder_pid = Await(io, holder->Query("SELECT pg_backend_pid()"));

  // The Endpoint cache may queue a catalog read of its own behind the holder.
  const std::size_t others = ep->Stats().waiting;
  REQUIRE(Await(io, waiter->Send(QueryBytes("SELECT 42"))).ok());
  const bool queued = PollFor([&] { return ep->Stats().waiting == others + 1; });
  INFO("waiting " << ep->Stats().waiting << " open " << ep->Stats().origin_open << " idle " << ep->Stats().origin_idle
                  << " sessions " << ep->Stats().sessions);
  REQUIRE(queued);
  const auto start = std::chrono::steady_clock::now();
  SendCancelLink(io, *ep, "00000000000000b2");
  Result cancelled = Await(io, waiter->ReadUntilReady(), 3s);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(cancelled.sqlstate == "57014");
  CHECK(cancelled.error_message == "canceling statement due to user request");
  CHECK(cancelled.severity == "ERROR");
  CHECK(cancelled.status == 'I');
  CHECK(elapsed < 2s);

  EndpointStats stats = ep->Stats();
  CHECK(stats.waiting == others);  // our waiter left the queue
  CHECK(stats.discarded == 0);
  CHECK(stats.origin_open == 1);
  // The holder's connection and transaction are untouched.
  Result same = Await(io, holder->Query("SELECT pg_backend_pid()"));
  CHECK(same.status == 'T');
  CHECK(same.Cell() == holder_pid.Cell());
  REQUIRE(Await(io, holder->Query("COMMIT")).status == 'I');
  Result after = Await(io, waiter->Query("SELECT 42"));
  CHECK(after.Cell() == "42");
  CHECK(ep->Stats().discarded == 0);
  ep->Stop();
}

TEST_CASE("a backend terminated mid-transaction ends the session with its FATAL 57P01") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  EndpointOptions options;
  options.origin = Origin(pg, pg.scram, "sslmode=disable");
  options.pool.max_size = 1;
  auto ep = MakeEndpoint(io, options);
  auto client = OpenSession(io, *ep);
  REQUIRE(Await(io, client->Query("BEGIN")).status == 'T');
  Result pid = Await(io, client->Query("SELECT pg_backend_pid()"));
  // Killed while running a statement (node-postgres' error tests do this).
  REQUIRE(Await(io, client->Send(QueryBytes("SELECT pg_sleep(30)"))).ok());
  REQUIRE(PollPsql(pg, "SELECT count(*) FROM pg_stat_activity WHERE pid = " + pid.Cell() + " AND state = 'active'",
                   "1") == "1");
  REQUIRE(RunPsql(pg, "SELECT pg_terminate_backend(" + pid.Cell() + ")").ok());
  Result killed = Await(io, client->ReadUntilReady(), 10s);
  CHECK(killed.sqlstate == "57P01");
  CHECK(killed.severity == "FATAL");
  CHECK(killed.error_message == "terminating connection due to administrator command");
  CHECK(killed.closed);
  CHECK(PollFor([&] { return ep->Stats().sessions == 0; }));
  // The pool is fine for everyone else.
  auto other = OpenSession(io, *ep);
  CHECK(Await(io, other->Query("SELECT 1")).Cell() == "1");
  ep->Stop();
}

// ---------------------------------------------------------------------------
// COPY: every way out leaves the origin connection at 'I' or closed.
// ---------------------------------------------------------------------------

enum class CopyExit { kCopyDone, kCopyFail, kSyncThenDone, kQueryInMiddle, kTerminate, kVanish };

TEST_CASE("every way a client leaves COPY FROM STDIN leaves the pool whole") {
  const PgCluster& pg = SharedPgCluster();
  const CopyExit exit = GENERATE(CopyExit::kCopyDone, CopyExit::kCopyFail, CopyExit::kSyncThenDone,
                                 CopyExit::kQueryInMiddle, CopyExit::kTerminate, CopyExit::kVanish);
  CAPTURE(static_cast<int>(exit));
  REQUIRE(RunPsql(pg, "DROP TABLE IF EXISTS hp_copy_exit; CREATE TABLE hp_copy_exit (x int); "
                      "GRANT ALL ON hp_copy_exit TO " + pg.scram.user).ok());
  IoThread io;
  EndpointOptions options;
  options.origin = Origin(pg, pg.scram, "sslmode=disable");
  options.pool.max_size = 2;
  options.pool.acquire_timeout = 3s;
  auto ep = MakeEndpoint(io, options);
  auto client = OpenSession(io, *ep);
  REQUIRE(Await(io, client->Send(QueryBytes("COPY hp_copy_exit FROM STDIN"))).ok());
  std::string buffer;
  REQUIRE(Await(io, ReadUntilTag(*client, buffer, 'G')));
  std::string out;
  protocol::Encode(protocol::CopyData{"1\n2\n"}, out);
  switch (exit) {
    case CopyExit::kCopyDone:
      protocol::Encode(protocol::CopyDone{}, out);
      break;
    case CopyExit::kCopyFail:
      protocol::Encode(protocol::CopyFail{"client says no"}, out);
      break;
    case CopyExit::kSyncThenDone:
      protocol::Encode(protocol::Sync{}, out);  // ignored by PostgreSQL inside COPY
      protocol::Encode(protocol::CopyData{"3\n"}, out);
      protocol::Encode(protocol::CopyDone{}, out);
      break;
    case CopyExit::kQueryInMiddle:
      out += QueryBytes("SELECT 1");  // aborts the COPY (08P01), is never run
      break;
    case CopyExit::kTerminate:
      protocol::Encode(protocol::Terminate{}, out);
      break;
    case CopyExit::kVanish:
      break;
  }
  REQUIRE(Await(io, client->Send(out)).ok());
  if (exit == CopyExit::kVanish) client->Close();
  if (exit == CopyExit::kTerminate || exit == CopyExit::kVanish) {
    CHECK(PollFor([&] { return ep->Stats().sessions == 0; }, 5s));
  } else if (exit == CopyExit::kQueryInMiddle) {
    // PostgreSQL fails the COPY (ERROR 08P01 "unexpected message type 0x51
    // during COPY from stdin") and, having lost protocol sync, ends the
    // connection (FATAL 08P01): the client sees both, then the end.
    Result done = Await(io, client->ReadUntilReady(), 5s);
    CHECK(done.sqlstate == "08P01");
    CHECK(done.closed);
    int fatal = 0;
    for (const auto& m : done.messages) fatal += m.tag == 'E' && m.payload.find("FATAL") != std::string::npos;
    CHECK(fatal == 1);
  } else {
    Result done = Await(io, client->ReadUntilReady(), 5s);
    CHECK(done.status == 'I');
    if (exit == CopyExit::kCopyDone) CHECK(done.command_tags == std::vector<std::string>{"COPY 2"});
    if (exit == CopyExit::kSyncThenDone) CHECK(done.command_tags == std::vector<std::string>{"COPY 3"});
    if (exit == CopyExit::kCopyFail) CHECK(done.sqlstate == "57014");
    // Exactly one ReadyForQuery: the session is in step with the origin.
    Result next = Await(io, client->Query("SELECT count(*) FROM hp_copy_exit"), 5s);
    CHECK(next.sqlstate.empty());
    CHECK(next.Cell() == (exit == CopyExit::kCopyDone ? "2" : exit == CopyExit::kSyncThenDone ? "3" : "0"));
    CHECK(next.status == 'I');
  }
  CheckPoolWhole(io, *ep, 2);
  if (exit == CopyExit::kTerminate) CHECK(ep->Stats().discarded == 0);  // ended with CopyFail, kept
  ep->Stop();
  REQUIRE(RunPsql(pg, "DROP TABLE hp_copy_exit").ok());
}

TEST_CASE("libpq's extended-protocol COPY (Sync sent with Execute, then CopyDone + Sync) is counted right") {
  const PgCluster& pg = SharedPgCluster();
  REQUIRE(RunPsql(pg, "DROP TABLE IF EXISTS hp_copy_ext; CREATE TABLE hp_copy_ext (x int); "
                      "GRANT ALL ON hp_copy_ext TO " + pg.scram.user).ok());
  IoThread io;
  EndpointOptions options;
  options.origin = Origin(pg, pg.scram, "sslmode=disable");
  options.pool.max_size = 1;
  options.pool.acquire_timeout = 3s;
  auto ep = MakeEndpoint(io, options);
  auto client = OpenSession(io, *ep);
  std::string start;
  protocol::Encode(protocol::Parse{"", "COPY hp_copy_ext FROM STDIN", {}}, start);
  protocol::Encode(protocol::Bind{}, start);
  protocol::Encode(protocol::Execute{"", 0}, start);
  protocol::Encode(protocol::Sync{}, start);
  REQUIRE(Await(io, client->Send(start)).ok());
  std::string buffer;
  REQUIRE(Await(io, ReadUntilTag(*client, buffer, 'G')));
  std::string rest;
  protocol::Encode(protocol::CopyData{"5\n"}, rest);
  protocol::Encode(protocol::CopyDone{}, rest);
  protocol::Encode(protocol::Sync{}, rest);
  REQUIRE(Await(io, client->Send(rest)).ok());
  Result done = Await(io, client->ReadUntilReady(), 5s);
  CHECK(done.command_tags == std::vector<std::string>{"COPY 1"});
  CHECK(done.status == 'I');
  Result next = Await(io, client->Query("SELECT sum(x) FROM hp_copy_ext"), 5s);
  CHECK(next.Cell() == "5");
  // The only connection went back to the pool (another session gets it).
  auto other = OpenSession(io, *ep);
  CHECK(Await(io, other->Query("SELECT 1"), 5s).Cell() == "1");
  ep->Stop();
  REQUIRE(RunPsql(pg, "DROP TABLE hp_copy_ext").ok());
}

TEST_CASE("Terminate inside an extended-protocol COPY FROM: CopyFail + Sync for the client, connection returned") {
  const PgCluster& pg = SharedPgCluster();
  REQUIRE(RunPsql(pg, "DROP TABLE IF EXISTS hp_copy_ext_x; CREATE TABLE hp_copy_ext_x (x int); "
                      "GRANT ALL ON hp_copy_ext_x TO " + pg.scram.user).ok());
  IoThread io;
  EndpointOptions options;
  options.origin = Origin(pg, pg.scram, "sslmode=disable");
  options.pool.max_size = 1;
  options.pool.acquire_timeout = 3s;
  auto ep = MakeEndpoint(io, options);
  auto client = OpenSession(io, *ep);
  std::string start;
  protocol::Encode(protocol::Parse{"", "COPY hp_copy_ext_x FROM STDIN", {}}, start);
  protocol::Encode(protocol::Bind{}, start);
  protocol::Encode(protocol::Execute{"", 0}, start);
  protocol::Encode(protocol::Sync{}, start);  // ignored by PostgreSQL: it is read inside COPY
  REQUIRE(Await(io, client->Send(start)).ok());
  std::string buffer;
  REQUIRE(Await(io, ReadUntilTag(*client, buffer, 'G')));
  std::string rest;
  protocol::Encode(protocol::CopyData{"9\n"}, rest);
  protocol::Encode(protocol::Terminate{}, rest);
  REQUIRE(Await(io, client->Send(rest)).ok());
  CHECK(PollFor([&] { return ep->Stats().sessions == 0; }, 5s));
  CHECK(ep->Stats().discarded == 0);
  CheckPoolWhole(io, *ep, 1);
  auto rows = RunPsql(pg, "SELECT count(*) FROM hp_copy_ext_x");
  REQUIRE(rows.ok());
  CHECK(*rows == "0");  // the COPY failed: nothing was written
  ep->Stop();
  REQUIRE(RunPsql(pg, "DROP TABLE hp_copy_ext_x").ok());
}

// The client stops reading, so the Endpoint's Pump parks in the link's Send
// on a full queue; the client's Close must fail that Send (the in-process
// link once only woke receivers: the session stayed alive whenever the pump
// had filled the queue before the client closed, issue 15).
TEST_CASE("a client that leaves during COPY TO STDOUT without reading does not wedge the pool") {
  const PgCluster& pg = SharedPgCluster();
  const bool terminate = GENERATE(false, true);
  CAPTURE(terminate);
  IoThread io;
  EndpointOptions options;
  options.origin = Origin(pg, pg.scram, "sslmode=disable");
  options.pool.max_size = 1;
  options.pool.acquire_timeout = 3s;
  // The query cache's catalog read would compete for the one connection
  // (it took 3.4 s once on a loaded machine, and the COPY's acquire timed
  // out); this test is about the COPY, not the cache.
  options.cache.enabled = false;
  auto ep = MakeEndpoint(io, options);
  auto client = OpenSession(io, *ep);
  // 60 MB: more than the link's queue (64 chunks of at most 256 kB) and the
  // sockets hold, so the origin ends up blocked on the Endpoint.
  REQUIRE(Await(io, client->Send(QueryBytes("COPY (SELECT repeat('x', 1000) FROM generate_series(1, 60000)) "
                                            "TO STDOUT"))).ok());
  std::string buffer;
  REQUIRE(Await(io, ReadUntilTag(*client, buffer, 'H')));
  // The backend waiting to write means the Endpoint stopped reading it: its
  // Pump is parked in Send on the full link. The race made deterministic.
  REQUIRE(PollPsql(pg,
                   "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'ClientWrite' "
                   "AND query LIKE 'COPY (SELECT repeat%'",
                   "1") == "1");
  if (terminate) {
    std::string x;
    protocol::Encode(protocol::Terminate{}, x);
    REQUIRE(Await(io, client->Send(x)).ok());
  }
  client->Close();
  // After Terminate the rest of the result is drained, not forwarded.
  CHECK(PollFor([&] { return ep->Stats().sessions == 0; }, 20s));
  CheckPoolWhole(io, *ep, 1);
  if (terminate) CHECK(ep->Stats().discarded == 0);  // drained to 'I' and returned
  ep->Stop();
}

// ---------------------------------------------------------------------------
// Operator timeouts.
// ---------------------------------------------------------------------------

TEST_CASE("query_timeout cancels the statement on the origin: 57014 due to statement timeout") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  EndpointOptions options;
  options.origin = Origin(pg, pg.scram, "sslmode=disable");
  options.pool.max_size = 1;
  options.query_timeout = 300ms;
  auto ep = MakeEndpoint(io, options);
  auto client = OpenSession(io, *ep);
  CHECK(Await(io, client->Query("SELECT pg_sleep(0.01)")).sqlstate.empty());  // quick ones are untouched
  const auto start = std::chrono::steady_clock::now();
  Result slow = Await(io, client->Query("SELECT pg_sleep(20)"), 10s);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(slow.sqlstate == "57014");
  CHECK(slow.error_message == "canceling statement due to statement timeout");
  CHECK(slow.status == 'I');
  CHECK(elapsed >= 300ms);
  CHECK(elapsed < 5s);
  // The session and its connection carry on.
  CHECK(Await(io, client->Query("SELECT 7")).Cell() == "7");
  CHECK(ep->Stats().discarded == 0);
  ep->Stop();
}

TEST_CASE("idle_in_transaction_timeout ends the session with FATAL 25P03 and frees the connection") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  EndpointOptions options;
  options.origin = Origin(pg, pg.scram, "sslmode=disable");
  options.pool.max_size = 1;
  options.idle_in_transaction_timeout = 300ms;
  auto ep = MakeEndpoint(io, options);
  auto client = OpenSession(io, *ep);
  REQUIRE(Await(io, client->Query("BEGIN")).status == 'T');
  Result pid = Await(io, client->Query("SELECT pg_backend_pid()"));
  // Nothing sent: the FATAL arrives on its own.
  Result ended = Await(io, client->ReadUntilReady(), 5s);
  CHECK(ended.sqlstate == "25P03");
  CHECK(ended.severity == "FATAL");
  CHECK(ended.error_message == "terminating connection due to idle-in-transaction timeout");
  CHECK(ended.closed);
  CHECK(PollPsql(pg, "SELECT count(*) FROM pg_stat_activity WHERE pid = " + pid.Cell(), "0") == "0");
  // The slot is free, and a statement running longer than the timeout
  // outside a transaction block is not "idle in transaction".
  auto other = OpenSession(io, *ep);
  REQUIRE(Await(io, other->Query("SELECT pg_sleep(0.5)")).status == 'I');
  CHECK(Await(io, other->Query("SELECT 2")).Cell() == "2");
  ep->Stop();
}

}  // namespace
}  // namespace hyperpool::testing
