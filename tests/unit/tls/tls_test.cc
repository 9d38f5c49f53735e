// TLS contexts, streams, SSLRequest handling and channel binding, on loopback
// in one process, with certificates made by tests/support/gencerts.sh.
#include <openssl/sha.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include <asio/experimental/as_tuple.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "support/pg_fixture.h"
#include "tls/channel_binding.h"
#include "tls/tls_context.h"
#include "tls/tls_info.h"
#include "tls/tls_stream.h"

namespace hyperpool::tls {
namespace {

using asio::ip::tcp;
using hyperpool::testing::TestCerts;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

std::string Str(absl::string_view s) { return std::string(s.data(), s.size()); }

const hyperpool::testing::TestCerts& Certs() { return hyperpool::testing::SharedTestCerts(); }

ClientContext MakeClient(SslMode mode, std::string root = "", std::string cert = "",
                         std::string key = "") {
  auto ctx = ClientContext::Create({.mode = mode,
                                    .root_cert_file = std::move(root),
                                    .cert_file = std::move(cert),
                                    .key_file = std::move(key)});
  if (!ctx.ok()) FAIL(ctx.status().ToString());
  return *ctx;
}

ServerContext MakeServer(std::string cert, std::string key, std::string client_ca = "",
                         bool require_client_cert = false) {
  auto ctx = ServerContext::Create({.cert_file = std::move(cert),
                                    .key_file = std::move(key),
                                    .client_ca_file = std::move(client_ca),
                                    .require_client_cert = require_client_cert});
  if (!ctx.ok()) FAIL(ctx.status().ToString());
  return *ctx;
}

std::string Sha256(const std::string& data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof digest);
}

// Runs a server and a client coroutine over one loopback TCP connection to
// completion (or fails the test after a deadline).
template <typename Server, typename Client>
void RunLoopback(asio::io_context& io, Server& server, Client& client) {
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const auto endpoint = acceptor.local_endpoint();
  bool server_done = false, client_done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto [ec, socket] = co_await acceptor.async_accept(kAsTuple);
        if (!ec) co_await server(std::move(socket));
        server_done = true;
      },
      asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        tcp::socket socket(io);
        auto [ec] = co_await socket.async_connect(endpoint, kAsTuple);
        if (!ec) co_await client(std::move(socket));
        client_done = true;
      },
      asio::detached);
  io.run_for(std::chrono::seconds(20));
  REQUIRE(server_done);
  REQUIRE(client_done);
}

struct HandshakeOutcome {
  // First, so destroyed last: the streams' sockets belong to it.
  std::unique_ptr<asio::io_context> io = std::make_unique<asio::io_context>();
  absl::Status client = absl::UnknownError("not run");
  absl::Status server = absl::UnknownError("not run");
  std::optional<TlsStream> client_stream;
  std::optional<TlsStream> server_stream;
};

HandshakeOutcome Handshake(const ClientContext& client_ctx, const ServerContext& server_ctx,
                           std::string host) {
  HandshakeOutcome out;
  auto server = [&](tcp::socket socket) -> asio::awaitable<void> {
    auto stream = TlsStream::Server(std::move(socket), server_ctx);
    if (!stream.ok()) {
      out.server = stream.status();
      co_return;
    }
    out.server = co_await stream->Handshake();
    out.server_stream.emplace(std::move(*stream));
  };
  auto client = [&](tcp::socket socket) -> asio::awaitable<void> {
    auto stream = TlsStream::Client(std::move(socket), client_ctx, host);
    if (!stream.ok()) {
      out.client = stream.status();
      co_return;
    }
    out.client = co_await stream->Handshake();
    out.client_stream.emplace(std::move(*stream));
  };
  RunLoopback(*out.io, server, client);
  return out;
}

TEST_CASE("the TLS library is the one this build chose") {
#if defined(HYPERPOOL_TLS_BORINGSSL)
  CHECK(LibraryName() == "BoringSSL");
#else
  CHECK(LibraryName() == "OpenSSL");
#endif
  CHECK_FALSE(LibraryVersion().empty());
}

TEST_CASE("sslmode names parse like libpq's") {
  auto [name, mode] = GENERATE(table<std::string, SslMode>({
      {"disable", SslMode::kDisable},
      {"allow", SslMode::kAllow},
      {"prefer", SslMode::kPrefer},
      {"require", SslMode::kRequire},
      {"verify-ca", SslMode::kVerifyCa},
      {"verify-full", SslMode::kVerifyFull},
  }));
  auto parsed = ParseSslMode(name);
  REQUIRE(parsed.ok());
  CHECK(*parsed == mode);
  CHECK(SslModeName(mode) == name);
}

