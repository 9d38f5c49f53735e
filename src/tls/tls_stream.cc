// The only translation unit of src/tls that compiles asio::ssl: keep it so.
#include "tls/tls_stream.h"

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include <utility>

#include <asio/experimental/as_tuple.hpp>
#include <asio/ip/address.hpp>
#include <asio/ssl/error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>

#include "tls/tls_internal.h"
#include "tls/tls_stream_asio.h"

namespace hyperpool::tls {
namespace {

using internal::DrainErrors;
using internal::X509Ptr;

constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

struct SslFree {
  void operator()(SSL* ssl) const { SSL_free(ssl); }
};

X509Ptr PeerCertificate(SSL* ssl) {
#if defined(HYPERPOOL_TLS_OPENSSL)
  return X509Ptr(SSL_get1_peer_certificate(ssl));
#else
  return X509Ptr(SSL_get_peer_certificate(ssl));  // BoringSSL: returns a reference.
#endif
}

// A clean close by the peer: a TCP FIN, or (asio::ssl) one without close_notify.
bool IsPeerClose(const std::error_code& ec) {
  return ec == asio::error::eof || ec == asio::ssl::error::stream_truncated;
}

absl::Status IoError(std::string_view operation, const std::error_code& ec) {
  if (ec == asio::error::operation_aborted) {
    return absl::CancelledError(fmt::format("{} cancelled", operation));
  }
  return absl::UnavailableError(fmt::format("{} failed: {}", operation, ec.message()));
}

// Explains a failed handshake: a certificate the verifier rejected (the
// library's verify result says why), else the library's or the socket's error.
absl::Status HandshakeError(const std::error_code& ec, TlsStream::Impl& impl) {
  if (ec == asio::error::operation_aborted) return absl::CancelledError("TLS handshake cancelled");
  SSL* ssl = impl.stream.native_handle();
  DrainErrors();
  // Without SSL_VERIFY_PEER the library still records a verify result; it did
  // not cause the failure then.
  const bool verified = (SSL_get_verify_mode(ssl) & SSL_VERIFY_PEER) != 0;
  // X509_V_ERR_INVALID_CALL: no verification ran (BoringSSL, when the peer
  // sent no certificate).
  const long verify_result = SSL_get_verify_result(ssl);
  if (verified && verify_result != X509_V_OK && verify_result != X509_V_ERR_INVALID_CALL) {
    if (verify_result == X509_V_ERR_HOSTNAME_MISMATCH ||
        verify_result == X509_V_ERR_IP_ADDRESS_MISMATCH) {
      return absl::UnauthenticatedError(
          fmt::format("server certificate does not match host name '{}'", impl.host));
    }
    return absl::UnauthenticatedError(
        fmt::format("{} certificate verify failed: {}", impl.is_client ? "server" : "client",
                    X509_verify_cert_error_string(verify_result)));
  }
  if (ec.category() == asio::error::get_ssl_category() &&
      ERR_GET_REASON(static_cast<uint32_t>(ec.value())) == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
    return absl::UnauthenticatedError("the client presented no certificate, but one is required");
  }
  if (IsPeerClose(ec)) {
    return absl::UnavailableError("TLS handshake failed: the peer closed the connection");
  }
  return absl::UnavailableError(fmt::format("TLS handshake failed: {}", ec.message()));
}

}  // namespace

TlsStream::TlsStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TlsStream::TlsStream(TlsStream&& other) noexcept = default;
TlsStream& TlsStream::operator=(TlsStream&& other) noexcept = default;
TlsStream::~TlsStream() = default;

absl::StatusOr<TlsStream> TlsStream::Client(asio::ip::tcp::socket socket,
                                            const ClientContext& context, std::string_view host) {
  if (!context.attempts_tls()) {
    return absl::FailedPreconditionError(
        fmt::format("sslmode {} does not use TLS", SslModeName(context.mode())));
  }
  std::string name(host);
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') name = name.substr(1, name.size() - 2);
  std::error_code not_ip;
  asio::ip::make_address(name, not_ip);
  const bool is_ip = !not_ip;

  DrainErrors();
  std::unique_ptr<SSL, SslFree> ssl(SSL_new(context.native_handle()));
  if (ssl == nullptr) return absl::InternalError("SSL_new failed: " + DrainErrors());
  // RFC 6066 3: SNI carries DNS names only, never IP literals.
  if (context.sends_sni() && !is_ip && !name.empty() &&
      SSL_set_tlsext_host_name(ssl.get(), name.c_str()) != 1) {
    return absl::InvalidArgumentError(
        fmt::format("cannot use '{}' as TLS server name: {}", name, DrainErrors()));
  }
  if (context.verifies_host_name()) {
    if (name.empty()) {
      return absl::InvalidArgumentError("sslmode verify-full needs the server's host name");
    }
    // The verifier checks the name against subjectAltName during the
    // handshake, so a mismatch fails it with X509_V_ERR_HOSTNAME_MISMATCH.
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl.get());
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    const int ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str())
                         : X509_VERIFY_PARAM_set1_host(param, name.data(), name.size());
    if (ok != 1) {
      return absl::InvalidArgumentError(
          fmt::format("cannot verify against host name '{}': {}", name, DrainErrors()));
    }
  }
  auto impl = std::unique_ptr<Impl>(
      new Impl{AsioTlsStream(std::move(socket), ssl.release()), /*is_client=*/true, name});
  return TlsStream(std::move(impl));
}

