#pragma once
// A fixed-bucket latency histogram of relaxed atomics: Observe() is a few
// uncontended adds (no lock, no allocation), cheap enough to call at the end
// of every unit of work; Snapshot() may run on any thread. A snapshot taken
// while observations land can be off by the ones in flight (count and
// buckets are read separately), which a scrape tolerates.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "hyperpool/histogram.h"

namespace hyperpool::ops {

class LatencyHistogram {
 public:
  void Observe(std::chrono::microseconds elapsed) {
    const std::uint64_t us = elapsed.count() < 0 ? 0 : static_cast<std::uint64_t>(elapsed.count());
    // First bound >= us (buckets are "less than or equal", as Prometheus' le).
    const auto it = std::lower_bound(kLatencyBucketBoundsUs.begin(), kLatencyBucketBoundsUs.end(), us);
    counts_[static_cast<std::size_t>(it - kLatencyBucketBoundsUs.begin())].fetch_add(1, std::memory_order_relaxed);
    sum_us_.fetch_add(us, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
  }

  LatencyHistogramSnapshot Snapshot() const {
    LatencyHistogramSnapshot s;
    for (std::size_t i = 0; i < counts_.size(); ++i) s.counts[i] = counts_[i].load(std::memory_order_relaxed);
    s.sum_us = sum_us_.load(std::memory_order_relaxed);
    s.count = count_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  std::array<std::atomic<std::uint64_t>, kLatencyBucketBoundsUs.size() + 1> counts_{};
  std::atomic<std::uint64_t> sum_us_{0};
  std::atomic<std::uint64_t> count_{0};
};

}  // namespace hyperpool::ops
