// The WAN delay line: one coroutine per direction and role (reader, writer)
// per connection, all on that connection's strand. See wan_proxy.h for the model.
#include "wan/wan_proxy.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/connect.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>

#include "absl/status/status.h"

namespace hyperpool::wan {
namespace {

using Clock = std::chrono::steady_clock;
using tcp = asio::ip::tcp;
using Strand = asio::strand<asio::io_context::executor_type>;

constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);
// One read: large enough for bulk transfers, copied into a right-sized chunk.
constexpr std::size_t kReadSize = 64 * 1024;
// Bookkeeping charged per queued chunk, so that a flood of one-byte chunks is
// bounded by max_queued_bytes too.
constexpr std::size_t kChunkOverhead = 64;
// Most chunks gathered into one write.
constexpr std::size_t kMaxGather = 64;

void RaiseMax(std::atomic<std::size_t>& peak, std::size_t value) {
  std::size_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

std::string FormatEndpoint(const tcp::endpoint& ep) {
  const std::string host = ep.address().to_string();
  return ep.address().is_v6() ? fmt::format("[{}]:{}", host, ep.port()) : fmt::format("{}:{}", host, ep.port());
}

struct Counters {
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> open{0};
  std::atomic<uint64_t> client_to_target{0};
  std::atomic<uint64_t> target_to_client{0};
  std::atomic<std::size_t> peak_queued{0};
};

// Bytes read from one side, or (with `end` set) the end of that side's stream,
// and the time point at which they may be written to the other side.
struct Chunk {
  enum class End { kNone, kEof, kReset };
  Clock::time_point release;
  std::vector<char> data;
  End end = End::kNone;
};

// One direction of a relayed connection: a FIFO filled by the reader and
// drained by the writer.
struct Direction {
  Direction(const Strand& strand, std::atomic<uint64_t>& written)
      : writer_timer(strand), reader_timer(strand), bytes_written(written) {}

  std::deque<Chunk> queue;
  std::size_t queued_bytes = 0;       // Payload plus kChunkOverhead per chunk.
  asio::steady_timer writer_timer;    // Release-time wait, or idle wait (cancel() wakes).
  bool writer_idle = false;           // The writer waits for a chunk: wake it on push.
  asio::steady_timer reader_timer;    // Back-pressure wait (cancel() wakes).
  bool writer_failed = false;         // The far side is gone: drop what is read.
  std::vector<asio::const_buffer> gather;  // Reused by the writer.
  std::atomic<uint64_t>& bytes_written;
};

}  // namespace

class Session;

class WanProxy::Impl : public std::enable_shared_from_this<WanProxy::Impl> {
 public:
  Impl(asio::io_context& io, WanOptions options)
      : io_(io), options_(std::move(options)), acceptor_strand_(asio::make_strand(io)),
        acceptor_(acceptor_strand_) {}

  absl::Status Listen();
  void Start();
  void Stop();

  // Session registry, so that Stop() can close live connections.
  bool Register(const std::shared_ptr<Session>& session);
  void Deregister(Session* session);

  asio::io_context& io() { return io_; }
  const WanOptions& options() const { return options_; }
  const std::vector<tcp::endpoint>& targets() const { return targets_; }
  Counters& counters() { return counters_; }
  uint16_t port() const { return port_; }
  const std::string& address() const { return address_; }

 private:
  static asio::awaitable<void> AcceptLoop(std::shared_ptr<Impl> self);

  asio::io_context& io_;
  const WanOptions options_;
  Strand acceptor_strand_;
  tcp::acceptor acceptor_;
  std::vector<tcp::endpoint> targets_;
  uint16_t port_ = 0;
  std::string address_;
  Counters counters_;

