#pragma once
// What `hyperpool serve|endpoint|client` expose on /metrics: the stats
// snapshots of the halves running in the process, written in the Prometheus
// text format (docs/architecture.md, "Operations", lists every metric).

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hyperpool/client.h"
#include "hyperpool/endpoint.h"

namespace hyperpool::ops {

struct ProcessMetrics {
  std::optional<EndpointStats> endpoint;  // set when an Endpoint runs here
  std::size_t pool_max = 0;               // its pool's max_size
  std::optional<ClientStats> client;      // set when a Client runs here
  // With several databases in one process ([databases]): each database's
  // Endpoint. Pool, session, transaction and pin families then have one
  // sample per database (label `database`) instead of `endpoint`'s alone;
  // the cache families stay `endpoint`'s.
  std::vector<std::pair<std::string, EndpointStats>> databases;
  bool draining = false;
};

std::string RenderMetrics(const ProcessMetrics& metrics);

}  // namespace hyperpool::ops
