// ClientSession (client_session.h), part one: construction, the session's
// state and timers, the socket helpers, the handshake (with the origin's
// parameters and cancel keys) and the admin console. Part two is
// client_session_forward.cc.
#include "client/client_session.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>

#include "client/app_tls.h"
#include "client/client_util.h"
#include "client/server_handshake.h"
#include "hyperpool/admin.h"
#include "protocol/auth/auth_util.h"
#include "protocol/codec.h"

namespace hyperpool {

ClientSession::ClientSession(std::shared_ptr<Client::Impl> impl, tcp::socket socket,
                             const std::optional<tcp::endpoint>& peer)
    : ClientSession(std::move(impl), std::move(socket), client::PeerAddress(peer)) {}

ClientSession::ClientSession(std::shared_ptr<Client::Impl> impl, tcp::socket socket, client::Peer peer)
    : impl_(std::move(impl)),
      socket_(std::move(socket)),
      peer_text_(std::move(peer.text)),
      started_(std::chrono::steady_clock::now()),
      handshake_timers_(std::make_unique<HandshakeTimers>(socket_.get_executor())),
      idle_sweep_(impl_->IdleSweepFor(socket_.get_executor())),
      peer_unix_(peer.unix_socket) {
  handshake_timers_->peer_host = std::move(peer.host);
}

ClientSession::~ClientSession() {
  if (logged_in_ && impl_->logger->log_disconnections()) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_);
    impl_->logger->Log(LogLevel::kInfo, "session_end",
                       {{"client", peer_text_}, {"session", std::to_string(cancel_pid_)}, {"user", user_},
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

ClientSessionInfo ClientSession::Info() const {
  ClientSessionInfo info;
  info.id = id_;
  info.user = user_;
  info.database = database_;
  info.address = ShownAddress();
  info.connect_time = connect_time_;
  info.state = shown_state();
  return info;
}

std::string ClientSession::shown_state() const {
  static constexpr const char* kNames[] = {"login", "login", "login", "idle", "active", "closed"};
  return admin_ ? "admin" : kNames[shown_state_.load(std::memory_order_relaxed)];
}

void ClientSession::Kill(std::shared_ptr<ClientSession> self) {
  if (reason_ != EndReason::kNone || state_ == State::kClosed) return;
  reason_ = EndReason::kKilled;
  DisarmIdleTimer();
  asio::co_spawn(executor(),
                 EndSession(self, pr::AdminTermination()),
                 asio::detached);
}

asio::awaitable<void> ClientSession::Run(std::shared_ptr<ClientSession> self) {
  StartWatchdog();
  bool ready = co_await Handshake();
  std::string replication = std::move(handshake_timers_->replication);
  client::ParamList app_params = std::move(handshake_timers_->app_params);
  handshake_timers_.reset();  // cancels the login timeout
  if (!ready) {
    CloseSocket();
    if (state_ != State::kClosed) SetState(State::kClosed);
    co_return;
  }
  if (admin_) {
    co_await RunAdmin();
    co_return;
  }
  if (!replication.empty()) {
    hello_params_ = std::make_shared<const client::ParamList>(std::move(app_params));  // its one link's hello
    co_await RunTunnel(self, std::move(replication));
    co_return;
  }
  // Accept (the constructor) to the ReadyForQuery that Handshake() wrote.
  impl_->login_time.Observe(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started_));
  ArmIdleTimer();
  core_.Start(&impl_->core_config, database_, app_params);
  {
    // Kept once per distinct set (most of an app's connections send the
    // same): every link of the session opens with them.
    std::string key;
    for (const auto& [name, value] : app_params) {
      key += std::to_string(name.size()) + ':' + name + std::to_string(value.size()) + ':' + value;
    }
    std::lock_guard lock(impl_->mu);
    hello_params_ = impl_->hello_params.Intern(key, [&app_params] { return std::move(app_params); });
  }
  PumpApp();
}

void ClientSession::ParkApp() {
  if (app_io_) app_io_->in.ReleaseIfEmpty(idle_sweep_ != nullptr ? &idle_sweep_->buffers : nullptr);
  app_parked_ = true;
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](asio::error_code ec) {
    self->OnAppReadable(ec);
  });
}

