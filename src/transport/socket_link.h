// Internals shared by the two halves of the socket transport:
// socket_transport.cc (the Client side: links opened ahead and on demand)
// and link_listener.cc (the Endpoint side: accepting links). The link
// format and threading are described at the top of socket_transport.cc.
// Not a public header.

#ifndef HYPERPOOL_TRANSPORT_SOCKET_LINK_H_
#define HYPERPOOL_TRANSPORT_SOCKET_LINK_H_


#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <asio/bind_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/execution/context_as.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/ip/address.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/query.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hyperpool/transport.h"
#include "protocol/auth/auth_util.h"
#include "protocol/auth/digest.h"
#include "tls/channel_binding.h"
#include "tls/tls_context.h"
#include "tls/tls_stream.h"

namespace hyperpool::socket_link {


using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

constexpr std::string_view kProofMagic = "HPLINK/1";
constexpr std::size_t kProofSize = 32;  // HMAC-SHA-256
constexpr std::size_t kProofFrameSize = kProofMagic.size() + kProofSize;
constexpr std::string_view kAccepted = "HPOK";
constexpr std::string_view kRejected = "HPNO";
constexpr std::size_t kAnswerSize = 4;
constexpr std::size_t kMinSecretBytes = 16;
// A TLS record carries at most 16 KiB of plaintext, and one read returns at
// most one record's worth.
constexpr std::size_t kReadChunk = 16 * 1024;
// How long a closed link keeps reading (and discarding) before it closes its
// socket, so that its last bytes are not destroyed by a TCP reset (see Linger).
constexpr std::chrono::seconds kLingerLimit{2};
// Retry delays of the background opener while the Endpoint is unreachable.
constexpr std::chrono::milliseconds kRetryMin{50};
constexpr std::chrono::milliseconds kRetryMax{2000};
// TCP keepalive on links, so that a link to a vanished machine fails within
// about a minute even when idle.
constexpr int kKeepIdleSeconds = 30;
constexpr int kKeepIntervalSeconds = 10;
constexpr int kKeepCount = 3;

inline std::string Str(absl::string_view s) { return std::string(s.data(), s.size()); }

inline asio::execution_context* ContextOf(const asio::any_io_executor& executor) {
  return &asio::query(executor, asio::execution::context_as<asio::execution_context&>);
}

inline std::string LinkProof(std::string_view secret, std::string_view binding) {
  std::string data = "hyperpool link v1";
  data.push_back('\0');
  data.append(binding);
  return auth::internal::HmacSha256(secret, data);
}

inline std::string ProofFrame(std::string_view secret, std::string_view binding) {
  std::string frame(kProofMagic);
  frame += LinkProof(secret, binding);
  return frame;
}

inline std::string HostPort(const std::string& host, std::uint16_t port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

// Opens `socket` for `protocol` with close-on-exec set atomically: Asio
// opens sockets without it, and a child process (psql, an editor) would
// inherit the connection and keep it open.
template <typename Socket>
inline absl::Status OpenCloexec(Socket& socket, const tcp& protocol) {
  int fd = ::socket(protocol.family(), SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
  if (fd < 0) return absl::UnavailableError(fmt::format("socket() failed: {}", std::strerror(errno)));
  asio::error_code ec;
  socket.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    return absl::UnavailableError(fmt::format("cannot use socket: {}", ec.message()));
  }
  return absl::OkStatus();
}

// Links carry small request/response messages: no Nagle delay. Keepalive
// notices a peer whose machine vanished while the link is idle.
inline void TuneSocket(tcp::socket& socket) {
  asio::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  socket.set_option(asio::socket_base::keep_alive(true), ec);
  const int fd = socket.native_handle();
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &kKeepIdleSeconds, sizeof kKeepIdleSeconds);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepIntervalSeconds, sizeof kKeepIntervalSeconds);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepCount, sizeof kKeepCount);
}

