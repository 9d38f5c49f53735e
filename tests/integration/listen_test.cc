// LISTEN/NOTIFY in transaction mode without pinning (src/endpoint/listener.h,
// docs/architecture.md "Session state") against the fixture's real
// PostgreSQL 15: listening sessions hold no pooled connection, idle ones get
// every notification exactly once from the Endpoint's listener connection,
// LISTEN in a rolled-back transaction does not subscribe, UNLISTEN stops
// delivery, and the listener connection comes back after it is killed.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include "hyperpool/endpoint.h"
#include "protocol/codec.h"
#include "integration/endpoint_origin_util.h"
#include "support/pg_fixture.h"
#include "unit/endpoint/endpoint_test_util.h"

namespace hyperpool::testing {
namespace {

using namespace std::chrono_literals;


std::unique_ptr<Endpoint> MakeEndpoint(IoThread& io, std::string origin, std::size_t size) {
  return MakeEndpointWith(io, std::move(origin), size, 2s);  // max_pinned stays at its default
}

struct Note {
  std::string channel;
  std::string payload;
  int pid = 0;
};

// The next NotificationResponse on an idle session's link (bounded wait);
// any other message fails the test.
Note NextNotification(IoThread& io, LinkClient& client) {
  std::optional<Message> m = Await(io, client.ReadOne(), 10s);
  // Link control messages (the query cache's, tag 'h') are the Client's own.
  while (m.has_value() && m->tag == 'h') m = Await(io, client.ReadOne(), 10s);
  REQUIRE(m.has_value());
  REQUIRE(m->tag == 'A');
  auto n = protocol::DecodeNotificationResponse(m->payload);
  REQUIRE(n.ok());
  return {std::string(n->channel), std::string(n->payload), n->process_id};
}

// True once every open pooled connection is idle (none lent), polled with
// a deadline: a LISTEN's connection goes back to the pool just after its
// ReadyForQuery, once it has run UNLISTEN *.
bool AllPooledIdleSoon(Endpoint& ep) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  for (;;) {
    EndpointStats st = ep.Stats();
    if (st.origin_idle == st.origin_open) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
}

void Ok(IoThread& io, LinkClient& c, const std::string& sql, char status = 'I') {
  Result r = Await(io, c.Query(sql));
  INFO(sql << ": " << r.error_message);
  REQUIRE(r.sqlstate.empty());
  REQUIRE(r.status == status);
}

TEST_CASE("20 listening sessions on a pool of 2 get every NOTIFY once and hold no pooled connection") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  constexpr int kListeners = 20;
  constexpr int kNotifies = 5;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_listen_fanout"), 2);
  std::vector<std::unique_ptr<LinkClient>> listeners;
  for (int i = 0; i < kListeners; ++i) {
    listeners.push_back(OpenSession(io, *ep));
    Ok(io, *listeners.back(), "LISTEN hp_fanout");
  }
  EndpointStats stats = ep->Stats();
  CHECK(stats.pinned_sessions == 0);
  CHECK(stats.pinned_connections == 0);
  CHECK(stats.origin_open <= 2);
  CHECK(AllPooledIdleSoon(*ep));  // nothing lent: no listener holds a pooled connection

  // Ordinary work on the same pool never waits behind the listeners.
  std::vector<std::unique_ptr<LinkClient>> workers;
  for (int i = 0; i < 4; ++i) workers.push_back(OpenSession(io, *ep));
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < 10; ++t) {
    for (auto& w : workers) REQUIRE(Await(io, w->Send(QueryBytes("BEGIN; SELECT 1; COMMIT"))).ok());
    for (auto& w : workers) CHECK(Await(io, w->ReadUntilReady(), 10s).status == 'I');
  }
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK(ep->Stats().acquire_timeouts == 0);

  // A 21st session sends; every idle listener gets each one, in order.
  auto sender = OpenSession(io, *ep);
  for (int k = 0; k < kNotifies; ++k) Ok(io, *sender, fmt::format("NOTIFY hp_fanout, 'm{}'", k));
  Ok(io, *sender, "SELECT pg_notify('hp_fanout', 'end')");
  for (auto& l : listeners) {
    for (int k = 0; k < kNotifies; ++k) {
      Note n = NextNotification(io, *l);
      CHECK(n.channel == "hp_fanout");
      CHECK(n.payload == fmt::format("m{}", k));
      CHECK(n.pid != 0);
    }
    CHECK(NextNotification(io, *l).payload == "end");  // no duplicate before it
  }
  stats = ep->Stats();
  CHECK(stats.notifications_delivered == kListeners * (kNotifies + 1));
  CHECK(AllPooledIdleSoon(*ep));
  // A listener still works as an ordinary session.
  Result one = Await(io, listeners.front()->Query("SELECT 1"));
  CHECK(one.Cell() == "1");

