#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <thread>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "hyperpool/transport.h"

namespace hyperpool {
namespace {

// Runs `coro` to completion on `io` and returns its result.
template <typename T>
T Run(asio::io_context& io, asio::awaitable<T> coro) {
  auto future = asio::co_spawn(io, std::move(coro), asio::use_future);
  io.restart();
  io.run();
  return future.get();
}

TEST_CASE("in-process link carries bytes in order both ways") {
  asio::io_context io;
  LinkPair pair = MakeInProcessLinkPair(io.get_executor(), io.get_executor(), 8);
  std::string got = Run(io, [&]() -> asio::awaitable<std::string> {
    for (int i = 0; i < 5; ++i) {
      // The echoes queue up unread until the end: capacity 8 holds all five.
      { auto st = co_await pair.first->Send("m" + std::to_string(i)); REQUIRE(st.ok()); }
      std::string buf;
      auto n = co_await pair.second->Receive(buf);
      REQUIRE(n.ok());  // g++ 12: never co_await inside a Catch2 macro
      { auto st = co_await pair.second->Send(buf + "!"); REQUIRE(st.ok()); }
    }
    std::string all;
    for (int i = 0; i < 5; ++i) { auto st = co_await pair.first->Receive(all); REQUIRE(st.ok()); }
    co_return all;
  }());
  CHECK(got == "m0!m1!m2!m3!m4!");
}

TEST_CASE("bytes sent before Close reach the peer, then the link reports closed (channel and direct links)") {
  const bool direct = GENERATE(false, true);
  asio::io_context io;
  LinkPair pair = direct ? MakeDirectLinkPair()
                         : MakeInProcessLinkPair(io.get_executor(), io.get_executor());
  auto result = Run(io, [&]() -> asio::awaitable<std::pair<std::string, bool>> {
    { auto st = co_await pair.first->Send("last words"); REQUIRE(st.ok()); }
    pair.first->Close();
    std::string buf;
    auto n = co_await pair.second->Receive(buf);
    auto after = co_await pair.second->Receive(buf);
    auto send_after = co_await pair.second->Send("anyone?");
    co_return std::make_pair(n.ok() ? buf : std::string("error"), !after.ok() && !send_after.ok());
  }());
  CHECK(result.first == "last words");
  CHECK(result.second);
}

TEST_CASE("link ends on different threads") {
  asio::io_context a, b;
  LinkPair pair = MakeInProcessLinkPair(a.get_executor(), b.get_executor(), 4);
  constexpr int kMessages = 10000;
  auto echo = asio::co_spawn(b, [&]() -> asio::awaitable<void> {
    std::string buf;
    for (;;) {
      buf.clear();
      auto n = co_await pair.second->Receive(buf);
      if (!n.ok()) co_return;
      if (!(co_await pair.second->Send(buf)).ok()) co_return;
    }
  }, asio::use_future);
  std::thread tb([&] { b.run(); });
  std::size_t total = Run(a, [&]() -> asio::awaitable<std::size_t> {
    std::size_t received = 0;
    std::string buf;
    for (int i = 0; i < kMessages; ++i) {
      { auto st = co_await pair.first->Send(std::string(100, 'x')); REQUIRE(st.ok()); }
      while (received < static_cast<std::size_t>(i + 1) * 100) {
        buf.clear();
        auto n = co_await pair.first->Receive(buf);
        REQUIRE(n.ok());
        received += *n;
      }
    }
    pair.first->Close();
    co_return received;
  }());
  tb.join();
  echo.get();
  CHECK(total == kMessages * 100);
}

// A sender blocked on a full link (its peer stopped reading) must learn that
// the link closed, whichever end closes it: the channel's close() alone
// wakes receivers only, which once left the Endpoint's Pump parked in Send
// forever after a client vanished mid-COPY (the COPY TO wedge, issue 15).
// run_for bounds the wait: a blocked Send shows up as "no result".
std::optional<bool> SendBlockedThenClose(bool close_peer) {
  asio::io_context io;
  LinkPair pair = MakeInProcessLinkPair(io.get_executor(), io.get_executor(), 2);
  std::optional<bool> third_failed;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 2; ++i) (void)co_await pair.first->Send("fill");
    absl::Status st = co_await pair.first->Send("blocked");  // the queue is full
    third_failed = !st.ok();
  }, asio::detached);
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    // Let the sender park first: each post runs after the completions
    // queued before it, and the sender needs three hops to block.
    for (int i = 0; i < 10; ++i) co_await asio::post(io, asio::use_awaitable);
    (close_peer ? pair.second : pair.first)->Close();
  }, asio::detached);
  io.run_for(std::chrono::seconds(5));
  return third_failed;
}

