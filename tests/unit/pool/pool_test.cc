// Pool behaviour against an in-memory fake connection. The io_context is
// driven step by step (poll / run_one_for); real time passes only in the
// tests whose subject is a timeout.

#include "pool/pool.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

namespace hyperpool {
namespace {

using namespace std::chrono_literals;
using Result = std::optional<absl::StatusOr<Lease>>;

// Everything the fake connections and hooks share with the test.
struct FakeOrigin {
  int next_id = 1;
  int live = 0;  // connection objects in existence
  int open_calls = 0;
  int checks = 0;
  int resets = 0;
  int rollbacks = 0;
  std::deque<absl::Status> open_failures;  // the next factory calls fail with these
  std::vector<int> closed;                 // ids, in Close() order
  std::vector<int> unhealthy;              // ids whose health check fails
  bool reset_fails = false;
  bool rollback_fails = false;
  // Idle watches in progress, by connection id (WatchIdle's callbacks).
  std::map<int, std::function<void()>> watches;
  int watch_stops = 0;
  int watch_calls = 0;      // WatchIdle calls
  int idle_polls = 0;       // IdleActivity calls
  std::vector<int> spoken;  // ids whose IdleActivity() reports the origin spoke
};

class FakeConnection final : public PooledConnection {
 public:
  explicit FakeConnection(FakeOrigin& origin) : origin_(origin), id_(origin.next_id++) { ++origin_.live; }
  ~FakeConnection() override { --origin_.live; }
  asio::awaitable<void> Close() override {
    origin_.closed.push_back(id_);
    co_return;
  }
  int id() const { return id_; }
  void WatchIdle(std::function<void()> on_activity) override {
    ++origin_.watch_calls;
    origin_.watches[id_] = std::move(on_activity);
  }
  bool IdleActivity() override {
    ++origin_.idle_polls;
    return std::find(origin_.spoken.begin(), origin_.spoken.end(), id_) != origin_.spoken.end();
  }
  void StopWatchingIdle() override {
    ++origin_.watch_stops;
    origin_.watches.erase(id_);
  }

 private:
  FakeOrigin& origin_;
  int id_;
};

int IdOf(const Result& result) { return (*result)->As<FakeConnection>().id(); }

// Runs ready handlers until none is left.
void Settle(asio::io_context& io) {
  for (;;) {
    io.restart();
    if (io.poll() == 0) return;
  }
}

// Runs the io_context until `done()`, for at most `limit` of real time.
template <typename Done>
bool RunUntil(asio::io_context& io, Done done, std::chrono::milliseconds limit = 5000ms) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    io.restart();
    io.run_one_for(2ms);
  }
  return true;
}

struct Hooks {
  bool health_check = false;
  bool reset = false;
  bool rollback = false;
};

PoolOptions Options(std::size_t max_size) {
  PoolOptions o;
  o.max_size = max_size;
  o.acquire_timeout = 60s;
  o.idle_watch_delay = 0ms;  // watched at once; the tests of the delay set it
  o.idle_poll_after = 0us;   // polled at every lend; its own test sets it
  return o;
}

