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

#include "transport/socket_link.h"

namespace hyperpool {
namespace {

using namespace socket_link;  // NOLINT(build/namespaces): this file's half of the transport

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

}  // namespace hyperpool