TEST_CASE("a Send blocked on a full link fails when the peer closes") {
  std::optional<bool> failed = SendBlockedThenClose(true);
  REQUIRE(failed.has_value());
  CHECK(*failed);
}

TEST_CASE("a Send blocked on a full link fails when its own end closes") {
  std::optional<bool> failed = SendBlockedThenClose(false);
  REQUIRE(failed.has_value());
  CHECK(*failed);
}


// ----- Direct links (both ends on one executor) --------------------------

TEST_CASE("direct link carries bytes in order both ways, a Receive with bytes waiting returns at once") {
  asio::io_context io;
  LinkPair pair = MakeDirectLinkPair(64);
  std::string got = Run(io, [&]() -> asio::awaitable<std::string> {
    for (int i = 0; i < 5; ++i) {
      { auto st = co_await pair.first->Send("m" + std::to_string(i)); REQUIRE(st.ok()); }
      std::string buf;
      auto n = co_await pair.second->Receive(buf);
      REQUIRE(n.ok());
      REQUIRE(*n == buf.size());
      { auto st = co_await pair.second->Send(buf + "!"); REQUIRE(st.ok()); }
    }
    std::string all;
    auto n = co_await pair.first->Receive(all);  // all five echoes wait in one inbox
    REQUIRE(n.ok());
    co_return all;
  }());
  CHECK(got == "m0!m1!m2!m3!m4!");
}

TEST_CASE("direct link: a Receive parked before the Send is woken by it") {
  asio::io_context io;
  LinkPair pair = MakeDirectLinkPair();
  std::string got;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    std::string buf;
    auto n = co_await pair.second->Receive(buf);
    if (n.ok()) got = buf;
  }, asio::detached);
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    co_await asio::post(io, asio::use_awaitable);  // the receiver parks first
    (void)co_await pair.first->Send("late");
  }, asio::detached);
  io.run_for(std::chrono::seconds(5));
  CHECK(got == "late");
}

TEST_CASE("direct link: a Send over the limit waits until the peer reads, and fails if the link closes") {
  const bool close_instead = GENERATE(false, true);
  asio::io_context io;
  LinkPair pair = MakeDirectLinkPair(8);
  std::optional<bool> sent_ok;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    absl::Status st = co_await pair.first->Send(std::string(100, 'x'));  // over the limit of 8
    sent_ok = st.ok();
  }, asio::detached);
  std::size_t read = 0;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 10; ++i) co_await asio::post(io, asio::use_awaitable);
    REQUIRE_FALSE(sent_ok.has_value());  // still waiting: nobody read
    if (close_instead) {
      pair.second->Close();
      co_return;
    }
    std::string buf;
    auto n = co_await pair.second->Receive(buf);
    if (n.ok()) read = *n;
  }, asio::detached);
  io.run_for(std::chrono::seconds(5));
  REQUIRE(sent_ok.has_value());
  CHECK(*sent_ok == !close_instead);
  if (!close_instead) CHECK(read == 100);
}

TEST_CASE("direct link: first bytes larger than the limit wait in the pipe without a Send") {
  asio::io_context io;
  LinkPair pair = MakeDirectLinkPair(8, std::string(1000, 'h'));
  std::string got = Run(io, [&]() -> asio::awaitable<std::string> {
    std::string buf;
    auto n = co_await pair.second->Receive(buf);
    REQUIRE(n.ok());
    co_return buf;
  }());
  CHECK(got.size() == 1000);
}

