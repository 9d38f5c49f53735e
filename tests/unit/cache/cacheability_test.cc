#include "cache/cacheability.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

namespace hyperpool::cache {
namespace {

FakeOracle MakeOracle() {
  FakeOracle o;
  o.Builtin("now", Volatility::kStable)
      .Builtin("random", Volatility::kVolatile)
      .Builtin("lower", Volatility::kImmutable)
      .Builtin("count", Volatility::kImmutable)
      .Builtin("nextval", Volatility::kVolatile)
      .Builtin("generate_series", Volatility::kImmutable)
      .Function("my_immutable", Volatility::kImmutable)
      .Function("audit", Volatility::kVolatile)
      .Table("users")
      .Table("orders")
      .Table("public.users")
      .Table("scratch", /*temporary=*/true)
      .View("active_users", {"public.users", "public.sessions"})
      .View("now_view", {"public.users"}, /*nonimmutable_functions=*/true)
      .Sequence("order_seq");
  return o;
}

TEST_CASE("Decide reasons") {
  struct Case {
    std::string sql;
    Reason reason;
    bool in_transaction = false;
  };
  auto c = GENERATE(values<Case>({
      {"SELECT 1", Reason::kCacheable},
      {"SELECT * FROM users", Reason::kCacheable},
      {"SELECT lower(name) FROM public.users WHERE id = $1", Reason::kCacheable},
      {"SELECT count(*) FROM users u JOIN orders o ON o.uid = u.id", Reason::kCacheable},
      {"SELECT * FROM users -- now() is mentioned here\n", Reason::kCacheable},
      {"SELECT 'random()' FROM users", Reason::kCacheable},
      {"SELECT * FROM generate_series(1, 3) g(i)", Reason::kCacheable},
      {"WITH x AS (SELECT * FROM users) SELECT * FROM x", Reason::kCacheable},
      {"SELECT my_immutable(1)", Reason::kCacheable},
      {"SELECT * FROM active_users", Reason::kCacheable},
      {"SELECT * FROM users", Reason::kInTransaction, true},
      {"SELECT 1; SELECT 2", Reason::kMultipleStatements},
      {"INSERT INTO users VALUES (1)", Reason::kNotAQuery},
      {"SHOW TimeZone", Reason::kNotAQuery},
      {"EXPLAIN SELECT 1", Reason::kNotAQuery},
      {"SELECT * INTO t2 FROM users", Reason::kSelectInto},
      {"WITH d AS (DELETE FROM users RETURNING *) SELECT * FROM d", Reason::kDataModifyingCte},
      {"SELECT * FROM users FOR UPDATE", Reason::kRowLocks},
      {"SELECT now()", Reason::kVolatile},
      {"SELECT random() FROM users", Reason::kVolatile},
      {"SELECT unknown_fn(1)", Reason::kVolatile},
      {"SELECT audit()", Reason::kVolatile},
      {"SELECT CURRENT_TIMESTAMP", Reason::kVolatile},
      {"SELECT current_user", Reason::kVolatile},
      {"SELECT * FROM users WHERE created > 'now'::timestamptz", Reason::kVolatile},
      {"SELECT nextval('order_seq')", Reason::kVolatile},
      {"SELECT last_value FROM order_seq", Reason::kVolatile},
      {"SELECT * FROM now_view", Reason::kVolatile},
      {"SELECT * FROM scratch", Reason::kTemporaryTable},
      {"SELECT * FROM no_such_table", Reason::kTemporaryTable},
      {"SELECT * FROM users, scratch", Reason::kTemporaryTable},
  }));
  FakeOracle oracle = MakeOracle();
  DecisionContext ctx;
  ctx.oracle = &oracle;
  ctx.in_transaction = c.in_transaction;
  Decision d = DecideSql(c.sql, ctx);
  INFO(c.sql << " -> " << ReasonName(d.reason) << " (" << d.detail << ")");
  CHECK(d.reason == c.reason);
}

TEST_CASE("a name the catalog lacks is flagged for a catalog refresh; known and temporary ones are not") {
  FakeOracle oracle = MakeOracle();
  DecisionContext ctx;
  ctx.oracle = &oracle;
  CHECK(DecideSql("SELECT * FROM no_such_table", ctx).unknown_name);
  CHECK(DecideSql("SELECT unknown_fn(1)", ctx).unknown_name);
  CHECK_FALSE(DecideSql("SELECT * FROM users", ctx).unknown_name);
  CHECK_FALSE(DecideSql("SELECT * FROM scratch", ctx).unknown_name);  // known, temporary
  CHECK_FALSE(DecideSql("SELECT audit()", ctx).unknown_name);         // known, volatile
  ctx.oracle = nullptr;  // no catalog yet: loading it is WantCatalog's job
  CHECK_FALSE(DecideSql("SELECT * FROM no_such_table", ctx).unknown_name);
}

TEST_CASE("DecideSql checks disabled, size and parse errors first") {
  DecisionContext ctx;
  ctx.enabled = false;
  CHECK(DecideSql("SELECT 1", ctx).reason == Reason::kDisabled);
  ctx.enabled = true;
  ctx.max_query_bytes = 8;
  CHECK(DecideSql("SELECT 1234567", ctx).reason == Reason::kOversizedQuery);
  ctx.max_query_bytes = 0;
  CHECK(DecideSql("SELECT 'open", ctx).reason == Reason::kParseError);
  CHECK(DecideSql("SELECT 1", ctx).reason == Reason::kCacheable);
  // Without an oracle nothing is known: any function or relation refuses.
  CHECK(DecideSql("SELECT lower('a')", ctx).reason == Reason::kVolatile);
  CHECK(DecideSql("SELECT * FROM t", ctx).reason == Reason::kTemporaryTable);
}

TEST_CASE("time words in text parameters are volatile, binary ones are not") {
  FakeOracle oracle = MakeOracle();
  auto [value, format, reason] = GENERATE(table<std::string, int16_t, Reason>({
      {"now", 0, Reason::kVolatile},
      {"Today 10:00", 0, Reason::kVolatile},
      {"2024-01-01", 0, Reason::kCacheable},
      {"now", 1, Reason::kCacheable},
  }));
  std::vector<ParamValue> params = {ParamValue{value, format}};
  DecisionContext ctx;
  ctx.oracle = &oracle;
  ctx.params = params;
  CHECK(DecideSql("SELECT * FROM users WHERE created > $1", ctx).reason == reason);
}

TEST_CASE("cacheable decisions carry the base tables to invalidate on") {
  FakeOracle oracle = MakeOracle();
  DecisionContext ctx;
  ctx.oracle = &oracle;
  Decision d = DecideSql("SELECT * FROM active_users a JOIN users u ON true", ctx);
  REQUIRE(d.cacheable());
  CHECK(d.tables == std::vector<std::string>{"public.users", "public.sessions"});
}

TEST_CASE("TablesToInvalidate") {
  FakeOracle oracle = MakeOracle();
  struct Case {
    std::string sql;
    std::optional<std::vector<std::string>> tables;
  };
  auto c = GENERATE(values<Case>({
      {"INSERT INTO users VALUES (1)", std::vector<std::string>{"public.users"}},
      {"UPDATE users SET a = now() FROM orders", std::vector<std::string>{"public.users"}},
      {"SELECT 1", std::vector<std::string>{}},
      {"SELECT random()", std::vector<std::string>{}},
      {"SELECT audit()", std::nullopt},
      {"SELECT unknown_fn()", std::nullopt},
      {"DELETE FROM no_such", std::nullopt},
      {"CREATE TABLE x (a int)", std::nullopt},
      {"CALL proc()", std::nullopt},
      {"TRUNCATE users, orders", std::vector<std::string>{"public.users", "public.orders"}},
  }));
  absl::StatusOr<StatementAnalysis> a = AnalyzeStatement(c.sql);
  REQUIRE(a.ok());
  INFO(c.sql);
  CHECK(TablesToInvalidate(*a, &oracle) == c.tables);
}

TEST_CASE("ParseSearchPath") {
  auto [setting, want] = GENERATE(table<std::string, std::vector<std::string>>({
      {"\"$user\", public", {"alice", "public"}},
      {"public", {"public"}},
      {"  A , \"My Schema\",b", {"a", "My Schema", "b"}},
      {"\"we\"\"ird\"", {"we\"ird"}},
      {"", {}},
  }));
  CHECK(ParseSearchPath(setting, "alice") == want);
}

using Row = std::vector<std::optional<std::string_view>>;

CatalogSnapshot MakeSnapshot() {
  CatalogSnapshot s;
  for (const Row& r : std::vector<Row>{{"pg_catalog", "now", "s"},
                                       {"pg_catalog", "lower", "i"},
                                       {"pg_catalog", "random", "v"},
                                       {"public", "lower", "v"},  // shadowing overload
                                       {"app", "f", "i"}}) {
    REQUIRE(s.AddFunctionRow(r).ok());
  }
  for (const Row& r : std::vector<Row>{
           {"public", "users", "r", "p", std::nullopt, std::nullopt},
           {"app", "users", "r", "p", std::nullopt, std::nullopt},
           {"public", "events", "p", "p", "public", "events"},
           {"public", "events_2024", "r", "p", "public", "events"},
           {"pg_temp_3", "scratch", "r", "t", std::nullopt, std::nullopt},
           {"public", "scratch", "r", "p", std::nullopt, std::nullopt},
           // As pg_get_viewdef prints them under search_path = pg_catalog.
           {"public", "v_users", "v", "p", std::nullopt, std::nullopt,
            " SELECT users.id,\n    lower('a'::text) AS lower\n   FROM public.users;"},
           {"public", "v_now", "v", "p", std::nullopt, std::nullopt,
            " SELECT v1.id,\n    now() AS now\n   FROM (public.v_users v1\n     JOIN "
            "public.events ON (true));"},
           {"public", "v_nested", "v", "p", std::nullopt, std::nullopt,
            " SELECT v_now.id\n   FROM public.v_now;"},
           {"public", "v_udf", "v", "p", std::nullopt, std::nullopt,
            " SELECT app.f(1) AS f;"},
           {"public", "seq", "S", "p", std::nullopt, std::nullopt}}) {
    REQUIRE(s.AddRelationRow(r).ok());
  }
  for (const Row& r : std::vector<Row>{{"public", "v_users", "r", "public", "users", "rp"},
                                       {"public", "v_users", "r", "public", "events_2024", "rp"},
                                       {"public", "v_users", "f", "pg_catalog", "lower", "i"},
                                       {"public", "v_udf", "f", "app", "f", "i"}}) {
    REQUIRE(s.AddViewDependencyRow(r).ok());
  }
  for (const Row& r : std::vector<Row>{{"o", "pg_catalog", "=", "i"},
                                       {"o", "pg_catalog", "+", "i"},
                                       {"o", "pg_catalog", "<", "s"},  // a stable built-in overload
                                       {"o", "public", "#=#", "v"},
                                       {"t", "pg_catalog", "text", "i"},
                                       {"t", "pg_catalog", "timestamptz", "i"},
                                       {"t", "public", "ticket", "v"},  // a volatile input function
                                       {"a", "pg_catalog", "row_to_json", "s"},
                                       {"a", "public", "fresh", "v"}}) {
    REQUIRE(s.AddSideRow(r).ok());
  }
  return s;
}

TEST_CASE("CatalogSnapshot resolves through the search path") {
  CatalogSnapshot snap = MakeSnapshot();
  std::unique_ptr<VolatilityOracle> o = snap.Oracle({"public"});
  CHECK(o->FunctionVolatility({"", "now"}) == Volatility::kStable);
  // The public overload of lower is volatile: the most volatile visible wins.
  CHECK(o->FunctionVolatility({"", "lower"}) == Volatility::kVolatile);
  CHECK(o->FunctionVolatility({"pg_catalog", "lower"}) == Volatility::kImmutable);
  CHECK(o->FunctionVolatility({"", "f"}) == std::nullopt);  // app not on the path
  CHECK(o->FunctionVolatility({"app", "f"}) == Volatility::kImmutable);
  CHECK(o->IsBuiltinFunction({"", "random"}));
  CHECK_FALSE(o->IsBuiltinFunction({"", "lower"}));

  std::optional<RelationInfo> users = o->Relation({"", "users"});
  REQUIRE(users.has_value());
  CHECK(users->resolved == "public.users");
  CHECK(users->base_tables == std::vector<std::string>{"public.users"});
  std::unique_ptr<VolatilityOracle> app = snap.Oracle({"app", "public"});
  CHECK(app->Relation({"", "users"})->resolved == "app.users");
  CHECK(app->FunctionVolatility({"", "f"}) == Volatility::kImmutable);

  // Partitions invalidate as their root.
  CHECK(o->Relation({"", "events_2024"})->base_tables == std::vector<std::string>{"public.events"});
  // A temp relation of that name anywhere wins (a pooled connection may own it).
  CHECK(o->Relation({"", "scratch"})->temporary);
  CHECK_FALSE(o->Relation({"public", "scratch"})->temporary);
  CHECK(o->Relation({"pg_temp", "scratch"})->temporary);
  CHECK(o->Relation({"", "nope"}) == std::nullopt);

  std::optional<RelationInfo> v = o->Relation({"", "v_users"});
  REQUIRE(v.has_value());
  CHECK(v->kind == 'v');
  CHECK_FALSE(v->nonimmutable_functions);
  CHECK(v->base_tables == std::vector<std::string>{"public.users", "public.events"});
  // now() is pinned: pg_depend has no row for it; the definition shows it.
  CHECK(o->Relation({"", "v_now"})->nonimmutable_functions);
  CHECK(o->Relation({"", "v_nested"})->nonimmutable_functions);
  CHECK_FALSE(o->Relation({"", "v_udf"})->nonimmutable_functions);
  // What a view's answers depend on, nested views' included (CatalogOverlay
  // makes the view unknown when any of them changes).
  const std::vector<std::string> deps = o->Relation({"", "v_nested"})->depends_on;
  for (std::string_view name : {"v_now", "now", "v_users", "users", "lower", "events"}) {
    INFO(name);
    CHECK(std::find(deps.begin(), deps.end(), name) != deps.end());
  }
  CHECK(o->Relation({"", "v_udf"})->depends_on == std::vector<std::string>{"f"});
  CHECK(o->Relation({"", "users"})->depends_on.empty());
  CHECK(o->Relation({"", "seq"})->kind == 'S');
}

TEST_CASE("the catalog resolves operators, casts and attribute notation to their functions") {
  CatalogSnapshot snap = MakeSnapshot();
  std::unique_ptr<VolatilityOracle> o = snap.Oracle({"public"});
  DecisionContext ctx;
  ctx.oracle = o.get();
  auto reason = [&](std::string_view sql) { return DecideSql(sql, ctx).reason; };
  // t.fresh is fresh(t), a volatile function; row_to_json is stable.
  CHECK(reason("SELECT u.fresh FROM users u") == Reason::kVolatile);
  CHECK(reason("SELECT (u).fresh FROM users u") == Reason::kVolatile);
  CHECK(reason("SELECT u.row_to_json FROM users u") == Reason::kVolatile);
  CHECK(reason("SELECT u.id FROM users u") == Reason::kCacheable);
  // A user operator over a volatile function; built-in ones stay immutable.
  CHECK(reason("SELECT 1 #=# 2") == Reason::kVolatile);
  CHECK(reason("SELECT * FROM users WHERE id = 1 AND id < 3 + 1") == Reason::kCacheable);
  CHECK(reason("SELECT 1 <#> 2") == Reason::kVolatile);  // unknown operator
  // A type whose input function is volatile; 'now' cast to a time type.
  CHECK(reason("SELECT 'x'::ticket") == Reason::kVolatile);
  CHECK(reason("SELECT 'now'::timestamptz") == Reason::kVolatile);
  CHECK(reason("SELECT timestamptz 'now'") == Reason::kVolatile);
  CHECK(reason("SELECT 'x'::text FROM users") == Reason::kCacheable);
  CHECK(reason("SELECT 'x'::no_such_type") == Reason::kVolatile);
  CHECK(DecideSql("SELECT 'x'::no_such_type", ctx).unknown_name);
  // A write whose statement calls a volatile user function by any of these
  // ways may write anything: invalidate all.
  auto a = AnalyzeStatement("UPDATE users SET id = id #=# 1");
  REQUIRE(a.ok());
  CHECK_FALSE(TablesToInvalidate(*a, o.get()).has_value());
  a = AnalyzeStatement("UPDATE users SET id = 1 WHERE id = 2");
  REQUIRE(a.ok());
  CHECK(TablesToInvalidate(*a, o.get()) == std::vector<std::string>{"public.users"});
}

TEST_CASE("a session with standard_conforming_strings off is not judged on a backslash") {
  FakeOracle oracle = MakeOracle();
  DecisionContext ctx;
  ctx.oracle = &oracle;
  ctx.standard_conforming_strings = false;
  CHECK(DecideSql("SELECT * FROM users WHERE name = 'a\\'", ctx).reason == Reason::kParseError);
  CHECK(DecideSql("SELECT * FROM users WHERE name = 'a'", ctx).reason == Reason::kCacheable);
}

TEST_CASE("CatalogSnapshot rejects malformed rows") {
  CatalogSnapshot s;
  CHECK_FALSE(s.AddFunctionRow(Row{"a", "b"}).ok());
  CHECK_FALSE(s.AddFunctionRow(Row{"a", "b", "x"}).ok());
  CHECK_FALSE(s.AddFunctionRow(Row{"a", std::nullopt, "i"}).ok());
  CHECK_FALSE(s.AddRelationRow(Row{"a", "b", "r", "p"}).ok());
  CHECK_FALSE(s.AddViewDependencyRow(Row{"a", "b", "x", "c", "d", "rp"}).ok());
}

TEST_CASE("DecisionStats counts per fingerprint and reason, bounded") {
  DecisionStats stats(2);
  stats.Record(1, Reason::kCacheable, "select ?");
  stats.Record(1, Reason::kCacheable, "select ?");
  stats.Record(1, Reason::kVolatile, "select ?");
  CHECK(stats.Count(1, Reason::kCacheable) == 2u);
  CHECK(stats.Count(1, Reason::kVolatile) == 1u);
  stats.Record(2, Reason::kNotAQuery, "insert");  // drops the least recently updated row
  CHECK(stats.size() == 2);
  CHECK(stats.dropped() == 1);
  CHECK(stats.Count(1, Reason::kCacheable) == std::nullopt);
  std::vector<DecisionStats::Row> top = stats.Top(10);
  REQUIRE(top.size() == 2);
  CHECK(top[0].count == 1);
}

TEST_CASE("DecisionStats truncates samples") {
  DecisionStats stats(4);
  stats.Record(9, Reason::kCacheable, std::string(1000, 'x'));
  CHECK(stats.Top(1)[0].sample.size() == DecisionStats::kSampleBytes);
}

}  // namespace
}  // namespace hyperpool::cache

