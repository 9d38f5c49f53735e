#include "cache/sql_analysis.h"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

namespace hyperpool::cache {
namespace {

std::vector<std::string> Names(const std::vector<QualifiedName>& v) {
  std::vector<std::string> out;
  for (const QualifiedName& n : v) out.push_back(n.ToString());
  return out;
}

StatementAnalysis Analyze(std::string_view sql) {
  absl::StatusOr<StatementAnalysis> a = AnalyzeStatement(sql);
  INFO(sql);
  REQUIRE(a.ok());
  return *a;
}

TEST_CASE("lexer token kinds and values") {
  struct Case {
    std::string sql;
    std::vector<TokenKind> kinds;
    std::vector<std::string> values;
  };
  using K = TokenKind;
  auto c = GENERATE(values<Case>({
      {"SELECT Foo", {K::kIdentifier, K::kIdentifier}, {"select", "foo"}},
      {"\"Foo\"\"bar\"", {K::kQuotedIdentifier}, {"Foo\"bar"}},
      {"'it''s'", {K::kString}, {"it's"}},
      {"E'a\\'b\\\\'", {K::kString}, {"a'b\\"}},
      {"$$a'b$$", {K::kString}, {"a'b"}},
      {"$fn$ $$ x $fn$", {K::kString}, {" $$ x "}},
      {"$1 $23", {K::kParam, K::kParam}, {"", ""}},
      {"1 3.5 .5 1e10 2.5E-3 0x1F 1_000", {K::kNumber, K::kNumber, K::kNumber, K::kNumber,
        K::kNumber, K::kNumber, K::kNumber}, {"", "", "", "", "", "", ""}},
      {"a::int", {K::kIdentifier, K::kDoubleColon, K::kIdentifier}, {"a", "", "int"}},
      {"a <= b", {K::kIdentifier, K::kOperator, K::kIdentifier}, {"a", "", "b"}},
      {"(a,b);", {K::kLParen, K::kIdentifier, K::kComma, K::kIdentifier, K::kRParen,
        K::kSemicolon}, {"", "a", "", "b", "", ""}},
      {"x -- now()\n y", {K::kIdentifier, K::kIdentifier}, {"x", "y"}},
      {"x /* a /* nested */ now() */ y", {K::kIdentifier, K::kIdentifier}, {"x", "y"}},
      {"1+-- c\n2", {K::kNumber, K::kOperator, K::kNumber}, {"", "", ""}},
      {"B'101' X'FF' N'n' U&'d\\0061'", {K::kString, K::kString, K::kString, K::kString},
       {"101", "FF", "n", "d\\0061"}},
      {"a[1]", {K::kIdentifier, K::kLBracket, K::kNumber, K::kRBracket}, {"a", "", "", ""}},
      {"caf\xc3\xa9", {K::kIdentifier}, {"caf\xc3\xa9"}},
  }));
  INFO(c.sql);
  absl::StatusOr<std::vector<Token>> t = Lex(c.sql);
  REQUIRE(t.ok());
  REQUIRE(t->size() == c.kinds.size());
  for (size_t i = 0; i < t->size(); ++i) {
    CHECK((*t)[i].kind == c.kinds[i]);
    CHECK((*t)[i].value == c.values[i]);
  }
}

TEST_CASE("lexer errors") {
  auto sql = GENERATE(as<std::string>{}, "'open", "\"open", "$$ open", "$a$ x $b$",
                      "/* open", "/* /* */", "E'\\'", "\"\"", "a $ b");
  INFO(sql);
  CHECK_FALSE(Lex(sql).ok());
  CHECK_FALSE(AnalyzeStatement(sql).ok());
}

TEST_CASE("standard_conforming_strings off makes backslash escape quotes") {
  CHECK_FALSE(Lex("'a\\'b'").ok());  // 'a\' b ' (unterminated)
  absl::StatusOr<std::vector<Token>> off = Lex("'a\\'b'", LexOptions{false});
  REQUIRE(off.ok());
  REQUIRE(off->size() == 1);
  CHECK((*off)[0].value == "a'b");
}

TEST_CASE("statement kind and count") {
  struct Case {
    std::string sql;
    StatementKind kind;
    size_t count;
  };
  using S = StatementKind;
  auto c = GENERATE(values<Case>({
      {"SELECT 1", S::kSelect, 1},
      {"select 1;", S::kSelect, 1},
      {";;select 1;;", S::kSelect, 1},
      {"", S::kEmpty, 0},
      {" ; -- x\n ;", S::kEmpty, 0},
      {"VALUES (1)", S::kSelect, 1},
      {"TABLE t", S::kSelect, 1},
      {"(SELECT 1) UNION (SELECT 2)", S::kSelect, 1},
      {"WITH x AS (SELECT 1) SELECT * FROM x", S::kSelect, 1},
      {"WITH RECURSIVE x(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM x) SELECT * FROM x",
       S::kSelect, 1},
      {"WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", S::kInsert, 1},
      {"WITH x AS (SELECT 1), y AS NOT MATERIALIZED (SELECT 2) DELETE FROM t", S::kDelete, 1},
      {"INSERT INTO t VALUES (1)", S::kInsert, 1},
      {"UPDATE t SET a = 1", S::kUpdate, 1},
      {"DELETE FROM t", S::kDelete, 1},
      {"MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE", S::kMerge, 1},
      {"TRUNCATE t", S::kTruncate, 1},
      {"COPY t FROM STDIN", S::kCopyFrom, 1},
      {"COPY t (a, b) TO STDOUT", S::kCopyTo, 1},
      {"COPY (SELECT 1 FROM t) TO STDOUT", S::kCopyTo, 1},
      {"CREATE TABLE t (a int)", S::kDdl, 1},
      {"ALTER TABLE t ADD b int", S::kDdl, 1},
      {"DROP TABLE t", S::kDdl, 1},
      {"COMMENT ON TABLE t IS 'x'", S::kDdl, 1},
      {"GRANT SELECT ON t TO bob", S::kDdl, 1},
      {"REVOKE ALL ON t FROM bob", S::kDdl, 1},
      {"REFRESH MATERIALIZED VIEW m", S::kDdl, 1},
      {"VACUUM t", S::kMaintenance, 1},
      {"BEGIN", S::kTransaction, 1},
      {"START TRANSACTION", S::kTransaction, 1},
      {"COMMIT", S::kTransaction, 1},
      {"END", S::kTransaction, 1},
      {"ROLLBACK", S::kTransaction, 1},
      {"ABORT", S::kTransaction, 1},
      {"SAVEPOINT a", S::kTransaction, 1},
      {"RELEASE SAVEPOINT a", S::kTransaction, 1},
      {"PREPARE TRANSACTION 'x'", S::kTransaction, 1},
      {"PREPARE p AS SELECT 1", S::kPrepare, 1},
      {"EXECUTE p", S::kExecute, 1},
      {"DEALLOCATE p", S::kDeallocate, 1},
      {"SET search_path = x", S::kSet, 1},
      {"RESET ALL", S::kSet, 1},
      {"SHOW TimeZone", S::kShow, 1},
      {"DISCARD ALL", S::kDiscard, 1},
      {"LISTEN c", S::kListen, 1},
      {"UNLISTEN *", S::kUnlisten, 1},
      {"NOTIFY c, 'x'", S::kNotify, 1},
      {"LOCK TABLE t", S::kLock, 1},
      {"CALL p()", S::kCall, 1},
      {"DO $$BEGIN END$$", S::kDo, 1},
      {"EXPLAIN SELECT 1", S::kExplain, 1},
      {"DECLARE c CURSOR FOR SELECT 1", S::kCursor, 1},
      {"LOAD 'x'", S::kOther, 1},
      {"SELECT 1; SELECT 2", S::kSelect, 2},
      {"INSERT INTO t VALUES (1); SELECT 1", S::kInsert, 2},
      {"SELECT ';' -- ;\n", S::kSelect, 1},
      {"SELECT $$;$$, \";\"", S::kSelect, 1},
  }));
  StatementAnalysis a = Analyze(c.sql);
  CHECK(a.kind == c.kind);
  CHECK(a.statement_count == c.count);
}

TEST_CASE("every leading keyword maps to its statement kind; other words to kOther; WITH, COPY, PREPARE to none") {
  using K = StatementKind;
  const std::pair<std::string_view, K> table[] = {
      {"select", K::kSelect},         {"values", K::kSelect},          {"table", K::kSelect},
      {"insert", K::kInsert},         {"update", K::kUpdate},          {"delete", K::kDelete},
      {"merge", K::kMerge},           {"truncate", K::kTruncate},      {"create", K::kDdl},
      {"alter", K::kDdl},             {"drop", K::kDdl},               {"comment", K::kDdl},
      {"grant", K::kDdl},             {"revoke", K::kDdl},             {"security", K::kDdl},
      {"refresh", K::kDdl},           {"import", K::kDdl},             {"reassign", K::kDdl},
      {"vacuum", K::kMaintenance},    {"analyze", K::kMaintenance},    {"analyse", K::kMaintenance},
      {"cluster", K::kMaintenance},   {"reindex", K::kMaintenance},    {"checkpoint", K::kMaintenance},
      {"begin", K::kTransaction},     {"start", K::kTransaction},      {"commit", K::kTransaction},
      {"end", K::kTransaction},       {"rollback", K::kTransaction},   {"abort", K::kTransaction},
      {"savepoint", K::kTransaction}, {"release", K::kTransaction},    {"set", K::kSet},
      {"reset", K::kSet},             {"show", K::kShow},              {"execute", K::kExecute},
      {"deallocate", K::kDeallocate}, {"discard", K::kDiscard},        {"listen", K::kListen},
      {"unlisten", K::kUnlisten},     {"notify", K::kNotify},          {"lock", K::kLock},
      {"call", K::kCall},             {"do", K::kDo},                  {"explain", K::kExplain},
      {"declare", K::kCursor},        {"fetch", K::kCursor},           {"move", K::kCursor},
      {"close", K::kCursor},
  };
  for (const auto& [word, kind] : table) {
    INFO(word);
    REQUIRE(StatementKindOfKeyword(word).has_value());
    CHECK(*StatementKindOfKeyword(word) == kind);
  }
  for (std::string_view none : {"with", "copy", "prepare"}) CHECK_FALSE(StatementKindOfKeyword(none).has_value());
  for (std::string_view other : {"load", "selects", "sel", "d", "x", "updat", "ends", "tables", "zzz"}) {
    INFO(other);
    REQUIRE(StatementKindOfKeyword(other).has_value());
    CHECK(*StatementKindOfKeyword(other) == K::kOther);
  }
}

TEST_CASE("flags: row locks, data-modifying CTE, SELECT INTO, time literals") {
  struct Case {
    std::string sql;
    bool locks, dml_cte, into, time;
  };
  auto c = GENERATE(values<Case>({
      {"SELECT * FROM t FOR UPDATE", true, false, false, false},
      {"SELECT * FROM t FOR NO KEY UPDATE OF t SKIP LOCKED", true, false, false, false},
      {"SELECT * FROM t FOR SHARE", true, false, false, false},
      {"SELECT * FROM t FOR KEY SHARE NOWAIT", true, false, false, false},
      {"SELECT * FROM t -- FOR UPDATE", false, false, false, false},
      {"SELECT 'FOR UPDATE' FROM t", false, false, false, false},
      {"SELECT substring(a FROM 1 FOR 2) FROM t", false, false, false, false},
      {"WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", false, true, false, false},
      {"WITH d AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM d", false, true, false,
       false},
      {"WITH d AS MATERIALIZED (UPDATE t SET a = 1 RETURNING *) SELECT * FROM d", false, true,
       false, false},
      {"WITH d AS (MERGE INTO t USING s ON true WHEN MATCHED THEN DELETE) SELECT 1", false, true,
       false, false},
      {"WITH d AS (SELECT 'DELETE FROM t') SELECT * FROM d", false, false, false, false},
      {"SELECT * INTO newt FROM t", false, false, true, false},
      {"SELECT a INTO TEMP newt FROM t", false, false, true, false},
      {"INSERT INTO t SELECT 1", false, false, false, false},
      {"SELECT 'now'::timestamptz", false, false, false, true},
      {"SELECT timestamp 'now'", false, false, false, true},
      {"SELECT 'today'::date", false, false, false, true},
      {"SELECT CAST('tomorrow' AS date)", false, false, false, true},
      {"SELECT * FROM t WHERE ts > 'yesterday'", false, false, false, true},
      {"SELECT * FROM t WHERE ts > 'NOW'", false, false, false, true},
      {"SELECT 'now'::text::timestamptz", false, false, false, true},
      {"SELECT 'now'::text", false, false, false, false},
      {"SELECT * FROM t WHERE title ILIKE '%now%'", false, false, false, false},
      {"SELECT '2024-01-01'::date", false, false, false, false},
      {"SELECT 1 -- 'now'::timestamptz\n", false, false, false, false},
  }));
  StatementAnalysis a = Analyze(c.sql);
  INFO(c.sql);
  CHECK(a.has_row_locks == c.locks);
  CHECK(a.has_data_modifying_cte == c.dml_cte);
  CHECK(a.has_select_into == c.into);
  CHECK(a.has_time_literal == c.time);
}

TEST_CASE("function calls") {
  struct Case {
    std::string sql;
    std::vector<std::string> functions;
    std::vector<std::string> value_functions;
  };
  auto c = GENERATE(values<Case>({
      {"SELECT now()", {"now"}, {}},
      {"SELECT NOW ()", {"now"}, {}},
      {"SELECT 1 -- now()\n", {}, {}},
      {"SELECT 1 /* NOW() */", {}, {}},
      {"SELECT 'now()'", {}, {}},
      {"SELECT \"now()\" FROM t", {}, {}},
      {"SELECT lower(name), pg_catalog.upper(x) FROM t", {"lower", "pg_catalog.upper"}, {}},
      {"SELECT \"MyFunc\"(1)", {"MyFunc"}, {}},
      {"SELECT s.\"F\"(1)", {"s.F"}, {}},
      {"SELECT * FROM t WHERE a IN (1, 2) AND EXISTS (SELECT 1) AND b = ANY (ARRAY[1])",
       {}, {}},
      {"SELECT CAST(a AS numeric(10, 2)), b::varchar(20), c::character varying(3) FROM t",
       {}, {}},
      {"SELECT ROW(1, 2), coalesce(a, 1), nullif(a, 0), greatest(1, 2), least(1, 2) FROM t",
       {}, {}},
      {"SELECT count(*) FILTER (WHERE a > 0) OVER (PARTITION BY b) FROM t", {"count"}, {}},
      {"SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY a) FROM t", {"percentile_cont"}, {}},
      {"SELECT * FROM generate_series(1, 3) g(i)", {"generate_series"}, {}},
      {"SELECT * FROM generate_series(1, 3) AS g(i)", {"generate_series"}, {}},
      {"SELECT * FROM t x(a, b)", {}, {}},
      {"SELECT * FROM (SELECT 1) s(a) JOIN u USING (a)", {}, {}},
      {"WITH x(a) AS (SELECT 1) SELECT * FROM x", {}, {}},
      {"SELECT nextval('s'), currval('s'), setval('s', 1), lastval()",
       {"nextval", "currval", "setval", "lastval"}, {}},
      {"SELECT current_date, CURRENT_TIMESTAMP(3), localtime, user, session_user",
       {}, {"current_date", "current_timestamp", "localtime", "user", "session_user"}},
      {"SELECT current_schema()", {"current_schema"}, {}},
      {"SELECT trim(both 'x' FROM a) FROM t", {"pg_catalog.btrim"}, {}},
      {"SELECT extract(epoch FROM now())", {"pg_catalog.extract", "now"}, {}},
      {"SELECT f(g(h(1)))", {"f", "g", "h"}, {}},
      {"SELECT * FROM t TABLESAMPLE SYSTEM (10)", {"system"}, {}},
      {"SELECT a FROM t GROUP BY ROLLUP (a)", {}, {}},
      {"INSERT INTO t (a, b) VALUES (1, random())", {"random"}, {}},
      {"SELECT left(a, 2) FROM t LEFT JOIN u ON true", {"left"}, {}},
      {"SELECT t.a FROM t", {}, {}},
  }));
  StatementAnalysis a = Analyze(c.sql);
  INFO(c.sql);
  CHECK(Names(a.functions) == c.functions);
  CHECK(a.value_functions == c.value_functions);
}

TEST_CASE("relations read and written") {
  struct Case {
    std::string sql;
    std::vector<std::string> read;
    std::vector<std::string> written;
  };
  auto c = GENERATE(values<Case>({
      {"SELECT * FROM t", {"t"}, {}},
      {"SELECT * FROM public.t", {"public.t"}, {}},
      {"SELECT * FROM db.public.t", {"public.t"}, {}},
      {"SELECT * FROM \"My Table\"", {"My Table"}, {}},
      {"SELECT * FROM a, b AS x, c y", {"a", "b", "c"}, {}},
      {"SELECT * FROM a JOIN b ON a.id = b.id LEFT JOIN c USING (id), d", {"a", "b", "c", "d"},
       {}},
      {"SELECT * FROM ONLY a", {"a"}, {}},
      {"SELECT * FROM a WHERE id IN (SELECT id FROM b)", {"a", "b"}, {}},
      {"SELECT (SELECT max(x) FROM b) FROM a", {"b", "a"}, {}},
      {"SELECT * FROM (SELECT * FROM a, b) s, c", {"a", "b", "c"}, {}},
      {"SELECT * FROM a, LATERAL (SELECT * FROM b WHERE b.x = a.x) l", {"a", "b"}, {}},
      {"WITH x AS (SELECT * FROM a) SELECT * FROM x, b", {"a", "b"}, {}},
      {"TABLE a", {"a"}, {}},
      {"SELECT 1 UNION ALL TABLE a", {"a"}, {}},
      {"SELECT extract(year FROM ts) FROM a", {"a"}, {}},
      {"SELECT * FROM a WHERE x IS DISTINCT FROM y", {"a"}, {}},
      {"SELECT substring(x FROM 2) FROM a", {"a"}, {}},
      {"SELECT 'FROM b' FROM a", {"a"}, {}},
      {"SELECT * FROM a -- , b\n", {"a"}, {}},
      {"SELECT * FROM a ORDER BY x, y", {"a"}, {}},
      {"SELECT * FROM a GROUP BY x, y", {"a"}, {}},
      {"SELECT * FROM a WINDOW w AS (ORDER BY x), w2 AS (w)", {"a"}, {}},
      {"INSERT INTO t (a, b) SELECT a, b FROM s", {"s"}, {"t"}},
      {"INSERT INTO t AS x (a) VALUES (1) ON CONFLICT (a) DO UPDATE SET a = 2, b = 3", {}, {"t"}},
      {"UPDATE t SET a = 1, b = 2 FROM s, u WHERE t.id = s.id", {"s", "u"}, {"t"}},
      {"UPDATE ONLY t AS x SET a = 1", {}, {"t"}},
      {"DELETE FROM t USING s, u WHERE t.id = s.id", {"s", "u"}, {"t"}},
      {"MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET a = 1, b = 2 "
       "WHEN NOT MATCHED THEN INSERT (a) VALUES (1)", {"s"}, {"t"}},
      {"MERGE INTO t x USING (SELECT * FROM s) y ON true WHEN MATCHED THEN DELETE", {"s"},
       {"t"}},
      {"TRUNCATE a, ONLY b", {}, {"a", "b"}},
      {"TRUNCATE TABLE a RESTART IDENTITY", {}, {"a"}},
      {"COPY a FROM STDIN", {}, {"a"}},
      {"COPY a (x) TO STDOUT", {"a"}, {}},
      {"COPY (SELECT * FROM a) TO STDOUT", {"a"}, {}},
      {"WITH d AS (DELETE FROM a RETURNING *) INSERT INTO b SELECT * FROM d", {}, {"a", "b"}},
      {"SELECT * FROM t FOR UPDATE OF t", {"t"}, {}},
      {"CREATE TABLE t AS SELECT * FROM a", {"a"}, {}},  // DDL: invalidates everything anyway
      {"EXPLAIN ANALYZE UPDATE t SET a = 1", {}, {"t"}},
      {"INSERT INTO t VALUES (1); UPDATE u SET a = 1", {}, {"t", "u"}},
      {"SELECT * FROM ROWS FROM (f(), g()) AS x(a, b)", {}, {}},
  }));
  StatementAnalysis a = Analyze(c.sql);
  INFO(c.sql);
  CHECK(Names(a.relations_read) == c.read);
  CHECK(Names(a.relations_written) == c.written);
}

TEST_CASE("normalised text and fingerprint ignore literals, case and comments") {
  auto [x, y, same] = GENERATE(table<std::string, std::string, bool>({
      {"SELECT * FROM t WHERE a = 1", "select *  from T where A = 42", true},
      {"SELECT * FROM t WHERE a = 'x'", "SELECT * FROM t /* c */ WHERE a = 'yy' -- z", true},
      {"SELECT * FROM t WHERE a = 1", "SELECT * FROM t WHERE b = 1", false},
      {"SELECT * FROM \"T\"", "SELECT * FROM t", false},
  }));
  StatementAnalysis a = Analyze(x);
  StatementAnalysis b = Analyze(y);
  CHECK((a.fingerprint == b.fingerprint) == same);
  CHECK((a.normalized == b.normalized) == same);
}

TEST_CASE("normalised form replaces literals") {
  CHECK(Analyze("SELECT a, 'x', 1.5 FROM t WHERE b = $1").normalized ==
        "select a , ? , ? from t where b = $1");
}


TEST_CASE("SqlText: a simple read is one SELECT that calls nothing, and the full analysis agrees") {
  auto [sql, simple] = GENERATE(table<std::string, bool>({
      {"SELECT abalance FROM pgbench_accounts WHERE aid = 4711;", true},
      {"  select * from t where a = $1 and b = 'it''s'  ;\n", true},
      {"SELECT * FROM t FOR UPDATE", true},  // locks rows, writes nothing
      {"SELECT * FROM listen_log JOIN notify_log USING (id)", false},  // '(' : USING (...)
      {"SELECT * FROM listen_log, notify_log", true},
      {"SELECT CURRENT_TIMESTAMP", true},
      {"SELECT now()", false},
      {"SELECT nextval('s')", false},
      {"SELECT set_config('a', 'b', false)", false},
      {"SELECT pg_notify('c', 'x')", false},
      {"SELECT * INTO TEMP t FROM u", false},
      {"SELECT * INTO t FROM u", false},
      {"SELECT * FROM intotable", true},
      {"SELECT 1; SET search_path = x", false},
      {"INSERT INTO t VALUES (1)", false},
      {"SELECT \"x\" FROM t", false},
      {"SELECT 1 -- comment", false},
  }));
  INFO(sql);
  const SqlText text(sql);
  CHECK(text.simple_read() == simple);
  if (!simple) return;
  const absl::StatusOr<StatementAnalysis>& a = text.analysis();
  REQUIRE(a.ok());
  CHECK(a->statement_count == 1);
  CHECK(a->kind == StatementKind::kSelect);
  CHECK(a->functions.empty());
  CHECK(a->relations_written.empty());
  CHECK_FALSE(a->has_select_into);
  CHECK_FALSE(a->has_data_modifying_cte);
}

TEST_CASE("SqlText: the tokens and the analysis are computed once and equal the free functions'") {
  const std::string sql = "UPDATE t SET a = a + 1 WHERE id = $1 RETURNING a";
  const SqlText text(sql);
  const auto& t1 = text.tokens();
  const auto& t2 = text.tokens();
  CHECK(&t1 == &t2);
  REQUIRE(t1.ok());
  CHECK(t1->size() == Lex(sql)->size());
  const auto& a = text.analysis();
  REQUIRE(a.ok());
  CHECK(a->fingerprint == 0);  // filled in only on demand
  REQUIRE(text.normalized_analysis_if_done() == &*a);
  CHECK(a->normalized.empty());  // hashed from the tokens, never built
  CHECK(text.normalized_text() == AnalyzeStatement(sql)->normalized);
  CHECK(a->fingerprint == AnalyzeStatement(sql)->fingerprint);
  CHECK(a->fingerprint == Fnv1a64(text.normalized_text()));
  CHECK(Names(a->relations_written) == std::vector<std::string>{"t"});
}


// Shapes a scan of tokens misjudged, each answered by PostgreSQL's grammar.
TEST_CASE("the parse tree sees relations a token scan could not place") {
  struct Case {
    std::string sql;
    std::vector<std::string> read;
  };
  auto c = GENERATE(values<Case>({
      // A relation reached only inside parentheses of a join tree.
      {"SELECT * FROM (a JOIN (b JOIN c ON true) ON true)", {"a", "b", "c"}},
      {"SELECT * FROM ((SELECT 1) s CROSS JOIN LATERAL (SELECT * FROM d WHERE d.x = s.x) l)", {"d"}},
      // A CTE named like the table it reads: inside its own query the name
      // is the table; after it, the CTE.
      {"WITH orders AS (SELECT * FROM orders WHERE paid) SELECT * FROM orders", {"orders"}},
      // A CTE's name does not leak out of the subquery that defines it.
      {"SELECT * FROM (WITH t AS (SELECT 1) SELECT * FROM t) s, t", {"t"}},
      // A later CTE sees an earlier one; an earlier one does not see a later one.
      {"WITH a AS (SELECT * FROM b), b AS (SELECT * FROM a) SELECT * FROM b", {"b"}},
      // Set operations and nested WITHs at any depth.
      {"SELECT * FROM x UNION ALL (WITH y AS (SELECT * FROM z) SELECT * FROM y)", {"x", "z"}},
      {"SELECT (SELECT max(v) FROM w) FROM (VALUES (1)) t(v)", {"w"}},
      {"SELECT * FROM s.t1 NATURAL JOIN \"Odd Name\"", {"s.t1", "Odd Name"}},
  }));
  StatementAnalysis a = Analyze(c.sql);
  INFO(c.sql);
  CHECK(a.kind == StatementKind::kSelect);
  CHECK(Names(a.relations_read) == c.read);
}

TEST_CASE("the parse tree reports calls, operators, casts and attribute references") {
  // A function whose name is a non-reserved keyword is still a call.
  CHECK(Names(Analyze("SELECT version(), \"left\"('ab', 1), coalesce(1, 2), abort(1)").functions) ==
        std::vector<std::string>{"version", "left", "abort"});
  CHECK(Names(Analyze("SELECT * FROM t WHERE a #=# b AND c BETWEEN 1 AND 2").operators) ==
        std::vector<std::string>{"#=#", ">=", "<="});
  StatementAnalysis ops = Analyze("SELECT a #=# b, c OPERATOR(app.===) d FROM t ORDER BY a USING <<<");
  CHECK(Names(ops.operators) == std::vector<std::string>{"#=#", "app.===", "<<<"});
  StatementAnalysis casts = Analyze("SELECT x::ticket, CAST(y AS app.money2), int4 '1' FROM t");
  CHECK(Names(casts.casts) == std::vector<std::string>{"ticket", "app.money2", "int4"});
  StatementAnalysis attr = Analyze("SELECT t.fresh, (t).other, t.* FROM t");
  CHECK(attr.attribute_names == std::vector<std::string>{"fresh", "other"});
  // Time words read at parse time, spelled in each way the grammar allows.
  CHECK(Analyze("SELECT timestamptz 'now'").has_time_literal);
  CHECK(Analyze("SELECT CAST('today' AS date)").has_time_literal);
  CHECK_FALSE(Analyze("SELECT 'today'::text").has_time_literal);
  // What the grammar rejects is no analysis at all.
  CHECK_FALSE(AnalyzeStatement("SELECT FROM WHERE (").ok());
  CHECK_FALSE(AnalyzeStatement("SELEC 1").ok());
}

TEST_CASE("texts differing only in literals share one parse; a time word keeps its own") {
  StatementAnalysis plain = Analyze("SELECT * FROM t WHERE ts > '2020-01-01'");
  StatementAnalysis now = Analyze("SELECT * FROM t WHERE ts > 'now'");
  CHECK_FALSE(plain.has_time_literal);
  CHECK(now.has_time_literal);
  CHECK_FALSE(Analyze("SELECT * FROM t WHERE ts > '2021-02-02'").has_time_literal);
}

TEST_CASE("standard_conforming_strings off: a backslash is not judged") {
  LexOptions off;
  off.standard_conforming_strings = false;
  CHECK_FALSE(AnalyzeStatement("SELECT 'a\\' FROM t", off).ok());
  CHECK(AnalyzeStatement("SELECT 'a' FROM t", off).ok());
}

// The fields of an analysis the parser reports (not the lexer's
// `normalized` and `fingerprint`).
bool SameParse(const StatementAnalysis& a, const StatementAnalysis& b) {
  return a.statement_count == b.statement_count && a.kinds == b.kinds && a.has_row_locks == b.has_row_locks &&
         a.has_data_modifying_cte == b.has_data_modifying_cte && a.has_select_into == b.has_select_into &&
         a.has_time_literal == b.has_time_literal && a.value_functions == b.value_functions &&
         a.functions == b.functions && a.operators == b.operators && a.casts == b.casts &&
         a.attribute_names == b.attribute_names && a.relations_read == b.relations_read &&
         a.relations_written == b.relations_written && a.catalog_names == b.catalog_names &&
         a.catalog_unbounded == b.catalog_unbounded && a.listens == b.listens;
}

std::optional<std::string> Collapsed(std::string_view sql) {
  absl::StatusOr<std::vector<Token>> t = Lex(sql);
  REQUIRE(t.ok());
  return CollapsedValuesText(*t, sql);
}

TEST_CASE("a VALUES list's rows of parameters and constants are cut to its first") {
  CHECK(Collapsed("insert into t (a, b) values ($1, $2), ($3, NULL), (DEFAULT, 42) returning a") ==
        "insert into t (a, b) values ($1, $2)returning a");
  CHECK(Collapsed("INSERT INTO s.\"T\" VALUES (now(), 'x'),($1),( 7 ) /* c */ ON CONFLICT DO NOTHING") ==
        "INSERT INTO s.\"T\" VALUES (now(), 'x')ON CONFLICT DO NOTHING");
  CHECK(Collapsed("select * from (values (1), (2)) v; insert into u values ($1), ($2)") ==
        "select * from (values (1)) v; insert into u values ($1)");
  // Rows the analysis could see something in stay, and so does what follows.
  CHECK(Collapsed("insert into t values (1), ('now'), (2)") == std::nullopt);
  CHECK(Collapsed("insert into t values (1), (2), (f(3)), (4)") == "insert into t values (1), (f(3)), (4)");
  CHECK(Collapsed("insert into t values (1), ($1::int), (-1), (1.5), (0x1F)") == std::nullopt);
  CHECK(Collapsed("insert into t values (1)") == std::nullopt);
  CHECK(Collapsed("insert into t select 1, 2") == std::nullopt);
  CHECK(Collapsed("select \"values\"(1), (2)") == std::nullopt);
}

TEST_CASE("a statement with its inert VALUES rows cut parses as the whole statement does") {
  const std::vector<std::string> firsts = {"($1, $2)", "(now(), 'today')", "(nextval('s'), (select max(x) from u))",
                                           "(DEFAULT, $1::text)", "(t.f, current_user)"};
  const std::vector<std::string> tails = {"", " returning *", " on conflict (a) do update set b = excluded.b",
                                          "; select random()", " returning (select count(*) from w)"};
  for (const std::string& first : firsts) {
    for (const std::string& tail : tails) {
      std::string sql = "insert into s.t (a, b) values " + first;
      for (int i = 0; i < 50; ++i) sql += i % 3 == 0 ? ", (NULL, $9)" : i % 3 == 1 ? ",(default,12)" : " ,( $3 , $4 )";
      sql += tail;
      INFO(sql);
      const std::optional<std::string> one = Collapsed(sql);
      REQUIRE(one.has_value());
      const absl::StatusOr<StatementAnalysis> whole = ParseAnalysis(sql);
      const absl::StatusOr<StatementAnalysis> cut = ParseAnalysis(*one);
      REQUIRE(whole.ok() == cut.ok());
      if (whole.ok()) CHECK(SameParse(*whole, *cut));
    }
  }
}

TEST_CASE("a bulk INSERT too long for the shape memo is analysed as its one-row text") {
  // 20,000 rows: a shape key past the memo's 16 kB, judged by the cut text
  // (the parser on the whole took ~0.3 s here; it is asked once per shape).
  std::string sql = "INSERT INTO bulk (\"x\", y) VALUES ($1, now())";
  for (int i = 1; i < 20000; ++i) sql += ",($" + std::to_string(2 * i) + ", DEFAULT)";
  sql += " RETURNING x";
  const SqlText text(sql);
  REQUIRE(text.analysis().ok());
  const absl::StatusOr<StatementAnalysis> whole = ParseAnalysis(sql);
  REQUIRE(whole.ok());
  CHECK(SameParse(*text.analysis(), *whole));
  CHECK(Names(text.analysis()->relations_written) == std::vector<std::string>{"bulk"});
  CHECK(Names(text.analysis()->functions) == std::vector<std::string>{"now"});
}

}  // namespace
}  // namespace hyperpool::cache
