// Session settings, capture and pin detection without I/O
// (src/endpoint/session_settings.h).
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "endpoint/session_settings.h"
#include "protocol/codec.h"

namespace hyperpool::endpoint {
namespace {

using Params = std::vector<std::pair<std::string, std::string>>;

bool HasPin(const SessionEffects& fx, PinReason reason) {
  for (PinReason r : fx.pins)
    if (r == reason) return true;
  return false;
}

TEST_CASE("startup options: -c, -cname, --name=value, backslash escapes, dashes in names") {
  auto opts = ParseStartupOptions(R"(-c search_path=a,b  -cTimeZone=UTC --extra-float-digits=2 -c x.y=hello\ world -B 10)");
  Params expected = {{"search_path", "a,b"}, {"timezone", "UTC"}, {"extra_float_digits", "2"}, {"x.y", "hello world"}};
  CHECK(opts == expected);
  CHECK(ParseStartupOptions("").empty());
  CHECK(ParseStartupOptions("-c noequals").empty());
}

TEST_CASE("settings from the hello: every GUC name, options expanded, pooler and login names dropped") {
  Params hello = {{"application_name", "app"},
                  {"client_encoding", "UTF8"},
                  {"DateStyle", "ISO, MDY"},
                  {"extra_float_digits", "3"},
                  {"options", "-c statement_timeout=5000"},
                  {"user", "u"},
                  {"database", "d"},
                  {"hyperpool.session_id", "0123"},
                  {"_pq_.x", "1"}};
  SettingMap s = SettingsFromStartup(hello);
  SettingMap expected = {{"application_name", "app"}, {"client_encoding", "UTF8"}, {"datestyle", "ISO, MDY"},
                         {"extra_float_digits", "3"}, {"statement_timeout", "5000"}};
  CHECK(s == expected);
}

TEST_CASE("the diff resets what the next session lacks and sets what differs, quoting safely") {
  SettingMap from = {{"timezone", "Asia/Tokyo"}, {"search_path", "a, public"}, {"app.tenant", "7"}};
  SettingMap to = {{"search_path", "a, public"}, {"datestyle", "German"}, {"app.tenant", "it's \\ 8"}};
  std::string diff = BuildSettingsDiff(from, to);
  CHECK(diff ==
        "RESET \"timezone\"; SELECT pg_catalog.set_config(E'app.tenant', E'it''s \\\\ 8', false), "
        "pg_catalog.set_config(E'datestyle', E'German', false)");
  CHECK(BuildSettingsDiff(to, to).empty());
  CHECK(BuildSettingsDiff({}, {}).empty());
  CHECK(BuildSettingsDiff({{"a.b", "1"}}, {}) == "RESET \"a.b\"; ");
}

TEST_CASE("capture query lists session-level settings and placeholders; parsing drops empties") {
  CHECK(BuildCaptureQuery({}).find("source = 'session'") != std::string::npos);
  CHECK(BuildCaptureQuery({}).find("unnest") == std::string::npos);
  CHECK(BuildCaptureQuery({"app.tenant"}).find("ARRAY[E'app.tenant']") != std::string::npos);
  std::vector<std::vector<std::optional<std::string>>> rows = {
      {std::string("TimeZone"), std::string("Asia/Tokyo")},
      {std::string("transaction_isolation"), std::string("serializable")},
      {std::string("app.tenant"), std::string("")},
      {std::string("app.other"), std::nullopt},
      {std::string("app.user"), std::string("5")}};
  SettingMap expected = {{"timezone", "Asia/Tokyo"}, {"app.user", "5"}};
  CHECK(ParseCapturedSettings(rows) == expected);
}

TEST_CASE("after a capture, names the session RESET fall back to their startup values") {
  SettingMap startup = {{"timezone", "UTC"}, {"application_name", "app"}};
  SettingMap captured = {{"application_name", "app"}, {"datestyle", "German"}};
  SettingMap expected = {{"timezone", "UTC"}, {"application_name", "app"}, {"datestyle", "German"}};
  CHECK(MergeWithStartup(captured, startup) == expected);
  CHECK(MergeWithStartup({{"timezone", "Asia/Tokyo"}}, startup).at("timezone") == "Asia/Tokyo");
}

TEST_CASE("statements that may change settings ask for a capture") {
  auto sql = GENERATE(as<std::string>{}, "SET TimeZone = 'UTC'", "set search_path to a, b", "RESET ALL",
                      "reset timezone", "SET SESSION statement_timeout = 5", "DISCARD ALL",
                      "SELECT set_config('app.x', '1', false)", "BEGIN; SET datestyle = German; COMMIT",
                      "UPDATE t SET a = set_config('app.x', 'y', false)",
                      "UPDATE pgbench_accounts SET abalance = 1 WHERE aid = 2 AND SET_CONFIG('app.x', 'y', false) = 'y'",
                      "DO $$ BEGIN PERFORM 1; END $$", "CALL p()", "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY");
  CAPTURE(sql);
  SessionEffects fx = AnalyzeSessionEffects(sql);
  CHECK(fx.settings);
  CHECK(fx.pins.empty());
}

TEST_CASE("statements without lasting session effects need nothing") {
  auto sql = GENERATE(as<std::string>{}, "SELECT 1", "SET LOCAL TimeZone = 'UTC'", "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
                      "SET CONSTRAINTS ALL DEFERRED", "UPDATE t SET a = 1", "SELECT 'SET TimeZone = 1'",
                      "-- SET x = 1\nSELECT 2", "SELECT pg_advisory_xact_lock(1)", "CREATE TABLE t (a int)",
                      "PREPARE TRANSACTION 'x'", "DECLARE c CURSOR FOR SELECT 1", "SELECT * FROM temp_data",
                      // Plain statements whose first keyword decides that SET,
                      // RESET, DO ... further on are no statements of their own
                      // (read without the lexer: MayMatter).
                      "UPDATE pgbench_accounts SET abalance = abalance + -4211 WHERE aid = 77;",
                      "INSERT INTO h (a, b) VALUES (1, 2) ON CONFLICT (a) DO UPDATE SET b = 3",
                      "WITH u AS (UPDATE t SET reset = 1 RETURNING *) SELECT * FROM u",
                      "DELETE FROM prepare WHERE call = 1 AND discard = 2");
  CAPTURE(sql);
  SessionEffects fx = AnalyzeSessionEffects(sql);
  CHECK_FALSE(fx.settings);
  CHECK(fx.pins.empty());
}

struct PinCase {
  std::string sql;
  PinReason reason;
};

TEST_CASE("state that cannot be replayed pins the session") {
  auto c = GENERATE(values<PinCase>({
      {"CREATE TEMP TABLE t (a int)", PinReason::kTempTable},
      {"create temporary table t (a int) on commit delete rows", PinReason::kTempTable},
      {"CREATE GLOBAL TEMPORARY TABLE t (a int)", PinReason::kTempTable},
      {"CREATE TEMP VIEW v AS SELECT 1", PinReason::kTempTable},
      {"SELECT 1 AS a INTO TEMP t", PinReason::kTempTable},
      {"SELECT pg_advisory_lock(42)", PinReason::kAdvisoryLock},
      {"select pg_catalog.pg_try_advisory_lock_shared(1, 2)", PinReason::kAdvisoryLock},
      {"DECLARE c CURSOR WITH HOLD FOR SELECT 1", PinReason::kWithHoldCursor},
      {"SET ROLE other", PinReason::kSetRole},
      {"SET SESSION AUTHORIZATION other", PinReason::kSetRole},
      {"PREPARE q AS SELECT 1", PinReason::kPreparedSql},
      {"SELECT 1; CREATE TEMP TABLE t (a int)", PinReason::kTempTable},
      // Plain statements: the words that matter anywhere still count.
      {"WITH x AS (SELECT 1) SELECT * INTO TEMPORARY t FROM x", PinReason::kTempTable},
      {"INSERT INTO t SELECT pg_advisory_lock(1)", PinReason::kAdvisoryLock},
      {"UPDATE t SET a = 1 WHERE pg_try_advisory_lock(a);", PinReason::kAdvisoryLock},
      // ...in any case, past the first sixteen bytes (the substring scans).
      {"INSERT INTO pgbench_history (tid, bid) SELECT 1, 2 WHERE PG_ADVISORY_LOCK_SHARED(7)", PinReason::kAdvisoryLock},
      {"SELECT a, b, c, d, e, f, g INTO Temp t FROM pgbench_accounts", PinReason::kTempTable},
  }));
  CAPTURE(c.sql);
  CHECK(HasPin(AnalyzeSessionEffects(c.sql), c.reason));
}

// Issue 10 item 1: every spelling that changes the session's role pins it
// (its connection is never lent to anyone else).
TEST_CASE("every spelling of SET ROLE / SESSION AUTHORIZATION pins the session") {
  auto sql = GENERATE(as<std::string>{},
                      "SET \"role\" = 'r_a'", "SET \"RoLe\" TO r_a", "set ROLE r_a", "SET SESSION \"role\" = 'r_a'",
                      "SET SESSION ROLE r_a", "set session authorization r_a", "SET SESSION SESSION AUTHORIZATION r_a",
                      "SET \"session_authorization\" = 'r_a'", "SET Session_Authorization TO r_a",
                      "SET \"Session_Authorization\" = DEFAULT", "SELECT set_config('role', 'r_a', false)",
                      "SELECT pg_catalog.set_config('ROLE', 'r_a', false)", "SELECT \"set_config\"('role', 'r_a', false)",
                      "SELECT set_config(E'role', 'r_a', false)", "SELECT set_config('Role', 'r_a', NULL)",
                      "select pg_catalog . set_config ( 'session_authorization' , 'r_a' , false )",
                      "SELECT set_config($1, $2, false)", "SELECT set_config(name, 'x', false) FROM t",
                      "SELECT set_config('ro' || 'le', 'r_a', false)", "SELECT set_config(U&'r\\006Fle', 'r_a', false)",
                      "SELECT set_config(E'r\\x6fle', 'r_a', false)", "SELECT set_config('role'::text, 'r_a', false)",
                      "SELECT set_config(setting_name => 'role', new_value => 'r_a', is_local => false)",
                      "SELECT U&\"set\\005Fconfig\"('role', 'r_a', false)", "BEGIN; SET \"role\" = 'r_a'; COMMIT",
                      "SELECT 1; SELECT set_config('role', 'r_a', false)", "SET /* c */ \"role\" = 'r_a'",
                      "SELECT * FROM set_config('role', 'r_a', false)");
  CAPTURE(sql);
  SessionEffects fx = AnalyzeSessionEffects(sql);
  CHECK(HasPin(fx, PinReason::kSetRole));
}

TEST_CASE("a role change that lasts only for the transaction asks for a capture (which checks the role)") {
  auto sql = GENERATE(as<std::string>{}, "SET LOCAL ROLE r_a", "SET LOCAL \"role\" = 'r_a'",
                      "SET LOCAL SESSION AUTHORIZATION r_a", "SELECT set_config('role', 'r_a', true)",
                      "SELECT pg_catalog.set_config('role', 'r_a', TRUE)", "SELECT set_config($1, $2, true)",
                      "SELECT set_config('request.jwt.claims', $1, true)", "RESET ROLE", "RESET \"Role\"",
                      "RESET SESSION AUTHORIZATION", "SET role.x = 1", "SET \"role\".\"x\" = 1");
  CAPTURE(sql);
  SessionEffects fx = AnalyzeSessionEffects(sql);
  CHECK(fx.settings);
  CHECK_FALSE(HasPin(fx, PinReason::kSetRole));
}

TEST_CASE("a Parse with set_config($1, ...) pins at the Parse, before the name is bound") {
  SessionSettings s(Params{});
  std::string parse;
  protocol::Encode(protocol::Parse{"", "SELECT pg_catalog.set_config($1, $2, false)", {}}, parse);
  SessionEffects fx = s.NoteFrontend('P', std::string_view(parse).substr(5));
  CHECK(HasPin(fx, PinReason::kSetRole));
  CHECK(s.capture_owed());
}

TEST_CASE("the capture query also reads current_user and session_user; parsing finds them") {
  const std::string q = BuildCaptureQuery({"app.tenant"});
  CHECK(q.find("current_user") != std::string::npos);
  CHECK(q.find("session_user") != std::string::npos);
  std::vector<std::vector<std::optional<std::string>>> rows = {
      {std::string("TimeZone"), std::string("UTC"), std::nullopt, std::nullopt},
      {std::nullopt, std::nullopt, std::string("r_a"), std::string("admin")}};
  CapturedState state = ParseCapture(rows);
  CHECK(state.settings == SettingMap{{"timezone", "UTC"}});
  REQUIRE(state.current_user.has_value());
  CHECK(*state.current_user == "r_a");
  CHECK(*state.session_user == "admin");
  CHECK_FALSE(state.RoleIs("admin"));
  rows[1][2] = std::string("admin");
  CHECK(ParseCapture(rows).RoleIs("admin"));
  rows.pop_back();  // no identity row: unproven, so not the login role
  CHECK_FALSE(ParseCapture(rows).RoleIs("admin"));
}

TEST_CASE("LISTEN and UNLISTEN do not pin: the listener connection carries them (listen_state.h)") {
  auto sql = GENERATE(as<std::string>{}, "LISTEN chan", "listen \"Chan\"", "UNLISTEN *", "BEGIN; LISTEN a; COMMIT");
  CAPTURE(sql);
  CHECK(AnalyzeSessionEffects(sql).pins.empty());
}

TEST_CASE("custom placeholder names are collected from SET, RESET and set_config") {
  SessionEffects fx = AnalyzeSessionEffects("SET app.tenant = 'a'; RESET Other.Thing; SELECT set_config('my.var', '1', false)");
  CHECK(fx.custom_names == std::set<std::string>{"app.tenant", "other.thing", "my.var"});
}

TEST_CASE("PinSet keeps each reason once and reports the first") {
  PinSet pins;
  CHECK(pins.empty());
  CHECK(pins.First() == PinReason::kNone);
  CHECK(pins.Add(PinReason::kListen));
  CHECK_FALSE(pins.Add(PinReason::kListen));
  CHECK(pins.Add(PinReason::kTempTable));
  CHECK(pins.First() == PinReason::kTempTable);
  CHECK_FALSE(pins.Add(PinReason::kNone));
  pins.Clear();
  CHECK(pins.empty());
}

TEST_CASE("application_name is '' for an app that gives none, its own otherwise") {
  CHECK(SessionSettings(Params{}).desired() == SettingMap{{"application_name", ""}});
  CHECK(SessionSettings(Params{{"application_name", "app"}}).desired() == SettingMap{{"application_name", "app"}});
  CHECK(SessionSettings(Params{{"options", "-c application_name=opt"}}).desired().at("application_name") == "opt");
  // RESET application_name: back to '' (the capture lacks it).
  SessionSettings s(Params{});
  s.OnCaptured({});
  CHECK(s.desired() == SettingMap{{"application_name", ""}});
}

TEST_CASE("an idle session keeps one settings map, shared by the sessions that start alike") {
  StartupSettingsTable table;
  SessionSettings a(Params{{"application_name", "app"}, {"TimeZone", "UTC"}}, &table);
  SessionSettings b(Params{{"TimeZone", "UTC"}, {"application_name", "app"}}, &table);
  SessionSettings c(Params{{"application_name", "other"}, {"TimeZone", "UTC"}}, &table);
  CHECK(&a.startup() == &b.startup());  // one map for both
  CHECK(&a.desired() == &a.startup());  // not a copy of it
  CHECK(&c.startup() != &a.startup());
  CHECK(c.desired().at("application_name") == "other");
  CHECK(table.size() == 2);
  // A capture that differs gives the session a map of its own; one equal to
  // the startup settings goes back to the shared one.
  a.OnCaptured({{"application_name", "app"}, {"timezone", "Asia/Tokyo"}});
  CHECK(a.desired().at("timezone") == "Asia/Tokyo");
  CHECK(b.desired().at("timezone") == "UTC");
  CHECK(a.startup().at("timezone") == "UTC");
  a.OnCaptured({{"application_name", "app"}, {"timezone", "UTC"}});
  CHECK(&a.desired() == &b.startup());
  // Names are length-prefixed in the table's key: no two maps collide.
  SessionSettings d(Params{{"a", "b:c"}}, &table);
  SessionSettings e(Params{{"a:b", "c"}}, &table);
  CHECK(&d.startup() != &e.startup());
}

TEST_CASE("a named statement's effects count again at each Bind, until it is closed") {
  SessionSettings s(Params{{"TimeZone", "UTC"}});
  CHECK(s.desired() == SettingMap{{"application_name", ""}, {"timezone", "UTC"}});
  std::string parse, bind, close;
  protocol::Encode(protocol::Parse{"s1", "SET TimeZone = 'Asia/Tokyo'", {}}, parse);
  protocol::Encode(protocol::Bind{"", "s1", {}, {}, {}}, bind);
  protocol::Encode(protocol::Close{protocol::ObjectKind::kStatement, "s1"}, close);
  auto payload = [](const std::string& frame) { return std::string_view(frame).substr(5); };
  s.NoteFrontend('P', payload(parse));
  CHECK(s.capture_owed());
  s.OnCaptured({{"timezone", "Asia/Tokyo"}});
  CHECK_FALSE(s.capture_owed());
  CHECK(s.desired() == SettingMap{{"application_name", ""}, {"timezone", "Asia/Tokyo"}});
  s.NoteFrontend('B', payload(bind));
  CHECK(s.capture_owed());
  s.OnCaptured({});  // e.g. RESET TimeZone: back to the startup value
  CHECK(s.desired() == SettingMap{{"application_name", ""}, {"timezone", "UTC"}});
  s.NoteFrontend('C', payload(close));
  s.NoteFrontend('B', payload(bind));
  CHECK_FALSE(s.capture_owed());
  std::string query;
  protocol::Encode(protocol::Query{"SELECT 1"}, query);
  s.NoteFrontend('Q', payload(query));
  CHECK_FALSE(s.capture_owed());
}

}  // namespace
}  // namespace hyperpool::endpoint

