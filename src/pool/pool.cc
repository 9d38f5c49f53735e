// The pool's internals. The only Asio-heavy translation unit of src/pool.
//
// Connection states (ConnState) and the only transitions Allowed() permits:
//
//   kOpening  -> kIdle | kLent (a waiter) | kClosing (pool stopped) | kClosed (factory failed)
//   kIdle     -> kLent | kChecking (health check) | kClosing (idle timeout, lifetime, Stop)
//   kLent     -> kIdle (kReturn) | kChecking (kResetThenReturn, kRollbackThenReturn) | kClosing (kClose)
//   kChecking -> kIdle | kLent (a waiter) | kClosing (hook failed)
//   kClosing  -> kClosed (Close() finished; the entry is destroyed)

#include "pool/pool.h"

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

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

// After a background (min_idle) open fails with nobody waiting, wait this
// long before trying again, so a down origin is not hammered.
constexpr std::chrono::milliseconds kWarmRetryDelay{1000};

}  // namespace

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

namespace {

// Whether `from` -> `to` is a legal transition.
bool Allowed(ConnState from, ConnState to) {
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

}  // namespace

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

PoolEntry* PoolImpl::Transition(PoolEntry& entry, ConnState to) {
  const ConnState from = entry.state;
  HYPERPOOL_POOL_CHECK(Allowed(from, to));
  if (entry.outside_cap) {
    // Only ever closed (Release): it leaves the lent list and the count together.
    HYPERPOOL_POOL_CHECK(from == ConnState::kLent && to == ConnState::kClosing);
    entry.outside_cap = false;
    --outside_cap_;
    outside_cap_gauge_.store(outside_cap_, std::memory_order_relaxed);
  }
  gauges_[Index(from)].fetch_sub(1, std::memory_order_relaxed);
  if (from == ConnState::kIdle) {
    ++entry.idle_generation;
    entry.connection->StopWatchingIdle();
  }
  if (to == ConnState::kClosed) {
    List(from).erase(entry.self);
    Kick();  // below min_idle now, perhaps
    return nullptr;
  }
  List(to).splice(List(to).end(), List(from), entry.self);
  entry.state = to;
  gauges_[Index(to)].fetch_add(1, std::memory_order_relaxed);
  if (to == ConnState::kIdle) {
    entry.idle_since = Clock::now();
    // New deadlines: this entry's max_lifetime, and the idle_timeout of the
    // longest idle entry when the pool is above min_idle (RunMaintenance).
    Clock::time_point deadline = entry.opened_at + options_.max_lifetime;
    if (List(ConnState::kIdle).size() > options_.min_idle) {
      deadline = std::min(deadline, List(ConnState::kIdle).front().idle_since + options_.idle_timeout);
    }
    entry.watched = false;
    if (options_.idle_watch_delay.count() == 0) {
      WatchIdle(entry);
    } else {
      deadline = std::min(deadline, entry.idle_since + options_.idle_watch_delay);
    }
    KickIfEarlier(deadline);
  }
  // No cap check here: after Update() lowered max_size, Counted() stays
  // above it until the excess is released (NewOpeningEntry checks the cap).
  return &entry;
}

void PoolImpl::WatchIdle(PoolEntry& entry) {
  entry.watched = true;
  std::weak_ptr<PoolImpl> weak = weak_from_this();
  entry.connection->WatchIdle([weak, e = &entry, generation = entry.idle_generation] {
    if (auto self = weak.lock()) self->OnIdleActivity(e, generation);
  });
}

PoolEntry& PoolImpl::NewOpeningEntry() {
  HYPERPOOL_POOL_CHECK(Counted() < options_.max_size);
  auto& list = List(ConnState::kOpening);
  list.emplace_back();
  list.back().self = std::prev(list.end());
  list.back().epoch = epoch_;
  gauges_[Index(ConnState::kOpening)].fetch_add(1, std::memory_order_relaxed);
  return list.back();
}

void PoolImpl::OnIdleActivity(PoolEntry* entry, std::uint64_t generation) {
  // The entry may be gone: only trust the pointer if it is still in the idle
  // list with the generation the watch started with.
  for (PoolEntry& idle : List(ConnState::kIdle)) {
    if (&idle != entry) continue;
    if (idle.idle_generation != generation) return;
    OnIdleSpoke(idle);
    Pump();
    return;
  }
}

void PoolImpl::OnIdleSpoke(PoolEntry& entry) {
  if (callbacks_.health_check) {
    // Readable is not always dead: over TLS 1.3 the origin's
    // NewSessionTicket records can arrive after login. The health check
    // reads through them and tells; a dead backend fails it and is closed.
    StartCheck(entry);
  } else {
    discarded_.fetch_add(1, std::memory_order_relaxed);
    StartClose(entry);
  }
}

asio::awaitable<absl::StatusOr<Lease>> PoolImpl::Acquire(std::shared_ptr<PoolImpl> self, AcquireCancel* cancel) {
  if (self->stopped_) co_return absl::CancelledError("connection pool stopped");
  Waiter waiter(*self, Clock::now() + self->options_.acquire_timeout);
  waiter.position = self->waiters_.insert(self->waiters_.end(), &waiter);
  waiter.queued = true;
  self->waiting_.store(self->waiters_.size(), std::memory_order_relaxed);
  self->PublishFront();
  struct CancelScope {
    AcquireCancel* cancel;
    ~CancelScope() {
      if (cancel != nullptr) cancel->cancel_ = nullptr;
    }
  } scope{cancel};
  if (cancel != nullptr) {
    PoolImpl* pool = self.get();
    cancel->cancel_ = [pool, &waiter](absl::Status status) {
      if (!waiter.queued || waiter.result) return false;
      pool->Serve(waiter, std::move(status));
      // A connection being opened for this waiter now goes to the next one
      // (or to idle): nothing is closed.
      pool->Pump();
      return true;
    };
  }
  self->Pump();
  if (!waiter.result) {
    auto [ec] = co_await waiter.timer.async_wait(kAsTuple);
    if (!waiter.result) {
      // Not served: either the deadline passed or our caller cancelled us.
      self->Dequeue(waiter);
      if (ec == asio::error::operation_aborted) co_return absl::CancelledError("acquire cancelled");
      self->timeouts_.fetch_add(1, std::memory_order_relaxed);
      co_return absl::ResourceExhaustedError("Failed to acquire a connection from the pool (waited " +
                                             std::to_string(self->options_.acquire_timeout.count()) + " ms)");
    }
  }
  co_return std::move(*waiter.result);
}

std::optional<Lease> PoolImpl::TryAcquire() {
  if (stopped_ || paused_ || !waiters_.empty()) return std::nullopt;
  auto& idle = List(ConnState::kIdle);
  while (!idle.empty()) {
    // As Pump() does for the front waiter: the most recently used first.
    PoolEntry& entry = idle.back();
    if (SpokeWhileIdle(entry)) {
      OnIdleSpoke(entry);  // what the watch would have reported
      continue;
    }
    if (NeedsCheck(entry, Clock::now())) return std::nullopt;  // Acquire() checks it first
    Transition(entry, ConnState::kLent);
    acquired_.fetch_add(1, std::memory_order_relaxed);
    return Lease(shared_from_this(), &entry, entry.connection.get());
  }
  return std::nullopt;
}

void PoolImpl::Dequeue(Waiter& waiter) {
  if (!waiter.queued) return;
  waiters_.erase(waiter.position);
  waiter.queued = false;
  waiting_.store(waiters_.size(), std::memory_order_relaxed);
  PublishFront();
}

void PoolImpl::Serve(Waiter& waiter, absl::StatusOr<Lease> result) {
  Dequeue(waiter);
  waiter.result = std::move(result);
  // No effect if the timer's completion is already queued; the waiter then
  // finds `result` set when it runs.
  waiter.timer.cancel();
}

void PoolImpl::LendToFront(PoolEntry& entry) {
  HYPERPOOL_POOL_CHECK(!waiters_.empty());
  Transition(entry, ConnState::kLent);
  acquired_.fetch_add(1, std::memory_order_relaxed);
  Serve(*waiters_.front(), Lease(shared_from_this(), &entry, entry.connection.get()));
}

void PoolImpl::Offer(PoolEntry& entry) {
  if (stopped_) {
    StartClose(entry);
  } else if (!waiters_.empty() && !paused_) {
    LendToFront(entry);
  } else {
    Transition(entry, ConnState::kIdle);
  }
}

void PoolImpl::Pump() {
  while (!stopped_ && !paused_ && !waiters_.empty()) {
    auto& idle = List(ConnState::kIdle);
    if (!idle.empty()) {
      // Most recently used first: the rest stay idle long enough to time out
      // when demand drops.
      PoolEntry& entry = idle.back();
      if (SpokeWhileIdle(entry)) {
        OnIdleSpoke(entry);  // what the watch would have reported
        continue;
      }
      if (NeedsCheck(entry, Clock::now())) {
        StartCheck(entry);
      } else {
        LendToFront(entry);
      }
      continue;
    }
    // Connections on their way (being opened or checked) are already spoken
    // for by the waiters at the front.
    std::size_t coming = Count(ConnState::kOpening) + Count(ConnState::kChecking);
    if (coming < waiters_.size() && Counted() < options_.max_size) {
      StartOpen();
      continue;
    }
    break;
  }
}

void PoolImpl::StartOpen() {
  PoolEntry& entry = NewOpeningEntry();
  asio::co_spawn(executor_, OpenOne(shared_from_this(), &entry), asio::detached);
}

asio::awaitable<void> PoolImpl::OpenOne(std::shared_ptr<PoolImpl> self, PoolEntry* entry) {
  absl::StatusOr<std::unique_ptr<PooledConnection>> opened = absl::UnknownError("not opened");
  try {
    opened = co_await self->callbacks_.open();
  } catch (const std::exception& e) {
    opened = absl::InternalError(std::string("connection factory threw: ") + e.what());
  }
  if (opened.ok() && *opened == nullptr) opened = absl::InternalError("connection factory returned null");
  if (!opened.ok()) {
    self->open_failures_.fetch_add(1, std::memory_order_relaxed);
    self->Transition(*entry, ConnState::kClosed);  // frees the slot
    if (!self->stopped_ && !self->waiters_.empty()) {
      // Fail fast: the waiters learn why (the origin's failure) instead of
      // waiting for their timeout and reading "pool exhausted". Only as many
      // keep waiting as there are connections still on their way (being
      // opened or checked), which Pump() counted as theirs.
      const std::size_t coming = self->Count(ConnState::kOpening) + self->Count(ConnState::kChecking);
      while (self->waiters_.size() > coming) self->Serve(*self->waiters_.front(), opened.status());
    } else {
      self->warm_retry_at_ = Clock::now() + kWarmRetryDelay;
    }
    self->Pump();
    co_return;
  }
  entry->connection = *std::move(opened);
  entry->opened_at = Clock::now();
  self->opened_.fetch_add(1, std::memory_order_relaxed);
  self->Offer(*entry);
}

void PoolImpl::StartCheck(PoolEntry& entry) {
  Transition(entry, ConnState::kChecking);
  asio::co_spawn(executor_, CheckOne(shared_from_this(), &entry, &callbacks_.health_check), asio::detached);
}

void PoolImpl::StartReset(PoolEntry& entry, const ConnectionHook& hook) {
  Transition(entry, ConnState::kChecking);
  asio::co_spawn(executor_, CheckOne(shared_from_this(), &entry, &hook), asio::detached);
}

asio::awaitable<void> PoolImpl::CheckOne(std::shared_ptr<PoolImpl> self, PoolEntry* entry,
                                         const ConnectionHook* hook) {
  absl::Status status;
  try {
    status = co_await (*hook)(*entry->connection);
  } catch (const std::exception& e) {
    status = absl::InternalError(std::string("pool hook threw: ") + e.what());
  }
  if (!status.ok() || self->LifetimeExceeded(*entry)) {
    self->discarded_.fetch_add(1, std::memory_order_relaxed);
    self->StartClose(*entry);
  } else {
    self->Offer(*entry);
  }
  self->Pump();
}

void PoolImpl::StartClose(PoolEntry& entry) {
  Transition(entry, ConnState::kClosing);
  asio::co_spawn(executor_, CloseOne(shared_from_this(), &entry), asio::detached);
}

asio::awaitable<void> PoolImpl::CloseOne(std::shared_ptr<PoolImpl> self, PoolEntry* entry) {
  try {
    co_await entry->connection->Close();
  } catch (const std::exception&) {
    // Closing is best effort; the object is destroyed regardless.
  }
  self->closed_.fetch_add(1, std::memory_order_relaxed);
  self->Transition(*entry, ConnState::kClosed);
}

void PoolImpl::MoveOutOfCap(PoolEntry* entry) {
  HYPERPOOL_POOL_CHECK(entry->state == ConnState::kLent);
  if (entry->outside_cap) return;
  entry->outside_cap = true;
  ++outside_cap_;
  outside_cap_gauge_.store(outside_cap_, std::memory_order_relaxed);
  Pump();  // a slot is free for waiters
}

void PoolImpl::Release(PoolEntry* entry, ReleaseDecision decision) {
  HYPERPOOL_POOL_CHECK(entry->state == ConnState::kLent);
  // It carries one session's state: it never reaches anyone else.
  if (entry->outside_cap && decision != ReleaseDecision::kKeep) decision = ReleaseDecision::kClose;
  switch (decision) {
    case ReleaseDecision::kKeep:
      return;
    case ReleaseDecision::kReturn:
      if (stopped_ || LifetimeExceeded(*entry)) {
        discarded_.fetch_add(1, std::memory_order_relaxed);
        StartClose(*entry);
      } else {
        Transition(*entry, ConnState::kIdle);
      }
      break;
    case ReleaseDecision::kResetThenReturn:
    case ReleaseDecision::kRollbackThenReturn: {
      const ConnectionHook& hook =
          decision == ReleaseDecision::kResetThenReturn ? callbacks_.reset : callbacks_.rollback;
      if (stopped_ || !hook || LifetimeExceeded(*entry)) {
        discarded_.fetch_add(1, std::memory_order_relaxed);
        StartClose(*entry);
      } else {
        StartReset(*entry, hook);
      }
      break;
    }
    case ReleaseDecision::kClose:
      discarded_.fetch_add(1, std::memory_order_relaxed);
      StartClose(*entry);
      break;
  }
  Pump();
}

void PoolImpl::Stop() {
  if (stopped_) return;
  stopped_ = true;
  while (!waiters_.empty()) Serve(*waiters_.front(), absl::CancelledError("connection pool stopped"));
  auto& idle = List(ConnState::kIdle);
  while (!idle.empty()) StartClose(idle.front());
  // Opening and checking connections close when they finish; lent ones when released.
  Kick();
}

void PoolImpl::Reconnect() {
  if (stopped_) return;
  ++epoch_;
  auto& idle = List(ConnState::kIdle);
  while (!idle.empty()) StartClose(idle.front());
  Kick();  // min_idle is warmed up again with connections of the new epoch
  Pump();
}

void PoolImpl::Update(const PoolOptions& options) {
  const PoolMode mode = options_.mode;
  options_ = options;
  options_.mode = mode;
  max_size_gauge_.store(options_.max_size, std::memory_order_relaxed);
  auto& idle = List(ConnState::kIdle);
  while (!idle.empty() && Counted() > options_.max_size) StartClose(idle.front());
  Kick();
  Pump();  // a larger pool serves waiters at once
}

asio::awaitable<void> PoolImpl::Maintain(std::shared_ptr<PoolImpl> self) {
  while (!self->stopped_) {
    self->maintenance_due_ = self->RunMaintenance();
    self->maintenance_runs_.fetch_add(1, std::memory_order_relaxed);
    self->maintenance_timer_.expires_at(self->maintenance_due_);
    co_await self->maintenance_timer_.async_wait(kAsTuple);
    self->maintenance_due_ = Clock::time_point::min();
  }
}

Clock::time_point PoolImpl::RunMaintenance() {
  if (stopped_) return Clock::time_point::max();
  const Clock::time_point now = Clock::now();
  auto& idle = List(ConnState::kIdle);

  // Over max_lifetime: close, whatever min_idle says (warm-up replaces them).
  for (auto it = idle.begin(); it != idle.end();) {
    PoolEntry& entry = *it++;
    if (LifetimeExceeded(entry)) StartClose(entry);
  }
  // Idle too long: close the longest idle first (the list front), keeping min_idle.
  while (idle.size() > options_.min_idle && now - idle.front().idle_since >= options_.idle_timeout) {
    StartClose(idle.front());
  }
  // Keep min_idle warm, unless a recent background open failed.
  bool warm_blocked = now < warm_retry_at_;
  if (!warm_blocked) {
    while (Count(ConnState::kIdle) + Count(ConnState::kOpening) + Count(ConnState::kChecking) <
               options_.min_idle &&
           Counted() < options_.max_size) {
      StartOpen();
    }
  }

  // Idle long enough to be worth watching (PoolOptions::idle_watch_delay).
  for (PoolEntry& entry : idle) {
    if (!entry.watched && now - entry.idle_since >= options_.idle_watch_delay) WatchIdle(entry);
  }

  // The next moment something above can change.
  Clock::time_point next = Clock::time_point::max();
  for (const PoolEntry& entry : idle) {
    if (!entry.watched) next = std::min(next, entry.idle_since + options_.idle_watch_delay);
  }
  for (const PoolEntry& entry : idle) next = std::min(next, entry.opened_at + options_.max_lifetime);
  if (idle.size() > options_.min_idle) next = std::min(next, idle.front().idle_since + options_.idle_timeout);
  if (warm_blocked && Count(ConnState::kIdle) + Count(ConnState::kOpening) < options_.min_idle) {
    next = std::min(next, warm_retry_at_);
  }
  return next;
}

// Lease.

Lease::Lease(std::shared_ptr<PoolImpl> pool, PoolEntry* entry, PooledConnection* connection)
    : pool_(std::move(pool)), entry_(entry), connection_(connection) {}

Lease::Lease(Lease&& other) noexcept
    : pool_(std::move(other.pool_)),
      entry_(std::exchange(other.entry_, nullptr)),
      connection_(std::exchange(other.connection_, nullptr)) {}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    if (connection_ != nullptr) Release(ReleaseDecision::kClose);
    pool_ = std::move(other.pool_);
    entry_ = std::exchange(other.entry_, nullptr);
    connection_ = std::exchange(other.connection_, nullptr);
  }
  return *this;
}