// Whether a link that should be silent still looks open: the Endpoint sends
// nothing before the Client's first bytes, so anything readable (its FIN, a
// reset, a TLS alert) means it closed the link.
inline bool LooksOpen(tcp::socket& socket) {
  if (!socket.is_open()) return false;
  char byte;
  ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// One TCP + TLS connection. Shared by its Link and the coroutines working on
// it, so that it outlives whichever finishes last.
struct Conn {
  explicit Conn(tls::TlsStream s) : stream(std::move(s)) {}
  tls::TlsStream stream;
  // Endpoint side: bytes that arrived with the proof or right after it,
  // returned by the link's first Receive.
  std::string pending;
  // Client side, link opened on demand: how much of the Endpoint's answer
  // to the proof has still to be stripped from what arrives, and its bytes.
  std::size_t answer_pending = 0;
  std::string answer;
  bool closed = false;       // Close() was called on this end
  bool peer_closed = false;  // the peer closed (or the connection broke)
};

inline void HardClose(Conn& conn) {
  asio::error_code ec;
  conn.stream.socket().close(ec);
}

// After Close(): the FIN is sent, and the socket stays open reading and
// discarding until the peer closes too (or kLingerLimit passes). Closing a
// socket with unread input makes the kernel send a reset, and a reset can
// make the peer lose bytes it has not read yet, such as an ErrorResponse
// just before the close or a Terminate.
inline asio::awaitable<void> Linger(std::shared_ptr<Conn> conn) {
  tcp::socket& socket = conn->stream.socket();
  asio::steady_timer limit(co_await asio::this_coro::executor, kLingerLimit);
  limit.async_wait([conn](asio::error_code ec) {
    if (!ec) HardClose(*conn);
  });
  std::array<char, 4096> discard;
  for (;;) {
    auto [ec, n] = co_await socket.async_read_some(asio::buffer(discard), kAsTuple);
    if (ec) break;
  }
  limit.cancel();
  HardClose(*conn);
}

// Closes this end: pending operations on it fail (cancelled), the peer's
// reads see the end of the stream after every byte already written. The
// linger runs on the socket's own io_context: a coroutine frame suspended on
// a socket's operation is owned by that socket's io_context, so it must hold
// no object of another one (which could be destroyed first).
inline void CloseConn(const std::shared_ptr<Conn>& conn) {
  if (conn->closed) return;
  conn->closed = true;
  tcp::socket& socket = conn->stream.socket();
  if (!socket.is_open()) return;
  asio::error_code ec;
  socket.cancel(ec);
  // TCP FIN without a TLS close_notify: a write may have been cancelled
  // halfway, and the link protocol is length-framed anyway (a link that ends
  // inside a message, or without Terminate, is a vanished peer).
  socket.shutdown(tcp::socket::shutdown_send, ec);
  if (conn->peer_closed) {
    HardClose(*conn);
    return;
  }
  asio::co_spawn(socket.get_executor(), Linger(conn), asio::detached);
}

class SocketLink final : public Link {
 public:
  explicit SocketLink(std::shared_ptr<Conn> conn) : conn_(std::move(conn)) {}
  ~SocketLink() override { Close(); }

  asio::awaitable<absl::Status> Send(std::string bytes) override {
    std::shared_ptr<Conn> conn = conn_;  // alive while we are suspended
    if (conn->closed) co_return absl::CancelledError("link closed");
    if (conn->peer_closed) co_return absl::UnavailableError("link closed by peer");
    if (bytes.empty()) co_return absl::OkStatus();
    absl::Status sent = co_await conn->stream.WriteAll(asio::buffer(bytes));
    if (conn->closed) co_return absl::CancelledError("link closed");
    if (!sent.ok()) {
      conn->peer_closed = true;
      co_return absl::UnavailableError(fmt::format("link broken: {}", Str(sent.message())));
    }
    co_return absl::OkStatus();
  }

  asio::awaitable<absl::StatusOr<std::size_t>> Receive(std::string& buffer) override {
    std::shared_ptr<Conn> conn = conn_;
    if (conn->closed) co_return absl::UnavailableError("link closed");
    if (!conn->pending.empty()) {
      const std::size_t n = conn->pending.size();
      buffer.append(conn->pending);
      std::string().swap(conn->pending);
      co_return n;
    }
    if (conn->peer_closed) co_return absl::UnavailableError("link closed by peer");
    for (;;) {
      const std::size_t old = buffer.size();
      buffer.resize(old + kReadChunk);
      absl::StatusOr<std::size_t> n = co_await conn->stream.ReadSome(asio::buffer(buffer.data() + old, kReadChunk));
      std::size_t got = n.ok() ? *n : 0;
      buffer.resize(old + got);
      if (got == 0) {
        if (conn->closed) co_return absl::UnavailableError("link closed");
        conn->peer_closed = true;
        if (!n.ok()) co_return absl::UnavailableError(fmt::format("link broken: {}", Str(n.status().message())));
        if (conn->answer_pending > 0) {
          co_return absl::PermissionDeniedError(
              "the hyperpool endpoint closed the link without accepting it (wrong link secret?)");
        }
        co_return absl::UnavailableError("link closed by peer");
      }
      if (conn->answer_pending == 0) co_return got;
      // A link opened on demand: its first bytes start with the answer to the proof.
      const std::size_t take = std::min(conn->answer_pending, got);
      conn->answer.append(buffer, old, take);
      buffer.erase(old, take);
      conn->answer_pending -= take;
      got -= take;
      if (conn->answer_pending == 0 && conn->answer != kAccepted) {
        buffer.resize(old);
        conn->peer_closed = true;
        if (conn->answer == kRejected) {
          co_return absl::PermissionDeniedError("the hyperpool endpoint rejected the link secret");
        }
        co_return absl::UnavailableError("unexpected answer to the link secret: not a hyperpool endpoint?");
      }
      if (got > 0) co_return got;
    }
  }

  void Close() override { CloseConn(conn_); }

 private:
  std::shared_ptr<Conn> conn_;
};

// Closes what it guards when a deadline passes (the Asio examples'
// watchdog): every operation pending on it then fails. Runs on the executor
// of the coroutine that owns it; re-arming or destroying it disarms it.
class Watchdog {
 public:
  explicit Watchdog(const asio::any_io_executor& executor) : timer_(executor) {}
  ~Watchdog() { Disarm(); }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Arm(std::chrono::milliseconds limit, std::function<void()> on_expiry) {
    Disarm();
    timer_.expires_after(limit);
    timer_.async_wait([state = state_, generation = state_->generation, on_expiry = std::move(on_expiry)](
                          asio::error_code ec) {
      // A handler already queued when the watchdog was re-armed is stale.
      if (ec || state->generation != generation) return;
      state->fired = true;
      on_expiry();
    });
  }
  void Disarm() {
    ++state_->generation;
    timer_.cancel();
  }
  bool fired() const { return state_->fired; }

 private:
  struct State {
    std::uint64_t generation = 0;
    bool fired = false;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
  asio::steady_timer timer_;
};

// ============================ Client side ============================

// Immutable configuration and counters shared by a transport's pools and
// coroutines.
}  // namespace hyperpool::socket_link

#endif  // HYPERPOOL_TRANSPORT_SOCKET_LINK_H_
