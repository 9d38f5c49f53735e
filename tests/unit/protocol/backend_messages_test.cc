#include "protocol/backend_messages.h"

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

// One sample of every backend message type, with edge values.
std::vector<BackendMessage> Samples() {
  static const std::string key256(256, '\x7f');
  ErrorResponse error;
  error.fields = {{'S', "ERROR"}, {'V', "ERROR"}, {'C', "42P01"},
                  {'M', "relation \"t\" does not exist"}, {'P', "15"}, {'F', "parse_relation.c"},
                  {'L', "1392"}, {'R', "parserOpenTable"}, {'Z', "unknown code kept"}};
  NoticeResponse notice;
  notice.fields = {{'S', "NOTICE"}, {'C', "00000"}, {'M', "hello"}};
  CopyInResponse copy_in;
  copy_in.format = 0;
  copy_in.column_formats = {0, 0, 0};
  CopyOutResponse copy_out;
  copy_out.format = 1;
  copy_out.column_formats = {1};
  CopyBothResponse copy_both;
  RowDescription rows{{
      {"id", 16384, 1, 23, 4, -1, 0},
      {"", 0, 0, 25, -1, -1, 1},
      {"big", 0xFFFFFFFFu, -32768, 0xFFFFFFFFu, -2, 2147483647, 1},
  }};
  static const std::string row_bytes = [] {
    std::string out;
    EncodeDataRow(std::vector<NullableValue>{"1"sv, std::nullopt, ""sv}, out);
    return out;
  }();
  DataRow row = *DecodeDataRow(std::string_view(row_bytes).substr(5));
  return {
      Authentication{AuthenticationOk{}},
      Authentication{AuthenticationKerberosV5{}},
      Authentication{AuthenticationCleartextPassword{}},
      Authentication{AuthenticationMd5Password{"\x01\x00\xff\x7f"sv}},
      Authentication{AuthenticationGss{}},
      Authentication{AuthenticationGssContinue{"gss-token"}},
      Authentication{AuthenticationSspi{}},
      Authentication{AuthenticationSasl{{"SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"}}},
      Authentication{AuthenticationSasl{{}}},
      Authentication{AuthenticationSaslContinue{"r=abc,s=c2FsdA==,i=4096"}},
      Authentication{AuthenticationSaslFinal{"v=xyz"}},
      ParameterStatus{"server_version", "15.4"},
      ParameterStatus{"application_name", ""},
      BackendKeyData{4242, "\x01\x02\x03\x04"},
      BackendKeyData{-1, key256},
      ReadyForQuery{TransactionStatus::kIdle},
      ReadyForQuery{TransactionStatus::kInBlock},
      ReadyForQuery{TransactionStatus::kFailed},
      NegotiateProtocolVersion{0, {"_pq_.unknown", "_pq_.other"}},
      NegotiateProtocolVersion{2, {}},
      rows,
      RowDescription{},
      row,
      DataRow{},
      CommandComplete{"SELECT 3"},
      CommandComplete{"INSERT 0 1"},
      EmptyQueryResponse{},
      error,
      ErrorResponse{},
      notice,
      ParseComplete{},
      BindComplete{},
      CloseComplete{},
      NoData{},
      PortalSuspended{},
      ParameterDescription{{23, 25, 0}},
      ParameterDescription{},
      copy_in,
      copy_out,
      copy_both,
      CopyData{"\x00\x01\x02"sv},
      CopyDone{},
      NotificationResponse{77, "chan", "payload"},
      NotificationResponse{0, "", ""},
      FunctionCallResponse{"\x00\x00\x00\x01"sv},
      FunctionCallResponse{std::nullopt},
  };
}

TEST_CASE("Every backend message round-trips through FrameReader", "[protocol][backend]") {
  const std::vector<BackendMessage> samples = Samples();
  const size_t index = GENERATE_COPY(range(size_t{0}, samples.size()));
  const BackendMessage& msg = samples[index];
  CAPTURE(index, msg.index());

  std::string out = "keep";
  Encode(msg, out);
  REQUIRE(out.substr(0, 4) == "keep");
  std::string_view wire = std::string_view(out).substr(4);

  FrameReader reader;
  FrameReader::Result r = reader.Read(wire);
  REQUIRE(r.is_frame());
  CHECK(r.frame().size() == wire.size());
  CHECK(IsBackendTag(r.frame().tag));
  absl::StatusOr<BackendMessage> decoded = DecodeBackendMessage(r.frame());
  REQUIRE(decoded.ok());
  CHECK(*decoded == msg);

  for (size_t n = 0; n < wire.size(); ++n) {
    CHECK(reader.Read(wire.substr(0, n)).is_need_more());
  }
}

