// The Client half: a local PostgreSQL "server" for the app's driver. It
// answers the whole handshake itself (SCRAM-SHA-256 against a verifier
// computed once at Create, then the origin's cached ParameterStatus values),
// and only when the app sends its first real message does it open a Link to
// the Endpoint, carrying the hello and those first messages in one Send
// (docs/architecture.md, "The link protocol").
//
// One coroutine per app connection, on one worker's executor (a strand of it
// when the executor's io_context may run on several threads).
// After the handshake two legs run concurrently on that strand:
//   AppToLink: reads whole frontend frames from the socket, sends them on the
//              link (one Send per read, many frames per Send);
//   LinkToApp: the only writer to the socket: one write per received chunk,
//              tracking ReadyForQuery for the transaction status.
// Each leg, when it ends, closes what the other is waiting on, so the session
// unwinds without joins; the Session object lives as long as either leg.

#include "hyperpool/client.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
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

#include <fcntl.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>

#include "cache/tier.h"
#include "client/app_access.h"
#include "client/app_tls.h"
#include "client/client_cache.h"
#include "client/client_util.h"
#include "client/unix_listener.h"
#include "client/in_buffer.h"
#include "client/server_handshake.h"
#include "client/extended_session.h"
#include "client/invalidation_watch.h"
#include "client/link_trace.h"
#include "client/session_key.h"
#include "client/statement_metadata.h"
#include "hyperpool/admin.h"
#include "protocol/auth/auth_util.h"
#include "protocol/auth/scram.h"
#include "protocol/codec.h"
#include "tls/tls_context.h"

namespace hyperpool {
namespace {

namespace pr = protocol;
using asio::ip::tcp;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

// Longest statement text the Client lexes for the cache (ClassifyStatements);
// a session that sends a longer one bypasses the Client tier from then on.
constexpr size_t kMaxClassifiedSql = 1 << 20;


// True when `bytes` starts with a frame header whose (well-formed) length
// is above `limit`: a size we refuse, not a malformed stream.
bool DeclaresLengthAbove(std::string_view bytes, uint32_t limit) {
  if (bytes.size() < 5) return false;
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data() + 1);
  const uint32_t len = (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | u[3];
  return len < 0x80000000u && len > limit;
}

void Log(std::string_view line) {
  std::string text = fmt::format("hyperpool client: {}\n", line);
  std::fwrite(text.data(), 1, text.size(), stderr);
}

std::string ErrorFrame(std::string_view sqlstate, std::string_view message) {
  std::string out;
  pr::EncodeErrorResponse(out, "FATAL", sqlstate, message);
  return out;
}

// Asio does not open sockets close-on-exec: without this a child process the
// host forks (psql, a driver's helper) would inherit the listener and keep the
// port open after Stop().
void SetCloseOnExec(int fd) {
  int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

}  // namespace

class ClientSession;

struct Client::Impl : std::enable_shared_from_this<Client::Impl> {
  Impl(std::vector<asio::any_io_executor> executors_in, Transport& transport_in, ClientOptions options_in)
      : executors(std::move(executors_in)),
        transport(transport_in),
        options(std::move(options_in)),
        accept_strand(asio::make_strand(executors[0])),
        acceptor(accept_strand),
        unix_acceptor(accept_strand) {}

  // Coroutines take `self` so that the Impl outlives them.
  asio::awaitable<void> AcceptLoop(std::shared_ptr<Impl> self);
  asio::awaitable<void> UnixAcceptLoop(std::shared_ptr<Impl> self);
  // The executor the next session runs on (round robin over the workers).
  asio::any_io_executor NextSessionExecutor();
  // Starts a session on an accepted socket (bound to its session executor).
  void StartSession(std::shared_ptr<Impl> self, tcp::socket socket);
  asio::awaitable<void> Probe(std::shared_ptr<Impl> self);
  void Stop();

  // Requires `mu`: opens a probe link unless one is in flight.
  void StartProbeLocked();
  // Stores fresh origin parameters and wakes the sessions waiting for them.
  void PublishParams(client::ParamList params);
  // Wakes the waiting sessions with `error_frame` (an ErrorResponse).
  void FailParams(std::string error_frame);

  const std::vector<asio::any_io_executor> executors;
  Transport& transport;
  const ClientOptions options;
  // User, database, the verifier of options.password (computed once) and
  // the mock secret for unknown users: what every session's handshake needs.
  client::HandshakeConfig handshake_config;
  // TLS offered to applications (options.ssl_cert_file); empty: SSLRequest gets 'N'.
  std::optional<tls::ServerContext> app_tls;
  // options.logger, or Logger::Default().
  std::shared_ptr<const Logger> logger;
  std::string connection_string;
  asio::strand<asio::any_io_executor> accept_strand;
  tcp::acceptor acceptor;                // used on accept_strand only
  // Open when options.listen_unix_dir is set; accept_strand only.
  asio::local::stream_protocol::acceptor unix_acceptor;
  std::string unix_socket_path;  // removed by Stop()
  std::atomic<size_t> accepted{0};
  std::atomic<uint64_t> next_session_id{1};  // ClientSessionInfo::id
  // Bytes of sessions that ended (guarded by mu); live ones count their own.
  uint64_t bytes_received_closed = 0;
  uint64_t bytes_sent_closed = 0;
  std::unique_ptr<Link> probe_link;      // used on accept_strand only
  std::atomic<size_t> next_executor{0};
  std::atomic<bool> stopping{false};

  std::mutex mu;
  // The origin's reported parameters from the latest link-ready answer.
  std::optional<client::ParamList> params;
  bool probe_in_flight = false;
  std::vector<std::weak_ptr<ClientSession>> params_waiters;
  std::unordered_map<const ClientSession*, std::weak_ptr<ClientSession>> sessions;
  struct CancelTarget {
    std::string secret;
    const ClientSession* session = nullptr;
    std::string session_id;  // empty until the session's link is open
    std::string database;    // the session's: a cancel link goes where its session's link went
  };
  std::unordered_map<int32_t, CancelTarget> cancel_keys;

  // The Client cache tier (client_cache.h); null when caching is off.
  std::shared_ptr<client::ClientTier> cache;
  // Its invalidation watch (invalidation_watch.h); null when off.
  std::shared_ptr<client::InvalidationWatch> watch;
  // Statement metadata answered locally (statement_metadata.h): protocol
  // work, kept with the cache on or off.
  std::shared_ptr<client::StatementMetadataStore> metadata;
  // Sent in every link hello (hyperpool.client_id): the Endpoint sends
  // invalidations to one link of each Client.
  std::string client_id;
  // HYPERPOOL_TRACE_LINK: log every flight to the link (link_trace.h).
  bool trace_link = false;
  // Flights sent over links that the app waits for (link_trace.h,
  // ExpectsAnswer): the WAN round trips its sessions cost.
  std::atomic<uint64_t> link_flights{0};
};

class ClientSession : public std::enable_shared_from_this<ClientSession> {
 public:
  // The session's life. Change it only through SetState().
  enum class State {
    kStartup,         // waiting for StartupMessage (SSLRequest: 'S' and TLS when configured, else 'N')
    kAuthenticating,  // SCRAM-SHA-256 exchange in progress
    kAwaitingParams,  // authenticated; waiting for the origin's parameters (first app of a Client)
    kIdle,            // ReadyForQuery sent and nothing outstanding (the link may not exist yet)
    kBusy,            // requests (Query, Sync, FunctionCall) forwarded without their ReadyForQuery
    kClosed,          // socket and link closed; the legs are unwinding
  };

  // Why forwarding ended; decides what the app is told.
  enum class EndReason {
    kNone,              // still running
    kTerminate,         // app sent Terminate: forwarded, then both closed
    kAppGone,           // app socket closed or failed: link closed (a vanished client)
    kAppProtocolError,  // app sent a malformed frame: pending_error_ goes to the app
    kIdleTimeout,       // idle past options.idle_timeout: pending_error_ (57P05) goes to the app
    kKilled,            // Client::Kill (admin KILL_CLIENT): pending_error_ (57P01) goes to the app
    kLinkFailed,        // the link broke: 08006 to the app
    kStopped,           // Client::Stop()
  };

  ClientSession(std::shared_ptr<Client::Impl> impl, tcp::socket socket)
      : impl_(std::move(impl)),
        socket_(std::move(socket)),
        peer_(client::PeerAddress(socket_)),
        started_(std::chrono::steady_clock::now()),
        watchdog_(socket_.get_executor()),
        idle_timer_(socket_.get_executor()),
        params_timer_(socket_.get_executor()),
        write_done_(socket_.get_executor()) {}

