// SmallFifo: a first-in first-out queue for the per-session queues (units
// awaiting their ReadyForQuery, expected answers, channel buffers) that
// allocates nothing until the first push.
//
// Why not std::deque: libstdc++'s deque allocates its map (64 bytes) and a
// 512-byte node when it is constructed, empty or not, and a session holds
// several of them, so an idle client paid for ~4 kB of empty queues
// (docs/performance.md, "Memory per idle client"). These queues hold a few
// entries at a time: a vector with a moving head does as well and costs
// 24 bytes + a size_t while empty.
//
// pop_front() advances the head; the storage is reused once the queue
// drains, and compacted when the dead prefix is at least half of it, so
// pops stay amortised O(1). Storage above kKeepCapacity entries is given
// back when the queue drains. References and iterators are invalidated by
// push_back, erase and clear (as for a vector); front() stays valid until
// the next push_back or pop_front.
#ifndef HYPERPOOL_COMMON_SMALL_FIFO_H_
#define HYPERPOOL_COMMON_SMALL_FIFO_H_

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace hyperpool {

template <typename T>
class SmallFifo {
 public:
  using value_type = T;
  using iterator = typename std::vector<T>::iterator;
  using const_iterator = typename std::vector<T>::const_iterator;

  // Entries kept allocated once the queue drains (a pipeline burst larger
  // than this is given back).
  static constexpr std::size_t kKeepCapacity = 64;

  bool empty() const { return head_ == items_.size(); }
  std::size_t size() const { return items_.size() - head_; }

  T& front() { return items_[head_]; }
  const T& front() const { return items_[head_]; }
  T& back() { return items_.back(); }
  const T& back() const { return items_.back(); }

  void push_back(const T& value) {
    Compact();
    items_.push_back(value);
  }
  void push_back(T&& value) {
    Compact();
    items_.push_back(std::move(value));
  }
  template <typename... Args>
  T& emplace_back(Args&&... args) {
    Compact();
    return items_.emplace_back(std::forward<Args>(args)...);
  }

  void pop_front() {
    // Release what the entry owns now, not at compaction (a type with no
    // default value, like an asio channel payload, is moved from by then).
    // Made again in place where that cannot throw: destroying and
    // default-constructing an entry of several strings costs a third of
    // move-assigning a temporary to it.
    if constexpr (std::is_nothrow_default_constructible_v<T>) {
      std::destroy_at(&items_[head_]);
      std::construct_at(&items_[head_]);
    } else if constexpr (std::is_default_constructible_v<T>) {
      items_[head_] = T();
    }
    ++head_;
    if (head_ == items_.size()) Drain();
  }

  void clear() { Drain(); }
  // An empty queue gives its storage back (an idle owner keeps none).
  void release() {
    if (!empty()) return;
    std::vector<T>().swap(items_);
    head_ = 0;
  }

  iterator begin() { return items_.begin() + static_cast<std::ptrdiff_t>(head_); }
  iterator end() { return items_.end(); }
  const_iterator begin() const { return items_.begin() + static_cast<std::ptrdiff_t>(head_); }
  const_iterator end() const { return items_.end(); }

  // Removes one live entry; returns the iterator to the entry after it.
  iterator erase(iterator it) {
    const std::ptrdiff_t offset = it - items_.begin();
    items_.erase(it);
    if (empty()) {
      Drain();
      return end();
    }
    return items_.begin() + offset;
  }

 private:
  void Drain() {
    if (items_.capacity() > kKeepCapacity) {
      std::vector<T>().swap(items_);
    } else {
      items_.clear();
    }
    head_ = 0;
  }

  // Before a push: drop the dead prefix once it is half the storage.
  void Compact() {
    if (head_ > 0 && head_ * 2 >= items_.size()) {
      items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }

  std::vector<T> items_;
  std::size_t head_ = 0;
};

}  // namespace hyperpool

#endif  // HYPERPOOL_COMMON_SMALL_FIFO_H_
