#pragma once
// The Cache plug-in: where query results are kept. The Client and the
// Endpoint each hold one (two tiers). Keys are opaque strings built by
// hyperpool (they include role, database and result-relevant settings);
// values are the backend messages of a result, stored as they came.

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace hyperpool {

struct CacheEntry {
  std::string messages;                           // RowDescription, DataRow..., CommandComplete
  std::chrono::steady_clock::time_point expires;  // fresh until then
  std::chrono::steady_clock::time_point stale_until;  // servable while revalidating until then
};

class Cache {
 public:
  virtual ~Cache() = default;
  // Returns the entry for `key`, if any (fresh or stale: the caller decides).
  virtual std::optional<CacheEntry> Get(const std::string& key) = 0;
  // Stores or replaces the entry for `key`.
  virtual void Put(const std::string& key, CacheEntry entry) = 0;
  // Removes the entry for `key`.
  virtual void Erase(const std::string& key) = 0;
};

// A cache that stores nothing: every Get misses.
std::unique_ptr<Cache> MakeNoopCache();

}  // namespace hyperpool