void ClientSession::OnAppReadable(asio::error_code ec) {
  app_parked_ = false;
  if (quiet_ == kGoingQuiet) {
    // GoQuiet's cancellation (or the data that beat it: read as usual).
    quiet_ = kNotQuiet;
    if (ec == asio::error::operation_aborted && reason_ == EndReason::kNone && socket_.is_open()) {
      if (state_ == State::kIdle && idle_sweep_ != nullptr &&
          idle_sweep_->quiet.Watch(socket_.native_handle(), shared_from_this())) {
        quiet_ = kQuiet;
        impl_->quiet_parks.fetch_add(1, std::memory_order_relaxed);
        impl_->quiet_now.fetch_add(1, std::memory_order_relaxed);
      } else {
        ParkApp();
      }
      return;
    }
  }
  // As PumpApp: the idle timeout or a Kill ended the session
  // (EndSession closes); a closed socket or a failed read ends forwarding.
  if (reason_ == EndReason::kIdleTimeout || reason_ == EndReason::kKilled) return;
  if (ec || reason_ != EndReason::kNone) {
    AppReadEnded();
    return;
  }
  // Most wake-ups carry a whole message; a large one is read in chunks of
  // what its header declared (InBuffer bounds them). Into a spare of the
  // executor's when nothing is buffered (the session parked without one).
  if (idle_sweep_ != nullptr) In().TakeSpare(idle_sweep_->buffers);
  auto [space, space_size] = In().Prepare(In().ReadSize(app_want_));
  const size_t n = socket_.read_some(asio::buffer(space, space_size), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    In().Commit(0);
    ParkApp();
    return;
  }
  if (ec || n == 0) {
    AppReadEnded();
    return;
  }
  received_.store(received_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  In().Commit(n);
  PumpApp();
}

void ClientSession::Shutdown() {
  if (reason_ == EndReason::kNone) reason_ = EndReason::kStopped;
  timed_out_ = true;
  DisarmIdleTimer();
  if (handshake_timers_) {
    handshake_timers_->params.cancel();
    handshake_timers_->watchdog.cancel();
  }
  CloseLink();
  CloseSocket();
}

void ClientSession::OnParams(std::string error_frame) {
  if (!handshake_timers_) return;  // (the handshake is over: nothing waits for them)
  handshake_timers_->params_error = std::move(error_frame);
  handshake_timers_->params_notified = true;
  handshake_timers_->params.cancel();
}

void ClientSession::SetState(State next) {
  // Allowed: forward along the handshake, kIdle <-> kBusy, anything -> kClosed.
  bool ok = next == State::kClosed || static_cast<int>(next) > static_cast<int>(state_) ||
            (state_ == State::kBusy && next == State::kIdle);
  if (!ok) Log(fmt::format("internal: session state {} -> {} refused", int(state_), int(next)));
  if (ok) state_ = next;
  shown_state_.store(static_cast<uint8_t>(state_), std::memory_order_relaxed);
}

void ClientSession::StartWatchdog() {
  handshake_timers_->watchdog.expires_after(impl_->options.handshake_timeout);
  handshake_timers_->watchdog.async_wait([weak = weak_from_this()](asio::error_code ec) {
    if (ec) return;
    auto self = weak.lock();
    if (!self) return;
    if (self->state_ == State::kIdle || self->state_ == State::kBusy || self->state_ == State::kClosed) return;
    self->timed_out_ = true;
    if (self->state_ == State::kAwaitingParams) {
      if (self->handshake_timers_) self->handshake_timers_->params.cancel();  // Handshake() reports the timeout itself
    } else {
      self->CloseSocket();
    }
  });
}

void ClientSession::NoteIdle() {
  if (idle_sweep_ == nullptr || idle_queued_) return;
  idle_queued_ = true;
  idle_sweep_->sweep.Note(idle_sweep_->executor, weak_from_this());
}

void SweepIdleClientSession(ClientSession& session) {
  session.idle_queued_ = false;
  const uint8_t release = session.release_stage_;
  session.release_stage_ = 0;
  if (session.state_ != ClientSession::State::kIdle) return;
  session.core_.ReleaseIdleState();
  if (session.app_io_) session.app_io_->out.ReleaseIfEmpty();
  session.GoQuiet();
  // A release offer (OnReleaseOffer) holds while the app sends nothing:
  // noted, then one more whole sweep period, then the link goes.
  if (release == 0 || session.release_generation_ != static_cast<uint32_t>(session.idle_generation_)) return;
  if (release == 1) {
    session.release_stage_ = 2;
    session.NoteIdle();
    return;
  }
  (void)session.ReleaseLink(session.release_wrote_);
}

void ClientSession::ArmIdleTimer() {
  NoteIdle();  // (a ReadyForQuery 'I' went out: every caller says so)
  ++idle_generation_;
  if (impl_->options.idle_timeout <= std::chrono::milliseconds(0) || reason_ != EndReason::kNone) return;
  if (!idle_timer_) idle_timer_ = std::make_unique<asio::steady_timer>(socket_.get_executor());
  idle_timer_->expires_after(impl_->options.idle_timeout);
  idle_timer_->async_wait([weak = weak_from_this(), generation = idle_generation_](asio::error_code ec) {
    if (ec) return;
    auto self = weak.lock();
    if (!self || self->idle_generation_ != generation) return;
    if (self->state_ != State::kIdle || self->core_.outstanding() != 0 || self->core_.txn_status() != 'I') return;
    if (self->reason_ != EndReason::kNone) return;
    // Set now, not when the coroutine starts: PumpApp must not send on
    // the link in between.
    self->reason_ = EndReason::kIdleTimeout;
    asio::co_spawn(self->executor(),
                   self->EndSession(self, pr::IdleSessionTimeout()),
                   asio::detached);
  });
}

void ClientSession::DisarmIdleTimer() {
  ++idle_generation_;
  if (idle_timer_) idle_timer_->cancel();
}

asio::awaitable<void> ClientSession::EndSession(std::shared_ptr<ClientSession> self, pr::PoolerError error) {
  pending_error_ = ErrorFrame(error);
  Log(fmt::format("closing an app connection: {}", error.message));
  if (link_) {
    // The link reader delivers pending_error_ when the link ends
    // (LinkEnded), after what is queued for the app.
    std::string terminate;
    pr::Encode(pr::Terminate{}, terminate);
    (void)co_await link_->Send(std::move(terminate));
    CloseLink();
    co_return;
  }
  SendAppThenClose(pending_error_);
}

void ClientSession::CloseSocket() {
  if (handshake_timers_) handshake_timers_->tls_abort.Abort();  // a TLS handshake in progress holds the real socket
  std::shared_ptr<ClientSession> quiet;
  if (quiet_ == kQuiet) {
    // Watched by the QuietWatch, not Asio: forgotten before the descriptor
    // closes; the reader ends as a cancelled Asio wait would end it.
    quiet_ = kNotQuiet;
    if (idle_sweep_ != nullptr) quiet = idle_sweep_->quiet.Forget(socket_.native_handle());
  }
  asio::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  if (quiet) {
    impl_->quiet_now.fetch_sub(1, std::memory_order_relaxed);
    asio::post(socket_.get_executor(), [quiet] { quiet->OnAppReadable(asio::error::operation_aborted); });
  }
}

void ClientSession::GoQuiet() {
  if (!app_parked_ || quiet_ != kNotQuiet || state_ != State::kIdle || reason_ != EndReason::kNone ||
      app_write_waiting_ || idle_sweep_ == nullptr || !socket_.is_open()) {
    return;
  }
  quiet_ = kGoingQuiet;
  asio::error_code ec;
  socket_.cancel(ec);  // (the only operation on it: the parked readability wait)
  if (ec) {
    quiet_ = kNotQuiet;
    return;
  }
  // Nothing holds a view of the buffers now (the reader is parked, the
  // writer has nothing queued): both go until the app sends again.
  if (app_io_ && app_io_->in.size() == 0 && app_io_->in.capacity() <= std::string().capacity() &&
      app_io_->out.empty()) {
    app_io_.reset();
  }
}

void WakeQuietClientSession(std::shared_ptr<ClientSession> session) {
  session->quiet_ = ClientSession::kNotQuiet;
  session->impl_->quiet_wakes.fetch_add(1, std::memory_order_relaxed);
  session->impl_->quiet_now.fetch_sub(1, std::memory_order_relaxed);
  session->OnAppReadable({});
}

void ClientSession::CloseLink() {
  if (link_) link_->Close();
}

asio::awaitable<absl::StatusOr<pr::Frame>> ClientSession::ReadFrame(const pr::FrameReader& reader) {
  for (;;) {
    pr::FrameReader::Result r = reader.Read(In().view());
    if (r.is_frame()) co_return r.frame();
    if (r.is_error()) co_return r.status();
    if (!co_await Fill(r.bytes_needed())) co_return absl::UnavailableError("app closed the connection");
  }
}

asio::awaitable<bool> ClientSession::Fill(size_t needed) {
  size_t want = needed > In().size() ? needed - In().size() : 1;
  // A plain read, also between messages: asio waits for it with the socket
  // already in its epoll set (a readability wait instead would re-arm the
  // socket with epoll_ctl on every message). An idle session keeps only a
  // small read buffer (InBuffer::kIdleRead).
  auto [space, space_size] = In().Prepare(In().ReadSize(want));
  auto buffer = asio::buffer(space, space_size);
  auto [ec, n] = co_await socket_.async_read_some(buffer, kAsTuple);
  if (ec || n == 0) co_return false;
  received_.store(received_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  In().Commit(n);
  co_return true;
}

asio::awaitable<void> ClientSession::Write(std::string_view bytes) {
  auto [ec, n] = co_await WriteApp(bytes);
  (void)ec;
  CountSent(n);
}

asio::awaitable<std::tuple<asio::error_code, size_t>> ClientSession::WriteApp(std::string_view bytes) {
  // What the socket takes at once is written without suspending (most
  // answers fit); only the rest waits for the socket.
  asio::error_code ec;
  if (!socket_.non_blocking()) socket_.non_blocking(true, ec);
  size_t written = 0;
  if (!ec) {
    written = socket_.write_some(asio::buffer(bytes.data(), bytes.size()), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      ec.clear();
      written = 0;
    }
    if (ec || written == bytes.size()) co_return std::tuple<asio::error_code, size_t>{ec, written};
  }
  auto [wec, n] = co_await asio::async_write(socket_, asio::buffer(bytes.data() + written, bytes.size() - written),
                                             kAsTuple);
  co_return std::tuple<asio::error_code, size_t>{wec, written + n};
}

asio::awaitable<void> ClientSession::Fatal(std::string_view sqlstate, std::string message) {
  std::string out;
  pr::EncodeErrorResponse(out, "FATAL", sqlstate, message);
  co_await Write(out);
  CloseSocket();
  SetState(State::kClosed);
}

// ---- Handshake (PostgreSQL docs, "Message Flow" > "Start-up")

asio::awaitable<bool> ClientSession::Handshake() {
  using Event = client::ServerHandshake::Event;
  // Aliases the Impl's config: no per-connection copy of the users.
  client::ServerHandshake hs(std::shared_ptr<const client::HandshakeConfig>(impl_, &impl_->handshake_config));
  std::string out;  // AuthenticationOk ... ReadyForQuery
  hs.set_peer_host(std::move(handshake_timers_->peer_host));
  if (peer_unix_) hs.set_unix_socket();
  for (;;) {
    client::ServerHandshake::Step step = hs.Advance(In().view());
    In().Consume(step.consumed);
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
          co_await client::AcceptAppTls(std::move(socket_), *impl_->app_tls, step.output, handshake_timers_->tls_abort);
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
    out = std::move(step.output);
    {
      std::lock_guard lock(impl_->mu);  // (Info() reads them on other threads)
      user_ = hs.user();
      database_ = hs.database();
    }
    handshake_timers_->app_params = hs.parameters();
    handshake_timers_->replication = hs.replication();
    break;
  }
  if (state_ == State::kStartup) SetState(State::kAuthenticating);
  if (impl_->options.admin && database_ == impl_->options.admin_database) {
    // The admin console: no origin parameters, no link (RunAdmin).
    admin_ = true;
    co_await Write(out);
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
    co_await Write(out);
    out.clear();
    SetState(State::kAwaitingParams);
    auto params = co_await AwaitParams();
    if (!params) co_return false;
    origin_params = std::move(*params);
  }
  client::ParamList& app_params = handshake_timers_->app_params;
  for (const auto& [name, value] : client::OverlayParams(origin_params, app_params)) {
    pr::Encode(pr::ParameterStatus{name, value}, out);
  }
  // From now on the session asks for what it was told ("SQL, MDY", not a
  // "SQL" whose date order would come from the connection it borrows).
  client::CanonicalizeAppParams(origin_params, app_params);
  if (!RegisterCancelKey()) {
    co_await Fatal(kSqlStateConnectionFailure, "could not generate a cancellation key");
    co_return false;
  }
  pr::Encode(pr::BackendKeyData{cancel_pid_, std::string_view(cancel_secret_.data(), cancel_secret_.size())}, out);
  pr::Encode(pr::ReadyForQuery{pr::TransactionStatus::kIdle}, out);
  SetState(State::kIdle);
  auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(out), kAsTuple);
  CountSent(n);
  if (ec) co_return false;
  logged_in_ = true;
  if (impl_->logger->log_connections()) {
    impl_->logger->Log(LogLevel::kInfo, "session_start",
                       {{"client", peer_text_}, {"session", std::to_string(cancel_pid_)}, {"user", user_},
                        {"db", database_}, {"tls", hs.encrypted() ? "on" : "off"}});
  }
  co_return true;
}

asio::awaitable<std::optional<client::ParamList>> ClientSession::AwaitParams() {
  for (;;) {
    {
      std::lock_guard lock(impl_->mu);
      if (impl_->params) co_return *impl_->params;
      if (!handshake_timers_->params_notified) {
        impl_->params_waiters.push_back(weak_from_this());
        impl_->StartProbeLocked();
      }
    }
    if (!handshake_timers_->params_notified) {
      asio::steady_timer& wait = handshake_timers_->params;
      wait.expires_at(asio::steady_timer::time_point::max());
      co_await wait.async_wait(kAsTuple);
    }
    if (timed_out_) {
      if (reason_ == EndReason::kNone) {
        co_await Fatal(kSqlStateConnectionFailure, "timed out waiting for the origin database");
      }
      co_return std::nullopt;
    }
    if (handshake_timers_->params_notified && !handshake_timers_->params_error.empty()) {
      co_await Write(handshake_timers_->params_error);
      CloseSocket();
      SetState(State::kClosed);
      co_return std::nullopt;
    }
    handshake_timers_->params_notified = false;
  }
}

bool ClientSession::RegisterCancelKey() {
  for (int attempt = 0; attempt < 8; ++attempt) {
    absl::StatusOr<std::string> bytes = auth::RandomBytes(8);
    if (!bytes.ok()) return false;
    // Above 2^22 (Linux's PID_MAX_LIMIT): never a real origin backend's pid,
    // so a pg_terminate_backend of it cannot hit an unrelated backend
    // (docs/architecture.md, "Backend pids").
    uint32_t random = 0;
    std::memcpy(&random, bytes->data(), sizeof random);
    int32_t pid = static_cast<int32_t>((random & 0x7fffffffu) | 0x400000u);
    std::lock_guard lock(impl_->mu);
    if (pid == 0 || impl_->cancel_keys.count(pid) != 0) continue;
    cancel_pid_ = pid;
    std::copy_n(bytes->data() + 4, cancel_secret_.size(), cancel_secret_.begin());
    impl_->cancel_keys[pid] = Client::Impl::CancelTarget{cancel_secret_, this};
    return true;
  }
  return false;
}

asio::awaitable<void> ClientSession::ForwardCancel(int32_t pid, const std::string& secret) {
  std::string session_id;
  std::string database;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->cancel_keys.find(pid);
    if (it != impl_->cancel_keys.end() &&
        auth::ConstantTimeEquals(std::string_view(it->second.secret.data(), it->second.secret.size()), secret)) {
      session_id = it->second.session->session_id_;
      database = it->second.session->database_;
    }
  }
  if (session_id.empty() || impl_->stopping) co_return;  // unknown key, or nothing running yet
  auto link = co_await impl_->transport.Open(executor(), client::BuildCancelHello(session_id, database));
  if (link.ok()) (*link)->Close();
}

