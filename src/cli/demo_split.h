// The seed's topology for `hyperpool demo`, in one process:
//
//   app ──▶ Client ──TLS link──▶ WAN simulator ──▶ LinkListener + Endpoint ──▶ origin
//   (beside the app)             (the long path)    (beside the origin)
//
// The same pieces as `hyperpool client` and `hyperpool endpoint` (a
// SocketTransport with links opened ahead, a LinkListener with a link secret),
// with a throwaway certificate, so the distance sits where Hyperdrive's does:
// between the two halves, not between the Endpoint and the database.
#ifndef HYPERPOOL_CLI_DEMO_SPLIT_H_
#define HYPERPOOL_CLI_DEMO_SPLIT_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cli/demo_pg_client.h"
#include "hyperpool/endpoint.h"

namespace hyperpool::cli::demo {

struct SplitOptions {
  PgLogin origin;                 // reached directly (no delay): the Endpoint is beside it
  std::chrono::microseconds rtt;  // between the Client and the Endpoint
  bool cache = true;              // both tiers
  std::string work_dir;           // for the certificate and key; must exist
};

class SplitPooler {
 public:
  // Starts the Endpoint (one thread), its listener, the WAN simulator in front
  // of it and the Client (two worker threads) with links opened ahead.
  static absl::StatusOr<std::unique_ptr<SplitPooler>> Start(const SplitOptions& options);
  ~SplitPooler();
  SplitPooler(const SplitPooler&) = delete;
  SplitPooler& operator=(const SplitPooler&) = delete;

  // What the app logs in to (the Client's local address).
  const PgLogin& login() const;
  EndpointStats endpoint_stats() const;
  // Stops the Client, the WAN simulator and the Endpoint. Idempotent.
  void Stop();

  struct Parts;

 private:
  explicit SplitPooler(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace hyperpool::cli::demo

#endif  // HYPERPOOL_CLI_DEMO_SPLIT_H_
