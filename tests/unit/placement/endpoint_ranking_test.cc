// EndpointRanking: rendezvous order before measurements, latency placement
// on the first round, failover on a dead Endpoint, hysteresis on the way back.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "placement/endpoint_ranking.h"

namespace hyperpool::placement {
namespace {

using namespace std::chrono_literals;

const absl::Status kOk = absl::OkStatus();
const absl::Status kRefused = absl::UnavailableError("connection refused");

// One round: each Endpoint's cost as a client round trip (origin 0), or
// down for a negative value. Returns EndRound's answer.
bool Round(EndpointRanking& r, const std::vector<int>& client_rtt_us) {
  for (std::size_t i = 0; i < client_rtt_us.size(); ++i) {
    if (client_rtt_us[i] < 0) {
      r.RecordProbe(i, kRefused, 0us, 0us);
    } else {
      r.RecordProbe(i, kOk, std::chrono::microseconds(client_rtt_us[i]), 0us);
    }
  }
  return r.EndRound();
}

TEST_CASE("rendezvous weights are stable and depend on region and address") {
  // Fixed values: every machine and every run must agree.
  CHECK(RendezvousWeight("eu", "10.0.0.1:7000") == RendezvousWeight("eu", "10.0.0.1:7000"));
  CHECK(RendezvousWeight("eu", "10.0.0.1:7000") != RendezvousWeight("us", "10.0.0.1:7000"));
  CHECK(RendezvousWeight("ab", "c") != RendezvousWeight("a", "bc"));
}

TEST_CASE("before any measurement the choice is rendezvous hashing, the same for a region in any order") {
  const std::vector<std::string> a = {"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000", "10.0.0.4:7000"};
  std::vector<std::string> b = a;
  std::reverse(b.begin(), b.end());
  for (const char* region : {"eu-west", "us-east", "ap-south", "client-7"}) {
    EndpointRanking ra(a, region);
    EndpointRanking rb(b, region);
    CHECK(ra.address(ra.in_use()) == rb.address(rb.in_use()));
    // And the failover order agrees too.
    std::vector<std::string> oa, ob;
    for (std::size_t i : ra.Order()) oa.push_back(ra.address(i));
    for (std::size_t i : rb.Order()) ob.push_back(rb.address(i));
    CHECK(oa == ob);
    CHECK(oa.size() == 4);
  }
}

TEST_CASE("rendezvous hashing spreads regions over the Endpoints and removing one moves only its regions") {
  const std::vector<std::string> all = {"e1:1", "e2:1", "e3:1"};
  const std::vector<std::string> two = {"e1:1", "e2:1"};
  std::map<std::string, int> chosen;
  int moved_needlessly = 0;
  for (int k = 0; k < 300; ++k) {
    const std::string region = "region-" + std::to_string(k);
    EndpointRanking r3(all, region);
    EndpointRanking r2(two, region);
    const std::string with_three = r3.address(r3.in_use());
    ++chosen[with_three];
    if (with_three != "e3:1" && r2.address(r2.in_use()) != with_three) ++moved_needlessly;
  }
  CHECK(chosen.size() == 3);
  for (const auto& [address, n] : chosen) CHECK(n > 50);  // about 100 each
  CHECK(moved_needlessly == 0);
}

TEST_CASE("the first measurement round picks the cheapest Endpoint at once") {
  EndpointRanking r({"a:1", "b:1", "c:1"}, "x");
  // Make the rendezvous pick the most expensive one.
  std::vector<int> rtt(3, 1000);
  rtt[r.in_use()] = 90000;
  const std::size_t cheapest = (r.in_use() + 1) % 3;
  rtt[cheapest] = 500;
  CHECK(Round(r, rtt));
  CHECK(r.in_use() == cheapest);
  CHECK(r.reason().find("latency placement") != std::string::npos);

  // When the rendezvous pick is the cheapest it stays, now as measured.
  EndpointRanking same({"a:1", "b:1"}, "x");
  std::vector<int> costs(2, 9000);
  costs[same.in_use()] = 100;
  const std::size_t first = same.in_use();
  CHECK(same.reason().find("rendezvous") != std::string::npos);
  CHECK_FALSE(Round(same, costs));
  CHECK(same.in_use() == first);
  CHECK(same.reason().find("latency placement") != std::string::npos);
}

TEST_CASE("costs weigh the origin round trip") {
  EndpointRanking r({"near-client:1", "near-origin:1"}, "x");
  r.RecordProbe(0, kOk, 1000us, 40000us);  // 81 ms
  r.RecordProbe(1, kOk, 20000us, 1000us);  // 22 ms
  r.EndRound();
  CHECK(r.in_use() == 1);
  CHECK(r.cost(1) == PlacementCost(20000us, 1000us, 2.0));
}

TEST_CASE("a dead Endpoint in use is left at once, by a link failure or a probe") {
  EndpointRanking r({"a:1", "b:1", "c:1"}, "x");
  Round(r, {1000, 2000, 3000});
  REQUIRE(r.in_use() == 0);

  SECTION("link failure") {
    CHECK(r.RecordLinkFailure(0));
    CHECK(r.in_use() == 1);
    CHECK(r.health(0) == EndpointRanking::Health::kDown);
    // Dead ones are tried last, not never.
    CHECK(r.Order() == std::vector<std::size_t>{1, 2, 0});
    // A failure of one not in use changes nothing.
    CHECK_FALSE(r.RecordLinkFailure(2));
    CHECK(r.in_use() == 1);
    CHECK((r.Order() == std::vector<std::size_t>{1, 0, 2} || r.Order() == std::vector<std::size_t>{1, 2, 0}));
  }
  SECTION("probe") {
    CHECK(Round(r, {-1, 2000, 3000}));
    CHECK(r.in_use() == 1);
    CHECK(r.reason().find("a:1 is down") != std::string::npos);
  }
  SECTION("all down: the choice stays, every Endpoint is still tried") {
    CHECK(r.RecordLinkFailure(0));
    r.RecordLinkFailure(1);
    r.RecordLinkFailure(2);
    CHECK(r.Order().size() == 3);
    CHECK_FALSE(Round(r, {-1, -1, -1}));
    CHECK(r.Order().size() == 3);
    // The first to come back is used at once.
    REQUIRE(r.in_use() == 2);
    CHECK(Round(r, {-1, 3000, -1}));
    CHECK(r.in_use() == 1);
  }
}

TEST_CASE("a plug-in's preference moves new sessions at once, but never to an Endpoint that is down") {
  EndpointRanking r({"a:1", "b:1", "c:1"}, "x");
  Round(r, {1000, 2000, 3000});
  REQUIRE(r.in_use() == 0);
  CHECK(r.Prefer(2, "chosen by the placement plug-in"));
  CHECK(r.in_use() == 2);
  CHECK(r.reason() == "chosen by the placement plug-in");
  CHECK(r.Order().front() == 2);
  CHECK_FALSE(r.Prefer(2, "again"));  // already in use
  CHECK(r.RecordLinkFailure(1) == false);
  CHECK_FALSE(r.Prefer(1, "down"));
  CHECK(r.in_use() == 2);
  CHECK_FALSE(r.Prefer(7, "unknown"));
}

TEST_CASE("a better Endpoint that comes back gets new sessions only after settle_probes healthy rounds") {
  RankingOptions options;
  options.settle_probes = 3;
  EndpointRanking r({"near:1", "far:1"}, "x", options);
  Round(r, {1000, 40000});
  REQUIRE(r.in_use() == 0);
  r.RecordLinkFailure(0);
  REQUIRE(r.in_use() == 1);

  CHECK_FALSE(Round(r, {1000, 40000}));  // back: 1
  CHECK_FALSE(Round(r, {1000, 40000}));  // 2
  CHECK(r.in_use() == 1);
  CHECK(Round(r, {1000, 40000}));  // 3: moves back
  CHECK(r.in_use() == 0);
  CHECK(r.reason().find("3 consecutive") != std::string::npos);
}

TEST_CASE("a flapping Endpoint does not bounce traffic") {
  EndpointRanking r({"near:1", "far:1"}, "x", RankingOptions{.settle_probes = 3});
  Round(r, {1000, 40000});
  r.RecordLinkFailure(0);
  REQUIRE(r.in_use() == 1);
  for (int i = 0; i < 10; ++i) {
    CHECK_FALSE(Round(r, {1000, 40000}));
    CHECK_FALSE(Round(r, {1000, 40000}));
    CHECK_FALSE(Round(r, {-1, 40000}));  // down again before it settled
    CHECK(r.in_use() == 1);
  }
}

TEST_CASE("noise within the switch margin never moves a healthy choice") {
  EndpointRanking r({"a:1", "b:1"}, "x", RankingOptions{.settle_probes = 2});
  Round(r, {1000, 1100});
  const std::size_t first = r.in_use();
  for (int i = 0; i < 20; ++i) {
    // b is sometimes 15% cheaper: inside the 20% margin.
    CHECK_FALSE(Round(r, {1000, i % 2 == 0 ? 850 : 1100}));
  }
  CHECK(r.in_use() == first);
  // Sub-millisecond costs: 40% cheaper but only 200 us: noise too.
  EndpointRanking small({"a:1", "b:1"}, "x", RankingOptions{.settle_probes = 1});
  Round(small, {500, 900});
  REQUIRE(small.in_use() == 0);
  small.RecordLinkFailure(0);
  REQUIRE(small.in_use() == 1);
  Round(small, {500, 900});  // 400 us gain < 500 us
  CHECK(small.in_use() == 1);
}

TEST_CASE("an unmeasured Endpoint is tried after healthy ones and before dead ones") {
  EndpointRanking r({"a:1", "b:1", "c:1"}, "x");
  r.RecordProbe(0, kOk, 1000us, 0us);
  r.RecordProbe(1, kRefused, 0us, 0us);
  r.EndRound();  // c: not probed
  REQUIRE(r.in_use() == 0);
  CHECK(r.Order() == std::vector<std::size_t>{0, 2, 1});
  // The one in use fails: the unmeasured one is next.
  CHECK(r.RecordLinkFailure(0));
  CHECK(r.in_use() == 2);
}

}  // namespace
}  // namespace hyperpool::placement