void ClientSession::LogRefused(std::string_view reason, bool auth_failed) {
  impl_->logger->Log(auth_failed ? LogLevel::kWarn : LogLevel::kInfo,
                     auth_failed ? "auth_failed" : "connection_refused", {{"client", peer_text_}, {"reason", reason}});
}

// ---- The admin console (include/hyperpool/admin.h)

asio::awaitable<void> ClientSession::RunAdmin() {
  AdminConsole& console = *impl_->options.admin;
  if (!console.IsAdmin(user_)) {
    co_await Fatal(kSqlStateInsufficientPrivilege, fmt::format("permission denied for database \"{}\"", database_));
    co_return;
  }
  AdminLogin login;
  {
    std::lock_guard lock(impl_->mu);
    login.client_id = id_;
    login.address = ShownAddress();
  }
  login.user = user_;
  std::unique_ptr<AdminSession> session = console.Open(login);
  std::string out;
  session->Greeting(out);
  SetState(State::kIdle);
  co_await Write(out);
  pr::FrameReader reader(pr::FrameReader::Mode::kTagged, pr::FrameLimits{.max_message_length = 1u << 20});
  for (bool open = true; open && reason_ == EndReason::kNone;) {
    absl::StatusOr<pr::Frame> frame = co_await ReadFrame(reader);
    if (!frame.ok()) {
      if (absl::IsInvalidArgument(frame.status()) && reason_ == EndReason::kNone) {
        co_await Fatal(kSqlStateProtocolViolation, std::string(frame.status().message()));
      }
      break;
    }
    out.clear();
    open = session->OnMessage(frame->tag, frame->payload, out);
    In().Consume(frame->size());
    if (reason_ == EndReason::kNone) co_await Write(out);
  }
  if (reason_ == EndReason::kKilled) co_return;  // EndSession closes
  CloseSocket();
  SetState(State::kClosed);
}

}  // namespace hyperpool