  ~ClientSession() {
    if (logged_in_ && impl_->logger->log_disconnections()) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_);
      impl_->logger->Log(LogLevel::kInfo, "session_end",
                         {{"client", peer_.text}, {"session", std::to_string(cancel_pid_)}, {"user", user_},
                          {"db", database_}, {"duration_ms", std::to_string(ms.count())}});
    }
    std::lock_guard lock(impl_->mu);
    impl_->sessions.erase(this);
    impl_->bytes_received_closed += received_.load(std::memory_order_relaxed);
    impl_->bytes_sent_closed += sent_.load(std::memory_order_relaxed);
    if (cancel_pid_ != 0) {
      auto it = impl_->cancel_keys.find(cancel_pid_);
      if (it != impl_->cancel_keys.end() && it->second.session == this) impl_->cancel_keys.erase(it);
    }
  }

  asio::any_io_executor executor() { return socket_.get_executor(); }

  // SHOW CLIENTS: `info_` is guarded by impl_->mu; the state is read from
  // an atomic so SetState() takes no lock.
  ClientSessionInfo& info() { return info_; }
  std::string shown_state() const {
    static constexpr const char* kNames[] = {"login", "login", "login", "idle", "active", "closed"};
    return admin_ ? "admin" : kNames[shown_state_.load(std::memory_order_relaxed)];
  }

  // Client::Kill(): runs on the session's executor. With a link, LinkToApp
  // delivers the FATAL when the link ends; without one (an admin session,
  // a handshake, an idle session with no link yet) EndSession writes it and
  // closing the socket ends the reader.
  void Kill(std::shared_ptr<ClientSession> self) {
    if (reason_ != EndReason::kNone || state_ == State::kClosed) return;
    reason_ = EndReason::kKilled;
    DisarmIdleTimer();
    asio::co_spawn(executor(),
                   EndSession(self, kSqlStateAdminShutdown, "terminating connection due to administrator command"),
                   asio::detached);
  }

  // `self` keeps the session alive for the coroutine's whole life (the
  // body starts only after co_spawn returns).
  asio::awaitable<void> Run(std::shared_ptr<ClientSession> self) {
    StartWatchdog();
    bool ready = co_await Handshake();
    watchdog_.cancel();
    if (!ready) {
      CloseSocket();
      if (state_ != State::kClosed) SetState(State::kClosed);
      co_return;
    }
    if (admin_) {
      co_await RunAdmin();
      co_return;
    }
    ArmIdleTimer();
    key_.Start(database_, app_params_);
    cache::ApplyStartupParameters(app_params_, cache_settings_);
    ext_ = std::make_unique<client::ExtendedSession>(impl_->metadata.get(), database_, key_.fingerprint());
    co_await AppToLink();
  }

  // Client::Stop(): runs on the session's strand.
  void Shutdown() {
    if (reason_ == EndReason::kNone) reason_ = EndReason::kStopped;
    timed_out_ = true;
    DisarmIdleTimer();
    params_timer_.cancel();
    watchdog_.cancel();
    CloseLink();
    CloseSocket();
  }

  // The probe finished: runs on the session's strand.
  void OnParams(std::string error_frame) {
    params_error_ = std::move(error_frame);
    params_notified_ = true;
    params_timer_.cancel();
  }

 private:
  // The one transition function.
  void SetState(State next) {
    // Allowed: forward along the handshake, kIdle <-> kBusy, anything -> kClosed.
    bool ok = next == State::kClosed || static_cast<int>(next) > static_cast<int>(state_) ||
              (state_ == State::kBusy && next == State::kIdle);
    if (!ok) Log(fmt::format("internal: session state {} -> {} refused", int(state_), int(next)));
    if (ok) state_ = next;
    shown_state_.store(static_cast<int>(state_), std::memory_order_relaxed);
  }

  void StartWatchdog() {
    watchdog_.expires_after(impl_->options.handshake_timeout);
    watchdog_.async_wait([weak = weak_from_this()](asio::error_code ec) {
      if (ec) return;
      auto self = weak.lock();
      if (!self) return;
      if (self->state_ == State::kIdle || self->state_ == State::kBusy || self->state_ == State::kClosed) return;
      self->timed_out_ = true;
      if (self->state_ == State::kAwaitingParams) {
        self->params_timer_.cancel();  // Handshake() reports the timeout itself
      } else {
        self->CloseSocket();
      }
    });
  }

  // client_idle_timeout (ClientOptions::idle_timeout): armed whenever a
  // ReadyForQuery 'I' leaves with nothing outstanding, disarmed by the next
  // message from the app, as PostgreSQL's idle_session_timeout.
  void ArmIdleTimer() {
    ++idle_generation_;
    if (impl_->options.idle_timeout <= std::chrono::milliseconds(0) || reason_ != EndReason::kNone) return;
    idle_timer_.expires_after(impl_->options.idle_timeout);
    idle_timer_.async_wait([weak = weak_from_this(), generation = idle_generation_](asio::error_code ec) {
      if (ec) return;
      auto self = weak.lock();
      if (!self || self->idle_generation_ != generation) return;
      if (self->state_ != State::kIdle || self->outstanding_ != 0 || self->txn_status_ != 'I') return;
      if (self->reason_ != EndReason::kNone) return;
      // Set now, not when the coroutine starts: AppToLink must not send on
      // the link in between.
      self->reason_ = EndReason::kIdleTimeout;
      asio::co_spawn(self->executor(),
                     self->EndSession(self, kSqlStateIdleSessionTimeout,
                                      "terminating connection due to idle-session timeout"),
                     asio::detached);
    });
  }
  void DisarmIdleTimer() {
    ++idle_generation_;
    idle_timer_.cancel();
  }

  // The idle timeout fired, or Kill(): FATAL to the app, Terminate to the
  // Endpoint (a clean end, not a vanished client), then close both.
  asio::awaitable<void> EndSession(std::shared_ptr<ClientSession> self, std::string_view sqlstate,
                                   std::string message) {
    pending_error_ = ErrorFrame(sqlstate, message);
    Log(fmt::format("closing an app connection: {}", message));
    if (link_) {
      // LinkToApp is the socket's writer: it delivers pending_error_ when
      // the link ends.
      std::string terminate;
      pr::Encode(pr::Terminate{}, terminate);
      (void)co_await link_->Send(std::move(terminate));
      CloseLink();
      co_return;
    }
    co_await Write(pending_error_);
    CloseSocket();
    SetState(State::kClosed);
  }

