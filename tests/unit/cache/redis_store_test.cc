// RedisStore's connections against a Redis that accepts and never answers
// (src/cache/redis_store.h): each connection is bounded by the store's
// timeout, the subscriber's too, and is retried.

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch_test_macros.hpp>

#include "cache/redis_store.h"

namespace hyperpool::cache {
namespace {

using asio::ip::tcp;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

// Reads whatever a connection sends, answers nothing; counts the
// connections that asked to SUBSCRIBE.
asio::awaitable<void> Silent(tcp::socket socket, std::shared_ptr<std::atomic<int>> subscribes) {
  std::string seen;
  char buf[4096];
  bool counted = false;
  for (;;) {
    auto [ec, n] = co_await socket.async_read_some(asio::buffer(buf), kAsTuple);
    if (ec) co_return;
    seen.append(buf, n);
    if (!counted && seen.find("SUBSCRIBE") != std::string::npos) {
      counted = true;
      subscribes->fetch_add(1);
    }
  }
}

asio::awaitable<void> AcceptSilently(tcp::acceptor& acceptor, std::shared_ptr<std::atomic<int>> subscribes) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(kAsTuple);
    if (ec) co_return;
    asio::co_spawn(acceptor.get_executor(), Silent(std::move(socket), subscribes), asio::detached);
  }
}

TEST_CASE("a subscription a Redis never confirms is dropped after the timeout and retried") {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  auto subscribes = std::make_shared<std::atomic<int>>(0);
  asio::co_spawn(io, AcceptSilently(acceptor, subscribes), asio::detached);
  RedisStoreOptions o;
  o.address.host = "127.0.0.1";
  o.address.port = acceptor.local_endpoint().port();
  o.timeout = std::chrono::milliseconds(100);
  o.reconnect_every = std::chrono::milliseconds(50);
  o.ns = "test";
  o.instance = "i";
  std::shared_ptr<RedisStore> store = RedisStore::Create(io.get_executor(), o);
  auto guard = asio::make_work_guard(io);
  std::thread runner([&] { io.run(); });
  // Without its own bound the first subscriber connection would wait for
  // ever (the peer is up, it just never answers): one SUBSCRIBE in all.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (subscribes->load() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(subscribes->load() >= 3);
  CHECK_FALSE(store->up());
  CHECK(store->Stats().errors > 0);
  asio::post(io, [&] {
    store->Stop();
    asio::error_code ignored;
    acceptor.close(ignored);
  });
  guard.reset();
  io.stop();
  runner.join();
}

}  // namespace
}  // namespace hyperpool::cache