TEST_CASE("Backend wire bytes match PostgreSQL's layout", "[protocol][backend]") {
  std::string out;
  Encode(ReadyForQuery{TransactionStatus::kIdle}, out);
  CHECK(out == "Z\x00\x00\x00\x05I"s);
  out.clear();
  Encode(Authentication{AuthenticationOk{}}, out);
  CHECK(out == "R\x00\x00\x00\x08\x00\x00\x00\x00"s);
  out.clear();
  Encode(AuthenticationMd5Password{"salt"}, out);
  CHECK(out == "R" + I32(12) + I32(5) + "salt");
  out.clear();
  Encode(AuthenticationSasl{{"SCRAM-SHA-256"}}, out);
  CHECK(out == "R" + I32(23) + I32(10) + Str("SCRAM-SHA-256") + Byte('\0'));
}

TEST_CASE("DataRow iterates columns including NULL without copying", "[protocol][backend]") {
  const std::string payload = I16(4) + I32(1) + "a" + I32(-1) + I32(0) + I32(3) + "xyz";
  absl::StatusOr<DataRow> row = DecodeDataRow(payload);
  REQUIRE(row.ok());
  CHECK(row->column_count == 4);
  std::vector<NullableValue> columns(row->begin(), row->end());
  REQUIRE(columns.size() == 4);
  CHECK(columns[0] == "a");
  CHECK_FALSE(columns[1].has_value());
  CHECK(columns[2] == "");
  CHECK(columns[2].has_value());
  CHECK(columns[3] == "xyz");
  CHECK(columns[3]->data() == payload.data() + payload.size() - 3);

  std::vector<size_t> indices;
  row->ForEachColumn([&](size_t i, NullableValue v) {
    indices.push_back(i);
    CHECK(v == columns[i]);
  });
  CHECK(indices == std::vector<size_t>{0, 1, 2, 3});
}

TEST_CASE("ErrorResponse accessors", "[protocol][backend]") {
  std::string out;
  EncodeErrorResponse(out, "FATAL", "53300", "too many connections", "pool exhausted",
                      "retry later");
  FrameReader::Result r = FrameReader().Read(out);
  REQUIRE(r.is_frame());
  CHECK(r.frame().backend_tag() == BackendTag::kErrorResponse);
  absl::StatusOr<ErrorResponse> e = DecodeErrorResponse(r.frame().payload);
  REQUIRE(e.ok());
  CHECK(e->severity() == "FATAL");
  CHECK(e->Get(FieldCode::kSeverity) == "FATAL");
  CHECK(e->sqlstate() == "53300");
  CHECK(e->message() == "too many connections");
  CHECK(e->detail() == "pool exhausted");
  CHECK(e->hint() == "retry later");
  CHECK(e->Get(FieldCode::kRoutine).empty());
}

TEST_CASE("EncodeErrorResponse omits empty detail and hint", "[protocol][backend]") {
  std::string out;
  EncodeNoticeResponse(out, "WARNING", "01000", "careful");
  CHECK(out == "N" + I32(4 + 9 + 9 + 7 + 9 + 1) + "S" + Str("WARNING") + "V" + Str("WARNING") +
                   "C" + Str("01000") + "M" + Str("careful") + Byte('\0'));
}

TEST_CASE("ErrorResponse without SQLSTATE or severity is accepted", "[protocol][backend]") {
  // Decoded views point into the payload, so it must outlive the message.
  const std::string payload = "M" + Str("no code") + Byte('\0');
  absl::StatusOr<ErrorResponse> e = DecodeErrorResponse(payload);
  REQUIRE(e.ok());
  CHECK(e->sqlstate().empty());
  CHECK(e->severity().empty());
  CHECK(e->message() == "no code");
}

