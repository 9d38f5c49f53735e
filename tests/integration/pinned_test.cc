// The pinned budget (src/endpoint/pin_budget.h, docs/architecture.md
// "Session state") against the fixture's real PostgreSQL 15: sessions
// pinned by session state hold connections outside the pool's cap, at most
// max_pinned of them; a statement that would pin one more waits for a
// slot, and fails with the acquire timeout's 53300 leaving nothing behind
// if none comes; an idle pinned session is closed
// after pinned_idle_timeout with 57P05.
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <fmt/format.h>

#include "hyperpool/endpoint.h"
#include "integration/endpoint_origin_util.h"
#include "support/pg_fixture.h"
#include "unit/endpoint/endpoint_test_util.h"
#include "unit/endpoint/frontend_builders.h"

namespace hyperpool::testing {
namespace {

using namespace std::chrono_literals;


std::unique_ptr<Endpoint> MakeEndpoint(IoThread& io, std::string origin, std::size_t size, std::size_t max_pinned,
                                       std::chrono::milliseconds pinned_idle_timeout = 600s) {
  return MakeEndpointWith(io, std::move(origin), size, 2s, [&](EndpointOptions& o) {
    o.max_pinned = max_pinned;
    o.pinned_idle_timeout = pinned_idle_timeout;
  });
}

std::string Count(const PgCluster& pg, const std::string& sql) {
  auto r = RunPsql(pg, sql);
  REQUIRE(r.ok());
  return *r;
}

TEST_CASE("pinned sessions never make ordinary ones wait; beyond max_pinned the pinning statement waits for a slot") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  constexpr int kPool = 4;
  constexpr int kBudget = 3;
  constexpr int kLockers = 6;
  auto ep = MakeEndpointWith(io, Origin(pg, "hp_pin_budget"), kPool, 20s, [](EndpointOptions& o) {
    o.max_pinned = kBudget;
  });
  std::vector<std::unique_ptr<LinkClient>> lockers;
  for (int i = 0; i < kLockers; ++i) {
    lockers.push_back(OpenSession(io, *ep));
    if (i < kBudget) {
      Result r = Await(io, lockers.back()->Query(fmt::format("SELECT pg_advisory_lock({})", 770000 + i)));
      CHECK(r.sqlstate.empty());
    } else {
      // Beyond the budget: sent, and waiting for a pinned slot.
      REQUIRE(Await(io, lockers.back()->Send(QueryBytes(fmt::format("SELECT pg_advisory_lock({})", 770000 + i))))
                  .ok());
    }
  }
  auto locks = [&] {
    return Count(pg, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid BETWEEN 770000 AND 770099");
  };

  // 50 ordinary transactions from 5 sessions complete on the pool's 4
  // connections while the 3 pinned ones stay out of its way and 3 more wait.
  std::vector<std::unique_ptr<LinkClient>> workers;
  for (int i = 0; i < 5; ++i) workers.push_back(OpenSession(io, *ep));
  for (int t = 0; t < 10; ++t) {
    for (auto& w : workers) REQUIRE(Await(io, w->Send(QueryBytes("BEGIN; SELECT 1; COMMIT"))).ok());
    for (auto& w : workers) {
      Result r = Await(io, w->ReadUntilReady(), 10s);
      CHECK(r.sqlstate.empty());
      CHECK(r.status == 'I');
    }
  }
  EndpointStats stats = ep->Stats();
  CHECK(stats.acquire_timeouts == 0);
  CHECK(stats.origin_open <= kPool + kBudget);
  CHECK(stats.pinned_connections == kBudget);
  CHECK(stats.pins_rejected == 0);
  CHECK(locks() == std::to_string(kBudget));  // the waiting statements have not run
  // Ending a pinned session hands its slot to a waiter.
  lockers.front()->Close();
  std::string now = locks();
  for (int i = 0; i < 500 && now != std::to_string(kBudget); ++i) {
    Await(io, workers.front()->Query("SELECT 1"));  // a bounded poll for the session's end
    now = locks();
  }
  CHECK(now == std::to_string(kBudget));
  CHECK(ep->Stats().pinned_connections == kBudget);
  // The rest follow as the pinned sessions end; none is refused.
  for (int i = 1; i < kLockers; ++i) {
    if (i < kBudget) lockers[i]->Close();
  }
  for (int i = kBudget; i < kLockers; ++i) {
    Result r = Await(io, lockers[i]->ReadUntilReady(), 20s);
    CHECK(r.sqlstate.empty());
    CHECK(r.status == 'I');
  }
  CHECK(ep->Stats().pins_rejected == 0);
  ep->Stop();
}

TEST_CASE("a refused pin inside a transaction aborts it as an error would, and leaves no temp table") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_pin_txn"), 2, 1);
  auto holder = OpenSession(io, *ep);
  Result held = Await(io, holder->Query("CREATE TEMP TABLE hp_pin_a (x int)"));
  REQUIRE(held.sqlstate.empty());
  auto b = OpenSession(io, *ep);
  REQUIRE(Await(io, b->Query("BEGIN")).status == 'T');
  Result create = Await(io, b->Query("CREATE TEMP TABLE hp_pin_b (x int)"));
  CHECK(create.sqlstate == "53300");
  CHECK(create.status == 'E');  // as PostgreSQL after an error in a transaction block
  CHECK(Await(io, b->Query("SELECT 1")).sqlstate == "25P02");
  CHECK(Await(io, b->Query("ROLLBACK")).status == 'I');
  CHECK(Await(io, b->Query("SELECT to_regclass('pg_temp.hp_pin_b') IS NULL")).Cell() == "t");