  // SHOW STATS' total_sent (one writer: the session's executor).
  void CountSent(size_t n) { sent_.store(sent_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }

  void CloseSocket() {
    tls_abort_.Abort();  // a TLS handshake in progress holds the real socket
    asio::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  void CloseLink() {
    if (link_) link_->Close();
  }

  // Reads until a whole frame is buffered. The frame's views stay valid until
  // the next read. InvalidArgument: protocol error; Unavailable: closed.
  asio::awaitable<absl::StatusOr<pr::Frame>> ReadFrame(const pr::FrameReader& reader) {
    for (;;) {
      pr::FrameReader::Result r = reader.Read(in_.view());
      if (r.is_frame()) co_return r.frame();
      if (r.is_error()) co_return r.status();
      if (!co_await Fill(r.bytes_needed())) co_return absl::UnavailableError("app closed the connection");
    }
  }

  // Reads once, so that (when possible) `needed` bytes in total are buffered.
  asio::awaitable<bool> Fill(size_t needed) {
    size_t want = needed > in_.size() ? needed - in_.size() : 1;
    auto [space, space_size] = in_.Prepare(in_.ReadSize(want));
    auto buffer = asio::buffer(space, space_size);
    auto [ec, n] = co_await socket_.async_read_some(buffer, kAsTuple);
    if (ec || n == 0) co_return false;
    received_.store(received_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    in_.Commit(n);
    co_return true;
  }

  asio::awaitable<void> Write(std::string_view bytes) {
    auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(bytes.data(), bytes.size()), kAsTuple);
    (void)ec;
    CountSent(n);
  }

  // Sends a FATAL ErrorResponse and closes the socket.
  asio::awaitable<void> Fatal(std::string_view sqlstate, std::string message) {
    out_.clear();
    pr::EncodeErrorResponse(out_, "FATAL", sqlstate, message);
    co_await Write(out_);
    CloseSocket();
    SetState(State::kClosed);
  }

  // ---- Handshake (PostgreSQL docs, "Message Flow" > "Start-up") ----

  // Runs the sans-I/O ServerHandshake over the socket, then sends the
  // origin's parameters, BackendKeyData and ReadyForQuery. False: closed.
  asio::awaitable<bool> Handshake() {
    using Event = client::ServerHandshake::Event;
    // Aliases the Impl's config: no per-connection copy of the users.
    client::ServerHandshake hs(std::shared_ptr<const client::HandshakeConfig>(impl_, &impl_->handshake_config));
    hs.set_peer_host(peer_.host);
    if (peer_.unix_socket) hs.set_unix_socket();
    for (;;) {
      client::ServerHandshake::Step step = hs.Advance(in_.view());
      in_.Consume(step.consumed);
      if (!step.log.empty()) LogRefused(step.log, step.auth_failed);
      if (step.event == Event::kNeedMore) {
        if (!step.output.empty()) co_await Write(step.output);
        if (hs.state() != client::ServerHandshake::State::kStartup && state_ == State::kStartup) {
          SetState(State::kAuthenticating);
        }
        // EOF before a complete packet, or the login timeout: close silently
        // (PostgreSQL does the same).
        if (!co_await Fill(step.bytes_needed)) co_return false;
        continue;
      }
      if (step.event == Event::kEncryptionRefused) {
        // Bytes already on their way before our answer: see ServerHandshake.
        asio::error_code ec;
        if (socket_.available(ec) > 0) {
          Log("closing an app connection: data received after SSLRequest/GSSENCRequest before the answer");
          co_return false;
        }
        co_await Write(step.output);
        continue;
      }
      if (step.event == Event::kTlsAccepted) {
        // The relay (client/app_tls.h) gives back a socket carrying the
        // decrypted conversation; the login continues on it.
        asio::error_code ec;
        if (socket_.available(ec) > 0) {
          LogRefused("received unencrypted data after SSL request");
          co_return false;
        }
        asio::any_io_executor ex = socket_.get_executor();
        absl::StatusOr<tcp::socket> inner =
            co_await client::AcceptAppTls(std::move(socket_), *impl_->app_tls, step.output, tls_abort_);
        socket_ = inner.ok() ? *std::move(inner) : tcp::socket(ex);
        if (!inner.ok()) {
          LogRefused(fmt::format("TLS handshake failed: {}", std::string(inner.status().message())));
          SetState(State::kClosed);
          co_return false;
        }
        hs.OnTlsEstablished();
        continue;
      }
      if (step.event == Event::kCancelRequest) {
        co_await ForwardCancel(hs.cancel_process_id(), hs.cancel_secret());
        co_return false;
      }
      if (step.event == Event::kClose) {
        if (!step.output.empty() && !timed_out_) co_await Write(step.output);
        CloseSocket();
        SetState(State::kClosed);
        co_return false;
      }
      // kAuthenticated: output holds [NegotiateProtocolVersion] ... AuthenticationOk.
      out_ = std::move(step.output);
      user_ = hs.user();
      database_ = hs.database();
      app_params_ = hs.parameters();
      break;
    }
    if (state_ == State::kStartup) SetState(State::kAuthenticating);
    {
      std::lock_guard lock(impl_->mu);
      info_.user = user_;
      info_.database = database_;
    }
    if (impl_->options.admin && database_ == impl_->options.admin_database) {
      // The admin console: no origin parameters, no link (RunAdmin).
      admin_ = true;
      co_await Write(out_);
      out_.clear();
      co_return true;
    }

    client::ParamList origin_params;
    bool have_params = false;
    {
      std::lock_guard lock(impl_->mu);
      if (impl_->params) {
        origin_params = *impl_->params;
        have_params = true;
      }
    }
    if (!have_params) {
      co_await Write(out_);
      out_.clear();
      SetState(State::kAwaitingParams);
      auto params = co_await AwaitParams();
      if (!params) co_return false;
      origin_params = std::move(*params);
    }
    for (const auto& [name, value] : client::OverlayParams(origin_params, app_params_)) {
      pr::Encode(pr::ParameterStatus{name, value}, out_);
    }
    if (!RegisterCancelKey()) {
      co_await Fatal(kSqlStateConnectionFailure, "could not generate a cancellation key");
      co_return false;
    }
    pr::Encode(pr::BackendKeyData{cancel_pid_, cancel_secret_}, out_);
    pr::Encode(pr::ReadyForQuery{pr::TransactionStatus::kIdle}, out_);
    SetState(State::kIdle);
    auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(out_), kAsTuple);
    CountSent(n);
    if (ec) co_return false;
    out_.clear();
    out_.shrink_to_fit();
    logged_in_ = true;
    if (impl_->logger->log_connections()) {
      impl_->logger->Log(LogLevel::kInfo, "session_start",
                         {{"client", peer_.text}, {"session", std::to_string(cancel_pid_)}, {"user", user_},
                          {"db", database_}, {"tls", hs.encrypted() ? "on" : "off"}});
    }
    co_return true;
  }

  // Waits until the Client knows the origin's parameters (only the first app
  // connections of a Client ever wait). Reports failures to the app itself.
  asio::awaitable<std::optional<client::ParamList>> AwaitParams() {
    for (;;) {
      {
        std::lock_guard lock(impl_->mu);
        if (impl_->params) co_return *impl_->params;
        if (!params_notified_) {
          impl_->params_waiters.push_back(weak_from_this());
          impl_->StartProbeLocked();
        }
      }
      if (!params_notified_) {
        params_timer_.expires_at(asio::steady_timer::time_point::max());
        co_await params_timer_.async_wait(kAsTuple);
      }
      if (timed_out_) {
        if (reason_ == EndReason::kNone) {
          co_await Fatal(kSqlStateConnectionFailure, "timed out waiting for the origin database");
        }
        co_return std::nullopt;
      }
      if (params_notified_ && !params_error_.empty()) {
        co_await Write(params_error_);
        CloseSocket();
        SetState(State::kClosed);
        co_return std::nullopt;
      }
      params_notified_ = false;
    }
  }

  bool RegisterCancelKey() {
    for (int attempt = 0; attempt < 8; ++attempt) {
      absl::StatusOr<std::string> bytes = auth::RandomBytes(8);
      if (!bytes.ok()) return false;
      const auto* u = reinterpret_cast<const unsigned char*>(bytes->data());
      int32_t pid = static_cast<int32_t>(((uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) |
                                          (uint32_t{u[2]} << 8) | u[3]) & 0x7fffffffu);
      std::lock_guard lock(impl_->mu);
      if (pid == 0 || impl_->cancel_keys.count(pid) != 0) continue;
      cancel_pid_ = pid;
      cancel_secret_ = bytes->substr(4, 4);
      impl_->cancel_keys[pid] = Client::Impl::CancelTarget{cancel_secret_, this, "", database_};
      return true;
    }
    return false;
  }

  // CancelRequest ("Canceling Requests in Progress"): find the session by its
  // key and open a cancel link for it. The app gets no answer either way.
  asio::awaitable<void> ForwardCancel(int32_t pid, const std::string& secret) {
    std::string session_id;
    std::string database;
    {
      std::lock_guard lock(impl_->mu);
      auto it = impl_->cancel_keys.find(pid);
      if (it != impl_->cancel_keys.end() && auth::ConstantTimeEquals(it->second.secret, secret)) {
        session_id = it->second.session_id;
        database = it->second.database;
      }
    }
    if (session_id.empty() || impl_->stopping) co_return;  // unknown key, or nothing running yet
    auto link = co_await impl_->transport.Open(executor(), client::BuildCancelHello(session_id, database));
    if (link.ok()) (*link)->Close();
  }

  // ---- Forwarding ----

  // Opens the session's link with the hello and the first frames; starts LinkToApp.
  asio::awaitable<bool> OpenLink(std::string first_frames) {
    if (impl_->stopping) co_return false;
    absl::StatusOr<std::string> id = client::NewSessionId();
    if (!id.ok()) {
      co_await Fatal(kSqlStateConnectionFailure, "could not generate a session id");
      co_return false;
    }
    session_id_ = *id;
    client::ParamList hello_params = app_params_;
    if (!impl_->client_id.empty()) hello_params.emplace_back("hyperpool.client_id", impl_->client_id);
    hello_params.emplace_back(client::kDatabaseParam, database_);  // for a router of several databases
    // The pid of our BackendKeyData: the Endpoint shows it as the sender of
    // this session's notifications (src/endpoint/notification_pid.h).
    if (cancel_pid_ != 0) hello_params.emplace_back("hyperpool.backend_pid", std::to_string(cancel_pid_));
    // The hello goes in front of the frames (which may be one large
    // message, moved here without a copy): one more copy of it is avoided.
    first_frames.insert(0, client::BuildLinkHello(hello_params, session_id_));
    auto link = co_await impl_->transport.Open(executor(), std::move(first_frames));
    if (!link.ok()) {
      Log(fmt::format("could not open a link to the endpoint: {}", std::string(link.status().message())));
      co_await Fatal(kSqlStateConnectionFailure, "could not reach the hyperpool endpoint");
      co_return false;
    }
    if (reason_ != EndReason::kNone && reason_ != EndReason::kTerminate) {  // stopped while opening
      (*link)->Close();
      co_return false;
    }
    link_ = std::move(*link);
    {
      std::lock_guard lock(impl_->mu);
      auto it = impl_->cancel_keys.find(cancel_pid_);
      if (it != impl_->cancel_keys.end() && it->second.session == this) it->second.session_id = session_id_;
    }
    asio::co_spawn(executor(), LinkToApp(shared_from_this()), asio::detached);
    co_return true;
  }

  // ---- The Client cache tier (client_cache.h, docs/architecture.md "Query cache") ----

  // Whether a unit starting now may be answered locally / become a candidate.
  bool CacheUsable() const {
    return impl_->cache && cache_settings_.enabled && key_.keyable() &&
           outstanding_ == 0 && txn_status_ == 'I' && state_ == State::kIdle && ext_->idle() && !ext_->lost() &&
           !(cache_settings_.ttl && *cache_settings_.ttl <= std::chrono::milliseconds(0));
  }

  // The unit at the start of `bytes` if it may be cached (shape and text);
  // `key` is its Client-tier key.
  bool LocalCandidate(std::string_view bytes, cache::CandidateUnit& unit, std::string& key) const {
    const cache::StatementLookup lookup = [this](std::string_view name, std::string_view* sql,
                                                 std::vector<uint32_t>* types) {
      const client::SessionStatement* st = ext_->Find(name);
      if (st == nullptr) return false;
      *sql = st->sql;
      *types = st->param_types;
      return true;
    };
    if (cache::ParseCandidateUnit(bytes, unit, &lookup) != cache::UnitShape::kCandidate) return false;
    // As on the Endpoint: longer queries are never cached (and a key would
    // copy the whole unit).
    if (unit.sql.size() > impl_->options.cache.max_query_bytes) return false;
    cache::StatementEffects fx = cache::ClassifyStatements(unit.sql, nullptr);
    if (fx.nocache_hint || fx.changes_session_state || fx.only_cache_settings) return false;
    // Extended units always travel with a Describe(portal) (see
    // ExtendedContext::describe_portal): one key with or without the
    // driver's own.
    if (unit.form == cache::ProtocolForm::kExtended && unit.describe == 0) unit.describe = 'P';
    key = unit.form == cache::ProtocolForm::kSimple
              ? cache::ClientLocalKey(key_.fingerprint(), cache_settings_, unit.frames)
              : cache::ClientExtendedKey(key_.fingerprint(), cache_settings_, unit);
    return true;
  }

  // Whether the session's name resolution can key statement metadata.
  bool MetadataKeyable() const { return key_.keyable(); }

  // Applies what a forwarded Query / Parse text does to the session's cache
  // state (hyperpool.* settings, settings that a key cannot describe).
  void NoteForwardedFrame(const pr::Frame& f, std::string_view rest) {
    std::string_view sql;
    if (f.tag == 'Q') {
      auto q = pr::DecodeQuery(f.payload);
      if (!q.ok()) return;
      sql = q->query;
    } else if (f.tag == 'P') {
      auto p = pr::DecodeParse(f.payload);
      if (!p.ok()) return;
      sql = p->query;
    } else if (f.tag == 'F') {
      key_.Invalidate();
      return;
    } else {
      return;
    }
    if (sql.size() > kMaxClassifiedSql) {
      // Lexing it would cost several times its size; assume the worst.
      key_.Invalidate();
      return;
    }
    cache::StatementEffects fx = cache::ClassifyStatements(sql, &cache_settings_);
    if (!fx.changes_session_state) return;
    const bool lasts = txn_status_ == 'I' && outstanding_ == 0 && ext_->idle() && client::OwnUnit(f.tag, sql, rest);
    if (key_.Note(sql, fx, lasts)) ext_->set_fingerprint(key_.fingerprint());
  }

  // One line per batch for the round-trip trace (link_trace.h).
  void TraceFlight(std::string_view to_link, std::string_view local) const {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now().time_since_epoch()).count() % 1000000;
    Log(fmt::format("trace {} t={}ms {}{}{}", cancel_pid_, ms,
                    to_link.empty() ? std::string("local only")
                                    : fmt::format("{} link: {}", link_ ? "to" : "opening", client::SummarizeFlight(to_link)),
                    local.empty() ? "" : " | answered locally: ", client::SummarizeFlight(local, false)));
  }

