// The Endpoint half: per-link sessions that lend pooled origin connections
// per unit of work (docs/architecture.md, "The link protocol" and "Failure
// handling"). This file: Endpoint::Create and the public methods. The
// per-link Session is in endpoint_session.h (its methods in
// endpoint_session.cc and endpoint_session_pump.cc); the state they share
// is Endpoint::Impl (endpoint_impl.h).

#include "hyperpool/endpoint.h"

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <asio/post.hpp>
#include <fmt/format.h>

#include "absl/strings/cord.h"
#include "endpoint/endpoint_cache.h"
#include "endpoint/endpoint_impl.h"
#include "endpoint/endpoint_session.h"
#include "endpoint/listener.h"
#include "endpoint/origin_config.h"
#include "endpoint/origin_connection.h"
#include "endpoint/origin_password.h"
#include "endpoint/pin_budget.h"
#include "endpoint/settings_replay.h"
#include "pool/pool.h"
#include "pool/release_policy.h"

namespace hyperpool {
namespace {

absl::Status FailureToStatus(const endpoint::OriginFailure& failure) {
  absl::Status status;
  switch (failure.failure) {
    case ValidationFailure::kBadCredentials:
      status = absl::PermissionDeniedError(failure.message);
      break;
    case ValidationFailure::kNoSuchDatabase:
      status = absl::NotFoundError(failure.message);
      break;
    case ValidationFailure::kTimeout:
      status = absl::DeadlineExceededError(failure.message);
      break;
    default:
      status = absl::UnavailableError(failure.message);
      break;
  }
  return protocol::WithSqlState(std::move(status), failure.sqlstate);
}

}  // namespace

namespace endpoint::detail {

asio::awaitable<absl::Status> TimedPing(std::weak_ptr<Endpoint::Impl> weak, OriginConnection& conn) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = co_await conn.Ping();
  if (status.ok()) {
    if (auto self = weak.lock()) {
      self->RecordOriginRtt(
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start));
    }
  }
  co_return status;
}

asio::awaitable<absl::Status> MeasureOriginRtt(std::shared_ptr<Endpoint::Impl> ep) {
  auto lease = co_await ep->pool->Acquire();
  if (!lease.ok()) co_return lease.status();
  auto& conn = lease->As<OriginConnection>();
  absl::Status pinged = co_await TimedPing(ep, conn);
  lease->Release(DecideRelease({.mode = ep->options.pool.mode,
                                .status = ToPoolStatus(conn.transaction_status()),
                                .client_gone = true,
                                .broken = conn.broken() || !pinged.ok(),
                                .lifetime_exceeded = lease->lifetime_exceeded()}));
  if (!pinged.ok()) {
    co_return protocol::WithSqlState(
        absl::AbortedError(fmt::format("hyperpool: the origin did not answer: {}", std::string(pinged.message()))),
        kSqlStateConnectionFailure);
  }
  co_return absl::OkStatus();
}

}  // namespace endpoint::detail

