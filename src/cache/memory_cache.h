// The in-memory cache tier: LRU by bytes, TTL + stale-while-revalidate per
// entry, single-flight misses, invalidation by table (after workerd's
// src/workerd/api/memory-cache.h: an explicit limits struct, LRU eviction,
// one fetch for concurrent misses on one key).
//
// Threading: not thread-safe, no locks. A MemoryCache is confined to one
// executor (one per tier); waiters run synchronously on it inside
// Complete()/Abandon(), after the cache's own state is updated, so a waiter
// may call back into the cache.
#ifndef HYPERPOOL_CACHE_MEMORY_CACHE_H_
#define HYPERPOOL_CACHE_MEMORY_CACHE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_map.h"
#include "cache/string_hash.h"
#include "hyperpool/cache.h"

namespace hyperpool::cache {

class MemoryCache final : public Cache {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Clock = std::function<TimePoint()>;

  // Per-entry bookkeeping charged to max_bytes on top of key and value bytes.
  static constexpr size_t kEntryOverhead = 128;

  explicit MemoryCache(MemoryCacheLimits limits, Clock clock = nullptr);
  ~MemoryCache() override;
  MemoryCache(const MemoryCache&) = delete;
  MemoryCache& operator=(const MemoryCache&) = delete;

  CacheLookup Lookup(const std::string& key, CacheWaiter on_ready) override;
  void Complete(const std::string& key, CacheEntry entry) override;
  void Abandon(const std::string& key) override;
  void CancelWait(const std::string& key, uint64_t wait_id) override;
  std::shared_ptr<const CacheEntry> Get(const std::string& key) override;
  void Put(const std::string& key, CacheEntry entry) override;
  void Erase(const std::string& key) override;
  void InvalidateTables(std::string_view database,
                        const std::vector<std::string>& tables) override;
  void InvalidateAll(std::string_view database) override;
  CacheStats Stats() const override { return stats_; }

  // Bytes an entry is charged (key + messages + table names + overhead).
  static size_t Cost(const std::string& key, const CacheEntry& entry);
  // Number of keys with a fetch in flight (tests, metrics).
  size_t InFlight() const { return flights_.size(); }
  const MemoryCacheLimits& limits() const { return limits_; }

 private:
  struct Node;
  struct Group;
  // The entries of one table or one database (an invalidation's unit), as a
  // vector: joining is a push_back and leaving a swap with the last member,
  // so storing and evicting an entry hashes no node address (a hash set of
  // them, churned by every eviction of a full tier, was the costliest
  // symbol of the miss path: docs/performance.md, 2026-12-05).
  using GroupMap = absl::node_hash_map<std::string, Group, StringHash, StringEq>;
  struct Group {
    std::vector<Node*> members;
    GroupMap* map = nullptr;  // the map that holds it (erased when empty)
    std::string_view key;     // its key there (node_hash_map keys do not move)
  };
  struct Membership {
    Group* group;
    size_t slot;  // index in group->members
  };
  using List = std::list<Node>;
  struct Node {
    std::string key;
    std::shared_ptr<const CacheEntry> entry;
    size_t cost = 0;
    size_t hash = 0;  // StringHash{}(key): removing the node hashes nothing
    List::iterator self;  // this node in lru_
    // Its database's group, then each of its tables' (no group twice).
    absl::InlinedVector<Membership, 2> groups;
  };
  struct Flight {
    uint64_t started_epoch = 0;
    std::vector<std::pair<uint64_t, CacheWaiter>> waiters;
  };

  TimePoint Now() const { return clock_ ? clock_() : std::chrono::steady_clock::now(); }
  // Stores unconditionally (limits permitting). False if it does not fit.
  // `hash` is StringHash{}(key): index_ and flights_ share the hasher, so a
  // call hashes its (long) key once.
  bool Store(const std::string& key, size_t hash, std::shared_ptr<const CacheEntry> entry);
  void Remove(List::iterator it);
  void StartFlight(const std::string& key, size_t hash);
  // Takes the flight of `key` out and wakes its waiters with `entry`.
  void Finish(const std::string& key, size_t hash,
              const std::shared_ptr<const CacheEntry>& entry);
  bool InvalidatedSince(const CacheEntry& entry, uint64_t epoch) const;
  // Removes every entry of `group` (which may be erased with its last).
  void RemoveAll(Group& group);
  Group& GroupOf(GroupMap& map, std::string_view key);
  static void Join(Node& node, Group& group);
  static void Leave(Node& node);
  // by_table_'s key: the database, a NUL, the table.
  static void BuildTableKey(std::string& out, std::string_view db, std::string_view table);
  static std::string TableKey(std::string_view db, std::string_view table);
  // TableKey(db, table) built in table_key_ (its capacity reused): a view
  // valid until the next call, for look-ups that need no key of their own.
  std::string_view TableKeyView(std::string_view db, std::string_view table);

  MemoryCacheLimits limits_;
  Clock clock_;
  CacheStats stats_;
  List lru_;  // Front: most recently used.
  // A key with its StringHash, computed once per call: the index hashes
  // nothing itself (a store used to hash its key again to insert it).
  struct HashedKey {
    std::string_view key;  // views Node::key in the index (list nodes never move)
    size_t hash;
  };
  struct HashedKeyHash {
    size_t operator()(const HashedKey& k) const { return k.hash; }
  };
  struct HashedKeyEq {
    bool operator()(const HashedKey& a, const HashedKey& b) const { return a.hash == b.hash && a.key == b.key; }
  };
  static HashedKey Hashed(std::string_view key) { return HashedKey{key, StringHash{}(key)}; }
  absl::flat_hash_map<HashedKey, List::iterator, HashedKeyHash, HashedKeyEq> index_;
  // The same for the flights' own (owned) keys, searched with a HashedKey.
  struct FlightKey {
    std::string key;
    size_t hash;
  };
  struct FlightKeyHash {
    using is_transparent = void;
    size_t operator()(const FlightKey& k) const { return k.hash; }
    size_t operator()(const HashedKey& k) const { return k.hash; }
  };
  struct FlightKeyEq {
    using is_transparent = void;
    static HashedKey View(const FlightKey& k) { return HashedKey{k.key, k.hash}; }
    static HashedKey View(const HashedKey& k) { return k; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return HashedKeyEq{}(View(a), View(b));
    }
  };
  // Entries by table (TableKey) and by database: a store hashes each of
  // its names once to find the group, an eviction hashes nothing.
  GroupMap by_table_;
  GroupMap by_database_;

  absl::flat_hash_map<FlightKey, Flight, FlightKeyHash, FlightKeyEq> flights_;
  uint64_t next_wait_id_ = 1;
  // Invalidations seen while fetches were in flight: a fetch that started at
  // epoch E must not store if what it read was invalidated after E.
  uint64_t epoch_ = 0;
  absl::flat_hash_map<std::string, uint64_t> table_epochs_;
  absl::flat_hash_map<std::string, uint64_t> database_epochs_;
  std::string table_key_;  // TableKeyView's buffer
};

}  // namespace hyperpool::cache

#endif  // HYPERPOOL_CACHE_MEMORY_CACHE_H_
