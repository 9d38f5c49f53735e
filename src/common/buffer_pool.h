#pragma once
// Spare byte buffers of the sessions on one executor (docs/architecture.md,
// "What an idle session holds"). An idle session gives the buffers that
// carried its last unit back here (Give) instead of keeping their capacity;
// the next unit of any session takes one (Take) instead of allocating and
// growing a fresh one. So an idle session holds no reserved capacity, and a
// busy one allocates no buffer per transaction. One per Endpoint (its
// sessions' link, origin and outbox buffers) and one per Client executor
// that runs one handler at a time (the app read buffers: Client::Impl::
// IdleSweep::buffers).
//
// Confined to one executor, like the sessions that use it.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace hyperpool {

class BufferPool {
 public:
  // Buffers kept for reuse at most (about as many as units in flight).
  static constexpr std::size_t kMaxSpares = 256;
  // A buffer larger than this (one large message) is freed, not kept.
  static constexpr std::size_t kMaxSpareCapacity = 16 * 1024;

  // `buffer`, if empty, gives its storage back: kept as a spare, or freed
  // when the pool is full or the buffer large. A non-empty one is left.
  void Give(std::string& buffer) {
    if (!buffer.empty() || buffer.capacity() <= Inline()) return;
    if (spares_.size() < kMaxSpares && buffer.capacity() <= kMaxSpareCapacity) {
      spares_.emplace_back().swap(buffer);  // (`buffer` is left an empty inline string)
    } else {
      std::string().swap(buffer);
    }
  }

  // An empty `buffer` without storage of its own gets a spare, if any.
  void Take(std::string& buffer) {
    if (!buffer.empty() || buffer.capacity() > Inline() || spares_.empty()) return;
    buffer.swap(spares_.back());
    spares_.pop_back();
  }

  std::size_t spares() const { return spares_.size(); }

 private:
  // What a std::string holds without allocating (its small-string buffer).
  static std::size_t Inline() { return std::string().capacity(); }

  std::vector<std::string> spares_;
};

}  // namespace hyperpool
