#pragma once
// For the integration tests that drive Endpoint sessions over in-process
// links (endpoint_test_util.h) against the fixture's real PostgreSQL: the
// admin origin string and an Endpoint on it, one definition for all of them.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include "hyperpool/endpoint.h"
#include "support/pg_fixture.h"
#include "unit/endpoint/endpoint_test_util.h"

namespace hyperpool::testing {

// The fixture's superuser, tagged with `app` (application_name) so a test
// can find its own origin backends in pg_stat_activity.
inline std::string Origin(const PgCluster& pg, std::string_view app) {
  return fmt::format("postgresql://{}:{}@{}:{}/{}?sslmode=disable&application_name={}", pg.admin.user,
                     pg.admin.password, pg.host, pg.port, pg.database, app);
}

// An Endpoint on `io` with a pool of `size`; `tweak` adjusts other options.
inline std::unique_ptr<Endpoint> MakeEndpointWith(IoThread& io, std::string origin, std::size_t size,
                                                  std::chrono::milliseconds acquire_timeout,
                                                  const std::function<void(EndpointOptions&)>& tweak = {}) {
  EndpointOptions options;
  options.origin = std::move(origin);
  options.pool.max_size = size;
  options.pool.acquire_timeout = acquire_timeout;
  if (tweak) tweak(options);
  auto ep = Endpoint::Create(io.executor(), options);
  REQUIRE(ep.ok());
  return std::move(*ep);
}

}  // namespace hyperpool::testing