// Member order matters: `origin` outlives the io_context, whose destruction
// may destroy the last connections.
struct Fixture {
  explicit Fixture(PoolOptions options, Hooks hooks = {}) {
    PoolCallbacks callbacks;
    callbacks.open = [this]() -> asio::awaitable<absl::StatusOr<std::unique_ptr<PooledConnection>>> {
      ++origin.open_calls;
      // Opening takes a turn of the event loop, like a real connect.
      co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
      if (!origin.open_failures.empty()) {
        absl::Status failure = origin.open_failures.front();
        origin.open_failures.pop_front();
        co_return failure;
      }
      co_return std::make_unique<FakeConnection>(origin);
    };
    if (hooks.health_check) {
      callbacks.health_check = [this](PooledConnection& c) -> asio::awaitable<absl::Status> {
        ++origin.checks;
        int id = static_cast<FakeConnection&>(c).id();
        bool bad = std::find(origin.unhealthy.begin(), origin.unhealthy.end(), id) != origin.unhealthy.end();
        co_return bad ? absl::UnavailableError("check failed") : absl::OkStatus();
      };
    }
    if (hooks.reset) {
      callbacks.reset = [this](PooledConnection&) -> asio::awaitable<absl::Status> {
        ++origin.resets;
        co_return origin.reset_fails ? absl::UnavailableError("reset failed") : absl::OkStatus();
      };
    }
    if (hooks.rollback) {
      callbacks.rollback = [this](PooledConnection&) -> asio::awaitable<absl::Status> {
        ++origin.rollbacks;
        co_return origin.rollback_fails ? absl::UnavailableError("rollback failed") : absl::OkStatus();
      };
    }
    pool = Pool::Create(io.get_executor(), options, std::move(callbacks)).value();
  }
  ~Fixture() {
    pool->Stop();
    Settle(io);
  }

  // Starts an Acquire() whose result lands in `out`.
  void Acquire(Result& out) {
    asio::co_spawn(io, [this, &out]() -> asio::awaitable<void> { out = co_await pool->Acquire(); }, asio::detached);
  }
  // Acquires and waits for the result (no timeouts involved).
  Result AcquireNow() {
    Result out;
    Acquire(out);
    Settle(io);
    return out;
  }

  FakeOrigin origin;
  asio::io_context io;
  std::unique_ptr<Pool> pool;
};

TEST_CASE("a released connection is reused") {
  Fixture f(Options(2));
  Result a = f.AcquireNow();
  REQUIRE(a.has_value());
  REQUIRE(a->ok());
  int id = IdOf(a);
  (*a)->Release(ReleaseDecision::kReturn);
  CHECK_FALSE(static_cast<bool>(**a));
  Settle(f.io);
  CHECK(f.pool->Stats().idle == 1);

  Result b = f.AcquireNow();
  REQUIRE(b->ok());
  CHECK(IdOf(b) == id);
  CHECK(f.origin.open_calls == 1);
  PoolStats s = f.pool->Stats();
  CHECK(s.acquired == 2);
  CHECK(s.lent == 1);
  CHECK(s.idle == 0);
}

TEST_CASE("returning a connection does not wake the maintenance pass when no deadline moved earlier") {
  // Per-transaction cost: a release used to cancel and re-arm the
  // maintenance timer every time (issue 11).
  Fixture f(Options(2));
  Settle(f.io);
  const std::uint64_t before = f.pool->Stats().maintenance_runs;
  for (int i = 0; i < 50; ++i) {
    Result a = f.AcquireNow();
    REQUIRE(a->ok());
    (*a)->Release(ReleaseDecision::kReturn);
    Settle(f.io);
  }
  // The first idle connection brings the first idle/lifetime deadline; the
  // 49 later releases bring none earlier than it.
  CHECK(f.pool->Stats().maintenance_runs - before <= 2);
  CHECK(f.pool->Stats().idle == 1);
}

TEST_CASE("kKeep leaves the lease holding its connection") {
  Fixture f(Options(1));
  Result a = f.AcquireNow();
  REQUIRE(a->ok());
  (*a)->Release(ReleaseDecision::kKeep);
  CHECK(static_cast<bool>(**a));
  CHECK(f.pool->Stats().lent == 1);
}

TEST_CASE("a lease moved out of the cap frees its slot for waiters and is closed, never shared, on release") {
  Fixture f(Options(1));
  Result pinned = f.AcquireNow();
  REQUIRE(pinned->ok());
  const int pinned_id = IdOf(pinned);
  Result waiter;
  f.Acquire(waiter);
  Settle(f.io);
  CHECK_FALSE(waiter.has_value());  // max_size 1 is taken
  (*pinned)->MoveOutOfCap();
  (*pinned)->MoveOutOfCap();  // idempotent
  Settle(f.io);
  REQUIRE(waiter.has_value());  // served by a new connection at once
  REQUIRE(waiter->ok());
  CHECK(IdOf(waiter) != pinned_id);
  PoolStats s = f.pool->Stats();
  CHECK(s.open == 2);
  CHECK(s.outside_cap == 1);
  // Given back "to share", it is closed instead: it carries one session's state.
  (*pinned)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  CHECK(f.origin.closed == std::vector<int>{pinned_id});
  s = f.pool->Stats();
  CHECK(s.outside_cap == 0);
  CHECK(s.open == 1);
  CHECK(s.idle == 0);
  (*waiter)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  CHECK(f.pool->Stats().idle == 1);
}

