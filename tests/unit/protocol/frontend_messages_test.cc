#include "protocol/frontend_messages.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/generators/catch_generators_range.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "protocol/protocol_error.h"
#include "unit/protocol/test_util.h"

namespace hyperpool::protocol {
namespace {

using Catch::Matchers::ContainsSubstring;
using namespace std::literals;
using testing::Byte;
using testing::I16;
using testing::I32;
using testing::Message;
using testing::Str;

// Which 'p' decoder a sample needs.
PasswordKind KindOf(const FrontendMessage& m) {
  if (std::holds_alternative<SaslInitialResponse>(m)) return PasswordKind::kSaslInitialResponse;
  if (std::holds_alternative<SaslResponse>(m)) return PasswordKind::kSaslResponse;
  if (std::holds_alternative<GssResponse>(m)) return PasswordKind::kGssResponse;
  return PasswordKind::kPassword;
}

// One sample of every frontend message type, with edge values.
std::vector<FrontendMessage> Samples() {
  Bind bind;
  bind.portal = "p1";
  bind.statement = "s1";
  bind.parameter_formats = {kFormatBinary, kFormatText, kFormatText};
  bind.parameters = {NullableValue("\x00\x00\x00\x2a"sv), std::nullopt, NullableValue(""sv)};
  bind.result_formats = {kFormatBinary};
  Bind many;  // Beyond the inline capacity.
  for (int i = 0; i < 20; ++i) many.parameters.push_back("v");
  FunctionCall call{1598, {kFormatBinary}, {NullableValue("x"sv), std::nullopt}, kFormatBinary};
  return {
      Query{"SELECT 1"},
      Query{""},
      Parse{"", "SELECT $1::int", {}},
      Parse{"stmt", "SELECT $1, $2", {23, 0xFFFFFFFFu}},
      bind,
      many,
      Bind{},
      Describe{ObjectKind::kPortal, "p1"},
      Describe{ObjectKind::kStatement, ""},
      Execute{"", 0},
      Execute{"portal", 100},
      Close{ObjectKind::kStatement, "s1"},
      Close{ObjectKind::kPortal, ""},
      Sync{},
      Flush{},
      Terminate{},
      CopyData{"1\tfoo\n"},
      CopyData{""},
      CopyDone{},
      CopyFail{"aborted by user"},
      call,
      FunctionCall{},
      PasswordMessage{"md5abcdef0123456789abcdef01234567"},
      SaslInitialResponse{"SCRAM-SHA-256", "n,,n=,r=abc"sv},
      SaslInitialResponse{"SCRAM-SHA-256", std::nullopt},
      SaslInitialResponse{"SCRAM-SHA-256", ""sv},
      SaslResponse{"c=biws,r=abc,p=xyz"},
      GssResponse{""},
      GssResponse{"token"},
  };
}

TEST_CASE("Every frontend message round-trips through FrameReader", "[protocol][frontend]") {
  const std::vector<FrontendMessage> samples = Samples();
  const size_t index = GENERATE_COPY(range(size_t{0}, samples.size()));
  const FrontendMessage& msg = samples[index];
  CAPTURE(index, msg.index());

  std::string out = "keep";  // Encoders append.
  Encode(msg, out);
  REQUIRE(out.substr(0, 4) == "keep");
  std::string_view wire = std::string_view(out).substr(4);

  FrameReader reader;
  FrameReader::Result r = reader.Read(wire);
  REQUIRE(r.is_frame());
  CHECK(r.frame().size() == wire.size());
  absl::StatusOr<FrontendMessage> decoded = DecodeFrontendMessage(r.frame(), KindOf(msg));
  REQUIRE(decoded.ok());
  CHECK(*decoded == msg);

  // Every strict prefix is need-more, never a frame or an error.
  for (size_t n = 0; n < wire.size(); ++n) {
    CHECK(reader.Read(wire.substr(0, n)).is_need_more());
  }
}

TEST_CASE("Every startup packet round-trips in startup mode", "[protocol][frontend]") {
  static const std::string key256(256, '\x5a');
  auto packet = GENERATE(values<StartupPacket>({
      StartupMessage{kProtocolVersion30, {{"user", "alice"}, {"database", "db"}}},
      StartupMessage{kProtocolVersion32,
                     {{"user", "bob"}, {"options", "-c x=1"}, {"_pq_.foo", ""}, {"user", "dup"}}},
      StartupMessage{MakeProtocolVersion(3, 9), {}},
      SslRequest{},
      GssEncRequest{},
      CancelRequest{1234, "\x01\x02\x03\x04"},
      CancelRequest{-7, key256},
  }));
  std::string out;
  Encode(packet, out);
  FrameReader reader(FrameReader::Mode::kStartup);
  FrameReader::Result r = reader.Read(out);
  REQUIRE(r.is_frame());
  CHECK(r.frame().size() == out.size());
  absl::StatusOr<StartupPacket> decoded = DecodeStartupPacket(r.frame().payload);
  REQUIRE(decoded.ok());
  CHECK(*decoded == packet);
}

TEST_CASE("StartupMessage keeps parameter order and finds the first value",
          "[protocol][frontend]") {
  std::string out;
  Encode(StartupMessage{kProtocolVersion30, {{"user", "a"}, {"database", "d"}, {"user", "b"}}},
         out);
  auto decoded = DecodeStartupPacket(std::string_view(out).substr(4));
  REQUIRE(decoded.ok());
  const auto& m = std::get<StartupMessage>(*decoded);
  REQUIRE(m.parameters.size() == 3);
  CHECK(m.parameters[1].first == "database");
  CHECK(m.Find("user") == "a");
  CHECK(m.Find("database") == "d");
  CHECK_FALSE(m.Find("application_name").has_value());
}

TEST_CASE("StartupMessage wire bytes match PostgreSQL's layout", "[protocol][frontend]") {
  std::string out;
  Encode(StartupMessage{kProtocolVersion30, {{"user", "u"}}}, out);
  CHECK(out == I32(16) + I32(196608) + "user\0u\0\0"s);
  out.clear();
  Encode(SslRequest{}, out);
  CHECK(out == "\x00\x00\x00\x08\x04\xd2\x16\x2f"s);
}

struct BadStartup {
  std::string payload;
  const char* error;
};

TEST_CASE("Malformed startup packets are rejected with a specific error",
          "[protocol][frontend]") {
  auto c = GENERATE(values<BadStartup>({
      {I32(kSslRequestCode) + "x", "SSLRequest: 1 unexpected trailing byte"},
      {I32(kGssEncRequestCode) + "xy", "GSSENCRequest: 2 unexpected trailing bytes"},
      {I32(kCancelRequestCode) + I32(1) + "abc", "CancelRequest: secret key of 3 bytes"},
      {I32(kCancelRequestCode) + I32(1) + std::string(257, 'k'),
       "CancelRequest: secret key of 257 bytes"},
      {I32(kCancelRequestCode) + "\x01\x02", "CancelRequest: truncated process ID"},
      {I32(MakeProtocolVersion(1234, 5681)), "unsupported protocol version 1234.5681"},
      {I32(MakeProtocolVersion(2, 0)), "unsupported protocol version 2.0"},
      {I32(kProtocolVersion30), "missing the NUL that ends the parameter list"},
      {I32(kProtocolVersion30) + Str("user"), "parameter value is missing its NUL terminator"},
      {I32(kProtocolVersion30) + "user", "parameter name is missing its NUL terminator"},
      {I32(kProtocolVersion30) + Str("user") + "bob", "parameter value is missing its NUL"},
      {I32(kProtocolVersion30) + Str("user") + Str("bob") + "\0x"s,
       "StartupMessage: 1 unexpected trailing byte"},
      {"\x00\x03"s, "startup packet: truncated protocol version"},
  }));
  absl::StatusOr<StartupPacket> decoded = DecodeStartupPacket(c.payload);
  REQUIRE_FALSE(decoded.ok());
  CHECK(IsProtocolError(decoded.status()));
  CHECK_THAT(Message(decoded.status()), ContainsSubstring(c.error));
}

struct BadFrontend {
  char tag;
  std::string payload;
  PasswordKind kind;
  const char* error;
};

TEST_CASE("Malformed frontend messages are rejected with a specific error",
          "[protocol][frontend]") {
  using K = PasswordKind;
  const std::string bind_head = Str("") + Str("");
  auto c = GENERATE_COPY(values<BadFrontend>({
      {'Q', "SELECT 1", K::kPassword, "Query: query string is missing its NUL terminator"},
      {'Q', Str("SELECT 1") + "x", K::kPassword, "Query: 1 unexpected trailing byte"},
      {'P', Str("s") + Str("q") + I16(2) + I32(23), K::kPassword,
       "Parse: 2 parameter types declared but only 4 bytes left"},
      {'P', Str("s") + Str("q") + I16(-1), K::kPassword,
       "Parse: 65535 parameter types declared but only 0 bytes left"},
      {'P', Str("s") + Str("q"), K::kPassword, "Parse: truncated parameter type count"},
      {'B', bind_head + I16(0) + I16(5) + I32(1) + "a" + I32(1) + "b" + I32(1), K::kPassword,
       "Bind: 5 parameter values declared but only 14 bytes left"},
      {'B', bind_head + I16(3) + I16(0) + I16(0) + I16(0) + I16(0) + I16(0), K::kPassword,
       "Bind: 3 parameter formats but 0 parameters"},
      {'B', bind_head + I16(0) + I16(1) + I32(-2) + I16(0), K::kPassword,
       "Bind: parameter values has invalid length -2"},
      {'B', bind_head + I16(0) + I16(1) + I32(10) + "abc" + I16(0), K::kPassword,
       "Bind: truncated parameter values (needs 10 bytes, 5 left)"},
      {'B', bind_head + I16(0) + I16(0), K::kPassword, "Bind: truncated result format count"},
      {'B', bind_head + I16(0) + I16(0) + I16(0) + "zz", K::kPassword,
       "Bind: 2 unexpected trailing bytes"},
      {'B', "portal", K::kPassword, "Bind: portal name is missing its NUL terminator"},
      {'D', "X" + Str("n"), K::kPassword, "Describe: invalid object type 0x58"},
      {'D', "", K::kPassword, "Describe: truncated object type"},
      {'D', "S", K::kPassword, "Describe: name is missing its NUL terminator"},
      {'C', "Z" + Str(""), K::kPassword, "Close: invalid object type 0x5a"},
      {'E', Str("") + "\x00\x00", K::kPassword, "Execute: truncated maximum row count"},
      {'E', Str("") + I32(0) + "!", K::kPassword, "Execute: 1 unexpected trailing byte"},
      {'S', "x", K::kPassword, "Sync: 1 unexpected trailing byte"},
      {'H', "x", K::kPassword, "Flush: 1 unexpected trailing byte"},
      {'X', "xy", K::kPassword, "Terminate: 2 unexpected trailing bytes"},
      {'c', "x", K::kPassword, "CopyDone: 1 unexpected trailing byte"},
      {'f', "oops", K::kPassword, "CopyFail: error message is missing its NUL"},
      {'F', I32(1) + I16(2) + I16(0) + I16(0) + I16(1) + I32(-1) + I16(0), K::kPassword,
       "FunctionCall: 2 argument formats but 1 arguments"},
      {'F', I32(1) + I16(0) + I16(0), K::kPassword, "FunctionCall: truncated result format"},
      {'p', "secret", K::kPassword, "PasswordMessage: password is missing its NUL"},
      {'p', Str("pw") + "x", K::kPassword, "PasswordMessage: 1 unexpected trailing byte"},
      {'p', Str("SCRAM-SHA-256") + I32(5) + "abc", K::kSaslInitialResponse,
       "SASLInitialResponse: truncated initial response (needs 5 bytes, 3 left)"},
      {'p', Str("SCRAM-SHA-256") + I32(-5), K::kSaslInitialResponse,
       "SASLInitialResponse: initial response has invalid length -5"},
      {'p', Str("SCRAM-SHA-256"), K::kSaslInitialResponse,
       "SASLInitialResponse: truncated initial response"},
      {'p', Str("SCRAM-SHA-256") + I32(-1) + "x", K::kSaslInitialResponse,
       "SASLInitialResponse: 1 unexpected trailing byte"},
      {'Z', "", K::kPassword, "invalid frontend message type 0x5a"},
      {'\0', "", K::kPassword, "invalid frontend message type 0x00"},
  }));
  CAPTURE(c.tag, c.error);
  Frame frame{c.tag, c.payload, {}};
  absl::StatusOr<FrontendMessage> decoded = DecodeFrontendMessage(frame, c.kind);
  REQUIRE_FALSE(decoded.ok());
  CHECK(IsProtocolError(decoded.status()));
  CHECK_THAT(Message(decoded.status()), ContainsSubstring(c.error));
}

TEST_CASE("Bind accepts one format code applied to all parameters", "[protocol][frontend]") {
  const std::string payload = Str("") + Str("s") + I16(1) + I16(1) + I16(2) + I32(1) + "a" +
                              I32(-1) + I16(0);
  absl::StatusOr<Bind> bind = DecodeBind(payload);
  REQUIRE(bind.ok());
  CHECK(bind->statement == "s");
  CHECK(bind->parameter_formats.size() == 1);
  REQUIRE(bind->parameters.size() == 2);
  CHECK(bind->parameters[0] == "a");
  CHECK_FALSE(bind->parameters[1].has_value());
  CHECK(bind->result_formats.empty());
}

TEST_CASE("Decoded strings point into the payload (zero copy)", "[protocol][frontend]") {
  const std::string payload = Str("SELECT 42");
  absl::StatusOr<Query> q = DecodeQuery(payload);
  REQUIRE(q.ok());
  CHECK(q->query.data() == payload.data());
}

TEST_CASE("Frontend tag names", "[protocol][frontend]") {
  CHECK(FrontendTagName(FrontendTag::kBind) == "Bind");
  CHECK(IsFrontendTag('B'));
  CHECK_FALSE(IsFrontendTag('T'));  // RowDescription is backend-only.
  CHECK(FrontendTagName(static_cast<FrontendTag>('!')) == "unknown");
}

TEST_CASE("PatchExecuteMaxRows rewrites exactly one Execute frame at the end", "[protocol][frontend]") {
  std::string buf = "x";
  Encode(Sync{}, buf);
  const size_t at = buf.size();
  Encode(Execute{"p1", 0}, buf);
  REQUIRE(PatchExecuteMaxRows(buf, at, 51));
  std::optional<Frame> f = PeekTaggedFrame(std::string_view(buf).substr(at));
  REQUIRE(f.has_value());
  absl::StatusOr<Execute> e = DecodeExecute(f->payload);
  REQUIRE(e.ok());
  CHECK(e->portal == "p1");
  CHECK(e->max_rows == 51);
  // Anything but one Execute running to the end is left alone.
  const std::string before = buf;
  CHECK_FALSE(PatchExecuteMaxRows(buf, 1, 7));         // a Sync first
  CHECK_FALSE(PatchExecuteMaxRows(buf, at + 1, 7));    // not at a frame
  CHECK_FALSE(PatchExecuteMaxRows(buf, buf.size() + 1, 7));
  Encode(Sync{}, buf);
  const std::string with_sync = buf;
  CHECK_FALSE(PatchExecuteMaxRows(buf, at, 7));        // a frame after it
  CHECK(buf == with_sync);
  CHECK(before == with_sync.substr(0, before.size()));
}

TEST_CASE("PeekStartupCode reads a startup payload's code", "[protocol][frontend]") {
  CHECK(PeekStartupCode(I32(196608) + "user\0u\0\0"s) == 196608);
  CHECK(PeekStartupCode(I32(80877102)) == kCancelRequestCode);
  CHECK_FALSE(PeekStartupCode("\x00\x03\x00"s).has_value());
}

}  // namespace
}  // namespace hyperpool::protocol
