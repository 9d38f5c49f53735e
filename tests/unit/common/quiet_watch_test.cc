// QuietWatch (common/quiet_watch.h): sockets watched behind one Asio wait
// wake their holder once when readable, and never after Forget.
#include "common/quiet_watch.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <vector>

#include <asio/io_context.hpp>
#include <catch2/catch_test_macros.hpp>

namespace hyperpool {
namespace {

struct Holder {
  int fd = -1;
  int wakes = 0;
};

std::vector<std::shared_ptr<Holder>>* g_woken = nullptr;  // (the Wake is a plain function)

void Woken(std::shared_ptr<Holder> h) {
  ++h->wakes;
  g_woken->push_back(std::move(h));
}

// Runs handlers until `done` (or 5 s: then the CHECKs after it fail).
template <typename Done>
void RunUntil(asio::io_context& io, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done() && std::chrono::steady_clock::now() < deadline) io.run_one_for(std::chrono::milliseconds(50));
}

struct Pair {
  Pair() { REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds.data()) == 0); }
  ~Pair() {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  std::array<int, 2> fds{-1, -1};
};

TEST_CASE("quiet watch: a readable socket wakes its holder once; others stay watched", "[common]") {
  std::vector<std::shared_ptr<Holder>> woken;
  g_woken = &woken;
  asio::io_context io;
  QuietWatch<Holder> watch(io.get_executor(), &Woken);
  std::vector<Pair> pairs(40);
  std::vector<std::weak_ptr<Holder>> holders;
  for (Pair& p : pairs) {
    auto h = std::make_shared<Holder>();
    h->fd = p.fds[0];
    holders.push_back(h);
    REQUIRE(watch.Watch(p.fds[0], h));
  }
  CHECK(watch.size() == 40);
  CHECK_FALSE(watch.Watch(pairs[0].fds[0], std::make_shared<Holder>()));  // already watched

  // The watch holds them: nothing else does.
  for (auto& w : holders) CHECK_FALSE(w.expired());
  io.poll();
  CHECK(woken.empty());

  // Data on 3 of them, a hang-up on a fourth.
  for (int i : {3, 17, 39}) REQUIRE(::write(pairs[i].fds[1], "x", 1) == 1);
  ::close(pairs[25].fds[1]);
  pairs[25].fds[1] = -1;
  RunUntil(io, [&] { return woken.size() >= 4; });
  io.poll();  // (nothing more comes)
  REQUIRE(woken.size() == 4);
  std::vector<int> fds;
  for (auto& h : woken) {
    CHECK(h->wakes == 1);
    fds.push_back(h->fd);
  }
  std::sort(fds.begin(), fds.end());
  std::vector<int> want{pairs[3].fds[0], pairs[17].fds[0], pairs[25].fds[0], pairs[39].fds[0]};
  std::sort(want.begin(), want.end());
  CHECK(fds == want);
  CHECK(watch.size() == 36);

  // Woken ones are forgotten: more data wakes nothing until watched again.
  woken.clear();
  REQUIRE(::write(pairs[3].fds[1], "y", 1) == 1);
  io.poll();
  CHECK(woken.empty());
  auto again = std::make_shared<Holder>();
  again->fd = pairs[3].fds[0];
  REQUIRE(watch.Watch(pairs[3].fds[0], again));
  RunUntil(io, [&] { return !woken.empty(); });
  REQUIRE(woken.size() == 1);  // (already readable when watched)
  CHECK(woken[0] == again);
  g_woken = nullptr;
}

TEST_CASE("quiet watch: a forgotten socket gives its holder back and never wakes", "[common]") {
  std::vector<std::shared_ptr<Holder>> woken;
  g_woken = &woken;
  asio::io_context io;
  QuietWatch<Holder> watch(io.get_executor(), &Woken);
  Pair p;
  auto h = std::make_shared<Holder>();
  REQUIRE(watch.Watch(p.fds[0], h));
  std::shared_ptr<Holder> back = watch.Forget(p.fds[0]);
  CHECK(back == h);
  CHECK(watch.Forget(p.fds[0]) == nullptr);
  CHECK(watch.size() == 0);
  REQUIRE(::write(p.fds[1], "x", 1) == 1);
  io.poll();
  CHECK(woken.empty());
  CHECK(h->wakes == 0);
  g_woken = nullptr;
}

TEST_CASE("quiet watch: dropping the watch releases its holders without waking them", "[common]") {
  std::vector<std::shared_ptr<Holder>> woken;
  g_woken = &woken;
  asio::io_context io;
  Pair p;
  std::weak_ptr<Holder> weak;
  {
    QuietWatch<Holder> watch(io.get_executor(), &Woken);
    auto h = std::make_shared<Holder>();
    weak = h;
    REQUIRE(watch.Watch(p.fds[0], std::move(h)));
    REQUIRE(::write(p.fds[1], "x", 1) == 1);
  }
  io.poll();
  CHECK(weak.expired());
  CHECK(woken.empty());
  g_woken = nullptr;
}


// A Client's sessions hold the Client, whose worker holds the watch: the
// watch must not own what it watches, or a Client whose io_context ended
// without running its sessions' Shutdown would never be freed.
struct Owner {
  std::shared_ptr<QuietWatch<Owner>> watch;
};
void WokenOwner(std::shared_ptr<Owner>) {}

TEST_CASE("quiet watch: holders that own the watch go with the io_context (no cycle)", "[common]") {
  Pair p;
  auto io = std::make_unique<asio::io_context>();
  auto watch = std::make_shared<QuietWatch<Owner>>(io->get_executor(), &WokenOwner);
  auto owner = std::make_shared<Owner>();
  owner->watch = watch;
  std::weak_ptr<Owner> weak_owner = owner;
  std::weak_ptr<QuietWatch<Owner>> weak_watch = watch;
  REQUIRE(watch->Watch(p.fds[0], std::move(owner)));
  watch.reset();
  CHECK_FALSE(weak_owner.expired());  // the pending wait holds it
  io.reset();                          // never run: its handlers are destroyed
  CHECK(weak_owner.expired());
  CHECK(weak_watch.expired());
}

}  // namespace
}  // namespace hyperpool
