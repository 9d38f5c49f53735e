#include "hyperpool/cache.h"

namespace hyperpool {
namespace {

class NoopCache final : public Cache {
 public:
  CacheLookup Lookup(const std::string&, CacheWaiter) override {
    ++stats_.misses;
    return CacheLookup{CacheLookupStatus::kMissLeader, nullptr, 0};
  }
  void Complete(const std::string&, CacheEntry) override {}
  void Abandon(const std::string&) override {}
  void CancelWait(const std::string&, uint64_t) override {}
  std::shared_ptr<const CacheEntry> Get(const std::string&) override { return nullptr; }
  void Put(const std::string&, CacheEntry) override {}
  void Erase(const std::string&) override {}
  void InvalidateTables(std::string_view, const std::vector<std::string>&) override {}
  void InvalidateAll(std::string_view) override {}
  CacheStats Stats() const override { return stats_; }

 private:
  CacheStats stats_;
};

}  // namespace

std::unique_ptr<Cache> MakeNoopCache() { return std::make_unique<NoopCache>(); }

}  // namespace hyperpool
