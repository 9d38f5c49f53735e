// The socket transport: links over TCP + TLS between a Client and an Endpoint
// on different machines (docs/architecture.md, "Socket transport").
//
// One TCP connection per link. Right after the TLS handshake the Client
// sends one fixed 40-byte proof frame:
//
//   "HPLINK/1" | HMAC-SHA-256(link secret, "hyperpool link v1\0" + binding)
//
// where `binding` is the tls-server-end-point hash of the Endpoint's
// certificate (RFC 5929; empty for a certificate that has none, such as
// Ed25519: both ends compute it from the same certificate). The secret never
// crosses the wire, and a proof seen by an Endpoint is worthless to one with
// another certificate. The Endpoint answers "HPOK" (or "HPNO" and closes);
// from then on the link's bytes flow unchanged in both directions.
//
// Links opened ahead ("pre-opened") have had their answer read already, so
// Open() only writes the hello and the buffered queries: no round trip. A
// link opened on demand sends its proof and its first bytes in one write and
// leaves the answer for the link's first Receive to strip.
//
// Threads: a link's operations run on the executor of the coroutine that
// calls them (the Client session's, the Endpoint's), completions included;
// its socket belongs to that executor's io_context, except for a link opened
// ahead on another worker's io_context and taken because the caller's own
// worker had none ready (its I/O readiness is then reported by that
// io_context's thread; correct, one more thread hop). Each io_context's
// ready links are kept by a Pool whose background work runs on a strand of
// it; Open() takes a link from it under a mutex (once per link, never per
// message).

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

