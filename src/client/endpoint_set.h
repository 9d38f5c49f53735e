#pragma once
// A Transport over several Endpoints for one origin (docs/architecture.md,
// "Many Endpoints: failover and re-placement"): the I/O around
// placement::EndpointRanking. One SocketTransport per Endpoint without links
// opened ahead (for probes and sessions that fail over), and one with links
// opened ahead for the Endpoint in use only; a prober re-measures every
// Endpoint each probe interval, and at once when a link cannot be opened.
// Open() tries the Endpoints in the ranking's order, so a new session fails
// only when none can be reached.

#include <memory>
#include <string>
#include <vector>

#include <asio/any_io_executor.hpp>

#include "absl/status/statusor.h"
#include "hyperpool/placement.h"
#include "hyperpool/transport.h"

namespace hyperpool::client {

// Creates the set and starts probing (on a strand of executors[0]). Fails on
// bad options (fewer than one Endpoint, a CA file that does not load). With
// options.first_round_wait, blocks the caller up to that long for the first
// probe round: call it from a thread that none of `executors` needs.
absl::StatusOr<std::unique_ptr<SocketTransport>> MakeEndpointSet(std::vector<asio::any_io_executor> executors,
                                                                 SocketTransportOptions link_options,
                                                                 FailoverOptions options);

}  // namespace hyperpool::client