absl::StatusOr<TlsStream> TlsStream::Server(asio::ip::tcp::socket socket,
                                            const ServerContext& context) {
  DrainErrors();
  SSL* ssl = SSL_new(context.native_handle());
  if (ssl == nullptr) return absl::InternalError("SSL_new failed: " + DrainErrors());
  auto impl = std::unique_ptr<Impl>(
      new Impl{AsioTlsStream(std::move(socket), ssl), /*is_client=*/false, std::string()});
  return TlsStream(std::move(impl));
}

asio::awaitable<absl::Status> TlsStream::Handshake() {
  auto type = impl_->is_client ? asio::ssl::stream_base::client : asio::ssl::stream_base::server;
  auto [ec] = co_await impl_->stream.async_handshake(type, kAsTuple);
  if (ec) co_return HandshakeError(ec, *impl_);
  co_return absl::OkStatus();
}

asio::awaitable<absl::StatusOr<std::size_t>> TlsStream::ReadSome(asio::mutable_buffer buffer) {
  auto [ec, n] = co_await impl_->stream.async_read_some(buffer, kAsTuple);
  if (n > 0) co_return n;
  if (IsPeerClose(ec)) co_return 0;
  if (ec) co_return IoError("TLS read", ec);
  co_return n;
}

asio::awaitable<absl::StatusOr<std::size_t>> TlsStream::WriteSome(asio::const_buffer buffer) {
  auto [ec, n] = co_await impl_->stream.async_write_some(buffer, kAsTuple);
  if (ec && n == 0) co_return IoError("TLS write", ec);
  co_return n;
}

asio::awaitable<absl::Status> TlsStream::WriteAll(asio::const_buffer buffer) {
  auto [ec, n] = co_await asio::async_write(impl_->stream, buffer, kAsTuple);
  if (ec) co_return IoError("TLS write", ec);
  co_return absl::OkStatus();
}

asio::awaitable<absl::Status> TlsStream::Shutdown() {
  auto [ec] = co_await impl_->stream.async_shutdown(kAsTuple);
  if (ec && !IsPeerClose(ec)) co_return IoError("TLS shutdown", ec);
  co_return absl::OkStatus();
}

asio::ip::tcp::socket& TlsStream::socket() { return impl_->stream.next_layer(); }

TlsStream::executor_type TlsStream::get_executor() { return impl_->stream.get_executor(); }

std::string TlsStream::protocol_version() const {
  return SSL_get_version(impl_->stream.native_handle());
}

std::string TlsStream::cipher() const {
  const SSL_CIPHER* cipher = SSL_get_current_cipher(impl_->stream.native_handle());
  return cipher == nullptr ? "" : SSL_CIPHER_get_name(cipher);
}

bool TlsStream::peer_has_certificate() const {
  return PeerCertificate(impl_->stream.native_handle()) != nullptr;
}

absl::StatusOr<std::string> TlsStream::PeerCertificateDer() const {
  X509Ptr cert = PeerCertificate(impl_->stream.native_handle());
  if (cert == nullptr) return absl::NotFoundError("the peer presented no certificate");
  return internal::CertificateDer(cert.get());
}

