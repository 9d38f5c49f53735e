// Unit tests of the cache tiers' shared pure logic (src/cache/tier.h) and the
// Client tier's generation checks (src/client/client_cache.h).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "absl/strings/ascii.h"
#include "cache/sql_analysis.h"
#include "cache/tier.h"
#include "client/client_cache.h"
#include "protocol/codec.h"
#include "support/xorshift.h"

namespace hyperpool::cache {
namespace {

std::string Q(std::string_view sql) {
  std::string out;
  protocol::AppendFrame(out, 'Q', std::string(sql) + std::string(1, '\0'));
  return out;
}

std::string Extended(std::string_view sql, bool describe = true, std::string_view stmt = "", int32_t max_rows = 0) {
  std::string out, p;
  p.append(stmt);
  p.push_back('\0');
  p.append(sql);
  p.push_back('\0');
  p.append(std::string("\0\0", 2));  // no parameter types
  protocol::AppendFrame(out, 'P', p);
  // Bind: portal "", statement "", 0 formats, 1 param '7', 0 result formats.
  std::string b = std::string("\0\0", 2) + std::string("\0\0", 2) + std::string("\0\1", 2) +
                  std::string("\0\0\0\1", 4) + "7" + std::string("\0\0", 2);
  protocol::AppendFrame(out, 'B', b);
  if (describe) protocol::AppendFrame(out, 'D', std::string("P\0", 2));
  std::string e = std::string("\0", 1);
  e.push_back(static_cast<char>(max_rows >> 24));
  e.push_back(static_cast<char>(max_rows >> 16));
  e.push_back(static_cast<char>(max_rows >> 8));
  e.push_back(static_cast<char>(max_rows));
  protocol::AppendFrame(out, 'E', e);
  protocol::AppendFrame(out, 'S', "");
  return out;
}

TEST_CASE("control messages round-trip and reject garbage") {
  std::string out;
  AppendControl(out, BeginControl{0x1122334455667788ull});
  AppendControl(out, StoreControl{42, std::chrono::milliseconds(1500), 9, {"public.a", "s.b"}});
  AppendControl(out, InvalidateControl{10, true, {}});
  size_t pos = 0;
  std::vector<Control> got;
  while (pos < out.size()) {
    REQUIRE(out[pos] == kControlTag);
    uint32_t len = (uint32_t(uint8_t(out[pos + 1])) << 24) | (uint32_t(uint8_t(out[pos + 2])) << 16) |
                   (uint32_t(uint8_t(out[pos + 3])) << 8) | uint8_t(out[pos + 4]);
    auto c = DecodeControl(std::string_view(out).substr(pos + 5, len - 4));
    REQUIRE(c.has_value());
    got.push_back(*c);
    pos += len + 1;
  }
  REQUIRE(got.size() == 3);
  CHECK(std::get<BeginControl>(got[0]).digest == 0x1122334455667788ull);
  const auto& s = std::get<StoreControl>(got[1]);
  CHECK(s.digest == 42);
  CHECK(s.ttl == std::chrono::milliseconds(1500));
  CHECK(s.generation == 9);
  CHECK(s.tables == std::vector<std::string>{"public.a", "s.b"});
  CHECK(std::get<InvalidateControl>(got[2]).all);
  CHECK_FALSE(DecodeControl("").has_value());
  CHECK_FALSE(DecodeControl("X").has_value());
  CHECK_FALSE(DecodeControl(std::string("S\0\0", 3)).has_value());
  CHECK_FALSE(DecodeControl(std::string("B\0\0\0\0\0\0\0\0extra", 14)).has_value());
  // The tables given apart (the Endpoint names its stored entry's): the
  // same bytes, whatever the control itself holds.
  std::string whole;
  AppendControl(whole, StoreControl{42, std::chrono::milliseconds(1500), 9, {"public.a", "s.b"}, 77});
  std::string apart;
  AppendStoreControl(apart, StoreControl{42, std::chrono::milliseconds(1500), 9, {"ignored"}, 77},
                     std::vector<std::string>{"public.a", "s.b"});
  CHECK(apart == whole);
}

TEST_CASE("a release offer says whether the session wrote; anything else in it is malformed") {
  for (const bool wrote : {false, true}) {
    std::string out;
    AppendControl(out, ReleaseControl{wrote});
    REQUIRE(out.size() == 7);
    CHECK(out[0] == kControlTag);
    auto got = DecodeControl(std::string_view(out).substr(5));
    REQUIRE(got.has_value());
    REQUIRE(std::holds_alternative<ReleaseControl>(*got));
    CHECK(std::get<ReleaseControl>(*got).wrote == wrote);
  }
  CHECK_FALSE(DecodeControl("P").has_value());
  CHECK_FALSE(DecodeControl(std::string("P\2", 2)).has_value());
  CHECK_FALSE(DecodeControl(std::string("P\0\0", 3)).has_value());
}

TEST_CASE("an invalidation of all rows keeps or drops statement metadata, and says which") {
  // GENERATE: rows only (a read whose functions are unknown), all (DDL),
  // tables (never drops metadata).
  const int which = GENERATE(0, 1, 2);
  InvalidateControl c{11, which != 2, which == 2 ? std::vector<std::string>{"public.t"} : std::vector<std::string>{}};
  c.rows_only = which == 0;
  std::string out;
  AppendControl(out, c);
  auto got = DecodeControl(std::string_view(out).substr(5));
  REQUIRE(got.has_value());
  const auto& i = std::get<InvalidateControl>(*got);
  CHECK(i.all == (which != 2));
  CHECK(i.rows_only == (which == 0));
  CHECK(i.drops_metadata() == (which == 1));
  // Any other non-zero `all` byte is read as the conservative "all".
  std::string odd = out.substr(5);
  odd[9] = 7;
  auto o = DecodeControl(odd);
  REQUIRE(o.has_value());
  CHECK(std::get<InvalidateControl>(*o).drops_metadata());
}

TEST_CASE("candidate units: a simple Query, or P/B/[D portal]/E/S with unnamed objects") {
  CandidateUnit u;
  std::string q = Q("SELECT 1") + Q("SELECT 2");
  REQUIRE(ParseCandidateUnit(q, u) == UnitShape::kCandidate);
  CHECK(u.sql == "SELECT 1");
  CHECK(u.frames.size() == Q("SELECT 1").size());

  std::string e = Extended("SELECT $1::int");
  REQUIRE(ParseCandidateUnit(e, u) == UnitShape::kCandidate);
  CHECK(u.form == ProtocolForm::kExtended);
  CHECK(u.frames.size() == e.size());
  REQUIRE(u.params.size() == 1);
  CHECK(u.params[0].value == "7");
  CHECK(u.describe == 'P');
  CHECK(u.replay.parse);
  CHECK(u.replay.describe == ReplayRequest::Describe::kPortal);

  CHECK(ParseCandidateUnit(Extended("SELECT 1", false), u) == UnitShape::kCandidate);
  REQUIRE(ParseCandidateUnit(Extended("SELECT 1", true, "named"), u) == UnitShape::kNotCandidate);  // Bind names ""
  // A row limit (asyncpg's fetchrow) is a candidate: answered truncated.
  REQUIRE(ParseCandidateUnit(Extended("SELECT 1", true, "", 10), u) == UnitShape::kCandidate);
  CHECK(u.replay.max_rows == 10);
  REQUIRE(ParseCandidateUnit(Extended("SELECT 1", true, "", -1), u) == UnitShape::kCandidate);
  CHECK(u.replay.max_rows == 0);  // <= 0 means no limit in PostgreSQL
  std::string partial = Extended("SELECT 1");
  partial.resize(partial.size() - 5);  // no Sync yet
  CHECK(ParseCandidateUnit(partial, u) == UnitShape::kIncomplete);
  std::string sync;
  protocol::AppendFrame(sync, 'S', "");
  CHECK(ParseCandidateUnit(sync, u) == UnitShape::kNotCandidate);
}

namespace ext {
std::string P(std::string_view name, std::string_view sql) {
  std::string out;
  protocol::Encode(protocol::Parse{name, sql, {}}, out);
  return out;
}
std::string B(std::string_view portal, std::string_view stmt, std::string_view value, int16_t format = 0,
              int16_t result_format = 0) {
  protocol::Bind b;
  b.portal = portal;
  b.statement = stmt;
  b.parameter_formats.push_back(format);
  b.parameters.push_back(value);
  b.result_formats.push_back(result_format);
  std::string out;
  protocol::Encode(b, out);
  return out;
}
std::string D(char kind, std::string_view name) {
  std::string out;
  protocol::Encode(protocol::Describe{static_cast<protocol::ObjectKind>(kind), name}, out);
  return out;
}
std::string E(std::string_view portal, int32_t max_rows = 0) {
  std::string out;
  protocol::Encode(protocol::Execute{portal, max_rows}, out);
  return out;
}
std::string S() {
  std::string out;
  protocol::Encode(protocol::Sync{}, out);
  return out;
}
}  // namespace ext

TEST_CASE("candidate units: named statements and portals, Describe(statement) before the Bind, no Parse") {
  using namespace ext;
  CandidateUnit u;
  // postgres.js's deferred form and its type query at connect.
  REQUIRE(ParseCandidateUnit(P("s1", "SELECT $1::int") + B("p", "s1", "7") + D('P', "p") + E("p") + S(), u) ==
          UnitShape::kCandidate);
  CHECK(u.named_parse);
  CHECK(u.describe == 'P');
  REQUIRE(ParseCandidateUnit(P("s1", "SELECT $1::int") + D('S', "s1") + B("", "s1", "7") + E("") + S(), u) ==
          UnitShape::kCandidate);
  CHECK(u.describe == 'S');
  CHECK(u.replay.describe == ReplayRequest::Describe::kStatement);
  CHECK(u.replay.parse);
  // One statement and one portal throughout.
  CHECK(ParseCandidateUnit(P("s1", "SELECT 1") + B("", "s2", "7") + E("") + S(), u) == UnitShape::kNotCandidate);
  CHECK(ParseCandidateUnit(P("s1", "SELECT 1") + B("a", "s1", "7") + E("b") + S(), u) == UnitShape::kNotCandidate);
  CHECK(ParseCandidateUnit(P("s1", "SELECT 1") + D('S', "s2") + B("", "s1", "7") + E("") + S(), u) ==
        UnitShape::kNotCandidate);
  REQUIRE(ParseCandidateUnit(P("s1", "SELECT 1") + B("", "s1", "7") + E("", 10) + S(), u) == UnitShape::kCandidate);
  CHECK(u.replay.max_rows == 10);
  // Bind of an earlier statement: only through the session's lookup.
  const std::string bind_only = B("", "s1", "7") + E("") + S();
  CHECK(ParseCandidateUnit(bind_only, u) == UnitShape::kNotCandidate);
  const StatementLookup lookup = [](std::string_view name, std::string_view* sql, std::vector<uint32_t>* types,
                                     uint64_t* result_type) {
    if (name != "s1" && name != "s3") return false;
    *sql = "SELECT $1::int";
    *types = {23};
    *result_type = name == "s1" ? 77 : 0;  // s3: its driver's result type is unknown
    return true;
  };
  REQUIRE(ParseCandidateUnit(bind_only, u, &lookup) == UnitShape::kCandidate);
  CHECK(u.sql == "SELECT $1::int");
  CHECK(u.param_types == std::vector<uint32_t>{23});
  CHECK(u.result_type == 77);
  CHECK_FALSE(u.replay.parse);
  CHECK_FALSE(u.named_parse);
  CHECK(ParseCandidateUnit(B("", "s2", "7") + E("") + S(), u, &lookup) == UnitShape::kNotCandidate);
  // An unknown result type is carried as 0 (the Endpoint's lookup refuses
  // such a statement; the Client stores the unit but serves it nothing).
  REQUIRE(ParseCandidateUnit(B("", "s3", "7") + E("") + S(), u, &lookup) == UnitShape::kCandidate);
  CHECK(u.result_type == 0);
  // A unit that parses its statement carries none (its driver learns the
  // shape from this very unit's answers).
  REQUIRE(ParseCandidateUnit(P("s1", "SELECT 1") + B("", "s1", "7") + E("") + S(), u, &lookup) ==
          UnitShape::kCandidate);
  CHECK(u.result_type == 0);
}

TEST_CASE("keys: the result type a driver holds separates a statement's entries at the Endpoint") {
  using namespace ext;
  // The same text prepared before and after DDL that changed its result
  // type: a driver holding the old RowDescription must never be handed
  // rows stored for the new one (asyncpg: "the number of columns in the
  // result row (2) is different from what was described (3)").
  const std::string three = std::string("\0\3") + std::string("id\0", 3) + std::string(18, '\0') +
                            std::string("a\0", 2) + std::string(18, '\0') + std::string("b\0", 2) +
                            std::string(18, '\0');
  const std::string two = std::string("\0\2") + std::string("id\0", 3) + std::string(18, '\0') +
                          std::string("a\0", 2) + std::string(18, '\0');
  const uint64_t rt3 = protocol::ResultTypeDigest(three);
  const uint64_t rt2 = protocol::ResultTypeDigest(two);
  CHECK(rt3 != 0);
  CHECK(rt2 != 0);
  CHECK(rt3 != rt2);
  CHECK(protocol::ResultTypeDigest("") != rt2);  // NoData
  CHECK(protocol::ResultTypeDigest(three) == rt3);
  SessionCacheSettings s;
  CandidateUnit u;
  const std::string bytes = P("s1", "SELECT * FROM t WHERE id = $1") + B("", "s1", "7") + E("") + S();
  REQUIRE(ParseCandidateUnit(bytes, u) == UnitShape::kCandidate);  // `u` views `bytes`
  u.result_type = rt3;
  const std::string client3 = ClientExtendedKey("fp", s, u);
  std::string endpoint3 = "k";
  AppendKeySuffix(endpoint3, "fp", 0, s, u.result_type);
  u.result_type = rt2;
  // The Client keeps one entry and checks its RowDescription instead
  // (client_core.cc, ServeLocalHit).
  CHECK(ClientExtendedKey("fp", s, u) == client3);
  std::string endpoint2 = "k";
  AppendKeySuffix(endpoint2, "fp", 0, s, u.result_type);
  CHECK(endpoint2 != endpoint3);
  // A statement whose shape is learnt while its unit runs: the placeholder
  // is replaced before the result is stored.
  std::string learnt = "k";
  AppendKeySuffix(learnt, "fp", 0, s, 0);
  SetKeyResultType(learnt, rt3);
  CHECK(learnt == endpoint3);
  // What the Endpoint reserves for the suffix is what it appends.
  CHECK(endpoint3.size() == 1 + KeySuffixSize("fp"));
  // The Client's key is allocated once, at its final size.
  CHECK(client3.capacity() < client3.size() + 16);
}

TEST_CASE("the Client's extended key never depends on statement or portal names") {
  using namespace ext;
  SessionCacheSettings s;
  auto key = [&](const std::string& bytes) {
    CandidateUnit u;
    REQUIRE(ParseCandidateUnit(bytes, u) == UnitShape::kCandidate);
    return ClientExtendedKey("fp", s, u);
  };
  const std::string a = key(P("s1", "SELECT $1::int") + B("p", "s1", "7") + D('P', "p") + E("p") + S());
  CHECK(a == key(P("", "SELECT $1::int") + B("", "", "7") + D('P', "") + E("") + S()));
  CHECK(a != key(P("s1", "SELECT $1::int") + B("p", "s1", "8") + D('P', "p") + E("p") + S()));
  CHECK(a != key(P("s1", "SELECT $1::int") + B("p", "s1", "7", 1) + D('P', "p") + E("p") + S()));  // binary param
  CHECK(a != key(P("s1", "SELECT $1::int") + B("p", "s1", "7", 0, 1) + D('P', "p") + E("p") + S()));  // binary result
  CHECK(a != key(P("s1", "SELECT $1::int") + B("p", "s1", "7") + E("p") + S()));  // no Describe
  CHECK(a != key(P("s1", "SELECT $1::bigint") + B("p", "s1", "7") + D('P', "p") + E("p") + S()));
}

TEST_CASE("a SET of a setting no key depends on keeps the session's keys valid (PgJDBC's application_name)") {
  StatementEffects fx = ClassifyStatements("SET application_name = 'PostgreSQL JDBC Driver'", nullptr);
  CHECK(fx.changes_session_state);  // the Endpoint still captures and replays it
  CHECK(fx.only_setting_changes);
  CHECK(fx.only_unkeyed_settings);
  CHECK(ClassifyStatements("SET statement_timeout = 0; RESET lock_timeout", nullptr).only_unkeyed_settings);
  CHECK_FALSE(ClassifyStatements("SET TimeZone = 'UTC'", nullptr).only_unkeyed_settings);
  CHECK_FALSE(ClassifyStatements("SET application_name = 'x'; SET search_path = s", nullptr).only_unkeyed_settings);
  CHECK_FALSE(ClassifyStatements("SET ROLE r", nullptr).only_unkeyed_settings);
  // Who runs the query is never a key: the Client bypasses such sessions.
  CHECK_FALSE(ClassifyStatements("SET ROLE r", nullptr).only_setting_changes);
  CHECK_FALSE(ClassifyStatements("SET SESSION AUTHORIZATION r", nullptr).only_setting_changes);
  CHECK_FALSE(ClassifyStatements("RESET ROLE", nullptr).only_setting_changes);
  CHECK_FALSE(ClassifyStatements("RESET ALL", nullptr).only_unkeyed_settings);
  CHECK_FALSE(ClassifyStatements("SET application_name = 'x'; SELECT set_config('search_path', 's', false)", nullptr)
                  .only_unkeyed_settings);
}

TEST_CASE("session controls and state changes are classified on tokens") {
  SessionCacheSettings s;
  StatementEffects fx = ClassifyStatements("SET hyperpool.cache = off", &s);
  CHECK(fx.only_cache_settings);
  CHECK_FALSE(fx.changes_session_state);
  CHECK_FALSE(s.enabled);
  ClassifyStatements("SET hyperpool.cache TO 'on'", &s);
  CHECK(s.enabled);
  ClassifyStatements("set hyperpool.cache_ttl = 5", &s);
  REQUIRE(s.ttl.has_value());
  CHECK(*s.ttl == std::chrono::seconds(5));
  ClassifyStatements("RESET hyperpool.cache_ttl", &s);
  CHECK_FALSE(s.ttl.has_value());
  ClassifyStatements("SET hyperpool.cache_ttl = 'soon'", &s);
  CHECK_FALSE(s.enabled);  // unparsable: off

  CHECK(ClassifyStatements("SET search_path = a", nullptr).changes_session_state);
  CHECK(ClassifyStatements("SET ROLE alice", nullptr).changes_session_state);
  CHECK(ClassifyStatements("SET SESSION AUTHORIZATION alice", nullptr).changes_session_state);
  CHECK(ClassifyStatements("RESET ALL", nullptr).changes_session_state);
  CHECK(ClassifyStatements("DISCARD ALL", nullptr).changes_session_state);
  CHECK(ClassifyStatements("SELECT set_config('search_path', 'a', false)", nullptr).changes_session_state);
  CHECK(ClassifyStatements("DO $$ BEGIN PERFORM 1; END $$", nullptr).changes_session_state);
  CHECK_FALSE(ClassifyStatements("SET LOCAL search_path = a", nullptr).changes_session_state);
  CHECK_FALSE(ClassifyStatements("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", nullptr).changes_session_state);
  CHECK_FALSE(ClassifyStatements("SELECT 'SET ROLE x' /* SET ROLE */", nullptr).changes_session_state);
  CHECK(ClassifyStatements("SELECT 1; SET search_path = b", nullptr).changes_session_state);
  CHECK(ClassifyStatements("SELECT 1 /* hyperpool:nocache */", nullptr).nocache_hint);
  // The hint's case-insensitive search (anchored on its ':'): any case, at
  // either end, after other colons, never a near miss.
  CHECK(ClassifyStatements("/*HyperPool:NoCache*/ SELECT 1", nullptr).nocache_hint);
  CHECK(ClassifyStatements("SELECT 1 -- x::int hyperpool::nocache, HYPERPOOL:NOCACHE", nullptr).nocache_hint);
  CHECK_FALSE(ClassifyStatements("SELECT 1 -- hyperpool::nocache", nullptr).nocache_hint);
  CHECK_FALSE(ClassifyStatements("SELECT 1 -- yperpool:nocache hyperpool:nocach", nullptr).nocache_hint);
  CHECK_FALSE(ClassifyStatements("UPDATE t SET a = 1 WHERE b = 'hyperpool nocache'", nullptr).nocache_hint);
  // set_config found by its '_' in any case, among other underscores.
  CHECK(ClassifyStatements("UPDATE pg_t SET a = SET_Config('x', 'y', false)", nullptr).changes_session_state);
  CHECK_FALSE(ClassifyStatements("UPDATE pgbench_tellers SET set_configured = 1", nullptr).changes_session_state);
  CHECK(ClassifyStatements("SELECT 'unterminated", nullptr).changes_session_state);

  // Ordinary settings only: the Endpoint keys by what it captures afterwards.
  auto only_settings = [](std::string_view sql) { return ClassifyStatements(sql, nullptr).only_setting_changes; };
  CHECK(only_settings("SET TimeZone = 'Asia/Tokyo'"));
  CHECK(only_settings("set session datestyle to 'ISO, DMY'"));
  CHECK(only_settings("SET search_path = a"));  // captured; the key then says "not keyable"
  CHECK(only_settings("RESET extra_float_digits"));
  CHECK(only_settings("RESET ALL"));
  CHECK(only_settings("SET TimeZone = 'UTC'; SET hyperpool.cache_ttl = 5"));
  CHECK(only_settings("SELECT 1; SET TimeZone = 'UTC'"));
  CHECK_FALSE(only_settings("SET ROLE alice"));
  CHECK_FALSE(only_settings("RESET ROLE"));
  CHECK_FALSE(only_settings("SET SESSION AUTHORIZATION alice"));
  CHECK_FALSE(only_settings("SET session_authorization = alice"));
  CHECK_FALSE(only_settings("SET TimeZone = 'UTC'; DISCARD ALL"));
  CHECK_FALSE(only_settings("SET TimeZone = 'UTC'; SELECT set_config('a.b', 'c', false)"));
  CHECK_FALSE(only_settings("SET LOCAL TimeZone = 'UTC'"));  // no lasting change at all
  CHECK_FALSE(only_settings("SELECT 1"));
  CHECK(ClassifyStatements("SET TimeZone = 'UTC'", nullptr).changes_session_state);  // the Client tier still bypasses
}

TEST_CASE("startup parameters: keyed, ignored, or not safely keyable") {
  bool bad = true;
  std::string a = HelloFingerprint({{"application_name", "x"}, {"TimeZone", "UTC"}}, &bad);
  CHECK_FALSE(bad);
  std::string b = HelloFingerprint({{"timezone", "UTC"}, {"application_name", "y"}}, &bad);
  CHECK(a == b);
  CHECK(a != HelloFingerprint({{"TimeZone", "Europe/Paris"}}, &bad));
  HelloFingerprint({{"search_path", "a"}}, &bad);
  CHECK(bad);
  HelloFingerprint({{"options", "-c role=alice"}}, &bad);
  CHECK(bad);
  HelloFingerprint({{"options", "-c hyperpool.cache=off"}}, &bad);
  CHECK_FALSE(bad);
  // A keyed setting given as a -c switch is keyed as one (pg_regress sends
  // IntervalStyle so); an ignored one is ignored; any other switch is not keyable.
  const std::string verbose = HelloFingerprint({{"options", "-c intervalstyle=postgres_verbose"}}, &bad);
  CHECK_FALSE(bad);
  CHECK(verbose != HelloFingerprint({{"options", "-c IntervalStyle=iso_8601"}}, &bad));
  CHECK_FALSE(bad);
  CHECK(verbose == HelloFingerprint({{"options", "  -cintervalstyle=postgres_verbose -c application_name=a\\ b"}}, &bad));
  CHECK_FALSE(bad);
  CHECK(verbose != HelloFingerprint({{"IntervalStyle", "postgres_verbose"}}, &bad));  // not confused with the parameter
  HelloFingerprint({{"options", "-c intervalstyle=iso_8601 -c search_path=x"}}, &bad);
  CHECK(bad);
  HelloFingerprint({{"options", "-B 100"}}, &bad);
  CHECK(bad);
  SessionCacheSettings s;
  ApplyStartupParameters({{"options", "-c hyperpool.cache=off"}}, s);
  CHECK_FALSE(s.enabled);
  SessionCacheSettings t;
  ApplyStartupParameters({{"hyperpool.cache_ttl", "2"}}, t);
  CHECK(t.ttl == std::chrono::milliseconds(2000));
}

TEST_CASE("write effects: tables, or everything when they cannot be known") {
  FakeOracle oracle;
  oracle.Table("t").Table("u").View("v", {"public.t"});
  CHECK(WriteEffectOf("UPDATE t SET x = 1", &oracle, true).tables == std::vector<std::string>{"public.t"});
  CHECK(WriteEffectOf("UPDATE t SET x = 1", &oracle, false).all);
  CHECK(WriteEffectOf("SELECT * FROM t", &oracle, true).any() == false);
  CHECK(WriteEffectOf("CREATE TABLE z(x int)", &oracle, true).all);
  CHECK(WriteEffectOf("EXPLAIN ANALYZE DELETE FROM t", &oracle, true).all);
  CHECK(WriteEffectOf("INSERT INTO nowhere VALUES (1)", &oracle, true).all);
  CHECK(WriteEffectOf("SELECT 'unterminated", &oracle, true).all);
  // Two-phase commit: the commit of a prepared transaction wrote what it wrote.
  CHECK(WriteEffectOf("COMMIT PREPARED 'tx1'", &oracle, true).all);
  CHECK(WriteEffectOf("commit prepared 'tx1'", &oracle, true).schema);
  CHECK_FALSE(WriteEffectOf("COMMIT", &oracle, true).any());
  CHECK_FALSE(WriteEffectOf("PREPARE TRANSACTION 'tx1'", &oracle, true).any());
  WriteEffect w;
  w.Merge(WriteEffectOf("SELECT count(*) FROM t", nullptr, true));
  CHECK((w.all && !w.schema));
  w.Merge(WriteEffectOf("ALTER TABLE t ADD COLUMN y int", &oracle, true));
  CHECK(w.schema);
  w = WriteEffect{};
  w.Merge(WriteEffectOf("DELETE FROM u", &oracle, true));
  w.Merge(WriteEffectOf("DELETE FROM t", &oracle, true));
  CHECK(w.tables.size() == 2);
}

TEST_CASE("write effects: only DDL and what may run it can change statement metadata") {
  // Before the catalog is read (no oracle) an aggregate read may write
  // anything; it must not make the Clients forget their statement metadata.
  FakeOracle oracle;
  oracle.Table("t").Function("f", Volatility::kVolatile);
  struct Case {
    const char* sql;
    bool catalog;  // false: no catalog read yet
    bool precise;
    bool all;
    bool schema;
  };
  const Case c = GENERATE(values<Case>({
      {"SELECT count(*), sum(x) FROM t", false, true, true, false},
      {"SELECT f() FROM t", true, true, true, false},
      {"UPDATE t SET x = 1", true, false, true, false},
      {"INSERT INTO nowhere VALUES (1)", true, true, true, false},
      {"CREATE TABLE z(x int)", true, true, true, true},
      {"ALTER TABLE t ADD COLUMN y int", false, true, true, true},
      {"DO $$ BEGIN END $$", true, true, true, true},
      {"CALL p()", true, true, true, true},
      {"EXPLAIN ANALYZE DELETE FROM t", true, true, true, true},
      {"SELECT 'unterminated", true, true, true, true},
      {"SELECT x FROM t", true, true, false, false},
  }));
  INFO(c.sql);
  const WriteEffect fx = WriteEffectOf(c.sql, c.catalog ? &oracle : nullptr, c.precise);
  CHECK(fx.all == c.all);
  CHECK(fx.schema == c.schema);
}

TEST_CASE("keys: client keys and key suffixes separate sessions and shapes") {
  SessionCacheSettings s;
  SessionCacheSettings ttl;
  ttl.ttl = std::chrono::seconds(5);
  CHECK(ClientLocalKey("fp", s, "Q") != ClientLocalKey("fp", ttl, "Q"));
  CHECK(ClientLocalKey("fp", s, "Q") != ClientLocalKey("fq", s, "Q"));
  std::string k1 = "k", k2 = "k";
  AppendKeySuffix(k1, "fp", 'P', s);
  AppendKeySuffix(k2, "fp", 0, s);
  CHECK(k1 != k2);
}

TEST_CASE("the Client tier refuses results older than an invalidation, in either order") {
  CacheOptions o;
  client::ClientTier tier(o);
  std::string msgs = "C" + std::string("\0\0\0\x0bSELECT 1\0", 13);
  StoreControl st{1, std::chrono::seconds(10), /*generation=*/5, {"public.t"}};
  // Invalidation (gen 6) arrives first: the older result is refused.
  tier.Invalidate(InvalidateControl{6, false, {"public.t"}});
  tier.Store("a", msgs, st, std::chrono::steady_clock::now());
  CHECK(tier.GetFresh("a") == nullptr);
  // Result first, invalidation after: removed.
  st.generation = 6;
  tier.Store("b", msgs, st, std::chrono::steady_clock::now());
  CHECK(tier.GetFresh("b") != nullptr);
  tier.Invalidate(InvalidateControl{7, false, {"public.t"}});
  CHECK(tier.GetFresh("b") == nullptr);
  // Other tables are untouched; "all" removes everything.
  StoreControl other{1, std::chrono::seconds(10), 7, {"public.u"}};
  tier.Store("c", msgs, other, std::chrono::steady_clock::now());
  CHECK(tier.GetFresh("c") != nullptr);
  tier.Invalidate(InvalidateControl{8, true, {}});
  CHECK(tier.GetFresh("c") == nullptr);
  other.generation = 7;
  tier.Store("d", msgs, other, std::chrono::steady_clock::now());
  CHECK(tier.GetFresh("d") == nullptr);  // older than the "all" invalidation
  // A zero TTL stores nothing.
  StoreControl zero{1, std::chrono::milliseconds(0), 9, {}};
  tier.Store("e", msgs, zero, std::chrono::steady_clock::now());
  CHECK(tier.GetFresh("e") == nullptr);
}

TEST_CASE("the Client tier counts a result's ttl from when its unit was sent, not from its arrival") {
  // The Endpoint's ttl (the WAL feed's freshness budget among others) is
  // set after the unit left the Client; a result that reaches a busy Client
  // late must not live past what the Endpoint allowed.
  CacheOptions o;
  client::ClientTier tier(o);
  std::string msgs = "C" + std::string("\0\0\0\x0bSELECT 1\0", 13);
  const auto now = std::chrono::steady_clock::now();
  StoreControl st{1, std::chrono::milliseconds(100), 1, {"public.t"}};
  // Sent 150 ms ago with a 100 ms budget: spent in flight, not stored.
  tier.Store("late", msgs, st, now - std::chrono::milliseconds(150));
  CHECK(tier.GetFresh("late") == nullptr);
  // Sent 40 ms ago: stored, and it expires 100 ms after the send.
  tier.Store("in-time", msgs, st, now - std::chrono::milliseconds(40));
  std::shared_ptr<const CacheEntry> e = tier.GetFresh("in-time");
  REQUIRE(e != nullptr);
  CHECK(e->expires == now + std::chrono::milliseconds(60));
}

TEST_CASE("the plain-SELECT scan stops at every byte it must look at, wherever it lies in a block") {
  const std::string_view stops = "'\"&\\;/-$(sShHiIkKzZ.:~!@#%^|`?";
  // Every stop byte at every offset of texts spanning several 16-byte
  // blocks, after any start, against a byte-by-byte reading.
  for (size_t len : {1u, 15u, 16u, 17u, 31u, 32u, 33u, 47u}) {
    for (char stop : stops) {
      for (size_t at = 0; at < len; ++at) {
        std::string sql(len, 'x');
        sql[at] = stop;
        for (size_t from = 0; from <= len; ++from) {
          const size_t want = from <= at ? at : len;
          CAPTURE(len, stop, at, from);
          REQUIRE(NextScanStop(sql, from) == want);
        }
      }
    }
  }
  // No other byte value stops it.
  std::string all;
  for (int b = 0; b < 256; ++b) {
    if (stops.find(static_cast<char>(b)) == std::string_view::npos) all.push_back(static_cast<char>(b));
  }
  CHECK(NextScanStop(all, 0) == all.size());
}

TEST_CASE("simple_read leaves typed literals and keyword-spelled operators to the parser") {
  // Each of these runs a function the byte scan cannot name: a type's input
  // function (a user type's may be volatile), the function behind LIKE's
  // operator (~~, which a user type may define), timezone(), is_normalized().
  for (std::string_view sql : {"SELECT money '12.50' FROM t", "SELECT * FROM t WHERE c = mytype 'x'",
                               "SELECT E'tab' FROM t", "SELECT * FROM t WHERE name LIKE 'a'",
                               "SELECT * FROM t WHERE name ilike 'a'", "SELECT ts AT TIME ZONE 'UTC' FROM t",
                               "SELECT * FROM t WHERE v IS NFC NORMALIZED"}) {
    CAPTURE(sql);
    CHECK_FALSE(SqlText(sql).simple_read());
    CHECK(SqlText(sql).plain_select());  // no effects ClassifyStatements reads either way
  }
  // Literals after keywords and operators stay on the fast path.
  for (std::string_view sql : {"SELECT 'a' FROM t WHERE k = 'x' AND 'y' = z", "SELECT * FROM t WHERE c BETWEEN 'a' AND 'b'",
                               "SELECT CASE WHEN a THEN 'y' ELSE 'n' END FROM bookings", "SELECT zoned, timezone FROM likes"}) {
    CAPTURE(sql);
    CHECK(SqlText(sql).simple_read());
  }
}

TEST_CASE("plain SELECTs are classified without the lexer, anything doubtful with it") {
  // The fast path must cover the common case...
  CHECK(IsPlainSelect("SELECT abalance FROM pgbench_accounts WHERE aid = 4711;"));
  CHECK(IsPlainSelect("  select * from t where a = $1 and b = 'it''s'  ;\n"));
  CHECK(IsPlainSelect("SELECT(1)"));
  // ...and leave everything it cannot judge from the bytes to the lexer.
  for (std::string_view sql : {
           "SELECT 1; SET search_path = b",
           "SELECT 1;DISCARD ALL",
           "SELECT set_config('search_path', 'a', false)",
           "SELECT SET_CONFIG('search_path', 'a', false)",
           "SELECT pg_catalog.\"set_config\"('search_path', 'a', false)",
           "SELECT U&\"\\0073et_config\"('search_path', 'a', false)",
           "SELECT 1 /* hyperpool:nocache */",
           "SELECT 1 -- hyperpool:nocache",
           "SELECT 'unterminated",
           "SELECT 1 -- it's\n'",
           "SELECT $$;$$; DISCARD ALL",
           "SELECT E'\\'; DISCARD ALL'",
           "selectx FROM t",
           "SELECT",
           "WITH a AS (SELECT 1) SELECT * FROM a",
           "SET search_path = a",
       }) {
    CAPTURE(sql);
    CHECK_FALSE(IsPlainSelect(sql));
  }
  // What the fast path answers is what the lexer answers.
  for (std::string_view sql : {"SELECT abalance FROM pgbench_accounts WHERE aid = 4711;", "select 1", "SELECT(1)"}) {
    StatementEffects fx = ClassifyStatements(sql, nullptr);
    CHECK_FALSE(fx.changes_session_state);
    CHECK_FALSE(fx.only_cache_settings);
    CHECK_FALSE(fx.only_setting_changes);
    CHECK_FALSE(fx.nocache_hint);
  }
  CHECK(ClassifyStatements("SELECT 1;DISCARD ALL", nullptr).changes_session_state);
  CHECK(ClassifyStatements("SELECT SET_CONFIG('search_path', 'a', false)", nullptr).changes_session_state);
}

}  // namespace
}  // namespace hyperpool::cache

