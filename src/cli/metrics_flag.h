#pragma once
// --metrics-listen HOST:PORT, shared by serve, endpoint and client: starts
// the /metrics + /healthz + /dashboard listener (src/ops/metrics_server.h)
// and logs its bound address as "metrics on http://HOST:PORT/metrics
// (dashboard: http://HOST:PORT/dashboard)" (port 0 picks one).

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ops/dashboard.h"
#include "ops/metrics.h"
#include "ops/metrics_server.h"

namespace hyperpool::cli {

// nullptr when `listen` is empty (the flag was not given). `extras` adds
// the dashboard's details to its JSON (called only for /dashboard.json).
absl::StatusOr<std::unique_ptr<ops::MetricsServer>> StartMetricsListener(
    const std::string& listen, std::function<ops::ProcessMetrics()> snapshot,
    const std::function<void(const std::string&)>& log, std::function<ops::DashboardExtras()> extras);

// The last few lines given to Add, oldest first (thread-safe): a Client's
// placement decisions and health changes, for the dashboard.
class RecentLines {
 public:
  explicit RecentLines(std::size_t capacity) : capacity_(capacity) {}
  void Add(std::string line);
  std::vector<std::string> Lines() const;

 private:
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::deque<std::string> lines_;
};

}  // namespace hyperpool::cli