TEST_CASE("severity() prefers the non-localized field", "[protocol][backend]") {
  const std::string payload = "S" + Str("AVIS") + "V" + Str("NOTICE") + Byte('\0');
  absl::StatusOr<NoticeResponse> n = DecodeNoticeResponse(payload);
  REQUIRE(n.ok());
  CHECK(n->severity() == "NOTICE");
  CHECK(n->Get('S') == "AVIS");
}

struct BadBackend {
  char tag;
  std::string payload;
  const char* error;
};

TEST_CASE("Malformed backend messages are rejected with a specific error",
          "[protocol][backend]") {
  auto c = GENERATE(values<BadBackend>({
      {'R', "\x00\x00", "Authentication: truncated authentication type"},
      {'R', I32(4), "Authentication: unknown authentication type 4"},
      {'R', I32(99), "Authentication: unknown authentication type 99"},
      {'R', I32(0) + "x", "Authentication: 1 unexpected trailing byte"},
      {'R', I32(3) + "xx", "Authentication: 2 unexpected trailing bytes"},
      {'R', I32(5) + "abc", "Authentication: truncated MD5 salt (needs 4 bytes, 3 left)"},
      {'R', I32(5) + "abcde", "Authentication: 1 unexpected trailing byte"},
      {'R', I32(10) + Str("SCRAM-SHA-256"), "missing the NUL that ends the SASL mechanism list"},
      {'R', I32(10) + "SCRAM", "SASL mechanism is missing its NUL terminator"},
      {'R', I32(10) + Str("SCRAM-SHA-256") + Byte('\0') + "!", "1 unexpected trailing byte"},
      {'S', Str("name"), "ParameterStatus: parameter value is missing its NUL"},
      {'S', Str("a") + Str("b") + "c", "ParameterStatus: 1 unexpected trailing byte"},
      {'K', I32(1) + "abc", "BackendKeyData: secret key of 3 bytes"},
      {'K', I32(1) + std::string(257, 'k'), "BackendKeyData: secret key of 257 bytes"},
      {'K', "\x01", "BackendKeyData: truncated process ID"},
      {'Z', "X", "ReadyForQuery: invalid transaction status 0x58"},
      {'Z', "", "ReadyForQuery: truncated transaction status"},
      {'Z', "II", "ReadyForQuery: 1 unexpected trailing byte"},
      {'v', I32(0) + I32(-1), "NegotiateProtocolVersion: negative option count -1"},
      {'v', I32(0) + I32(3) + Str("a"), "3 options declared but only 2 bytes left"},
      {'v', I32(0) + I32(1) + "a", "option name is missing its NUL terminator"},
      {'T', I16(1), "RowDescription: 1 fields declared but only 0 bytes left"},
      {'T', I16(-1) + std::string(100, 'x'), "65535 fields declared"},
      {'T', I16(1) + "name" + std::string(18, '\x01'), "field name is missing its NUL"},
      {'T', I16(1) + Str("") + std::string(17, '\0') + "xx", "1 unexpected trailing byte"},
      {'D', "", "DataRow: truncated column count"},
      {'D', I16(3) + I32(1) + "a", "DataRow: 3 columns declared but only 5 bytes left"},
      {'D', I16(1) + I32(-2), "DataRow: column value has invalid length -2"},
      {'D', I16(1) + I32(0x7fffffff), "DataRow: truncated column value (needs 2147483647 bytes"},
      {'D', I16(1) + I32(-1) + "x", "DataRow: 1 unexpected trailing byte"},
      {'D', I16(2) + I32(-1) + I32(5) + "abc", "truncated column value (needs 5 bytes, 3 left)"},
      {'C', "SELECT 1", "CommandComplete: command tag is missing its NUL"},
      {'I', "x", "EmptyQueryResponse: 1 unexpected trailing byte"},
      {'E', "", "ErrorResponse: missing the NUL that ends the field list"},
      {'E', "M" + Str("x"), "ErrorResponse: missing the NUL that ends the field list"},
      {'E', "Mno terminator", "ErrorResponse: field value is missing its NUL"},
      {'E', "\0x"s, "ErrorResponse: 1 unexpected trailing byte"},
      {'N', "S", "NoticeResponse: field value is missing its NUL"},
      {'1', "x", "ParseComplete: 1 unexpected trailing byte"},
      {'2', "x", "BindComplete: 1 unexpected trailing byte"},
      {'3', "x", "CloseComplete: 1 unexpected trailing byte"},
      {'n', "x", "NoData: 1 unexpected trailing byte"},
      {'s', "x", "PortalSuspended: 1 unexpected trailing byte"},
      {'t', I16(2) + I32(23), "ParameterDescription: 2 parameter types declared"},
      {'t', I16(1) + I32(23) + "x", "ParameterDescription: 1 unexpected trailing byte"},
      {'G', "", "CopyInResponse: truncated overall format"},
      {'H', Byte('\0') + I16(2) + I16(0), "CopyOutResponse: 2 column formats declared"},
      {'W', Byte('\0') + I16(0) + "x", "CopyBothResponse: 1 unexpected trailing byte"},
      {'c', "x", "CopyDone: 1 unexpected trailing byte"},
      {'A', I32(1) + Str("chan"), "NotificationResponse: payload is missing its NUL"},
      {'A', "\x00", "NotificationResponse: truncated process ID"},
      {'V', I32(-3), "FunctionCallResponse: result value has invalid length -3"},
      {'V', I32(-1) + "x", "FunctionCallResponse: 1 unexpected trailing byte"},
      {'V', "", "FunctionCallResponse: truncated result value"},
      {'Q', "", "invalid backend message type 0x51"},
      {'\xff', "", "invalid backend message type 0xff"},
  }));
  CAPTURE(c.tag, c.error);
  Frame frame{c.tag, c.payload, {}};
  absl::StatusOr<BackendMessage> decoded = DecodeBackendMessage(frame);
  REQUIRE_FALSE(decoded.ok());
  CHECK(IsProtocolError(decoded.status()));
  CHECK_THAT(Message(decoded.status()), ContainsSubstring(c.error));
}

