#include "cli/metrics_flag.h"

#include <fmt/format.h>

#include "cli/cli_options.h"

namespace hyperpool::cli {

absl::StatusOr<std::unique_ptr<ops::MetricsServer>> StartMetricsListener(
    const std::string& listen, std::function<ops::ProcessMetrics()> snapshot,
    const std::function<void(const std::string&)>& log, std::function<ops::DashboardExtras()> extras) {
  if (listen.empty()) return nullptr;
  ops::MetricsServerOptions options;
  if (!ParseHostPort(listen, options.host, options.port)) {
    return absl::InvalidArgumentError("--metrics-listen needs HOST:PORT");
  }
  auto server = ops::MetricsServer::Start(
      std::move(options), [snapshot] { return ops::RenderMetrics(snapshot()); },
      [snapshot, extras = std::move(extras)] {
        return ops::RenderDashboardJson(snapshot(), extras ? extras() : ops::DashboardExtras{});
      });
  if (server.ok()) {
    log(fmt::format("metrics on http://{0}/metrics (dashboard: http://{0}/dashboard)", (*server)->address()));
  }
  return server;
}

void RecentLines::Add(std::string line) {
  std::lock_guard lock(mu_);
  lines_.push_back(std::move(line));
  while (lines_.size() > capacity_) lines_.pop_front();
}

std::vector<std::string> RecentLines::Lines() const {
  std::lock_guard lock(mu_);
  return {lines_.begin(), lines_.end()};
}

}  // namespace hyperpool::cli