TEST_CASE("50 concurrent acquirers never push the pool past max_size 5") {
  Fixture f(Options(5));
  constexpr int kClients = 50;
  int holding = 0;
  int max_holding = 0;
  int done = 0;
  int failed = 0;
  for (int i = 0; i < kClients; ++i) {
    asio::co_spawn(
        f.io,
        [&, i]() -> asio::awaitable<void> {
          auto lease = co_await f.pool->Acquire();
          if (!lease.ok()) {
            ++failed;
            ++done;
            co_return;
          }
          max_holding = std::max(max_holding, ++holding);
          // Hold it for a few turns of the loop (a "transaction").
          for (int turn = 0; turn < 1 + i % 4; ++turn) {
            co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
          }
          --holding;
          lease->Release(ReleaseDecision::kReturn);
          ++done;
        },
        asio::detached);
  }
  std::size_t max_open = 0;
  std::size_t max_waiting = 0;
  auto check_step = [&] {
    PoolStats s = f.pool->Stats();
    REQUIRE(s.open <= 5);
    REQUIRE(s.lent <= 5);
    REQUIRE(f.origin.live <= 5);
    max_open = std::max(max_open, s.open);
    max_waiting = std::max(max_waiting, s.waiting);
  };
  for (;;) {
    f.io.restart();
    if (f.io.poll_one() == 0) break;
    check_step();
  }
  CHECK(done == kClients);
  CHECK(failed == 0);
  CHECK(max_holding == 5);
  CHECK(max_open == 5);
  CHECK(max_waiting >= 40);
  CHECK(f.origin.open_calls == 5);
  PoolStats s = f.pool->Stats();
  CHECK(s.acquired == kClients);
  CHECK(s.idle == 5);
  CHECK(s.waiting == 0);
}

TEST_CASE("waiters are served in FIFO order") {
  Fixture f(Options(1));
  Result holder = f.AcquireNow();
  REQUIRE(holder->ok());
  std::vector<std::string> order;
  for (std::string name : {"b", "c", "d", "e"}) {
    asio::co_spawn(
        f.io,
        [&, name]() -> asio::awaitable<void> {
          auto lease = co_await f.pool->Acquire();
          REQUIRE(lease.ok());
          order.push_back(name);
          co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
          lease->Release(ReleaseDecision::kReturn);
        },
        asio::detached);
    Settle(f.io);  // queued before the next one starts
  }
  CHECK(f.pool->Stats().waiting == 4);
  (*holder)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  CHECK(order == std::vector<std::string>{"b", "c", "d", "e"});
  CHECK(f.origin.open_calls == 1);
}

TEST_CASE("a waiter times out with a pool-exhausted error") {
  PoolOptions options = Options(1);
  options.acquire_timeout = 20ms;
  Fixture f(options);
  Result holder = f.AcquireNow();
  REQUIRE(holder->ok());
  Result waiter;
  f.Acquire(waiter);
  REQUIRE(RunUntil(f.io, [&] { return waiter.has_value(); }));
  REQUIRE_FALSE(waiter->ok());
  CHECK(waiter->status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(waiter->status().message()),
             Catch::Matchers::ContainsSubstring("Failed to acquire a connection from the pool"));
  PoolStats s = f.pool->Stats();
  CHECK(s.timeouts == 1);
  CHECK(s.waiting == 0);
  // The held connection is unaffected and goes back to the pool.
  (*holder)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  CHECK(f.pool->Stats().idle == 1);
}

