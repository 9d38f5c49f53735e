#include "cache/memory_cache.h"

#include <algorithm>
#include <utility>

namespace hyperpool::cache {

MemoryCache::MemoryCache(MemoryCacheLimits limits, Clock clock)
    : limits_(limits), clock_(std::move(clock)) {}

MemoryCache::~MemoryCache() {
  // Never leave a follower hanging: wake them (they go to the origin).
  while (!flights_.empty()) {
    const FlightKey& first = flights_.begin()->first;
    Finish(first.key, first.hash, nullptr);
  }
}

size_t MemoryCache::Cost(const std::string& key, const CacheEntry& entry) {
  size_t cost = kEntryOverhead + key.size() + entry.messages.size() + entry.database.size();
  for (const std::string& t : entry.tables) cost += t.size() + 32;
  return cost;
}

void MemoryCache::BuildTableKey(std::string& out, std::string_view db, std::string_view table) {
  out.assign(db);
  out.push_back('\0');
  out.append(table);
}

std::string MemoryCache::TableKey(std::string_view db, std::string_view table) {
  std::string k;
  BuildTableKey(k, db, table);
  return k;
}

std::string_view MemoryCache::TableKeyView(std::string_view db, std::string_view table) {
  BuildTableKey(table_key_, db, table);
  return table_key_;
}

CacheLookup MemoryCache::Lookup(const std::string& key, CacheWaiter on_ready) {
  const size_t hash = StringHash{}(key);
  auto it = index_.find(HashedKey{key, hash});
  if (it != index_.end()) {
    List::iterator node = it->second;
    TimePoint now = Now();
    const CacheEntry& e = *node->entry;
    if (now < e.expires) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, node);
      return CacheLookup{CacheLookupStatus::kHit, node->entry, 0};
    }
    if (now < e.stale_until) {
      ++stats_.stale_hits;
      lru_.splice(lru_.begin(), lru_, node);
      if (flights_.find(HashedKey{key, hash}) != flights_.end()) {
        return CacheLookup{CacheLookupStatus::kStale, node->entry, 0};
      }
      StartFlight(key, hash);
      return CacheLookup{CacheLookupStatus::kStaleRefresh, node->entry, 0};
    }
    // Past stale_until: a miss, but an entry kept for stale-if-error stays
    // (Get returns it) until keep_until or until the refetch replaces it.
    if (now >= e.keep_until) {
      ++stats_.expirations;
      Remove(node);
    }
  }
  ++stats_.misses;
  auto f = flights_.find(HashedKey{key, hash});
  if (f == flights_.end()) {
    StartFlight(key, hash);
    return CacheLookup{CacheLookupStatus::kMissLeader, nullptr, 0};
  }
  ++stats_.coalesced;
  uint64_t id = next_wait_id_++;
  f->second.waiters.emplace_back(id, std::move(on_ready));
  return CacheLookup{CacheLookupStatus::kMissFollower, nullptr, id};
}

void MemoryCache::StartFlight(const std::string& key, size_t hash) {
  Flight& f = flights_[FlightKey{key, hash}];
  f.started_epoch = epoch_;
}

bool MemoryCache::InvalidatedSince(const CacheEntry& entry, uint64_t epoch) const {
  if (database_epochs_.empty() && table_epochs_.empty()) return false;  // none since the last quiet
  if (auto d = database_epochs_.find(entry.database);
      d != database_epochs_.end() && d->second > epoch) {
    return true;
  }
  for (const std::string& t : entry.tables) {
    if (auto e = table_epochs_.find(TableKey(entry.database, t));
        e != table_epochs_.end() && e->second > epoch) {
      return true;
    }
  }
  return false;
}

void MemoryCache::Complete(const std::string& key, CacheEntry entry) {
  const size_t hash = StringHash{}(key);
  auto f = flights_.find(HashedKey{key, hash});
  uint64_t started = f == flights_.end() ? epoch_ : f->second.started_epoch;
  auto shared = std::make_shared<const CacheEntry>(std::move(entry));
  const bool invalidated = InvalidatedSince(*shared, started);
  bool stored = !invalidated && Now() < shared->stale_until && Store(key, hash, shared);
  if (!stored) ++stats_.rejected;
  // A result invalidated while it was fetched is handed to no waiter: the
  // leader's query may have run before a write that was acknowledged, and
  // invalidated, before a waiter asked (served, it read older than the WAL
  // feed's bound: 539 ms, under load), and a waiter's Client would store it
  // as of now. The waiters look again and fetch for themselves.
  Finish(key, hash, invalidated ? nullptr : shared);
}

void MemoryCache::Abandon(const std::string& key) { Finish(key, StringHash{}(key), nullptr); }

void MemoryCache::Finish(const std::string& key, size_t hash,
                         const std::shared_ptr<const CacheEntry>& entry) {
  auto f = flights_.find(HashedKey{key, hash});
  if (f == flights_.end()) return;
  std::vector<std::pair<uint64_t, CacheWaiter>> waiters = std::move(f->second.waiters);
  flights_.erase(f);
  if (flights_.empty()) {
    // Nothing in flight can be affected by past invalidations any more.
    table_epochs_.clear();
    database_epochs_.clear();
  }
  for (auto& [id, waiter] : waiters) {
    if (waiter) waiter(entry);
  }
}