  // Inside a transaction block a notification waits for its end, and comes
  // just before the ReadyForQuery 'I' (as from a backend). Another listener
  // getting it first shows the listener connection has fanned it out.
  LinkClient& in_txn = *listeners[0];
  Ok(io, in_txn, "BEGIN", 'T');
  Ok(io, *sender, "NOTIFY hp_fanout, 'in txn'");
  CHECK(NextNotification(io, *listeners[1]).payload == "in txn");
  Result select = Await(io, in_txn.Query("SELECT 1"));
  CHECK(select.status == 'T');
  CHECK_FALSE(select.Has('A'));
  Result commit = Await(io, in_txn.Query("COMMIT"));
  CHECK(commit.status == 'I');
  REQUIRE(commit.messages.size() >= 2);
  CHECK(commit.messages[commit.messages.size() - 2].tag == 'A');  // right before ReadyForQuery
  ep->Stop();
}

TEST_CASE("LISTEN in a rolled-back transaction does not subscribe; UNLISTEN stops delivery; own NOTIFY comes once") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_listen_semantics"), 1);  // one pooled connection: easy to inspect
  auto s = OpenSession(io, *ep);
  auto sender = OpenSession(io, *ep);
  Ok(io, *s, "LISTEN \"Marker\"");  // quoted: case kept

  Ok(io, *s, "BEGIN", 'T');
  Ok(io, *s, "LISTEN hp_rolled_back", 'T');
  Ok(io, *s, "ROLLBACK");
  Ok(io, *s, "LISTEN hp_committed");  // a control for the failing one below
  Result failed = Await(io, s->Query("LISTEN hp_implicit; SELECT 1/0"));
  CHECK(failed.sqlstate == "22012");
  Ok(io, *sender, "NOTIFY hp_rolled_back, 'no'");
  Ok(io, *sender, "NOTIFY hp_implicit, 'no'");
  Ok(io, *sender, "NOTIFY hp_committed, 'yes'");
  Ok(io, *sender, "NOTIFY \"Marker\", 'after rollback'");
  CHECK(NextNotification(io, *s).payload == "yes");
  CHECK(NextNotification(io, *s).payload == "after rollback");

  // Committed in a transaction block: subscribes at COMMIT.
  Ok(io, *s, "BEGIN; LISTEN hp_block; COMMIT");
  Ok(io, *sender, "NOTIFY hp_block, 'block'");
  CHECK(NextNotification(io, *s).payload == "block");

  // UNLISTEN one channel, then UNLISTEN *.
  Ok(io, *s, "UNLISTEN hp_block");
  Ok(io, *sender, "NOTIFY hp_block, 'no'");
  Ok(io, *sender, "NOTIFY \"Marker\", 'after unlisten'");
  CHECK(NextNotification(io, *s).payload == "after unlisten");

  // The pooled connection carries no LISTEN back into the pool.
  Result carried = Await(io, sender->Query("SELECT count(*) FROM pg_listening_channels()"));
  CHECK(carried.Cell() == "0");
  CHECK(ep->Stats().pinned_sessions == 0);

  // A session hears its own NOTIFY, once (as on PostgreSQL).
  Result own = Await(io, s->Query("NOTIFY \"Marker\", 'own'"));
  REQUIRE(own.sqlstate.empty());
  int own_seen = 0;
  for (const auto& m : own.messages) own_seen += m.tag == 'A' ? 1 : 0;
  Ok(io, *sender, "NOTIFY \"Marker\", 'fence'");
  for (;;) {
    Note n = NextNotification(io, *s);
    if (n.payload == "fence") break;
    CHECK(n.payload == "own");
    ++own_seen;
  }
  CHECK(own_seen == 1);

  // LISTEN and NOTIFY in one transaction: heard once, through the lent
  // connection (the listener LISTENs only after the commit).
  Result same = Await(io, s->Query("BEGIN; LISTEN hp_same; NOTIFY hp_same, 'same'; COMMIT"));
  REQUIRE(same.sqlstate.empty());
  int same_seen = 0;
  for (const auto& m : same.messages) same_seen += m.tag == 'A' ? 1 : 0;
  Ok(io, *sender, "NOTIFY hp_same, 'fence'");
  for (;;) {
    Note n = NextNotification(io, *s);
    if (n.payload == "fence") break;
    CHECK(n.payload == "same");
    ++same_seen;
  }
  CHECK(same_seen == 1);

  Ok(io, *s, "UNLISTEN *");
  Ok(io, *s, "LISTEN hp_last");
  Ok(io, *sender, "NOTIFY \"Marker\", 'no'");
  Ok(io, *sender, "NOTIFY hp_last, 'last'");
  CHECK(NextNotification(io, *s).payload == "last");
  ep->Stop();
}