Lease::~Lease() {
  if (connection_ != nullptr) Release(ReleaseDecision::kClose);
}

std::chrono::steady_clock::time_point Lease::opened_at() const { return entry_->opened_at; }

bool Lease::lifetime_exceeded() const { return pool_->LifetimeExceeded(*entry_); }

void Lease::MoveOutOfCap() {
  HYPERPOOL_POOL_CHECK(connection_ != nullptr);
  pool_->MoveOutOfCap(entry_);
}

void Lease::Release(ReleaseDecision decision) {
  HYPERPOOL_POOL_CHECK(connection_ != nullptr);
  if (decision == ReleaseDecision::kKeep) return;
  // Empty the lease first: the pool may lend the connection to a waiter
  // inside this call.
  auto pool = std::move(pool_);
  PoolEntry* entry = std::exchange(entry_, nullptr);
  connection_ = nullptr;
  pool->Release(entry, decision);
}

// Pool.

absl::StatusOr<std::unique_ptr<Pool>> Pool::Create(asio::any_io_executor executor, PoolOptions options,
                                                   PoolCallbacks callbacks) {
  using std::chrono::milliseconds;
  if (options.max_size < 1) return absl::InvalidArgumentError("pool max_size must be at least 1");
  if (options.min_idle > options.max_size) {
    return absl::InvalidArgumentError("pool min_idle must not exceed max_size");
  }
  if (options.acquire_timeout <= milliseconds::zero() || options.idle_timeout <= milliseconds::zero() ||
      options.max_lifetime <= milliseconds::zero() || options.health_check_after < milliseconds::zero() ||
      options.idle_watch_delay < milliseconds::zero() ||
      options.connect_timeout <= milliseconds::zero()) {
    return absl::InvalidArgumentError("pool timeouts must be positive");
  }
  if (!callbacks.open) return absl::InvalidArgumentError("pool needs a connection factory");
  auto impl = std::make_shared<PoolImpl>(std::move(executor), options, std::move(callbacks));
  impl->Start();
  return std::unique_ptr<Pool>(new Pool(std::move(impl)));
}

