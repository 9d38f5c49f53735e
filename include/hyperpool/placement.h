#pragma once
// The Placement plug-in: which Endpoint a Client should use for an origin.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace hyperpool {

// Where an Endpoint can be reached ("in-process" for the one in this
// process, or host:port for a remote one).
struct EndpointAddress {
  std::string name;
  std::string address;
};

class Placement {
 public:
  virtual ~Placement() = default;
  // Picks the Endpoint for the origin identified by `origin_key`.
  virtual absl::StatusOr<EndpointAddress> Choose(const std::string& origin_key) = 0;
};

// Always answers with the one Endpoint it was given.
std::unique_ptr<Placement> MakeStaticPlacement(EndpointAddress endpoint);

}  // namespace hyperpool
