#pragma once
// The origin connection pool: a bounded set of open origin connections that
// are lent to one client at a time and given back with a ReleaseDecision.
//
// Threading: a Pool and every Lease it hands out live on one executor (one
// worker's io_context); all methods except Stats() must be called there, and
// they take no locks. Code on another thread posts to that executor first.
// Until Stop() the pool keeps a maintenance timer pending on the executor
// (idle timeout, max lifetime, min_idle), so io_context::run() does not
// return on its own while a pool is running.
//
// Shape (Envoy's conn_pool_base, PgBouncer's lists): each connection is in
// exactly one state and in the one list for that state, and moves only
// through one transition function (pool.cc). Waiters queue FIFO; everything
// that frees capacity or yields a connection serves the queue's front.
//
// Usage (inside a coroutine on the pool's executor):
//
//   PoolCallbacks callbacks;
//   callbacks.open = [&]() -> asio::awaitable<absl::StatusOr<std::unique_ptr<PooledConnection>>> {
//     co_return co_await OriginConnection::Open(executor, config);  // TCP, TLS, login
//   };
//   callbacks.health_check = [](PooledConnection& c) { return static_cast<OriginConnection&>(c).Ping(); };
//   callbacks.reset = [](PooledConnection& c) { return static_cast<OriginConnection&>(c).Run("DISCARD ALL"); };
//   auto pool = Pool::Create(executor, options.pool, std::move(callbacks)).value();
//
//   absl::StatusOr<Lease> lease = co_await pool->Acquire();
//   if (!lease.ok()) ...;  // kResourceExhausted -> SQLSTATE 53300
//   auto& origin = lease->As<OriginConnection>();
//   ... run the transaction; at each ReadyForQuery:
//   lease->Release(DecideRelease({.mode = ..., .status = ..., .lifetime_exceeded = lease->lifetime_exceeded()}));
//   // kKeep leaves the lease holding the connection; anything else ends it.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hyperpool/options.h"
#include "pool/release_policy.h"

namespace hyperpool {

// An open origin connection as the pool sees it. The Endpoint derives its
// origin connection type from this and downcasts with Lease::As<T>().
class PooledConnection {
 public:
  virtual ~PooledConnection() = default;

  // Ends the connection (e.g. sends Terminate and closes the socket). Runs on
  // the pool's executor. Must finish promptly even if the origin does not
  // answer: a closing connection no longer counts towards max_size. The pool
  // destroys the object once this completes.
  virtual asio::awaitable<void> Close() = 0;

