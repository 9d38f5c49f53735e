// The pool's operator controls (pool.h: Pause, Resume, Reconnect, Update),
// which the admin console's PAUSE, RESUME, RECONNECT and a reload use,
// against in-memory fake connections; the io_context is driven step by step.

#include <memory>
#include <string>
#include <optional>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch_test_macros.hpp>

#include "pool/pool.h"

namespace hyperpool {
namespace {

using namespace std::chrono_literals;
using Result = std::optional<absl::StatusOr<Lease>>;

struct Origin {
  int next_id = 1;
  int opens = 0;
  std::vector<int> closed;
};

class Conn final : public PooledConnection {
 public:
  explicit Conn(Origin& origin) : origin_(origin), id_(origin.next_id++) {}
  asio::awaitable<void> Close() override {
    origin_.closed.push_back(id_);
    co_return;
  }
  int id() const { return id_; }

 private:
  Origin& origin_;
  int id_;
};

int IdOf(const Result& r) { return (*r)->As<Conn>().id(); }

void Settle(asio::io_context& io) {
  for (;;) {
    io.restart();
    if (io.poll() == 0) return;
  }
}

PoolOptions Options(std::size_t max_size) {
  PoolOptions o;
  o.max_size = max_size;
  o.acquire_timeout = 60s;
  return o;
}

// `origin` outlives the io_context, whose destruction may destroy connections.
struct Fixture {
  explicit Fixture(PoolOptions options) {
    PoolCallbacks callbacks;
    callbacks.open = [this]() -> asio::awaitable<absl::StatusOr<std::unique_ptr<PooledConnection>>> {
      ++origin.opens;
      co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
      co_return std::make_unique<Conn>(origin);
    };
    pool = Pool::Create(io.get_executor(), options, std::move(callbacks)).value();
  }
  ~Fixture() {
    pool->Stop();
    Settle(io);
  }
  void Acquire(Result& out) {
    asio::co_spawn(io, [this, &out]() -> asio::awaitable<void> { out = co_await pool->Acquire(); }, asio::detached);
  }
  Result AcquireNow() {
    Result out;
    Acquire(out);
    Settle(io);
    return out;
  }

  Origin origin;
  asio::io_context io;
  std::unique_ptr<Pool> pool;
};

TEST_CASE("Pause lends nothing until Resume, while leases already held work and return") {
  Fixture f(Options(2));
  Result held = f.AcquireNow();
  REQUIRE(held->ok());
  const int id = IdOf(held);
  f.pool->Pause();
  CHECK(f.pool->Stats().paused);
  Result waiter;
  f.Acquire(waiter);
  Settle(f.io);
  CHECK_FALSE(waiter.has_value());  // below max_size, yet nothing is opened or lent
  (*held)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  CHECK_FALSE(waiter.has_value());  // the returned connection goes idle, not to the waiter
  CHECK(f.pool->Stats().idle == 1);
  CHECK(f.pool->Stats().waiting == 1);
  const auto waited = f.pool->Stats().max_wait;
  CHECK(waited > std::chrono::steady_clock::duration::zero());
  f.pool->Resume();
  Settle(f.io);
  REQUIRE(waiter.has_value());
  REQUIRE(waiter->ok());
  CHECK(IdOf(waiter) == id);
  CHECK_FALSE(f.pool->Stats().paused);
  CHECK(f.pool->Stats().max_wait == std::chrono::steady_clock::duration::zero());  // nobody waits now
  CHECK(f.origin.opens == 1);
}

TEST_CASE("Reconnect closes idle connections now and lent ones at release, then opens new ones") {
  Fixture f(Options(2));
  Result a = f.AcquireNow();
  Result b = f.AcquireNow();
  REQUIRE(a->ok());
  REQUIRE(b->ok());
  const int a_id = IdOf(a);
  const int b_id = IdOf(b);
  (*b)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  f.pool->Reconnect();
  Settle(f.io);
  CHECK(f.origin.closed == std::vector<int>{b_id});
  CHECK((*a)->lifetime_exceeded());  // so the release policy closes it
  (*a)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  CHECK(f.origin.closed == std::vector<int>{b_id, a_id});
  Result c = f.AcquireNow();
  REQUIRE(c->ok());
  CHECK(IdOf(c) != a_id);
  CHECK(IdOf(c) != b_id);
  CHECK_FALSE((*c)->lifetime_exceeded());
}

TEST_CASE("Servers lists each open connection with its state, pin and whether it is retired") {
  Fixture f(Options(3));
  Result a = f.AcquireNow();
  Result b = f.AcquireNow();
  REQUIRE(a->ok());
  REQUIRE(b->ok());
  (*b)->Release(ReleaseDecision::kReturn);
  Settle(f.io);
  (*a)->MoveOutOfCap();
  std::vector<PoolServerInfo> servers = f.pool->Servers();
  REQUIRE(servers.size() == 2);
  CHECK(std::string(servers[0].state) == "active");
  CHECK(servers[0].pinned);
  CHECK(std::string(servers[1].state) == "idle");
  CHECK_FALSE(servers[1].pinned);
  CHECK_FALSE(servers[0].retired);
  f.pool->Reconnect();
  Settle(f.io);
  servers = f.pool->Servers();
  REQUIRE(servers.size() == 1);  // the idle one closed
  CHECK(servers[0].retired);
}

TEST_CASE("Update lowers max_size by closing the excess as it is released, and a raise serves waiters at once") {
  Fixture f(Options(2));
  Result a = f.AcquireNow();
  Result b = f.AcquireNow();
  REQUIRE(a->ok());
  REQUIRE(b->ok());
  PoolOptions smaller = Options(1);
  REQUIRE(f.pool->Update(smaller).ok());
  Settle(f.io);
  CHECK(f.pool->Stats().max_size == 1);
  const int a_id = IdOf(a);
  (*a)->Release(ReleaseDecision::kReturn);  // 2 open > 1: closed
  Settle(f.io);
  CHECK(f.origin.closed == std::vector<int>{a_id});
  const int b_id = IdOf(b);
  (*b)->Release(ReleaseDecision::kReturn);  // 1 open: kept
  Settle(f.io);
  CHECK(f.pool->Stats().idle == 1);
  Result c = f.AcquireNow();
  REQUIRE(c->ok());
  CHECK(IdOf(c) == b_id);
  Result d;
  f.Acquire(d);
  Settle(f.io);
  CHECK_FALSE(d.has_value());  // at the new max_size 1
  REQUIRE(f.pool->Update(Options(3)).ok());
  Settle(f.io);
  REQUIRE(d.has_value());
  REQUIRE(d->ok());
  CHECK(f.pool->Stats().open == 2);
}

TEST_CASE("Update refuses what Create refuses and changes nothing") {
  Fixture f(Options(2));
  CHECK_FALSE(f.pool->Update(Options(0)).ok());
  PoolOptions o = Options(2);
  o.min_idle = 3;
  CHECK_FALSE(f.pool->Update(o).ok());
  o = Options(2);
  o.acquire_timeout = 0ms;
  CHECK_FALSE(f.pool->Update(o).ok());
  CHECK(f.pool->Stats().max_size == 2);
}

}  // namespace
}  // namespace hyperpool
