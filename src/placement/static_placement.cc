#include "hyperpool/placement.h"

#include <utility>

namespace hyperpool {
namespace {

class StaticPlacement final : public Placement {
 public:
  explicit StaticPlacement(EndpointAddress endpoint) : endpoint_(std::move(endpoint)) {}
  absl::StatusOr<EndpointAddress> Choose(const std::string&) override { return endpoint_; }

 private:
  EndpointAddress endpoint_;
};

}  // namespace

std::unique_ptr<Placement> MakeStaticPlacement(EndpointAddress endpoint) {
  return std::make_unique<StaticPlacement>(std::move(endpoint));
}

}  // namespace hyperpool
