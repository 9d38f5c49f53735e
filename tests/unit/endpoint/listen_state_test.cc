// LISTEN/NOTIFY bookkeeping without I/O (src/endpoint/listen_state.h): the
// channel names a statement LISTENs on, when a session's LISTEN/UNLISTEN
// count as committed, and the fan-out registry that says what the listener
// connection must LISTEN/UNLISTEN and whom a notification goes to.
#include <set>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "endpoint/listen_state.h"
#include "protocol/codec.h"
#include "unit/endpoint/frontend_builders.h"

namespace hyperpool::endpoint {
namespace {

using Kind = ListenOp::Kind;

ListenOp Listen(std::string ch) { return {Kind::kListen, std::move(ch)}; }
ListenOp Unlisten(std::string ch) { return {Kind::kUnlisten, std::move(ch)}; }
ListenOp UnlistenAll() { return {Kind::kUnlistenAll, {}}; }

struct ParseCase {
  std::string sql;
  std::vector<ListenOp> ops;
};

TEST_CASE("ParseListenOps names channels as PostgreSQL does") {
  auto c = GENERATE(values<ParseCase>({
      {"LISTEN chan", {Listen("chan")}},
      {"listen Chan;", {Listen("chan")}},                    // unquoted: lower-cased
      {"LISTEN \"MiXed\"", {Listen("MiXed")}},               // quoted: case kept
      {"LISTEN \"a\"\"b\"", {Listen("a\"b")}},               // "" inside quotes
      {"/* c */ LISTEN -- x\n a", {Listen("a")}},            // comments
      {"UNLISTEN a", {Unlisten("a")}},
      {"UNLISTEN *", {UnlistenAll()}},
      {"unlisten \"A\"; LISTEN b; SELECT 1", {Unlisten("A"), Listen("b")}},
      {"BEGIN; LISTEN x; COMMIT", {Listen("x")}},
      {"SELECT 'LISTEN a'", {}},                             // in a string: not a statement
      {"LISTEN", {}},                                        // PostgreSQL rejects it
      {"LISTEN a b", {}},
      {"LISTEN 'a'", {}},
      {"SELECT pg_notify('a', 'x')", {}},
      {"LISTEN \"unterminated", {}},
      // The server parses the whole text before running any of it: a
      // syntax error anywhere runs nothing (the parser judges, not a split
      // at ';').
      {"LISTEN a; SELECT 1 +", {}},
      {"LISTEN U&\"d\\0061t\"", {Listen("dat")}},          // a Unicode escape, decoded
      // One plain statement of another kind: nothing, whatever its words.
      {"UPDATE listen SET unlisten = 1 WHERE listen.id = 2", {}},
      {"CREATE TABLE listen (unlisten int)", {}},
      {"(LISTEN a)", {}},                                    // PostgreSQL rejects it
      {"  unlisten  a ;", {Unlisten("a")}},
  }));
  CAPTURE(c.sql);
  CHECK(ParseListenOps(c.sql) == c.ops);
}

TEST_CASE("ParseListenOps truncates channel names to 63 bytes, never inside a character") {
  const std::string long_name(70, 'x');
  auto ops = ParseListenOps("LISTEN " + long_name);
  REQUIRE(ops.size() == 1);
  CHECK(ops[0].channel == std::string(63, 'x'));
  // 62 ASCII bytes then a 2-byte character straddling byte 63: cut before it.
  const std::string name = std::string(62, 'a') + "\xc3\xa9" + "zz";
  ops = ParseListenOps("LISTEN \"" + name + "\"");
  REQUIRE(ops.size() == 1);
  CHECK(ops[0].channel == std::string(62, 'a'));
}

TEST_CASE("MayListen finds LISTEN wherever it is written, even inside a string") {
  CHECK(MayListen("DO $$ BEGIN EXECUTE 'LiStEn a'; END $$"));
  CHECK(MayListen("listen a"));
  CHECK_FALSE(MayListen("SELECT 1"));
}

TEST_CASE("ApplyListenOps applies LISTEN, UNLISTEN and UNLISTEN * in order") {
  std::set<std::string> channels{"old"};
  ApplyListenOps({Listen("a"), Listen("b"), Unlisten("a"), Unlisten("never")}, channels);
  CHECK(channels == std::set<std::string>{"old", "b"});
  ApplyListenOps({UnlistenAll(), Listen("c")}, channels);
  CHECK(channels == std::set<std::string>{"c"});
}

// Feeds frames (as built for the link) to the tracker's frontend side.
void Forward(ListenTracker& t, const std::string& bytes) {
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  std::string_view rest = bytes;
  for (;;) {
    auto r = reader.Read(rest);
    if (!r.is_frame()) break;
    t.OnFrontend(r.frame().tag, r.frame().payload);
    rest.remove_prefix(r.frame().size());
  }
}

std::string CommandTag(std::string_view tag) {
  std::string out;
  protocol::Encode(protocol::CommandComplete{tag}, out);
  return out.substr(5);  // payload only
}

TEST_CASE("an autocommit LISTEN counts at its ReadyForQuery 'I'") {
  ListenTracker t;
  Forward(t, testing::QueryBytes("LISTEN a"));
  CHECK(t.connection_listened());
  CHECK(t.OnBackend('C', CommandTag("LISTEN")).empty());
  CHECK(t.OnBackend('Z', "I") == std::vector<ListenOp>{Listen("a")});
  CHECK(t.OnBackend('Z', "I").empty());  // handed out once
}

TEST_CASE("a LISTEN in a Query the origin skips never counts, and the next unit's counts at its own 'I'") {
  ListenTracker t;
  Forward(t, testing::Parse("bad", "selec"));  // fails: the origin skips to Sync
  Forward(t, testing::QueryBytes("LISTEN a"));
  Forward(t, testing::Sync());
  CHECK(t.OnBackend('E', "").empty());
  t.OnSkipped(1);
  CHECK(t.OnBackend('Z', "I").empty());
  CHECK(t.Idle() == false);  // (it may have listened: the connection is checked)
  Forward(t, testing::QueryBytes("LISTEN b"));
  CHECK(t.OnBackend('Z', "I") == std::vector<ListenOp>{Listen("b")});
}

TEST_CASE("LISTEN inside a transaction counts at COMMIT, not at its own ReadyForQuery 'T'") {
  ListenTracker t;
  Forward(t, testing::QueryBytes("BEGIN"));
  Forward(t, testing::QueryBytes("LISTEN a"));
  Forward(t, testing::QueryBytes("COMMIT"));
  CHECK(t.OnBackend('Z', "T").empty());
  CHECK(t.OnBackend('Z', "T").empty());
  (void)t.OnBackend('C', CommandTag("COMMIT"));
  CHECK(t.OnBackend('Z', "I") == std::vector<ListenOp>{Listen("a")});
}

TEST_CASE("LISTEN in a transaction that rolls back, fails, or errors in an implicit transaction does not count") {
  SECTION("ROLLBACK") {
    ListenTracker t;
    Forward(t, testing::QueryBytes("BEGIN; LISTEN a"));
    Forward(t, testing::QueryBytes("ROLLBACK"));
    CHECK(t.OnBackend('Z', "T").empty());
    (void)t.OnBackend('C', CommandTag("ROLLBACK"));
    CHECK(t.OnBackend('Z', "I").empty());
  }
  SECTION("an error, then COMMIT (which PostgreSQL answers ROLLBACK)") {
    ListenTracker t;
    Forward(t, testing::QueryBytes("BEGIN; LISTEN a"));
    Forward(t, testing::QueryBytes("SELECT 1/0"));
    Forward(t, testing::QueryBytes("COMMIT"));
    CHECK(t.OnBackend('Z', "T").empty());
    (void)t.OnBackend('E', "");
    CHECK(t.OnBackend('Z', "E").empty());
    CHECK(t.OnBackend('Z', "I").empty());
  }
  SECTION("a multi-statement Query whose last statement fails") {
    ListenTracker t;
    Forward(t, testing::QueryBytes("LISTEN a; SELECT 1/0"));
    (void)t.OnBackend('E', "");
    CHECK(t.OnBackend('Z', "I").empty());
  }
  SECTION("the connection was lost before the commit was seen") {
    ListenTracker t;
    Forward(t, testing::QueryBytes("LISTEN a"));
    t.OnConnectionLost();
    CHECK(t.OnBackend('Z', "I").empty());
  }
  SECTION("a later unit starts clean") {
    ListenTracker t;
    Forward(t, testing::QueryBytes("LISTEN a; SELECT 1/0"));
    (void)t.OnBackend('E', "");
    CHECK(t.OnBackend('Z', "I").empty());
    Forward(t, testing::QueryBytes("LISTEN b"));
    CHECK(t.OnBackend('Z', "I") == std::vector<ListenOp>{Listen("b")});
  }
}

TEST_CASE("pipelined units: each LISTEN belongs to the unit that ran it") {
  ListenTracker t;
  // Extended protocol, two Syncs in one flight; the second unit fails.
  Forward(t, testing::Parse("", "LISTEN a") + testing::Bind("") + testing::Execute() + testing::Sync() +
                 testing::Parse("", "LISTEN b; x") + testing::Bind("") + testing::Execute() + testing::Sync());
  CHECK(t.OnBackend('Z', "I") == std::vector<ListenOp>{Listen("a")});
  (void)t.OnBackend('E', "");
  CHECK(t.OnBackend('Z', "I").empty());
}

TEST_CASE("a named statement's LISTEN counts each time it is bound") {
  ListenTracker t;
  Forward(t, testing::Parse("s1", "LISTEN \"Ch\"") + testing::Sync());
  CHECK(t.OnBackend('Z', "I").empty());  // parsed, not run
  Forward(t, testing::Bind("s1") + testing::Execute() + testing::Sync());
  CHECK(t.OnBackend('Z', "I") == std::vector<ListenOp>{Listen("Ch")});
}

TEST_CASE("ListenRegistry LISTENs a channel for its first subscriber and UNLISTENs it after its last") {
  ListenRegistry r;
  auto c = r.Set(1, {"a", "b"});
  CHECK(c.to_listen == std::vector<std::string>{"a", "b"});
  CHECK(c.to_unlisten.empty());
  c = r.Set(2, {"b", "c"});
  CHECK(c.to_listen == std::vector<std::string>{"c"});  // b already listened
  CHECK(r.SubscribersOf("b") == std::vector<ListenRegistry::Subscriber>{1, 2});
  CHECK(r.SubscribersOf("nobody").empty());
  CHECK(r.Listens(2, "c"));
  CHECK_FALSE(r.Listens(1, "c"));
  // UNLISTEN b by 1: still listened by 2.
  c = r.Set(1, {"a"});
  CHECK(c.empty());
  CHECK(r.SubscribersOf("b") == std::vector<ListenRegistry::Subscriber>{2});
  // Session 2 ends: b and c go.
  c = r.Remove(2);
  CHECK(c.to_listen.empty());
  CHECK(c.to_unlisten == std::vector<std::string>{"b", "c"});
  CHECK(r.Channels() == std::vector<std::string>{"a"});
  CHECK(r.Set(1, {"a"}).empty());  // no change, nothing to do
  c = r.Remove(1);
  CHECK(c.to_unlisten == std::vector<std::string>{"a"});
  CHECK(r.channel_count() == 0);
  CHECK(r.ChannelsOf(1).empty());
}

TEST_CASE("BuildListenerQuery quotes channel names as identifiers") {
  CHECK(BuildListenerQuery({{"Ab", "x\"y"}, {"old"}}) == "UNLISTEN \"old\";LISTEN \"Ab\";LISTEN \"x\"\"y\";");
  CHECK(BuildListenerQuery({}).empty());
  // What the listener connection sends parses back to the same channels.
  CHECK(ParseListenOps(BuildListenerQuery({{"Ab", "x\"y"}, {}})) ==
        std::vector<ListenOp>{Listen("Ab"), Listen("x\"y")});
}

}  // namespace
}  // namespace hyperpool::endpoint