TEST_CASE("a waiter served just as its timer fires keeps the connection") {
  PoolOptions options = Options(1);
  options.acquire_timeout = 50ms;
  Fixture f(options);
  Result holder = f.AcquireNow();
  REQUIRE(holder->ok());
  int id = IdOf(holder);

  auto before_waiter = std::chrono::steady_clock::now();
  Result waiter;
  f.Acquire(waiter);
  Settle(f.io);
  REQUIRE(f.pool->Stats().waiting == 1);

  // A timer due just before the waiter's deadline releases the connection.
  // Both are overdue when the loop next runs, so both completions are queued
  // together, the release first: the release hands the connection over while
  // the waiter's own timer completion (success = "timed out") is already
  // queued and can no longer be cancelled.
  asio::steady_timer release_timer(f.io, before_waiter + options.acquire_timeout - 1ms);
  release_timer.async_wait([&](asio::error_code) { (*holder)->Release(ReleaseDecision::kReturn); });
  std::this_thread::sleep_for(options.acquire_timeout + 20ms);
  REQUIRE(RunUntil(f.io, [&] { return waiter.has_value(); }));

  PoolStats s = f.pool->Stats();
  REQUIRE(waiter->ok());
  CHECK(IdOf(waiter) == id);
  CHECK(s.timeouts == 0);
  CHECK(s.lent == 1);
  CHECK(s.idle == 0);
}

TEST_CASE("a failing factory wakes a waiter with its error and frees the slot") {
  Fixture f(Options(1));
  f.origin.open_failures.push_back(absl::UnavailableError("origin refused the connection"));
  Result first;
  Result second;
  f.Acquire(first);
  f.Acquire(second);
  Settle(f.io);  // no real time passes: nobody waits for acquire_timeout (60 s)

  REQUIRE(first.has_value());
  REQUIRE_FALSE(first->ok());
  CHECK(first->status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(first->status().message()), Catch::Matchers::ContainsSubstring("origin refused"));
  // No other connection was on its way: the second waiter hears the origin's
  // failure too, at once, instead of "pool exhausted" at its deadline.
  REQUIRE(second.has_value());
  REQUIRE_FALSE(second->ok());
  CHECK(second->status().code() == absl::StatusCode::kUnavailable);
  CHECK(f.origin.open_calls == 1);
  // The slot was not leaked: the next Acquire opens a connection.
  Result third = f.AcquireNow();
  REQUIRE(third->ok());
  PoolStats s = f.pool->Stats();
  CHECK(s.open_failures == 1);
  CHECK(s.opened == 1);
  CHECK(s.opening == 0);
  CHECK(s.open == 1);
  CHECK(s.timeouts == 0);
}

TEST_CASE("an open failure fails only the waiters no other opening connection is for") {
  Fixture f(Options(3));
  f.origin.open_failures.push_back(absl::UnavailableError("origin refused the connection"));
  Result results[3];
  for (auto& r : results) f.Acquire(r);
  Settle(f.io);
  int failed = 0;
  int served = 0;
  for (auto& r : results) {
    REQUIRE(r.has_value());
    (r->ok() ? served : failed)++;
  }
  CHECK(failed == 1);
  CHECK(served == 2);
}

TEST_CASE("AcquireCancel ends a waiting Acquire at once and leaves the pool alone") {
  Fixture f(Options(1));
  Result holder = f.AcquireNow();
  REQUIRE(holder->ok());
  AcquireCancel cancel;
  Result waiter;
  Result next;
  asio::co_spawn(f.io, [&]() -> asio::awaitable<void> { waiter = co_await f.pool->Acquire(&cancel); }, asio::detached);
  Settle(f.io);
  f.Acquire(next);
  Settle(f.io);
  REQUIRE(f.pool->Stats().waiting == 2);
  CHECK(cancel.Cancel(absl::AbortedError("canceling statement due to user request")));
  Settle(f.io);  // no real time passes: the 60 s acquire timeout plays no part
  REQUIRE(waiter.has_value());
  REQUIRE_FALSE(waiter->ok());
  CHECK(waiter->status().code() == absl::StatusCode::kAborted);
  PoolStats s = f.pool->Stats();
  CHECK(s.waiting == 1);
  CHECK(s.discarded == 0);
  CHECK(s.lent == 1);
  CHECK_FALSE(cancel.Cancel(absl::AbortedError("again")));  // nothing waits any more
  // The queue still works: the other waiter gets the connection.
  (*holder)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  REQUIRE(next.has_value());
  REQUIRE(next->ok());
  CHECK(f.pool->Stats().discarded == 0);
  CHECK(f.origin.closed.empty());
}