Pool::Pool(std::shared_ptr<PoolImpl> impl) : impl_(std::move(impl)) {}

Pool::~Pool() { impl_->Stop(); }

asio::awaitable<absl::StatusOr<Lease>> Pool::Acquire(AcquireCancel* cancel) {
  return PoolImpl::Acquire(impl_, cancel);
}

std::optional<Lease> Pool::TryAcquire() { return impl_->TryAcquire(); }

void Pool::Stop() { impl_->Stop(); }

PoolStats Pool::Stats() const { return impl_->Stats(); }

void Pool::Pause() { impl_->Pause(); }
void Pool::Resume() { impl_->Resume(); }
void Pool::Reconnect() { impl_->Reconnect(); }
std::vector<PoolServerInfo> Pool::Servers() const { return impl_->Servers(); }

absl::Status Pool::Update(PoolOptions options) {
  using std::chrono::milliseconds;
  if (options.max_size < 1) return absl::InvalidArgumentError("pool max_size must be at least 1");
  if (options.min_idle > options.max_size) return absl::InvalidArgumentError("pool min_idle must not exceed max_size");
  if (options.acquire_timeout <= milliseconds::zero() || options.idle_timeout <= milliseconds::zero() ||
      options.max_lifetime <= milliseconds::zero() || options.health_check_after < milliseconds::zero() ||
      options.connect_timeout <= milliseconds::zero()) {
    return absl::InvalidArgumentError("pool timeouts must be positive");
  }
  impl_->Update(options);
  return absl::OkStatus();
}

const PoolOptions& Pool::options() const { return impl_->options(); }

}  // namespace hyperpool