TEST_CASE("an unknown sslmode is rejected with the valid names") {
  auto parsed = ParseSslMode("verify_full");
  REQUIRE_FALSE(parsed.ok());
  CHECK(Str(parsed.status().message()).find("verify-full") != std::string::npos);
}

TEST_CASE("verifying modes need a root certificate file") {
  auto mode = GENERATE(SslMode::kVerifyCa, SslMode::kVerifyFull);
  ClientOptions options;
  options.mode = mode;
  auto ctx = ClientContext::Create(options);
  REQUIRE_FALSE(ctx.ok());
  CHECK(ctx.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Str(ctx.status().message()).find("root certificate") != std::string::npos);
}

TEST_CASE("a missing root certificate file is named in the error") {
  ClientOptions options;
  options.mode = SslMode::kVerifyFull;
  options.root_cert_file = "/nonexistent/ca.crt";
  auto ctx = ClientContext::Create(options);
  REQUIRE_FALSE(ctx.ok());
  CHECK(Str(ctx.status().message()).find("/nonexistent/ca.crt") != std::string::npos);
}

TEST_CASE("a server key that does not match its certificate is rejected") {
  ServerOptions options;
  options.cert_file = Certs().server_cert;
  options.key_file = Certs().client_key;
  auto ctx = ServerContext::Create(options);
  REQUIRE_FALSE(ctx.ok());
  CHECK(Str(ctx.status().message()).find("does not match") != std::string::npos);
}

TEST_CASE("require with a root certificate file verifies like verify-ca, as libpq does") {
  CHECK_FALSE(MakeClient(SslMode::kRequire).verifies_chain());
  CHECK(MakeClient(SslMode::kRequire, Certs().ca_cert).verifies_chain());
  CHECK_FALSE(MakeClient(SslMode::kVerifyCa, Certs().ca_cert).verifies_host_name());
  CHECK(MakeClient(SslMode::kVerifyFull, Certs().ca_cert).verifies_host_name());
}

TEST_CASE("verify-full succeeds against the right CA for a DNS or IP SAN") {
  auto host = GENERATE("localhost", "127.0.0.1");
  CAPTURE(host);
  auto out = Handshake(MakeClient(SslMode::kVerifyFull, Certs().ca_cert),
                       MakeServer(Certs().server_cert, Certs().server_key), host);
  REQUIRE(out.client.ok());
  REQUIRE(out.server.ok());
  CHECK(out.client_stream->protocol_version() == "TLSv1.3");
  CHECK_FALSE(out.client_stream->cipher().empty());
  CHECK(out.client_stream->peer_has_certificate());
}

TEST_CASE("verification fails against the wrong CA") {
  auto mode = GENERATE(SslMode::kRequire, SslMode::kVerifyCa, SslMode::kVerifyFull);
  CAPTURE(SslModeName(mode));
  auto out = Handshake(MakeClient(mode, Certs().other_ca_cert),
                       MakeServer(Certs().server_cert, Certs().server_key), "localhost");
  REQUIRE_FALSE(out.client.ok());
  CHECK(out.client.code() == absl::StatusCode::kUnauthenticated);
  CHECK(Str(out.client.message()).find("server certificate verify failed") != std::string::npos);
  CHECK(Str(out.client.message()).find("issuer") != std::string::npos);
  CHECK_FALSE(out.server.ok());
}

TEST_CASE("require without a root certificate file accepts any certificate") {
  auto out = Handshake(MakeClient(SslMode::kRequire),
                       MakeServer(Certs().wrongname_cert, Certs().wrongname_key), "localhost");
  CHECK(out.client.ok());
  CHECK(out.server.ok());
}

TEST_CASE("verify-full fails on a host name mismatch where verify-ca passes") {
  auto server = MakeServer(Certs().wrongname_cert, Certs().wrongname_key);
  auto full = Handshake(MakeClient(SslMode::kVerifyFull, Certs().ca_cert), server, "localhost");
  REQUIRE_FALSE(full.client.ok());
  CHECK(full.client.code() == absl::StatusCode::kUnauthenticated);
  CHECK(Str(full.client.message()) == "server certificate does not match host name 'localhost'");

  auto ca = Handshake(MakeClient(SslMode::kVerifyCa, Certs().ca_cert), server, "localhost");
  CHECK(ca.client.ok());
  CHECK(ca.server.ok());
}

