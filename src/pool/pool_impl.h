// Internal to src/pool/: the pool's state (PoolImpl), shared by pool.cc
// (states, lending, opening, checking, maintenance) and pool_lease.cc (Lease
// and the Pool facade). The only Asio-heavy code of src/pool.
//
// Connection states (ConnState) and the only transitions Allowed() permits:
//
//   kOpening  -> kIdle | kLent (a waiter) | kClosing (pool stopped) | kClosed (factory failed)
//   kIdle     -> kLent | kChecking (health check) | kClosing (idle timeout, lifetime, Stop)
//   kLent     -> kIdle (kReturn) | kChecking (kResetThenReturn, kRollbackThenReturn) | kClosing (kClose)
//   kChecking -> kIdle | kLent (a waiter) | kClosing (hook failed)
//   kClosing  -> kClosed (Close() finished; the entry is destroyed)
#ifndef HYPERPOOL_POOL_POOL_IMPL_H_
#define HYPERPOOL_POOL_POOL_IMPL_H_

#include <array>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <list>
#include <optional>
#include <string>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include "pool/pool.h"

namespace hyperpool {

// Always on: these guard states no peer input can produce, only a pool bug.
#define HYPERPOOL_POOL_CHECK(condition)                                                  \
  do {                                                                                   \
    if (!(condition)) {                                                                  \
      std::fprintf(stderr, "%s:%d: pool invariant violated: %s\n", __FILE__, __LINE__, \
                   #condition);                                                          \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace pool_internal {

using Clock = std::chrono::steady_clock;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

// After a background (min_idle) open fails with nobody waiting, wait this
// long before trying again, so a down origin is not hammered.
constexpr std::chrono::milliseconds kWarmRetryDelay{1000};

}  // namespace pool_internal
using pool_internal::Clock;
using pool_internal::kAsTuple;
using pool_internal::kWarmRetryDelay;

enum class ConnState {
  kOpening,   // the factory is running; counts towards max_size; no connection object yet
  kIdle,      // open and unused, in the pool, ready to lend
  kLent,      // held by exactly one Lease
  kChecking,  // the pool runs the health check or the reset hook; nobody else may use it
  kClosing,   // Close() is running; no longer counts towards max_size
  kClosed,    // gone: erased from every list (never stored; the target of the last transition)
};
constexpr std::size_t kListedStates = 5;  // every state but kClosed has a list

struct PoolEntry {
  ConnState state = ConnState::kOpening;
  std::unique_ptr<PooledConnection> connection;
  Clock::time_point opened_at{};   // the factory finished; max_lifetime counts from here
  Clock::time_point idle_since{};  // entered kIdle (idle list order is by this time)
  std::list<PoolEntry>::iterator self;  // position in the list of `state`
  bool outside_cap = false;  // kLent only: Lease::MoveOutOfCap (not counted towards max_size)
  // PoolImpl::epoch_ when it was opened: older ones are retired (Reconnect).
  std::uint64_t epoch = 0;
  // Bumped whenever the entry leaves kIdle: an idle-watch report carrying an
  // older generation is stale (the connection was lent or closed since).
  std::uint64_t idle_generation = 0;
  bool watched = false;  // kIdle only: WatchIdle was called for this idle period
};

// Whether `from` -> `to` is a legal transition.
inline bool Allowed(ConnState from, ConnState to) {
  switch (from) {
    case ConnState::kOpening:
      return to == ConnState::kIdle || to == ConnState::kLent || to == ConnState::kClosing ||
             to == ConnState::kClosed;
    case ConnState::kIdle:
      return to == ConnState::kLent || to == ConnState::kChecking || to == ConnState::kClosing;
    case ConnState::kLent:
      return to == ConnState::kIdle || to == ConnState::kChecking || to == ConnState::kClosing;
    case ConnState::kChecking:
      return to == ConnState::kIdle || to == ConnState::kLent || to == ConnState::kClosing;
    case ConnState::kClosing:
      return to == ConnState::kClosed;
    case ConnState::kClosed:
      return false;
  }
  return false;
}

class PoolImpl : public std::enable_shared_from_this<PoolImpl> {
 public:
  PoolImpl(asio::any_io_executor executor, PoolOptions options, PoolCallbacks callbacks)
      : executor_(std::move(executor)),
        options_(options),
        callbacks_(std::move(callbacks)),
        maintenance_timer_(executor_),
        max_size_gauge_(options.max_size) {}

  void Start() { asio::co_spawn(executor_, Maintain(shared_from_this()), asio::detached); }

  // Static with the owner passed in: the coroutine frame then keeps the pool
  // alive from the call on, not only from its first resumption.
  static asio::awaitable<absl::StatusOr<Lease>> Acquire(std::shared_ptr<PoolImpl> self, AcquireCancel* cancel);
  std::optional<Lease> TryAcquire();
  void Stop();
  void Release(PoolEntry* entry, ReleaseDecision decision);
  void MoveOutOfCap(PoolEntry* entry);
  // Whether `entry` must close rather than be lent again: older than
  // max_lifetime, opened before a Reconnect(), or beyond a max_size that
  // Update() lowered.
  bool LifetimeExceeded(const PoolEntry& entry) const {
    return Clock::now() - entry.opened_at >= options_.max_lifetime || entry.epoch != epoch_ ||
           Counted() > options_.max_size;
  }
  void Pause() {
    paused_ = true;
    paused_gauge_.store(true, std::memory_order_relaxed);
  }
  void Resume() {
    paused_ = false;
    paused_gauge_.store(false, std::memory_order_relaxed);
    Pump();
  }
  void Reconnect();
  void Update(const PoolOptions& options);
  std::vector<PoolServerInfo> Servers() const {
    std::vector<PoolServerInfo> out;
    auto add = [&](ConnState state, const char* name) {
      for (const PoolEntry& e : lists_[Index(state)]) {
        PoolServerInfo info;
        info.state = name;
        if (e.connection) info.backend_pid = e.connection->backend_pid();
        info.opened_at = e.opened_at;
        info.pinned = e.outside_cap;
        info.retired = state != ConnState::kOpening && LifetimeExceeded(e);
        out.push_back(info);
      }
    };
    add(ConnState::kLent, "active");
    add(ConnState::kIdle, "idle");
    add(ConnState::kChecking, "used");
    add(ConnState::kOpening, "login");
    return out;
  }

  PoolStats Stats() const {
    PoolStats s;
    s.opening = gauges_[Index(ConnState::kOpening)].load(std::memory_order_relaxed);
    s.idle = gauges_[Index(ConnState::kIdle)].load(std::memory_order_relaxed);
    s.lent = gauges_[Index(ConnState::kLent)].load(std::memory_order_relaxed);
    s.checking = gauges_[Index(ConnState::kChecking)].load(std::memory_order_relaxed);
    s.closing = gauges_[Index(ConnState::kClosing)].load(std::memory_order_relaxed);
    s.open = s.opening + s.idle + s.lent + s.checking;
    s.outside_cap = outside_cap_gauge_.load(std::memory_order_relaxed);
    s.waiting = waiting_.load(std::memory_order_relaxed);
    s.acquired = acquired_.load(std::memory_order_relaxed);
    s.timeouts = timeouts_.load(std::memory_order_relaxed);
    s.discarded = discarded_.load(std::memory_order_relaxed);
    s.opened = opened_.load(std::memory_order_relaxed);
    s.open_failures = open_failures_.load(std::memory_order_relaxed);
    s.closed = closed_.load(std::memory_order_relaxed);
    s.max_size = max_size_gauge_.load(std::memory_order_relaxed);
    s.paused = paused_gauge_.load(std::memory_order_relaxed);
    const Clock::rep since = front_since_.load(std::memory_order_relaxed);
    if (since != 0) s.max_wait = std::max(Clock::duration::zero(), Clock::now() - Clock::time_point(Clock::duration(since)));
    s.maintenance_runs = maintenance_runs_.load(std::memory_order_relaxed);
    return s;
  }

  const PoolOptions& options() const { return options_; }

 private:
  // An Acquire() call waiting in the FIFO queue. Lives in that call's
  // coroutine frame. Whoever serves it sets `result` and cancels `timer`; the
  // waiter looks at `result` first when it wakes, so a connection handed over
  // just as the timer fired (its completion already queued) is not lost.
  struct Waiter {
    Waiter(PoolImpl& pool, Clock::time_point deadline) : pool(pool), timer(pool.executor_, deadline) {}
    ~Waiter() {
      if (queued) pool.Dequeue(*this);
    }
    PoolImpl& pool;
    Clock::time_point queued_at = Clock::now();
    asio::steady_timer timer;
    std::optional<absl::StatusOr<Lease>> result;
    bool queued = false;
    std::list<Waiter*>::iterator position;
  };

  static std::size_t Index(ConnState state) { return static_cast<std::size_t>(state); }
  std::list<PoolEntry>& List(ConnState state) { return lists_[Index(state)]; }
  std::size_t Count(ConnState state) const { return lists_[Index(state)].size(); }
  // Connections counted towards max_size.
  std::size_t Counted() const {
    return Count(ConnState::kOpening) + Count(ConnState::kIdle) + Count(ConnState::kLent) +
           Count(ConnState::kChecking) - outside_cap_;
  }

  // The only place a connection changes state (and list). Returns the entry,
  // or nullptr after the transition to kClosed (which destroys it).
  PoolEntry* Transition(PoolEntry& entry, ConnState to);
  PoolEntry& NewOpeningEntry();

  // Serves waiters from idle connections, starts health checks, and opens
  // connections for waiters while below max_size. Call after anything that
  // may let a waiter progress.
  void Pump();
  void Serve(Waiter& waiter, absl::StatusOr<Lease> result);
  void Dequeue(Waiter& waiter);
  // Lends `entry` (idle, checking or just opened) to the front waiter.
  void LendToFront(PoolEntry& entry);
  // Gives a connection that may be shared to the front waiter, else to idle.
  void Offer(PoolEntry& entry);
  // An idle connection not watched yet is polled once before it is lent
  // (PoolOptions::idle_watch_delay), unless it came back just now
  // (idle_poll_after).
  bool SpokeWhileIdle(PoolEntry& entry) const {
    if (entry.watched) return false;
    if (options_.idle_poll_after.count() > 0 && Clock::now() - entry.idle_since < options_.idle_poll_after) return false;
    return entry.connection->IdleActivity();
  }

  bool NeedsCheck(const PoolEntry& entry, Clock::time_point now) const {
    return callbacks_.health_check && now - entry.idle_since > options_.health_check_after;
  }

  void StartOpen();
  // Starts the idle watch of `entry` (kIdle).
  void WatchIdle(PoolEntry& entry);
  // The origin spoke to (or closed) an idle connection: check or close it.
  void OnIdleSpoke(PoolEntry& entry);
  // The origin spoke to (or closed) an idle connection: close it.
  void OnIdleActivity(PoolEntry* entry, std::uint64_t generation);
  void StartCheck(PoolEntry& entry);
  // Runs `hook` (callbacks_.reset or .rollback) before offering `entry`.
  void StartReset(PoolEntry& entry, const ConnectionHook& hook);
  void StartClose(PoolEntry& entry);

  static asio::awaitable<void> OpenOne(std::shared_ptr<PoolImpl> self, PoolEntry* entry);
  static asio::awaitable<void> CheckOne(std::shared_ptr<PoolImpl> self, PoolEntry* entry, const ConnectionHook* hook);
  static asio::awaitable<void> CloseOne(std::shared_ptr<PoolImpl> self, PoolEntry* entry);
  static asio::awaitable<void> Maintain(std::shared_ptr<PoolImpl> self);

  // Closes idle connections past idle_timeout (above min_idle) or
  // max_lifetime, opens connections up to min_idle; returns when to run next.
  Clock::time_point RunMaintenance();
  // Makes the maintenance coroutine re-run now.
  void Kick() {
    maintenance_due_ = Clock::time_point::min();  // already kicked: nothing can be earlier
    maintenance_timer_.cancel();
  }
  // Kick() only if `deadline` comes before the pass already scheduled. A
  // release makes a connection idle once per transaction; waking the
  // maintenance coroutine and re-arming its timer each time (a timerfd
  // syscall) was measurable per-transaction work for a deadline that is
  // almost never the next one.
  void KickIfEarlier(Clock::time_point deadline) {
    if (deadline < maintenance_due_) Kick();
  }

  asio::any_io_executor executor_;
  PoolOptions options_;  // changed only by Update()
  const PoolCallbacks callbacks_;
  bool stopped_ = false;
  bool paused_ = false;        // Pause(): nothing is lent
  std::uint64_t epoch_ = 0;    // bumped by Reconnect()

  std::array<std::list<PoolEntry>, kListedStates> lists_;
  std::size_t outside_cap_ = 0;  // lent entries with outside_cap set
  std::list<Waiter*> waiters_;  // FIFO: front waited longest
  asio::steady_timer maintenance_timer_;
  // When the maintenance coroutine runs next (min(): it is about to run).
  Clock::time_point maintenance_due_ = Clock::time_point::min();
  Clock::time_point warm_retry_at_{};  // no background opens before this

  // Mirrors of the list sizes and the counters, readable from any thread.
  std::array<std::atomic<std::size_t>, kListedStates> gauges_{};
  std::atomic<std::size_t> waiting_{0};
  std::atomic<std::size_t> outside_cap_gauge_{0};
  std::atomic<std::uint64_t> acquired_{0};
  std::atomic<std::uint64_t> timeouts_{0};
  std::atomic<std::uint64_t> discarded_{0};
  std::atomic<std::uint64_t> opened_{0};
  std::atomic<std::uint64_t> open_failures_{0};
  std::atomic<std::uint64_t> closed_{0};
  std::atomic<std::size_t> max_size_gauge_{0};
  std::atomic<bool> paused_gauge_{false};
  // When the front waiter queued (steady clock ticks), 0 when none waits.
  std::atomic<Clock::rep> front_since_{0};
  void PublishFront() {
    front_since_.store(waiters_.empty() ? 0 : waiters_.front()->queued_at.time_since_epoch().count(),
                       std::memory_order_relaxed);
  }
  std::atomic<std::uint64_t> maintenance_runs_{0};
};

}  // namespace hyperpool

#endif  // HYPERPOOL_POOL_POOL_IMPL_H_
