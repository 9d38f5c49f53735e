// The Client half: a local PostgreSQL "server" for the app's driver. It
// answers the whole handshake itself (SCRAM-SHA-256 against a verifier
// computed once at Create, then the origin's cached ParameterStatus values),
// and only when the app sends its first real message does it open a Link to
// the Endpoint, carrying the hello and those first messages in one Send
// (docs/architecture.md, "The link protocol").
//
// The session (one per app connection) is ClientSession (client_session.h);
// the state the sessions share is Client::Impl (client_impl.h).

#include "hyperpool/client.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <fmt/format.h>

#include "cache/tier.h"
#include "client/app_access.h"
#include "client/client_cache.h"
#include "client/client_impl.h"
#include "client/client_session.h"
#include "client/client_util.h"
#include "client/invalidation_watch.h"
#include "client/link_ready.h"
#include "client/link_trace.h"
#include "client/statement_metadata.h"
#include "client/unix_listener.h"
#include "hyperpool/admin.h"
#include "protocol/auth/auth_util.h"
#include "protocol/auth/scram.h"
#include "protocol/codec.h"

namespace hyperpool {
namespace {

// Asio does not open sockets close-on-exec: without this a child process the
// host forks (psql, a driver's helper) would inherit the listener and keep the
// port open after Stop().
// FD_CLOEXEC is the only descriptor flag, so it is set without reading the
// others first (one syscall per accepted connection, not two).
void SetCloseOnExec(int fd) { ::fcntl(fd, F_SETFD, FD_CLOEXEC); }

}  // namespace

// ---- Client::Impl ----

asio::any_io_executor Client::Impl::NextSessionExecutor() {
  // An in-process Endpoint's own executor: the session's Endpoint side runs
  // there, so its units of work never cross threads (direct links).
  if (std::optional<asio::any_io_executor> preferred = transport.session_executor()) return *preferred;
  size_t index = next_executor.fetch_add(1, std::memory_order_relaxed) % executors.size();
  return options.one_thread_per_executor ? executors[index] : asio::any_io_executor(asio::make_strand(executors[index]));
}

void Client::Impl::MakeIdleSweeps() {
  // NextSessionExecutor's choices: the in-process Endpoint's executor, or
  // the workers' own when each runs one thread (strands made per session
  // otherwise: no sweep).
  if (std::optional<asio::any_io_executor> preferred = transport.session_executor()) {
    idle_sweeps.push_back(std::make_unique<IdleSweep>(*preferred));
  } else if (options.one_thread_per_executor) {
    for (const asio::any_io_executor& ex : executors) idle_sweeps.push_back(std::make_unique<IdleSweep>(ex));
  }
}

Client::Impl::IdleSweep* Client::Impl::IdleSweepFor(const asio::any_io_executor& executor) {
  for (const std::unique_ptr<IdleSweep>& sweep : idle_sweeps) {
    if (sweep->executor == executor) return sweep.get();
  }
  return nullptr;
}

asio::awaitable<void> Client::Impl::AcceptLoop(std::shared_ptr<Impl> self) {
  for (;;) {
    asio::any_io_executor session_executor = NextSessionExecutor();
    // No structured binding here: g++ 12 mishandles the lifetime of a
    // non-trivial object bound from a co_await result.
    // The peer's address comes with accept() itself: no getpeername.
    tcp::endpoint peer;
    std::tuple<asio::error_code, tcp::socket> accepted =
        co_await acceptor.async_accept(session_executor, peer, kAsTuple);
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
    StartSession(self, std::move(socket), peer);
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
    StartSession(self, std::move(socket), std::nullopt);
  }
}

void Client::Impl::StartSession(std::shared_ptr<Impl> self, tcp::socket socket, std::optional<tcp::endpoint> peer) {
  accepted.fetch_add(1, std::memory_order_relaxed);
  SetCloseOnExec(socket.native_handle());
  // Non-blocking from the start, as the user's setting: the session's first
  // read then needs no FIONBIO of its own, and its writes try the socket
  // directly (ClientSession::WriteApp). One ioctl per connection, not two.
  asio::error_code nb_ec;
  socket.non_blocking(true, nb_ec);
  if (peer && peer->port() == 0) peer.reset();
  auto session = std::make_shared<ClientSession>(self, std::move(socket), peer);
  {
    std::lock_guard lock(mu);
    sessions[session.get()] = session;
    session->SetListed(next_session_id.fetch_add(1, std::memory_order_relaxed), std::chrono::system_clock::now());
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
    error = ErrorFrame(pr::LinkFailure("could not reach the hyperpool endpoint"));
  } else if (stopping) {
    (*link)->Close();
    error = ErrorFrame(pr::AdminTermination());
  } else {
    probe_link = std::move(*link);
    std::string buf;
    client::LinkReadyReader ready;
    for (;;) {
      size_t consumed = 0;
      const client::LinkReadyReader::Result r = ready.Read(buf, &consumed);
      if (r == client::LinkReadyReader::Result::kReady) {
        fresh = ready.TakeParams();
        break;
      }
      if (r == client::LinkReadyReader::Result::kRefused) {
        error = ready.error();
        break;
      }
      if (r == client::LinkReadyReader::Result::kMalformed) {
        error = ErrorFrame(pr::LinkFailure("malformed answer from the hyperpool endpoint"));
        break;
      }
      if (!probe_link) break;
      absl::StatusOr<size_t> n = co_await probe_link->Receive(buf);
      if (!n.ok()) {
        error = ErrorFrame(pr::LinkFailure("the hyperpool endpoint closed the link before it was ready"));
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
  impl->handshake_config.replication = impl->options.replication;
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
  impl->core_config.cache = impl->cache.get();
  impl->core_config.metadata = impl->metadata.get();
  impl->core_config.max_query_bytes = impl->options.cache.max_query_bytes;
  impl->core_config.max_message_length = static_cast<uint32_t>(
      std::min<size_t>(impl->options.max_message_size, pr::kDefaultMaxMessageLength));
  // (The sessions hold the Impl, so it outlives every call.)
  impl->core_config.intern_key = [raw = impl.get()](std::string base) {
    std::lock_guard lock(raw->mu);
    return raw->key_bases.Intern(base, [&base] { return std::move(base); });
  };
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
  s.login_time = impl_->login_time.Snapshot();
  s.links_released = impl_->links_released.load(std::memory_order_relaxed);
  s.quiet_parks = impl_->quiet_parks.load(std::memory_order_relaxed);
  s.quiet_wakes = impl_->quiet_wakes.load(std::memory_order_relaxed);
  s.quiet_sessions = static_cast<size_t>(std::max<int64_t>(0, impl_->quiet_now.load(std::memory_order_relaxed)));
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
    out.push_back(s->Info());
    live.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

bool Client::SignalAppSession(std::int32_t app_pid, bool terminate) {
  std::shared_ptr<ClientSession> target;  // released after the lock (~ClientSession locks mu)
  {
    std::lock_guard lock(impl_->mu);
    auto key = impl_->cancel_keys.find(app_pid);
    if (key == impl_->cancel_keys.end()) return false;
    auto session = impl_->sessions.find(key->second.session);
    if (session == impl_->sessions.end()) return false;
    target = session->second.lock();
  }
  if (!target) return false;
  if (terminate) {
    asio::any_io_executor ex = target->executor();
    asio::post(ex, [target] { target->Kill(target); });
  }
  return true;
}

bool Client::Kill(uint64_t id) {
  std::vector<std::shared_ptr<ClientSession>> live;  // released after the lock (~ClientSession locks mu)
  std::shared_ptr<ClientSession> target;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& [ptr, weak] : impl_->sessions) {
      auto s = weak.lock();
      if (!s) continue;
      if (s->id() == id) target = s;
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
