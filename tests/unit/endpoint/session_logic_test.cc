// The Endpoint session's pure helpers: recognising transaction-ending
// statements (failed-transaction emulation) and rewriting FATAL as ERROR.
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "endpoint/session.h"
#include "protocol/codec.h"

namespace hyperpool::endpoint {
namespace {

TEST_CASE("IsTransactionEnd recognises the statements that end a failed transaction") {
  auto sql = GENERATE(as<std::string>{}, "ROLLBACK", "rollback", "  Rollback ;", "ROLLBACK WORK", "ROLLBACK TRANSACTION",
                      "ABORT", "abort transaction;", "COMMIT", "commit work", "END", "end transaction",
                      "COMMIT AND CHAIN", "rollback and no chain;", "/* why */ COMMIT -- done\n",
                      "/* nested /* comment */ */ ROLLBACK", "COMMIT;;");
  CAPTURE(sql);
  CHECK(IsTransactionEnd(sql));
}

TEST_CASE("IsTransactionEnd rejects everything else") {
  auto sql = GENERATE(as<std::string>{}, "", ";", "SELECT 1", "ROLLBACK TO SAVEPOINT a", "ROLLBACK TO a",
                      "ROLLBACK PREPARED 'x'", "COMMIT PREPARED 'x'", "COMMIT; SELECT 1", "ENDx", "rollbacks",
                      "BEGIN", "-- COMMIT", "COMMIT AND", "COMMIT AND NO", "END IF");
  CAPTURE(sql);
  CHECK_FALSE(IsTransactionEnd(sql));
}

TEST_CASE("AppendFatalAsError rewrites FATAL and PANIC, keeping every other field") {
  std::string fatal;
  protocol::EncodeErrorResponse(fatal, "FATAL", "57P01", "terminating connection due to administrator command");
  std::string payload = fatal.substr(5);
  std::string out;
  REQUIRE(AppendFatalAsError(payload, out));
  REQUIRE(out.size() > 5);
  CHECK(out[0] == 'E');
  auto decoded = protocol::DecodeErrorResponse(std::string_view(out).substr(5));
  REQUIRE(decoded.ok());
  CHECK(decoded->severity() == "ERROR");
  CHECK(decoded->Get(protocol::FieldCode::kSeverity) == "ERROR");
  CHECK(decoded->sqlstate() == "57P01");
  CHECK(decoded->message() == "terminating connection due to administrator command");
}

TEST_CASE("AppendFatalAsError leaves ERRORs and malformed payloads alone") {
  std::string error;
  protocol::EncodeErrorResponse(error, "ERROR", "42P01", "no such table");
  std::string out;
  CHECK_FALSE(AppendFatalAsError(error.substr(5), out));
  CHECK_FALSE(AppendFatalAsError(std::string("S\0FATAL", 7), out));  // no terminator
  CHECK(out.empty());
  // No SQLSTATE at all: still rewritten, without inventing one.
  std::string bare = std::string("SFATAL\0Mgone\0\0", 14);
  REQUIRE(AppendFatalAsError(bare, out));
  auto decoded = protocol::DecodeErrorResponse(std::string_view(out).substr(5));
  REQUIRE(decoded.ok());
  CHECK(decoded->severity() == "ERROR");
  CHECK(decoded->sqlstate().empty());
}

}  // namespace
}  // namespace hyperpool::endpoint