  asio::awaitable<void> WaitWriteDone() {
    write_done_.expires_at(asio::steady_timer::time_point::max());
    (void)co_await write_done_.async_wait(kAsTuple);
  }

  // Answers units at the front of in_ from the local tier, as long as they
  // hit. False if the app connection failed.
  asio::awaitable<bool> ServeLocalHits() {
    while (CacheUsable()) {
      cache::CandidateUnit unit;
      std::string key;
      if (!LocalCandidate(in_.view(), unit, key)) co_return true;
      std::shared_ptr<const CacheEntry> entry = impl_->cache->GetFresh(key);
      if (!entry) co_return true;
      std::string out;
      if (!cache::AppendReplay(entry->messages, unit.replay, out).ok()) co_return true;
      if (unit.replay.parse) {
        // The driver's statement now exists for it: its Parse is deferred
        // (extended_session.h), which needs its metadata; the unnamed
        // statement is simply forgotten without it.
        pr::FrameReader reader(pr::FrameReader::Mode::kTagged);
        pr::FrameReader::Result r = reader.Read(unit.frames);
        if (!r.is_frame()) co_return true;
        if (!ext_->AdoptServedParse(r.frame(), MetadataKeyable()) && unit.named_parse) co_return true;
      }
      const size_t n = unit.frames.size();
      while (link_writing_) co_await WaitWriteDone();
      hit_writing_ = true;
      auto [ec, written] = co_await asio::async_write(socket_, asio::buffer(out), kAsTuple);
      CountSent(written);
      hit_writing_ = false;
      write_done_.cancel();
      (void)written;
      in_.Consume(n);
      if (ec) co_return false;
      if (impl_->trace_link) TraceFlight({}, out);
      ArmIdleTimer();  // a ReadyForQuery 'I' went out
    }
    co_return true;
  }

  // A control message from the Endpoint (never forwarded to the app).
  void OnControl(std::string_view payload) {
    std::optional<cache::Control> c = cache::DecodeControl(payload);
    if (!c) return;
    if (const auto* i = std::get_if<cache::InvalidateControl>(&*c); i && i->drops_metadata()) {
      if (impl_->trace_link) Log(fmt::format("trace {} invalidate all (statement metadata dropped)", cancel_pid_));
      impl_->metadata->InvalidateAll();  // DDL (or what may have run it): statement shapes may change
    }
    if (!impl_->cache) return;
    if (const auto* b = std::get_if<cache::BeginControl>(&*c)) {
      capture_.reset();
      capture_store_.reset();
      if (!units_.empty() && units_.front().candidate && units_.front().digest == b->digest) {
        capture_ = std::make_unique<cache::ResultCapture>(impl_->cache->options().max_entry_bytes);
        capture_key_ = units_.front().key;
      }
    } else if (const auto* s = std::get_if<cache::StoreControl>(&*c)) {
      if (capture_ && !units_.empty() && units_.front().digest == s->digest) capture_store_ = *s;
    } else if (const auto* i = std::get_if<cache::InvalidateControl>(&*c)) {
      impl_->cache->Invalidate(*i);
    }
  }

