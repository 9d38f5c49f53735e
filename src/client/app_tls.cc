#include "client/app_tls.h"

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tls/tls_stream.h"

namespace hyperpool::client {
namespace {

using asio::ip::tcp;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);
constexpr size_t kRelayChunk = 16 * 1024;
// After the session closed: how long the app may take to close its side
// before the TCP socket is closed regardless (a close with unread bytes
// would send a reset that can destroy what the app has not read yet).
constexpr auto kDrainTimeout = std::chrono::seconds(2);

// The two ends of one relay: `tls` towards the app, `inner` towards the
// session. Owned by the two relay coroutines (shared_ptr).
struct Relay {
  Relay(tls::TlsStream tls_in, asio::any_io_executor executor)
      : tls(std::move(tls_in)), inner(executor), drain_timer(executor) {}

  void CloseAll() {
    closed = true;
    asio::error_code ec;
    inner.close(ec);
    tls.socket().close(ec);
    drain_timer.cancel();
  }

  tls::TlsStream tls;
  asio::local::stream_protocol::socket inner;
  asio::steady_timer drain_timer;
  bool closed = false;  // CloseAll() ran: nothing left to drain
};

// App -> session: decrypted bytes onto the socketpair. Ends when the app
// closes or fails; then the session reads EOF.
asio::awaitable<void> AppToSession(std::shared_ptr<Relay> relay) {
  std::array<char, kRelayChunk> buffer;
  bool session_open = true;
  for (;;) {
    absl::StatusOr<size_t> n = co_await relay->tls.ReadSome(asio::buffer(buffer));
    if (!n.ok() || *n == 0) break;
    if (!session_open) continue;  // draining after the session closed
    auto [ec, written] = co_await asio::async_write(relay->inner, asio::buffer(buffer.data(), *n), kAsTuple);
    if (ec) session_open = false;
  }
  relay->CloseAll();
}

// Session -> app: everything the session wrote, encrypted. When the session
// closes its end, the app gets a FIN and `kDrainTimeout` to close its side.
asio::awaitable<void> SessionToApp(std::shared_ptr<Relay> relay) {
  std::array<char, kRelayChunk> buffer;
  for (;;) {
    auto [ec, n] = co_await relay->inner.async_read_some(asio::buffer(buffer), kAsTuple);
    if (ec || n == 0) break;
    if (absl::Status s = co_await relay->tls.WriteAll(asio::buffer(buffer.data(), n)); !s.ok()) {
      relay->CloseAll();
      co_return;
    }
  }
  if (relay->closed) co_return;
  asio::error_code ignored;
  relay->tls.socket().shutdown(tcp::socket::shutdown_send, ignored);
  relay->drain_timer.expires_after(kDrainTimeout);
  auto [ec] = co_await relay->drain_timer.async_wait(kAsTuple);
  (void)ec;
  relay->CloseAll();
}

}  // namespace

struct TlsAbortAccess {
  static std::function<void()>& Of(TlsAbort& abort) { return abort.abort_; }
};

Peer PeerAddress(const std::optional<tcp::endpoint>& peer) {
  // A Unix-domain connection adopted by a tcp::socket has no IP peer.
  if (!peer || peer->port() == 0) return Peer{"[local]", "[local]", true};
  const tcp::endpoint& remote = *peer;
  asio::ip::address address = remote.address();
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    address = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
  }
  std::string host = address.to_string();
  std::string text = address.is_v6() ? absl::StrCat("[", host, "]:", remote.port()) : absl::StrCat(host, ":", remote.port());
  return Peer{std::move(host), std::move(text)};
}

asio::awaitable<absl::StatusOr<tcp::socket>> AcceptAppTls(tcp::socket socket, const tls::ServerContext& context,
                                                         std::string_view answer, TlsAbort& abort) {
  asio::any_io_executor executor = socket.get_executor();
  auto [wec, wn] = co_await asio::async_write(socket, asio::buffer(answer.data(), answer.size()), kAsTuple);
  if (wec) co_return absl::UnavailableError(absl::StrCat("answering SSLRequest: ", wec.message()));
  absl::StatusOr<tls::TlsStream> stream = tls::TlsStream::Server(std::move(socket), context);
  if (!stream.ok()) co_return stream.status();
  auto relay = std::make_shared<Relay>(*std::move(stream), executor);

  // The session's socket_ is not this one during the handshake: its login
  // watchdog and Stop() reach it through `abort`.
  bool aborted = false;
  TlsAbortAccess::Of(abort) = [raw = relay.get(), &aborted] {
    aborted = true;
    asio::error_code ignored;
    raw->tls.socket().close(ignored);
  };
  absl::Status handshake = co_await relay->tls.Handshake();
  TlsAbortAccess::Of(abort) = nullptr;
  if (aborted) co_return absl::UnavailableError("TLS handshake aborted (login timeout or shutdown)");
  if (!handshake.ok()) co_return absl::UnavailableError(handshake.message());

  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    co_return absl::UnavailableError("socketpair failed");
  }
  asio::error_code ec;
  relay->inner.assign(asio::local::stream_protocol(), fds[0], ec);
  if (ec) {
    ::close(fds[0]);
    ::close(fds[1]);
    co_return absl::UnavailableError(absl::StrCat("socketpair: ", ec.message()));
  }
  // Adopted by a tcp::socket as the Unix listener's connections are.
  tcp::socket session_side(executor);
  session_side.assign(tcp::v6(), fds[1], ec);
  if (ec) {
    ::close(fds[1]);
    co_return absl::UnavailableError(absl::StrCat("socketpair: ", ec.message()));
  }
  asio::co_spawn(executor, AppToSession(relay), asio::detached);
  asio::co_spawn(executor, SessionToApp(relay), asio::detached);
  co_return std::move(session_side);
}

}  // namespace hyperpool::client