namespace hyperpool::endpoint {
namespace {

bool SameEffects(const SessionEffects& a, const SessionEffects& b) {
  return a.settings == b.settings && a.pins == b.pins && a.custom_names == b.custom_names &&
         a.sequences == b.sequences;
}

// SessionEffectsMemo (the Endpoint's analyses by shape): the answer is
// AnalyzeSessionEffects' for every text, and texts share one only when they
// differ in standalone integers alone.
TEST_CASE("the session-effects memo answers what the analysis answers, shared only across integers") {
  SessionEffectsMemo memo;
  const std::vector<std::string> texts = {
      "SET TimeZone = 'UTC'", "SET my.x1 = 1", "SET my.x2 = 1", "SET my.x1 = 2", "RESET my.x1",
      "SELECT set_config('app.a1', '1', false)", "SELECT set_config('app.a2', '1', false)",
      "SELECT set_config('app.a1', '2', true)", "SELECT pg_advisory_lock(42)", "SELECT pg_advisory_lock(43)",
      "SELECT pg_advisory_xact_lock(42)", "CREATE TEMP TABLE t1 (a int)", "CREATE TABLE t1 (a int)",
      "SELECT nextval('s1')", "SELECT nextval('s2')", "SELECT 1", "SELECT 2",
      "UPDATE pgbench_accounts SET abalance = abalance + -4211 WHERE aid = 77;",
      "UPDATE pgbench_accounts SET abalance = abalance + 17 WHERE aid = 90210;",
      "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (7, 1, 8598, -1702, CURRENT_TIMESTAMP);",
      "UPDATE t SET a = 1 WHERE pg_try_advisory_lock(a)", "UPDATE t SET a = 2 WHERE pg_try_advisory_lock(a)",
      "SET \"my.q1\" = 1", "SET \"my.q2\" = 1", "SELECT 1; CREATE TEMP TABLE t (a int)",
      "DECLARE c CURSOR WITH HOLD FOR SELECT 1", "SET ROLE other", "SET LOCAL ROLE other", "BEGIN", "END;"};
  for (int pass = 0; pass < 2; ++pass) {  // the second pass answers from the memo
    for (const std::string& sql : texts) {
      CAPTURE(sql, pass);
      const cache::SqlText text(sql);
      CHECK(SameEffects(memo.Of(text), AnalyzeSessionEffects(sql)));
    }
  }
  // Names with digits in them are words, not integers: never shared.
  CHECK(memo.Of(cache::SqlText("SET my.x1 = 1")).custom_names == std::set<std::string>{"my.x1"});
  CHECK(memo.Of(cache::SqlText("SET my.x2 = 7")).custom_names == std::set<std::string>{"my.x2"});
  // TPC-B's statements, from one transaction to the next: one analysis each.
  const std::uint64_t hits = memo.hits();
  const std::string t1 = "UPDATE pgbench_tellers SET tbalance = tbalance + 5 WHERE tid = 3;";
  const std::string t2 = "UPDATE pgbench_tellers SET tbalance = tbalance + 9 WHERE tid = 8;";
  CHECK(SameEffects(memo.Of(cache::SqlText(t1)), AnalyzeSessionEffects(t1)));
  CHECK(SameEffects(memo.Of(cache::SqlText(t2)), AnalyzeSessionEffects(t2)));
  CHECK(memo.hits() == hits + 1);
  // (A sign is a byte of the shape: "+ -9" is another text.)
  CHECK(SameEffects(memo.Of(cache::SqlText("UPDATE pgbench_tellers SET tbalance = tbalance + -9 WHERE tid = 8;")),
                    AnalyzeSessionEffects(t2)));
  CHECK(memo.hits() == hits + 1);
  // A Parse's effects through the memo, as without it.
  SessionSettings s(Params{});
  std::string parse;
  protocol::Encode(protocol::Parse{"s1", "SELECT pg_advisory_lock(7)", {}}, parse);
  CHECK(HasPin(s.NoteFrontend('P', std::string_view(parse).substr(5), nullptr, &memo), PinReason::kAdvisoryLock));
}

}  // namespace
}  // namespace hyperpool::endpoint
