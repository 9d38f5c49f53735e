#pragma once
// A Cache that records every call and forwards it to another Cache: the
// recording double of the plug-in interface (hyperpool/cache.h), for tests
// that check a tier really uses the Cache its options give it.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "hyperpool/cache.h"

namespace hyperpool::testing {

class RecordingCache final : public Cache {
 public:
  // Shared with the test (the tier owns the cache). Thread-safe.
  struct Log {
    std::mutex mu;
    std::vector<std::string> calls;  // "Lookup", "Complete", ...
    void Add(std::string call) {
      std::lock_guard lock(mu);
      calls.push_back(std::move(call));
    }
    size_t Count(std::string_view call) {
      std::lock_guard lock(mu);
      return static_cast<size_t>(std::count(calls.begin(), calls.end(), call));
    }
  };

  RecordingCache(std::shared_ptr<Log> log, std::unique_ptr<Cache> inner)
      : log_(std::move(log)), inner_(std::move(inner)) {}

  CacheLookup Lookup(const std::string& key, CacheWaiter on_ready) override {
    log_->Add("Lookup");
    return inner_->Lookup(key, std::move(on_ready));
  }
  void Complete(const std::string& key, CacheEntry entry) override {
    log_->Add("Complete");
    inner_->Complete(key, std::move(entry));
  }
  void Abandon(const std::string& key) override {
    log_->Add("Abandon");
    inner_->Abandon(key);
  }
  void CancelWait(const std::string& key, uint64_t wait_id) override {
    log_->Add("CancelWait");
    inner_->CancelWait(key, wait_id);
  }
  std::shared_ptr<const CacheEntry> Get(const std::string& key) override {
    log_->Add("Get");
    return inner_->Get(key);
  }
  void Put(const std::string& key, CacheEntry entry) override {
    log_->Add("Put");
    inner_->Put(key, std::move(entry));
  }
  void Erase(const std::string& key) override {
    log_->Add("Erase");
    inner_->Erase(key);
  }
  void InvalidateTables(std::string_view database, const std::vector<std::string>& tables) override {
    log_->Add("InvalidateTables");
    inner_->InvalidateTables(database, tables);
  }
  void InvalidateAll(std::string_view database) override {
    log_->Add("InvalidateAll");
    inner_->InvalidateAll(database);
  }
  CacheStats Stats() const override { return inner_->Stats(); }

 private:
  std::shared_ptr<Log> log_;
  std::unique_ptr<Cache> inner_;
};

}  // namespace hyperpool::testing