TEST_CASE("verify-full checks an IP address against IP SANs, not DNS ones") {
  // server.crt has IP:127.0.0.1; wrongname.crt has no IP SAN at all.
  auto out = Handshake(MakeClient(SslMode::kVerifyFull, Certs().ca_cert),
                       MakeServer(Certs().wrongname_cert, Certs().wrongname_key), "127.0.0.1");
  REQUIRE_FALSE(out.client.ok());
  CHECK(Str(out.client.message()).find("does not match host name '127.0.0.1'") != std::string::npos);
}

TEST_CASE("tls-server-end-point is SHA-256 of the DER of a sha256-signed server certificate") {
  auto out = Handshake(MakeClient(SslMode::kVerifyFull, Certs().ca_cert),
                       MakeServer(Certs().server_cert, Certs().server_key), "localhost");
  REQUIRE(out.client.ok());
  REQUIRE(out.server.ok());
  auto der = ReadPemCertificateAsDer(Certs().server_cert);
  REQUIRE(der.ok());
  const std::string expected = Sha256(*der);

  auto client_view = out.client_stream->PeerEndPointHash();
  REQUIRE(client_view.ok());
  CHECK(*client_view == expected);
  auto server_view = out.server_stream->LocalEndPointHash();
  REQUIRE(server_view.ok());
  CHECK(*server_view == expected);
  auto from_der = TlsServerEndPointHash(*der);
  REQUIRE(from_der.ok());
  CHECK(*from_der == expected);
  auto peer_der = out.client_stream->PeerCertificateDer();
  REQUIRE(peer_der.ok());
  CHECK(*peer_der == *der);
}

