// InternTable: values kept once however many holders share them (the
// startup settings and fingerprints that many sessions of one app have
// alike), by a key that says what they hold. Holders keep shared_ptrs; the
// table keeps weak ones, and prunes the entries no holder has any more as
// it grows. Not thread-safe: confined to its owner's executor.
#ifndef HYPERPOOL_COMMON_INTERN_TABLE_H_
#define HYPERPOOL_COMMON_INTERN_TABLE_H_

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

namespace hyperpool {

template <typename T>
class InternTable {
 public:
  // The value kept under `key` while some holder still has it; else
  // `make()`'s, kept under `key` from now on.
  template <typename Make>
  std::shared_ptr<const T> Intern(const std::string& key, Make&& make) {
    std::weak_ptr<const T>& entry = by_key_[key];
    if (std::shared_ptr<const T> shared = entry.lock()) return shared;
    auto shared = std::make_shared<const T>(std::forward<Make>(make)());
    entry = shared;
    if (by_key_.size() >= prune_at_) Prune();
    return shared;
  }
  std::size_t size() const { return by_key_.size(); }

 private:
  void Prune() {
    for (auto it = by_key_.begin(); it != by_key_.end();) {
      it = it->second.expired() ? by_key_.erase(it) : std::next(it);
    }
    prune_at_ = std::max<std::size_t>(64, 2 * by_key_.size());
  }

  std::unordered_map<std::string, std::weak_ptr<const T>> by_key_;
  std::size_t prune_at_ = 64;
};

}  // namespace hyperpool

#endif  // HYPERPOOL_COMMON_INTERN_TABLE_H_
