#pragma once
// The Cache plug-in: where query results are kept. The Client and the
// Endpoint each hold one (two tiers). Keys are opaque strings built by
// hyperpool (they include role, database and result-relevant settings);
// values are the backend messages of a result, stored as they came.
//
// Threading: a Cache is not thread-safe. Each tier confines its Cache to one
// executor (the Endpoint's, or the Client's worker that owns it); waiter
// callbacks run synchronously on that executor, inside Complete()/Abandon().
//
// Single-flight protocol (workerd's memory cache): Lookup() on a key nobody
// is fetching makes the caller the leader (kMissLeader), which must end with
// exactly one Complete() (a result to store and hand to the followers) or
// Abandon() (error, cancel, uncacheable or oversized result: followers are
// woken with nullptr and go to the origin themselves). Concurrent lookups of
// the same key become followers (kMissFollower) and are woken by that call.
// A stale entry is served (kStale) while exactly one caller refreshes it
// (kStaleRefresh: that caller is the leader of the refresh).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hyperpool {

struct CacheEntry {
  std::string messages;                           // RowDescription, DataRow..., CommandComplete
  std::chrono::steady_clock::time_point expires;  // fresh until then
  std::chrono::steady_clock::time_point stale_until;  // servable while revalidating until then
  // Kept (not served by Lookup, returned by Get) until then, for
  // stale-if-error: an origin that cannot be reached is answered from an
  // entry past its max age but within this bound. Unset or earlier than
  // stale_until: removed at stale_until.
  std::chrono::steady_clock::time_point keep_until{};
  // For invalidation: the database the result was read from, and the base
  // tables it read (schema-qualified "schema.table", views resolved to their
  // tables). InvalidateTables() removes the entries that read any of them.
  std::string database;
  std::vector<std::string> tables;
};

// What Lookup() tells its caller to do.
enum class CacheLookupStatus : uint8_t {
  kHit,           // Fresh entry: serve it.
  kStale,         // Stale entry being refreshed by someone else: serve it.
  kStaleRefresh,  // Stale entry: serve it AND refresh it (you are the leader).
  kMissLeader,    // No entry: fetch from the origin, then Complete() or Abandon().
  kMissFollower,  // Someone is fetching: your waiter will be called.
};

struct CacheLookup {
  CacheLookupStatus status = CacheLookupStatus::kMissLeader;
  // kHit / kStale / kStaleRefresh: the entry (shared: serving it copies
  // nothing until the bytes are appended to the client's output buffer).
  std::shared_ptr<const CacheEntry> entry;
  // kMissFollower: identifies the waiter for CancelWait().
  uint64_t wait_id = 0;
};

// Called once for a follower: with the leader's entry, or nullptr when the
// leader abandoned (then fetch from the origin yourself).
using CacheWaiter = std::function<void(std::shared_ptr<const CacheEntry>)>;

// Counters, for metrics.
struct CacheStats {
  uint64_t hits = 0;
  uint64_t stale_hits = 0;
  uint64_t misses = 0;
  uint64_t coalesced = 0;     // Misses that waited for a leader.
  uint64_t stores = 0;
  uint64_t rejected = 0;      // Complete() results not stored (too big, invalidated meanwhile).
  uint64_t evictions = 0;     // Removed to make room.
  uint64_t expirations = 0;   // Removed past stale_until.
  uint64_t invalidations = 0; // Removed by InvalidateTables / InvalidateAll / Erase.
  uint64_t bytes = 0;         // Current accounted size.
  uint64_t entries = 0;       // Current number of entries.
};

class Cache {
 public:
  virtual ~Cache() = default;

  // Single-flight lookup (see the protocol above). `on_ready` is kept only
  // for kMissFollower.
  virtual CacheLookup Lookup(const std::string& key, CacheWaiter on_ready) = 0;
  // The leader's (or refresher's) successful result: stores it (subject to
  // limits, and unless its tables were invalidated since the Lookup) and
  // wakes the followers with it.
  virtual void Complete(const std::string& key, CacheEntry entry) = 0;
  // The leader failed or the result is not cacheable: wakes the followers
  // with nullptr. Nothing is stored.
  virtual void Abandon(const std::string& key) = 0;
  // A follower that no longer waits (its client went away).
  virtual void CancelWait(const std::string& key, uint64_t wait_id) = 0;

  // Returns the entry for `key`, fresh or stale (the caller decides), without
  // single-flight bookkeeping.
  virtual std::shared_ptr<const CacheEntry> Get(const std::string& key) = 0;
  // Stores or replaces the entry for `key`.
  virtual void Put(const std::string& key, CacheEntry entry) = 0;
  // Removes the entry for `key`.
  virtual void Erase(const std::string& key) = 0;

  // Removes every entry of `database` that read any of `tables`
  // ("schema.table"), and prevents in-flight fetches that started before
  // this call from storing results that read them.
  virtual void InvalidateTables(std::string_view database,
                                const std::vector<std::string>& tables) = 0;
  // Removes every entry of `database` (after DDL, or a write the analysis
  // could not attribute), likewise for in-flight fetches.
  virtual void InvalidateAll(std::string_view database) = 0;

  virtual CacheStats Stats() const = 0;
};

// A cache that stores nothing: every Lookup is kMissLeader, every Get misses.
std::unique_ptr<Cache> MakeNoopCache();

// Limits of the in-memory cache (workerd's MemoryCacheLimits).
struct MemoryCacheLimits {
  size_t max_bytes = 64 << 20;       // Total accounted bytes (keys, values, overhead).
  size_t max_entry_bytes = 50 << 20; // Largest single entry (Hyperdrive: 50 MB).
  size_t max_entries = 100000;
};

// The in-memory LRU cache with single-flight (src/cache/memory_cache.h).
// `clock` defaults to std::chrono::steady_clock::now (tests inject one).
std::unique_ptr<Cache> MakeMemoryCache(
    MemoryCacheLimits limits,
    std::function<std::chrono::steady_clock::time_point()> clock = nullptr);

// How a tier makes its Cache (EndpointOptions::cache.factory,
// ClientOptions::cache.factory): the plug-in point. Empty: MakeMemoryCache.
// Called once per tier, with the limits from the tier's CacheOptions.
using CacheFactory = std::function<std::unique_ptr<Cache>(const MemoryCacheLimits&)>;

}  // namespace hyperpool
