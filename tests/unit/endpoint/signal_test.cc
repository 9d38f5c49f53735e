// endpoint::Signal (endpoint/signal.h): the Endpoint session's wake-up
// between its reader and its pump. Driven step by step on one io_context.

#include "endpoint/signal.h"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <catch2/catch_test_macros.hpp>

namespace hyperpool::endpoint {
namespace {

void Settle(asio::io_context& io) {
  for (;;) {
    io.restart();
    if (io.poll() == 0) return;
  }
}

asio::awaitable<void> WaitAndCount(Signal& signal, int& woken) {
  co_await signal.Wait();
  ++woken;
}

TEST_CASE("Notify wakes every waiter, after Notify returns (posted, never inline)") {
  asio::io_context io(1);
  Signal signal;
  int woken = 0;
  asio::co_spawn(io, WaitAndCount(signal, woken), asio::detached);
  asio::co_spawn(io, WaitAndCount(signal, woken), asio::detached);
  Settle(io);
  CHECK(woken == 0);
  signal.Notify();
  CHECK(woken == 0);  // a waiter never runs inside Notify (the caller may be mid-update)
  Settle(io);
  CHECK(woken == 2);
}

TEST_CASE("a Notify with nobody waiting is not remembered") {
  asio::io_context io(1);
  Signal signal;
  signal.Notify();
  int woken = 0;
  asio::co_spawn(io, WaitAndCount(signal, woken), asio::detached);
  Settle(io);
  CHECK(woken == 0);
  signal.Notify();
  Settle(io);
  CHECK(woken == 1);
}

TEST_CASE("a Signal can be waited on again after each wake-up") {
  asio::io_context io(1);
  Signal signal;
  int woken = 0;
  for (int i = 1; i <= 100; ++i) {
    asio::co_spawn(io, WaitAndCount(signal, woken), asio::detached);
    Settle(io);
    signal.Notify();
    Settle(io);
    CHECK(woken == i);
  }
}

}  // namespace
}  // namespace hyperpool::endpoint
