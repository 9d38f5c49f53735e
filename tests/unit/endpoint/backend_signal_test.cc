// pg_cancel_backend / pg_terminate_backend recognition (src/endpoint/backend_signal.h).
#include <string>
#include <string_view>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "endpoint/backend_signal.h"
#include "protocol/codec.h"
#include "unit/endpoint/frontend_builders.h"

namespace hyperpool::endpoint {
namespace {

std::string_view Payload(const std::string& frame) { return std::string_view(frame).substr(5); }

TEST_CASE("a simple SELECT of the function with a constant pid is recognised") {
  auto t = ParseBackendSignal("SELECT pg_terminate_backend(5000123)");
  REQUIRE(t);
  CHECK(t->terminate);
  CHECK(t->pid == 5000123);
  auto c = ParseBackendSignal("  select PG_CATALOG.pg_cancel_backend ( '42' ) ;  ");
  REQUIRE(c);
  CHECK_FALSE(c->terminate);
  CHECK(c->pid == 42);
  auto timeout = ParseBackendSignal("select pg_terminate_backend(7, 5000)");
  REQUIRE(timeout);
  CHECK(timeout->pid == 7);
}

TEST_CASE("anything else is not") {
  const char* sql = GENERATE("SELECT pg_terminate_backend(pid) FROM pg_stat_activity",
                             "SELECT pg_terminate_backend(pg_backend_pid())", "SELECT pg_terminate_backend(1) AS x",
                             "SELECT pg_terminate_backend(1), 2", "SELECT pg_cancel_backend(1, 5)",
                             "SELECT pg_terminate_backend(0)", "SELECT pg_terminate_backend(99999999999)",
                             "SELECT pg_terminate_backend(1.5)", "SELECT pg_terminate_backendx(1)",
                             "SELECT pg_terminate_backend($1)", "SELECT 1; SELECT pg_terminate_backend(1)");
  CAPTURE(sql);
  CHECK_FALSE(ParseBackendSignal(sql));
}

TEST_CASE("a Parse with $1 and its Bind carry the pid; the stand-in keeps name and types") {
  std::string parse;
  protocol::Encode(protocol::Parse{"", "select pg_terminate_backend($1::int)", {23}}, parse);
  const std::string bind_text = testing::Bind("", {"5000123"});
  auto s = ParseBackendSignalUnit(Payload(parse), bind_text);
  REQUIRE(s);
  CHECK(s->terminate);
  CHECK(s->pid == 5000123);
  // Binary int4.
  std::string bind_bin;
  protocol::Encode(protocol::Bind{"", "", {1}, {std::string_view("\x00\x4c\x4b\x5b", 4)}, {}}, bind_bin);
  auto b = ParseBackendSignalUnit(Payload(parse), bind_bin);
  REQUIRE(b);
  CHECK(b->pid == 0x004c4b5b);
  // No Bind after it, or a Bind of another statement: not recognised.
  CHECK_FALSE(ParseBackendSignalUnit(Payload(parse), ""));
  CHECK_FALSE(ParseBackendSignalUnit(Payload(parse), testing::Bind("other", {"5"})));

  const std::string standin = BackendSignalStandIn(Payload(parse));
  REQUIRE(!standin.empty());
  auto decoded = protocol::DecodeParse(Payload(standin));
  REQUIRE(decoded.ok());
  CHECK(decoded->statement.empty());
  CHECK(decoded->query == "SELECT ($1::int)::int4 IS NOT NULL AS pg_terminate_backend");
  CHECK(decoded->parameter_types == std::vector<protocol::Oid>{23});

  std::string constant;
  protocol::Encode(protocol::Parse{"s", "SELECT pg_cancel_backend(77)", {}}, constant);
  auto k = ParseBackendSignalUnit(Payload(constant), "");
  REQUIRE(k);
  CHECK(k->pid == 77);
  const std::string constant_standin = BackendSignalStandIn(Payload(constant));
  auto kd = protocol::DecodeParse(Payload(constant_standin));
  REQUIRE(kd.ok());
  CHECK(kd->query == "SELECT true AS pg_cancel_backend");
}

}  // namespace
}  // namespace hyperpool::endpoint
