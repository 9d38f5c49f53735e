#pragma once
// A latency histogram as a value (a snapshot), with fixed bucket bounds so
// that every hyperpool process exposes comparable Prometheus histograms.

#include <array>
#include <cstddef>
#include <cstdint>

namespace hyperpool {

// Upper bounds of the latency buckets, in microseconds (100 µs to 30 s,
// roughly 1-2.5-5 per decade). Observations above the last go to +Inf.
inline constexpr std::array<std::uint64_t, 18> kLatencyBucketBoundsUs = {
    100,    250,     500,     1000,    2500,    5000,     10000,    25000,    50000,
    100000, 250000,  500000,  1000000, 2500000, 5000000, 10000000, 15000000, 30000000};

struct LatencyHistogramSnapshot {
  // counts[i]: observations in (bound[i-1], bound[i]] (not cumulative);
  // the last element counts those above every bound.
  std::array<std::uint64_t, kLatencyBucketBoundsUs.size() + 1> counts{};
  std::uint64_t sum_us = 0;  // sum of all observations
  std::uint64_t count = 0;   // number of observations
};

}  // namespace hyperpool
