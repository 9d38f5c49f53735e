#pragma once
// The Client half: runs beside the application and impersonates a
// PostgreSQL server on a local address. It answers the handshake locally,
// tracks transaction state and forwards work to an Endpoint over a Transport.

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

// A snapshot of a Client's counters (docs/architecture.md, "Operations").
struct ClientStats {
  std::size_t sessions = 0;  // application connections open now
  std::size_t accepted = 0;  // application connections accepted since start (TCP and Unix)
  // Bytes read from and written to applications since start.
  std::uint64_t bytes_received = 0;
  std::uint64_t bytes_sent = 0;
  // Login time of application connections: from accept to the
  // ReadyForQuery that ends the handshake, one observation per login that
  // reached it (admin console sessions and refused logins not counted).
  LatencyHistogramSnapshot login_time;
  // Links that idle sessions ended at their Endpoint's offer since start:
  // the session held nothing the Endpoint's half had to keep, and its next
  // unit opens a new link (docs/architecture.md, "What an idle session holds").
  std::uint64_t links_released = 0;
  // Idle sessions that went quiet: their Asio readability wait given up for
  // their worker's one watch of quiet sockets (docs/architecture.md, "What
  // an idle session holds"), and how many woke from it (their app sent).
  std::uint64_t quiet_parks = 0;
  std::uint64_t quiet_wakes = 0;
  std::size_t quiet_sessions = 0;  // quiet now
  // The Client's cache tier; all zero when it is off.
  bool cache_enabled = false;
  std::size_t cache_local_hits = 0;     // units answered with no link traffic
  std::size_t cache_stores = 0;
  std::size_t cache_evictions = 0;
  std::size_t cache_invalidations = 0;  // invalidation messages applied
  std::size_t cache_refused_stale = 0;  // results older than an invalidation, refused
  // The invalidation watch (ClientOptions::cache_watch): subscribed now; how
  // often it subscribed (each time after the first, the tier was dropped);
  // results refused because it was not subscribed, or came from another
  // Endpoint or from before the subscription.
  bool cache_watch_subscribed = false;
  std::size_t cache_watch_subscriptions = 0;
  std::size_t cache_refused_unwatched = 0;
  std::size_t cache_bytes = 0;
  std::size_t cache_entries = 0;
};

// One application connection, for the admin console's SHOW CLIENTS.
struct ClientSessionInfo {
  std::uint64_t id = 0;  // KILL_CLIENT takes it; unique per Client
  std::string user;      // empty until logged in
  std::string database;
  std::string address;   // "host:port", or "unix"
  std::chrono::system_clock::time_point connect_time;
  // "login" (handshake), "idle" (nothing outstanding), "active" (a unit of
  // work forwarded), "admin" (an admin console session).
  std::string state;
};

class Client {
 public:
  // Binds the listening socket (so connection_string() is valid on return)
  // and starts accepting on `executors[0]`; sessions are spread over all
  // `executors` (one per worker thread). `transport` must outlive the Client.
  static absl::StatusOr<std::unique_ptr<Client>> Create(std::vector<asio::any_io_executor> executors,
                                                        Transport& transport, ClientOptions options);
  ~Client();

  // A postgresql:// URI (host, port, user, password, database, sslmode=disable)
  // that libpq, psql and other drivers accept.
  const std::string& connection_string() const;

  // Stops accepting and closes every session. Safe to call from any thread.
  void Stop();

  // A snapshot of the counters (thread-safe).
  ClientStats Stats() const;

  // The Client cache tier's counters as a text line (thread-safe).
  std::string CacheReport() const;

  // The application connections open now (thread-safe).
  std::vector<ClientSessionInfo> Sessions() const;

  // Ends connection `id` as PostgreSQL's pg_terminate_backend does: FATAL
  // 57P01 "terminating connection due to administrator command", then the
  // socket closes (a unit in flight is abandoned: the Endpoint closes its
  // origin connection). False if there is no such connection. Thread-safe.
  bool Kill(std::uint64_t id);

  // pg_terminate_backend (`terminate`) or pg_cancel_backend of `app_pid`,
  // the pid of this Client's BackendKeyData, for a session no Endpoint
  // holds: one that has logged in and not yet opened its link (nothing of
  // it reached an Endpoint). Terminating ends it as Kill does; cancelling
  // finds nothing running and does nothing, as PostgreSQL does for an idle
  // backend. True if this Client handed out that pid and its session is
  // open. Thread-safe.
  bool SignalAppSession(std::int32_t app_pid, bool terminate);

  struct Impl;

 private:
  explicit Client(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace hyperpool