namespace hyperpool::cache {
namespace {

TEST_CASE("statement kinds from the leading keyword give the full analysis's answer on session state") {
  // ClassifyStatements skips the full analysis when every statement's kind
  // is decided by its leading keyword and no set_config can be named; its
  // answer must be the one the analysis gives.
  const std::string sql = GENERATE(as<std::string>{},
      "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 3",
      "INSERT INTO pgbench_history (tid, bid) VALUES (1, 2)", "BEGIN", "END", "BEGIN; UPDATE t SET a = 1; COMMIT",
      "DELETE FROM t WHERE a IN (SELECT b FROM u)", "DISCARD ALL", "DO $$ begin perform 1; end $$", "CALL p(1)",
      "LOAD 'auto_explain'", "CHECKPOINT", "(SELECT 1) UNION (SELECT 2) ORDER BY 1 FOR UPDATE",
      "UPDATE t SET a = set_config('search_path', 's', false)", "UPDATE t SET a = SET_CONFIG('x', 'y', true)",
      "UPDATE t SET a = U&\"\\0073et_config\"('search_path', 's', false)",
      "WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x", "WITH d AS (SELECT 1) DO $$ $$",
      "COPY t FROM STDIN", "PREPARE q AS SELECT 1", "PREPARE TRANSACTION 'x'", "42", "\"update\" t",
      "SET application_name = 'a'; DISCARD PLANS", "SET application_name = 'a'; UPDATE t SET a = 1",
      "VACUUM; LISTEN c", "SELECT 1; CALL p()", "SELECT now(); LOCK t",
      // One statement told from its bytes (LeadingKeywordOfPlainText), and
      // texts that look like one but are not.
      "  ( UPDATE t SET a = 1)", "update2 t", "UPDATE\xc3\xa9 t", "begin;", "DISCARD ALL;;  ", "LOAD x", "vacuum",
      "update t set a = 1 -- c", "CHECKPOINT; CHECKPOINT", "discard/* x */ all", "do", "UPDATE t SET a = -1",
      "listen c", "unlisten *", "NOTIFY c", "EXPLAIN ANALYZE UPDATE t SET a = 1", "reindex table t",
      "SAVEPOINT s", "release s", "fetch 1 from c", "create temp table x (a int)", "lock table t");
  CAPTURE(sql);
  absl::StatusOr<StatementAnalysis> a = AnalyzeStatement(sql);
  // Text PostgreSQL's grammar rejects fails on the origin too and changes
  // nothing there: whatever the pre-filter concluded costs at most a pin.
  if (!a.ok()) {
    SUCCEED("rejected by PostgreSQL's grammar too");
    return;
  }
  bool expected = false;
  for (StatementKind k : a->kinds) {
    using K = StatementKind;
    if (k == K::kDiscard || k == K::kDo || k == K::kCall || k == K::kOther) expected = true;
  }
  for (const QualifiedName& f : a->functions) {
    if (f.name == "set_config") expected = true;
  }
  StatementEffects fx = ClassifyStatements(sql, nullptr);
  if (sql.rfind("SET ", 0) == 0) {
    CHECK(fx.changes_session_state);  // the SET alone says so
  } else {
    CHECK(fx.changes_session_state == expected);
  }
}

}  // namespace
}  // namespace hyperpool::cache

