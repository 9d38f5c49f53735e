// ClientCore (src/client/client_core.h) without sockets or links: the test
// is the driver. It feeds app bytes (ServeLocalHit, then TakeBatch, as
// ClientSession::PumpApp does) and link bytes (OnLinkBytes, as the link
// reader does), and asserts on what goes to the link, what goes to the app
// (and whether it is the received chunk itself or a copy), the events and
// the state (outstanding(), txn_status()).
#include "client/client_core.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <catch2/catch_test_macros.hpp>

#include "cache/tier.h"
#include "client/app_outbox.h"
#include "client/client_cache.h"
#include "client/statement_metadata.h"
#include "hyperpool/options.h"
#include "protocol/codec.h"
#include "protocol/sqlstate.h"
#include "unit/endpoint/frontend_builders.h"

namespace hyperpool::client {
namespace {

namespace pr = protocol;
using hyperpool::testing::QueryBytes;

std::string Frame(char tag, std::string_view payload = {}) {
  std::string out;
  pr::AppendFrame(out, tag, payload);
  return out;
}

// The answer to SELECT 1: RowDescription, DataRow, CommandComplete.
// One int4 column "x": count, name, table oid, column, type 23, size 4,
// typmod -1, text format.
std::string Result() {
  std::string out = Frame('T', std::string("\0\1" "x\0" "\0\0\0\0" "\0\0" "\0\0\0\x17" "\0\4"
                                           "\xff\xff\xff\xff" "\0\0", 22));
  out += Frame('D', std::string("\0\1\0\0\0\1" "1", 7));
  out += Frame('C', std::string("SELECT 1\0", 9));
  return out;
}
std::string Ready(char status = 'I') { return Frame('Z', std::string(1, status)); }

// A Client's shared pieces and one session's core on them.
struct Fixture {
  explicit Fixture(bool cache_on) {
    if (cache_on) tier = std::make_unique<ClientTier>(CacheOptions{});
    config.cache = tier.get();
    config.metadata = &metadata;
    config.max_query_bytes = CacheOptions{}.max_query_bytes;
    config.max_message_length = 1 << 20;
    core.Start(&config, "db", {{"client_encoding", "UTF8"}});
  }

  // As PumpApp: local hits first, then one batch.
  ClientCore::AppBatch App(std::string_view bytes, std::string* hit = nullptr, size_t* hit_size = nullptr) {
    ClientCore::LocalMiss miss;
    std::string answer;
    const size_t n = core.ServeLocalHit(bytes, miss, answer);
    if (hit != nullptr) *hit = answer;
    if (hit_size != nullptr) *hit_size = n;
    return core.TakeBatch(bytes.substr(n), miss, link_open);
  }

  // As the link reader: what the app gets for `buf`; `verbatim`: it is
  // `buf`'s prefix itself (no copy).
  std::string Link(const std::string& buf, bool* verbatim = nullptr, size_t* consumed_out = nullptr) {
    std::string copy;
    AppBytes out(buf, copy);
    size_t consumed = 0;
    events = ClientCore::LinkEvents{};
    REQUIRE(core.OnLinkBytes(buf, out, consumed, events));
    if (consumed_out != nullptr) *consumed_out = consumed;
    if (verbatim != nullptr) *verbatim = out.verbatim();
    return out.verbatim() ? out.Gathered() : copy;
  }

