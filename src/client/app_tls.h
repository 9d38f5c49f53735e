// TLS towards applications (ClientOptions::ssl_cert_file): after the
// session's ServerHandshake answered an SSLRequest with 'S', the session
// hands its socket here and gets back a plaintext socket that carries the
// same conversation decrypted.
//
// Why a relay rather than a TLS stream inside the session: the session's
// forwarding path (client.cc) reads and writes a tcp::socket in several
// places and is tuned for plaintext loopback, the default. TLS sessions
// (sidecars reached beyond loopback) pay one extra local hop, a Unix
// socketpair between this relay and the session; plaintext sessions pay
// nothing. Everything the session does (the login timeout, available(),
// shutdown and close) keeps working on the socket it gets back.
#ifndef HYPERPOOL_CLIENT_APP_TLS_H_
#define HYPERPOOL_CLIENT_APP_TLS_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>

#include "absl/status/statusor.h"
#include "tls/tls_context.h"

namespace hyperpool::client {

// The app's address as logs and messages show it: host "127.0.0.1", text
// "127.0.0.1:5555"; "[local]" for both on a Unix socket, as PostgreSQL.
struct Peer {
  std::string host;
  std::string text;
  bool unix_socket = false;
};
// From the address accept() returned (no getpeername); nullopt: a Unix socket.
Peer PeerAddress(const std::optional<asio::ip::tcp::endpoint>& remote);

// How the session stops a handshake in progress (its login timeout,
// Client::Stop): Abort() closes the socket under TLS. Use it on the
// session's executor; a no-op before and after the handshake.
class TlsAbort {
 public:
  void Abort() {
    if (abort_) abort_();
  }

 private:
  friend struct TlsAbortAccess;
  std::function<void()> abort_;
};

// Writes `answer` ("S") on `socket`, runs the TLS server handshake (until it
// ends or `abort` is used) and starts the relay. The returned socket is
// bound to `socket`'s executor; closing it ends the TLS connection (after a
// TCP FIN and up to 2 s of draining, so the app reads every byte written
// before). Errors: Unavailable (the app went away, the handshake failed
// with the library's reason, or it was aborted).
asio::awaitable<absl::StatusOr<asio::ip::tcp::socket>> AcceptAppTls(asio::ip::tcp::socket socket,
                                                                    const tls::ServerContext& context,
                                                                    std::string_view answer, TlsAbort& abort);

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_APP_TLS_H_
