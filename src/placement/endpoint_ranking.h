#pragma once
// Which of several Endpoints a Client sends new sessions to, without I/O:
// probe measurements and link failures go in, the Endpoint in use and the
// order to try the others in come out (docs/architecture.md, "Many
// Endpoints: failover and re-placement").
//
// Rules:
//  - Before any measurement: rendezvous (highest random weight) hashing of
//    (region, Endpoint address), so every Client of a region picks the same
//    Endpoint and, when it fails, the same next one.
//  - The first measurement of the Endpoint in use (or of any, while the one
//    in use has none) picks the cheapest measured Endpoint at once.
//  - An Endpoint in use that fails (a probe or a link open) is left at once
//    for the cheapest healthy one.
//  - A healthy Endpoint in use is left for another only when that one has
//    been healthy and cheaper by the switch margin for `settle_probes`
//    consecutive probe rounds (hysteresis: a flapping or noisy Endpoint does
//    not bounce traffic).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace hyperpool::placement {

struct RankingOptions {
  // Cost = client_rtt + origin_weight * origin_rtt (see MakeLatencyPlacement).
  double origin_weight = 2.0;
  // Consecutive rounds a better Endpoint must stay healthy and better before
  // new sessions move to it. At least 1.
  int settle_probes = 3;
  // "Better" means cheaper by this fraction of the in-use cost and by at
  // least `switch_margin_abs` (sub-millisecond costs are mostly noise).
  double switch_margin = 0.2;
  std::chrono::microseconds switch_margin_abs{500};
};

// The cost latency placement minimises, in microseconds.
double PlacementCost(std::chrono::microseconds client_rtt, std::chrono::microseconds origin_rtt,
                     double origin_weight);

// A stable 64-bit weight of (region, address): FNV-1a over both (with a
// separator) and a final avalanche; the same on every machine and run.
std::uint64_t RendezvousWeight(std::string_view region, std::string_view address);

// Indexes of `addresses`, highest rendezvous weight first (ties: given order).
std::vector<std::size_t> RendezvousOrder(std::string_view region, const std::vector<std::string>& addresses);

class EndpointRanking {
 public:
  enum class Health { kUnknown, kUp, kDown };

  EndpointRanking(std::vector<std::string> addresses, std::string region, RankingOptions options = {});

  // One probe of Endpoint `i` in the current round: ok with its round
  // trips, or why it could not be measured (marks it down).
  void RecordProbe(std::size_t i, const absl::Status& status, std::chrono::microseconds client_rtt,
                   std::chrono::microseconds origin_rtt);
  // Ends a probe round: applies the rules above. True if in_use() changed.
  bool EndRound();
  // A link to Endpoint `i` could not be opened: it is down until a probe
  // says otherwise. True if in_use() changed (it was the one in use).
  bool RecordLinkFailure(std::size_t i);

  // A placement plug-in chose Endpoint `i` for new sessions: it is used
  // unless it is down. True if in_use() changed.
  bool Prefer(std::size_t i, std::string reason);

  // The Endpoint new sessions go to.
  std::size_t in_use() const { return in_use_; }
  // Every Endpoint in the order a new session tries them: in use first, then
  // healthy ones by cost, then unmeasured ones, then those marked down (a
  // last resort: one may be back before a probe noticed), the last two in
  // rendezvous order.
  std::vector<std::size_t> Order() const;

  std::size_t size() const { return endpoints_.size(); }
  const std::string& address(std::size_t i) const { return endpoints_[i].address; }
  Health health(std::size_t i) const { return endpoints_[i].health; }
  // Last measured cost (microseconds); 0 before a successful probe.
  double cost(std::size_t i) const { return endpoints_[i].cost; }
  // Why in_use() last changed (for the log).
  const std::string& reason() const { return reason_; }

 private:
  struct State {
    std::string address;
    std::size_t rendezvous_rank = 0;  // 0 = highest weight
    Health health = Health::kUnknown;
    double cost = 0;
    int better_streak = 0;  // consecutive rounds up and better than the one in use
  };

  // The cheapest healthy Endpoint, or the first unmeasured one in rendezvous
  // order, or none (size()).
  std::size_t BestAvailable() const;
  bool IsBetter(const State& candidate, const State& current) const;
  bool SwitchTo(std::size_t i, std::string reason);

  std::vector<State> endpoints_;
  std::vector<std::size_t> rendezvous_;  // indexes, highest weight first
  RankingOptions options_;
  std::size_t in_use_ = 0;
  bool measured_ = false;  // in_use_ was once chosen from a measurement
  std::string reason_ = "rendezvous hashing (not measured yet)";
};

}  // namespace hyperpool::placement
