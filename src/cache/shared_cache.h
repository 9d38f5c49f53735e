// The shared cache tier: a second level behind an Endpoint's local Cache,
// shared by every Endpoint in front of the same origin (docs/architecture.md,
// "Shared cache tier"). Unlike hyperpool::Cache (synchronous, confined to
// one executor, single-flight) a shared store is across the network, so
// every operation is asynchronous and may fail; a failure is a miss.
//
// Consistency: an entry carries the invalidation generations of its
// database and tables as read when its origin fetch started (the Token of
// the Get that missed); a write increments those generations in the store
// and publishes its tables to every Endpoint. A Get returns an entry only
// when its recorded generations equal the current ones, so an entry whose
// fetch raced a write is never served, whatever order the store saw the
// two in.
//
// Threading: confined to one executor; callbacks run on it, never inside
// the call that registered them.
#ifndef HYPERPOOL_CACHE_SHARED_CACHE_H_
#define HYPERPOOL_CACHE_SHARED_CACHE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hyperpool/cache.h"

namespace hyperpool::cache {

// The generations a Get read (database first, then each table in order).
struct SharedToken {
  std::vector<uint64_t> generations;
  bool valid = false;  // false: the Get failed; a Put with it stores nothing
};

struct SharedCacheStats {
  bool up = false;                // connected and subscribed
  uint64_t errors = 0;            // failed or timed-out commands, lost connections
  uint64_t hits = 0;              // Gets answered with a current entry
  uint64_t misses = 0;            // Gets answered without one (errors excluded)
  uint64_t stores = 0;            // Puts sent
  uint64_t published = 0;         // invalidations sent
  uint64_t received = 0;          // invalidations from other Endpoints applied
  uint64_t reconnects = 0;        // times a lost connection was made again
};

// What another Endpoint invalidated (`all`: every entry of `database`).
struct SharedInvalidation {
  std::string database;
  bool all = false;
  std::vector<std::string> tables;
};

class SharedCache {
 public:
  using GetDone = std::function<void(std::shared_ptr<const CacheEntry>, SharedToken)>;

  virtual ~SharedCache() = default;

  // Whether the store is reachable now: callers skip Get while it is not.
  virtual bool up() const = 0;
  // Looks up `key`, an entry of `database` reading `tables`. `done` is
  // called exactly once: with the entry (expires/stale_until/keep_until
  // converted to this process's steady clock; the caller decides whether it
  // is fresh) or nullptr, and the token to Put the origin's result with.
  virtual void Get(const std::string& key, std::string_view database, const std::vector<std::string>& tables,
                   GetDone done) = 0;
  // Stores `entry` under `key` until its keep_until (or stale_until), with
  // the generations of `token`.
  virtual void Put(const std::string& key, const CacheEntry& entry, const SharedToken& token) = 0;
  // A write through this Endpoint: bumps the generations and tells the
  // other Endpoints.
  virtual void Invalidate(const SharedInvalidation& inv) = 0;
  // Where invalidations from other Endpoints go. Also called with all=true
  // when the subscription was lost and is back (some may have been missed).
  virtual void SetInvalidationHandler(std::function<void(const SharedInvalidation&)> handler) = 0;
  virtual SharedCacheStats Stats() const = 0;
  // Closes the connections; no callback runs after it returns except
  // pending GetDone calls (with nullptr).
  virtual void Stop() = 0;
};

}  // namespace hyperpool::cache

#endif  // HYPERPOOL_CACHE_SHARED_CACHE_H_
