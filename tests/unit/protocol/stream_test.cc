// Stream-level tests: several messages in one read, arbitrary splits, and the
// forwarding path that copies raw frames without re-encoding.
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <random>

#include "protocol/codec.h"
#include "unit/protocol/test_util.h"

namespace hyperpool::protocol {
namespace {

using namespace std::literals;

// A realistic backend response to an extended-query round trip.
std::string BackendStream() {
  std::string out;
  Encode(ParseComplete{}, out);
  Encode(BindComplete{}, out);
  Encode(RowDescription{{{"a", 0, 0, 23, 4, -1, 0}, {"b", 0, 0, 25, -1, -1, 0}}}, out);
  for (int i = 0; i < 50; ++i) {
    const std::string n = std::to_string(i);
    EncodeDataRow(std::vector<NullableValue>{n, i % 3 == 0 ? NullableValue() : "text"sv}, out);
  }
  Encode(CommandComplete{"SELECT 50"}, out);
  EncodeNoticeResponse(out, "NOTICE", "00000", "done");
  Encode(ReadyForQuery{TransactionStatus::kInBlock}, out);
  return out;
}

// Reads every frame of `stream` as if it arrived in chunks of the given sizes,
// keeping a receive buffer the way a connection does.
std::vector<std::string> ReadInChunks(std::string_view stream, std::mt19937& rng,
                                      size_t max_chunk) {
  std::vector<std::string> frames;
  std::string buffer;
  FrameReader reader;
  size_t fed = 0;
  while (fed < stream.size() || !buffer.empty()) {
    std::uniform_int_distribution<size_t> dist(1, max_chunk);
    const size_t n = std::min(dist(rng), stream.size() - fed);
    buffer.append(stream.substr(fed, n));
    fed += n;
    size_t consumed = 0;
    for (;;) {
      FrameReader::Result r = reader.Read(std::string_view(buffer).substr(consumed));
      REQUIRE_FALSE(r.is_error());
      if (r.is_need_more()) {
        CHECK(r.bytes_needed() > buffer.size() - consumed);
        break;
      }
      frames.emplace_back(r.frame().raw);
      consumed += r.frame().size();
    }
    buffer.erase(0, consumed);
    if (fed == stream.size() && !buffer.empty()) FAIL("stream ended mid-frame");
  }
  return frames;
}

TEST_CASE("Several messages in one read are returned one by one", "[protocol][stream]") {
  const std::string stream = BackendStream();
  std::vector<char> tags;
  std::string_view rest = stream;
  FrameReader reader;
  while (!rest.empty()) {
    FrameReader::Result r = reader.Read(rest);
    REQUIRE(r.is_frame());
    REQUIRE(DecodeBackendMessage(r.frame()).ok());
    tags.push_back(r.frame().tag);
    rest.remove_prefix(r.frame().size());
  }
  REQUIRE(tags.size() == 56);
  CHECK(tags.front() == '1');
  CHECK(tags[3] == 'D');
  CHECK(tags.back() == 'Z');
}

TEST_CASE("Any split of the stream yields the same frames", "[protocol][stream]") {
  const std::string stream = BackendStream();
  const size_t max_chunk = GENERATE(1, 2, 3, 7, 64, 4096);
  std::mt19937 rng(20261129 + max_chunk);
  std::vector<std::string> frames = ReadInChunks(stream, rng, max_chunk);
  std::string joined;
  for (const std::string& f : frames) joined += f;
  CHECK(frames.size() == 56);
  CHECK(joined == stream);
}

TEST_CASE("Raw frames forward byte-identically without re-encoding", "[protocol][stream]") {
  const std::string stream = BackendStream();
  std::string forwarded;
  std::string_view rest = stream;
  FrameReader reader;
  while (!rest.empty()) {
    FrameReader::Result r = reader.Read(rest);
    REQUIRE(r.is_frame());
    AppendRawFrame(forwarded, r.frame().raw);
    rest.remove_prefix(r.frame().size());
  }
  CHECK(forwarded == stream);
}

TEST_CASE("A frontend session: startup packet, then tagged messages", "[protocol][stream]") {
  std::string out;
  Encode(SslRequest{}, out);
  Encode(StartupMessage{kProtocolVersion32, {{"user", "app"}, {"database", "db"}}}, out);
  Encode(Parse{"", "SELECT $1", {23}}, out);
  Bind bind;
  bind.parameters = {"1"sv};
  Encode(bind, out);
  Encode(Execute{"", 0}, out);
  Encode(Sync{}, out);
  Encode(Terminate{}, out);

  std::string_view rest = out;
  FrameReader reader(FrameReader::Mode::kStartup);
  std::vector<std::string> seen;
  while (!rest.empty()) {
    FrameReader::Result r = reader.Read(rest);
    REQUIRE(r.is_frame());
    if (reader.mode() == FrameReader::Mode::kStartup) {
      absl::StatusOr<StartupPacket> p = DecodeStartupPacket(r.frame().payload);
      REQUIRE(p.ok());
      if (std::holds_alternative<StartupMessage>(*p)) {
        seen.push_back("startup");
        reader.set_mode(FrameReader::Mode::kTagged);
      } else {
        seen.push_back("ssl");
      }
    } else {
      absl::StatusOr<FrontendMessage> m = DecodeFrontendMessage(r.frame());
      REQUIRE(m.ok());
      seen.emplace_back(FrontendTagName(r.frame().frontend_tag()));
    }
    rest.remove_prefix(r.frame().size());
  }
  CHECK(seen == std::vector<std::string>{"ssl", "startup", "Parse", "Bind", "Execute", "Sync",
                                         "Terminate"});
}

TEST_CASE("Encoders reuse the caller's buffer capacity", "[protocol][stream]") {
  std::string out;
  out.reserve(1024);
  const char* data = out.data();
  for (int i = 0; i < 10; ++i) {
    out.clear();
    Encode(Query{"SELECT 1"}, out);
    Encode(Sync{}, out);
  }
  CHECK(out.data() == data);
}

}  // namespace
}  // namespace hyperpool::protocol
