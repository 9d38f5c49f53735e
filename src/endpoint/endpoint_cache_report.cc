// FormatCacheReport (endpoint_cache.h): the Endpoint tier's counters as
// `hyperpool serve` logs them on exit.
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "endpoint/endpoint_cache.h"

namespace hyperpool::endpoint {

std::string FormatCacheReport(const EndpointCacheReport& r) {
  std::string out = fmt::format(
      "endpoint tier: hits {} stale {} misses {} coalesced {} served {} stores {} evictions {} "
      "invalidated {} (writes {}) entries {} bytes {} uncacheable {} bypassed {} catalog refreshes {}\n",
      r.tier.hits, r.tier.stale_hits, r.tier.misses, r.tier.coalesced, r.served, r.tier.stores, r.tier.evictions,
      r.tier.invalidations, r.invalidations, r.tier.entries, r.tier.bytes, r.uncacheable, r.bypassed,
      r.catalog_refreshes);
  // Why so little (or so much) was cacheable: every decision by reason, the
  // catalog it was made with, and every bypass by cause.
  out += "endpoint decisions:";
  for (std::size_t i = 0; i < kReasons; ++i) {
    if (r.decided[i] != 0) out += fmt::format(" {} {}", cache::ReasonName(static_cast<cache::Reason>(i)), r.decided[i]);
  }
  out += fmt::format(" (without catalog {}, with names changed since the read {}; catalog reads {}; from the memo {})\n",
                     r.decided_without_catalog, r.decided_with_changes, r.catalog_reads, r.decided_from_memo);
  static constexpr std::string_view kCauses[kBypassCauses] = {"off", "session-state", "startup",
                                                               "serve-gate", "unit-changes-state", "zero-ttl"};
  out += "endpoint bypassed:";
  for (std::size_t i = 0; i < kBypassCauses; ++i) out += fmt::format(" {} {}", kCauses[i], r.bypass[i]);
  out += '\n';
  for (const cache::DecisionStats::Row& row : r.top) {
    out += fmt::format("  {:016x} {:>16} {:>8}  {}\n", row.fingerprint, cache::ReasonName(row.reason), row.count,
                       row.sample);
  }
  return out;
}

}  // namespace hyperpool::endpoint
