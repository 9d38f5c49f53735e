// The pool (pool.h): connection states and their one transition function,
// lending, opening, health checks and resets, releases and maintenance. The
// state itself is pool_impl.h; Lease and the Pool facade are pool_lease.cc.

#include "pool/pool_impl.h"

namespace hyperpool {

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

}  // namespace hyperpool
