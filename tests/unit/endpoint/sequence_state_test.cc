// Which statements may leave sequence state on a backend, and the
// per-connection owner (src/endpoint/sequence_state.h).
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "endpoint/sequence_state.h"
#include "endpoint/session_settings.h"

namespace hyperpool::endpoint {
namespace {

TEST_CASE("statements that may call nextval are flagged") {
  auto sql = GENERATE(as<std::string>{}, "SELECT nextval('s')", "select NEXTVAL ('s')", "SELECT setval('s', 5)",
                      "INSERT INTO t DEFAULT VALUES", "insert into t(a) values (1)", "UPDATE t SET a = DEFAULT",
                      "DELETE FROM t", "MERGE INTO t USING u ON true WHEN NOT MATCHED THEN INSERT DEFAULT VALUES",
                      "COPY t FROM STDIN", "TRUNCATE t RESTART IDENTITY", "DO $$ BEGIN END $$", "CALL p()",
                      "EXECUTE q", "ALTER TABLE t ADD COLUMN id serial", "CREATE TABLE t2 AS SELECT 1",
                      "SELECT my_function()", "SELECT app.count(*) FROM t", "SELECT \"Next\"(1)",
                      "SELECT a_function_name_longer_than_24_characters(1)", "WITH x AS (INSERT INTO t VALUES (1) RETURNING a) SELECT a FROM x",
                      "REFRESH MATERIALIZED VIEW v", "SELECT 1; SELECT f(2)", "SELECT U&\"\\0066\"(1)");
  CAPTURE(sql);
  CHECK(MayUseSequences(sql));
}

TEST_CASE("plain reads, currval and lastval are not flagged") {
  auto sql = GENERATE(as<std::string>{}, "SELECT 1", "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
                      "SELECT count(*), max(a), coalesce(b, 0) FROM t WHERE c IN (1, 2) AND d = ANY($1)",
                      "SELECT currval('s')", "SELECT lastval()", "SHOW TimeZone", "BEGIN", "COMMIT",
                      "SELECT \"a\" FROM \"T\" WHERE x = 1", "SELECT now() - interval '1 day'",
                      "SELECT row_number() OVER (PARTITION BY a) FROM t");
  CAPTURE(sql);
  CHECK_FALSE(MayUseSequences(sql));
}

TEST_CASE("the session effects carry the flag, and a FunctionCall message sets it") {
  CHECK(AnalyzeSessionEffects("INSERT INTO t VALUES (1)").sequences);
  CHECK_FALSE(AnalyzeSessionEffects("SELECT 1").sequences);
  SessionSettings s;
  CHECK(s.NoteFrontend('F', std::string_view("\0\0\0\1", 4)).sequences);
}

TEST_CASE("a connection needs DISCARD SEQUENCES when another session, or an older state of its own, is on it") {
  SequenceOwner x;
  SequenceOwner y;
  CHECK_FALSE(x.NeedsDiscardFor(1, 0));
  x.UsedBy(1, 1);                     // session 1 calls nextval on x
  CHECK_FALSE(x.NeedsDiscardFor(1, 1));  // its own latest values stay visible to it
  CHECK(x.NeedsDiscardFor(2, 0));        // never to session 2
  CHECK_FALSE(y.NeedsDiscardFor(1, 1));
  y.UsedBy(1, 2);                     // session 1 calls nextval again, on y
  CHECK(x.NeedsDiscardFor(1, 2));        // x holds older values of session 1
  CHECK_FALSE(y.NeedsDiscardFor(1, 2));
  x.Discarded();
  CHECK_FALSE(x.NeedsDiscardFor(2, 0));
  CHECK(x.owner() == 0);
}

}  // namespace
}  // namespace hyperpool::endpoint
