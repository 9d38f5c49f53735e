#pragma once
// The Endpoint half: runs near the origin database, logs in to it, lends
// pooled origin connections per transaction to the sessions that Clients
// open over a Transport.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <asio/any_io_executor.hpp>

#include "absl/status/statusor.h"
#include "hyperpool/histogram.h"
#include "hyperpool/options.h"
#include "hyperpool/transport.h"

namespace hyperpool {

struct EndpointStats {
  std::size_t sessions = 0;          // links currently open (invalidation watches not included)
  std::size_t cache_watches = 0;     // Clients' invalidation watch links open now
  std::size_t origin_open = 0;       // origin connections open (idle + lent + opening)
  std::size_t origin_idle = 0;       // idle in the pool
  std::size_t waiting = 0;           // transactions waiting for a connection
  std::size_t origin_lent = 0;       // lent to a session now
  std::size_t pool_max_size = 0;     // the pool's max_size now (a reload may change it)
  bool pool_paused = false;          // PausePool() in effect
  std::size_t max_wait_us = 0;       // how long the longest-waiting unit has waited now (0: none waits)
  std::size_t transactions = 0;      // units of work completed
  std::size_t acquire_timeouts = 0;  // waits that ended in 53300
  std::size_t discarded = 0;         // connections closed instead of returned
  // Connections the pool closed instead of keeping or lending (all causes:
  // sessions' closes above, failed health checks, dead idle connections
  // found by the idle watch, lifetime).
  std::size_t origin_discarded = 0;
  // Sessions pinned to their origin connection by state that cannot be
  // replayed (gauge), and pins by reason since start (a session pinned for
  // two reasons counts in both).
  std::size_t pinned_sessions = 0;
  // Idle sessions whose core sleeps (gauge): given back at the idle sweep,
  // made again at the session's next message (docs/architecture.md, "What
  // an idle session holds").
  std::size_t sleeping_sessions = 0;
  std::size_t pins_total = 0;
  std::size_t pins_prepared_sql = 0;      // SQL-level PREPARE
  std::size_t pins_temp_table = 0;        // CREATE TEMP TABLE / SELECT INTO TEMP
  std::size_t pins_advisory_lock = 0;     // pg_advisory_lock*, pg_try_advisory_lock*
  std::size_t pins_listen = 0;            // LISTEN
  std::size_t pins_with_hold_cursor = 0;  // DECLARE ... WITH HOLD
  std::size_t pins_set_role = 0;          // SET ROLE / SET SESSION AUTHORIZATION
  // The pinned budget (EndpointOptions::max_pinned): pinned connections held
  // now (outside the pool's max_size), pinning statements whose wait for a
  // slot failed (acquire timeout or cancel), and pinned sessions closed by
  // pinned_idle_timeout.
  std::size_t pinned_connections = 0;
  std::size_t pins_rejected = 0;
  std::size_t pinned_idle_timeouts = 0;
  // Cancel links: forwarded to the origin (or ending a unit not yet started),
  // and ignored (the session was idle, or unknown).
  std::size_t cancels_forwarded = 0;
  std::size_t cancels_ignored = 0;
  // LISTEN/NOTIFY (docs/architecture.md, "Session state"): notifications
  // the listener connection handed to listening sessions (one per session
  // per notification), and times that connection was reopened after a loss.
  std::size_t notifications_delivered = 0;
  std::size_t listener_reconnects = 0;
  // The Endpoint's round trip to its origin: the smallest of the last few
  // measured (empty-query pings: health checks and placement probes), in
  // microseconds; 0 until one has been measured.
  std::size_t origin_rtt_us = 0;
  // The Endpoint's query-cache tier (docs/architecture.md, "Query cache").
  std::size_t cache_hits = 0;          // fresh entries served
  std::size_t cache_stale_hits = 0;    // stale entries served while one refresh ran
  std::size_t cache_misses = 0;        // cacheable units that found no entry
  std::size_t cache_coalesced = 0;     // misses that waited for an identical one in flight
  std::size_t cache_served = 0;        // units answered without the origin
  std::size_t cache_uncacheable = 0;   // candidate units decided uncacheable
  std::size_t cache_bypassed = 0;      // units not considered (off, session state, hint)
  std::size_t cache_stores = 0;
  std::size_t cache_evictions = 0;
  std::size_t cache_invalidations = 0;  // entries removed by writes
  std::size_t cache_write_invalidations = 0;  // writes seen
  std::size_t cache_bytes = 0;
  std::size_t cache_entries = 0;
  // The shared tier on Redis (CacheOptions::redis_url; docs/architecture.md,
  // "Shared cache tier").
  bool redis_configured = false;
  bool redis_up = false;               // connected and subscribed
  std::size_t redis_errors = 0;        // failed or timed-out commands, lost connections
  std::size_t shared_hits = 0;         // look-ups Redis answered with a current entry
  std::size_t shared_misses = 0;
  std::size_t shared_served = 0;       // units answered from Redis (filling the local tier)
  std::size_t shared_invalidations_received = 0;  // other Endpoints' writes applied here
  // Units answered past max age because the origin could not be reached
  // (CacheOptions::stale_if_error).
  std::size_t cache_stale_if_error = 0;
  // Reads of the origin's catalog (five queries each) the cache started.
  std::size_t cache_catalog_reads = 0;
  // The change feed (CacheOptions::wal_invalidation; docs/architecture.md,
  // "Invalidation from the origin's WAL"). `wal_state`: "off",
  // "connecting", "streaming", "unavailable".
  std::string wal_state = "off";
  bool wal_serving = true;               // cached rows may be served now (the gate)
  std::size_t wal_lag_ms = 0;            // now - the time the tiers are known fresh as of
  std::size_t wal_transactions = 0;      // commits decoded
  std::size_t wal_invalidations = 0;     // invalidations applied (batches of commits)
  std::size_t wal_last_message_ms = 0;   // since the last replication message (0: none yet)
  std::size_t wal_reconnects = 0;        // streams started again after a loss
  std::size_t wal_bytes = 0;             // replication payload bytes read
  // Units of work the origin answered (one ReadyForQuery each: a simple
  // Query, an extended-query Sync, a FunctionCall).
  std::size_t queries = 0;
  // Transaction time as the Endpoint sees it: from the first message of a
  // transaction forwarded to the origin to its ReadyForQuery 'I'.
  LatencyHistogramSnapshot transaction_time;
  // Time a unit of work waited for a pooled origin connection (including
  // waits that ended in 53300, and opening a new connection).
  LatencyHistogramSnapshot acquire_wait;
};

// One origin connection, for the admin console's SHOW SERVERS.
struct OriginServerInfo {
  std::string state;  // "active" (lent), "idle", "used" (health check or reset), "login" (opening)
  std::int32_t backend_pid = 0;
  std::chrono::system_clock::time_point connect_time;  // unset while opening
  bool pinned = false;   // held by a pinned session outside the pool's cap
  bool retired = false;  // closes when released (RECONNECT, max lifetime, a lowered pool size)
  std::string database;  // the app-facing database (set by a host serving several; empty: the one)
};

class Endpoint : public LinkAcceptor {
 public:
  // Validates `options` (the origin string must parse) and creates an
  // Endpoint whose sessions and pool run on `executor`. Opens no connection
  // yet (min_idle connections are opened in the background).
  static absl::StatusOr<std::unique_ptr<Endpoint>> Create(asio::any_io_executor executor,
                                                          EndpointOptions options);
  ~Endpoint() override;

