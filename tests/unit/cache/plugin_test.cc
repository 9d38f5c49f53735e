// The Cache plug-in point (CacheOptions::factory) and the shared tier's
// pure parts (redis_store.h: the URL and the stored form of an entry).

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "cache/redis_store.h"
#include "client/client_cache.h"
#include "hyperpool/cache.h"
#include "hyperpool/options.h"
#include "support/recording_cache.h"

namespace hyperpool {
namespace {

using namespace std::chrono_literals;

TEST_CASE("the Client tier uses the Cache its options' factory makes") {
  auto log = std::make_shared<testing::RecordingCache::Log>();
  CacheOptions options;
  options.max_bytes = 12345;
  MemoryCacheLimits seen;
  options.factory = [log, &seen](const MemoryCacheLimits& limits) {
    seen = limits;
    return std::make_unique<testing::RecordingCache>(log, MakeMemoryCache(limits));
  };
  client::ClientTier tier(options);
  CHECK(seen.max_bytes == 12345);
  cache::StoreControl store;
  store.ttl = 10s;
  store.generation = 1;
  store.tables = {"public.t"};
  tier.Store("k", "messages", store, std::chrono::steady_clock::now());
  REQUIRE(tier.GetFresh("k") != nullptr);
  tier.Invalidate(cache::InvalidateControl{2, false, {"public.t"}});
  CHECK(tier.GetFresh("k") == nullptr);
  CHECK(log->Count("Put") == 1);
  CHECK(log->Count("Get") == 2);
  CHECK(log->Count("InvalidateTables") == 1);
}

TEST_CASE("without a factory the Client tier keeps a MemoryCache") {
  CacheOptions options;
  client::ClientTier tier(options);
  cache::StoreControl store;
  store.ttl = 10s;
  tier.Store("k", "m", store, std::chrono::steady_clock::now());
  CHECK(tier.GetFresh("k") != nullptr);
  CHECK(tier.Stats().tier.entries == 1);
}

TEST_CASE("redis URLs") {
  auto a = cache::ParseRedisUrl("redis://127.0.0.1:6380/2");
  REQUIRE(a.ok());
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 6380);
  CHECK(a->db == 2);
  auto b = cache::ParseRedisUrl("redis://cache.internal");
  REQUIRE(b.ok());
  CHECK(b->port == 6379);
  CHECK(b->db == 0);
  auto c = cache::ParseRedisUrl("redis://[::1]:7000");
  REQUIRE(c.ok());
  CHECK(c->host == "::1");
  CHECK(c->port == 7000);
  for (const char* bad : {"http://x:1", "redis://", "redis://h:0", "redis://h:70000", "redis://h:x",
                          "redis://u:p@h:1", "redis://h:1/x", "redis://[::1"}) {
    INFO(bad);
    CHECK(!cache::ParseRedisUrl(bad).ok());
  }
}

TEST_CASE("a shared entry round-trips with its generations, tables and times") {
  CacheEntry e;
  e.messages = std::string("T\0\0\0\4D\0", 7);
  e.database = "db";
  e.tables = {"public.a", "public.b"};
  const auto now = std::chrono::steady_clock::now();
  e.expires = now + 60s;
  e.stale_until = now + 75s;
  e.keep_until = now + 360s;
  std::string v = cache::EncodeSharedEntry(e, {3, 1, 4});
  auto d = cache::DecodeSharedEntry(v);
  REQUIRE(d);
  CHECK(d->generations == std::vector<uint64_t>{3, 1, 4});
  CHECK(d->entry.messages == e.messages);
  CHECK(d->entry.database == "db");
  CHECK(d->entry.tables == e.tables);
  // Wall-clock milliseconds on the way: within a few ms of the original.
  CHECK(std::chrono::abs(d->entry.expires - e.expires) < 50ms);
  CHECK(std::chrono::abs(d->entry.keep_until - e.keep_until) < 50ms);
}

TEST_CASE("a damaged shared entry is a miss, never a crash or a huge allocation") {
  CacheEntry e;
  e.messages = "abc";
  e.tables = {"public.t"};
  e.expires = e.stale_until = std::chrono::steady_clock::now() + 1s;
  std::string v = cache::EncodeSharedEntry(e, {1, 2});
  for (size_t n = 0; n < v.size(); ++n) CHECK(!cache::DecodeSharedEntry(v.substr(0, n)));
  CHECK(!cache::DecodeSharedEntry(v + "x"));
  std::string huge = v;
  huge[1 + 24] = '\xff';  // the generation count's low byte
  huge[1 + 24 + 7] = '\x7f';  // ... and its high byte: claims ~2^63 generations
  CHECK(!cache::DecodeSharedEntry(huge));
  std::string other_version = v;
  other_version[0] = 9;
  CHECK(!cache::DecodeSharedEntry(other_version));
}

}  // namespace
}  // namespace hyperpool
