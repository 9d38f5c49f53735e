// DecisionMemo (cache/decision_memo.h): the Endpoint's memo of cacheability
// decisions answers exactly what DecideSql answers, and never a decision
// made on another catalog, another oracle (role, database, search_path: one
// memo per EndpointCache, whose oracle is its own), other context flags or
// another text (but one differing only in its standalone integers).

#include "cache/decision_memo.h"

#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "cache/catalog_overlay.h"
#include "support/xorshift.h"

namespace hyperpool::cache {
namespace {

DecisionContext Ctx(const VolatilityOracle* oracle) {
  DecisionContext c;
  c.oracle = oracle;
  return c;
}

std::string Key(std::string_view sql, const DecisionContext& ctx = {}) {
  SqlText t(sql);
  std::string k;
  REQUIRE(DecisionMemo::KeyOf(t, ctx, k));
  return k;
}

void CheckSame(const Decision& a, const Decision& b) {
  CHECK(a.reason == b.reason);
  CHECK(a.detail == b.detail);
  CHECK(a.tables == b.tables);
  CHECK(a.unknown_name == b.unknown_name);
}

// memo.Decide against DecideSql on a fresh text.
MemoDecision Through(DecisionMemo& memo, std::string_view sql, const DecisionContext& ctx, CatalogVersion v = {}) {
  SqlText t(sql);
  MemoDecision m = memo.Decide(t, ctx, v);
  SqlText fresh(sql);
  CheckSame(m.decision, DecideSql(fresh, ctx));
  return m;
}

TEST_CASE("a plain SELECT's key masks its standalone integers and nothing else") {
  CHECK(Key("SELECT abalance FROM pgbench_accounts WHERE aid = 17;") ==
        Key("SELECT abalance FROM pgbench_accounts WHERE aid = 98231;"));
  CHECK(Key("SELECT * FROM t WHERE a = 1 AND b IN (2, 3) LIMIT 10") ==
        Key("SELECT * FROM t WHERE a = 4 AND b IN (5, 66) LIMIT 7"));
  // Digits that are part of a name, a parameter, a string, a decimal or an
  // exponent, or a hex literal are kept.
  CHECK(Key("SELECT * FROM t1") != Key("SELECT * FROM t2"));
  CHECK(Key("SELECT $1 FROM t") != Key("SELECT $2 FROM t"));
  CHECK(Key("SELECT * FROM t WHERE s = '1'") != Key("SELECT * FROM t WHERE s = '2'"));
  CHECK(Key("SELECT * FROM t WHERE s = 'it''s 1'") != Key("SELECT * FROM t WHERE s = 'it''s 2'"));
  CHECK(Key("SELECT 1.5") != Key("SELECT 1.6"));
  CHECK(Key("SELECT 1e5") != Key("SELECT 1e6"));
  CHECK(Key("SELECT 0x1F") != Key("SELECT 0x2F"));
  CHECK(Key("SELECT 1_000") != Key("SELECT 2_000"));
  // Not a plain SELECT (a comment could hold anything): the text itself.
  CHECK(Key("SELECT 1 -- x") != Key("SELECT 2 -- x"));
  CHECK(Key("INSERT INTO t VALUES (1)") != Key("INSERT INTO t VALUES (2)"));
  // The context's flags are part of the key.
  DecisionContext off;
  off.standard_conforming_strings = false;
  CHECK(Key("SELECT 1", off) != Key("SELECT 1"));
  DecisionContext txn;
  txn.in_transaction = true;
  CHECK(Key("SELECT 1", txn) != Key("SELECT 1"));
}

TEST_CASE("the memo answers what DecideSql answers, first and again, for texts of one key") {
  FakeOracle oracle;
  oracle.Table("t").Table("pgbench_accounts").Function("f", Volatility::kVolatile).Sequence("s");
  oracle.Function("g", Volatility::kImmutable);
  DecisionMemo memo;
  const DecisionContext ctx = Ctx(&oracle);
  const std::vector<std::string> texts = {
      "SELECT abalance FROM pgbench_accounts WHERE aid = 17;",
      "SELECT abalance FROM pgbench_accounts WHERE aid = 98231;",
      "SELECT * FROM t WHERE a = 1",
      "SELECT f(1) FROM t",
      "SELECT g(2) FROM t",
      "SELECT * FROM nosuch WHERE a = 3",
      "SELECT nextval('s')",
      "SELECT now()",
      "SELECT * FROM t WHERE d = 'now'",
      "SELECT * FROM t FOR UPDATE",
      "UPDATE t SET a = 1",
      "SELECT 1; SELECT 2",
      "SELECT * FROM t /* 1 */ WHERE a = 1",
      "SELECT 'unterminated",
  };
  for (int round = 0; round < 2; ++round) {
    for (const std::string& s : texts) {
      INFO(s << " round " << round);
      MemoDecision m = Through(memo, s, ctx);
      if (round == 1 && m.analysed) CHECK(m.from_memo);
    }
  }
  CHECK(memo.hits() > 0);
  // A text that does not lex is never kept: its error names a position.
  SqlText bad("SELECT 'unterminated");
  CHECK_FALSE(memo.Decide(bad, ctx, {}).from_memo);
}

TEST_CASE("a memoized decision still reads the unit's own parameters") {
  FakeOracle oracle;
  oracle.Table("t");
  DecisionMemo memo;
  DecisionContext ctx = Ctx(&oracle);
  std::vector<ParamValue> params = {ParamValue{std::string_view("42"), 0}};
  ctx.params = params;
  CHECK(Through(memo, "SELECT * FROM t WHERE d = $1", ctx).decision.cacheable());
  params[0].value = std::string_view("now");
  MemoDecision m = Through(memo, "SELECT * FROM t WHERE d = $1", ctx);
  CHECK(m.from_memo);
  CHECK(m.decision.reason == Reason::kVolatile);
  CHECK(m.decision.detail == "time parameter");
  // A decision made before the parameters are read stays what it was.
  CHECK(Through(memo, "SELECT * FROM t FOR SHARE", ctx).decision.reason == Reason::kRowLocks);
  CHECK(Through(memo, "SELECT * FROM t FOR SHARE", ctx).decision.reason == Reason::kRowLocks);
}

TEST_CASE("a decision is not reused after the catalog changed (DDL through the overlay, a new read)") {
  FakeOracle base;
  base.Table("orders").Function("price", Volatility::kImmutable);
  CatalogOverlay overlay;
  OverlayOracle oracle(&base, &overlay);
  DecisionMemo memo;
  uint64_t loads = 1;
  auto version = [&] { return CatalogVersion{loads, overlay.version()}; };
  const DecisionContext ctx = Ctx(&oracle);
  const std::string q = "SELECT price(id) FROM orders WHERE id = 1";
  CHECK(Through(memo, q, ctx, version()).decision.cacheable());
  CHECK(Through(memo, q, ctx, version()).from_memo);

  // ALTER TABLE orders ...: sent (opened), the same text is unknown now.
  CatalogChange ddl;
  ddl.names = {"orders"};
  overlay.Open(ddl);
  MemoDecision after = Through(memo, q, ctx, version());
  CHECK_FALSE(after.from_memo);
  CHECK(after.decision.unknown_name);
  CHECK(Through(memo, q, ctx, version()).decision.unknown_name);

  // Settled, then a read that began after it: decided on the new catalog.
  overlay.Settle(ddl);
  CHECK(Through(memo, q, ctx, version()).decision.unknown_name);
  FakeOracle reread;
  reread.Table("orders").Function("price", Volatility::kVolatile);  // CREATE OR REPLACE ... VOLATILE
  oracle.set_base(&reread);
  overlay.ReadLoaded(overlay.ReadStarting());
  ++loads;
  MemoDecision now = Through(memo, q, ctx, version());
  CHECK_FALSE(now.from_memo);
  CHECK(now.decision.reason == Reason::kVolatile);
}

TEST_CASE("a decision is not reused under another oracle or other flags") {
  FakeOracle plain, temp;
  plain.Table("t");
  temp.Table("t", /*temporary=*/true);  // e.g. another role's or search_path's view of the name
  DecisionMemo memo;
  const std::string q = "SELECT * FROM t WHERE id = 1";
  CHECK(Through(memo, q, Ctx(&plain)).decision.cacheable());
  MemoDecision other = Through(memo, q, Ctx(&temp));
  CHECK_FALSE(other.from_memo);
  CHECK(other.decision.reason == Reason::kTemporaryTable);
  // No oracle (no catalog loaded): unknown, not the loaded catalog's answer.
  CHECK_FALSE(Through(memo, q, Ctx(nullptr)).decision.cacheable());

  DecisionContext txn = Ctx(&plain);
  CHECK(Through(memo, q, txn).decision.cacheable());
  txn.in_transaction = true;
  CHECK(Through(memo, q, txn).decision.reason == Reason::kInTransaction);
  DecisionContext small = Ctx(&plain);
  small.max_query_bytes = 10;
  CHECK(Through(memo, q, small).decision.reason == Reason::kOversizedQuery);
  DecisionContext off = Ctx(&plain);
  off.standard_conforming_strings = false;
  CHECK(Through(memo, "SELECT * FROM t WHERE s = 'a\\b'", off).decision.reason == Reason::kParseError);
}

TEST_CASE("the memo's catalog version moves with every overlay change") {
  CatalogOverlay o;
  uint64_t v = o.version();
  CatalogChange c;
  c.names = {"t"};
  o.Open(c);
  CHECK(o.version() != v);
  v = o.version();
  o.Settle(c);
  CHECK(o.version() != v);
  v = o.version();
  o.ReadLoaded(o.ReadStarting());
  CHECK(o.version() != v);
  v = o.version();
  o.Committed(CatalogChange::All());
  CHECK(o.version() != v);
}

TEST_CASE("the memo stays bounded") {
  FakeOracle oracle;
  oracle.Table("t");
  DecisionMemo memo;
  for (size_t i = 0; i < 3 * DecisionMemo::kCapacity; ++i) {
    Through(memo, "SELECT c" + std::to_string(i) + " FROM t", Ctx(&oracle));
  }
  CHECK(memo.size() <= 2 * DecisionMemo::kCapacity);
}

// EffectMemo: the Endpoint's write tracking per text shape.

std::string EKey(std::string_view sql, bool scs = true) {
  std::string k;
  REQUIRE(EffectMemo::KeyOf(sql, scs, k));
  return k;
}

// EffectOf's part that the memo keeps, computed afresh.
MemoEffect Fresh(const SqlText& text, const VolatilityOracle* oracle) {
  MemoEffect m;
  m.write = WriteEffectOf(text, oracle, /*precise_names=*/true, /*standard_conforming_strings=*/true);
  m.own_write = m.write.any();
  if (text.analysis().ok()) m.catalog = CatalogChange::Of(*text.analysis());
  return m;
}

TEST_CASE("EffectMemo: a write's key masks its standalone integers, only where the bytes tell them") {
  const std::string a = EKey("UPDATE pgbench_accounts SET abalance = abalance + -4211 WHERE aid = 77;");
  CHECK(a == EKey("UPDATE pgbench_accounts SET abalance = abalance + -12 WHERE aid = 900001;"));
  // A minus sign is a token of its own: pgbench's negative and positive
  // deltas make two keys.
  CHECK(a != EKey("UPDATE pgbench_accounts SET abalance = abalance + 12 WHERE aid = 900001;"));
  CHECK(a != EKey("UPDATE pgbench_accounts SET abalance = abalance + -12 WHERE bid = 900001;"));
  CHECK(a != EKey("UPDATE pgbench_accounts SET abalance = abalance + -4211 WHERE aid = 77;", false));
  CHECK(EKey("INSERT INTO h VALUES (1, 'a 1')") != EKey("INSERT INTO h VALUES (1, 'a 2')"));  // strings kept
  CHECK(EKey("INSERT INTO h VALUES (1, 'it''s', 2)") == EKey("INSERT INTO h VALUES (5, 'it''s', 6)"));
  CHECK(EKey("UPDATE t1 SET a = 1") != EKey("UPDATE t2 SET a = 1"));  // identifiers
  CHECK(EKey("UPDATE t SET a = 1.5") != EKey("UPDATE t SET a = 2.5"));  // decimals are not masked
  CHECK(EKey("UPDATE t SET a = 1e5") != EKey("UPDATE t SET a = 2e5"));
  // Where the bytes cannot tell strings, comments or identifiers apart,
  // the key is the text itself.
  CHECK(MaskableText("UPDATE t SET a = 1 WHERE b = 'x'"));
  CHECK_FALSE(MaskableText("UPDATE t SET a = 1 -- 2"));
  CHECK_FALSE(MaskableText("UPDATE t SET a = 1 /* 2 */"));
  CHECK_FALSE(MaskableText("UPDATE \"t 1\" SET a = 1"));
  CHECK_FALSE(MaskableText("UPDATE t SET a = $1"));
  CHECK_FALSE(MaskableText("UPDATE t SET a = E'\\' 1 '"));
  CHECK_FALSE(MaskableText("UPDATE t SET a = U&'1'"));
  CHECK_FALSE(MaskableText("UPDATE t SET a = 'unbalanced"));
  CHECK(MaskableText("UPDATE t SET a = '-- not a comment', b = '\"x\"'"));
  CHECK(EKey("UPDATE t SET a = 1 -- 2") != EKey("UPDATE t SET a = 1 -- 3"));
}

// Byte-by-byte statements of the two rules the shape applies (the scan in
// decision_memo.cc reads sixteen bytes at a time): maskable, and masked.
bool ReferenceMaskable(std::string_view sql) {
  bool in_string = false;
  for (size_t i = 0; i < sql.size(); ++i) {
    const char c = sql[i];
    if (c == '\\' || c == '\0') return false;
    if (c == '\'') {
      in_string = !in_string;
    } else if (!in_string) {
      if (c == '"' || c == '$' || c == '&') return false;
      if ((c == '-' || c == '/') && i + 1 < sql.size() && sql[i + 1] == (c == '-' ? '-' : '*')) return false;
    }
  }
  return !in_string;
}

void ReferenceMasked(std::string_view sql, std::string& key) {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  auto joins = [&digit](char c) {
    return digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || c == '.' ||
           static_cast<unsigned char>(c) >= 0x80;
  };
  bool in_string = false;
  for (size_t i = 0; i < sql.size(); ++i) {
    const char c = sql[i];
    if (c == '\'') in_string = !in_string;
    if (in_string || !digit(c) || (i > 0 && joins(sql[i - 1]))) {
      key.push_back(c);
      continue;
    }
    size_t end = i + 1;
    while (end < sql.size() && digit(sql[end])) ++end;
    if (end == sql.size() || !joins(sql[end])) {
      key.push_back('\0');
    } else {
      key.append(sql.substr(i, end - i));
    }
    i = end - 1;
  }
}

TEST_CASE("SqlText::shape is MaskableText and AppendMaskedIntegers in one pass, at every length and place") {
  // Texts up to 90 bytes of digits, letters, and every byte either
  // function reads (quotes of all kinds, '-', '/', '*', '.', '$', '&', '\\',
  // NUL, a high byte), so that runs of digits and strings cross the
  // sixteen-byte blocks at every offset; the reference is the two
  // functions' own answer.
  std::string alphabet = "0123456789 aZ_.$&\"'-/*e,()=\\\xc3";
  alphabet.push_back('\0');
  testing::XorShift next(0x853c49e6748fea9bULL);
  size_t masked = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string sql(next() % 91, ' ');
    // Mostly plain bytes (digits, blanks, letters), so that many texts are
    // maskable; the rare bytes now and then.
    for (char& c : sql) {
      const uint64_t r = next() % 100;
      c = r < 40 ? static_cast<char>('0' + next() % 10) : r < 60 ? ' ' : r < 80 ? "aZ_e.,()="[next() % 9] : alphabet[next() % alphabet.size()];
    }
    CAPTURE(sql);
    REQUIRE(MaskableText(sql) == ReferenceMaskable(sql));
    std::string expected(1, ReferenceMaskable(sql) ? '\1' : '\0');
    if (expected[0] == '\1') {
      std::string mine;
      AppendMaskedIntegers(sql, mine);
      ReferenceMasked(sql, expected);
      REQUIRE(mine == expected.substr(1));
      ++masked;
    } else {
      expected.append(sql);
    }
    REQUIRE(SqlText(sql).shape() == expected);
  }
  CHECK(masked > 2000);  // both kinds were compared
  CHECK(SqlText(std::string(SqlText::kMaxShapeBytes + 1, '1')).shape().empty());
  CHECK(SqlText("UPDATE t SET a = a + -12 WHERE id = 3").shape() == std::string("\1UPDATE t SET a = a + -\0 WHERE id = \0", 37));
}

TEST_CASE("EffectMemo: a kept effect is what EffectOf would compute, and never another catalog's") {
  FakeOracle base;
  base.Table("accounts").Table("history");
  CatalogOverlay overlay;
  OverlayOracle oracle(&base, &overlay);
  EffectMemo memo;
  uint64_t loads = 1;
  auto version = [&] { return CatalogVersion{loads, overlay.version()}; };
  const SqlText first("UPDATE accounts SET balance = balance + 5 WHERE id = 1");
  REQUIRE(memo.Find(first, true, version(), &oracle) == nullptr);
  const MemoEffect fresh = Fresh(first, &oracle);
  CHECK(fresh.write.tables == std::vector<std::string>{"public.accounts"});
  memo.Keep(fresh);
  const SqlText next("UPDATE accounts SET balance = balance + 73 WHERE id = 912");
  const MemoEffect* hit = memo.Find(next, true, version(), &oracle);
  REQUIRE(hit != nullptr);
  const MemoEffect again = Fresh(next, &oracle);
  CHECK(hit->write.tables == again.write.tables);
  CHECK(hit->write.all == again.write.all);
  CHECK(hit->own_write == again.own_write);
  CHECK(memo.hits() == 1);
  // Another text, another flag, another oracle, another catalog state: none.
  CHECK(memo.Find(SqlText("UPDATE history SET x = 1 WHERE id = 1"), true, version(), &oracle) == nullptr);
  CHECK(memo.Find(next, false, version(), &oracle) == nullptr);
  memo.Keep(fresh);
  CHECK(memo.Find(next, true, version(), nullptr) == nullptr);
  CHECK(memo.Find(next, true, version(), &oracle) == nullptr);  // emptied by the oracle change
  memo.Keep(fresh);
  REQUIRE(memo.Find(next, true, version(), &oracle) != nullptr);
  CatalogChange ddl;
  ddl.names = {"accounts"};
  overlay.Open(ddl);
  CHECK(memo.Find(next, true, version(), &oracle) == nullptr);
  memo.Keep(Fresh(next, &oracle));
  ++loads;
  CHECK(memo.Find(next, true, version(), &oracle) == nullptr);
}

TEST_CASE("EffectMemo: bounded") {
  EffectMemo memo;
  for (size_t i = 0; i < EffectMemo::kCapacity + 10; ++i) {
    const std::string sql = "UPDATE t" + std::to_string(i) + " SET a = 1";
    const SqlText t(sql);
    REQUIRE(memo.Find(t, true, CatalogVersion{}, nullptr) == nullptr);
    memo.Keep(MemoEffect{});
  }
  CHECK(memo.size() <= EffectMemo::kCapacity);
  // Too long: never kept.
  const std::string long_sql = "UPDATE t SET a = '" + std::string(EffectMemo::kMaxTextBytes, 'x') + "'";
  const SqlText long_text(long_sql);
  CHECK(memo.Find(long_text, true, CatalogVersion{}, nullptr) == nullptr);
  memo.Keep(MemoEffect{});
  CHECK(memo.Find(long_text, true, CatalogVersion{}, nullptr) == nullptr);
}


}  // namespace
}  // namespace hyperpool::cache