TEST_CASE("a session's own NOTIFY on a channel it listens on arrives before that NOTIFY's ReadyForQuery") {
  // As on a direct connection: drivers (node-postgres, psycopg) expect a
  // self-notification by the time the NOTIFY's result is in. The lent
  // connection does not listen; the copy comes from the listener
  // connection, so the Endpoint waits for it (ListenerConnection::Barrier).
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_listen_own_order"), 2);
  auto s = OpenSession(io, *ep);
  Ok(io, *s, "LISTEN hp_own_order");
  const std::vector<std::string> spellings = {
      "NOTIFY hp_own_order, 'n'",
      "SELECT pg_notify('hp_own_order', 'n')",
      "BEGIN; NOTIFY hp_own_order, 'n'; COMMIT",
  };
  for (int round = 0; round < 10; ++round) {
    for (const std::string& sql : spellings) {
      Result r = Await(io, s->Query(sql));
      REQUIRE(r.sqlstate.empty());
      int notes = 0;
      for (const auto& m : r.messages) notes += m.tag == 'A' ? 1 : 0;
      INFO(sql << " round " << round);
      CHECK(notes == 1);
    }
  }
  ep->Stop();
}

TEST_CASE("a session that queues notifications without bound is ended with 53200, not buffered") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_listen_bound"), 2);
  auto s = OpenSession(io, *ep);
  auto sender = OpenSession(io, *ep);
  Ok(io, *s, "LISTEN hp_flood");
  Ok(io, *s, "BEGIN", 'T');  // in a transaction block: notifications wait for its end
  // About 9.6 MB of notifications in one commit (more than the 8 MiB a
  // session may queue); distinct payloads, since PostgreSQL folds identical ones.
  Ok(io, *sender, "SELECT count(pg_notify('hp_flood', i || repeat('x', 7990))) FROM generate_series(1, 1200) i");
  std::optional<Message> m = Await(io, s->ReadOne(), 20s);
  while (m.has_value() && m->tag == 'h') m = Await(io, s->ReadOne(), 20s);
  REQUIRE(m.has_value());
  REQUIRE(m->tag == 'E');
  auto e = protocol::DecodeErrorResponse(m->payload);
  REQUIRE(e.ok());
  CHECK(std::string(e->sqlstate()) == "53200");
  CHECK(std::string(e->severity()) == "FATAL");
  CHECK(Await(io, s->ClosedByPeer(), 10s));
  // The others go on.
  CHECK(Await(io, sender->Query("SELECT 1")).Cell() == "1");
  ep->Stop();
}

TEST_CASE("the listener connection is reopened after it dies and LISTENs the union again") {
  const PgCluster& pg = SharedPgCluster();
  IoThread io;
  auto ep = MakeEndpoint(io, Origin(pg, "hp_listen_reconnect"), 1);
  auto s = OpenSession(io, *ep);
  auto sender = OpenSession(io, *ep);
  Ok(io, *s, "LISTEN hp_rc");
  // The listener is the backend whose last statement is its own quoted LISTEN.
  const std::string listener_backend =
      "FROM pg_stat_activity WHERE application_name = 'hp_listen_reconnect' AND query LIKE 'LISTEN \"%'";
  auto killed = RunPsql(pg, "SELECT count(pg_terminate_backend(pid)) " + listener_backend);
  REQUIRE(killed.ok());
  REQUIRE(*killed == "1");
  // Bounded poll: a new listener backend, idle after its LISTEN of the union.
  bool back = false;
  for (int i = 0; i < 400 && !back; ++i) {
    auto r = RunPsql(pg, "SELECT count(*) " + listener_backend + " AND state = 'idle' AND query = 'LISTEN \"hp_rc\";'");
    back = r.ok() && *r == "1" && ep->Stats().listener_reconnects == 1;
    if (!back) Await(io, sender->Query("SELECT 1"));  // paces the poll
  }
  REQUIRE(back);
  Ok(io, *sender, "NOTIFY hp_rc, 'after reconnect'");
  CHECK(NextNotification(io, *s).payload == "after reconnect");
  ep->Stop();
}

}  // namespace
}  // namespace hyperpool::testing
