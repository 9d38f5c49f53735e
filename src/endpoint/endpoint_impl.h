#pragma once
// Internal to src/endpoint/: the Endpoint's shared state (Endpoint::Impl)
// and the small helpers that endpoint.cc and the Session
// (endpoint_session.h) both use.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>
#include <asio/awaitable.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "absl/status/status.h"
#include "common/idle_sweep.h"
#include "common/buffer_pool.h"
#include "endpoint/endpoint_cache.h"
#include "endpoint/listen_state.h"
#include "endpoint/listener.h"
#include "endpoint/notification_pid.h"
#include "endpoint/origin_config.h"
#include "endpoint/origin_connection.h"
#include "endpoint/pin_budget.h"
#include "endpoint/session_settings.h"
#include "endpoint/signal.h"
#include "endpoint/statement_registry.h"
#include "endpoint/wal_feed.h"
#include "hyperpool/endpoint.h"
#include "ops/latency_histogram.h"
#include "pool/pool.h"
#include "pool/release_policy.h"
#include "protocol/codec.h"
#include "protocol/sqlstate.h"

namespace hyperpool {

using endpoint::OriginConnection;
using endpoint::Signal;  // endpoint/signal.h

// These were endpoint.cc's anonymous namespace: constexpr and static, they
// keep internal linkage in each file that includes this header.
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

// One Send to the link carries at most about this much (a burst of small
// frames becomes one Send; a large result becomes several).
constexpr std::size_t kMaxLinkBatch = 256 * 1024;
// Frontend bytes written to the origin in one go.
constexpr std::size_t kMaxOriginBatch = 256 * 1024;
// A session buffer that grew past this for one large message is freed once
// empty, so an idle session does not keep the message's size.
constexpr std::size_t kKeepBufferCapacity = 256 * 1024;
static inline void ReleaseIfLarge(std::string& buffer) {
  if (buffer.empty() && buffer.capacity() > kKeepBufferCapacity) std::string().swap(buffer);
}
// How long after going idle a session gives its buffers back (at most
// twice this): long enough that a session between transactions keeps them.
constexpr std::chrono::milliseconds kIdleSweepDelay{100};
// Locally made answers waiting for the link before Run() stops reading.
constexpr std::size_t kMaxLocalBacklog = 1024 * 1024;


static inline void AppendReadyForQuery(std::string& out, char status) {
  protocol::AppendFrame(out, 'Z', std::string_view(&status, 1));
}

static inline TransactionStatus ToPoolStatus(char status) {
  switch (status) {
    case 'I': return TransactionStatus::kIdle;
    case 'T': return TransactionStatus::kInTransaction;
    case 'E': return TransactionStatus::kFailed;
    default: return TransactionStatus::kNone;
  }
}

class Session;  // endpoint_session.h
// The idle sweep's visit (endpoint_session_io.cc): a session still idle
// gives its buffers back and may sleep.
void SweepIdleSession(Session& session);

struct Endpoint::Impl : std::enable_shared_from_this<Endpoint::Impl> {
  asio::any_io_executor executor;
  EndpointOptions options;
  std::shared_ptr<const OriginConfig> config;
  std::unique_ptr<Pool> pool;
  // The Endpoint cache tier (endpoint_cache.h); created with the pool.
  std::shared_ptr<endpoint::EndpointCache> cache;
  // Invalidation from the origin's WAL (wal_feed.h); null when off.
  std::shared_ptr<endpoint::WalFeed> wal_feed;
  // Logs in to the origin as a walsender (the app's `replication` value
  // and startup parameters): a replication link's own connection, outside
  // the pool (Session::RunTunnel).
  std::function<asio::awaitable<endpoint::ConnectResult>(
      std::string replication, std::vector<std::pair<std::string, std::string>> app_parameters)>
      connect_walsender;
  // LISTEN/NOTIFY without pinning (listener.h): made by Create(), then
  // used on the executor (Stats() and Stop() read its atomics).
  std::shared_ptr<endpoint::ListenerConnection> listener;