namespace hyperpool::cache {
namespace {

std::optional<std::vector<std::string>> Invalidated(std::string_view sql, const VolatilityOracle& o) {
  absl::StatusOr<StatementAnalysis> a = AnalyzeStatement(sql);
  REQUIRE(a.ok());
  return TablesToInvalidate(*a, &o);
}

TEST_CASE("a write invalidates what its foreign keys' actions write; a trigger or rule makes it anything") {
  FakeOracle o;
  o.Table("public.parent").Table("public.child").Table("public.grandchild").Table("public.audited");
  o.Table("parent").Table("audited");
  o.Writes("public.parent", {"public.child"}).Writes("parent", {"public.child"});
  o.Writes("public.child", {"public.grandchild"});
  o.Writes("audited", {"*"});
  auto tables = Invalidated("DELETE FROM parent WHERE id = 1", o);
  REQUIRE(tables.has_value());
  CHECK(*tables == std::vector<std::string>{"public.parent", "public.child", "public.grandchild"});
  CHECK_FALSE(Invalidated("UPDATE audited SET x = 1", o).has_value());
  CHECK_FALSE(Invalidated("TRUNCATE audited", o).has_value());
  // TRUNCATE ... CASCADE empties the referencing tables, whatever they are.
  CHECK_FALSE(Invalidated("TRUNCATE public.grandchild CASCADE", o).has_value());
  CHECK(Invalidated("TRUNCATE public.grandchild", o) == std::vector<std::string>{"public.grandchild"});
}

TEST_CASE("CatalogSnapshot reads what writes write besides their table, partitions for their root") {
  using Row = std::vector<std::optional<std::string_view>>;
  CatalogSnapshot s;
  for (const Row& r : std::vector<Row>{{"public", "pk", "r", "p", std::nullopt, std::nullopt},
                                       {"public", "fk", "r", "p", std::nullopt, std::nullopt},
                                       {"public", "m", "p", "p", "public", "m"},
                                       {"public", "m_1", "r", "p", "public", "m"}}) {
    REQUIRE(s.AddRelationRow(r).ok());
  }
  REQUIRE(s.AddWriteEffectRow(Row{"public", "pk", "c", "public", "fk"}).ok());
  REQUIRE(s.AddWriteEffectRow(Row{"public", "m_1", "a", std::nullopt, std::nullopt}).ok());
  CHECK_FALSE(s.AddWriteEffectRow(Row{"public", "pk", "c", std::nullopt, std::nullopt}).ok());
  std::unique_ptr<VolatilityOracle> o = s.Oracle({"public"});
  CHECK(o->Relation({"", "pk"})->also_writes == std::vector<std::string>{"public.fk"});
  CHECK_FALSE(o->Relation({"", "fk"})->writes_anything);
  CHECK(o->Relation({"", "m_1"})->writes_anything);
  CHECK(o->Relation({"", "m"})->writes_anything);  // a write through the root fires the partition's trigger
  CHECK(Invalidated("DELETE FROM pk", *o) == std::vector<std::string>{"public.pk", "public.fk"});
  CHECK_FALSE(Invalidated("INSERT INTO m VALUES (1)", *o).has_value());
}

}  // namespace
}  // namespace hyperpool::cache