absl::StatusOr<std::string> TlsStream::PeerEndPointHash() const {
  X509Ptr cert = PeerCertificate(impl_->stream.native_handle());
  if (cert == nullptr) return absl::NotFoundError("the peer presented no certificate");
  return internal::EndPointHash(cert.get());
}

absl::StatusOr<std::string> TlsStream::LocalEndPointHash() const {
  X509* cert = SSL_get_certificate(impl_->stream.native_handle());
  if (cert == nullptr) return absl::NotFoundError("this side has no certificate");
  return internal::EndPointHash(cert);
}

asio::awaitable<absl::StatusOr<TlsOffer>> RequestTls(asio::ip::tcp::socket& socket) {
  auto [write_ec, written] = co_await asio::async_write(socket, asio::buffer(kSslRequestBytes), kAsTuple);
  if (write_ec) co_return IoError("sending SSLRequest", write_ec);
  // Read more than the one byte we expect, to see whether more was sent.
  std::array<uint8_t, 64> answer;
  auto [read_ec, n] = co_await socket.async_read_some(asio::buffer(answer), kAsTuple);
  if (n == 0) {
    if (IsPeerClose(read_ec)) {
      co_return absl::UnavailableError("the server closed the connection in answer to SSLRequest");
    }
    co_return IoError("reading the answer to SSLRequest", read_ec);
  }
  switch (answer[0]) {
    case 'S':
    case 'N': {
      // The server says nothing more until we speak (TLS ClientHello or
      // StartupMessage): anything else came from someone else.
      std::error_code ignored;
      const std::size_t pending = (n - 1) + socket.available(ignored);
      if (pending > 0) {
        co_return absl::PermissionDeniedError(fmt::format(
            "received {} unexpected bytes after the server's answer to SSLRequest; refusing them as "
            "possibly injected by a man in the middle (CVE-2021-23222)",
            pending));
      }
      co_return answer[0] == 'S' ? TlsOffer::kAccepted : TlsOffer::kRefused;
    }
    case 'E':
      // Its text arrived unencrypted and unauthenticated: do not show it.
      co_return absl::FailedPreconditionError(
          "the server answered SSLRequest with an error (a server without SSLRequest support, "
          "or one refusing connections)");
    default:
      co_return absl::FailedPreconditionError(
          fmt::format("unexpected byte 0x{:02x} in answer to SSLRequest: not a PostgreSQL server?",
                      answer[0]));
  }
}

asio::awaitable<absl::StatusOr<OriginStream>> NegotiateOriginTls(asio::ip::tcp::socket socket,
                                                                 const ClientContext& context,
                                                                 std::string host) {
  if (!context.attempts_tls()) co_return OriginStream(std::move(socket));
  auto offer = co_await RequestTls(socket);
  if (!offer.ok()) co_return offer.status();
  if (*offer == TlsOffer::kRefused) {
    if (context.allows_plaintext()) co_return OriginStream(std::move(socket));
    co_return absl::FailedPreconditionError(fmt::format(
        "server does not support TLS, but sslmode {} requires it", SslModeName(context.mode())));
  }
  auto stream = TlsStream::Client(std::move(socket), context, host);
  if (!stream.ok()) co_return stream.status();
  if (auto status = co_await stream->Handshake(); !status.ok()) co_return status;
  co_return OriginStream(std::move(*stream));
}

asio::awaitable<absl::StatusOr<TlsStream>> AcceptTls(asio::ip::tcp::socket socket,
                                                     const ServerContext& context,
                                                     std::size_t bytes_after_request) {
  if (bytes_after_request > 0) {
    co_return absl::PermissionDeniedError(fmt::format(
        "received {} unencrypted bytes after SSLRequest, before the TLS handshake; refusing them as "
        "possibly injected by a man in the middle (CVE-2021-23214)",
        bytes_after_request));
  }
  static constexpr char kAccept = 'S';
  auto [ec, n] = co_await asio::async_write(socket, asio::buffer(&kAccept, 1), kAsTuple);
  if (ec) co_return IoError("answering SSLRequest", ec);
  auto stream = TlsStream::Server(std::move(socket), context);
  if (!stream.ok()) co_return stream.status();
  if (auto status = co_await stream->Handshake(); !status.ok()) co_return status;
  co_return std::move(*stream);
}

}  // namespace hyperpool::tls