  // State only the Endpoint's executor touches (the sessions, the idle
  // sweep, the listener and the pool's completions all run there; other
  // threads post to it). Kept apart so that every use says so.
  struct OnExecutor {
    // The origin's ParameterStatus set as of the most recent login (link-ready).
    std::vector<std::pair<std::string, std::string>> origin_parameters;
    // Sessions by their hello's hyperpool.session_id: where cancel links go.
    std::unordered_map<std::string, Session*> sessions_by_id;
    // One server-side name per distinct prepared statement (statement_registry.h).
    endpoint::StatementCatalog statements;
    // The idle sessions' spare buffers, for the next unit (common/buffer_pool.h).
    BufferPool buffers;
    // The sessions' startup settings, each distinct map kept once.
    endpoint::StartupSettingsTable startup_settings;
    // What statement texts do to a session, by shape (session_settings.h).
    endpoint::SessionEffectsMemo session_effects;
    // Sessions that went idle since the last idle sweep (Session::NoteIdle):
    // the sweep, kIdleSweepDelay after the first, gives the buffers of those
    // still idle back to `buffers` and lets them sleep (Session::SweepIdle).
    IdleSweep<Session> idle_sweep{kIdleSweepDelay, &SweepIdleSession};
    // Sessions holding a pinned connection outside the pool's cap (pin_budget.h).
    endpoint::PinBudget pin_budget{1};
    // The last session serial given out (sequence_state.h: never reused).
    std::uint64_t last_session_serial = 0;
    // Origin backend pid -> app pid of its last session (notification_pid.h).
    endpoint::NotifierPids notifier_pids;
    // The last lease serial given out (SessionCore::origin_lease: which
    // session used an origin backend most recently); wraps, 0 skipped.
    std::uint32_t lease_serial = 0;
    // EndpointOptions::close_idle_when_unused: armed when the last app
    // session ends (Session::~Session).
    std::unique_ptr<asio::steady_timer> unused_timer;
    // LISTEN/NOTIFY without pinning (listener.h): the sessions the listener
    // connection delivers to, by subscriber id.
    std::unordered_map<endpoint::ListenRegistry::Subscriber, Session*> listen_sessions;
    endpoint::ListenRegistry::Subscriber next_listen_id = 0;

    // Origin round trips, and their minimum for Stats() (origin_rtt_us).
    static constexpr std::size_t kRttWindow = 8;
    std::array<std::chrono::microseconds, kRttWindow> rtt_samples{};
    std::size_t rtt_count = 0;
    std::chrono::steady_clock::time_point rtt_measured_at{};
    bool rtt_refreshing = false;  // a background probe measurement runs
  };
  OnExecutor on_executor;

  // Any thread: atomics, thread-safe histograms, and what Stop() waits on.
  std::atomic<bool> stopped{false};
  std::atomic<std::thread::id> executor_thread{};
  std::atomic<std::size_t> session_count{0};
  std::atomic<std::size_t> watch_count{0};  // invalidation watch links (not sessions)
  std::atomic<std::size_t> transactions{0};
  std::atomic<std::size_t> queries{0};
  ops::LatencyHistogram transaction_time;  // observed at each ReadyForQuery 'I'
  ops::LatencyHistogram acquire_wait;      // observed at each unit's pool Acquire()
  std::atomic<std::size_t> acquire_timeouts{0};
  std::atomic<std::size_t> discarded{0};
  std::atomic<std::size_t> pending_cancels{0};
  std::atomic<std::size_t> pinned_sessions{0};
  std::atomic<std::size_t> sleeping_sessions{0};  // Session::MaybeSleep .. Core()
  std::atomic<std::size_t> pinned_connections{0};
  std::atomic<std::size_t> pins_rejected{0};
  std::atomic<std::size_t> pinned_idle_timeouts{0};
  std::array<std::atomic<std::size_t>, static_cast<std::size_t>(kLastPinReason) + 1> pins{};
  std::atomic<std::size_t> cancels_forwarded{0};
  std::atomic<std::size_t> cancels_ignored{0};
  std::atomic<std::size_t> notifications_delivered{0};
  std::mutex mutex;
  std::condition_variable sessions_done;
  // The live sessions: changed on the executor under `mutex`; Stop() reads
  // them under it from its own thread.
  std::unordered_set<Session*> sessions;

  std::atomic<std::size_t> origin_rtt_us{0};  // the minimum of on_executor.rtt_samples

  void NoteThread() { executor_thread.store(std::this_thread::get_id(), std::memory_order_relaxed); }

  void RecordOriginRtt(std::chrono::microseconds rtt) {  // (on the executor)
    OnExecutor& x = on_executor;
    x.rtt_samples[x.rtt_count++ % OnExecutor::kRttWindow] = rtt;
    x.rtt_measured_at = std::chrono::steady_clock::now();
    const std::size_t n = std::min(x.rtt_count, OnExecutor::kRttWindow);
    auto best = *std::min_element(x.rtt_samples.begin(), x.rtt_samples.begin() + static_cast<std::ptrdiff_t>(n));
    origin_rtt_us.store(static_cast<std::size_t>(std::max<std::int64_t>(1, best.count())));
  }
};

namespace endpoint::detail {

// An empty-query round trip on `conn`, recorded as an origin RTT sample.
asio::awaitable<absl::Status> TimedPing(std::weak_ptr<Endpoint::Impl> weak, OriginConnection& conn);

// Borrows a pooled connection for one timed empty query (an origin RTT
// sample). A failed ping reports kAborted with the origin's words.
asio::awaitable<absl::Status> MeasureOriginRtt(std::shared_ptr<Endpoint::Impl> ep);

}  // namespace endpoint::detail

using endpoint::detail::MeasureOriginRtt;
using endpoint::detail::TimedPing;

}  // namespace hyperpool