namespace hyperpool::cache {
namespace {

TEST_CASE("a unit's digest is the same function in every process, and tells units apart") {
  // Pinned values: no per-process seed (the Client and the Endpoint may run
  // in two processes). The empty input is XXH64("", 0).
  CHECK(UnitDigest("") == 0xef46db3751d8e999ull);
  const std::string q = "SELECT abalance FROM pgbench_accounts WHERE aid = 1;";
  std::string frame = "Q";
  const uint32_t len = static_cast<uint32_t>(q.size() + 1 + 4);
  for (int shift = 24; shift >= 0; shift -= 8) frame.push_back(static_cast<char>((len >> shift) & 0xff));
  frame += q;
  frame.push_back('\0');
  CHECK(UnitDigest(frame) == 0xb487bb86ec886075ull);
  // Every length and every byte counts.
  std::vector<uint64_t> seen;
  std::string s;
  for (int n = 0; n < 40; ++n) {
    seen.push_back(UnitDigest(s));
    for (size_t i = 0; i < s.size(); ++i) {
      std::string t = s;
      t[i] ^= 1;
      seen.push_back(UnitDigest(t));
    }
    s.push_back(static_cast<char>('a' + n % 26));
  }
  std::sort(seen.begin(), seen.end());
  CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
}

}  // namespace
}  // namespace hyperpool::cache

