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
  CHECK(timeout->column == "pg_terminate_backend");
  CHECK(c->column == "pg_cancel_backend");
}

TEST_CASE("a column alias after AS names the answer's column, as PostgreSQL's would") {
  // node-postgres's gh-issues/130 reads `SELECT pg_terminate_backend(pid) AS t`.
  auto t = ParseBackendSignal("SELECT pg_terminate_backend(5000123) AS T;");
  REQUIRE(t);
  CHECK(t->pid == 5000123);
  CHECK(t->column == "t");
  auto q = ParseBackendSignal("select pg_cancel_backend(9) as \"Killed \"\"it\"\"\"");
  REQUIRE(q);
  CHECK(q->column == "Killed \"it\"");
  CHECK(ParseBackendSignal("select pg_cancel_backend(9) as select")->column == "select");  // a label may be any word
  std::string parse;
  protocol::Encode(protocol::Parse{"", "select pg_terminate_backend($1::int) as \"Ok\"", {23}}, parse);
  REQUIRE(ParseBackendSignalUnit(Payload(parse), testing::Bind("", {"5000123"}))->column == "Ok");
  const std::string standin_frame = BackendSignalStandIn(Payload(parse));
  auto standin = protocol::DecodeParse(Payload(standin_frame));
  REQUIRE(standin.ok());
  CHECK(standin->query == "SELECT ($1::int)::int4 IS NOT NULL AS \"Ok\"");
}

