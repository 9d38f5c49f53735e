// The TLS layer against the fixture's real PostgreSQL 15: SSLRequest, a
// verify-full handshake against the fixture CA, and the tls-server-end-point
// channel binding data that SCRAM-SHA-256-PLUS will need.
#include <openssl/sha.h>

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <variant>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "support/pg_fixture.h"
#include "tls/channel_binding.h"
#include "tls/tls_context.h"
#include "tls/tls_stream.h"

namespace hyperpool::tls {
namespace {

using asio::ip::tcp;
using hyperpool::testing::PgCluster;
using hyperpool::testing::SharedPgCluster;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

std::string Str(absl::string_view s) { return std::string(s.data(), s.size()); }

ClientContext VerifyFullContext(const std::string& ca_file) {
  ClientOptions options;
  options.mode = SslMode::kVerifyFull;
  options.root_cert_file = ca_file;
  auto ctx = ClientContext::Create(options);
  if (!ctx.ok()) FAIL(ctx.status().ToString());
  return *ctx;
}

// Runs `body` with a socket connected to the fixture's PostgreSQL. `io` must
// outlive every socket and stream the body leaves behind.
template <typename Body>
void WithOriginSocket(asio::io_context& io, const PgCluster& pg, Body& body) {
  bool done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        tcp::socket socket(io);
        auto [ec] = co_await socket.async_connect(
            tcp::endpoint(asio::ip::make_address(pg.host), pg.port), kAsTuple);
        if (ec) FAIL("cannot connect to PostgreSQL: " << ec.message());
        co_await body(std::move(socket));
        done = true;
      },
      asio::detached);
  io.run_for(std::chrono::seconds(30));
  REQUIRE(done);
}

// A StartupMessage (protocol 3.0) for `user` on `database`.
std::string StartupMessage(const std::string& user, const std::string& database) {
  std::string body;
  auto put32 = [](std::string& out, uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(v >> shift));
  };
  put32(body, 196608);
  for (const auto& s : {std::string("user"), user, std::string("database"), database}) {
    body += s;
    body.push_back('\0');
  }
  body.push_back('\0');
  std::string message;
  put32(message, static_cast<uint32_t>(body.size() + 4));
  return message + body;
}

TEST_CASE("PostgreSQL accepts SSLRequest and passes verify-full; the binding hash matches its cert") {
  asio::io_context io;  // First: it must outlive every socket below.
  const PgCluster& pg = SharedPgCluster();
  auto ctx = VerifyFullContext(pg.ca_cert);
  const std::string host = GENERATE(std::string("localhost"), std::string("127.0.0.1"));
  CAPTURE(host);
  absl::StatusOr<TlsOffer> offer = absl::UnknownError("not run");
  absl::Status handshake = absl::UnknownError("not run");
  absl::StatusOr<std::string> hash = absl::UnknownError("not run");
  std::string version;
  auto body = [&](tcp::socket socket) -> asio::awaitable<void> {
    offer = co_await RequestTls(socket);
    if (!offer.ok() || *offer != TlsOffer::kAccepted) co_return;
    auto stream = TlsStream::Client(std::move(socket), ctx, host);
    if (!stream.ok()) {
      handshake = stream.status();
      co_return;
    }
    handshake = co_await stream->Handshake();
    if (!handshake.ok()) co_return;
    version = stream->protocol_version();
    hash = stream->PeerEndPointHash();
    co_await stream->Shutdown();
  };
  WithOriginSocket(io, pg, body);
  REQUIRE(offer.ok());
  CHECK(*offer == TlsOffer::kAccepted);
  REQUIRE(handshake.ok());
  CHECK(version == "TLSv1.3");
  REQUIRE(hash.ok());

  auto der = ReadPemCertificateAsDer(pg.server_cert);
  REQUIRE(der.ok());
  unsigned char expected[SHA256_DIGEST_LENGTH];  // The fixture's cert is signed with SHA-256.
  SHA256(reinterpret_cast<const unsigned char*>(der->data()), der->size(), expected);
  CHECK(*hash == std::string(reinterpret_cast<const char*>(expected), sizeof expected));
  auto from_file = TlsServerEndPointHash(*der);
  REQUIRE(from_file.ok());
  CHECK(*hash == *from_file);
}

TEST_CASE("PostgreSQL's certificate fails verification against an unrelated CA") {
  asio::io_context io;  // First: it must outlive every socket below.
  const PgCluster& pg = SharedPgCluster();
  auto certs = hyperpool::testing::GenerateTestCerts();
  REQUIRE(certs.ok());
  auto ctx = VerifyFullContext(certs->other_ca_cert);
  absl::StatusOr<OriginStream> result = absl::UnknownError("not run");
  auto body = [&](tcp::socket socket) -> asio::awaitable<void> {
    result = co_await NegotiateOriginTls(std::move(socket), ctx, "localhost");
  };
  WithOriginSocket(io, pg, body);
  REQUIRE_FALSE(result.ok());
  CHECK(result.status().code() == absl::StatusCode::kUnauthenticated);
  CHECK(Str(result.status().message()).find("server certificate verify failed") != std::string::npos);
}

TEST_CASE("a StartupMessage over the negotiated TLS stream logs in the trust role") {
  asio::io_context io;  // First: it must outlive every socket below.
  const PgCluster& pg = SharedPgCluster();
  auto ctx = VerifyFullContext(pg.ca_cert);
  absl::StatusOr<OriginStream> result = absl::UnknownError("not run");
  std::string reply;
  auto body = [&](tcp::socket socket) -> asio::awaitable<void> {
    result = co_await NegotiateOriginTls(std::move(socket), ctx, "localhost");
    if (!result.ok()) co_return;
    auto& stream = std::get<TlsStream>(*result);
    const std::string startup = StartupMessage(pg.trust.user, pg.database);
    if (!(co_await stream.WriteAll(asio::buffer(startup))).ok()) co_return;
    // AuthenticationOk is 'R', length 8, code 0: read at least those 9 bytes.
    char buf[1024];
    while (reply.size() < 9) {
      auto n = co_await stream.ReadSome(asio::buffer(buf));
      if (!n.ok() || *n == 0) break;
      reply.append(buf, *n);
    }
    static constexpr char kTerminate[] = {'X', 0, 0, 0, 4};
    (void)co_await stream.WriteAll(asio::buffer(kTerminate));
    (void)co_await stream.Shutdown();
  };
  WithOriginSocket(io, pg, body);
  REQUIRE(result.ok());
  REQUIRE(reply.size() >= 9);
  CHECK(reply.substr(0, 9) == std::string("R\0\0\0\x08\0\0\0\0", 9));
}

}  // namespace
}  // namespace hyperpool::tls