  std::mutex mu_;  // Guards the two below; taken per connection, never per chunk.
  bool stopped_ = false;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions_;
};

// One relayed connection: client <-> proxy <-> target.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<WanProxy::Impl> proxy, const Strand& strand, tcp::socket client,
          Clock::time_point accepted)
      : proxy_(std::move(proxy)), strand_(strand), client_(std::move(client)), target_(strand),
        hold_timer_(strand), half_rtt_(proxy_->options().rtt / 2),
        open_time_(accepted + proxy_->options().rtt),
        max_queued_(proxy_->options().max_queued_bytes),
        to_target_(strand, proxy_->counters().client_to_target),
        to_client_(strand, proxy_->counters().target_to_client) {}

  const Strand& strand() const { return strand_; }

  // Holds the connection one RTT, connects to the target and starts relaying.
  static asio::awaitable<void> Run(std::shared_ptr<Session> self);

  // Closes both sockets and wakes every coroutine; queued data is dropped.
  // Runs on the strand; idempotent.
  void Close();

 private:
  static asio::awaitable<void> ReadLoop(std::shared_ptr<Session> self, tcp::socket& from, Direction& dir);
  static asio::awaitable<void> WriteLoop(std::shared_ptr<Session> self, tcp::socket& to, Direction& dir);

  void Push(Direction& dir, Chunk chunk);
  void WriterDone();

  std::shared_ptr<WanProxy::Impl> proxy_;
  Strand strand_;
  tcp::socket client_;
  tcp::socket target_;
  asio::steady_timer hold_timer_;
  const std::chrono::microseconds half_rtt_;
  const Clock::time_point open_time_;  // Accept time + RTT: when the simulated SYN-ACK is in.
  const std::size_t max_queued_;
  Direction to_target_;
  Direction to_client_;
  int writers_done_ = 0;  // Directions that delivered their EOF.
  bool closed_ = false;
};

asio::awaitable<void> Session::Run(std::shared_ptr<Session> self) {
  if (self->closed_) co_return;  // Stopped before it ran.
  asio::error_code ignored;
  self->client_.set_option(tcp::no_delay(true), ignored);
  // Buffer what the client sends while the connection is held.
  asio::co_spawn(self->strand_, ReadLoop(self, self->client_, self->to_target_), asio::detached);

  if (self->open_time_ > Clock::now()) {
    self->hold_timer_.expires_at(self->open_time_);
    co_await self->hold_timer_.async_wait(kAsTuple);
  }
  if (self->closed_) co_return;
  auto [ec, endpoint] = co_await asio::async_connect(self->target_, self->proxy_->targets(), kAsTuple);
  if (self->closed_) co_return;
  if (ec) {
    // The client cannot be told "refused" any more: it sees the connection close.
    self->Close();
    co_return;
  }
  self->target_.set_option(tcp::no_delay(true), ignored);
  asio::co_spawn(self->strand_, ReadLoop(self, self->target_, self->to_client_), asio::detached);
  asio::co_spawn(self->strand_, WriteLoop(self, self->target_, self->to_target_), asio::detached);
  asio::co_spawn(self->strand_, WriteLoop(self, self->client_, self->to_client_), asio::detached);
}

void Session::Push(Direction& dir, Chunk chunk) {
  dir.queued_bytes += chunk.data.size() + kChunkOverhead;
  RaiseMax(proxy_->counters().peak_queued, dir.queued_bytes);
  dir.queue.push_back(std::move(chunk));
  if (dir.writer_idle) dir.writer_timer.cancel();
}

asio::awaitable<void> Session::ReadLoop(std::shared_ptr<Session> self, tcp::socket& from, Direction& dir) {
  std::vector<char> scratch(kReadSize);
  for (;;) {
    while (dir.queued_bytes > self->max_queued_ && !self->closed_) {
      dir.reader_timer.expires_at(Clock::time_point::max());
      co_await dir.reader_timer.async_wait(kAsTuple);
    }
    if (self->closed_) co_return;
    auto [ec, n] = co_await from.async_read_some(asio::buffer(scratch), kAsTuple);
    // The arrival stamp; data that arrives before the open time is treated as
    // sent at the open time (the client's connect() could not have returned earlier).
    const Clock::time_point release = std::max(Clock::now(), self->open_time_) + self->half_rtt_;
    if (self->closed_) co_return;
    if (dir.writer_failed) {
      if (ec) co_return;
      continue;
    }
    if (n > 0) self->Push(dir, Chunk{release, std::vector<char>(scratch.data(), scratch.data() + n)});
    if (ec) {
      self->Push(dir, Chunk{release, {}, ec == asio::error::eof ? Chunk::End::kEof : Chunk::End::kReset});
      co_return;
    }
  }
}