// ---------------------------------------------------------------------------
// Endpoint
// ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Endpoint>> Endpoint::Create(asio::any_io_executor executor,
                                                           EndpointOptions options) {
  auto config = ParseOriginConfig(options.origin);
  if (!config.ok()) return config.status();
  if (absl::Status s = endpoint::ResolveOriginPassword(*config, endpoint::PasswordSourcesOf(options)); !s.ok()) {
    return s;
  }
  auto impl = std::make_shared<Impl>();
  impl->executor = executor;
  impl->config = std::make_shared<const OriginConfig>(std::move(*config));
  impl->options = std::move(options);
  if (impl->options.cache.wal_invalidation == WalInvalidation::kOn &&
      impl->options.cache.max_age == CacheOptions{}.max_age) {
    // Freshness comes from the feed (and no cached row is served while it
    // is down): max age bounds only what the feed cannot see.
    impl->options.cache.max_age = kWalMaxAge;
  }
  impl->on_executor.pin_budget =
      endpoint::PinBudget(endpoint::EffectivePinnedBudget(impl->options.max_pinned, impl->options.pool.max_size));

  endpoint::ConnectOptions connect;
  connect.timeout = impl->config->connect_timeout.count() > 0
                        ? std::chrono::duration_cast<std::chrono::milliseconds>(impl->config->connect_timeout)
                        : impl->options.pool.connect_timeout;

  PoolCallbacks callbacks;
  std::weak_ptr<Impl> weak = impl;
  std::shared_ptr<const OriginConfig> cfg = impl->config;
  std::shared_ptr<const Logger> logger = impl->options.logger ? impl->options.logger : Logger::Default();
  callbacks.open = [weak, cfg, connect, executor, logger]()
      -> asio::awaitable<absl::StatusOr<std::unique_ptr<PooledConnection>>> {
    endpoint::ConnectResult r = co_await endpoint::ConnectOrigin(executor, *cfg, connect);
    const std::string origin = fmt::format("{}:{}", cfg->host, cfg->port);
    if (!r.ok()) {
      absl::Status failed = FailureToStatus(r.failure);
      logger->Log(LogLevel::kWarn, "origin_connect_failed", {{"origin", origin}, {"reason", std::string(failed.message())}});
      co_return failed;
    }
    if (logger->log_connections()) {
      logger->Log(LogLevel::kInfo, "origin_connect",
                  {{"origin", origin}, {"backend_pid", std::to_string(r.connection->backend_key().process_id)}});
    }
    r.connection->set_logger(logger);
    if (auto self = weak.lock()) self->on_executor.origin_parameters = r.connection->parameters();
    co_return std::unique_ptr<PooledConnection>(std::move(r.connection));
  };
  callbacks.health_check = [weak](PooledConnection& c) { return TimedPing(weak, static_cast<OriginConnection&>(c)); };
  // Session mode: DISCARD ALL before the next session (release_policy.h).
  callbacks.reset = [](PooledConnection& c) { return endpoint::ResetConnection(static_cast<OriginConnection&>(c)); };
  callbacks.rollback = [](PooledConnection& c) {
    return endpoint::RollbackConnection(static_cast<OriginConnection&>(c));
  };
  auto pool = Pool::Create(executor, impl->options.pool, std::move(callbacks));
  if (!pool.ok()) return pool.status();
  impl->pool = std::move(*pool);
  impl->connect_walsender = [cfg, connect, executor](std::string replication,
                                                      std::vector<std::pair<std::string, std::string>> app_parameters)
      -> asio::awaitable<endpoint::ConnectResult> {
    OriginConfig c = *cfg;
    // The app's own startup parameters, as a direct login would send them.
    for (auto& [name, value] : app_parameters) {
      if (name == "application_name") {
        c.application_name = std::move(value);
      } else {
        c.settings.emplace_back(std::move(name), std::move(value));
      }
    }
    c.settings.emplace_back("replication", std::move(replication));
    endpoint::ConnectOptions o = connect;
    o.default_application_name = "hyperpool walsender";
    co_return co_await endpoint::ConnectOrigin(executor, c, o);
  };
  endpoint::ListenerConnection::Connect listener_connect = [cfg, connect, executor]() {
    return endpoint::ConnectOrigin(executor, *cfg, connect);
  };
  impl->listener = std::make_shared<endpoint::ListenerConnection>(
      executor, std::move(listener_connect),
      [weak](endpoint::ListenRegistry::Subscriber id, std::string_view raw) {
        auto self = weak.lock();
        if (!self) return;
        auto it = self->on_executor.listen_sessions.find(id);
        if (it != self->on_executor.listen_sessions.end()) it->second->DeliverNotification(raw);
      },
      endpoint::ListenerConnection::Options{});
  const std::string cache_db = cfg->dbname.empty() ? cfg->user : cfg->dbname;
  auto shared_tier = endpoint::EndpointCache::MakeSharedTier(
      executor, impl->options.cache, fmt::format("{}:{}/{}", cfg->host, cfg->port, cache_db));
  if (!shared_tier.ok()) return shared_tier.status();
  impl->cache = std::make_shared<endpoint::EndpointCache>(
      executor, impl->options.cache, cache_db, cfg->user, impl->options.pool.max_size,
      [weak]() -> asio::awaitable<absl::StatusOr<Lease>> {
        auto self = weak.lock();
        if (!self || self->stopped.load()) co_return absl::CancelledError("endpoint stopped");
        co_return co_await self->pool->Acquire();
      },
      std::move(*shared_tier));
  if (impl->options.cache.enabled && impl->options.cache.wal_invalidation != WalInvalidation::kOff) {
    endpoint::WalFeed::Options feed;
    feed.core.mode = impl->options.cache.wal_invalidation;
    feed.core.bound = impl->options.cache.wal_max_lag;
    feed.core.hard_limit = impl->options.cache.wal_hard_lag;
    feed.probe_interval = std::chrono::milliseconds(0);  // a quarter of the bound
    // The Endpoint's own origin login; the stream's with replication=database.
    endpoint::WalFeed::Connect feed_connect = [cfg, connect, executor](bool replication)
        -> asio::awaitable<endpoint::ConnectResult> {
      OriginConfig c = *cfg;
      if (replication) c.settings.emplace_back("replication", "database");
      endpoint::ConnectOptions o = connect;
      o.default_application_name = replication ? "hyperpool wal feed" : "hyperpool wal probe";
      co_return co_await endpoint::ConnectOrigin(executor, c, o);
    };
    impl->wal_feed =
        std::make_shared<endpoint::WalFeed>(executor, feed, std::move(feed_connect), impl->cache, logger);
    std::weak_ptr<endpoint::WalFeed> weak_feed = impl->wal_feed;
    impl->cache->SetServeGate(
        [weak_feed] {
          auto f = weak_feed.lock();
          return !f || f->ServeCached();
        },
        [weak_feed] {
          auto f = weak_feed.lock();
          return f ? f->ServeBudget() : std::chrono::milliseconds::max();
        });
    impl->wal_feed->Start();
  }
  return std::unique_ptr<Endpoint>(new Endpoint(std::move(impl)));
}

