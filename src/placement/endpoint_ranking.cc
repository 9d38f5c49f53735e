#include "placement/endpoint_ranking.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace hyperpool::placement {
namespace {

constexpr std::uint64_t kFnvOffset = 14695981039346656037ull;
constexpr std::uint64_t kFnvPrime = 1099511628211ull;

std::uint64_t Fnv1a(std::uint64_t h, std::string_view bytes) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= kFnvPrime;
  }
  return h;
}

// splitmix64's finaliser: FNV-1a alone leaves similar inputs (addresses that
// differ in the last digit of a port) with correlated high bits.
std::uint64_t Mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

double PlacementCost(std::chrono::microseconds client_rtt, std::chrono::microseconds origin_rtt,
                     double origin_weight) {
  return static_cast<double>(client_rtt.count()) + origin_weight * static_cast<double>(origin_rtt.count());
}

std::uint64_t RendezvousWeight(std::string_view region, std::string_view address) {
  std::uint64_t h = Fnv1a(kFnvOffset, region);
  h = Fnv1a(h, std::string_view("\0", 1));  // ("ab", "c") and ("a", "bc") differ
  return Mix(Fnv1a(h, address));
}

std::vector<std::size_t> RendezvousOrder(std::string_view region, const std::vector<std::string>& addresses) {
  std::vector<std::size_t> order(addresses.size());
  std::vector<std::uint64_t> weight(addresses.size());
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    order[i] = i;
    weight[i] = RendezvousWeight(region, addresses[i]);
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return weight[a] > weight[b]; });
  return order;
}

EndpointRanking::EndpointRanking(std::vector<std::string> addresses, std::string region, RankingOptions options)
    : options_(options) {
  options_.settle_probes = std::max(1, options_.settle_probes);
  rendezvous_ = RendezvousOrder(region, addresses);
  endpoints_.resize(addresses.size());
  for (std::size_t i = 0; i < addresses.size(); ++i) endpoints_[i].address = std::move(addresses[i]);
  for (std::size_t rank = 0; rank < rendezvous_.size(); ++rank) endpoints_[rendezvous_[rank]].rendezvous_rank = rank;
  if (!rendezvous_.empty()) in_use_ = rendezvous_.front();
}

void EndpointRanking::RecordProbe(std::size_t i, const absl::Status& status, std::chrono::microseconds client_rtt,
                                  std::chrono::microseconds origin_rtt) {
  if (i >= endpoints_.size()) return;
  State& e = endpoints_[i];
  if (status.ok()) {
    e.health = Health::kUp;
    e.cost = PlacementCost(client_rtt, origin_rtt, options_.origin_weight);
  } else {
    e.health = Health::kDown;
    e.better_streak = 0;
  }
}

bool EndpointRanking::RecordLinkFailure(std::size_t i) {
  if (i >= endpoints_.size()) return false;
  endpoints_[i].health = Health::kDown;
  endpoints_[i].better_streak = 0;
  if (i != in_use_) return false;
  const std::size_t next = BestAvailable();
  if (next >= endpoints_.size()) return false;  // none left: keep trying in rendezvous order
  return SwitchTo(next, fmt::format("a link to {} could not be opened", endpoints_[i].address));
}

bool EndpointRanking::EndRound() {
  if (endpoints_.empty()) return false;
  const State& current = endpoints_[in_use_];
  if (!measured_ || current.health != Health::kUp) {
    // No measured choice yet, or the one in use is down: the best available
    // now, without hysteresis (there is nothing healthy to stay with).
    const std::size_t best = BestAvailable();
    if (best >= endpoints_.size()) return false;
    if (endpoints_[best].health == Health::kUp && !measured_) {
      measured_ = true;
      if (best == in_use_) reason_ = "latency placement (first measurement)";
    }
    if (best == in_use_) return false;
    const bool was_down = current.health == Health::kDown;
    return SwitchTo(best, was_down ? fmt::format("{} is down", current.address)
                                   : std::string("latency placement (first measurement)"));
  }
  std::size_t candidate = endpoints_.size();
  for (std::size_t j = 0; j < endpoints_.size(); ++j) {
    if (j == in_use_) continue;
    State& e = endpoints_[j];
    if (e.health == Health::kUp && IsBetter(e, current)) {
      ++e.better_streak;
    } else {
      e.better_streak = 0;
    }
    if (e.better_streak >= options_.settle_probes &&
        (candidate == endpoints_.size() || e.cost < endpoints_[candidate].cost)) {
      candidate = j;
    }
  }
  if (candidate == endpoints_.size()) return false;
  return SwitchTo(candidate, fmt::format("cheaper than {} for {} consecutive probes", current.address,
                                         endpoints_[candidate].better_streak));
}

bool EndpointRanking::Prefer(std::size_t i, std::string reason) {
  if (i >= endpoints_.size() || i == in_use_ || endpoints_[i].health == Health::kDown) return false;
  return SwitchTo(i, std::move(reason));
}

std::vector<std::size_t> EndpointRanking::Order() const {
  std::vector<std::size_t> up;
  std::vector<std::size_t> rest;  // unknown, then down; each in rendezvous order
  for (std::size_t i : rendezvous_) {
    if (i == in_use_ && endpoints_[i].health != Health::kDown) continue;
    if (endpoints_[i].health == Health::kUp) up.push_back(i);
  }
  std::stable_sort(up.begin(), up.end(),
                   [&](std::size_t a, std::size_t b) { return endpoints_[a].cost < endpoints_[b].cost; });
  for (Health h : {Health::kUnknown, Health::kDown}) {
    for (std::size_t i : rendezvous_) {
      if (endpoints_[i].health != h) continue;
      if (i == in_use_ && h != Health::kDown) continue;
      rest.push_back(i);
    }
  }
  std::vector<std::size_t> order;
  order.reserve(endpoints_.size());
  if (!endpoints_.empty() && endpoints_[in_use_].health != Health::kDown) order.push_back(in_use_);
  order.insert(order.end(), up.begin(), up.end());
  order.insert(order.end(), rest.begin(), rest.end());
  return order;
}

std::size_t EndpointRanking::BestAvailable() const {
  std::size_t best = endpoints_.size();
  for (std::size_t i : rendezvous_) {
    const State& e = endpoints_[i];
    if (e.health == Health::kUp && (best == endpoints_.size() || e.cost < endpoints_[best].cost)) best = i;
  }
  if (best < endpoints_.size()) return best;
  for (std::size_t i : rendezvous_) {
    if (endpoints_[i].health == Health::kUnknown) return i;
  }
  return endpoints_.size();
}

bool EndpointRanking::IsBetter(const State& candidate, const State& current) const {
  const double gain = current.cost - candidate.cost;
  return gain >= current.cost * options_.switch_margin &&
         gain >= static_cast<double>(options_.switch_margin_abs.count()) && gain > 0;
}

bool EndpointRanking::SwitchTo(std::size_t i, std::string reason) {
  for (State& e : endpoints_) e.better_streak = 0;
  if (i == in_use_) return false;
  in_use_ = i;
  reason_ = std::move(reason);
  return true;
}

}  // namespace hyperpool::placement
