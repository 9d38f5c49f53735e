#include "protocol/frame_reader.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "protocol/protocol_error.h"
#include "unit/protocol/test_util.h"

namespace hyperpool::protocol {
namespace {

using Catch::Matchers::ContainsSubstring;
using namespace std::string_literals;
using testing::I32;
using testing::Message;
using Mode = FrameReader::Mode;

TEST_CASE("FrameReader returns a tagged frame with views into the input", "[protocol][frame]") {
  const std::string bytes = "Q\x00\x00\x00\x0dSELECT 1\0"s + "extra";
  FrameReader reader;
  FrameReader::Result r = reader.Read(bytes);
  REQUIRE(r.is_frame());
  CHECK(r.frame().tag == 'Q');
  CHECK(r.frame().frontend_tag() == FrontendTag::kQuery);
  CHECK(r.frame().payload == "SELECT 1\0"s);
  CHECK(r.frame().size() == 14);
  CHECK(r.frame().raw == std::string_view(bytes).substr(0, 14));
  CHECK(r.frame().payload.data() == bytes.data() + 5);
}

TEST_CASE("FrameReader reports need-more with the header size, then the frame size",
          "[protocol][frame]") {
  const std::string bytes = "Q\x00\x00\x00\x0dSELECT 1\0"s;
  FrameReader reader;
  for (size_t n = 0; n < bytes.size(); ++n) {
    FrameReader::Result r = reader.Read(std::string_view(bytes).substr(0, n));
    REQUIRE(r.is_need_more());
    if (n < 5) {
      CHECK(r.bytes_needed() == 5);
      CHECK_FALSE(r.size_known());
    } else {
      CHECK(r.bytes_needed() == 14);
      CHECK(r.size_known());
    }
  }
  CHECK(reader.Read(bytes).is_frame());
}

TEST_CASE("FrameReader accepts an empty payload", "[protocol][frame]") {
  FrameReader reader;
  FrameReader::Result r = reader.Read("S\x00\x00\x00\x04"s);
  REQUIRE(r.is_frame());
  CHECK(r.frame().payload.empty());
  CHECK(r.frame().size() == 5);
}

struct BadLength {
  uint32_t length;
  const char* error;
};

TEST_CASE("FrameReader rejects bad tagged lengths from the 5-byte header alone",
          "[protocol][frame]") {
  auto c = GENERATE(values<BadLength>({
      {0, "invalid length 0 (less than 4)"},
      {3, "invalid length 3 (less than 4)"},
      {0x80000000u, "negative length -2147483648"},
      {0xffffffffu, "negative length -1"},
      {1001, "length 1001 exceeds the limit 1000"},
      {0x7fffffffu, "length 2147483647 exceeds the limit 1000"},
  }));
  FrameReader reader(Mode::kTagged, FrameLimits{.max_message_length = 1000});
  // Only the header: the body is never needed to reject.
  const std::string header = "Q" + I32(static_cast<int32_t>(c.length));
  FrameReader::Result r = reader.Read(header);
  REQUIRE(r.is_error());
  CHECK(IsProtocolError(r.status()));
  CHECK_THAT(Message(r.status()), ContainsSubstring(c.error));
  CHECK_THAT(Message(r.status()), ContainsSubstring("message 'Q'"));
}

TEST_CASE("FrameReader accepts a message exactly at the limit", "[protocol][frame]") {
  FrameReader reader(Mode::kTagged, FrameLimits{.max_message_length = 10});
  CHECK(reader.Read("d" + I32(10) + "123456").is_frame());
  CHECK(reader.Read("d" + I32(11)).is_error());
}

TEST_CASE("FrameReader default limit is 1 GiB", "[protocol][frame]") {
  FrameReader reader;
  FrameReader::Result ok = reader.Read("d" + I32((1 << 30) - 1));
  REQUIRE(ok.is_need_more());
  CHECK(ok.bytes_needed() == (size_t{1} << 30));
  CHECK(reader.Read("d" + I32(1 << 30)).is_error());
}

TEST_CASE("FrameReader names non-printable tags in hex", "[protocol][frame]") {
  FrameReader reader;
  FrameReader::Result r = reader.Read("\x01" + I32(2));
  REQUIRE(r.is_error());
  CHECK_THAT(Message(r.status()), ContainsSubstring("message 0x01"));
}

TEST_CASE("FrameReader startup mode returns untagged packets", "[protocol][frame]") {
  const std::string ssl = I32(8) + I32(kSslRequestCode);
  FrameReader reader(Mode::kStartup);
  for (size_t n = 0; n < ssl.size(); ++n) {
    FrameReader::Result r = reader.Read(std::string_view(ssl).substr(0, n));
    REQUIRE(r.is_need_more());
    CHECK(r.bytes_needed() == (n < 4 ? 4u : 8u));
    CHECK(r.size_known() == (n >= 4));
  }
  const std::string with_next = ssl + "Q";
  FrameReader::Result r = reader.Read(with_next);
  REQUIRE(r.is_frame());
  CHECK(r.frame().tag == '\0');
  CHECK(r.frame().payload == I32(kSslRequestCode));
  CHECK(r.frame().size() == 8);
}

TEST_CASE("FrameReader rejects bad startup lengths from the 4-byte header alone",
          "[protocol][frame]") {
  auto c = GENERATE(values<BadLength>({
      {0, "length 0 is less than the minimum 8"},
      {7, "length 7 is less than the minimum 8"},
      {10001, "length 10001 exceeds the limit 10000"},
      {0x80000000u, "negative length"},
  }));
  FrameReader reader(Mode::kStartup);
  FrameReader::Result r = reader.Read(I32(static_cast<int32_t>(c.length)));
  REQUIRE(r.is_error());
  CHECK_THAT(Message(r.status()), ContainsSubstring(c.error));
}

TEST_CASE("FrameReader mode can be switched after the startup packet", "[protocol][frame]") {
  const std::string stream = I32(8) + I32(kSslRequestCode) + "S" + I32(4);
  FrameReader reader(Mode::kStartup);
  FrameReader::Result first = reader.Read(stream);
  REQUIRE(first.is_frame());
  reader.set_mode(Mode::kTagged);
  FrameReader::Result second = reader.Read(std::string_view(stream).substr(first.frame().size()));
  REQUIRE(second.is_frame());
  CHECK(second.frame().tag == 'S');
}

TEST_CASE("FrameReader limit can be tightened for authentication", "[protocol][frame]") {
  FrameReader reader;
  reader.set_max_message_length(8192);
  CHECK(reader.Read("p" + I32(8193)).is_error());
  CHECK(reader.Read("p" + I32(8192)).is_need_more());
}

TEST_CASE("PeekTaggedFrame takes one whole well-formed frame off held bytes", "[protocol][frame]") {
  const std::string bytes = "Q\x00\x00\x00\x0dSELECT 1\0"s + "S\x00\x00\x00\x04"s;
  std::optional<Frame> f = PeekTaggedFrame(bytes);
  REQUIRE(f.has_value());
  CHECK(f->tag == 'Q');
  CHECK(f->payload == "SELECT 1\0"s);
  CHECK(f->raw == std::string_view(bytes).substr(0, 14));
  std::optional<Frame> sync = PeekTaggedFrame(std::string_view(bytes).substr(f->size()));
  REQUIRE(sync.has_value());
  CHECK(sync->tag == 'S');
  CHECK(sync->payload.empty());
  // Not all there, a length below 4, the top bit set: no frame.
  CHECK_FALSE(PeekTaggedFrame(std::string_view(bytes).substr(0, 13)).has_value());
  CHECK_FALSE(PeekTaggedFrame("Q\x00\x00"s).has_value());
  CHECK_FALSE(PeekTaggedFrame("Q\x00\x00\x00\x03xyz"s).has_value());
  CHECK_FALSE(PeekTaggedFrame("Q\x80\x00\x00\x05x"s).has_value());
  // The header alone says what it declares, well-formed or not.
  std::optional<FrameHeader> h = PeekTaggedHeader("D\x00\x01\x00\x00"s);
  REQUIRE(h.has_value());
  CHECK(h->tag == 'D');
  CHECK(h->length == 65536);
  CHECK(h->size() == 65537);
  CHECK(h->well_formed());
  CHECK_FALSE(PeekTaggedHeader("D\xff\xff\xff\xff"s)->well_formed());
  CHECK_FALSE(PeekTaggedHeader("D\x00\x00\x00"s).has_value());
}

TEST_CASE("PeekStartupPacket takes an untagged packet of at least 8 bytes", "[protocol][frame]") {
  const std::string ssl = I32(8) + I32(80877103);
  const std::string held = ssl + "more";
  std::optional<Frame> f = PeekStartupPacket(held);
  REQUIRE(f.has_value());
  CHECK(f->tag == '\0');
  CHECK(f->raw == ssl);
  CHECK(f->payload == I32(80877103));
  CHECK_FALSE(PeekStartupPacket(ssl.substr(0, 7)).has_value());
  CHECK_FALSE(PeekStartupPacket(I32(7) + I32(0)).has_value());
  CHECK_FALSE(PeekStartupPacket(I32(12) + I32(196608)).has_value());  // declares more than there is
}

}  // namespace
}  // namespace hyperpool::protocol