namespace hyperpool::cache {
namespace {

bool NaiveContainsCaseless(std::string_view hay, std::string_view needle) {
  for (size_t i = 0; i + needle.size() <= hay.size(); ++i) {
    size_t k = 0;
    while (k < needle.size() && absl::ascii_tolower(static_cast<unsigned char>(hay[i + k])) == needle[k]) ++k;
    if (k == needle.size()) return true;
  }
  return needle.empty();
}

TEST_CASE("ContainsCaseless agrees with a byte-by-byte search at every length and place", "[tier][scan]") {
  // Texts of every length up to 80 built from the needles' own bytes in both
  // cases, their neighbours under `| 0x20` ('@' and '`', '[' and '{'),
  // blanks and a high byte, so that every SIMD block position and the tail
  // loop see partial and whole matches.
  const std::vector<std::string_view> needles = {"listen", "notify", "pg_prepared_statement", "hyperpool:nocache",
                                                 "set_config", "l", "ln"};
  const std::string alphabet = "lLiIsStTeEnN_pPgG:@`[{ \xc3";
  testing::XorShift next(0x9e3779b97f4a7c15ULL);
  size_t found = 0;
  for (int round = 0; round < 4000; ++round) {
    const std::string_view needle = needles[next() % needles.size()];
    std::string hay(next() % 81, ' ');
    for (char& c : hay) c = alphabet[next() % alphabet.size()];
    if (next() % 3 == 0 && hay.size() >= needle.size()) {  // a planted match, letters in random case
      const size_t at = next() % (hay.size() - needle.size() + 1);
      for (size_t k = 0; k < needle.size(); ++k) {
        const char c = needle[k];
        hay[at + k] = (c >= 'a' && c <= 'z' && next() % 2 == 0) ? static_cast<char>(c - 32) : c;
      }
    }
    const bool expected = NaiveContainsCaseless(hay, needle);
    found += expected ? 1 : 0;
    CAPTURE(hay, needle);
    REQUIRE(ContainsCaseless(hay, needle) == expected);
  }
  CHECK(found > 500);  // the planted matches were found, not only absences
  CHECK_FALSE(ContainsCaseless("LISTE", "listen"));
  CHECK(ContainsCaseless("select 1; LiStEn channel_with_a_long_name_here", "listen"));
  CHECK_FALSE(ContainsCaseless("select pg_prepared_statementS from x where y = 1", "pg_prepared_statementx"));
}

TEST_CASE("LeadingKeywordOfPlainText sees a comment or quote in every 16-byte place", "[tier][scan]") {
  for (size_t pad = 0; pad < 40; ++pad) {
    const std::string head = "UPDATE pgbench_accounts SET abalance = abalance + -1234" + std::string(pad, ' ');
    CAPTURE(pad);
    CHECK(LeadingKeywordOfPlainText(head + "WHERE aid = 5") == std::optional<std::string>("update"));
    CHECK_FALSE(LeadingKeywordOfPlainText(head + "-- c\nWHERE aid = 5").has_value());
    CHECK_FALSE(LeadingKeywordOfPlainText(head + "/* c */ WHERE aid = 5").has_value());
    CHECK_FALSE(LeadingKeywordOfPlainText(head + "WHERE aid = '5'").has_value());
    CHECK_FALSE(LeadingKeywordOfPlainText(head + "; SELECT 1").has_value());
    CHECK_FALSE(LeadingKeywordOfPlainText(head + "WHERE aid = $1").has_value());
    CHECK(LeadingKeywordOfPlainText(head + "WHERE aid = 5 / 2 - 1;  ") == std::optional<std::string>("update"));
  }
}

}  // namespace
}  // namespace hyperpool::cache