TEST_CASE("an idle connection the origin speaks on (or closes) is closed, never lent") {
  Fixture f(Options(2));
  Result a = f.AcquireNow();
  REQUIRE(a->ok());
  const int dead = IdOf(a);
  CHECK(f.origin.watches.empty());  // not watched while lent
  (*a)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  REQUIRE(f.origin.watches.count(dead) == 1);
  // The origin terminates the idle backend: its socket becomes readable.
  auto report = f.origin.watches[dead];
  report();
  Settle(f.io);
  CHECK(f.origin.closed == std::vector<int>{dead});
  PoolStats s = f.pool->Stats();
  CHECK(s.idle == 0);
  CHECK(s.discarded == 1);
  Result b = f.AcquireNow();
  REQUIRE(b->ok());
  CHECK(IdOf(b) != dead);
}

TEST_CASE("with a health check, an idle connection that became readable is checked: kept if healthy") {
  // Over TLS 1.3 a live origin's NewSessionTicket records can make an idle
  // socket readable; only the check can tell that from a goodbye.
  Fixture f(Options(2), Hooks{.health_check = true});
  Result a = f.AcquireNow();
  REQUIRE(a->ok());
  const int id = IdOf(a);
  (*a)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  const int checks_before = f.origin.checks;
  f.origin.watches[id]();
  Settle(f.io);
  CHECK(f.origin.checks == checks_before + 1);
  CHECK(f.origin.closed.empty());
  CHECK(f.pool->Stats().idle == 1);
  REQUIRE(f.origin.watches.count(id) == 1);  // watched again
  f.origin.unhealthy.push_back(id);
  f.origin.watches[id]();
  Settle(f.io);
  CHECK(f.origin.closed == std::vector<int>{id});
  CHECK(f.pool->Stats().discarded == 1);
}

TEST_CASE("with idle_watch_delay, a connection lent again soon is polled once at lend, never watched") {
  // Arming the watch at every release and cancelling it at the next lend
  // cost an epoll_ctl and two completions per transaction (issue 11).
  PoolOptions options = Options(2);
  options.idle_watch_delay = 1h;
  Fixture f(options);
  for (int i = 0; i < 20; ++i) {
    Result a = f.AcquireNow();
    REQUIRE(a->ok());
    (*a)->Release(ReleaseDecision::kReturn);
    Settle(f.io);
  }
  CHECK(f.origin.watch_calls == 0);
  CHECK(f.origin.idle_polls == 19);  // every lend of an idle connection but the first (a new one)
  CHECK(f.origin.open_calls == 1);
}

TEST_CASE("a connection lent again within idle_poll_after of its release is not polled; one idle longer is") {
  PoolOptions options = Options(2);
  options.idle_watch_delay = 1h;
  const bool soon = GENERATE(true, false);
  // Either every lend comes long before the bound, or each comes after it
  // (a lower bound slept, not a race).
  options.idle_poll_after = soon ? std::chrono::microseconds(1h) : std::chrono::microseconds(1ms);
  Fixture f(options);
  for (int i = 0; i < 5; ++i) {
    if (!soon && i > 0) std::this_thread::sleep_for(5ms);
    Result a = f.AcquireNow();
    REQUIRE(a->ok());
    (*a)->Release(ReleaseDecision::kReturn);
    Settle(f.io);
  }
  CHECK(f.origin.idle_polls == (soon ? 0 : 4));  // every lend of an idle connection but the first (a new one)
}

