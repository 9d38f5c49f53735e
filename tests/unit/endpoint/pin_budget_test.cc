// The pinned budget's pure parts (src/endpoint/pin_budget.h): the default
// size, the counter, and the rewrite of a refused pinning message into one
// that makes the origin raise 53300.
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "endpoint/pin_budget.h"
#include "endpoint/session_settings.h"
#include "protocol/codec.h"
#include "unit/endpoint/frontend_builders.h"

namespace hyperpool::endpoint {
namespace {

protocol::Frame OneFrame(std::string_view bytes) {
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  auto r = reader.Read(bytes);
  REQUIRE(r.is_frame());
  REQUIRE(r.frame().size() == bytes.size());
  return r.frame();
}

TEST_CASE("max_pinned defaults to a quarter of the pool, at least one") {
  CHECK(EffectivePinnedBudget(0, 10) == 2);
  CHECK(EffectivePinnedBudget(0, 4) == 1);
  CHECK(EffectivePinnedBudget(0, 1) == 1);
  CHECK(EffectivePinnedBudget(3, 10) == 3);
  CHECK(EffectivePinnedBudget(50, 2) == 50);
}

TEST_CASE("the budget counts pinned sessions up to its limit") {
  PinBudget budget(2);
  CHECK(budget.TryTake());
  CHECK(budget.TryTake());
  CHECK_FALSE(budget.TryTake());
  CHECK(budget.in_use() == 2);
  budget.Give();
  CHECK(budget.TryTake());
  budget.Give();
  budget.Give();
  budget.Give();  // never below zero
  CHECK(budget.in_use() == 0);
}

TEST_CASE("the refusal statement raises 53300 naming max_pinned, and pins nothing itself") {
  const std::string sql = PinBudgetErrorStatement(3);
  CHECK_THAT(sql, Catch::Matchers::StartsWith("DO $hyperpool$"));
  CHECK_THAT(sql, Catch::Matchers::ContainsSubstring("ERRCODE = '53300'"));
  CHECK_THAT(sql, Catch::Matchers::ContainsSubstring("max_pinned = 3"));
  CHECK_THAT(sql, Catch::Matchers::ContainsSubstring("HINT = "));
  CHECK(AnalyzeSessionEffects(sql).pins.empty());
}

TEST_CASE("a refused Query becomes a Query of the refusal statement") {
  const std::string q = testing::QueryBytes("SELECT pg_advisory_lock(1)");
  std::string out;
  REQUIRE(RewritePinningMessage('Q', OneFrame(q).payload, 2, out));
  auto decoded = protocol::DecodeQuery(OneFrame(out).payload);
  REQUIRE(decoded.ok());
  CHECK(decoded->query == PinBudgetErrorStatement(2));
}

TEST_CASE("a refused Parse keeps its name and its parameter count; unknown types become text") {
  std::string p;
  protocol::Encode(protocol::Parse{"s1", "SELECT pg_advisory_lock($1, $2)", {23}}, p);
  std::string out;
  REQUIRE(RewritePinningMessage('P', OneFrame(p).payload, 2, out));
  auto decoded = protocol::DecodeParse(OneFrame(out).payload);
  REQUIRE(decoded.ok());
  CHECK(decoded->statement == "s1");
  CHECK(decoded->query == PinBudgetErrorStatement(2));
  CHECK(decoded->parameter_types == std::vector<protocol::Oid>{23, 25});

  std::string none;
  protocol::Encode(protocol::Parse{"", "CREATE TEMP TABLE t AS SELECT '$1' AS a$1", {}}, none);
  out.clear();
  REQUIRE(RewritePinningMessage('P', OneFrame(none).payload, 2, out));
  decoded = protocol::DecodeParse(OneFrame(out).payload);
  REQUIRE(decoded.ok());
  CHECK(decoded->parameter_types.size() == 1);  // '$1' in the literal counts (harmless); a$1 does not
}

TEST_CASE("other messages are not rewritten") {
  std::string out;
  CHECK_FALSE(RewritePinningMessage('B', std::string_view("\0s1\0\0\0\0\0\0\0", 11), 2, out));
  CHECK_FALSE(RewritePinningMessage('Q', "no terminator", 2, out));
  CHECK_FALSE(RewritePinningMessage('P', std::string_view("s1\0SELECT 1\0", 12), 2, out));  // no type count
  CHECK(out.empty());
}

}  // namespace
}  // namespace hyperpool::endpoint
