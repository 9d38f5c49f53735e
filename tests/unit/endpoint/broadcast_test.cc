// EndpointCache::Broadcast: every Client hears an invalidation once — on its
// watches when it has any, else on one of its sessions — except the writer's
// own Client; sessions are indexed by Client, so a Client with many sessions
// costs one delivery.
#include <catch2/catch_test_macros.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <asio/io_context.hpp>

#include "cache/tier.h"
#include "endpoint/endpoint_cache.h"
#include "protocol/link_protocol.h"

namespace hyperpool::endpoint {
namespace {

struct Harness {
  asio::io_context io;
  std::shared_ptr<EndpointCache> cache;
  std::map<std::string, int> heard;  // session name -> deliveries
  std::vector<std::unique_ptr<SessionCache>> sessions;

  Harness() {
    CacheOptions o;
    o.enabled = true;
    cache = std::make_shared<EndpointCache>(io.get_executor(), o, "db", "role", 4, EndpointCache::Acquire{});
  }
  SessionCache* Add(const std::string& name, const std::string& client, bool watch = false) {
    auto s = std::make_unique<SessionCache>(cache, [this, name](std::string) { ++heard[name]; });
    std::vector<std::pair<std::string, std::string>> hello = {{std::string(link::kClientIdParam), client}};
    if (watch) {
      (void)s->StartWatch(hello);
    } else {
      s->Start(hello);
    }
    sessions.push_back(std::move(s));
    return sessions.back().get();
  }
  void Send(const std::string& except) {
    cache::InvalidateControl c;
    c.generation = 2;
    c.tables = {"public.t"};
    cache->Broadcast(c, except, /*remote=*/true);
  }
};

TEST_CASE("Broadcast reaches each Client once: its watch, else one of its sessions") {
  Harness h;
  h.Add("a1", "A");
  h.Add("a2", "A");
  h.Add("a-watch", "A", /*watch=*/true);
  h.Add("b1", "B");
  h.Add("b2", "B");
  h.Add("b3", "B");
  h.Add("c1", "C");
  h.Send("C");
  CHECK(h.heard["a-watch"] == 1);
  CHECK(h.heard["a1"] + h.heard["a2"] == 0);
  CHECK(h.heard["b1"] + h.heard["b2"] + h.heard["b3"] == 1);
  CHECK(h.heard["c1"] == 0);  // the writer's own Client

  // A's watch gone: one of A's sessions hears it instead.
  h.heard.clear();
  for (auto it = h.sessions.begin(); it != h.sessions.end(); ++it) {
    if ((*it)->watch()) {
      h.sessions.erase(it);
      break;
    }
  }
  h.Send("");
  CHECK(h.heard["a1"] + h.heard["a2"] == 1);
  CHECK(h.heard["b1"] + h.heard["b2"] + h.heard["b3"] == 1);
  CHECK(h.heard["c1"] == 1);
}

TEST_CASE("Broadcast forgets a Client whose sessions all ended") {
  Harness h;
  h.Add("a1", "A");
  h.Add("b1", "B");
  h.sessions.erase(h.sessions.begin());  // A's only session
  h.Send("");
  CHECK(h.heard["a1"] == 0);
  CHECK(h.heard["b1"] == 1);
  // Many sessions of one Client: one delivery.
  for (int i = 0; i < 1000; ++i) h.Add("m" + std::to_string(i), "M");
  h.heard.clear();
  h.Send("");
  int m = 0;
  for (const auto& [name, n] : h.heard) {
    if (name[0] == 'm') m += n;
  }
  CHECK(m == 1);
  CHECK(h.heard["b1"] == 1);
}

}  // namespace
}  // namespace hyperpool::endpoint
