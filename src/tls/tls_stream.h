// A TLS stream over a TCP socket for Asio C++20 coroutines, and the
// PostgreSQL SSLRequest exchange that precedes TLS on a PostgreSQL connection
// (PostgreSQL docs, "Message Flow" > "SSL Session Encryption").
//
// Every operation returns its error as a value (absl::Status), never throws,
// and maps TLS failures to messages that say what was wrong: "server
// certificate verify failed: <reason>", "server certificate does not match
// host name 'db.example'", "server does not support TLS", "TLS handshake
// failed: <library reason>".
//
// SECURITY RULE FOR CALLERS (CVE-2021-23214 server side, CVE-2021-23222 client
// side): bytes that arrive after an SSLRequest but before the TLS handshake
// completes were not protected by TLS, so a man-in-the-middle can inject
// them; they must be rejected, never processed as if they came over TLS.
//  - Towards an origin, use NegotiateOriginTls or RequestTls: they read the
//    one-byte answer and fail if the server sent anything more with it.
//  - Towards an application, after reading its 8-byte SSLRequest, pass the
//    number of bytes your read buffer holds beyond it to AcceptTls: it fails
//    unless that is zero. Never feed such bytes to the protocol decoder.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/buffer.hpp>
#include <asio/ip/tcp.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tls/tls_context.h"

namespace hyperpool::tls {

// A TLS connection over a connected TCP socket, client or server side. Move
// only. Call Handshake() first; one read and one write may be outstanding at a
// time (like any Asio stream). Not thread-safe: use it from one executor. Like
// any Asio socket it must be destroyed before its io_context.
class TlsStream {
 public:
  using executor_type = asio::any_io_executor;

  // The client side. `host` is the name or IP address the caller connected to:
  // it is sent as SNI (DNS names only, if the context says so) and checked
  // against the certificate in kVerifyFull. Fails if the context does not do
  // TLS (kDisable/kAllow) or `host` is empty in kVerifyFull.
  static absl::StatusOr<TlsStream> Client(asio::ip::tcp::socket socket,
                                          const ClientContext& context, std::string_view host);
  // The server side.
  static absl::StatusOr<TlsStream> Server(asio::ip::tcp::socket socket,
                                          const ServerContext& context);

  TlsStream(TlsStream&& other) noexcept;
  TlsStream& operator=(TlsStream&& other) noexcept;
  ~TlsStream();

  // Performs the TLS handshake, including certificate verification as the
  // context says. Errors: Unauthenticated for a certificate that failed
  // verification (with the reason, e.g. "unable to get local issuer
  // certificate", or the host name mismatch); Unavailable for a handshake the
  // peer aborted or a transport failure; Cancelled if the socket was cancelled.
  asio::awaitable<absl::Status> Handshake();

  // Reads at least one byte into `buffer` (if it is not empty). Returns 0 when
  // the peer closed the connection, with or without a TLS close_notify
  // (PostgreSQL messages are length-framed, so truncation is detectable above).
  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(asio::mutable_buffer buffer);
  // Writes some of `buffer`; returns how much.
  asio::awaitable<absl::StatusOr<std::size_t>> WriteSome(asio::const_buffer buffer);
  // Writes all of `buffer`.
  asio::awaitable<absl::Status> WriteAll(asio::const_buffer buffer);
  // Sends close_notify and waits for the peer's (an EOF counts as one). Bound
  // it with a timer that cancels socket() if the peer may not answer.
  asio::awaitable<absl::Status> Shutdown();

  // The TCP socket under TLS: for cancel(), close(), options and endpoints.
  // Reading or writing it directly would corrupt the TLS stream.
  asio::ip::tcp::socket& socket();
  executor_type get_executor();

  // After the handshake: "TLSv1.3", the cipher name, and whether the peer
  // presented a certificate.
  std::string protocol_version() const;
  std::string cipher() const;
  bool peer_has_certificate() const;

  // The DER of the peer's leaf certificate (NotFound if it sent none).
  absl::StatusOr<std::string> PeerCertificateDer() const;
  // tls-server-end-point channel binding data (see channel_binding.h). On the
  // client side, of the server's certificate: PeerEndPointHash(). On the
  // server side, of our own certificate: LocalEndPointHash().
  absl::StatusOr<std::string> PeerEndPointHash() const;
  absl::StatusOr<std::string> LocalEndPointHash() const;

  // The implementation (an asio::ssl::stream); see tls_stream_asio.h.
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  explicit TlsStream(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The SSLRequest message: Int32 length 8, Int32 code 80877103, big-endian.
inline constexpr uint32_t kSslRequestCode = 80877103;
inline constexpr std::array<uint8_t, 8> kSslRequestBytes = {0x00, 0x00, 0x00, 0x08,
                                                           0x04, 0xd2, 0x16, 0x2f};

// The server's answer to an SSLRequest.
enum class TlsOffer {
  kAccepted,  // 'S': start the TLS handshake now.
  kRefused,   // 'N': continue in plaintext (or give up) on this connection.
};

// Client side: sends an SSLRequest on a fresh connection and reads the one-byte
// answer. Fails (FailedPrecondition) on an ErrorResponse 'E' (a server that
// predates SSLRequest or refuses the connection: its error text is not read,
// as it arrived unauthenticated), on any other byte, and (PermissionDenied) if
// any byte follows the 'S'/'N' before we answer, as those could be injected
// (CVE-2021-23222). Unavailable on EOF or a transport error.
asio::awaitable<absl::StatusOr<TlsOffer>> RequestTls(asio::ip::tcp::socket& socket);

// The result of NegotiateOriginTls: plaintext or TLS, as the sslmode allowed.
using OriginStream = std::variant<asio::ip::tcp::socket, TlsStream>;

// Client side, all in one: given a freshly connected socket to a PostgreSQL
// server, does what context.mode() says. kDisable/kAllow: returns the socket
// untouched. kPrefer and stricter: RequestTls, then on 'S' the handshake
// (returns a TlsStream); on 'N', the plain socket for kPrefer, else
// FailedPrecondition "server does not support TLS". A failed handshake is an
// error in every mode (libpq's prefer would reconnect in plaintext; that is
// the caller's decision, on a new connection). `host` as for TlsStream::Client.
asio::awaitable<absl::StatusOr<OriginStream>> NegotiateOriginTls(asio::ip::tcp::socket socket,
                                                                 const ClientContext& context,
                                                                 std::string host);

// Server side: the caller has read an SSLRequest from an application and wants
// TLS. `bytes_after_request` is how many bytes it already holds beyond the
// 8-byte SSLRequest: unless 0 it fails with PermissionDenied
// (CVE-2021-23214), before answering. Otherwise sends 'S' and performs the
// handshake. To refuse TLS, the caller writes 'N' itself.
asio::awaitable<absl::StatusOr<TlsStream>> AcceptTls(asio::ip::tcp::socket socket,
                                                     const ServerContext& context,
                                                     std::size_t bytes_after_request);

}  // namespace hyperpool::tls
