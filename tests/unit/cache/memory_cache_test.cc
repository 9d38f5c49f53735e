#include "cache/memory_cache.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

namespace hyperpool::cache {
namespace {

using namespace std::chrono_literals;
using TimePoint = std::chrono::steady_clock::time_point;

struct Fixture {
  TimePoint now = TimePoint() + 1000s;
  MemoryCache cache;
  explicit Fixture(MemoryCacheLimits limits = {})
      : cache(limits, [this] { return now; }) {}

  CacheEntry Entry(std::string value, std::vector<std::string> tables = {},
                   std::string db = "db", std::chrono::seconds ttl = 60s,
                   std::chrono::seconds swr = 15s) {
    CacheEntry e;
    e.messages = std::move(value);
    e.expires = now + ttl;
    e.stale_until = now + ttl + swr;
    e.database = std::move(db);
    e.tables = std::move(tables);
    return e;
  }
  CacheLookupStatus Status(const std::string& key) {
    CacheLookup l = cache.Lookup(key, nullptr);
    return l.status;
  }
};

TEST_CASE("miss, leader completes, then hit") {
  Fixture f;
  CacheLookup l = f.cache.Lookup("k", nullptr);
  CHECK(l.status == CacheLookupStatus::kMissLeader);
  f.cache.Complete("k", f.Entry("v"));
  CacheLookup h = f.cache.Lookup("k", nullptr);
  REQUIRE(h.status == CacheLookupStatus::kHit);
  CHECK(h.entry->messages == "v");
  CacheStats s = f.cache.Stats();
  CHECK(s.hits == 1);
  CHECK(s.misses == 1);
  CHECK(s.entries == 1);
  CHECK(s.bytes == MemoryCache::Cost("k", f.Entry("v")));
}

TEST_CASE("single flight: followers get the leader's result or are told to fetch") {
  Fixture f;
  bool complete = GENERATE(true, false);
  REQUIRE(f.cache.Lookup("k", nullptr).status == CacheLookupStatus::kMissLeader);
  std::vector<std::shared_ptr<const CacheEntry>> got;
  int calls = 0;
  for (int i = 0; i < 3; ++i) {
    CacheLookup l = f.cache.Lookup("k", [&](std::shared_ptr<const CacheEntry> e) {
      ++calls;
      got.push_back(std::move(e));
    });
    CHECK(l.status == CacheLookupStatus::kMissFollower);
  }
  CHECK(f.cache.InFlight() == 1);
  CHECK(calls == 0);
  if (complete) {
    f.cache.Complete("k", f.Entry("v"));
  } else {
    f.cache.Abandon("k");
  }
  CHECK(calls == 3);
  CHECK(f.cache.InFlight() == 0);
  for (const auto& e : got) {
    if (complete) {
      REQUIRE(e != nullptr);
      CHECK(e->messages == "v");
    } else {
      CHECK(e == nullptr);
    }
  }
  CHECK(f.cache.Stats().coalesced == 3);
  CHECK(f.cache.Stats().entries == (complete ? 1u : 0u));
  // After an abandon the next lookup leads again.
  if (!complete) CHECK(f.Status("k") == CacheLookupStatus::kMissLeader);
}

TEST_CASE("a result invalidated while it was fetched reaches no waiter") {
  // The leader's query may have run before a write that was invalidated
  // before (or after) a follower joined: the follower fetches for itself.
  Fixture f;
  const bool invalidate = GENERATE(true, false);
  REQUIRE(f.cache.Lookup("k", nullptr).status == CacheLookupStatus::kMissLeader);
  std::vector<std::shared_ptr<const CacheEntry>> got;
  auto waiter = [&](std::shared_ptr<const CacheEntry> e) { got.push_back(std::move(e)); };
  REQUIRE(f.cache.Lookup("k", waiter).status == CacheLookupStatus::kMissFollower);  // before the write
  if (invalidate) f.cache.InvalidateTables("db", {"public.t"});
  REQUIRE(f.cache.Lookup("k", waiter).status == CacheLookupStatus::kMissFollower);  // after it
  f.cache.Complete("k", f.Entry("old", {"public.t"}));
  REQUIRE(got.size() == 2);
  for (const auto& e : got) CHECK((e == nullptr) == invalidate);
  CHECK(f.cache.Stats().entries == (invalidate ? 0u : 1u));
  // Another table's write changes nothing.
  got.clear();
  REQUIRE(f.cache.Lookup("j", nullptr).status == CacheLookupStatus::kMissLeader);
  REQUIRE(f.cache.Lookup("j", waiter).status == CacheLookupStatus::kMissFollower);
  f.cache.InvalidateTables("db", {"public.other"});
  f.cache.Complete("j", f.Entry("v", {"public.t"}));
  REQUIRE(got.size() == 1);
  CHECK(got[0] != nullptr);
}

TEST_CASE("a waiter may re-enter the cache") {
  Fixture f;
  f.cache.Lookup("k", nullptr);
  CacheLookupStatus inner = CacheLookupStatus::kHit;
  f.cache.Lookup("k", [&](std::shared_ptr<const CacheEntry> e) {
    inner = f.cache.Lookup("k", nullptr).status;
  });
  f.cache.Abandon("k");
  CHECK(inner == CacheLookupStatus::kMissLeader);
}

TEST_CASE("cancelled waiters are not called") {
  Fixture f;
  f.cache.Lookup("k", nullptr);
  int calls = 0;
  CacheLookup l = f.cache.Lookup("k", [&](auto) { ++calls; });
  f.cache.CancelWait("k", l.wait_id);
  f.cache.Complete("k", f.Entry("v"));
  CHECK(calls == 0);
}

TEST_CASE("destroying the cache wakes followers") {
  int calls = 0;
  {
    Fixture f;
    f.cache.Lookup("k", nullptr);
    f.cache.Lookup("k", [&](std::shared_ptr<const CacheEntry> e) {
      CHECK(e == nullptr);
      ++calls;
    });
  }
  CHECK(calls == 1);
}

TEST_CASE("TTL and stale-while-revalidate windows") {
  Fixture f;
  f.cache.Lookup("k", nullptr);
  f.cache.Complete("k", f.Entry("v", {}, "db", 60s, 15s));
  struct Step {
    std::chrono::seconds at;
    CacheLookupStatus want;
  };
  f.now += 59s;
  CHECK(f.Status("k") == CacheLookupStatus::kHit);
  f.now += 1s;  // 60 s: stale
  CHECK(f.Status("k") == CacheLookupStatus::kStaleRefresh);
  CHECK(f.Status("k") == CacheLookupStatus::kStale);  // exactly one refresher
  CHECK(f.Status("k") == CacheLookupStatus::kStale);
  f.cache.Complete("k", f.Entry("v2"));
  CacheLookup h = f.cache.Lookup("k", nullptr);
  REQUIRE(h.status == CacheLookupStatus::kHit);
  CHECK(h.entry->messages == "v2");
  f.now += 75s;  // past stale_until of v2
  CHECK(f.Status("k") == CacheLookupStatus::kMissLeader);
  CHECK(f.cache.Stats().stale_hits == 3);
  CHECK(f.cache.Stats().expirations == 1);
}

TEST_CASE("a refresher that fails leaves the stale entry servable") {
  Fixture f;
  f.cache.Put("k", f.Entry("v"));
  f.now += 61s;
  CHECK(f.Status("k") == CacheLookupStatus::kStaleRefresh);
  f.cache.Abandon("k");
  CHECK(f.Status("k") == CacheLookupStatus::kStaleRefresh);
}

TEST_CASE("LRU eviction by bytes and by entries") {
  size_t cost = MemoryCache::Cost("k0", Fixture().Entry(std::string(100, 'x')));
  auto [limits, survivors] = GENERATE_COPY(table<MemoryCacheLimits, std::vector<std::string>>({
      {MemoryCacheLimits{3 * cost, 1 << 20, 100}, {"k0", "k2", "k3"}},
      {MemoryCacheLimits{1 << 20, 1 << 20, 3}, {"k0", "k2", "k3"}},
  }));
  Fixture f(limits);
  for (int i = 0; i < 3; ++i) f.cache.Put("k" + std::to_string(i), f.Entry(std::string(100, 'x')));
  CHECK(f.Status("k0") == CacheLookupStatus::kHit);  // k0 now most recent; k1 is LRU
  f.cache.Put("k3", f.Entry(std::string(100, 'x')));
  for (const std::string& k : survivors) CHECK(f.cache.Get(k) != nullptr);
  CHECK(f.cache.Get("k1") == nullptr);
  CHECK(f.cache.Stats().evictions == 1);
  CHECK(f.cache.Stats().entries == 3);
}

TEST_CASE("entries above max_entry_bytes are not stored but still reach followers") {
  Fixture f(MemoryCacheLimits{1 << 20, 200, 100});
  f.cache.Lookup("k", nullptr);
  std::shared_ptr<const CacheEntry> got;
  f.cache.Lookup("k", [&](std::shared_ptr<const CacheEntry> e) { got = e; });
  f.cache.Complete("k", f.Entry(std::string(500, 'x')));
  CHECK(got != nullptr);
  CHECK(f.cache.Get("k") == nullptr);
  CHECK(f.cache.Stats().rejected == 1);
  CHECK(f.cache.Stats().bytes == 0);
}

TEST_CASE("InvalidateTables removes entries that read any of the tables") {
  Fixture f;
  f.cache.Put("a", f.Entry("1", {"public.users"}));
  f.cache.Put("b", f.Entry("2", {"public.users", "public.orders"}));
  f.cache.Put("c", f.Entry("3", {"public.orders"}));
  f.cache.Put("d", f.Entry("4", {"public.users"}, "otherdb"));
  f.cache.Put("e", f.Entry("5", {}));
  f.cache.InvalidateTables("db", {"public.users"});
  CHECK(f.cache.Get("a") == nullptr);
  CHECK(f.cache.Get("b") == nullptr);
  CHECK(f.cache.Get("c") != nullptr);
  CHECK(f.cache.Get("d") != nullptr);
  CHECK(f.cache.Get("e") != nullptr);
  CHECK(f.cache.Stats().invalidations == 2);
  f.cache.InvalidateAll("db");
  CHECK(f.cache.Get("c") == nullptr);
  CHECK(f.cache.Get("e") == nullptr);
  CHECK(f.cache.Get("d") != nullptr);
  CHECK(f.cache.Stats().entries == 1);
}

TEST_CASE("table and database membership survives churn: invalidation removes exactly the readers") {
  // A reference model against the cache's groups under random puts,
  // evictions (a full tier), erases, repeated table names and
  // invalidations of tables and databases.
  Fixture f(MemoryCacheLimits{.max_bytes = 1 << 30, .max_entry_bytes = 1 << 20, .max_entries = 24});
  const std::vector<std::string> tables = {"public.a", "public.b", "public.c", "public.d"};
  const std::vector<std::string> dbs = {"db", "db2"};
  struct Model {
    std::string db;
    std::vector<std::string> tables;
  };
  std::map<std::string, Model> model;  // what should be stored (LRU order below)
  std::vector<std::string> lru;        // front: most recent
  std::mt19937 rng(GENERATE(1u, 2u, 3u, 4u, 5u));
  auto touch = [&](const std::string& k) {
    lru.erase(std::remove(lru.begin(), lru.end(), k), lru.end());
    lru.insert(lru.begin(), k);
  };
  auto drop = [&](const std::string& k) {
    model.erase(k);
    lru.erase(std::remove(lru.begin(), lru.end(), k), lru.end());
  };
  for (int step = 0; step < 3000; ++step) {
    const int op = static_cast<int>(rng() % 10);
    if (op < 6) {
      std::string k = "k" + std::to_string(rng() % 60);
      Model m{dbs[rng() % 2], {}};
      for (int n = static_cast<int>(rng() % 4); n > 0; --n) m.tables.push_back(tables[rng() % tables.size()]);
      f.cache.Put(k, f.Entry("v" + k, m.tables, m.db));
      model[k] = m;
      touch(k);
      while (model.size() > 24) drop(lru.back());
    } else if (op < 7) {
      std::string k = "k" + std::to_string(rng() % 60);
      f.cache.Erase(k);
      drop(k);
    } else if (op < 9) {
      const std::string db = dbs[rng() % 2];
      const std::string t = tables[rng() % tables.size()];
      f.cache.InvalidateTables(db, {t});
      std::vector<std::string> gone;
      for (const auto& [k, m] : model) {
        if (m.db == db && std::find(m.tables.begin(), m.tables.end(), t) != m.tables.end()) gone.push_back(k);
      }
      for (const std::string& k : gone) drop(k);
    } else {
      const std::string db = dbs[rng() % 2];
      f.cache.InvalidateAll(db);
      std::vector<std::string> gone;
      for (const auto& [k, m] : model) {
        if (m.db == db) gone.push_back(k);
      }
      for (const std::string& k : gone) drop(k);
    }
    REQUIRE(f.cache.Stats().entries == model.size());
  }
  for (int i = 0; i < 60; ++i) {
    const std::string k = "k" + std::to_string(i);
    CHECK((f.cache.Get(k) != nullptr) == (model.count(k) == 1));
  }
}

TEST_CASE("a fetch that overlapped an invalidation is not stored") {
  Fixture f;
  bool all = GENERATE(false, true);
  f.cache.Lookup("k", nullptr);
  if (all) {
    f.cache.InvalidateAll("db");
  } else {
    f.cache.InvalidateTables("db", {"public.users"});
  }
  f.cache.Complete("k", f.Entry("v", {"public.users"}));
  CHECK(f.cache.Get("k") == nullptr);
  // The next fetch, started after the write, is stored.
  f.cache.Lookup("k", nullptr);
  f.cache.Complete("k", f.Entry("v", {"public.users"}));
  CHECK(f.cache.Get("k") != nullptr);
}

TEST_CASE("an invalidation of other tables does not block storing") {
  Fixture f;
  f.cache.Lookup("k", nullptr);
  f.cache.InvalidateTables("db", {"public.orders"});
  f.cache.InvalidateTables("db2", {"public.users"});
  f.cache.Complete("k", f.Entry("v", {"public.users"}));
  CHECK(f.cache.Get("k") != nullptr);
}

TEST_CASE("Put replaces, Erase removes, accounting stays exact") {
  Fixture f;
  f.cache.Put("k", f.Entry("short", {"public.t"}));
  f.cache.Put("k", f.Entry("much longer value", {"public.t"}));
  CHECK(f.cache.Get("k")->messages == "much longer value");
  CHECK(f.cache.Stats().entries == 1);
  CHECK(f.cache.Stats().bytes == MemoryCache::Cost("k", f.Entry("much longer value", {"public.t"})));
  f.cache.Erase("k");
  CHECK(f.cache.Stats().entries == 0);
  CHECK(f.cache.Stats().bytes == 0);
  f.cache.InvalidateTables("db", {"public.t"});  // index must be clean
  CHECK(f.cache.Stats().invalidations == 1);
}

TEST_CASE("noop cache never stores") {
  std::unique_ptr<Cache> c = MakeNoopCache();
  CHECK(c->Lookup("k", nullptr).status == CacheLookupStatus::kMissLeader);
  c->Complete("k", CacheEntry{"v"});
  CHECK(c->Lookup("k", nullptr).status == CacheLookupStatus::kMissLeader);
  CHECK(c->Get("k") == nullptr);
}

TEST_CASE("MakeMemoryCache returns a working cache") {
  std::unique_ptr<Cache> c = MakeMemoryCache(MemoryCacheLimits{});
  c->Lookup("k", nullptr);
  CacheEntry e;
  e.messages = "v";
  e.expires = std::chrono::steady_clock::now() + 60s;
  e.stale_until = e.expires + 15s;
  c->Complete("k", std::move(e));
  CHECK(c->Lookup("k", nullptr).status == CacheLookupStatus::kHit);
}

TEST_CASE("an entry kept for stale-if-error misses but stays gettable until keep_until") {
  Fixture f;
  CacheEntry e = f.Entry("v", {"public.t"}, "db", 60s, 15s);
  e.keep_until = f.now + 60s + 300s;
  f.cache.Put("k", std::move(e));
  f.now += 100s;  // past stale_until, within keep_until
  CHECK(f.Status("k") == CacheLookupStatus::kMissLeader);
  REQUIRE(f.cache.Get("k") != nullptr);  // the miss did not remove it
  f.cache.Abandon("k");
  CHECK(f.cache.Get("k") != nullptr);
  f.now += 300s;  // past keep_until
  CHECK(f.cache.Get("k") == nullptr);
}

TEST_CASE("without keep_until an entry goes at stale_until") {
  Fixture f;
  f.cache.Put("k", f.Entry("v"));
  f.now += 100s;
  CHECK(f.Status("k") == CacheLookupStatus::kMissLeader);
  CHECK(f.cache.Get("k") == nullptr);
}

}  // namespace
}  // namespace hyperpool::cache