namespace hyperpool {
namespace {

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

std::string Str(absl::string_view s) { return std::string(s.data(), s.size()); }

asio::execution_context* ContextOf(const asio::any_io_executor& executor) {
  return &asio::query(executor, asio::execution::context_as<asio::execution_context&>);
}

std::string LinkProof(std::string_view secret, std::string_view binding) {
  std::string data = "hyperpool link v1";
  data.push_back('\0');
  data.append(binding);
  return auth::internal::HmacSha256(secret, data);
}

std::string ProofFrame(std::string_view secret, std::string_view binding) {
  std::string frame(kProofMagic);
  frame += LinkProof(secret, binding);
  return frame;
}

std::string HostPort(const std::string& host, std::uint16_t port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

// Opens `socket` for `protocol` with close-on-exec set atomically: Asio
// opens sockets without it, and a child process (psql, an editor) would
// inherit the connection and keep it open.
template <typename Socket>
absl::Status OpenCloexec(Socket& socket, const tcp& protocol) {
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
void TuneSocket(tcp::socket& socket) {
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
bool LooksOpen(tcp::socket& socket) {
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

void HardClose(Conn& conn) {
  asio::error_code ec;
  conn.stream.socket().close(ec);
}

// After Close(): the FIN is sent, and the socket stays open reading and
// discarding until the peer closes too (or kLingerLimit passes). Closing a
// socket with unread input makes the kernel send a reset, and a reset can
// make the peer lose bytes it has not read yet, such as an ErrorResponse
// just before the close or a Terminate.
asio::awaitable<void> Linger(std::shared_ptr<Conn> conn) {
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
void CloseConn(const std::shared_ptr<Conn>& conn) {
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
struct Core {
  SocketTransportOptions options;
  std::string server_name;
  std::string where;  // "host:port", for messages
  std::optional<asio::ip::address> address;  // when host is an IP literal
  tls::ClientContext tls;
  std::atomic<bool> stopped{false};
  // 0 unknown, 1 reachable, 2 failing: for logging changes only.
  std::atomic<int> health{0};

  std::atomic<std::size_t> opened_preopened{0};
  std::atomic<std::size_t> opened_on_demand{0};
  std::atomic<std::size_t> open_failures{0};
  std::atomic<std::size_t> preopen_ready{0};
  std::atomic<std::size_t> preopen_failures{0};
  std::atomic<std::size_t> preopen_expired{0};
  std::atomic<std::size_t> preopen_dead{0};

  Core(SocketTransportOptions o, tls::ClientContext t) : options(std::move(o)), tls(std::move(t)) {}

  void Log(const std::string& line) const {
    if (options.log) options.log(line);
  }
  void NoteReachable() {
    if (health.exchange(1) == 2) Log(fmt::format("the hyperpool endpoint at {} accepts links again", where));
  }
  void NoteFailure(const absl::Status& status) {
    if (health.exchange(2) != 2) {
      Log(fmt::format("cannot open links ahead: {} (retrying in the background)", Str(status.message())));
    }
  }
};

// What a connection attempt's watchdog (or Stop) closes.
struct Attempt {
  tcp::resolver* resolver = nullptr;
  tcp::socket* socket = nullptr;
  std::shared_ptr<Conn> conn;
  bool expired = false;
  bool aborted = false;

  void Abort() {
    asio::error_code ec;
    if (resolver != nullptr) resolver->cancel();
    if (socket != nullptr) socket->close(ec);
    if (conn) HardClose(*conn);
  }
  void Forget() {
    resolver = nullptr;
    socket = nullptr;
    conn.reset();
  }
};

// TCP, TLS and the proof, within connect_timeout; the socket belongs to
// `socket_executor`'s io_context. With `first_bytes`, they are written
// together with the proof and the answer is left for the link's first
// Receive; without, the answer is read here. Runs on the caller's executor.
asio::awaitable<absl::StatusOr<std::shared_ptr<Conn>>> Connect(std::shared_ptr<Core> core,
                                                               asio::any_io_executor socket_executor,
                                                               std::shared_ptr<Attempt> attempt,
                                                               const std::string* first_bytes) {
  const SocketTransportOptions& options = core->options;
  auto fail = [&](absl::Status status) -> absl::Status {
    attempt->Forget();
    if (attempt->expired) {
      return absl::DeadlineExceededError(fmt::format("timed out after {} ms connecting to the hyperpool endpoint at {}",
                                                     options.connect_timeout.count(), core->where));
    }
    if (attempt->aborted) return absl::CancelledError("the link transport is stopped");
    return status;
  };
  Watchdog watchdog(co_await asio::this_coro::executor);
  watchdog.Arm(options.connect_timeout, [attempt] {
    attempt->expired = true;
    attempt->Abort();
  });

  std::vector<tcp::endpoint> endpoints;
  if (core->address) {
    endpoints.emplace_back(*core->address, options.port);
  } else {
    tcp::resolver resolver(co_await asio::this_coro::executor);
    attempt->resolver = &resolver;
    auto [ec, results] = co_await resolver.async_resolve(options.host, std::to_string(options.port), kAsTuple);
    attempt->resolver = nullptr;
    if (ec) {
      co_return fail(absl::UnavailableError(
          fmt::format("cannot resolve the hyperpool endpoint's host {}: {}", options.host, ec.message())));
    }
    for (const auto& entry : results) endpoints.push_back(entry.endpoint());
  }

  tcp::socket socket(socket_executor);
  attempt->socket = &socket;
  std::string last_error = "no address";
  bool connected = false;
  for (const tcp::endpoint& endpoint : endpoints) {
    if (attempt->expired || attempt->aborted) break;
    absl::Status opened = OpenCloexec(socket, endpoint.protocol());
    if (!opened.ok()) {
      last_error = Str(opened.message());
      continue;
    }
    auto [ec] = co_await socket.async_connect(endpoint, kAsTuple);
    if (!ec) {
      connected = true;
      break;
    }
    last_error = ec.message();
    asio::error_code ignored;
    socket.close(ignored);
  }
  attempt->socket = nullptr;
  if (!connected || attempt->expired || attempt->aborted) {
    co_return fail(absl::UnavailableError(
        fmt::format("cannot reach the hyperpool endpoint at {}: {}", core->where, last_error)));
  }
  TuneSocket(socket);

  absl::StatusOr<tls::TlsStream> stream = tls::TlsStream::Client(std::move(socket), core->tls, core->server_name);
  if (!stream.ok()) co_return fail(stream.status());
  auto conn = std::make_shared<Conn>(std::move(*stream));
  attempt->conn = conn;
  absl::Status handshake = co_await conn->stream.Handshake();
  if (!handshake.ok()) {
    absl::Status status(handshake.code(), fmt::format("TLS with the hyperpool endpoint at {} failed: {}",
                                                      core->where, Str(handshake.message())));
    co_return fail(status);
  }
  absl::StatusOr<std::string> binding = conn->stream.PeerEndPointHash();
  std::string out = ProofFrame(options.link_secret, binding.ok() ? *binding : std::string());
  if (first_bytes != nullptr) out.append(*first_bytes);
  absl::Status sent = co_await conn->stream.WriteAll(asio::buffer(out));
  if (!sent.ok()) {
    co_return fail(absl::UnavailableError(
        fmt::format("the hyperpool endpoint at {} closed the connection: {}", core->where, Str(sent.message()))));
  }
  if (first_bytes != nullptr) {
    conn->answer_pending = kAnswerSize;
  } else {
    std::array<char, kAnswerSize> answer;
    std::size_t have = 0;
    while (have < kAnswerSize) {
      absl::StatusOr<std::size_t> n = co_await conn->stream.ReadSome(asio::buffer(answer.data() + have, kAnswerSize - have));
      if (!n.ok() || *n == 0) break;
      have += *n;
    }
    const std::string_view got(answer.data(), have);
    if (got != kAccepted) {
      if (got == kRejected) {
        co_return fail(absl::PermissionDeniedError(
            fmt::format("the hyperpool endpoint at {} rejected the link secret", core->where)));
      }
      if (have == kAnswerSize) {
        co_return fail(absl::FailedPreconditionError(
            fmt::format("{} answered the link secret unexpectedly: not a hyperpool endpoint?", core->where)));
      }
      co_return fail(absl::UnavailableError(fmt::format(
          "the hyperpool endpoint at {} closed the connection before accepting the link secret", core->where)));
    }
  }
  watchdog.Disarm();
  attempt->Forget();
  if (attempt->expired || attempt->aborted) co_return fail(absl::CancelledError("connection aborted"));
  co_return conn;
}

// The links opened ahead for one io_context.
class Pool : public std::enable_shared_from_this<Pool> {
 public:
  Pool(std::shared_ptr<Core> core, asio::any_io_executor executor, std::size_t target)
      : core_(std::move(core)),
        context_(ContextOf(executor)),
        executor_(executor),
        strand_(asio::make_strand(executor)),
        target_(target),
        timer_(strand_) {}

  asio::execution_context* context() const { return context_; }
  std::size_t target() const { return target_; }

  void Start() {
    if (target_ > 0) asio::co_spawn(strand_, Fill(shared_from_this()), asio::detached);
  }

  // Takes the oldest ready link that still looks open, or nullptr. Any thread.
  std::shared_ptr<Conn> Take() {
    if (target_ == 0) return nullptr;
    std::shared_ptr<Conn> found;
    std::size_t discarded = 0;
    {
      std::lock_guard lock(mu_);
      const Clock::time_point now = Clock::now();
      while (!ready_.empty() && !found) {
        Ready entry = std::move(ready_.front());
        ready_.pop_front();
        core_->preopen_ready.fetch_sub(1);
        tcp::socket& socket = entry.conn->stream.socket();
        asio::error_code ec;
        socket.cancel(ec);  // ends the watch (see Watch)
        if (now - entry.since < core_->options.preopen_max_idle && LooksOpen(socket)) {
          found = std::move(entry.conn);
        } else {
          HardClose(*entry.conn);
          ++discarded;
        }
      }
    }
    if (discarded > 0) core_->preopen_dead.fetch_add(discarded);
    if (found || discarded > 0) asio::post(strand_, [self = shared_from_this()] { self->Wake(); });
    return found;
  }

  // Stops the background work and closes the ready links. Any thread.
  void Stop() {
    asio::post(strand_, [self = shared_from_this()] {
      {
        std::lock_guard lock(self->mu_);
        self->stopping_ = true;
        for (Ready& entry : self->ready_) {
          HardClose(*entry.conn);
          self->core_->preopen_ready.fetch_sub(1);
        }
        self->ready_.clear();
      }
      for (auto& attempt : self->attempts_) {
        attempt->aborted = true;
        attempt->Abort();
      }
      self->timer_.cancel();
    });
  }

 private:
  struct Ready {
    std::uint64_t id;
    std::shared_ptr<Conn> conn;
    Clock::time_point since;
  };

  // Strand: wakes Fill.
  void Wake() { timer_.cancel(); }

  bool Stopping() {
    std::lock_guard lock(mu_);
    return stopping_ || core_->stopped.load();
  }

  // Strand: keeps `target_` links ready (connecting or waiting), replaces
  // ready links older than preopen_max_idle, backs off while failing.
  static asio::awaitable<void> Fill(std::shared_ptr<Pool> self) {
    for (;;) {
      if (self->Stopping()) co_return;
      const Clock::time_point now = Clock::now();
      std::vector<std::shared_ptr<Conn>> expired;
      std::size_t ready = 0;
      Clock::time_point wake = Clock::time_point::max();
      {
        std::lock_guard lock(self->mu_);
        while (!self->ready_.empty() && now - self->ready_.front().since >= self->core_->options.preopen_max_idle) {
          expired.push_back(std::move(self->ready_.front().conn));
          self->ready_.pop_front();
          self->core_->preopen_ready.fetch_sub(1);
        }
        ready = self->ready_.size();
        if (!self->ready_.empty()) wake = self->ready_.front().since + self->core_->options.preopen_max_idle;
      }
      for (auto& conn : expired) {
        // The Endpoint reads its end of stream and closes quietly.
        asio::error_code ec;
        conn->stream.socket().cancel(ec);
        conn->stream.socket().shutdown(tcp::socket::shutdown_both, ec);
        HardClose(*conn);
      }
      self->core_->preopen_expired.fetch_add(expired.size());
      if (ready + self->connecting_ < self->target_) {
        if (now >= self->retry_at_) {
          const std::size_t n = self->target_ - ready - self->connecting_;
          for (std::size_t i = 0; i < n; ++i) {
            ++self->connecting_;
            asio::co_spawn(self->strand_, PreOpen(self), asio::detached);
          }
        } else {
          wake = std::min(wake, self->retry_at_);
        }
      }
      self->timer_.expires_at(wake);
      (void)co_await self->timer_.async_wait(kAsTuple);
    }
  }

  // Strand: opens one link ahead.
  static asio::awaitable<void> PreOpen(std::shared_ptr<Pool> self) {
    auto attempt = std::make_shared<Attempt>();
    self->attempts_.push_back(attempt);
    absl::StatusOr<std::shared_ptr<Conn>> conn = co_await Connect(self->core_, self->executor_, attempt, nullptr);
    std::erase(self->attempts_, attempt);
    --self->connecting_;
    if (conn.ok()) {
      self->failures_ = 0;
      self->retry_at_ = Clock::time_point();
      self->core_->NoteReachable();
      self->AddReady(std::move(*conn));
    } else if (!self->Stopping()) {
      self->core_->preopen_failures.fetch_add(1);
      self->core_->NoteFailure(conn.status());
      ++self->failures_;
      auto delay = kRetryMin * (1 << std::min(self->failures_ - 1, 10));
      self->retry_at_ = Clock::now() + std::min<std::chrono::milliseconds>(delay, kRetryMax);
    }
    self->Wake();
  }

  // Strand: adds a link to the ready list and watches it.
  void AddReady(std::shared_ptr<Conn> conn) {
    std::lock_guard lock(mu_);
    if (stopping_ || core_->stopped.load()) {
      HardClose(*conn);
      return;
    }
    const std::uint64_t id = ++next_id_;
    ready_.push_back({id, conn, Clock::now()});
    core_->preopen_ready.fetch_add(1);
    Watch(*conn, id);
  }

  // Under mu_: waits for the link to become readable, which (the Endpoint
  // saying nothing first) means the Endpoint closed it: it is then replaced
  // at once instead of being handed to a session. A wait reads nothing, so
  // the TLS stream is untouched; Take cancels it.
  void Watch(Conn& conn, std::uint64_t id) {
    conn.stream.socket().async_wait(
        tcp::socket::wait_read,
        asio::bind_executor(strand_, [weak = weak_from_this(), id](asio::error_code ec) {
          if (ec) return;  // taken or stopped
          if (auto self = weak.lock()) self->OnReadable(id);
        }));
  }

  void OnReadable(std::uint64_t id) {
    std::shared_ptr<Conn> dead;
    {
      std::lock_guard lock(mu_);
      auto it = std::find_if(ready_.begin(), ready_.end(), [id](const Ready& r) { return r.id == id; });
      if (it == ready_.end()) return;
      dead = std::move(it->conn);
      ready_.erase(it);
      core_->preopen_ready.fetch_sub(1);
    }
    HardClose(*dead);
    core_->preopen_dead.fetch_add(1);
    Wake();
  }

  std::shared_ptr<Core> core_;
  asio::execution_context* context_;
  asio::any_io_executor executor_;  // the io_context's, for the sockets
  asio::strand<asio::any_io_executor> strand_;
  const std::size_t target_;

  std::mutex mu_;  // ready_, stopping_: Take runs on any thread
  std::deque<Ready> ready_;  // oldest first
  bool stopping_ = false;

  // Strand only.
  asio::steady_timer timer_;
  std::size_t connecting_ = 0;
  int failures_ = 0;
  Clock::time_point retry_at_{};
  std::vector<std::shared_ptr<Attempt>> attempts_;
  std::uint64_t next_id_ = 0;
};

class SocketTransportImpl final : public SocketTransport {
 public:
  SocketTransportImpl(std::shared_ptr<Core> core, std::vector<std::shared_ptr<Pool>> pools)
      : core_(std::move(core)), pools_(std::move(pools)) {}
  ~SocketTransportImpl() override { Stop(); }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Link>>> Open(asio::any_io_executor executor,
                                                               std::string initial_bytes) override {
    std::shared_ptr<Core> core = core_;
    if (core->stopped.load()) co_return absl::UnavailableError("the link transport is stopped");
    std::shared_ptr<Conn> conn = TakeReady(executor);
    if (conn) {
      absl::Status sent = co_await conn->stream.WriteAll(asio::buffer(initial_bytes));
      if (sent.ok()) {
        core->opened_preopened.fetch_add(1);
        co_return std::unique_ptr<Link>(std::make_unique<SocketLink>(std::move(conn)));
      }
      // Broke since it was checked: connect afresh instead.
      HardClose(*conn);
      core->preopen_dead.fetch_add(1);
    }
    auto attempt = std::make_shared<Attempt>();
    absl::StatusOr<std::shared_ptr<Conn>> opened = co_await Connect(core, executor, attempt, &initial_bytes);
    if (!opened.ok()) {
      core->open_failures.fetch_add(1);
      co_return opened.status();
    }
    core->opened_on_demand.fetch_add(1);
    co_return std::unique_ptr<Link>(std::make_unique<SocketLink>(std::move(*opened)));
  }

  void Stop() override {
    if (core_->stopped.exchange(true)) return;
    for (auto& pool : pools_) pool->Stop();
  }

  SocketTransportStats Stats() const override {
    SocketTransportStats s;
    s.opened_preopened = core_->opened_preopened.load();
    s.opened_on_demand = core_->opened_on_demand.load();
    s.open_failures = core_->open_failures.load();
    s.preopen_ready = core_->preopen_ready.load();
    s.preopen_failures = core_->preopen_failures.load();
    s.preopen_expired = core_->preopen_expired.load();
    s.preopen_dead = core_->preopen_dead.load();
    return s;
  }

 private:
  // A ready link of the caller's own io_context if there is one (its I/O then
  // stays on the caller's thread), else one of another's.
  std::shared_ptr<Conn> TakeReady(const asio::any_io_executor& executor) {
    asio::execution_context* context = ContextOf(executor);
    for (auto& pool : pools_) {
      if (pool->context() == context) {
        if (auto conn = pool->Take()) return conn;
      }
    }
    for (auto& pool : pools_) {
      if (pool->context() != context) {
        if (auto conn = pool->Take()) return conn;
      }
    }
    return nullptr;
  }

  std::shared_ptr<Core> core_;
  std::vector<std::shared_ptr<Pool>> pools_;
};

// ============================ Endpoint side ============================

struct ListenerCore {
  ListenerCore(asio::any_io_executor ex, LinkAcceptor& a, LinkListenerOptions o, tls::ServerContext t)
      : executor(ex), acceptor(ex), link_acceptor(a), options(std::move(o)), tls(std::move(t)), retry_timer(ex) {}

  asio::any_io_executor executor;
  tcp::acceptor acceptor;
  LinkAcceptor& link_acceptor;
  const LinkListenerOptions options;
  tls::ServerContext tls;
  std::string expected_proof;
  std::uint16_t port = 0;
  tcp protocol = tcp::v4();
  std::atomic<bool> stopped{false};

  // Executor only.
  asio::steady_timer retry_timer;
  std::unordered_map<Conn*, std::weak_ptr<Conn>> live;  // not handed over yet
  std::size_t handshaking = 0;
  Clock::time_point last_log{};
  std::size_t suppressed_logs = 0;

  std::atomic<std::size_t> accepted{0};
  std::atomic<std::size_t> pending{0};
  std::atomic<std::size_t> tls_failures{0};
  std::atomic<std::size_t> rejected{0};
  std::atomic<std::size_t> timeouts{0};
  std::atomic<std::size_t> idle_closed{0};
  std::atomic<std::size_t> refused{0};

  // Executor: at most about one line a second, so that a flood of bad peers
  // cannot flood the log.
  void Log(std::string line) {
    if (!options.log) return;
    const Clock::time_point now = Clock::now();
    if (now - last_log < std::chrono::seconds(1)) {
      ++suppressed_logs;
      return;
    }
    if (suppressed_logs > 0) line += fmt::format(" ({} similar lines suppressed)", suppressed_logs);
    suppressed_logs = 0;
    last_log = now;
    options.log(line);
  }
};

std::string PeerName(tcp::socket& socket) {
  asio::error_code ec;
  tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return "an unknown peer";
  return HostPort(peer.address().to_string(), peer.port());
}

// One accepted connection: TLS, proof, first bytes, then the acceptor.
asio::awaitable<void> Serve(std::shared_ptr<ListenerCore> self, std::shared_ptr<Conn> conn) {
  const LinkListenerOptions& options = self->options;
  const std::string peer = PeerName(conn->stream.socket());
  Watchdog watchdog(self->executor);
  watchdog.Arm(options.handshake_timeout, [conn] { HardClose(*conn); });
  bool authenticated = false;
  // Leaves the bookkeeping right on every path out.
  struct Exit {
    ListenerCore& core;
    Conn* conn;
    bool& authenticated;
    ~Exit() {
      core.live.erase(conn);
      core.pending.fetch_sub(1);
      if (!authenticated) --core.handshaking;
    }
  } exit{*self, conn.get(), authenticated};

  absl::Status handshake = co_await conn->stream.Handshake();
  if (!handshake.ok()) {
    if (watchdog.fired()) {
      self->timeouts.fetch_add(1);
    } else {
      self->tls_failures.fetch_add(1);
    }
    HardClose(*conn);
    co_return;
  }

  // The proof frame: fixed size, read with a bounded buffer; extra bytes are
  // the link's first bytes (a link opened on demand sends both at once).
  std::string in;
  while (in.size() < kProofFrameSize) {
    const std::size_t old = in.size();
    in.resize(old + kReadChunk);
    absl::StatusOr<std::size_t> n = co_await conn->stream.ReadSome(asio::buffer(in.data() + old, kReadChunk));
    in.resize(old + (n.ok() ? *n : 0));
    const std::size_t check = std::min(in.size(), kProofMagic.size());
    if (std::string_view(in).substr(0, check) != kProofMagic.substr(0, check)) {
      self->rejected.fetch_add(1);
      self->Log(fmt::format("closed a link from {}: not a hyperpool link (bad proof frame)", peer));
      HardClose(*conn);
      co_return;
    }
    if (!n.ok() || *n == 0) {
      if (watchdog.fired()) self->timeouts.fetch_add(1);
      HardClose(*conn);
      co_return;
    }
  }
  const std::string_view proof = std::string_view(in).substr(kProofMagic.size(), kProofSize);
  if (!auth::ConstantTimeEquals(proof, self->expected_proof)) {
    self->rejected.fetch_add(1);
    self->Log(fmt::format("rejected a link from {}: wrong link secret", peer));
    (void)co_await conn->stream.WriteAll(asio::buffer(kRejected));
    watchdog.Disarm();
    CloseConn(conn);
    co_return;
  }
  absl::Status answered = co_await conn->stream.WriteAll(asio::buffer(kAccepted));
  if (!answered.ok()) {
    HardClose(*conn);
    co_return;
  }
  authenticated = true;
  --self->handshaking;
  conn->pending = in.substr(kProofFrameSize);

  if (conn->pending.empty()) {
    // A link opened ahead: it waits here until the Client uses it.
    watchdog.Arm(options.first_bytes_timeout, [conn] { HardClose(*conn); });
    conn->pending.resize(kReadChunk);
    absl::StatusOr<std::size_t> n = co_await conn->stream.ReadSome(asio::buffer(conn->pending));
    conn->pending.resize(n.ok() ? *n : 0);
    if (conn->pending.empty()) {
      // The Client closed a link it no longer needed, or it stayed silent.
      if (watchdog.fired()) self->idle_closed.fetch_add(1);
      CloseConn(conn);
      co_return;
    }
  }
  watchdog.Disarm();
  if (self->stopped.load()) {
    HardClose(*conn);
    co_return;
  }
  self->accepted.fetch_add(1);
  self->link_acceptor.Accept(std::make_unique<SocketLink>(conn));
}

asio::awaitable<void> AcceptLoop(std::shared_ptr<ListenerCore> self) {
  for (;;) {
    auto [ec] = co_await self->acceptor.async_wait(tcp::acceptor::wait_read, kAsTuple);
    if (self->stopped.load() || !self->acceptor.is_open()) co_return;
    if (ec) {
      // Not expected from a listening socket; pause rather than spin.
      self->retry_timer.expires_after(std::chrono::milliseconds(100));
      (void)co_await self->retry_timer.async_wait(kAsTuple);
      continue;
    }
    for (;;) {
      // accept4: the connection gets close-on-exec atomically (see OpenCloexec).
      int fd = ::accept4(self->acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors or memory: pause instead of spinning.
          self->Log(fmt::format("cannot accept links: {}", std::strerror(errno)));
          self->retry_timer.expires_after(std::chrono::milliseconds(100));
          (void)co_await self->retry_timer.async_wait(kAsTuple);
        }
        break;  // EAGAIN: all accepted
      }
      if (self->handshaking >= self->options.max_handshakes) {
        ::close(fd);
        self->refused.fetch_add(1);
        continue;
      }
      tcp::socket socket(self->executor);
      asio::error_code assign_ec;
      socket.assign(self->protocol, fd, assign_ec);
      if (assign_ec) {
        ::close(fd);
        continue;
      }
      TuneSocket(socket);
      absl::StatusOr<tls::TlsStream> stream = tls::TlsStream::Server(std::move(socket), self->tls);
      if (!stream.ok()) continue;
      auto conn = std::make_shared<Conn>(std::move(*stream));
      self->live.emplace(conn.get(), conn);
      ++self->handshaking;
      self->pending.fetch_add(1);
      asio::co_spawn(self->executor, Serve(self, std::move(conn)), asio::detached);
    }
  }
}

class LinkListenerImpl final : public LinkListener {
 public:
  explicit LinkListenerImpl(std::shared_ptr<ListenerCore> core) : core_(std::move(core)) {}
  ~LinkListenerImpl() override { Stop(); }

  std::uint16_t port() const override { return core_->port; }

  void Stop() override {
    if (core_->stopped.exchange(true)) return;
    asio::post(core_->executor, [self = core_] {
      asio::error_code ec;
      self->acceptor.close(ec);
      self->retry_timer.cancel();
      for (auto& [ptr, weak] : self->live) {
        if (auto conn = weak.lock()) HardClose(*conn);
      }
    });
  }

  LinkListenerStats Stats() const override {
    LinkListenerStats s;
    s.accepted = core_->accepted.load();
    s.pending = core_->pending.load();
    s.tls_failures = core_->tls_failures.load();
    s.rejected = core_->rejected.load();
    s.timeouts = core_->timeouts.load();
    s.idle_closed = core_->idle_closed.load();
    s.refused = core_->refused.load();
    return s;
  }

 private:
  std::shared_ptr<ListenerCore> core_;
};

// The binding both ends mix into the proof: the tls-server-end-point hash of
// the Endpoint's certificate, or nothing for a certificate without one.
std::string ServerBinding(const std::string& cert_file) {
  absl::StatusOr<std::string> der = tls::ReadPemCertificateAsDer(cert_file);
  if (!der.ok()) return {};
  absl::StatusOr<std::string> hash = tls::TlsServerEndPointHash(*der);
  return hash.ok() ? *hash : std::string();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SocketTransport>> MakeSocketTransport(std::vector<asio::any_io_executor> executors,
                                                                     SocketTransportOptions options) {
  if (executors.empty()) return absl::InvalidArgumentError("socket transport: no executors");
  if (options.host.empty()) return absl::InvalidArgumentError("socket transport: the endpoint's host is empty");
  if (options.port == 0) return absl::InvalidArgumentError("socket transport: the endpoint's port is 0");
  if (options.tls_ca_file.empty()) {
    return absl::InvalidArgumentError("socket transport: a CA file to verify the endpoint's certificate is required");
  }
  if (options.link_secret.size() < kMinSecretBytes) {
    return absl::InvalidArgumentError(
        fmt::format("socket transport: the link secret must be at least {} bytes", kMinSecretBytes));
  }
  if (options.connect_timeout <= std::chrono::milliseconds(0) ||
      options.preopen_max_idle <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError("socket transport: timeouts must be positive");
  }
  std::string host = options.host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  options.host = host;
  std::string server_name = options.tls_server_name.empty() ? host : options.tls_server_name;

  tls::ClientOptions tls_options;
  tls_options.mode = tls::SslMode::kVerifyFull;
  tls_options.root_cert_file = options.tls_ca_file;
  absl::StatusOr<tls::ClientContext> tls = tls::ClientContext::Create(tls_options);
  if (!tls.ok()) return tls.status();

  auto core = std::make_shared<Core>(std::move(options), *std::move(tls));
  core->server_name = std::move(server_name);
  core->where = HostPort(host, core->options.port);
  asio::error_code not_ip;
  asio::ip::address address = asio::ip::make_address(host, not_ip);
  if (!not_ip) core->address = address;

  // One pool per distinct io_context, sharing out `preopen`.
  std::vector<asio::any_io_executor> distinct;
  for (const auto& ex : executors) {
    asio::execution_context* context = ContextOf(ex);
    bool seen = std::any_of(distinct.begin(), distinct.end(), [&](const asio::any_io_executor& d) {
      return ContextOf(d) == context;
    });
    if (!seen) distinct.push_back(ex);
  }
  std::vector<std::shared_ptr<Pool>> pools;
  const std::size_t n = distinct.size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t target = core->options.preopen / n + (i < core->options.preopen % n ? 1 : 0);
    pools.push_back(std::make_shared<Pool>(core, distinct[i], target));
  }
  for (auto& pool : pools) pool->Start();
  return std::unique_ptr<SocketTransport>(std::make_unique<SocketTransportImpl>(std::move(core), std::move(pools)));
}

absl::StatusOr<std::unique_ptr<LinkListener>> MakeLinkListener(asio::any_io_executor executor, LinkAcceptor& acceptor,
                                                               LinkListenerOptions options) {
  if (options.link_secret.size() < kMinSecretBytes) {
    return absl::InvalidArgumentError(
        fmt::format("link listener: the link secret must be at least {} bytes", kMinSecretBytes));
  }
  if (options.handshake_timeout <= std::chrono::milliseconds(0) ||
      options.first_bytes_timeout <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError("link listener: timeouts must be positive");
  }
  if (options.max_handshakes == 0) return absl::InvalidArgumentError("link listener: max_handshakes must be positive");
  tls::ServerOptions tls_options;
  tls_options.cert_file = options.tls_cert_file;
  tls_options.key_file = options.tls_key_file;
  absl::StatusOr<tls::ServerContext> tls = tls::ServerContext::Create(tls_options);
  if (!tls.ok()) return tls.status();

  std::string host = options.host.empty() ? std::string("127.0.0.1") : options.host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  asio::error_code ec;
  asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec) return absl::InvalidArgumentError(fmt::format("link listener: '{}' is not an IP address", host));
  const tcp::endpoint endpoint(address, options.port);
  const std::string binding = ServerBinding(options.tls_cert_file);
  const std::string secret = options.link_secret;

  auto core = std::make_shared<ListenerCore>(executor, acceptor, std::move(options), *std::move(tls));
  core->expected_proof = LinkProof(secret, binding);
  if (absl::Status opened = OpenCloexec(core->acceptor, endpoint.protocol()); !opened.ok()) return opened;
  core->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  core->acceptor.bind(endpoint, ec);
  if (ec) {
    return absl::UnavailableError(
        fmt::format("cannot listen for links on {}: {}", HostPort(host, endpoint.port()), ec.message()));
  }
  core->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) core->acceptor.native_non_blocking(true, ec);
  if (ec) {
    return absl::UnavailableError(
        fmt::format("cannot listen for links on {}: {}", HostPort(host, endpoint.port()), ec.message()));
  }
  core->port = core->acceptor.local_endpoint(ec).port();
  core->protocol = endpoint.protocol();
  asio::co_spawn(executor, AcceptLoop(core), asio::detached);
  return std::unique_ptr<LinkListener>(std::make_unique<LinkListenerImpl>(std::move(core)));
}

}  // namespace hyperpool