void MemoryCache::CancelWait(const std::string& key, uint64_t wait_id) {
  auto f = flights_.find(Hashed(key));
  if (f == flights_.end()) return;
  auto& w = f->second.waiters;
  for (auto it = w.begin(); it != w.end(); ++it) {
    if (it->first == wait_id) {
      w.erase(it);
      return;
    }
  }
}

std::shared_ptr<const CacheEntry> MemoryCache::Get(const std::string& key) {
  auto it = index_.find(Hashed(key));
  if (it == index_.end()) return nullptr;
  const CacheEntry& e = *it->second->entry;
  if (Now() >= std::max(e.stale_until, e.keep_until)) {
    ++stats_.expirations;
    Remove(it->second);
    return nullptr;
  }
  return it->second->entry;
}

void MemoryCache::Put(const std::string& key, CacheEntry entry) {
  if (!Store(key, StringHash{}(key), std::make_shared<const CacheEntry>(std::move(entry)))) {
    ++stats_.rejected;
  }
}

bool MemoryCache::Store(const std::string& key, size_t hash,
                        std::shared_ptr<const CacheEntry> entry) {
  size_t cost = Cost(key, *entry);
  if (auto it = index_.find(HashedKey{key, hash}); it != index_.end()) Remove(it->second);
  if (cost > limits_.max_entry_bytes || cost > limits_.max_bytes || limits_.max_entries == 0) {
    return false;
  }
  while (!lru_.empty() &&
         (stats_.bytes + cost > limits_.max_bytes || stats_.entries + 1 > limits_.max_entries)) {
    ++stats_.evictions;
    Remove(std::prev(lru_.end()));
  }
  lru_.push_front(Node{key, std::move(entry), cost, hash});
  List::iterator node = lru_.begin();
  node->self = node;
  index_.emplace(HashedKey{node->key, hash}, node);
  const CacheEntry& e = *node->entry;
  Join(*node, GroupOf(by_database_, e.database));
  for (const std::string& t : e.tables) Join(*node, GroupOf(by_table_, TableKeyView(e.database, t)));
  stats_.bytes += cost;
  ++stats_.entries;
  ++stats_.stores;
  return true;
}

MemoryCache::Group& MemoryCache::GroupOf(GroupMap& map, std::string_view key) {
  auto it = map.find(key);
  if (it == map.end()) {
    it = map.emplace(std::string(key), Group{}).first;
    it->second.map = &map;
    it->second.key = it->first;
  }
  return it->second;
}

void MemoryCache::Join(Node& node, Group& group) {
  for (const Membership& m : node.groups) {
    if (m.group == &group) return;  // a table named twice
  }
  node.groups.push_back(Membership{&group, group.members.size()});
  group.members.push_back(&node);
}

void MemoryCache::Leave(Node& node) {
  for (const Membership& m : node.groups) {
    Group& g = *m.group;
    Node* last = g.members.back();
    g.members[m.slot] = last;
    for (Membership& lm : last->groups) {
      if (lm.group == &g) lm.slot = m.slot;
    }
    g.members.pop_back();
    if (g.members.empty()) g.map->erase(g.key);
  }
  node.groups.clear();
}

void MemoryCache::Remove(List::iterator node) {
  Leave(*node);
  if (auto it = index_.find(HashedKey{node->key, node->hash}); it != index_.end()) {
    index_.erase(it);
  }
  stats_.bytes -= node->cost;
  --stats_.entries;
  lru_.erase(node);
}

void MemoryCache::Erase(const std::string& key) {
  auto it = index_.find(Hashed(key));
  if (it == index_.end()) return;
  ++stats_.invalidations;
  Remove(it->second);
}

void MemoryCache::InvalidateTables(std::string_view database,
                                   const std::vector<std::string>& tables) {
  ++epoch_;
  if (flights_.empty() && by_table_.empty()) return;  // nothing stored, nothing in flight
  for (const std::string& t : tables) {
    const std::string_view tk = TableKeyView(database, t);
    if (!flights_.empty()) table_epochs_[std::string(tk)] = epoch_;
    auto bt = by_table_.find(tk);
    if (bt != by_table_.end()) RemoveAll(bt->second);
  }
}

void MemoryCache::RemoveAll(Group& group) {
  // A copy: each Remove() edits the group (and erases it with its last
  // member). Each node stays valid until its own Remove: removing one entry
  // never removes another.
  const std::vector<Node*> victims = group.members;
  for (Node* n : victims) {
    ++stats_.invalidations;
    Remove(n->self);
  }
}

void MemoryCache::InvalidateAll(std::string_view database) {
  ++epoch_;
  if (!flights_.empty()) database_epochs_[std::string(database)] = epoch_;
  auto bd = by_database_.find(database);
  if (bd != by_database_.end()) RemoveAll(bd->second);
}

}  // namespace hyperpool::cache

namespace hyperpool {

std::unique_ptr<Cache> MakeMemoryCache(
    MemoryCacheLimits limits, std::function<std::chrono::steady_clock::time_point()> clock) {
  return std::make_unique<cache::MemoryCache>(limits, std::move(clock));
}

}  // namespace hyperpool
