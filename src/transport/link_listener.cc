// The Endpoint side of the socket transport: accepts links, checks the
// proof frame and hands each link to a LinkAcceptor (the link format is
// described at the top of socket_transport.cc).

#include "transport/socket_link.h"

namespace hyperpool {
namespace {

using namespace socket_link;  // NOLINT(build/namespaces): this file's half of the transport

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
