// DDL through hyperpool changes only what it names (CatalogOverlay): the
// names a statement's parse tree holds, a decision that meets one of them
// finds it unknown until a catalog read that began after the DDL's
// transaction ended, and every other decision keeps the catalog read before.
#include "cache/catalog_overlay.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "cache/cacheability.h"
#include "cache/sql_analysis.h"
#include "endpoint/endpoint_cache.h"

namespace hyperpool::cache {
namespace {

bool Has(const std::vector<std::string>& v, std::string_view x) { return std::find(v.begin(), v.end(), x) != v.end(); }

CatalogChange ChangeOf(std::string_view sql) {
  absl::StatusOr<StatementAnalysis> a = AnalyzeStatement(sql);
  REQUIRE(a.ok());
  return CatalogChange::Of(*a);
}

Decision DecideWith(std::string_view sql, const VolatilityOracle* oracle) {
  DecisionContext ctx;
  ctx.oracle = oracle;
  return DecideSql(sql, ctx);
}

TEST_CASE("a statement's catalog change is every name its parse tree holds") {
  CatalogChange c = ChangeOf("CREATE TABLE app.orders (id int REFERENCES customers)");
  CHECK_FALSE(c.all);
  CHECK(Has(c.names, "orders"));
  CHECK(Has(c.names, "customers"));
  c = ChangeOf("CREATE OR REPLACE FUNCTION price(int) RETURNS int VOLATILE LANGUAGE sql AS 'SELECT 1'");
  CHECK(Has(c.names, "price"));
  CHECK(Has(ChangeOf("ALTER FUNCTION price(int) STABLE").names, "price"));
  c = ChangeOf("ALTER TABLE orders RENAME TO orders_old");
  CHECK((Has(c.names, "orders") && Has(c.names, "orders_old")));
  CHECK(Has(ChangeOf("CREATE OPERATOR === (leftarg = int, rightarg = int, function = int4eq)").names, "==="));
  CHECK(Has(ChangeOf("CREATE CAST (int AS ticket) WITH FUNCTION make_ticket(int)").names, "ticket"));
  // SELECT INTO and EXPLAIN ANALYZE CREATE TABLE AS create a table.
  CHECK(Has(ChangeOf("SELECT * INTO orders_copy FROM orders").names, "orders_copy"));
  CHECK(Has(ChangeOf("EXPLAIN ANALYZE CREATE TABLE t2 AS SELECT 1").names, "t2"));
  // What changes nothing.
  CHECK_FALSE(ChangeOf("SELECT price(id) FROM orders").any());
  CHECK_FALSE(ChangeOf("INSERT INTO orders VALUES (1)").any());
  CHECK_FALSE(ChangeOf("EXPLAIN SELECT 1").any());
  CHECK_FALSE(ChangeOf("EXPLAIN ANALYZE SELECT * FROM orders").any());
  CHECK(Has(ChangeOf("EXPLAIN SELECT * INTO t3 FROM orders").names, "t3"));
  // Privileges, comments and owners change nothing a decision reads.
  CHECK_FALSE(ChangeOf("GRANT ALL ON SCHEMA app TO someone").any());
  CHECK_FALSE(ChangeOf("COMMENT ON TABLE orders IS 'x'").any());
  CHECK_FALSE(ChangeOf("ALTER FUNCTION price(int) OWNER TO someone").any());
}

TEST_CASE("a change no name bounds is unbounded") {
  for (std::string_view sql : {"DROP SCHEMA app", "ALTER SCHEMA app RENAME TO app2", "CREATE EXTENSION hstore",
                               "DROP OWNED BY someone", "ALTER ROLE me SET search_path = app",
                               "ALTER DATABASE db SET search_path = app", "DO $$ BEGIN END $$", "CALL p()",
                               "LOAD 'x'", "CREATE EVENT TRIGGER e ON ddl_command_start EXECUTE FUNCTION f()",
                               "ALTER ROLE me RENAME TO you"}) {
    INFO(sql);
    CHECK(ChangeOf(sql).all);
  }
  CHECK_FALSE(ChangeOf("DROP TABLE orders").all);
}

TEST_CASE("a read clears only what was settled before it began") {
  CatalogOverlay o;
  CatalogChange c{false, {"orders"}};
  o.Open(c);
  const uint64_t early = o.ReadStarting();
  o.ReadLoaded(early);  // the transaction is still open: the read may not see it
  CHECK(o.Changed("orders"));
  const uint64_t before_settle = o.ReadStarting();
  o.Settle(c);
  o.ReadLoaded(before_settle);  // began before the commit
  CHECK(o.Changed("orders"));
  CHECK_FALSE(o.Changed("customers"));
  o.ReadLoaded(o.ReadStarting());
  CHECK_FALSE(o.Changed("orders"));
  CHECK(o.empty());

  // Two sessions: cleared only when both have ended.
  o.Open(c);
  o.Open(c);
  o.Settle(c);
  o.ReadLoaded(o.ReadStarting());
  CHECK(o.Changed("orders"));
  o.Settle(c);
  o.ReadLoaded(o.ReadStarting());
  CHECK(o.empty());

  // Unbounded: nothing is decided on the old catalog until a read.
  o.Committed(CatalogChange::All());
  CHECK(o.all_unknown());
  o.ReadLoaded(o.ReadStarting());
  CHECK_FALSE(o.all_unknown());
}

TEST_CASE("a transaction's changes, merged, settle every open they made") {
  // BEGIN; DO ...; DO ...; COMMIT: each DO is opened when sent, and the
  // transaction settles them together (SessionCache: txn_catalog). A merge
  // that kept one of the two left the overlay unknown after every read, and
  // the Endpoint reading the catalog again at once, for good.
  CatalogOverlay o;
  CatalogChange txn;
  for (int i = 0; i < 2; ++i) {
    const CatalogChange c = ChangeOf("DO $$ BEGIN END $$");
    o.Open(c);
    txn.Merge(c);
  }
  o.Settle(txn);
  o.ReadLoaded(o.ReadStarting());
  CHECK_FALSE(o.all_unknown());
  CHECK(o.empty());

  // The same for DROP ... CASCADE (its read again is cascade_pending's).
  txn = CatalogChange{};
  for (std::string_view sql : {"DROP TABLE a CASCADE", "DROP TABLE b CASCADE"}) {
    const CatalogChange c = ChangeOf(sql);
    o.Open(c);
    txn.Merge(c);
  }
  o.Settle(txn);
  o.ReadLoaded(o.ReadStarting());
  CHECK_FALSE(o.cascade_pending());
  CHECK(o.empty());

  // Still open while another session's change is: merged counts settle no
  // more than they opened.
  const CatalogChange other = CatalogChange::All();
  o.Open(other);
  txn = CatalogChange{};
  for (int i = 0; i < 2; ++i) {
    o.Open(CatalogChange::All());
    txn.Merge(CatalogChange::All());
  }
  o.Settle(txn);
  o.ReadLoaded(o.ReadStarting());
  CHECK(o.all_unknown());
  o.Settle(other);
  o.ReadLoaded(o.ReadStarting());
  CHECK_FALSE(o.all_unknown());
}

TEST_CASE("decisions meeting a changed name are unknown; the rest keep the catalog read before") {
  FakeOracle base;
  base.Function("price", Volatility::kImmutable)
      .Function("tax", Volatility::kImmutable)
      .Table("orders")
      .Table("customers")
      .View("big_orders", {"public.orders"})
      .AttributeFunction("total", Volatility::kImmutable);
  CatalogOverlay overlay;
  OverlayOracle oracle(&base, &overlay);
  CHECK(DecideWith("SELECT price(id) FROM orders", &oracle).cacheable());
  CHECK(DecideWith("SELECT o.total FROM orders o", &oracle).cacheable());

  overlay.Open(ChangeOf("CREATE OR REPLACE FUNCTION price(int) RETURNS int VOLATILE LANGUAGE sql AS 'SELECT 1'"));
  Decision d = DecideWith("SELECT price(id) FROM orders", &oracle);
  CHECK(d.reason == Reason::kVolatile);
  CHECK(d.unknown_name);  // the Endpoint reads the catalog again
  CHECK(DecideWith("SELECT tax(id) FROM customers", &oracle).cacheable());

  overlay.Open(ChangeOf("ALTER TABLE orders ADD COLUMN note text"));
  CHECK(DecideWith("SELECT * FROM orders", &oracle).unknown_name);
  // A view over a changed table is unknown too.
  CHECK(DecideWith("SELECT * FROM big_orders", &oracle).unknown_name);
  CHECK(DecideWith("SELECT * FROM customers", &oracle).cacheable());
  // A write to a changed table cannot be attributed: everything.
  absl::StatusOr<StatementAnalysis> w = AnalyzeStatement("UPDATE orders SET id = 1");
  REQUIRE(w.ok());
  CHECK_FALSE(TablesToInvalidate(*w, &oracle).has_value());

  // A function created under a column's name makes c.total a call.
  overlay.Open(ChangeOf("CREATE FUNCTION total(customers) RETURNS int VOLATILE LANGUAGE sql AS 'SELECT 1'"));
  CHECK(DecideWith("SELECT c.total FROM customers c", &oracle).unknown_name);
}

TEST_CASE("DROP ... CASCADE leaves unknown only the names another schema also holds") {
  CatalogChange c = ChangeOf("DROP TABLE parent CASCADE");
  CHECK_FALSE(c.all);
  CHECK(c.cascade);
  CHECK(Has(c.names, "parent"));
  CHECK_FALSE(ChangeOf("DROP TABLE parent").cascade);

  using Row = std::vector<std::optional<std::string_view>>;
  CatalogSnapshot snap;
  for (const Row& r : std::vector<Row>{{"s1", "child", "r", "p", std::nullopt, std::nullopt},
                                       {"public", "child", "r", "p", std::nullopt, std::nullopt},
                                       {"public", "other", "r", "p", std::nullopt, std::nullopt}}) {
    REQUIRE(snap.AddRelationRow(r).ok());
  }
  for (const Row& r : std::vector<Row>{{"t", "s1", "money2", "i"}, {"t", "public", "money2", "v"},
                                       {"t", "public", "plain", "i"}}) {
    REQUIRE(snap.AddSideRow(r).ok());
  }
  std::unique_ptr<VolatilityOracle> base = snap.Oracle({"s1", "public"});
  CatalogOverlay overlay;
  OverlayOracle oracle(base.get(), &overlay);
  overlay.Open(c);
  // s1.child may have been dropped with parent: "child" may now be public's.
  CHECK_FALSE(oracle.Relation({"", "child"}).has_value());
  CHECK(oracle.Relation({"public", "child"}).has_value());
  CHECK(oracle.Relation({"", "other"}).has_value());
  CHECK_FALSE(oracle.TypeVolatility({"", "money2"}).has_value());
  CHECK(oracle.TypeVolatility({"", "plain"}) == Volatility::kImmutable);
  overlay.Settle(c);
  overlay.ReadLoaded(overlay.ReadStarting());
  CHECK(oracle.Relation({"", "child"}).has_value());
}

}  // namespace
}  // namespace hyperpool::cache

namespace hyperpool::endpoint {
namespace {

TEST_CASE("the Endpoint's report counts decisions by reason and bypasses by cause") {
  EndpointCacheReport r;
  r.decided[static_cast<std::size_t>(cache::Reason::kCacheable)] = 7;
  r.decided[static_cast<std::size_t>(cache::Reason::kVolatile)] = 3;
  r.decided_without_catalog = 2;
  r.decided_with_changes = 4;
  r.decided_from_memo = 6;
  r.catalog_reads = 1;
  r.bypass[static_cast<std::size_t>(BypassCause::kSessionState)] = 5;
  const std::string text = FormatCacheReport(r);
  CHECK(text.find("endpoint decisions: cacheable 7 volatile 3 (without catalog 2, with names changed since the "
                  "read 4; catalog reads 1; from the memo 6)") != std::string::npos);
  CHECK(text.find("endpoint bypassed: off 0 session-state 5 startup 0") != std::string::npos);
}

}  // namespace
}  // namespace hyperpool::endpoint
