// Latency-measured placement: probe each candidate Endpoint once (its own
// round trip and the origin round trip it reports), then choose by cost.

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <asio/steady_timer.hpp>
#include <fmt/format.h>

#include "hyperpool/placement.h"
#include "placement/probe.h"
#include "protocol/codec.h"

namespace hyperpool {
namespace {

class LatencyPlacement final : public Placement {
 public:
  LatencyPlacement(std::vector<EndpointMeasurement> measurements, double origin_weight)
      : measurements_(std::move(measurements)), origin_weight_(origin_weight) {}

  absl::StatusOr<EndpointAddress> Choose(const std::string&) override {
    const EndpointMeasurement* best = nullptr;
    double best_cost = 0;
    std::string failures;
    for (const EndpointMeasurement& m : measurements_) {
      if (!m.status.ok()) {
        failures += fmt::format("{}{} ({}): {}", failures.empty() ? "" : "; ", m.endpoint.name, m.endpoint.address,
                                std::string(m.status.message()));
        continue;
      }
      const double cost = static_cast<double>(m.client_rtt.count()) +
                          origin_weight_ * static_cast<double>(m.origin_rtt.count());
      if (best == nullptr || cost < best_cost) {
        best = &m;
        best_cost = cost;
      }
    }
    if (best == nullptr) {
      return absl::UnavailableError(measurements_.empty() ? std::string("no Endpoint to choose from")
                                                          : "no Endpoint could be measured: " + failures);
    }
    return best->endpoint;
  }

 private:
  std::vector<EndpointMeasurement> measurements_;
  double origin_weight_;
};

}  // namespace

asio::awaitable<EndpointMeasurement> MeasureEndpoint(asio::any_io_executor executor, Transport& transport,
                                                     EndpointAddress endpoint, std::chrono::milliseconds timeout) {
  EndpointMeasurement m;
  m.endpoint = std::move(endpoint);
  // Opened without initial bytes, so the timed part is one round trip over
  // an established link (connection set-up is the transport's business).
  auto link = co_await transport.Open(executor, std::string());
  if (!link.ok()) {
    m.status = link.status();
    co_return m;
  }
  // An Endpoint that accepted the link but does not answer (stopped, its
  // origin pool wedged) must not stall the caller's probe rounds: closing
  // the link fails the pending Receive.
  auto timed_out = std::make_shared<bool>(false);
  asio::steady_timer watchdog(executor);
  if (timeout.count() > 0) {
    watchdog.expires_after(timeout);
    watchdog.async_wait([l = link->get(), timed_out](const asio::error_code& ec) {
      if (ec) return;  // cancelled: the probe finished first (the link may be gone)
      *timed_out = true;
      l->Close();
    });
  }
  const auto start = std::chrono::steady_clock::now();
  absl::Status sent = co_await (*link)->Send(placement::BuildProbeHello());
  if (!sent.ok()) {
    m.status = sent;
    (*link)->Close();
    co_return m;
  }
  std::string buffer;
  placement::ProbeAnswer answer;
  for (;;) {
    absl::StatusOr<bool> done = placement::ParseProbeAnswer(buffer, answer);
    if (!done.ok()) {
      m.status = done.status();
      break;
    }
    if (*done) {
      m.client_rtt = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
      m.origin_rtt = answer.origin_rtt;
      break;
    }
    auto n = co_await (*link)->Receive(buffer);
    if (!n.ok()) {
      m.status = *timed_out ? absl::DeadlineExceededError(fmt::format("the Endpoint did not answer the probe within "
                                                                      "{} ms", timeout.count()))
                            : absl::UnavailableError("the Endpoint closed the probe link without an answer");
      break;
    }
  }
  watchdog.cancel();
  (*link)->Close();
  co_return m;
}

std::unique_ptr<Placement> MakeLatencyPlacement(std::vector<EndpointMeasurement> measurements,
                                                double origin_weight) {
  return std::make_unique<LatencyPlacement>(std::move(measurements), origin_weight);
}

}  // namespace hyperpool
