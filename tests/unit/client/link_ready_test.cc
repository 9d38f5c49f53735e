// LinkReadyReader: the Endpoint's first answer on a link, read without I/O.
#include "client/link_ready.h"

#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "protocol/codec.h"

namespace hyperpool::client {
namespace {

std::string LinkReady() {
  std::string out;
  protocol::Encode(protocol::ParameterStatus{"server_version", "15.18"}, out);
  protocol::Encode(protocol::ParameterStatus{"TimeZone", "UTC"}, out);
  protocol::Encode(protocol::ReadyForQuery{protocol::TransactionStatus::kIdle}, out);
  return out;
}

TEST_CASE("link-ready in any split gives the origin's parameters and leaves what follows") {
  const std::string after = "D-after";
  const std::string all = LinkReady() + after;
  const std::size_t cut = GENERATE(0u, 1u, 5u, 20u, 31u, 40u);
  LinkReadyReader reader;
  std::size_t consumed = 0;
  std::string buf = all.substr(0, std::min(cut, all.size()));
  LinkReadyReader::Result r = reader.Read(buf, &consumed);
  if (r == LinkReadyReader::Result::kNeedMore) {
    buf = all;
    r = reader.Read(buf, &consumed);
  }
  REQUIRE(r == LinkReadyReader::Result::kReady);
  CHECK(buf.substr(consumed) == after);
  REQUIRE(reader.params().size() == 2);
  CHECK(reader.params()[0] == std::make_pair(std::string("server_version"), std::string("15.18")));
  CHECK(reader.params()[1] == std::make_pair(std::string("TimeZone"), std::string("UTC")));
}

TEST_CASE("an ErrorResponse instead of link-ready is the Endpoint's refusal, kept whole for the app") {
  std::string error;
  protocol::EncodeErrorResponse(error, "FATAL", "53300", "Failed to acquire a connection from the pool");
  LinkReadyReader reader;
  std::size_t consumed = 0;
  REQUIRE(reader.Read(error, &consumed) == LinkReadyReader::Result::kRefused);
  CHECK(reader.error() == error);
  CHECK(consumed == error.size());
}

TEST_CASE("bytes that are not PostgreSQL messages are malformed") {
  const std::string junk("\x00\x00\x00\x00\x01", 5);  // a header declaring length 0
  LinkReadyReader reader;
  std::size_t consumed = 0;
  CHECK(reader.Read(junk, &consumed) == LinkReadyReader::Result::kMalformed);
}

}  // namespace
}  // namespace hyperpool::client