  // Splits received link bytes into whole frames: control messages are
  // consumed, the rest is appended to `out` for the app (large DataRows
  // stream through unbuffered). `consumed`: bytes of `buf` handled (a partial
  // frame stays). False on a malformed header.
  bool ProcessLinkBytes(const std::string& buf, std::string& out, size_t& consumed) {
    size_t pos = 0;
    if (passthrough_ > 0) {
      size_t take = std::min(passthrough_, buf.size());
      out.append(buf, 0, take);
      passthrough_ -= take;
      pos = take;
    }
    while (buf.size() - pos >= 5) {
      const char* p = buf.data() + pos;
      const char tag = p[0];
      const auto* u = reinterpret_cast<const unsigned char*>(p + 1);
      uint32_t len = (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | u[3];
      if (len < 4 || len >= 0x80000000u) {
        consumed = buf.size();
        return false;
      }
      const size_t total = size_t{len} + 1;
      const size_t have = buf.size() - pos;
      if (have < total) {
        if ((tag == 'D' || tag == 'd') && !capture_ && ext_->StreamsRows()) {
          out.append(p, have);
          passthrough_ = total - have;
          last_tag_ = tag;
          pos = buf.size();
        }
        break;
      }
      std::string_view frame(p, total);
      if (tag == cache::kControlTag) {
        OnControl(frame.substr(5));
      } else {
        if (capture_) capture_->Feed(tag, frame);
        ext_->OnBackend(tag, frame, out);
        last_tag_ = tag;
        if (tag == 'Z' && total >= 6) OnReadyForQuery(p[5]);
      }
      pos += total;
    }
    consumed = pos;
    return true;
  }

  asio::awaitable<void> AppToLink() {
    const uint32_t max_length = static_cast<uint32_t>(
        std::min<size_t>(impl_->options.max_message_size, pr::kDefaultMaxMessageLength));
    pr::FrameReader reader(pr::FrameReader::Mode::kTagged, pr::FrameLimits{.max_message_length = max_length});
    for (;;) {
      // The idle timeout ended the session while we waited for the app (see
      // EndIdleSession): nothing more may be sent on the link.
      if (reason_ == EndReason::kIdleTimeout || reason_ == EndReason::kKilled) co_return;
      if (!co_await ServeLocalHits()) {
        if (reason_ == EndReason::kNone) reason_ = EndReason::kAppGone;
        CloseLink();
        CloseSocket();
        SetState(State::kClosed);
        co_return;
      }
      std::string_view view = in_.view();
      // The first unit of this batch may become a local-tier entry.
      cache::CandidateUnit first;
      std::string first_key;
      const bool first_candidate = CacheUsable() && LocalCandidate(view, first, first_key);
      size_t units_in_batch = 0;
      size_t batch = 0;
      size_t needed = 0;
      bool terminate = false;
      absl::Status bad;
      std::string_view bad_sqlstate = kSqlStateProtocolViolation;
      // What goes on the link (the driver's frames, with deferred Parses
      // and checks added: extended_session.h) and what is answered at once.
      std::string to_link;
      std::string local;
      for (;;) {
        pr::FrameReader::Result r = reader.Read(view.substr(batch));
        if (r.is_need_more()) {
          needed = batch + r.bytes_needed();
          break;
        }
        if (r.is_error()) {
          bad = r.status();
          if (DeclaresLengthAbove(view.substr(batch), max_length)) bad_sqlstate = kSqlStateProgramLimitExceeded;
          break;
        }
        const char tag = r.frame().tag;
        if (!pr::IsFrontendTag(tag) || tag == 'p') {
          bad = pr::ProtocolError(fmt::format("invalid frontend message type {}", int(static_cast<unsigned char>(tag))));
          break;
        }
        batch += r.frame().size();
        NoteForwardedFrame(r.frame(), view.substr(batch));
        client::ExtendedContext ctx;
        ctx.keyable = MetadataKeyable();
        ctx.txn_status = txn_status_;
        ctx.nothing_sent = to_link.empty() && outstanding_ == 0;
        ctx.describe_portal = first_candidate && units_in_batch == 0 && first.form == cache::ProtocolForm::kExtended &&
                              first.replay.describe == cache::ReplayRequest::Describe::kNone;
        client::ExtendedSession::FrontendResult fr = ext_->OnFrontend(r.frame(), view.substr(batch), ctx, to_link, local);
        batch += fr.rest_consumed;
        if (!fr.forwarded) continue;  // answered locally (a Sync among them included)
        if (tag == 'Q' || tag == 'S' || tag == 'F') {
          ++outstanding_;
          PendingUnit unit;
          if (first_candidate && units_in_batch == 0 && batch == first.frames.size()) {
            // The digest is of what the Endpoint receives for the unit.
            unit.candidate = true;
            unit.digest = cache::Fnv1a64(to_link);
            unit.key = std::move(first_key);
          }
          ++units_in_batch;
          units_.push_back(std::move(unit));
        }
        if (tag == 'X') {
          terminate = true;
          break;
        }
      }
      // Set before the Terminate goes out: the Endpoint may close the link
      // before Send() returns, and LinkToApp must not call that a failure.
      if (terminate && reason_ == EndReason::kNone) reason_ = EndReason::kTerminate;
      if (batch > 0) DisarmIdleTimer();  // a message arrived: not idle until the next ReadyForQuery
      in_.Consume(batch);
      if (!local.empty()) {
        // Before anything this batch sends: their answers come later.
        while (link_writing_) co_await WaitWriteDone();
        hit_writing_ = true;
        auto [ec, written] = co_await asio::async_write(socket_, asio::buffer(local), kAsTuple);
        CountSent(written);
        hit_writing_ = false;
        write_done_.cancel();
        (void)written;
        if (ec) {
          if (reason_ == EndReason::kNone) reason_ = EndReason::kAppGone;
          CloseLink();
          CloseSocket();
          SetState(State::kClosed);
          co_return;
        }
      }
      const bool send_to_link = !to_link.empty() && !(terminate && !link_ && to_link.size() == 5);
      if (impl_->trace_link && (send_to_link || !local.empty())) TraceFlight(send_to_link ? to_link : "", local);
      if (send_to_link && client::ExpectsAnswer(to_link)) impl_->link_flights.fetch_add(1, std::memory_order_relaxed);
      if (send_to_link) {
        if (!link_) {
          if (!co_await OpenLink(std::move(to_link))) {
            CloseSocket();
            co_return;
          }
        } else {
          absl::Status sent = co_await link_->Send(std::move(to_link));
          if (!sent.ok()) co_return;  // LinkToApp reports the broken link
        }
        if (outstanding_ > 0 && state_ == State::kIdle) SetState(State::kBusy);
      }
      if (terminate) {
        if (reason_ == EndReason::kNone) reason_ = EndReason::kTerminate;
        CloseLink();
        CloseSocket();
        SetState(State::kClosed);
        co_return;
      }
      if (!bad.ok()) {
        std::string error = ErrorFrame(bad_sqlstate, std::string(bad.message()));
        Log(fmt::format("closing an app connection: {}", std::string(bad.message())));
        if (link_ && reason_ == EndReason::kNone) {
          // LinkToApp is the socket's writer: let it deliver the error.
          pending_error_ = std::move(error);
          reason_ = EndReason::kAppProtocolError;
          CloseLink();
        } else if (!link_) {
          co_await Write(error);
          CloseSocket();
          SetState(State::kClosed);
        }
        co_return;
      }
      if (reason_ != EndReason::kNone || !co_await Fill(needed)) {
        if (reason_ == EndReason::kNone) reason_ = EndReason::kAppGone;
        CloseLink();
        if (!link_) {
          CloseSocket();
          SetState(State::kClosed);
        }
        co_return;
      }
    }
  }

  asio::awaitable<void> LinkToApp(std::shared_ptr<ClientSession> self) {
    std::string buf;
    // Link-ready: ParameterStatus... ReadyForQuery('I'). Not for the app
    // (it had its own from our handshake); refreshes the cached parameters.
    {
      pr::FrameReader reader(pr::FrameReader::Mode::kTagged);
      client::ParamList fresh;
      size_t pos = 0;
      bool ready = false;
      while (!ready) {
        pr::FrameReader::Result r = reader.Read(std::string_view(buf).substr(pos));
        if (r.is_frame()) {
          const pr::Frame& f = r.frame();
          if (f.tag == 'S') {
            if (auto ps = pr::DecodeParameterStatus(f.payload); ps.ok()) {
              fresh.emplace_back(std::string(ps->name), std::string(ps->value));
            }
          } else if (f.tag == 'Z') {
            ready = true;
          } else if (f.tag == 'E') {
            // The Endpoint cannot serve: its error is the app's answer.
            co_await Write(f.raw);
            farewell_sent_ = true;
            co_await LinkEnded();
            co_return;
          }
          pos += f.size();
          continue;
        }
        if (r.is_error()) {
          Log(fmt::format("malformed link-ready from the endpoint: {}", std::string(r.status().message())));
          co_await LinkEnded();
          co_return;
        }
        absl::StatusOr<size_t> n = co_await link_->Receive(buf);
        if (!n.ok()) {
          co_await LinkEnded();
          co_return;
        }
      }
      if (!fresh.empty()) {
        std::lock_guard lock(impl_->mu);
        impl_->params = std::move(fresh);
      }
      buf.erase(0, pos);
    }
    std::string out;  // reused: its capacity outlives each batch
    for (;;) {
      if (!buf.empty()) {
        out.clear();
        size_t consumed = 0;
        bool ok = ProcessLinkBytes(buf, out, consumed);
        if (!out.empty()) {
          // Claimed before waiting, so that local answers AppToLink makes
          // meanwhile cannot overtake these bytes.
          link_writing_ = true;
          while (hit_writing_) co_await WaitWriteDone();
          auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(out), kAsTuple);
          CountSent(n);
          link_writing_ = false;
          write_done_.cancel();
          if (ec) {
            if (reason_ == EndReason::kNone) reason_ = EndReason::kAppGone;
            CloseLink();
            CloseSocket();
            SetState(State::kClosed);
            co_return;
          }
        }
        if (!ok) {
          Log("malformed backend stream from the endpoint");
          co_await LinkEnded();
          co_return;
        }
        buf.erase(0, consumed);
        // A large chunk (a big result) is not kept for the session's life.
        if (buf.empty() && buf.capacity() > (256u << 10)) std::string().swap(buf);
        if (out.capacity() > (256u << 10)) std::string().swap(out);
      }
      absl::StatusOr<size_t> n = co_await link_->Receive(buf);
      if (!n.ok()) {
        co_await LinkEnded();
        co_return;
      }
    }
  }