  // While the connection is idle in the pool, the pool asks it to report
  // (once, through `on_activity`, on the pool's executor) anything arriving
  // from the origin: an idle backend speaks only to say it is going away
  // (a FATAL ErrorResponse before pg_terminate_backend, idle_session_timeout
  // or a shutdown closes it), so such a connection is health-checked at once
  // (closed if the check fails, or if there is no health check) instead of
  // being lent to the next client. StopWatchingIdle() ends the watch before the
  // connection is used; a report already queued then is ignored by the
  // pool. The default does not watch (the connection is only found dead
  // when used).
  virtual void WatchIdle(std::function<void()> on_activity) { (void)on_activity; }
  virtual void StopWatchingIdle() {}
  // Whether the origin has spoken on (or closed) this idle connection, checked
  // now without blocking: for a connection lent again before its watch was
  // armed (PoolOptions::idle_watch_delay). True is handled as a watch report.
  virtual bool IdleActivity() { return false; }
  // The origin's process id for this connection (SHOW SERVERS); 0 if unknown.
  virtual std::int32_t backend_pid() const { return 0; }
};

// One connection as SHOW SERVERS lists it (Pool::Servers()).
struct PoolServerInfo {
  const char* state = "";  // "login" (opening), "idle", "active" (lent), "used" (check or reset running)
  std::int32_t backend_pid = 0;
  std::chrono::steady_clock::time_point opened_at;  // unset while opening
  bool pinned = false;   // lent outside the cap (Lease::MoveOutOfCap)
  bool retired = false;  // closes at release (Reconnect, lifetime, a lowered max_size)
};

// Opens a new origin connection (TCP, TLS, login, up to the first
// ReadyForQuery 'I'). The factory enforces PoolOptions::connect_timeout
// itself, since only it can cancel its socket operations.
using ConnectionFactory =
    std::function<asio::awaitable<absl::StatusOr<std::unique_ptr<PooledConnection>>>()>;

// Runs something on a connection that nobody else is using at the moment;
// OK means the connection is usable. Must finish in bounded time.
using ConnectionHook = std::function<asio::awaitable<absl::Status>(PooledConnection&)>;

struct PoolCallbacks {
  ConnectionFactory open;  // required
  // Before lending a connection idle for longer than health_check_after
  // (e.g. an empty query). Unset: no checks. On failure the connection is
  // closed and the pool tries the next idle one or opens a new one.
  ConnectionHook health_check;
  // For ReleaseDecision::kResetThenReturn (e.g. DISCARD ALL, ending at 'I').
  // Unset, or failing: the connection is closed instead.
  ConnectionHook reset;
  // For ReleaseDecision::kRollbackThenReturn (ROLLBACK, ending at 'I').
  // Unset, or failing: the connection is closed instead.
  ConnectionHook rollback;
};

// A snapshot of the pool's gauges and counters.
struct PoolStats {
  // Gauges.
  std::size_t open = 0;      // opening + idle + lent + checking (max_size caps open - outside_cap)
  std::size_t opening = 0;   // the factory is running
  std::size_t idle = 0;      // ready to lend
  std::size_t lent = 0;      // held by a Lease
  std::size_t checking = 0;  // health check or reset running
  std::size_t closing = 0;   // Close() running (not counted in `open`)
  std::size_t waiting = 0;   // Acquire() calls queued
  std::size_t outside_cap = 0;  // lent, moved out of max_size (Lease::MoveOutOfCap; included in `open`)
  // Counters since the pool was created.
  std::uint64_t acquired = 0;       // successful Acquire() calls
  std::uint64_t timeouts = 0;       // Acquire() calls that waited acquire_timeout in vain
  std::uint64_t discarded = 0;      // connections closed instead of going back to idle
  std::uint64_t opened = 0;         // successful factory calls
  std::uint64_t open_failures = 0;  // failed factory calls
  std::uint64_t closed = 0;         // connections whose Close() completed
  // The live settings (Update()) and Pause() state.
  std::size_t max_size = 0;
  bool paused = false;
  // How long the longest-waiting Acquire() has waited (zero when none waits):
  // SHOW POOLS' maxwait.
  std::chrono::steady_clock::duration max_wait{};
  std::uint64_t maintenance_runs = 0;  // passes of the background maintenance (idle/lifetime/min_idle)
};

class PoolImpl;
struct PoolEntry;

// Lets its owner end its own pending Acquire() at once, e.g. when the client
// that waits cancels its query: the waiter leaves the FIFO queue and nothing
// else in the pool changes (no connection is closed). Pass it to Acquire()
// and keep it alive until that call returns; use it on the pool's executor.
class AcquireCancel {
 public:
  // Ends the pending Acquire() with `status` (not OK). False if no Acquire()
  // is waiting (none started, or it was already served: the caller then
  // gets what it was served).
  bool Cancel(absl::Status status) { return cancel_ ? cancel_(std::move(status)) : false; }

 private:
  friend class PoolImpl;
  std::function<bool(absl::Status)> cancel_;
};

// One lent connection. Move-only; the pool must not be destroyed first
// (Pool's destructor only stops it; a Lease keeps the internals alive).
class Lease {
 public:
  Lease() = default;
  Lease(Lease&& other) noexcept;
  Lease& operator=(Lease&& other) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  // A lease ended without Release() closes its connection: its state is
  // unknown, so it must not reach another client.
  ~Lease();

  // True while the lease holds a connection.
  explicit operator bool() const { return connection_ != nullptr; }

  PooledConnection& connection() const { return *connection_; }
  PooledConnection* operator->() const { return connection_; }
  // The connection as the type the factory created.
  template <typename T>
  T& As() const {
    return static_cast<T&>(*connection_);
  }