TEST_CASE("a connection lent before its watch is armed and the origin spoke on is closed, never lent") {
  PoolOptions options = Options(2);
  options.idle_watch_delay = 1h;
  Fixture f(options);
  Result a = f.AcquireNow();
  REQUIRE(a->ok());
  const int dead = IdOf(a);
  (*a)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  CHECK(f.origin.watches.empty());
  f.origin.spoken.push_back(dead);  // e.g. pg_terminate_backend: a FATAL, then EOF
  Result b = f.AcquireNow();
  REQUIRE(b->ok());
  CHECK(IdOf(b) != dead);
  CHECK(f.origin.closed == std::vector<int>{dead});
  CHECK(f.pool->Stats().discarded == 1);
}

TEST_CASE("the idle watch is armed once a connection has been idle for idle_watch_delay") {
  PoolOptions options = Options(2);
  options.idle_watch_delay = 20ms;
  Fixture f(options);
  Result a = f.AcquireNow();
  REQUIRE(a->ok());
  const int id = IdOf(a);
  (*a)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  CHECK(f.origin.watches.empty());
  REQUIRE(RunUntil(f.io, [&] { return f.origin.watches.count(id) == 1; }));
  // A watched connection needs no poll when lent.
  const int polls = f.origin.idle_polls;
  Result b = f.AcquireNow();
  REQUIRE(b->ok());
  CHECK(IdOf(b) == id);
  CHECK(f.origin.idle_polls == polls);
}

TEST_CASE("an idle-watch report that arrives after the connection was lent is ignored") {
  Fixture f(Options(1));
  Result a = f.AcquireNow();
  REQUIRE(a->ok());
  const int id = IdOf(a);
  (*a)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  auto stale = f.origin.watches[id];
  Result b = f.AcquireNow();  // lent again: the watch stops
  REQUIRE(b->ok());
  CHECK(f.origin.watches.count(id) == 0);
  stale();  // its completion was already queued
  Settle(f.io);
  CHECK(f.origin.closed.empty());
  CHECK(f.pool->Stats().lent == 1);
}

TEST_CASE("a broken connection is closed and replaced") {
  Fixture f(Options(1));
  Result a = f.AcquireNow();
  REQUIRE(a->ok());
  int first = IdOf(a);
  (*a)->Release(DecideRelease({.status = TransactionStatus::kIdle, .broken = true}));
  Settle(f.io);
  CHECK(f.origin.closed == std::vector<int>{first});
  CHECK(f.origin.live == 0);
  CHECK(f.pool->Stats().discarded == 1);
  CHECK(f.pool->Stats().open == 0);

  Result b = f.AcquireNow();
  REQUIRE(b->ok());
  CHECK(IdOf(b) != first);
}

TEST_CASE("a lease dropped without Release closes its connection") {
  Fixture f(Options(1));
  {
    Result a = f.AcquireNow();
    REQUIRE(a->ok());
  }
  Settle(f.io);
  CHECK(f.origin.closed.size() == 1);
  CHECK(f.pool->Stats().idle == 0);
  CHECK(f.pool->Stats().discarded == 1);
}

TEST_CASE("min_idle connections are opened in the background") {
  PoolOptions options = Options(5);
  options.min_idle = 2;
  Fixture f(options);
  Settle(f.io);
  CHECK(f.pool->Stats().idle == 2);
  CHECK(f.origin.open_calls == 2);
}