  std::unique_ptr<ClientTier> tier;
  StatementMetadataStore metadata;
  ClientCore::Config config;
  ClientCore core;
  ClientCore::LinkEvents events;
  bool link_open = true;
};

TEST_CASE("ClientCore: a Query goes to the link and its answer comes back as received", "[client][client_core]") {
  Fixture f(false);
  const std::string q = QueryBytes("SELECT now()");
  ClientCore::AppBatch b = f.App(q);
  CHECK(b.consumed == q.size());
  CHECK(b.to_link == q);
  CHECK(b.send_to_link);
  CHECK(b.local.empty());
  CHECK(b.bad.ok());
  CHECK(f.core.outstanding() == 1);

  const std::string answer = Result() + Ready();
  bool verbatim = false;
  CHECK(f.Link(answer, &verbatim) == answer);
  CHECK(verbatim);  // the chunk itself goes to the app
  CHECK(f.events.ready_idle);
  CHECK(f.core.outstanding() == 0);
  CHECK(f.core.txn_status() == 'I');
}

TEST_CASE("ClientCore: a session that only logged in, or was only answered here, holds no extended-protocol state",
          "[client][client_core]") {
  Fixture f(false);
  CHECK_FALSE(f.core.holds_extended_session());  // logged in only
  CHECK(f.core.CacheUsable() == false);           // (no tier in this fixture)
  ClientCore::AppBatch b = f.App(QueryBytes("SELECT now()"));
  REQUIRE(b.send_to_link);
  CHECK(f.core.holds_extended_session());  // made by the first frame to the link
  const std::string answer = Result() + Ready();
  CHECK(f.Link(answer) == answer);
  CHECK(f.core.outstanding() == 0);
}

TEST_CASE("ClientCore: an idle session gives back its extended-protocol state unless the driver's statements are in it",
          "[client][client_core]") {
  Fixture f(false);
  // Nothing to give back while a Query waits for its answer.
  REQUIRE(f.App(QueryBytes("SELECT now()")).send_to_link);
  CHECK_FALSE(f.core.ReleaseIdleState());
  CHECK(f.core.holds_extended_session());
  (void)f.Link(Result() + Ready());
  REQUIRE(f.core.outstanding() == 0);
  CHECK(f.core.ReleaseIdleState());  // idle: nothing a new one would not hold
  CHECK_FALSE(f.core.holds_extended_session());
  // The next unit makes it again and runs as before.
  const std::string q = QueryBytes("SELECT now()");
  ClientCore::AppBatch b = f.App(q);
  CHECK(b.to_link == q);
  CHECK(f.core.holds_extended_session());
  const std::string answer = Result() + Ready();
  CHECK(f.Link(answer) == answer);
  CHECK(f.events.ready_idle);

  // A named statement of the driver's is session state: kept.
  std::string ext;
  pr::Encode(pr::Parse{"s1", "SELECT 1", {}}, ext);
  pr::Encode(pr::Sync{}, ext);
  b = f.App(ext);
  REQUIRE(b.send_to_link);
  (void)f.Link(Frame('1') + Ready());
  REQUIRE(f.core.outstanding() == 0);
  CHECK_FALSE(f.core.ReleaseIdleState());
  CHECK(f.core.holds_extended_session());

  // Inside a transaction: kept.
  Fixture g(false);
  (void)g.App(QueryBytes("BEGIN"));
  (void)g.Link(Frame('C', std::string("BEGIN\0", 6)) + Ready('T'));
  CHECK_FALSE(g.core.ReleaseIdleState());
  CHECK(g.core.holds_extended_session());
}

TEST_CASE("ClientCore: a release offer is an event, not a frame for the app; the link may go only when idle",
          "[client][client_core]") {
  Fixture f(false);
  REQUIRE(f.App(QueryBytes("SELECT now()")).send_to_link);
  CHECK_FALSE(f.core.LinkReleasable());  // a Query waits for its answer
  std::string offer;
  cache::AppendControl(offer, cache::ReleaseControl{true});
  const std::string answer = Result() + Ready();
  CHECK(f.Link(answer + offer) == answer);  // consumed, never forwarded
  CHECK(f.events.release_offered);
  CHECK(f.events.release_wrote);
  CHECK(f.core.LinkReleasable());  // idle, the extended-protocol state given back
  CHECK_FALSE(f.core.holds_extended_session());

  // A Parse forwarded without its Sync: the origin's implicit transaction
  // is open, the link must stay.
  std::string parse;
  pr::Encode(pr::Parse{"", "SELECT 1", {}}, parse);
  (void)f.App(parse);
  CHECK_FALSE(f.core.LinkReleasable());
}

TEST_CASE("ClientCore: a Query the origin skips after a failed extended message is not outstanding",
          "[client][client_core]") {
  // PostgreSQL skips everything after an extended-query error up to Sync:
  // a simple Query or FunctionCall in between gets no ReadyForQuery.
  Fixture f(false);
  std::string bad;
  pr::Encode(pr::Parse{"bad", "selec", {}}, bad);
  std::string error;
  pr::EncodeErrorResponse(error, "ERROR", "42601", "syntax error at end of input");
  REQUIRE(f.App(bad + QueryBytes("SELECT 1") + Frame('S')).send_to_link);
  CHECK(f.core.outstanding() == 2);
  (void)f.Link(error + Ready());
  CHECK(f.core.outstanding() == 0);
  CHECK(f.events.ready_idle);

  // The error arrives before the Sync is sent: a Query sent then is not
  // sent at all (the origin would ignore it); the Sync is.
  REQUIRE(f.App(bad + Frame('H')).send_to_link);
  (void)f.Link(error);
  CHECK_FALSE(f.core.LinkReleasable());  // the origin still owes a Sync's answer
  ClientCore::AppBatch b = f.App(QueryBytes("SELECT 2") + Frame('S'));
  CHECK(b.to_link == Frame('S'));
  CHECK(f.core.outstanding() == 1);
  (void)f.Link(Ready());
  CHECK(f.core.outstanding() == 0);
  CHECK(f.events.ready_idle);
}

TEST_CASE("ClientCore: a ReadyForQuery inside a transaction does not make the session idle", "[client][client_core]") {
  Fixture f(false);
  (void)f.App(QueryBytes("BEGIN"));
  (void)f.Link(Frame('C', std::string("BEGIN\0", 6)) + Ready('T'));
  CHECK(!f.events.ready_idle);
  CHECK(f.core.txn_status() == 'T');
  CHECK(f.core.outstanding() == 0);
}

TEST_CASE("ClientCore: frames split across reads, pipelines and a partial frame", "[client][client_core]") {
  Fixture f(false);
  const std::string q1 = QueryBytes("SELECT now()");
  const std::string q2 = QueryBytes("SELECT 2");
  const std::string both = q1 + q2;
  // Half of the second frame: the first goes, the rest waits.
  ClientCore::AppBatch b = f.App(std::string_view(both).substr(0, q1.size() + 7));
  CHECK(b.consumed == q1.size());
  CHECK(b.to_link == q1);
  CHECK(b.want == q2.size() - 7);
  // Not even its header: the header's size.
  b = f.App(std::string_view(q2).substr(0, 3));
  CHECK(b.consumed == 0);
  CHECK(b.want == 2);
  b = f.App(q2);
  CHECK(b.to_link == q2);
  CHECK(f.core.outstanding() == 2);

  // Answers in two chunks, the second split inside a frame.
  const std::string answers = Result() + Ready() + Result() + Ready();
  const size_t cut = Result().size() + Ready().size() + 3;
  const std::string first = answers.substr(0, cut);
  size_t consumed = 0;
  CHECK(f.Link(first, nullptr, &consumed) == answers.substr(0, cut - 3));
  CHECK(consumed == cut - 3);
  CHECK(f.core.outstanding() == 1);
  CHECK(f.Link(answers.substr(cut - 3)) == answers.substr(cut - 3));
  CHECK(f.core.outstanding() == 0);
}

TEST_CASE("ClientCore: a large DataRow streams through before it is whole", "[client][client_core]") {
  Fixture f(false);
  (void)f.App(QueryBytes("SELECT big"));
  const std::string row = Frame('D', std::string("\0\1\0\0\x10\0", 6) + std::string(4096, 'x'));
  const std::string head = row.substr(0, 1000);
  size_t consumed = 0;
  bool verbatim = false;
  CHECK(f.Link(head, &verbatim, &consumed) == head);
  CHECK(verbatim);
  CHECK(consumed == head.size());
  const std::string rest = row.substr(1000) + Frame('C', std::string("SELECT 1\0", 9)) + Ready();
  CHECK(f.Link(rest, nullptr, &consumed) == rest);
  CHECK(f.core.outstanding() == 0);
}

TEST_CASE("ClientCore: a malformed link header is reported", "[client][client_core]") {
  Fixture f(false);
  (void)f.App(QueryBytes("SELECT 1"));
  std::string bad = "D";
  bad += std::string("\0\0\0\1", 4);  // length 1 < 4
  std::string copy;
  AppBytes out(bad, copy);
  size_t consumed = 0;
  ClientCore::LinkEvents events;
  CHECK(!f.core.OnLinkBytes(bad, out, consumed, events));
}

TEST_CASE("ClientCore: protocol errors and limits end the batch with a SQLSTATE", "[client][client_core]") {
  Fixture f(false);
  SECTION("a backend tag from the app") {
    const std::string q = QueryBytes("SELECT 1");
    ClientCore::AppBatch b = f.App(q + Frame('Z', "I"));
    CHECK(b.to_link == q);  // the frames before it still go
    CHECK(!b.bad.ok());
    CHECK(b.bad_sqlstate == kSqlStateProtocolViolation);
  }
  SECTION("a declared length above the limit") {
    std::string huge = "Q";
    huge += std::string("\0\x20\0\0", 4);  // 2 MiB declared
    ClientCore::AppBatch b = f.App(huge);
    CHECK(!b.bad.ok());
    CHECK(b.bad_sqlstate == kSqlStateProgramLimitExceeded);
    CHECK(b.to_link.empty());
  }
}

TEST_CASE("ClientCore: Terminate ends the batch; alone and without a link nothing is sent", "[client][client_core]") {
  Fixture f(false);
  std::string x;
  pr::Encode(pr::Terminate{}, x);
  f.link_open = false;
  ClientCore::AppBatch b = f.App(x);
  CHECK(b.terminate);
  CHECK(!b.send_to_link);
  f.link_open = true;
  b = f.App(x);
  CHECK(b.terminate);
  CHECK(b.send_to_link);
}

TEST_CASE("ClientCore: a result the Endpoint stores is kept, and the next identical Query is answered here",
          "[client][client_core]") {
  Fixture f(true);
  const std::string q = QueryBytes("SELECT 1");
  CHECK(f.core.CacheUsable());
  {
    ClientCore::LocalMiss miss;
    std::string answer;
    CHECK(f.core.ServeLocalHit(q, miss, answer) == 0);
    CHECK(miss.candidate);
  }
  ClientCore::AppBatch b = f.App(q);
  REQUIRE(b.send_to_link);
  const uint64_t digest = cache::UnitDigest(b.to_link);

  std::string link;
  cache::AppendControl(link, cache::BeginControl{digest});
  link += Result();
  cache::StoreControl store;
  store.digest = digest;
  store.ttl = std::chrono::seconds(60);
  cache::AppendControl(link, store);
  link += Ready();
  bool verbatim = false;
  // The control frames are the Client's: the app gets the frames around
  // them, as ranges of the link's own bytes (no copy).
  CHECK(f.Link(link, &verbatim) == Result() + Ready());
  CHECK(verbatim);
  CHECK(f.core.outstanding() == 0);
  {
    ClientTierStats st = f.tier->Stats();
    INFO("stores " << st.tier.stores << " rejected " << st.tier.rejected << " stale " << st.refused_stale << " unwatched " << st.refused_unwatched);
    CHECK(st.tier.stores == 1);
  }

  std::string hit;
  size_t hit_size = 0;
  b = f.App(q, &hit, &hit_size);
  CHECK(hit_size == q.size());
  CHECK(hit == Result() + Ready());
  CHECK(b.consumed == 0);
  CHECK(!b.send_to_link);
  CHECK(f.core.outstanding() == 0);

  SECTION("not while a unit is outstanding") {
    b = f.App(QueryBytes("SELECT now()"));
    CHECK(f.core.outstanding() == 1);
    b = f.App(q, &hit, &hit_size);
    CHECK(hit_size == 0);
    CHECK(b.to_link == q);
  }
  SECTION("not inside a transaction") {
    (void)f.App(QueryBytes("BEGIN"));
    (void)f.Link(Frame('C', std::string("BEGIN\0", 6)) + Ready('T'));
    b = f.App(q, &hit, &hit_size);
    CHECK(hit_size == 0);
    CHECK(b.to_link == q);
  }
  SECTION("not while the driver's unnamed statement exists: the Query destroys it") {
    std::string ext;
    pr::Encode(pr::Parse{"", "SELECT 2", {}}, ext);
    pr::Encode(pr::Sync{}, ext);
    REQUIRE(f.App(ext).send_to_link);
    (void)f.Link(Frame('1') + Ready());
    REQUIRE(f.core.outstanding() == 0);
    b = f.App(q, &hit, &hit_size);
    CHECK(hit_size == 0);  // to the link: both halves and the origin forget it
    CHECK(b.to_link == q);
    (void)f.Link(Result() + Ready());
    b = f.App(q, &hit, &hit_size);
    CHECK(hit_size == q.size());  // gone: answered here again
  }
}

}  // namespace
}  // namespace hyperpool::client
