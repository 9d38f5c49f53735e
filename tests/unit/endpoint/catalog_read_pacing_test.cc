// CatalogReadPacing (endpoint_cache.h): reads that keep ending with the
// catalog unknown are spaced out instead of looping.
#include <chrono>

#include <catch2/catch_test_macros.hpp>

#include "endpoint/endpoint_cache.h"

namespace hyperpool::endpoint {
namespace {

using std::chrono::milliseconds;

TEST_CASE("catalog read pacing: one re-read at once, then backs off to a second, reset by a known read",
          "[endpoint][cache]") {
  CatalogReadPacing pacing;
  const auto t0 = CatalogReadPacing::Clock::now();
  CHECK(pacing.Allowed(t0, t0));

  // A change settled while the read ran: the next read goes at once.
  pacing.Loaded(/*still_unknown=*/true);
  CHECK(pacing.Allowed(t0, t0));

  // It too ended unknown: now reads are spaced, 50 ms doubling up to 1 s.
  pacing.Loaded(true);
  CHECK_FALSE(pacing.Allowed(t0, t0));
  CHECK_FALSE(pacing.Allowed(t0 + milliseconds(49), t0));
  CHECK(pacing.Allowed(t0 + milliseconds(50), t0));
  pacing.Loaded(true);
  CHECK_FALSE(pacing.Allowed(t0 + milliseconds(99), t0));
  CHECK(pacing.Allowed(t0 + milliseconds(100), t0));
  for (int i = 0; i < 20; ++i) pacing.Loaded(true);
  CHECK(pacing.Gap() == milliseconds(1000));
  CHECK_FALSE(pacing.Allowed(t0 + milliseconds(999), t0));
  CHECK(pacing.Allowed(t0 + milliseconds(1000), t0));

  // A read that found the catalog known ends the backoff.
  pacing.Loaded(false);
  CHECK(pacing.unknown_loads() == 0);
  CHECK(pacing.Allowed(t0, t0));
}

// An endless leak (every read ends unknown) costs about one read a second.
TEST_CASE("catalog read pacing: a read loop is bounded", "[endpoint][cache]") {
  CatalogReadPacing pacing;
  auto now = CatalogReadPacing::Clock::now();
  const auto start = now;
  auto loaded = now;
  int reads = 0;
  // Simulate: read whenever allowed, each read taking 5 ms, for 10 s.
  while (now - start < std::chrono::seconds(10)) {
    if (pacing.Allowed(now, loaded)) {
      ++reads;
      now += milliseconds(5);
      pacing.Loaded(true);
      loaded = now;
    } else {
      now += milliseconds(1);
    }
  }
  CHECK(reads <= 20);
  CHECK(reads >= 8);
}

}  // namespace
}  // namespace hyperpool::endpoint