TEST_CASE("idle timeout shrinks the pool to min_idle") {
  PoolOptions options = Options(5);
  options.min_idle = 1;
  options.idle_timeout = 30ms;
  Fixture f(options);
  std::vector<Result> leases(3);
  for (auto& lease : leases) f.Acquire(lease);
  Settle(f.io);
  for (auto& lease : leases) {
    REQUIRE(lease->ok());
    (*lease)->Release(ReleaseDecision::kReturn);
  }
  Settle(f.io);
  REQUIRE(f.pool->Stats().idle == 3);

  REQUIRE(RunUntil(f.io, [&] { return f.pool->Stats().idle == 1; }));
  // And it stays at min_idle: run for a few more idle timeouts.
  RunUntil(f.io, [] { return false; }, 100ms);
  PoolStats s = f.pool->Stats();
  CHECK(s.idle == 1);
  CHECK(s.open == 1);
  CHECK(f.origin.closed.size() == 2);
}

TEST_CASE("an idle connection past max_lifetime is closed") {
  PoolOptions options = Options(2);
  options.max_lifetime = 30ms;
  Fixture f(options);
  Result a = f.AcquireNow();
  REQUIRE(a->ok());
  (*a)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  REQUIRE(f.pool->Stats().idle == 1);
  REQUIRE(RunUntil(f.io, [&] { return f.pool->Stats().open == 0; }));
  CHECK(f.origin.closed.size() == 1);
}

TEST_CASE("a lent connection past max_lifetime is closed instead of returned") {
  PoolOptions options = Options(2);
  options.max_lifetime = 20ms;
  Fixture f(options);
  Result a = f.AcquireNow();
  REQUIRE(a->ok());
  CHECK_FALSE((*a)->lifetime_exceeded());
  std::this_thread::sleep_for(options.max_lifetime + 5ms);
  CHECK((*a)->lifetime_exceeded());
  // Even a caller that ignores the policy's input cannot return it.
  (*a)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  CHECK(f.pool->Stats().idle == 0);
  CHECK(f.origin.closed.size() == 1);
}

TEST_CASE("a failed health check discards the connection and opens another") {
  PoolOptions options = Options(2);
  options.health_check_after = 0ms;  // check every idle connection before lending
  Fixture f(options, {.health_check = true});
  Result a = f.AcquireNow();
  REQUIRE(a->ok());
  int first = IdOf(a);
  CHECK(f.origin.checks == 0);  // a new connection needs no check
  (*a)->Release(ReleaseDecision::kReturn);
  Settle(f.io);

  f.origin.unhealthy.push_back(first);
  std::this_thread::sleep_for(1ms);  // idle for longer than health_check_after
  Result b = f.AcquireNow();
  REQUIRE(b->ok());
  CHECK(f.origin.checks == 1);
  CHECK(IdOf(b) != first);
  CHECK(f.origin.closed == std::vector<int>{first});
  CHECK(f.pool->Stats().discarded == 1);

  // A healthy one passes its check and is lent again.
  int second = IdOf(b);
  (*b)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  std::this_thread::sleep_for(1ms);
  Result c = f.AcquireNow();
  REQUIRE(c->ok());
  CHECK(f.origin.checks == 2);
  CHECK(IdOf(c) == second);
}

TEST_CASE("a recently used connection is lent without a health check") {
  Fixture f(Options(1), {.health_check = true});  // health_check_after defaults to 30 s
  Result a = f.AcquireNow();
  REQUIRE(a->ok());
  (*a)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  Result b = f.AcquireNow();
  REQUIRE(b->ok());
  CHECK(f.origin.checks == 0);
}

TEST_CASE("reset-then-return runs the reset hook before sharing") {
  PoolOptions options = Options(1);
  options.mode = PoolMode::kSession;
  Fixture f(options, {.reset = true});
  Result a = f.AcquireNow();
  REQUIRE(a->ok());
  int id = IdOf(a);
  ReleaseInputs gone{.mode = PoolMode::kSession, .status = TransactionStatus::kIdle, .client_gone = true};
  REQUIRE(DecideRelease(gone) == ReleaseDecision::kResetThenReturn);
  (*a)->Release(DecideRelease(gone));
  Settle(f.io);
  CHECK(f.origin.resets == 1);
  CHECK(f.pool->Stats().idle == 1);
  Result b = f.AcquireNow();
  REQUIRE(b->ok());
  CHECK(IdOf(b) == id);

  f.origin.reset_fails = true;
  (*b)->Release(ReleaseDecision::kResetThenReturn);
  Settle(f.io);
  CHECK(f.origin.resets == 2);
  CHECK(f.pool->Stats().idle == 0);
  CHECK(f.origin.closed == std::vector<int>{id});
}