TEST_CASE("Backend tag names", "[protocol][backend]") {
  CHECK(BackendTagName(BackendTag::kDataRow) == "DataRow");
  CHECK(FrontendTagName(FrontendTag::kDescribe) == "Describe");  // Same byte 'D'.
  CHECK(IsBackendTag('T'));
  CHECK_FALSE(IsBackendTag('Q'));
}

TEST_CASE("AppendWithTextFormats copies a RowDescription with every format text", "[protocol][backend]") {
  RowDescription rd;
  rd.fields.push_back(FieldDescription{"aid", 16384, 1, 23, 4, -1, kFormatBinary});
  rd.fields.push_back(FieldDescription{"abalance", 16384, 2, 23, 4, -1, kFormatBinary});
  std::string raw;
  Encode(rd, raw);
  std::string out = "prefix";
  REQUIRE(AppendWithTextFormats(raw, out));
  REQUIRE(out.substr(0, 6) == "prefix");
  std::optional<Frame> f = PeekTaggedFrame(std::string_view(out).substr(6));
  REQUIRE(f.has_value());
  absl::StatusOr<RowDescription> text = DecodeRowDescription(f->payload);
  REQUIRE(text.ok());
  REQUIRE(text->fields.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(text->fields[i].format == kFormatText);
    CHECK(text->fields[i].name == rd.fields[i].name);
    CHECK(text->fields[i].type_oid == 23);
  }
  // Cut inside the second column: malformed.
  std::string partial;
  CHECK_FALSE(AppendWithTextFormats(std::string_view(raw).substr(0, raw.size() - 3), partial));
}

TEST_CASE("A NotificationResponse's pid is read and replaced in place", "[protocol][backend]") {
  std::string raw;
  Encode(NotificationResponse{4242, "chan", "hello"}, raw);
  CHECK(PeekNotificationPid(raw) == 4242);
  PatchNotificationPid(raw.data(), 7);
  std::optional<Frame> f = PeekTaggedFrame(raw);
  REQUIRE(f.has_value());
  absl::StatusOr<NotificationResponse> n = DecodeNotificationResponse(f->payload);
  REQUIRE(n.ok());
  CHECK(n->process_id == 7);
  CHECK(n->channel == "chan");
  CHECK(n->payload == "hello");
  CHECK_FALSE(PeekNotificationPid(raw.substr(0, 8)).has_value());
}

}  // namespace
}  // namespace hyperpool::protocol