asio::awaitable<void> Session::WriteLoop(std::shared_ptr<Session> self, tcp::socket& to, Direction& dir) {
  for (;;) {
    if (self->closed_) co_return;
    if (dir.queue.empty()) {
      dir.writer_idle = true;
      dir.writer_timer.expires_at(Clock::time_point::max());
      co_await dir.writer_timer.async_wait(kAsTuple);
      dir.writer_idle = false;
      continue;
    }
    Clock::time_point now = Clock::now();
    if (dir.queue.front().release > now) {
      // An absolute deadline: lateness of one wake-up is not carried into the next.
      dir.writer_timer.expires_at(dir.queue.front().release);
      co_await dir.writer_timer.async_wait(kAsTuple);
      continue;
    }
    // Everything due goes out in one gathered write.
    dir.gather.clear();
    std::size_t count = 0;
    std::size_t payload = 0;
    for (const Chunk& chunk : dir.queue) {
      if (chunk.end != Chunk::End::kNone || chunk.release > now || count == kMaxGather) break;
      dir.gather.emplace_back(asio::buffer(chunk.data));
      payload += chunk.data.size();
      ++count;
    }
    if (count > 0) {
      // References into the deque stay valid while the reader push_back()s.
      auto [ec, written] = co_await asio::async_write(to, dir.gather, kAsTuple);
      if (self->closed_) co_return;
      if (ec) {
        // The far side is gone: drop this direction; the other one may still
        // deliver what its peer sent before the connection winds down.
        dir.writer_failed = true;
        dir.queue.clear();
        dir.queued_bytes = 0;
        dir.reader_timer.cancel();
        self->WriterDone();
        co_return;
      }
      dir.bytes_written.fetch_add(payload, std::memory_order_relaxed);
      dir.queue.erase(dir.queue.begin(), dir.queue.begin() + static_cast<std::ptrdiff_t>(count));
      dir.queued_bytes -= payload + count * kChunkOverhead;
      if (dir.queued_bytes <= self->max_queued_) dir.reader_timer.cancel();
      continue;
    }
    // The front is the end of the stream, now due.
    if (dir.queue.front().end == Chunk::End::kReset) {
      self->Close();
      co_return;
    }
    asio::error_code ignored;
    to.shutdown(tcp::socket::shutdown_send, ignored);
    dir.queue.pop_front();
    dir.queued_bytes = 0;
    self->WriterDone();
    co_return;
  }
}

void Session::WriterDone() {
  if (++writers_done_ == 2) Close();
}

void Session::Close() {
  if (closed_) return;
  closed_ = true;
  asio::error_code ignored;
  client_.close(ignored);
  target_.close(ignored);
  hold_timer_.cancel();
  for (Direction* dir : {&to_target_, &to_client_}) {
    dir->writer_timer.cancel();
    dir->reader_timer.cancel();
    dir->queue.clear();
    dir->queued_bytes = 0;
  }
  proxy_->counters().open.fetch_sub(1, std::memory_order_relaxed);
  proxy_->Deregister(this);
}

absl::Status WanProxy::Impl::Listen() {
  asio::error_code ec;
  tcp::resolver resolver(io_);
  auto targets = resolver.resolve(options_.target_host, std::to_string(options_.target_port), ec);
  if (ec || targets.empty()) {
    return absl::InvalidArgumentError(fmt::format("wan: cannot resolve target {}:{}: {}", options_.target_host,
                                                  options_.target_port, ec.message()));
  }
  for (const auto& entry : targets) targets_.push_back(entry.endpoint());

  auto listen = resolver.resolve(options_.listen_host, std::to_string(options_.listen_port),
                                 tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || listen.empty()) {
    return absl::InvalidArgumentError(fmt::format("wan: cannot resolve listen address {}:{}: {}",
                                                  options_.listen_host, options_.listen_port, ec.message()));
  }
  const tcp::endpoint endpoint = listen.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  tcp::endpoint bound;
  if (!ec) bound = acceptor_.local_endpoint(ec);
  if (ec) {
    return absl::UnavailableError(
        fmt::format("wan: cannot listen on {}: {}", FormatEndpoint(endpoint), ec.message()));
  }
  port_ = bound.port();
  address_ = FormatEndpoint(bound);
  return absl::OkStatus();
}

void WanProxy::Impl::Start() {
  asio::co_spawn(acceptor_strand_, AcceptLoop(shared_from_this()), asio::detached);
}