  void OnReadyForQuery(char status) {
    txn_status_ = status;
    if (capture_ && capture_store_ && capture_->state() == cache::ResultCapture::State::kComplete && impl_->cache) {
      impl_->cache->Store(capture_key_, capture_->TakeMessages(), *capture_store_);
    }
    capture_.reset();
    capture_store_.reset();
    if (!units_.empty()) units_.pop_front();
    if (outstanding_ > 0) --outstanding_;
    if (outstanding_ == 0 && state_ == State::kBusy) SetState(State::kIdle);
    if (outstanding_ == 0 && status == 'I') ArmIdleTimer();
  }

  // The link stopped delivering: tell the app why (unless it left or we stopped).
  asio::awaitable<void> LinkEnded() {
    switch (reason_) {
      case EndReason::kNone: {
        reason_ = EndReason::kLinkFailed;
        bool endpoint_said_why = farewell_sent_ || (passthrough_ == 0 && last_tag_ == 'E');
        if (!endpoint_said_why) {
          Log("the link to the endpoint failed");
          co_await Write(ErrorFrame(kSqlStateConnectionFailure, "lost the connection to the hyperpool endpoint"));
        }
        break;
      }
      case EndReason::kAppProtocolError:
      case EndReason::kIdleTimeout:
      case EndReason::kKilled:
        co_await Write(pending_error_);
        break;
      case EndReason::kStopped:
        break;
      default:
        break;
    }
    CloseLink();
    CloseSocket();
    SetState(State::kClosed);
  }

  // A connection refused or closed during the handshake (ServerHandshake's
  // reason); a failed password at warn, as PostgreSQL logs it at FATAL.
  void LogRefused(std::string_view reason, bool auth_failed = false) {
    impl_->logger->Log(auth_failed ? LogLevel::kWarn : LogLevel::kInfo,
                       auth_failed ? "auth_failed" : "connection_refused", {{"client", peer_.text}, {"reason", reason}});
  }

  // ---- The admin console (include/hyperpool/admin.h) ----

  // Serves an authenticated login to options.admin_database: 42501 for a
  // user who is not an admin, else the console's frames until it or the
  // app ends the session. Admin messages are bounded at 1 MiB.
  asio::awaitable<void> RunAdmin() {
    AdminConsole& console = *impl_->options.admin;
    if (!console.IsAdmin(user_)) {
      co_await Fatal("42501", fmt::format("permission denied for database \"{}\"", database_));
      co_return;
    }
    AdminLogin login;
    {
      std::lock_guard lock(impl_->mu);
      login.client_id = info_.id;
      login.address = info_.address;
    }
    login.user = user_;
    std::unique_ptr<AdminSession> session = console.Open(login);
    session->Greeting(out_);
    SetState(State::kIdle);
    co_await Write(out_);
    pr::FrameReader reader(pr::FrameReader::Mode::kTagged, pr::FrameLimits{.max_message_length = 1u << 20});
    for (bool open = true; open && reason_ == EndReason::kNone;) {
      absl::StatusOr<pr::Frame> frame = co_await ReadFrame(reader);
      if (!frame.ok()) {
        if (absl::IsInvalidArgument(frame.status()) && reason_ == EndReason::kNone) {
          co_await Fatal(kSqlStateProtocolViolation, std::string(frame.status().message()));
        }
        break;
      }
      out_.clear();
      open = session->OnMessage(frame->tag, frame->payload, out_);
      in_.Consume(frame->size());
      if (reason_ == EndReason::kNone) co_await Write(out_);
    }
    if (reason_ == EndReason::kKilled) co_return;  // EndSession closes
    CloseSocket();
    SetState(State::kClosed);
  }

  std::shared_ptr<Client::Impl> impl_;
  tcp::socket socket_;
  const client::Peer peer_;  // the app's address, for the logs
  const std::chrono::steady_clock::time_point started_;
  bool logged_in_ = false;  // ReadyForQuery of the login sent
  client::TlsAbort tls_abort_;  // armed only during the TLS handshake
  asio::steady_timer watchdog_;
  asio::steady_timer idle_timer_;
  uint64_t idle_generation_ = 0;  // bumped by every arm/disarm: a stale expiry is ignored
  asio::steady_timer params_timer_;
  State state_ = State::kStartup;
  EndReason reason_ = EndReason::kNone;
  client::InBuffer in_;  // app bytes not consumed yet
  std::string out_;
  bool timed_out_ = false;
  bool params_notified_ = false;
  std::string params_error_;

  std::string user_;
  std::string database_;
  client::ParamList app_params_;
  int32_t cancel_pid_ = 0;
  std::string cancel_secret_;

  std::string session_id_;
  std::unique_ptr<Link> link_;
  size_t passthrough_ = 0;  // bytes of a partly received DataRow still to forward as they come
  char last_tag_ = '\0';    // tag of the last frame forwarded to the app

  // The query cache (client_cache.h).
  client::SessionKey key_;  // what keys its entries and metadata (session_key.h)
  cache::SessionCacheSettings cache_settings_;
  struct PendingUnit {
    bool candidate = false;
    uint64_t digest = 0;
    std::string key;
  };
  std::deque<PendingUnit> units_;
  // The extended protocol as forwarded: local Parse/Describe answers,
  // deferred Parses, result-shape checks (extended_session.h).
  std::unique_ptr<client::ExtendedSession> ext_;  // one per Query/Sync/FunctionCall sent, popped at ReadyForQuery
  std::unique_ptr<cache::ResultCapture> capture_;
  std::string capture_key_;
  std::optional<cache::StoreControl> capture_store_;
  bool link_writing_ = false;  // LinkToApp is writing to the app
  bool hit_writing_ = false;   // AppToLink is writing a local hit
  asio::steady_timer write_done_;
  size_t outstanding_ = 0;
  char txn_status_ = 'I';  // from the latest ReadyForQuery (for the cache's later use)
  bool farewell_sent_ = false;
  std::string pending_error_;
  std::atomic<bool> admin_{false};  // an admin console session (RunAdmin); read by SHOW CLIENTS
  std::atomic<int> shown_state_{0};  // state_, for SHOW CLIENTS on other threads
  ClientSessionInfo info_;           // guarded by impl_->mu
 public:
  // Bytes from and to the app; written on the session's executor only.
  std::atomic<uint64_t> received_{0};
  std::atomic<uint64_t> sent_{0};
};

// ---- Client::Impl ----

asio::any_io_executor Client::Impl::NextSessionExecutor() {
  size_t index = next_executor.fetch_add(1, std::memory_order_relaxed) % executors.size();
  return options.one_thread_per_executor ? executors[index] : asio::any_io_executor(asio::make_strand(executors[index]));
}