TEST_CASE("rollback-then-return runs the rollback hook (not the reset) before sharing") {
  Fixture f(Options(1), {.reset = true, .rollback = true});
  Result a = f.AcquireNow();
  REQUIRE(a->ok());
  int id = IdOf(a);
  ReleaseInputs gone{.status = TransactionStatus::kInTransaction, .client_gone = true};
  REQUIRE(DecideRelease(gone) == ReleaseDecision::kRollbackThenReturn);
  (*a)->Release(DecideRelease(gone));
  Settle(f.io);
  CHECK(f.origin.rollbacks == 1);
  CHECK(f.origin.resets == 0);
  CHECK(f.pool->Stats().idle == 1);
  Result b = f.AcquireNow();
  REQUIRE(b->ok());
  CHECK(IdOf(b) == id);

  f.origin.rollback_fails = true;
  (*b)->Release(ReleaseDecision::kRollbackThenReturn);
  Settle(f.io);
  CHECK(f.origin.rollbacks == 2);
  CHECK(f.pool->Stats().idle == 0);
  CHECK(f.origin.closed == std::vector<int>{id});
}

TEST_CASE("rollback-then-return without a rollback hook closes") {
  Fixture f(Options(1));
  Result a = f.AcquireNow();
  REQUIRE(a->ok());
  int id = IdOf(a);
  (*a)->Release(ReleaseDecision::kRollbackThenReturn);
  Settle(f.io);
  CHECK(f.pool->Stats().idle == 0);
  CHECK(f.origin.closed == std::vector<int>{id});
}

TEST_CASE("Stop wakes every waiter and closes every connection") {
  Fixture f(Options(1));
  Result holder = f.AcquireNow();
  REQUIRE(holder->ok());
  Result b;
  Result c;
  f.Acquire(b);
  f.Acquire(c);
  Settle(f.io);
  REQUIRE(f.pool->Stats().waiting == 2);

  f.pool->Stop();
  Settle(f.io);
  REQUIRE(b.has_value());
  REQUIRE(c.has_value());
  CHECK(b->status().code() == absl::StatusCode::kCancelled);
  CHECK(c->status().code() == absl::StatusCode::kCancelled);
  CHECK(f.pool->Stats().waiting == 0);

  (*holder)->Release(ReleaseDecision::kReturn);  // closed, not returned
  Settle(f.io);
  CHECK(f.pool->Stats().open == 0);
  CHECK(f.origin.live == 0);

  Result late = f.AcquireNow();
  REQUIRE(late.has_value());
  CHECK(late->status().code() == absl::StatusCode::kCancelled);
}

TEST_CASE("Create rejects impossible options") {
  asio::io_context io;
  PoolCallbacks callbacks;
  callbacks.open = []() -> asio::awaitable<absl::StatusOr<std::unique_ptr<PooledConnection>>> {
    co_return absl::UnavailableError("unused");
  };
  PoolOptions zero = Options(0);
  CHECK(Pool::Create(io.get_executor(), zero, callbacks).status().code() == absl::StatusCode::kInvalidArgument);
  PoolOptions too_many_idle = Options(2);
  too_many_idle.min_idle = 3;
  CHECK_FALSE(Pool::Create(io.get_executor(), too_many_idle, callbacks).ok());
  PoolOptions negative_watch_delay = Options(2);
  negative_watch_delay.idle_watch_delay = -1ms;
  CHECK_FALSE(Pool::Create(io.get_executor(), negative_watch_delay, callbacks).ok());
  CHECK_FALSE(Pool::Create(io.get_executor(), Options(2), PoolCallbacks{}).ok());
}

}  // namespace
}  // namespace hyperpool