TEST_CASE("TlsServerEndPointHash rejects bytes that are not a certificate") {
  auto hash = TlsServerEndPointHash("not a certificate");
  REQUIRE_FALSE(hash.ok());
  CHECK(hash.status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("data makes a round trip and both sides shut down gracefully") {
  asio::io_context io;  // First: it must outlive every socket below.
  auto client_ctx = MakeClient(SslMode::kVerifyFull, Certs().ca_cert);
  auto server_ctx = MakeServer(Certs().server_cert, Certs().server_key);
  // Larger than a TLS record (16 KiB), to cover several records per direction.
  std::string message(100'000, '\0');
  for (size_t i = 0; i < message.size(); ++i) message[i] = static_cast<char>(i * 7 + 3);
  absl::Status server_status = absl::UnknownError("not run");
  absl::Status client_status = absl::UnknownError("not run");
  std::string echoed;

  auto server = [&](tcp::socket socket) -> asio::awaitable<void> {
    auto stream = TlsStream::Server(std::move(socket), server_ctx);
    if (!stream.ok()) co_return;
    if (server_status = co_await stream->Handshake(); !server_status.ok()) co_return;
    // Echo until the client's close_notify.
    char buf[4096];
    for (;;) {
      auto n = co_await stream->ReadSome(asio::buffer(buf));
      if (!n.ok()) {
        server_status = n.status();
        co_return;
      }
      if (*n == 0) break;
      if (server_status = co_await stream->WriteAll(asio::buffer(buf, *n)); !server_status.ok()) co_return;
    }
    server_status = co_await stream->Shutdown();
  };
  auto client = [&](tcp::socket socket) -> asio::awaitable<void> {
    auto stream = TlsStream::Client(std::move(socket), client_ctx, "localhost");
    if (!stream.ok()) co_return;
    if (client_status = co_await stream->Handshake(); !client_status.ok()) co_return;
    // Write and read concurrently: the echo would otherwise fill both directions' buffers.
    asio::co_spawn(
        stream->get_executor(),
        [&]() -> asio::awaitable<void> { (void)co_await stream->WriteAll(asio::buffer(message)); },
        asio::detached);
    char buf[4096];
    while (echoed.size() < message.size()) {
      auto n = co_await stream->ReadSome(asio::buffer(buf));
      if (!n.ok()) {
        client_status = n.status();
        co_return;
      }
      if (*n == 0) break;
      echoed.append(buf, *n);
    }
    client_status = co_await stream->Shutdown();
  };
  RunLoopback(io, server, client);
  CHECK(client_status.ok());
  CHECK(server_status.ok());
  CHECK(echoed.size() == message.size());
  CHECK(echoed == message);
}

TEST_CASE("a server requiring client certificates accepts one from its CA and refuses none") {
  asio::io_context io;  // First: it must outlive every socket below.
  auto server_ctx = MakeServer(Certs().server_cert, Certs().server_key, Certs().ca_cert,
                               /*require_client_cert=*/true);
  auto with_cert = Handshake(
      MakeClient(SslMode::kVerifyFull, Certs().ca_cert, Certs().client_cert, Certs().client_key),
      server_ctx, "localhost");
  REQUIRE(with_cert.client.ok());
  REQUIRE(with_cert.server.ok());
  CHECK(with_cert.server_stream->peer_has_certificate());

  absl::Status server_status = absl::UnknownError("not run");
  absl::Status client_status = absl::UnknownError("not run");
  auto client_ctx = MakeClient(SslMode::kVerifyFull, Certs().ca_cert);
  auto server = [&](tcp::socket socket) -> asio::awaitable<void> {
    auto stream = TlsStream::Server(std::move(socket), server_ctx);
    if (stream.ok()) server_status = co_await stream->Handshake();
  };
  auto client = [&](tcp::socket socket) -> asio::awaitable<void> {
    auto stream = TlsStream::Client(std::move(socket), client_ctx, "localhost");
    if (!stream.ok()) co_return;
    client_status = co_await stream->Handshake();
    if (!client_status.ok()) co_return;
    // In TLS 1.3 the client's handshake ends before the server judges its
    // certificate; the refusal then arrives as an alert on the first read.
    char buf[16];
    auto n = co_await stream->ReadSome(asio::buffer(buf));
    client_status = n.ok() ? absl::OkStatus() : n.status();
  };
  RunLoopback(io, server, client);
  CAPTURE(server_status.ToString(), client_status.ToString());
  CHECK(server_status.code() == absl::StatusCode::kUnauthenticated);
  CHECK(Str(server_status.message()).find("presented no certificate") != std::string::npos);
  CHECK_FALSE(client_status.ok());
}

TEST_CASE("a client certificate from an unknown CA is refused with the reason") {
  auto server_ctx = MakeServer(Certs().server_cert, Certs().server_key, Certs().other_ca_cert);
  auto out = Handshake(
      MakeClient(SslMode::kVerifyFull, Certs().ca_cert, Certs().client_cert, Certs().client_key),
      server_ctx, "localhost");
  REQUIRE_FALSE(out.server.ok());
  CHECK(out.server.code() == absl::StatusCode::kUnauthenticated);
  CHECK(Str(out.server.message()).find("client certificate verify failed") != std::string::npos);
}

// A fake PostgreSQL server that answers the SSLRequest with `answer` verbatim.
struct SslRequestOutcome {
  absl::StatusOr<TlsOffer> offer = absl::UnknownError("not run");
  bool server_saw_request = false;
};

SslRequestOutcome RequestTlsFrom(std::string answer) {
  asio::io_context io;  // First: it must outlive every socket below.
  SslRequestOutcome out;
  auto server = [&](tcp::socket socket) -> asio::awaitable<void> {
    std::array<uint8_t, 8> request;
    auto [ec, n] = co_await asio::async_read(socket, asio::buffer(request), kAsTuple);
    out.server_saw_request = !ec && request == kSslRequestBytes;
    co_await asio::async_write(socket, asio::buffer(answer), kAsTuple);
    // Keep the connection open until the client is done with it.
    char byte;
    co_await socket.async_read_some(asio::buffer(&byte, 1), kAsTuple);
  };
  auto client = [&](tcp::socket socket) -> asio::awaitable<void> {
    out.offer = co_await RequestTls(socket);
    socket.close();
  };
  RunLoopback(io, server, client);
  return out;
}

TEST_CASE("RequestTls sends SSLRequest and reads the server's single-byte answer") {
  auto [answer, offer] = GENERATE(table<std::string, TlsOffer>({
      {"S", TlsOffer::kAccepted},
      {"N", TlsOffer::kRefused},
  }));
  auto out = RequestTlsFrom(answer);
  CHECK(out.server_saw_request);
  REQUIRE(out.offer.ok());
  CHECK(*out.offer == offer);
}

TEST_CASE("RequestTls refuses bytes that follow the answer (CVE-2021-23222)") {
  auto answer = GENERATE(std::string("SQ\0\0\0\x05I", 7), std::string("Nxyz"));
  auto out = RequestTlsFrom(answer);
  REQUIRE_FALSE(out.offer.ok());
  CHECK(out.offer.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(Str(out.offer.status().message()).find("CVE-2021-23222") != std::string::npos);
}

TEST_CASE("RequestTls reports an ErrorResponse or a foreign byte as such") {
  auto answer = GENERATE(std::string("E"), std::string("H"));
  auto out = RequestTlsFrom(answer);
  REQUIRE_FALSE(out.offer.ok());
  CHECK(out.offer.status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("NegotiateOriginTls follows sslmode when the server refuses TLS") {
  asio::io_context io;  // First: it must outlive every socket below.
  auto [mode, plaintext_ok] = GENERATE(table<SslMode, bool>({
      {SslMode::kPrefer, true},
      {SslMode::kRequire, false},
  }));
  auto client_ctx = MakeClient(mode);
  absl::StatusOr<OriginStream> result = absl::UnknownError("not run");
  auto server = [&](tcp::socket socket) -> asio::awaitable<void> {
    std::array<uint8_t, 8> request;
    co_await asio::async_read(socket, asio::buffer(request), kAsTuple);
    co_await asio::async_write(socket, asio::buffer("N", 1), kAsTuple);
    char byte;
    co_await socket.async_read_some(asio::buffer(&byte, 1), kAsTuple);
  };
  auto client = [&](tcp::socket socket) -> asio::awaitable<void> {
    result = co_await NegotiateOriginTls(std::move(socket), client_ctx, "localhost");
    if (result.ok()) std::get<tcp::socket>(*result).close();
  };
  RunLoopback(io, server, client);
  if (plaintext_ok) {
    REQUIRE(result.ok());
    CHECK(std::holds_alternative<tcp::socket>(*result));
  } else {
    REQUIRE_FALSE(result.ok());
    CHECK(Str(result.status().message()).find("server does not support TLS") != std::string::npos);
  }
}

TEST_CASE("NegotiateOriginTls with disable sends nothing") {
  asio::io_context io;  // First: it must outlive every socket below.
  auto client_ctx = MakeClient(SslMode::kDisable);
  absl::StatusOr<OriginStream> result = absl::UnknownError("not run");
  std::size_t server_received = 1;
  auto server = [&](tcp::socket socket) -> asio::awaitable<void> {
    char buf[16];
    auto [ec, n] = co_await socket.async_read_some(asio::buffer(buf), kAsTuple);
    server_received = n;
  };
  auto client = [&](tcp::socket socket) -> asio::awaitable<void> {
    result = co_await NegotiateOriginTls(std::move(socket), client_ctx, "localhost");
    if (result.ok()) std::get<tcp::socket>(*result).close();
  };
  RunLoopback(io, server, client);
  REQUIRE(result.ok());
  CHECK(server_received == 0);
}

TEST_CASE("AcceptTls and NegotiateOriginTls complete a PostgreSQL-style TLS start") {
  asio::io_context io;  // First: it must outlive every socket below.
  auto client_ctx = MakeClient(SslMode::kVerifyFull, Certs().ca_cert);
  auto server_ctx = MakeServer(Certs().server_cert, Certs().server_key);
  absl::StatusOr<OriginStream> client_result = absl::UnknownError("not run");
  absl::Status server_status = absl::UnknownError("not run");
  auto server = [&](tcp::socket socket) -> asio::awaitable<void> {
    std::array<uint8_t, 8> request;
    co_await asio::async_read(socket, asio::buffer(request), kAsTuple);
    auto stream = co_await AcceptTls(std::move(socket), server_ctx, 0);
    server_status = stream.status();
  };
  auto client = [&](tcp::socket socket) -> asio::awaitable<void> {
    client_result = co_await NegotiateOriginTls(std::move(socket), client_ctx, "localhost");
  };
  RunLoopback(io, server, client);
  REQUIRE(client_result.ok());
  CHECK(std::holds_alternative<TlsStream>(*client_result));
  CHECK(server_status.ok());
}

TEST_CASE("AcceptTls refuses bytes received after SSLRequest (CVE-2021-23214)") {
  asio::io_context io;  // First: it must outlive every socket below.
  auto server_ctx = MakeServer(Certs().server_cert, Certs().server_key);
  absl::StatusOr<TlsStream> accepted = absl::UnknownError("not run");
  std::size_t client_received = 1;
  auto server = [&](tcp::socket socket) -> asio::awaitable<void> {
    accepted = co_await AcceptTls(std::move(socket), server_ctx, /*bytes_after_request=*/5);
  };
  auto client = [&](tcp::socket socket) -> asio::awaitable<void> {
    char buf[16];
    auto [ec, n] = co_await socket.async_read_some(asio::buffer(buf), kAsTuple);
    client_received = n;  // The socket closes without an 'S'.
  };
  RunLoopback(io, server, client);
  REQUIRE_FALSE(accepted.ok());
  CHECK(accepted.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(client_received == 0);
}

}  // namespace
}  // namespace hyperpool::tls