asio::awaitable<void> Client::Impl::AcceptLoop(std::shared_ptr<Impl> self) {
  for (;;) {
    asio::any_io_executor session_executor = NextSessionExecutor();
    // No structured binding here: g++ 12 mishandles the lifetime of a
    // non-trivial object bound from a co_await result.
    std::tuple<asio::error_code, tcp::socket> accepted =
        co_await acceptor.async_accept(session_executor, kAsTuple);
    asio::error_code ec = std::get<0>(accepted);
    tcp::socket socket = std::move(std::get<1>(accepted));
    if (stopping) co_return;
    if (ec) {
      if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) co_return;
      // Out of descriptors or similar: back off briefly instead of spinning.
      Log(fmt::format("accept failed: {}", ec.message()));
      asio::steady_timer pause(accept_strand, std::chrono::milliseconds(50));
      co_await pause.async_wait(kAsTuple);
      continue;
    }
    asio::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    StartSession(self, std::move(socket));
  }
}

// Sessions read, write, shut down and close their socket and ask it for
// available bytes, all of which are the same calls on a Unix-domain stream:
// the accepted descriptor is adopted by a tcp::socket so that one session
// type serves both listeners (TCP-only options on it fail harmlessly).
asio::awaitable<void> Client::Impl::UnixAcceptLoop(std::shared_ptr<Impl> self) {
  for (;;) {
    asio::any_io_executor session_executor = NextSessionExecutor();
    std::tuple<asio::error_code, asio::local::stream_protocol::socket> accepted_socket =
        co_await unix_acceptor.async_accept(session_executor, kAsTuple);
    asio::error_code ec = std::get<0>(accepted_socket);
    asio::local::stream_protocol::socket local = std::move(std::get<1>(accepted_socket));
    if (stopping) co_return;
    if (ec) {
      if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) co_return;
      Log(fmt::format("accept on {} failed: {}", unix_socket_path, ec.message()));
      asio::steady_timer pause(accept_strand, std::chrono::milliseconds(50));
      co_await pause.async_wait(kAsTuple);
      continue;
    }
    tcp::socket socket(session_executor);
    const int fd = local.release(ec);
    if (!ec) socket.assign(tcp::v6(), fd, ec);
    if (ec) {
      Log(fmt::format("cannot adopt a connection on {}: {}", unix_socket_path, ec.message()));
      continue;
    }
    StartSession(self, std::move(socket));
  }
}

void Client::Impl::StartSession(std::shared_ptr<Impl> self, tcp::socket socket) {
  accepted.fetch_add(1, std::memory_order_relaxed);
  SetCloseOnExec(socket.native_handle());
  asio::error_code address_ec;
  tcp::endpoint peer = socket.remote_endpoint(address_ec);
  auto session = std::make_shared<ClientSession>(self, std::move(socket));
  {
    std::lock_guard lock(mu);
    sessions[session.get()] = session;
    ClientSessionInfo& info = session->info();
    info.id = next_session_id.fetch_add(1, std::memory_order_relaxed);
    info.connect_time = std::chrono::system_clock::now();
    // The Unix listener adopts its sockets as TCP ones (unix_listener.h).
    info.address = address_ec || peer.port() == 0 ? "unix" : fmt::format("{}:{}", peer.address().to_string(), peer.port());
  }
  asio::any_io_executor ex = session->executor();
  asio::co_spawn(ex, session->Run(session), [](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      Log(fmt::format("session ended by exception: {}", ex.what()));
    }
  });
}

void Client::Impl::StartProbeLocked() {
  if (probe_in_flight || stopping) return;
  probe_in_flight = true;
  asio::co_spawn(accept_strand, Probe(shared_from_this()), asio::detached);
}

// Opens a link only to learn the origin's parameters from its link-ready answer.
asio::awaitable<void> Client::Impl::Probe(std::shared_ptr<Impl> self) {
  client::ParamList fresh;
  std::string error;
  absl::StatusOr<std::string> id = client::NewSessionId();
  // (Built outside the co_await: g++ 12 double-destroys temporaries of a
  // conditional expression inside a co_await full-expression.)
  std::string hello = client::BuildLinkHello({}, id.ok() ? *id : std::string("0"));
  auto link = co_await transport.Open(accept_strand, std::move(hello));
  if (!link.ok()) {
    error = ErrorFrame(kSqlStateConnectionFailure, "could not reach the hyperpool endpoint");
  } else if (stopping) {
    (*link)->Close();
    error = ErrorFrame(kSqlStateAdminShutdown, "terminating connection due to administrator command");
  } else {
    probe_link = std::move(*link);
    std::string buf;
    size_t pos = 0;
    pr::FrameReader reader(pr::FrameReader::Mode::kTagged);
    bool done = false;
    while (!done) {
      pr::FrameReader::Result r = reader.Read(std::string_view(buf).substr(pos));
      if (r.is_frame()) {
        const pr::Frame& f = r.frame();
        if (f.tag == 'S') {
          if (auto ps = pr::DecodeParameterStatus(f.payload); ps.ok()) {
            fresh.emplace_back(std::string(ps->name), std::string(ps->value));
          }
        } else if (f.tag == 'E') {
          error = std::string(f.raw);
          done = true;
        } else if (f.tag == 'Z') {
          done = true;
        }
        pos += f.size();
        continue;
      }
      if (r.is_error()) {
        error = ErrorFrame(kSqlStateConnectionFailure, "malformed answer from the hyperpool endpoint");
        break;
      }
      if (!probe_link) break;
      absl::StatusOr<size_t> n = co_await probe_link->Receive(buf);
      if (!n.ok()) {
        error = ErrorFrame(kSqlStateConnectionFailure, "the hyperpool endpoint closed the link before it was ready");
        break;
      }
    }
    if (probe_link) {
      if (error.empty()) {
        std::string terminate;
        pr::Encode(pr::Terminate{}, terminate);
        (void)co_await probe_link->Send(std::move(terminate));
      }
      if (probe_link) probe_link->Close();
      probe_link.reset();
    }
  }
  if (error.empty()) {
    PublishParams(std::move(fresh));
  } else {
    Log("could not learn the origin's parameters from the endpoint");
    FailParams(std::move(error));
  }
}

void Client::Impl::PublishParams(client::ParamList fresh) {
  std::vector<std::weak_ptr<ClientSession>> waiters;
  {
    std::lock_guard lock(mu);
    params = std::move(fresh);
    probe_in_flight = false;
    waiters.swap(params_waiters);
  }
  for (auto& weak : waiters) {
    if (auto s = weak.lock()) asio::post(s->executor(), [s] { s->OnParams(""); });
  }
}

void Client::Impl::FailParams(std::string error_frame) {
  std::vector<std::weak_ptr<ClientSession>> waiters;
  {
    std::lock_guard lock(mu);
    probe_in_flight = false;
    waiters.swap(params_waiters);
  }
  for (auto& weak : waiters) {
    if (auto s = weak.lock()) asio::post(s->executor(), [s, error_frame] { s->OnParams(error_frame); });
  }
}

void Client::Impl::Stop() {
  if (stopping.exchange(true)) return;
  if (watch) watch->Stop();
  auto self = shared_from_this();
  asio::post(accept_strand, [self] {
    asio::error_code ec;
    self->acceptor.close(ec);
    self->unix_acceptor.close(ec);
    if (self->probe_link) self->probe_link->Close();
  });
  // Removed now, not on the strand: once Stop() returns no new app finds it.
  client::RemoveUnixSocket(unix_socket_path);
  std::vector<std::shared_ptr<ClientSession>> live;
  {
    std::lock_guard lock(mu);
    for (auto& [ptr, weak] : sessions) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) {
    asio::any_io_executor ex = s->executor();
    asio::post(ex, [s = std::move(s)] { s->Shutdown(); });
  }
}

// ---- Client ----

