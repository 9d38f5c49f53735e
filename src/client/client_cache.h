// The Client's cache tier (docs/architecture.md, "Query cache"): results the
// Endpoint declared cacheable (link control messages, src/cache/tier.h),
// kept beside the application so that a repeated unit of work is answered
// with no link traffic at all.
//
// One ClientTier per Client, shared by the sessions of every worker thread
// under a mutex: sessions only Get/Store/Invalidate (no single-flight
// waiters, no callbacks under the lock: coalescing is the Endpoint's job),
// each a hash look-up and a shared_ptr copy, so one tier (one copy of each
// result, hits across workers) costs less than one tier per worker.
//
// Invalidation generations: every invalidation the Endpoint makes carries its
// generation, and every stored result the generation at which its origin
// fetch started. Results and invalidations arrive on different links (of
// different sessions) in any order; a result older than an invalidation of a
// table it read is refused, so the order does not matter.
#ifndef HYPERPOOL_CLIENT_CLIENT_CACHE_H_
#define HYPERPOOL_CLIENT_CLIENT_CACHE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cache/memory_cache.h"
#include "cache/tier.h"
#include "hyperpool/options.h"

namespace hyperpool::client {

struct ClientTierStats {
  CacheStats tier;
  uint64_t local_hits = 0;       // units answered with no link traffic
  uint64_t refused_stale = 0;    // results refused: older than an invalidation seen
  uint64_t invalidations = 0;    // invalidation messages applied
};

class ClientTier {
 public:
  explicit ClientTier(const CacheOptions& options);

  const CacheOptions& options() const { return options_; }
  // A fresh entry for `key`, or nullptr (stale entries go to the Endpoint,
  // which serves stale-while-revalidate itself).
  std::shared_ptr<const CacheEntry> GetFresh(const std::string& key);
  // Stores a result the Endpoint declared cacheable for `control.ttl`.
  void Store(const std::string& key, std::string messages, const cache::StoreControl& control);
  void Invalidate(const cache::InvalidateControl& control);
  ClientTierStats Stats();

 private:
  // Tables remembered with their last invalidation generation; beyond this
  // the map is folded into all_generation_ (conservative).
  static constexpr size_t kMaxTrackedTables = 10000;

  CacheOptions options_;
  std::mutex mu_;
  std::unique_ptr<Cache> tier_;  // options.factory's, else a MemoryCache
  std::unordered_map<std::string, uint64_t> table_generation_;
  uint64_t all_generation_ = 0;
  uint64_t max_generation_ = 0;
  ClientTierStats stats_;
};

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_CLIENT_CACHE_H_
