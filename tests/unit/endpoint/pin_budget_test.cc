// The pinned budget's pure parts (src/endpoint/pin_budget.h): the default
// size, the counter, and the rewrite of a refused pinning message into one
// that makes the origin raise 53300.
#include <string>
#include <string_view>
#include <vector>

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

constexpr std::string_view kRefusal = "DO $hyperpool$BEGIN RAISE EXCEPTION USING ERRCODE = '53300'; END$hyperpool$";

TEST_CASE("max_pinned defaults to the pool size, at least one") {
  CHECK(EffectivePinnedBudget(0, 10) == 10);
  CHECK(EffectivePinnedBudget(0, 4) == 4);
  CHECK(EffectivePinnedBudget(0, 1) == 1);
  CHECK(EffectivePinnedBudget(0, 0) == 1);
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

TEST_CASE("waiters get units in FIFO order, handed over by Give") {
  PinBudget budget(1);
  REQUIRE(budget.TryTake());
  std::vector<int> woken;
  const auto a = budget.Wait([&] { woken.push_back(1); });
  const auto b = budget.Wait([&] { woken.push_back(2); });
  const auto c = budget.Wait([&] { woken.push_back(3); });
  CHECK(budget.waiting() == 3);
  CHECK(budget.Leave(b));         // b gives up (a cancel, a timeout, a vanished client)
  CHECK_FALSE(budget.Leave(b));   // ...once
  budget.Give();                  // to a: the unit passes on
  CHECK(woken == std::vector<int>{1});
  CHECK(budget.in_use() == 1);
  CHECK_FALSE(budget.Leave(a));   // a was handed a unit: it is no longer waiting
  CHECK_FALSE(budget.TryTake());  // c waits: a newcomer does not overtake it
  budget.Give();
  CHECK(woken == std::vector<int>{1, 3});
  CHECK(budget.TryTake() == false);
  budget.Give();
  CHECK(budget.in_use() == 0);
  CHECK(budget.TryTake());
  (void)c;
}

TEST_CASE("the refusal statement raises the given error with a hint naming max_pinned, and pins nothing itself") {
  const std::string sql = ErrorStatement("53300", "Failed to acquire a connection from the pool", PinBudgetHint(3));
  CHECK_THAT(sql, Catch::Matchers::StartsWith("DO $hyperpool$"));
  CHECK_THAT(sql, Catch::Matchers::ContainsSubstring("ERRCODE = '53300'"));
  CHECK_THAT(sql, Catch::Matchers::ContainsSubstring("max_pinned = 3"));
  CHECK_THAT(sql, Catch::Matchers::ContainsSubstring("HINT = "));
  CHECK(AnalyzeSessionEffects(sql).pins.empty());
  CHECK_THAT(ErrorStatement("57014", "it's $x$", ""), Catch::Matchers::ContainsSubstring("MESSAGE = 'it''s (dollar)x(dollar)'"));
}

TEST_CASE("a refused Query becomes a Query of the refusal statement") {
  const std::string q = testing::QueryBytes("SELECT pg_advisory_lock(1)");
  std::string out;
  REQUIRE(RewritePinningMessage('Q', OneFrame(q).payload, kRefusal, out));
  auto decoded = protocol::DecodeQuery(OneFrame(out).payload);
  REQUIRE(decoded.ok());
  CHECK(decoded->query == kRefusal);
}

TEST_CASE("a refused Parse keeps its name and its parameter count; unknown types become text") {
  std::string p;
  protocol::Encode(protocol::Parse{"s1", "SELECT pg_advisory_lock($1, $2)", {23}}, p);
  std::string out;
  REQUIRE(RewritePinningMessage('P', OneFrame(p).payload, kRefusal, out));
  auto decoded = protocol::DecodeParse(OneFrame(out).payload);
  REQUIRE(decoded.ok());
  CHECK(decoded->statement == "s1");
  CHECK(decoded->query == kRefusal);
  CHECK(decoded->parameter_types == std::vector<protocol::Oid>{23, 25});

  std::string none;
  protocol::Encode(protocol::Parse{"", "CREATE TEMP TABLE t AS SELECT '$1' AS a$1", {}}, none);
  out.clear();
  REQUIRE(RewritePinningMessage('P', OneFrame(none).payload, kRefusal, out));
  decoded = protocol::DecodeParse(OneFrame(out).payload);
  REQUIRE(decoded.ok());
  CHECK(decoded->parameter_types.size() == 1);  // '$1' in the literal counts (harmless); a$1 does not
}

TEST_CASE("other messages are not rewritten") {
  std::string out;
  CHECK_FALSE(RewritePinningMessage('B', std::string_view("\0s1\0\0\0\0\0\0\0", 11), kRefusal, out));
  CHECK_FALSE(RewritePinningMessage('Q', "no terminator", kRefusal, out));
  CHECK_FALSE(RewritePinningMessage('P', std::string_view("s1\0SELECT 1\0", 12), kRefusal, out));  // no type count
  CHECK(out.empty());
}

}  // namespace
}  // namespace hyperpool::endpoint
