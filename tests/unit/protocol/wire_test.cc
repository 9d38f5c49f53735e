#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "protocol/common_messages.h"
#include "protocol/protocol_error.h"
#include "protocol/wire_reader.h"
#include "protocol/wire_writer.h"
#include "unit/protocol/test_util.h"

namespace hyperpool::protocol {
namespace {

using Catch::Matchers::ContainsSubstring;
using namespace std::string_literals;
using testing::Message;

TEST_CASE("Integers are written big-endian", "[protocol][wire]") {
  std::string out;
  AppendInt16(out, 0x0102);
  AppendInt32(out, 0x03040506);
  AppendInt32(out, -1);
  CHECK(out == "\x01\x02\x03\x04\x05\x06\xff\xff\xff\xff"s);
}

TEST_CASE("AppendCString truncates at an embedded NUL so it cannot inject fields",
          "[protocol][wire]") {
  std::string out;
  AppendCString(out, "user\0database"s);
  CHECK(out == "user\0"s);
}

TEST_CASE("BeginMessage/FinishMessage patch the length in place", "[protocol][wire]") {
  std::string out = "prefix";
  MessageStart m = BeginMessage(out, 'Q');
  AppendCString(out, "SELECT 1");
  FinishMessage(out, m);
  CHECK(out == "prefixQ\x00\x00\x00\x0dSELECT 1\0"s);
}

TEST_CASE("BeginStartupPacket has no tag", "[protocol][wire]") {
  std::string out;
  MessageStart m = BeginStartupPacket(out);
  AppendInt32(out, 42);
  FinishMessage(out, m);
  CHECK(out == "\x00\x00\x00\x08\x00\x00\x00\x2a"s);
}

TEST_CASE("AppendFrame writes tag, length and payload", "[protocol][wire]") {
  std::string out;
  AppendFrame(out, 'd', "abc");
  CHECK(out == "d\x00\x00\x00\x07" "abc"s);
  AppendRawFrame(out, out);
  CHECK(out.size() == 16);
}

TEST_CASE("WireReader reads every type and reports trailing bytes", "[protocol][wire]") {
  std::string data = "\x7f"s + testing::I16(-2) + testing::I32(-3) + "hi\0"s +
                     testing::I32(-1) + testing::I32(2) + "ok" + "xyz";
  WireReader r(data, "Test");
  uint8_t b;
  int16_t i16;
  int32_t i32;
  std::string_view s;
  NullableValue n1, n2;
  REQUIRE(r.ReadByte(b, "b"));
  REQUIRE(r.ReadInt16(i16, "i16"));
  REQUIRE(r.ReadInt32(i32, "i32"));
  REQUIRE(r.ReadCString(s, "s"));
  REQUIRE(r.ReadNullableBytes(n1, "n1"));
  REQUIRE(r.ReadNullableBytes(n2, "n2"));
  CHECK(b == 0x7f);
  CHECK(i16 == -2);
  CHECK(i32 == -3);
  CHECK(s == "hi");
  CHECK_FALSE(n1.has_value());
  CHECK(n2 == "ok");
  absl::Status st = r.Finish();
  CHECK(IsProtocolError(st));
  CHECK_THAT(Message(st), ContainsSubstring("Test: 3 unexpected trailing bytes"));
}

TEST_CASE("WireReader errors are sticky and name the field", "[protocol][wire]") {
  WireReader r("\x01", "Test");
  int32_t v;
  CHECK_FALSE(r.ReadInt32(v, "row count"));
  uint8_t b;
  CHECK_FALSE(r.ReadByte(b, "next"));  // Would succeed, but the reader already failed.
  CHECK_THAT(Message(r.status()), ContainsSubstring("Test: truncated row count (needs 4 bytes, 1 left)"));
}

TEST_CASE("WireReader rejects negative lengths other than -1", "[protocol][wire]") {
  std::string data = testing::I32(-2);
  WireReader r(data, "Test");
  NullableValue v;
  CHECK_FALSE(r.ReadNullableBytes(v, "value"));
  CHECK_THAT(Message(r.status()), ContainsSubstring("value has invalid length -2"));
}

TEST_CASE("WireReader::CheckCount does not overflow on huge counts", "[protocol][wire]") {
  WireReader r("abcd", "Test");
  CHECK(r.CheckCount(1, 4, "items"));
  CHECK_FALSE(r.CheckCount(SIZE_MAX, 4, "items"));
  CHECK_THAT(Message(r.status()), ContainsSubstring("items declared but only 4 bytes left"));
}

}  // namespace
}  // namespace hyperpool::protocol