Endpoint::Endpoint(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Endpoint::~Endpoint() { Stop(); }

asio::any_io_executor Endpoint::executor() const { return impl_->executor; }

void Endpoint::Accept(std::unique_ptr<Link> link) {
  std::shared_ptr<Impl> impl = impl_;
  asio::post(impl->executor, [impl, link = std::move(link)]() mutable {
    impl->NoteThread();
    if (impl->stopped.load()) {
      link->Close();
      return;
    }
    auto session = std::make_shared<Session>(impl, std::move(link));
    {
      std::lock_guard<std::mutex> lock(impl->mutex);
      impl->sessions.insert(session.get());
      impl->session_count.fetch_add(1);
    }
    session->Start();
  });
}

void Endpoint::Stop() {
  std::shared_ptr<Impl> impl = impl_;
  if (!impl->stopped.exchange(true)) {
    asio::post(impl->executor, [impl] {
      impl->pool->Stop();
      impl->listener->Stop();
      if (impl->cache) impl->cache->Stop();
      if (impl->wal_feed) impl->wal_feed->Stop();
      std::vector<Session*> sessions;
      {
        std::lock_guard<std::mutex> lock(impl->mutex);
        sessions.assign(impl->sessions.begin(), impl->sessions.end());
      }
      for (Session* s : sessions) s->Shutdown();
    });
  }
  // On the executor's own thread nothing can finish while we block: the
  // work above completes once control returns to the executor.
  if (impl->executor_thread.load() == std::this_thread::get_id()) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::unique_lock<std::mutex> lock(impl->mutex);
  while (std::chrono::steady_clock::now() < deadline) {
    const PoolStats stats = impl->pool->Stats();
    if (impl->sessions.empty() && stats.open == 0 && stats.closing == 0 && impl->pending_cancels.load() == 0 &&
        !impl->listener->running() && !(impl->wal_feed && impl->wal_feed->running())) {
      return;
    }
    impl->sessions_done.wait_for(lock, std::chrono::milliseconds(5));
  }
}

// The operator controls post to the executor the pool lives on (pool.h).
void Endpoint::PausePool() {
  asio::post(impl_->executor, [impl = impl_] { impl->pool->Pause(); });
}
void Endpoint::ResumePool() {
  asio::post(impl_->executor, [impl = impl_] { impl->pool->Resume(); });
}
bool Endpoint::SignalAppSession(std::int32_t app_pid, bool terminate) {
  std::shared_ptr<Session> target = Session::FindSignalTarget(*impl_, app_pid, /*caller=*/0);
  if (!target) return false;
  asio::post(impl_->executor, [target = std::move(target), terminate] { target->Signal(terminate); });
  return true;
}

void Endpoint::ReconnectPool() {
  asio::post(impl_->executor, [impl = impl_] { impl->pool->Reconnect(); });
}
absl::Status Endpoint::UpdatePool(PoolOptions options) {
  if (options.max_size < 1 || options.min_idle > options.max_size) {
    return absl::InvalidArgumentError("pool size must be at least 1 and at least min_idle");
  }
  asio::post(impl_->executor, [impl = impl_, options] { (void)impl->pool->Update(options); });
  return absl::OkStatus();
}

std::vector<OriginServerInfo> Endpoint::Servers() const {
  std::shared_ptr<Impl> impl = impl_;
  auto collect = [impl] {
    std::vector<OriginServerInfo> out;
    const auto steady_now = std::chrono::steady_clock::now();
    const auto system_now = std::chrono::system_clock::now();
    for (const PoolServerInfo& p : impl->pool->Servers()) {
      OriginServerInfo info;
      info.state = p.state;
      info.backend_pid = p.backend_pid;
      if (p.opened_at != std::chrono::steady_clock::time_point{}) {
        info.connect_time = system_now - std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                             steady_now - p.opened_at);
      }
      info.pinned = p.pinned;
      info.retired = p.retired;
      out.push_back(std::move(info));
    }
    return out;
  };
  // On the executor's own thread the pool can be read at once (and a post
  // would wait for ourselves).
  if (impl->executor_thread.load() == std::this_thread::get_id()) return collect();
  auto promise = std::make_shared<std::promise<std::vector<OriginServerInfo>>>();
  std::future<std::vector<OriginServerInfo>> future = promise->get_future();
  asio::post(impl->executor, [impl, promise, collect] {
    impl->NoteThread();
    promise->set_value(collect());
  });
  if (future.wait_for(std::chrono::seconds(2)) != std::future_status::ready) return {};
  return future.get();
}

