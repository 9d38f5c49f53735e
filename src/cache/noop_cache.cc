#include "hyperpool/cache.h"

namespace hyperpool {
namespace {

class NoopCache final : public Cache {
 public:
  std::optional<CacheEntry> Get(const std::string&) override { return std::nullopt; }
  void Put(const std::string&, CacheEntry) override {}
  void Erase(const std::string&) override {}
};

}  // namespace

std::unique_ptr<Cache> MakeNoopCache() { return std::make_unique<NoopCache>(); }

}  // namespace hyperpool
