#pragma once
// --metrics-listen HOST:PORT, shared by serve, endpoint and client: starts
// the /metrics + /healthz listener (src/ops/metrics_server.h) and logs its
// bound address as "metrics on http://HOST:PORT/metrics" (port 0 picks one).

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ops/metrics.h"
#include "ops/metrics_server.h"

namespace hyperpool::cli {

// nullptr when `listen` is empty (the flag was not given).
absl::StatusOr<std::unique_ptr<ops::MetricsServer>> StartMetricsListener(
    const std::string& listen, std::function<ops::ProcessMetrics()> snapshot,
    const std::function<void(const std::string&)>& log);

}  // namespace hyperpool::cli