EndpointStats Endpoint::Stats() const {
  EndpointStats s;
  const PoolStats pool = impl_->pool->Stats();
  s.sessions = impl_->session_count.load();
  s.cache_watches = impl_->watch_count.load();
  s.origin_open = pool.open;
  s.origin_idle = pool.idle;
  s.waiting = pool.waiting;
  s.origin_lent = pool.lent;
  s.pool_max_size = pool.max_size;
  s.pool_paused = pool.paused;
  s.max_wait_us = static_cast<std::size_t>(std::chrono::duration_cast<std::chrono::microseconds>(pool.max_wait).count());
  s.transactions = impl_->transactions.load();
  s.acquire_timeouts = impl_->acquire_timeouts.load();
  s.discarded = impl_->discarded.load();
  s.origin_discarded = pool.discarded;
  s.pinned_sessions = impl_->pinned_sessions.load();
  s.sleeping_sessions = impl_->sleeping_sessions.load();
  auto pins = [&](PinReason r) { return impl_->pins[static_cast<std::size_t>(r)].load(); };
  for (const auto& p : impl_->pins) s.pins_total += p.load();
  s.pins_prepared_sql = pins(PinReason::kPreparedSql);
  s.pins_temp_table = pins(PinReason::kTempTable);
  s.pins_advisory_lock = pins(PinReason::kAdvisoryLock);
  s.pins_listen = pins(PinReason::kListen);
  s.pins_with_hold_cursor = pins(PinReason::kWithHoldCursor);
  s.pins_set_role = pins(PinReason::kSetRole);
  s.pinned_connections = impl_->pinned_connections.load();
  s.pins_rejected = impl_->pins_rejected.load();
  s.pinned_idle_timeouts = impl_->pinned_idle_timeouts.load();
  s.cancels_forwarded = impl_->cancels_forwarded.load();
  s.cancels_ignored = impl_->cancels_ignored.load();
  s.notifications_delivered = impl_->notifications_delivered.load();
  s.listener_reconnects = impl_->listener->reconnects();
  s.origin_rtt_us = impl_->origin_rtt_us.load();
  s.queries = impl_->queries.load(std::memory_order_relaxed);
  s.transaction_time = impl_->transaction_time.Snapshot();
  s.acquire_wait = impl_->acquire_wait.Snapshot();
  if (impl_->cache) {
    const endpoint::EndpointCacheReport c = impl_->cache->Report(0);
    s.cache_hits = c.tier.hits;
    s.cache_stale_hits = c.tier.stale_hits;
    s.cache_misses = c.tier.misses;
    s.cache_coalesced = c.tier.coalesced;
    s.cache_served = c.served;
    s.cache_uncacheable = c.uncacheable;
    s.cache_bypassed = c.bypassed;
    s.cache_stores = c.tier.stores;
    s.cache_evictions = c.tier.evictions;
    s.cache_invalidations = c.tier.invalidations;
    s.cache_write_invalidations = c.invalidations;
    s.cache_bytes = c.tier.bytes;
    s.cache_entries = c.tier.entries;
    s.redis_configured = c.shared_configured;
    s.redis_up = c.shared.up;
    s.redis_errors = c.shared.errors;
    s.shared_hits = c.shared.hits;
    s.shared_misses = c.shared.misses;
    s.shared_served = c.shared_served;
    s.shared_invalidations_received = c.shared.received;
    s.cache_stale_if_error = c.stale_if_error;
    s.cache_catalog_reads = c.catalog_reads;
  }
  if (impl_->wal_feed) impl_->wal_feed->FillStats(s);
  return s;
}

std::string Endpoint::CacheReport(std::size_t top) const {
  return impl_->cache ? endpoint::FormatCacheReport(impl_->cache->Report(top)) : std::string();
}

}  // namespace hyperpool