TEST_CASE("anything else is not") {
  const char* sql = GENERATE("SELECT pg_terminate_backend(pid) FROM pg_stat_activity",
                             "SELECT pg_terminate_backend(pg_backend_pid())", "SELECT pg_terminate_backend(1) x",
                             "SELECT pg_terminate_backend(1) AS", "SELECT pg_terminate_backend(1) AS \"x",
                             "SELECT pg_terminate_backend(1) AS x y", "SELECT pg_terminate_backend(1) AS 1x",
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
  // Binary int2 (psycopg's for a small pid: an origin backend's).
  std::string bind_int2;
  protocol::Encode(protocol::Bind{"", "", {1}, {std::string_view("\x39\x93", 2)}, {}}, bind_int2);
  auto i2 = ParseBackendSignalUnit(Payload(parse), bind_int2);
  REQUIRE(i2);
  CHECK(i2->pid == 0x3993);
  // No Bind after it, or a Bind of another statement: not recognised.
  CHECK_FALSE(ParseBackendSignalUnit(Payload(parse), ""));
  CHECK_FALSE(ParseBackendSignalUnit(Payload(parse), testing::Bind("other", {"5"})));

  const std::string standin = BackendSignalStandIn(Payload(parse));
  REQUIRE(!standin.empty());
  auto decoded = protocol::DecodeParse(Payload(standin));
  REQUIRE(decoded.ok());
  CHECK(decoded->statement.empty());
  CHECK(decoded->query == "SELECT ($1::int)::int4 IS NOT NULL AS \"pg_terminate_backend\"");
  CHECK(decoded->parameter_types == std::vector<protocol::Oid>{23});

  std::string constant;
  protocol::Encode(protocol::Parse{"s", "SELECT pg_cancel_backend(77)", {}}, constant);
  auto k = ParseBackendSignalUnit(Payload(constant), "");
  REQUIRE(k);
  CHECK(k->pid == 77);
  const std::string constant_standin = BackendSignalStandIn(Payload(constant));
  auto kd = protocol::DecodeParse(Payload(constant_standin));
  REQUIRE(kd.ok());
  CHECK(kd->query == "SELECT true AS \"pg_cancel_backend\"");
}

// A Bind with one binary int4 parameter and binary results (asyncpg's way).
std::string BinaryBind(std::string_view statement, std::string_view portal = "") {
  std::string out;
  protocol::Encode(protocol::Bind{portal, statement, {1}, {std::string_view("\x00\x4c\x4b\x5b", 4)}, {1}}, out);
  return out;
}

std::string Tags(std::string_view bytes) {
  std::string tags;
  REQUIRE(testing::ForEachFrame(bytes, [&](const protocol::Frame& f) { tags.push_back(f.tag); }));
  return tags;
}

TEST_CASE("a Bind in a later batch than its $1 Parse carries the pid; the batch is answered as PostgreSQL would") {
  std::string parse;
  protocol::Encode(protocol::Parse{"__asyncpg_stmt_1__", "SELECT pg_terminate_backend($1)", {}}, parse);
  const std::string execute_describe = GENERATE(std::string("E"), std::string("DE"), std::string("DEH"));
  CAPTURE(execute_describe);
  std::string batch = BinaryBind("__asyncpg_stmt_1__");
  for (char c : execute_describe) {
    batch += c == 'E'   ? testing::Execute()
             : c == 'D' ? testing::Encoded(protocol::Describe{protocol::ObjectKind::kPortal, ""})
                        : testing::Flush();
  }
  batch += testing::Sync();
  const std::string after = testing::QueryBytes("SELECT 1");  // the next unit is not part of it
  auto s = ParseBackendSignalBind(Payload(parse), batch + after);
  REQUIRE(s);
  CHECK(s->terminate);
  CHECK(s->pid == 0x004c4b5b);
  std::string out;
  CHECK(AppendBackendSignalBatchAnswer(batch + after, *s, out) == batch.size());
  CHECK(Tags(out) == (execute_describe[0] == 'D' ? "2TDC" : "2DC"));
  bool row_checked = false;
  REQUIRE(testing::ForEachFrame(out, [&](const protocol::Frame& f) {
    if (f.tag == 'D') {
      // One column, length 1, the binary bool true.
      CHECK(f.payload == std::string_view("\x00\x01\x00\x00\x00\x01\x01", 7));
      row_checked = true;
    }
    if (f.tag == 'T') {
      auto rd = protocol::DecodeRowDescription(f.payload);
      REQUIRE(rd.ok());
      REQUIRE(rd->fields.size() == 1);
      CHECK(rd->fields[0].name == "pg_terminate_backend");
      CHECK(rd->fields[0].type_oid == 16);
      CHECK(rd->fields[0].format == protocol::kFormatBinary);
    }
    if (f.tag == 'C') CHECK(f.payload == std::string_view("SELECT 1\0", 9));
  }));
  CHECK(row_checked);
}

TEST_CASE("a later Bind in text with a row limit of 1: 't' and PortalSuspended") {
  std::string parse;
  protocol::Encode(protocol::Parse{"s", "select pg_cancel_backend($1::int)", {23}}, parse);
  const std::string batch = testing::Bind("s", {"5000123"}) + testing::Encoded(protocol::Execute{"", 1}) +
                            testing::Encoded(protocol::Execute{"", 0}) + testing::Sync();
  auto s = ParseBackendSignalBind(Payload(parse), batch);
  REQUIRE(s);
  CHECK_FALSE(s->terminate);
  CHECK(s->pid == 5000123);
  std::string out;
  CHECK(AppendBackendSignalBatchAnswer(batch, *s, out) == batch.size());
  CHECK(Tags(out) == "2DsC");
  CHECK(out.find(std::string("\x00\x01\x00\x00\x00\x01t", 7)) != std::string::npos);
  CHECK(out.find(std::string("SELECT 0\0", 9)) != std::string::npos);
}

TEST_CASE("a later Bind is not answered here when its statement or batch is anything else") {
  std::string parse;
  protocol::Encode(protocol::Parse{"s", "SELECT pg_terminate_backend($1)", {}}, parse);
  const std::string describe_s = testing::DescribeS("s");
  const std::string bind = testing::Bind("s", {"5000123"});
  SECTION("a constant or another text in the statement") {
    std::string constant;
    protocol::Encode(protocol::Parse{"s", "SELECT pg_terminate_backend(5000123)", {}}, constant);
    CHECK_FALSE(ParseBackendSignalBind(Payload(constant), bind + testing::Execute() + testing::Sync()));
    std::string other;
    protocol::Encode(protocol::Parse{"s", "SELECT $1::int", {}}, other);
    CHECK_FALSE(ParseBackendSignalBind(Payload(other), bind + testing::Execute() + testing::Sync()));
  }
  SECTION("no Sync yet, a named portal, a Describe of the statement, another Bind, a null pid") {
    CHECK_FALSE(ParseBackendSignalBind(Payload(parse), bind + testing::Execute()));
    CHECK_FALSE(ParseBackendSignalBind(Payload(parse), BinaryBind("s", "p") + testing::Sync()));
    CHECK_FALSE(ParseBackendSignalBind(Payload(parse), bind + describe_s + testing::Execute() + testing::Sync()));
    CHECK_FALSE(ParseBackendSignalBind(Payload(parse), bind + bind + testing::Execute() + testing::Sync()));
    protocol::Bind null_pid{"", "s", {}, {protocol::NullableValue()}, {}};
    CHECK_FALSE(ParseBackendSignalBind(Payload(parse), testing::Encoded(null_pid) + testing::Sync()));
  }
}

}  // namespace
}  // namespace hyperpool::endpoint
