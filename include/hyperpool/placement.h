#pragma once
// The Placement plug-in: which Endpoint a Client should use for an origin.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hyperpool/transport.h"

namespace hyperpool {

// Where an Endpoint can be reached ("in-process" for the one in this
// process, or host:port for a remote one).
struct EndpointAddress {
  std::string name;
  std::string address;
};

// One Endpoint as a Client measured it with a probe link
// (docs/architecture.md, "The link protocol", 7).
struct EndpointMeasurement {
  EndpointAddress endpoint;
  absl::Status status;                        // why it could not be measured
  std::chrono::microseconds client_rtt{0};    // Client <-> Endpoint: the probe's round trip
  std::chrono::microseconds origin_rtt{0};    // Endpoint <-> origin, as the Endpoint measured it
};

class Placement {
 public:
  virtual ~Placement() = default;
  // Picks the Endpoint for the origin identified by `origin_key`.
  virtual absl::StatusOr<EndpointAddress> Choose(const std::string& origin_key) = 0;
  // A Client's probe round (every Endpoint it knows, measured now), given
  // before its next Choose: a placement that keeps measuring (failover,
  // FailoverOptions::placement) decides from these. Default: ignored.
  virtual void Observe(const std::vector<EndpointMeasurement>& round) { (void)round; }
};

// Always answers with the one Endpoint it was given.
std::unique_ptr<Placement> MakeStaticPlacement(EndpointAddress endpoint);

// Opens a probe link to one Endpoint through `transport` and times it.
// Never throws; failures are in the result's status. With a positive
// `timeout`, an Endpoint that has not answered that long after the link
// opened fails with kDeadlineExceeded (its link is closed).
asio::awaitable<EndpointMeasurement> MeasureEndpoint(asio::any_io_executor executor, Transport& transport,
                                                     EndpointAddress endpoint,
                                                     std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

// Picks the measured Endpoint with the lowest
//   client_rtt + origin_weight * origin_rtt
// (a unit of work crosses the Client <-> Endpoint hop once but may need
// several origin round trips, and every new origin connection needs
// several more: being near the origin weighs more). Endpoints whose
// measurement failed are never chosen; Choose fails with kUnavailable
// (naming each failure) if none was measured. Ties keep the given order.
std::unique_ptr<Placement> MakeLatencyPlacement(std::vector<EndpointMeasurement> measurements,
                                                double origin_weight = 2.0);

// A Client given several Endpoints for one origin (docs/architecture.md,
// "Many Endpoints: failover and re-placement"): it ranks them by latency
// placement, re-measures every probe_interval and whenever a link cannot be
// opened, sends new sessions to the Endpoint in use and, when that one
// cannot be reached, to the next in the ranking. Links are opened ahead only
// for the Endpoint in use.
struct FailoverOptions {
  // Each Endpoint's link address; TLS settings, the secret and the link
  // options are those of the SocketTransportOptions given with them.
  std::vector<std::pair<std::string, std::uint16_t>> endpoints;
  // Rendezvous hashing of (region, address) orders the Endpoints until they
  // are measured, so every Client of a region agrees.
  std::string region;
  std::chrono::milliseconds probe_interval{10000};
  // Consecutive probe rounds a better Endpoint must stay healthy (and
  // better) before new sessions move to it (hysteresis).
  int settle_probes = 3;
  // At start, wait this long at most for the first probe round (so the
  // first sessions already go to the measured choice). 0: do not wait.
  std::chrono::milliseconds first_round_wait{0};
  // Placement decisions and health changes, one line each. Optional.
  std::function<void(const std::string&)> log;
  // The plug-in (optional): after each probe round it Observes the round
  // and Chooses (origin key: the region) the Endpoint new sessions go to,
  // in place of the built-in ranking's choice. An answer naming no known
  // Endpoint, an error, or an Endpoint found down is ignored for that round
  // (the ranking's choice stands); a link that cannot be opened still
  // moves new sessions to the next Endpoint at once, as without it.
  std::shared_ptr<Placement> placement;
};

}  // namespace hyperpool