asio::awaitable<void> WanProxy::Impl::AcceptLoop(std::shared_ptr<Impl> self) {
  for (;;) {
    Strand strand = asio::make_strand(self->io_);
    auto [ec, socket] = co_await self->acceptor_.async_accept(strand, kAsTuple);
    const Clock::time_point accepted = Clock::now();
    if (!self->acceptor_.is_open() || ec == asio::error::operation_aborted) co_return;
    if (ec) {
      // Out of descriptors or an aborted handshake: back off briefly, keep serving.
      asio::steady_timer backoff(self->acceptor_strand_, std::chrono::milliseconds(10));
      co_await backoff.async_wait(kAsTuple);
      continue;
    }
    self->counters_.accepted.fetch_add(1, std::memory_order_relaxed);
    self->counters_.open.fetch_add(1, std::memory_order_relaxed);
    auto session = std::make_shared<Session>(self, strand, tcp::socket(std::move(socket)), accepted);
    if (!self->Register(session)) {
      asio::post(strand, [session] { session->Close(); });
      co_return;
    }
    asio::co_spawn(strand, Session::Run(session), asio::detached);
  }
}

bool WanProxy::Impl::Register(const std::shared_ptr<Session>& session) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return false;
  sessions_.emplace(session.get(), session);
  return true;
}

void WanProxy::Impl::Deregister(Session* session) {
  std::lock_guard<std::mutex> lock(mu_);
  sessions_.erase(session);
}

void WanProxy::Impl::Stop() {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    for (auto& [key, weak] : sessions_) {
      if (auto session = weak.lock()) live.push_back(std::move(session));
    }
  }
  asio::post(acceptor_strand_, [self = shared_from_this()] {
    asio::error_code ignored;
    self->acceptor_.close(ignored);
  });
  for (auto& session : live) {
    asio::post(session->strand(), [session] { session->Close(); });
  }
}

// The io_context and thread of a proxy made by StartThread.
struct WanProxy::OwnThread {
  asio::io_context io{1};
  std::thread thread;
};

WanProxy::WanProxy(std::unique_ptr<OwnThread> own, std::shared_ptr<Impl> impl)
    : own_(std::move(own)), impl_(std::move(impl)) {}

WanProxy::~WanProxy() {
  Stop();
  // impl_ goes first: it owns an acceptor on own_->io.
  impl_.reset();
}

absl::StatusOr<std::unique_ptr<WanProxy>> WanProxy::Start(asio::io_context& io, WanOptions options) {
  auto impl = std::make_shared<Impl>(io, std::move(options));
  if (absl::Status status = impl->Listen(); !status.ok()) return status;
  impl->Start();
  return std::unique_ptr<WanProxy>(new WanProxy(nullptr, std::move(impl)));
}

absl::StatusOr<std::unique_ptr<WanProxy>> WanProxy::StartThread(WanOptions options) {
  auto own = std::make_unique<OwnThread>();
  auto impl = std::make_shared<Impl>(own->io, std::move(options));
  if (absl::Status status = impl->Listen(); !status.ok()) return status;
  impl->Start();
  own->thread = std::thread([io = &own->io] { io->run(); });
  return std::unique_ptr<WanProxy>(new WanProxy(std::move(own), std::move(impl)));
}

void WanProxy::Stop() {
  impl_->Stop();
  // Once the listener and every connection are closed the io_context runs out
  // of work and run() returns, so every coroutine frame is gone after the join.
  if (own_ && own_->thread.joinable() && own_->thread.get_id() != std::this_thread::get_id()) {
    own_->thread.join();
  }
}

uint16_t WanProxy::port() const { return impl_->port(); }

std::string WanProxy::listen_address() const { return impl_->address(); }

const WanOptions& WanProxy::options() const { return impl_->options(); }

WanStats WanProxy::stats() const {
  Counters& c = impl_->counters();
  WanStats stats;
  stats.connections_accepted = c.accepted.load(std::memory_order_relaxed);
  stats.connections_open = c.open.load(std::memory_order_relaxed);
  stats.bytes_client_to_target = c.client_to_target.load(std::memory_order_relaxed);
  stats.bytes_target_to_client = c.target_to_client.load(std::memory_order_relaxed);
  stats.peak_queued_bytes = c.peak_queued.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace hyperpool::wan
