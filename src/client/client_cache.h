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
//
// With the invalidation watch (invalidation_watch.h; docs/architecture.md,
// "Invalidation"), the tier is "watched": it serves and stores only while
// the watch is subscribed to an Endpoint, and only results of that Endpoint
// instance (the `source` of its control messages) whose fetch began at or
// after the generation it reported when the subscription started, so no
// invalidation a result could have missed was sent before the subscription.
// Losing the watch (or moving it) drops every entry.
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
  // The watch: whether it is subscribed now, how often it subscribed, how
  // many results were refused because it was not (or from another
  // Endpoint, or fetched before the subscription).
  bool subscribed = false;
  uint64_t subscriptions = 0;
  uint64_t refused_unwatched = 0;
};

class ClientTier {
 public:
  // `watched`: an invalidation watch keeps the tier (Subscribe/Unsubscribe);
  // nothing is served or stored before the first Subscribe.
  explicit ClientTier(const CacheOptions& options, bool watched = false);

  const CacheOptions& options() const { return options_; }
  // A fresh entry for `key`, or nullptr (stale entries go to the Endpoint,
  // which serves stale-while-revalidate itself).
  std::shared_ptr<const CacheEntry> GetFresh(const std::string& key);
  // Stores a result the Endpoint declared cacheable for `control.ttl`,
  // counted from `sent`: when the unit left for the Endpoint, which set the
  // ttl after that. Counting from the result's arrival instead would let a
  // Client that reads its link late (a busy thread, a slow link) serve past
  // the Endpoint's bound, such as the WAL feed's freshness budget.
  void Store(const std::string& key, std::string messages, cache::StoreControl control,
             std::chrono::steady_clock::time_point sent);
  void Invalidate(const cache::InvalidateControl& control);
  // The watch is subscribed to Endpoint instance `source`, whose generation
  // was `generation` then: drops every entry and the generations seen so far
  // (they were another Endpoint's, or messages may have been missed).
  void Subscribe(uint64_t source, uint64_t generation);
  // The watch lost its link (or is moving): drops every entry; nothing is
  // served or stored until the next Subscribe.
  void Unsubscribe();
  ClientTierStats Stats();

 private:
  // Tables remembered with their last invalidation generation; beyond this
  // the map is folded into all_generation_ (conservative).
  static constexpr size_t kMaxTrackedTables = 10000;

  // Under mu_: drops every entry and generation.
  void ResetLocked();

  CacheOptions options_;
  const bool watched_;
  std::mutex mu_;
  std::unique_ptr<Cache> tier_;  // options.factory's, else a MemoryCache
  std::unordered_map<std::string, uint64_t> table_generation_;
  uint64_t all_generation_ = 0;
  uint64_t max_generation_ = 0;
  // Watched: subscribed now, to `source_`, which was at generation
  // `subscribed_generation_` then.
  bool subscribed_ = false;
  uint64_t source_ = 0;
  uint64_t subscribed_generation_ = 0;
  ClientTierStats stats_;
};

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_CLIENT_CACHE_H_