  // Extended protocol (a driver's Parse/Bind/Execute with a parameter).
  REQUIRE(Await(io, b->Send(testing::Parse("lock", "SELECT pg_advisory_lock($1)") + testing::Bind("lock", {"5"}) +
                            testing::Execute() + testing::Sync()))
              .ok());
  Result ext = Await(io, b->ReadUntilReady());
  CHECK(ext.sqlstate == "53300");
  CHECK(ext.status == 'I');
  CHECK(Count(pg, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 5") == "0");
  CHECK(Await(io, b->Query("SELECT 2")).Cell() == "2");
  CHECK(ep->Stats().pins_rejected == 2);
  ep->Stop();
}

TEST_CASE("an idle pinned session is closed after pinned_idle_timeout with 57P05") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_pin_idle"), 2, 1, 300ms);
  auto a = OpenSession(io, *ep);
  auto b = OpenSession(io, *ep);
  REQUIRE(Await(io, a->Query("CREATE TEMP TABLE hp_pin_idle (x int)")).sqlstate.empty());
  // (a is idle from before here on: b's round trip, however slow on a busy
  // machine, counts toward a's timeout, so the clock starts first.)
  const auto start = std::chrono::steady_clock::now();
  CHECK(Await(io, b->Query("SELECT 1")).Cell() == "1");  // b is not pinned: never timed out
  Result fatal = Await(io, a->ReadUntilReady(), 10s);  // nothing sent: waits for the timeout
  CHECK(std::chrono::steady_clock::now() - start >= 250ms);
  CHECK(fatal.sqlstate == "57P05");
  CHECK(fatal.severity == "FATAL");
  CHECK(fatal.error_message == "terminating connection due to idle-session timeout");
  CHECK(fatal.closed);
  // Its connection is gone with it (and the budget back).
  for (int i = 0; i < 500 && ep->Stats().pinned_connections > 0; ++i) Await(io, b->Query("SELECT 1"));
  CHECK(ep->Stats().pinned_connections == 0);
  CHECK(ep->Stats().pinned_idle_timeouts == 1);
  CHECK(Await(io, b->Query("CREATE TEMP TABLE hp_pin_idle2 (x int)")).sqlstate.empty());
  CHECK(Await(io, b->Query("SELECT 3")).Cell() == "3");
  ep->Stop();
}

}  // namespace
}  // namespace hyperpool::testing