  // Takes a link opened by a Client; its session runs on the Endpoint's executor.
  void Accept(std::unique_ptr<Link> link) override;
  // That executor (the one given to Create): an in-process transport runs
  // Client sessions there too (MakeInProcessTransport).
  asio::any_io_executor executor() const;

  // Stops: closes all links and origin connections. Safe to call from any
  // thread; returns once nothing of the Endpoint runs any more.
  void Stop();

  // A snapshot of the counters (thread-safe).
  EndpointStats Stats() const;

  // Operator controls (the admin console; pool.h describes each). All
  // thread-safe and asynchronous: they take effect on the Endpoint's
  // executor shortly after returning.
  // New units of work wait for ResumePool(); units in flight finish.
  void PausePool();
  void ResumePool();
  // Replaces the origin connections: idle ones now, lent ones at release.
  void ReconnectPool();
  // New pool size and timeouts for new units of work (the mode stays).
  absl::Status UpdatePool(PoolOptions options);
  // The origin connections now. Thread-safe: asks the Endpoint's executor
  // and waits for it (at most 2 s; empty if it does not answer).
  std::vector<OriginServerInfo> Servers() const;

  // The cache tier's counters and the `top` query fingerprints by decision
  // count (reason per fingerprint), as text lines (thread-safe).
  std::string CacheReport(std::size_t top = 10) const;

  // pg_terminate_backend (`terminate`) or pg_cancel_backend of the app pid
  // `app_pid`, asked by a session of another Endpoint of this process
  // (EndpointOptions::signal_elsewhere). True if a session here holds that
  // pid; the terminate or cancel then runs on this Endpoint's executor
  // (thread-safe).
  bool SignalAppSession(std::int32_t app_pid, bool terminate);

  struct Impl;

 private:
  explicit Endpoint(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace hyperpool
