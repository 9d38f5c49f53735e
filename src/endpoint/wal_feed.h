#pragma once
// The change feed (docs/architecture.md, "Query cache" > "Invalidation from
// the origin's WAL"): the thin Asio driver around WalFeedCore.
//
// Two origin connections of its own, outside the pool's cap, logged in with
// the Endpoint's origin login:
//   - the replication connection (startup parameter replication=database):
//     CREATE_REPLICATION_SLOT <random> TEMPORARY LOGICAL test_decoding
//     NOEXPORT_SNAPSHOT, then START_REPLICATION SLOT ... LOGICAL 0/0. The
//     slot is temporary: it goes with the connection, so a crashed or
//     killed hyperpool never makes the origin retain WAL. test_decoding
//     ships with PostgreSQL and needs no publication (pgoutput would need
//     CREATE PUBLICATION ... FOR ALL TABLES, which takes a superuser).
//   - the probe connection: SELECT pg_current_wal_insert_lsn() every
//     probe_interval, which measures the feed's lag (wal_feed_core.h).
// Each burst of committed transactions is applied through the same path as
// a write through hyperpool (EndpointCache::Invalidate: the Endpoint tier
// and the shared tier, then Broadcast to every Client tier), then
// acknowledged (standby status update) so the origin recycles its WAL.
// Everything runs on the Endpoint's executor: no locks on the stream.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>

#include "endpoint/endpoint_cache.h"
#include "endpoint/origin_connection.h"
#include "endpoint/wal_feed_core.h"
#include "hyperpool/endpoint.h"
#include "hyperpool/log.h"

namespace hyperpool::endpoint {

class WalFeed : public std::enable_shared_from_this<WalFeed> {
 public:
  // Opens a logged-in origin connection; `replication`: with
  // replication=database in its startup packet.
  using Connect = std::function<asio::awaitable<ConnectResult>(bool replication)>;
  struct Options {
    WalFeedCore::Options core;
    std::chrono::milliseconds probe_interval{25};  // 0: a quarter of the bound
    std::chrono::milliseconds min_backoff{100};
    std::chrono::milliseconds max_backoff{5000};
    // After the origin refused the feed (no REPLICATION, wal_level, plugin):
    // the next try.
    std::chrono::milliseconds unavailable_retry{30000};
  };

  WalFeed(asio::any_io_executor executor, Options options, Connect connect, std::shared_ptr<EndpointCache> cache,
          std::shared_ptr<const Logger> logger);

  // Starts the two connection loops (nothing when the mode is off).
  void Start();
  // Closes both connections; the loops end (on the executor).
  void Stop();
  // Thread-safe: a loop still runs.
  bool running() const { return loops_.load() > 0; }
  // Executor only: whether the tiers may serve cached rows now.
  bool ServeCached() const;
  // Executor only: how long cached rows may still be served if nothing more
  // arrives (max when the feed does not limit them, 0 when the gate is shut).
  std::chrono::milliseconds ServeBudget() const;
  // Thread-safe.
  void FillStats(EndpointStats& stats) const;

 private:
  asio::awaitable<void> RunStream(std::shared_ptr<WalFeed> self);
  asio::awaitable<void> RunProbe(std::shared_ptr<WalFeed> self);
  // Creates the slot and starts replication; nullopt once streaming.
  asio::awaitable<std::optional<OriginFailure>> StartReplication(OriginConnection& conn);
  // Logs a failure of the stream or its login and waits before the next try.
  asio::awaitable<void> Failed(const OriginFailure& failure);
  asio::awaitable<void> Stream(std::shared_ptr<OriginConnection> conn);
  // One probe on `conn`: the origin's WAL insert position.
  asio::awaitable<absl::StatusOr<protocol::Lsn>> ReadInsertPosition(OriginConnection& conn);
  void Apply(const FeedChanges& changes);
  // The gate closed (or the stream broke): drops what the tiers hold.
  void DropAll(bool clients_only);
  void Write(std::string bytes);
  asio::awaitable<void> WriteLoop(std::shared_ptr<WalFeed> self, std::shared_ptr<OriginConnection> conn);
  void SendAck(bool force, bool request_reply);
  void Transition(WalFeedState next);
  void CheckGate();
  void Publish();
  void Log(LogLevel level, std::string_view event, std::string_view detail);
  // Waits on `timer` (Stop cancels it).
  static asio::awaitable<void> Sleep(asio::steady_timer& timer, std::chrono::milliseconds d);

  asio::any_io_executor executor_;
  Options options_;
  Connect connect_;
  std::shared_ptr<EndpointCache> cache_;
  std::shared_ptr<const Logger> logger_;
  WalFeedCore core_;

  // Executor-only.
  bool stopped_ = false;
  std::shared_ptr<OriginConnection> stream_conn_;
  std::shared_ptr<OriginConnection> probe_conn_;
  std::string pending_writes_;
  bool writing_ = false;
  bool gate_open_ = false;         // as the Client tiers were last told
  std::string last_failure_;       // logged once per distinct failure
  std::string last_probe_failure_;
  asio::steady_timer stream_timer_;
  asio::steady_timer probe_timer_;

  // Thread-safe view for Stats() (Publish).
  std::atomic<int> loops_{0};
  std::atomic<WalFeedState> state_{WalFeedState::kOff};
  std::atomic<bool> serving_{true};
  std::atomic<int64_t> fresh_as_of_ns_{0};     // steady clock; 0: never
  std::atomic<int64_t> last_message_ns_{0};
  std::atomic<uint64_t> transactions_{0};
  std::atomic<uint64_t> invalidations_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> reconnects_{0};
};

}  // namespace hyperpool::endpoint
