#include "client/client_cache.h"

#include <algorithm>
#include <chrono>

namespace hyperpool::client {

namespace {
MemoryCacheLimits LimitsOf(const CacheOptions& o) {
  MemoryCacheLimits l;
  l.max_bytes = o.max_bytes;
  l.max_entry_bytes = o.max_entry_bytes;
  return l;
}
}  // namespace

ClientTier::ClientTier(const CacheOptions& options, bool watched)
    : options_(options),
      watched_(watched),
      tier_(options.factory ? options.factory(LimitsOf(options)) : MakeMemoryCache(LimitsOf(options))) {
  if (!tier_) tier_ = MakeMemoryCache(LimitsOf(options));  // a factory that made nothing
}

std::shared_ptr<const CacheEntry> ClientTier::GetFresh(const std::string& key) {
  std::lock_guard lock(mu_);
  if (watched_ && !subscribed_) return nullptr;
  std::shared_ptr<const CacheEntry> e = tier_->Get(key);
  if (!e || std::chrono::steady_clock::now() >= e->expires) return nullptr;
  ++stats_.local_hits;
  return e;
}

void ClientTier::Store(const std::string& key, std::string messages, cache::StoreControl control,
                       std::chrono::steady_clock::time_point sent) {
  if (control.ttl <= std::chrono::milliseconds(0)) return;
  const auto expires = sent + control.ttl;
  if (std::chrono::steady_clock::now() >= expires) return;  // spent in flight
  std::lock_guard lock(mu_);
  if (watched_ && (!subscribed_ || control.source != source_ || control.generation < subscribed_generation_)) {
    ++stats_.refused_unwatched;
    return;
  }
  bool stale = all_generation_ > control.generation;
  for (const std::string& t : control.tables) {
    auto it = table_generation_.find(t);
    if (it != table_generation_.end() && it->second > control.generation) stale = true;
  }
  if (stale) {
    ++stats_.refused_stale;
    return;
  }
  CacheEntry entry;
  entry.messages = std::move(messages);
  entry.expires = expires;
  entry.stale_until = entry.expires;
  entry.tables = std::move(control.tables);
  tier_->Put(key, std::move(entry));
}

void ClientTier::Invalidate(const cache::InvalidateControl& control) {
  std::lock_guard lock(mu_);
  ++stats_.invalidations;
  if (watched_ && (!subscribed_ || control.source != source_)) {
    // Another Endpoint's generations (a session still on the one the watch
    // left) do not compare with ours: drop the entries, remember nothing.
    if (control.all) {
      tier_->InvalidateAll("");
    } else {
      tier_->InvalidateTables("", control.tables);
    }
    return;
  }
  max_generation_ = std::max(max_generation_, control.generation);
  if (control.all) {
    all_generation_ = std::max(all_generation_, control.generation);
    tier_->InvalidateAll("");
    return;
  }
  for (const std::string& t : control.tables) {
    uint64_t& g = table_generation_[t];
    g = std::max(g, control.generation);
  }
  if (table_generation_.size() > kMaxTrackedTables) {
    table_generation_.clear();
    all_generation_ = max_generation_;
  }
  tier_->InvalidateTables("", control.tables);
}

void ClientTier::ResetLocked() {
  tier_->InvalidateAll("");
  table_generation_.clear();
  all_generation_ = 0;
  max_generation_ = 0;
}

void ClientTier::Subscribe(uint64_t source, uint64_t generation) {
  std::lock_guard lock(mu_);
  ResetLocked();
  subscribed_ = true;
  source_ = source;
  subscribed_generation_ = generation;
  max_generation_ = generation;
  ++stats_.subscriptions;
}

void ClientTier::Unsubscribe() {
  std::lock_guard lock(mu_);
  ResetLocked();
  subscribed_ = false;
}

ClientTierStats ClientTier::Stats() {
  std::lock_guard lock(mu_);
  ClientTierStats s = stats_;
  s.subscribed = subscribed_;
  s.tier = tier_->Stats();
  return s;
}

}  // namespace hyperpool::client