absl::StatusOr<std::unique_ptr<Client>> Client::Create(std::vector<asio::any_io_executor> executors,
                                                       Transport& transport, ClientOptions options) {
  if (executors.empty()) return absl::InvalidArgumentError("Client::Create: no executors");
  if (options.user.empty()) return absl::InvalidArgumentError("Client::Create: empty user name");
  if (options.database.empty()) return absl::InvalidArgumentError("Client::Create: empty database name");
  uint32_t iterations = options.scram_iterations;
  // A generated password with no count chosen also gets a quick verifier
  // (HandshakeConfig::quick_verifier).
  const bool quick = options.password.empty() && iterations == 0;
  if (options.password.empty()) {
    absl::StatusOr<std::string> generated = client::GeneratePassword();
    if (!generated.ok()) return generated.status();
    options.password = *std::move(generated);
  }
  if (iterations == 0) iterations = auth::kDefaultScramIterations;
  auto impl = std::make_shared<Impl>(std::move(executors), transport, std::move(options));
  absl::StatusOr<std::string> salt = auth::RandomBytes(auth::kDefaultScramSaltSize);
  if (!salt.ok()) return salt.status();
  absl::StatusOr<auth::ScramVerifier> verifier = auth::MakeScramVerifier(impl->options.password, *salt, iterations);
  if (!verifier.ok()) return verifier.status();
  impl->handshake_config.user = impl->options.user;
  impl->handshake_config.database = impl->options.database;
  if (impl->options.admin) {
    if (impl->options.admin_database.empty() || impl->options.admin_database == impl->options.database) {
      return absl::InvalidArgumentError(fmt::format(
          "Client::Create: the admin console's database must differ from the application database \"{}\"",
          impl->options.database));
    }
    impl->handshake_config.admin_database = impl->options.admin_database;
  }
  impl->handshake_config.verifier = *std::move(verifier);
  if (quick) {
    absl::StatusOr<std::string> quick_salt = auth::RandomBytes(auth::kDefaultScramSaltSize);
    if (!quick_salt.ok()) return quick_salt.status();
    absl::StatusOr<auth::ScramVerifier> quick_verifier =
        auth::MakeScramVerifier(impl->options.password, *quick_salt, client::kQuickScramIterations);
    if (!quick_verifier.ok()) return quick_verifier.status();
    impl->handshake_config.quick_verifier = *std::move(quick_verifier);
  }
  absl::StatusOr<std::string> mock_secret = auth::RandomBytes(32);
  if (!mock_secret.ok()) return mock_secret.status();
  impl->handshake_config.mock_secret = *std::move(mock_secret);
  if (absl::Status s = client::ConfigureAppAccess(impl->options, iterations, impl->handshake_config, impl->app_tls);
      !s.ok()) {
    return s;
  }
  impl->logger = impl->options.logger ? impl->options.logger : Logger::Default();
  const bool watched = impl->options.cache.enabled && impl->options.cache_watch.value_or(false);
  if (impl->options.cache.enabled) impl->cache = std::make_shared<client::ClientTier>(impl->options.cache, watched);
  impl->metadata = std::make_shared<client::StatementMetadataStore>();
  impl->trace_link = client::LinkTraceEnabled();
  {
    // Invalidations (DDL drops statement metadata too) reach one link of
    // each Client, cache or not.
    absl::StatusOr<std::string> client_id = client::NewSessionId();
    if (!client_id.ok()) return client_id.status();
    impl->client_id = *client_id;
  }

  asio::error_code ec;
  asio::ip::address address = asio::ip::make_address(impl->options.listen_host, ec);
  if (ec) {
    if (impl->options.listen_host == "localhost") {
      address = asio::ip::make_address("127.0.0.1");
    } else {
      return absl::InvalidArgumentError(
          fmt::format("Client: listen host '{}' is not an IP address", impl->options.listen_host));
    }
  }
  tcp::endpoint local(address, impl->options.listen_port);
  auto fail = [&](std::string_view what) {
    return absl::UnavailableError(
        fmt::format("Client: cannot {} {}:{}: {}", what, address.to_string(), impl->options.listen_port, ec.message()));
  };
  impl->acceptor.open(local.protocol(), ec);
  if (ec) return fail("open a socket for");
  SetCloseOnExec(impl->acceptor.native_handle());
  impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  impl->acceptor.bind(local, ec);
  if (ec) return fail("bind");
  impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen on");
  uint16_t port = impl->acceptor.local_endpoint(ec).port();
  impl->connection_string = client::BuildConnectionString(impl->options.user, impl->options.password,
                                                          impl->options.listen_host, port, impl->options.database);
  if (!impl->options.listen_unix_dir.empty()) {
    absl::StatusOr<std::string> path = client::ListenUnix(impl->unix_acceptor, impl->options.listen_unix_dir, port);
    if (!path.ok()) return path.status();
    impl->unix_socket_path = *std::move(path);
    asio::co_spawn(impl->accept_strand, impl->UnixAcceptLoop(impl), asio::detached);
  }
  asio::co_spawn(impl->accept_strand, impl->AcceptLoop(impl), asio::detached);
  {
    // Learn the origin's parameters early so the first app need not wait long.
    std::lock_guard lock(impl->mu);
    impl->StartProbeLocked();
  }
  if (watched) {
    // Last: nothing below can fail, so the watch never outlives a failed Create.
    client::InvalidationWatchOptions w;
    w.client_id = impl->client_id;
    w.heartbeat = impl->options.cache_watch_heartbeat;
    w.logger = impl->logger;
    w.on_invalidate = [metadata = impl->metadata](const cache::InvalidateControl& c) {
      if (c.drops_metadata()) metadata->InvalidateAll();  // as OnControl: DDL may change statement shapes
    };
    impl->watch = client::InvalidationWatch::Start(impl->executors[0], impl->transport, impl->cache, std::move(w));
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() { Stop(); }

const std::string& Client::connection_string() const { return impl_->connection_string; }

void Client::Stop() { impl_->Stop(); }

ClientStats Client::Stats() const {
  ClientStats s;
  {
    std::vector<std::shared_ptr<ClientSession>> live;  // released after the lock (~ClientSession locks mu)
    std::lock_guard lock(impl_->mu);
    s.sessions = impl_->sessions.size();
    s.bytes_received = impl_->bytes_received_closed;
    s.bytes_sent = impl_->bytes_sent_closed;
    for (auto& [ptr, weak] : impl_->sessions) {
      if (auto session = weak.lock()) {
        s.bytes_received += session->received_.load(std::memory_order_relaxed);
        s.bytes_sent += session->sent_.load(std::memory_order_relaxed);
        live.push_back(std::move(session));
      }
    }
  }
  s.accepted = impl_->accepted.load(std::memory_order_relaxed);
  if (impl_->cache) {
    client::ClientTierStats c = impl_->cache->Stats();
    s.cache_enabled = true;
    s.cache_local_hits = c.local_hits;
    s.cache_stores = c.tier.stores;
    s.cache_evictions = c.tier.evictions;
    s.cache_invalidations = c.invalidations;
    s.cache_refused_stale = c.refused_stale;
    s.cache_watch_subscribed = c.subscribed;
    s.cache_watch_subscriptions = c.subscriptions;
    s.cache_refused_unwatched = c.refused_unwatched;
    s.cache_bytes = c.tier.bytes;
    s.cache_entries = c.tier.entries;
  }
  return s;
}

std::vector<ClientSessionInfo> Client::Sessions() const {
  std::vector<std::shared_ptr<ClientSession>> live;  // released after the lock (~ClientSession locks mu)
  std::vector<ClientSessionInfo> out;
  std::lock_guard lock(impl_->mu);
  for (auto& [ptr, weak] : impl_->sessions) {
    auto s = weak.lock();
    if (!s) continue;
    out.push_back(s->info());
    out.back().state = s->shown_state();
    live.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

bool Client::Kill(uint64_t id) {
  std::vector<std::shared_ptr<ClientSession>> live;  // released after the lock (~ClientSession locks mu)
  std::shared_ptr<ClientSession> target;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& [ptr, weak] : impl_->sessions) {
      auto s = weak.lock();
      if (!s) continue;
      if (s->info().id == id) target = s;
      live.push_back(std::move(s));
    }
  }
  if (!target) return false;
  asio::any_io_executor ex = target->executor();
  asio::post(ex, [target] { target->Kill(target); });
  return true;
}

std::string Client::CacheReport() const {
  const client::StatementMetadataStats m = impl_->metadata->Stats();
  std::string metadata = fmt::format(
      "statement metadata: local answers {} stores {} entries {} mismatches {} deferred failures {} "
      "invalidations {} link flights {}\n",
      m.local_answers, m.stores, m.entries, m.mismatches, m.deferred_failures, m.invalidations,
      impl_->link_flights.load(std::memory_order_relaxed));
  if (!impl_->cache) return "client tier: off\n" + metadata;
  client::ClientTierStats s = impl_->cache->Stats();
  return fmt::format(
             "client tier: local hits {} stores {} refused-stale {} invalidations {} evictions {} entries {} bytes {}\n",
             s.local_hits, s.tier.stores, s.refused_stale, s.invalidations, s.tier.evictions, s.tier.entries,
             s.tier.bytes) +
         metadata;
}

}  // namespace hyperpool
