#include "protocol/pooler_errors.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "absl/strings/cord.h"
#include "protocol/backend_messages.h"
#include "protocol/frame_reader.h"

namespace hyperpool::protocol {
namespace {

using Catch::Matchers::ContainsSubstring;

// The fields of the one ErrorResponse in `bytes`.
ErrorResponse DecodeOne(const std::string& bytes) {
  FrameReader reader;
  auto r = reader.Read(bytes);
  REQUIRE(r.is_frame());
  REQUIRE(r.frame().tag == 'E');
  REQUIRE(r.frame().size() == bytes.size());
  auto e = DecodeErrorResponse(r.frame().payload);
  REQUIRE(e.ok());
  return *e;
}

std::string Field(const ErrorResponse& e, char code) {
  for (const auto& [c, v] : e.fields) {
    if (c == code) return std::string(v);
  }
  return {};
}

TEST_CASE("each named pooler error carries its SQLSTATE") {
  CHECK(PoolExhausted().sqlstate == "53300");
  CHECK(ShuttingDown().sqlstate == "57P01");
  CHECK(ProtocolViolation("bad frame").sqlstate == "08P01");
  CHECK(ProtocolViolation("bad frame").message == "bad frame");
  CHECK(LinkFailure("link lost").sqlstate == "08006");
  CHECK(OriginUnavailable("refused").sqlstate == "08001");
  CHECK_THAT(OriginUnavailable("refused").message, ContainsSubstring("refused"));
  CHECK(OriginUnavailable("bad password", kSqlStateInvalidPassword).sqlstate == "28P01");
}

TEST_CASE("a failed acquire maps to the app's error by its status") {
  CHECK(ErrorForAcquire(absl::ResourceExhaustedError("timeout")) == PoolExhausted());
  CHECK(ErrorForAcquire(absl::CancelledError("stop")) == ShuttingDown());

  // A connect failure: 08001 and the reason, unless the status names its code.
  PoolerError refused = ErrorForAcquire(absl::UnavailableError("connection refused"));
  CHECK(refused.sqlstate == "08001");
  CHECK_THAT(refused.message, ContainsSubstring("connection refused"));
  PoolerError denied =
      ErrorForAcquire(WithSqlState(absl::UnavailableError("password authentication failed"), "28P01"));
  CHECK(denied.sqlstate == "28P01");

  // The origin's own error (a replayed SET failed; a cancel before the work
  // started): its code and its words, nothing added.
  PoolerError replay = ErrorForAcquire(WithSqlState(absl::AbortedError("invalid value for parameter"), "22023"));
  CHECK(replay == PoolerError{"22023", "invalid value for parameter"});
  PoolerError cancel =
      ErrorForAcquire(WithSqlState(absl::AbortedError("canceling statement due to user request"), "57014"));
  CHECK(cancel.sqlstate == "57014");
}

TEST_CASE("AppendError writes one ErrorResponse with severity, code and message") {
  std::string out = "x";
  AppendError(out, "FATAL", PoolExhausted());
  REQUIRE(out[0] == 'x');
  const std::string frame = out.substr(1);  // the decoded fields are views into it
  ErrorResponse e = DecodeOne(frame);
  CHECK(Field(e, 'S') == "FATAL");
  CHECK(Field(e, 'V') == "FATAL");
  CHECK(Field(e, 'C') == "53300");
  CHECK(Field(e, 'M') == "Failed to acquire a connection from the pool");
}

}  // namespace
}  // namespace hyperpool::protocol
