#include "client/link_trace.h"

#include <string>

#include <catch2/catch_test_macros.hpp>

#include "protocol/frontend_messages.h"

namespace hyperpool::client {
namespace {

namespace pr = protocol;

std::string ParseDescribeFlush() {
  std::string out;
  pr::Encode(pr::Parse{"s1", "select abalance from pgbench_accounts where aid = $1", {}}, out);
  pr::Encode(pr::Describe{pr::ObjectKind::kStatement, "s1"}, out);
  pr::Encode(pr::Flush{}, out);
  return out;
}

TEST_CASE("a flight is summarized as tags, statement names and the start of its SQL") {
  CHECK(SummarizeFlight(ParseDescribeFlush()) ==
        "P[s1](select abalance from pgbench_accounts where aid ...) D[S] H");
  std::string partial = ParseDescribeFlush().substr(0, 7);
  CHECK(SummarizeFlight(partial) == "+7 bytes");
}

TEST_CASE("only flights the Endpoint answers count as round trips") {
  CHECK(ExpectsAnswer(ParseDescribeFlush()));  // the Flush asks for the answers so far
  std::string sync;
  pr::Encode(pr::Bind{}, sync);
  CHECK_FALSE(ExpectsAnswer(sync));
  pr::Encode(pr::Sync{}, sync);
  CHECK(ExpectsAnswer(sync));
  std::string terminate;
  pr::Encode(pr::Terminate{}, terminate);
  CHECK_FALSE(ExpectsAnswer(terminate));
  CHECK_FALSE(ExpectsAnswer(""));
}

}  // namespace
}  // namespace hyperpool::client