  // When the factory finished opening this connection.
  std::chrono::steady_clock::time_point opened_at() const;
  // Older than max_lifetime: the input ReleaseInputs::lifetime_exceeded.
  bool lifetime_exceeded() const;

  // Applies `decision`: kKeep does nothing (the lease still holds the
  // connection); kReturn gives it to the next waiter or the idle list (or
  // closes it if the pool stopped or its lifetime is over); kResetThenReturn
  // and kRollbackThenReturn run the reset or rollback hook first; kClose
  // closes it. After anything but kKeep the lease is empty.
  void Release(ReleaseDecision decision);

  // The connection stops counting towards max_size (the pool may open a
  // replacement for waiters at once) and can never return to idle: any
  // Release but kKeep closes it. For a session pinned to its connection
  // (session state), whose budget the caller keeps: a pinned session must
  // not make others wait. Idempotent.
  void MoveOutOfCap();

 private:
  friend class PoolImpl;
  Lease(std::shared_ptr<PoolImpl> pool, PoolEntry* entry, PooledConnection* connection);

  std::shared_ptr<PoolImpl> pool_;
  PoolEntry* entry_ = nullptr;
  PooledConnection* connection_ = nullptr;
};

class Pool {
 public:
  // Checks `options` (max_size >= 1, min_idle <= max_size, positive
  // timeouts) and `callbacks.open`, and starts keeping min_idle connections
  // warm in the background.
  static absl::StatusOr<std::unique_ptr<Pool>> Create(asio::any_io_executor executor, PoolOptions options,
                                                      PoolCallbacks callbacks);
  // Stops the pool (see Stop()). Call on the executor, or after it stopped running.
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Lends a connection: an idle one (health-checked if it idled longer than
  // health_check_after), else a new one if below max_size, else the next one
  // given back, in FIFO order among waiters. Errors:
  //   kResourceExhausted  nothing became available within acquire_timeout
  //                       (report SQLSTATE 53300)
  //   the factory's error when opening a connection failed and no other
  //                       connection was on its way for this waiter (a down
  //                       origin is reported to everyone waiting, not as 53300)
  //   kCancelled          the pool stopped, or the caller's coroutine was cancelled
  //   `cancel`'s status   AcquireCancel::Cancel() was called while waiting
  asio::awaitable<absl::StatusOr<Lease>> Acquire(AcquireCancel* cancel = nullptr);
  // Acquire()'s fast path, without suspending: an idle connection that
  // needs no health check, when nobody waits ahead. Empty when the caller
  // must Acquire() (and possibly wait) instead. A session's unit of work
  // takes this path whenever the pool has a connection to spare: no timer,
  // no queue entry, no coroutine.
  std::optional<Lease> TryAcquire();

  // Fails every waiter with kCancelled, closes idle connections, and closes
  // lent ones when they are released. Later Acquire() calls fail at once.
  void Stop();

  // Thread-safe snapshot (relaxed atomics; the gauges may be mid-update).
  PoolStats Stats() const;

  // Operator controls (the admin console's PAUSE, RESUME, RECONNECT and a
  // reload). Call on the pool's executor.
  //
  // Pause: no connection is lent until Resume(); Acquire() calls queue (and
  // still end in 53300 after acquire_timeout). Leases already held are
  // untouched, so units of work in flight finish.
  void Pause();
  void Resume();
  // Replaces every connection gracefully: idle ones are closed now, lent,
  // opening and checking ones when they are next released (they are never
  // lent again); min_idle is warmed up with new ones.
  void Reconnect();
  // New max_size, min_idle and timeouts for what happens from now on (the
  // mode is kept: it cannot change under leases). Shrinking closes idle
  // connections above the new max_size now and lent ones at release.
  // Checks `options` as Create() does.
  absl::Status Update(PoolOptions options);
  // Every open connection (not those closing). Call on the pool's executor.
  std::vector<PoolServerInfo> Servers() const;

  const PoolOptions& options() const;

 private:
  explicit Pool(std::shared_ptr<PoolImpl> impl);
  std::shared_ptr<PoolImpl> impl_;
};

}  // namespace hyperpool