TEST_CASE("direct link: TryReceive takes what arrived without suspending, WhenReadable calls back (posted) on bytes and on close") {
  const bool peer_closes = GENERATE(false, true);
  asio::io_context io;
  LinkPair pair = MakeDirectLinkPair();
  std::string buf;
  CHECK_FALSE(pair.second->TryReceive(buf).has_value());  // nothing yet
  int calls = 0;
  REQUIRE(pair.second->WhenReadable(io.get_executor(), [&] { ++calls; }));
  std::string bytes = "Q";
  REQUIRE(pair.first->TrySend(bytes));
  CHECK(calls == 0);  // posted, never inline
  io.run();
  CHECK(calls == 1);
  std::optional<absl::StatusOr<std::size_t>> n = pair.second->TryReceive(buf);
  REQUIRE(n.has_value());
  REQUIRE(n->ok());
  CHECK(**n == 1);
  CHECK(buf == "Q");
  CHECK_FALSE(pair.second->TryReceive(buf).has_value());
  // Armed again, then the link ends: from the peer's side or our own.
  REQUIRE(pair.second->WhenReadable(io.get_executor(), [&] { ++calls; }));
  if (peer_closes) {
    pair.first->Close();
  } else {
    pair.second->Close();
  }
  io.restart();
  io.run();
  CHECK(calls == 2);
  n = pair.second->TryReceive(buf);
  REQUIRE(n.has_value());
  CHECK_FALSE(n->ok());
  // Armed after the end: called at once (posted).
  REQUIRE(pair.second->WhenReadable(io.get_executor(), [&] { ++calls; }));
  io.restart();
  io.run();
  CHECK(calls == 3);
}

TEST_CASE("direct link: a send made on the reader's executor runs its callback inline, one level deep") {
  asio::io_context io;
  LinkPair pair = MakeDirectLinkPair();
  std::vector<std::string> order;
  std::string a_buf;
  std::string b_buf;
  // b's reader answers inside its callback; a's reader is armed too, so
  // that answer (a send made inside an inline callback) must be posted.
  REQUIRE(pair.first->WhenReadable(io.get_executor(), [&] {
    order.push_back("a reads");
    (void)pair.first->TryReceive(a_buf);
  }));
  REQUIRE(pair.second->WhenReadable(io.get_executor(), [&] {
    order.push_back("b reads");
    (void)pair.second->TryReceive(b_buf);
    std::string answer = "R";
    REQUIRE(pair.second->TrySend(answer));
    order.push_back("b answered");
  }));
  asio::post(io, [&] {
    std::string bytes = "Q";
    REQUIRE(pair.first->TrySend(bytes));
    order.push_back("a's send returned");
  });
  io.run();
  CHECK(order == std::vector<std::string>{"b reads", "b answered", "a's send returned", "a reads"});
  CHECK(b_buf == "Q");
  CHECK(a_buf == "R");
}

TEST_CASE("channel links cannot call back: WhenReadable and TryReceive say so") {
  asio::io_context io;
  LinkPair pair = MakeInProcessLinkPair(io.get_executor(), io.get_executor(), 8);
  std::string buf;
  CHECK_FALSE(pair.second->WhenReadable(io.get_executor(), [] {}));
  CHECK_FALSE(pair.second->TryReceive(buf).has_value());
}

// An acceptor that answers each link's first bytes with "ok:" + them.
class EchoAcceptor final : public LinkAcceptor {
 public:
  explicit EchoAcceptor(asio::any_io_executor executor) : executor_(std::move(executor)) {}
  void Accept(std::unique_ptr<Link> link) override {
    std::shared_ptr<Link> l(std::move(link));
    asio::co_spawn(executor_, [l]() -> asio::awaitable<void> {
      std::string buf;
      auto n = co_await l->Receive(buf);
      if (n.ok()) (void)co_await l->Send("ok:" + buf);
    }, asio::detached);
  }

 private:
  asio::any_io_executor executor_;
};

TEST_CASE("in-process transport: sessions asked onto the acceptor's executor; a first message of any size") {
  asio::io_context io;
  EchoAcceptor acceptor(io.get_executor());
  std::unique_ptr<Transport> placed = MakeInProcessTransport(acceptor, io.get_executor());
  std::unique_ptr<Transport> unplaced = MakeInProcessTransport(acceptor);
  REQUIRE(placed->session_executor().has_value());
  CHECK(*placed->session_executor() == asio::any_io_executor(io.get_executor()));
  CHECK_FALSE(unplaced->session_executor().has_value());
  // 4 MiB: more than a direct link's limit, and the acceptor's session
  // starts only once Open() has handed the link over.
  const std::string big(4 << 20, 'q');
  std::string got = Run(io, [&]() -> asio::awaitable<std::string> {
    auto link = co_await placed->Open(io.get_executor(), big);
    REQUIRE(link.ok());
    std::string buf;
    while (buf.size() < big.size() + 3) {
      auto n = co_await (*link)->Receive(buf);
      REQUIRE(n.ok());
    }
    co_return buf;
  }());
  CHECK(got.size() == big.size() + 3);
  CHECK(got.substr(0, 3) == "ok:");
}

}  // namespace
}  // namespace hyperpool
