#pragma once
// The Endpoint half: runs near the origin database, logs in to it, lends
// pooled origin connections per transaction to the sessions that Clients
// open over a Transport.

#include <cstddef>
#include <memory>

#include <asio/any_io_executor.hpp>

#include "absl/status/statusor.h"
#include "hyperpool/options.h"
#include "hyperpool/transport.h"

namespace hyperpool {

struct EndpointStats {
  std::size_t sessions = 0;          // links currently open
  std::size_t origin_open = 0;       // origin connections open (idle + lent + opening)
  std::size_t origin_idle = 0;       // idle in the pool
  std::size_t waiting = 0;           // transactions waiting for a connection
  std::size_t transactions = 0;      // units of work completed
  std::size_t acquire_timeouts = 0;  // waits that ended in 53300
  std::size_t discarded = 0;         // connections closed instead of returned
};

class Endpoint : public LinkAcceptor {
 public:
  // Validates `options` (the origin string must parse) and creates an
  // Endpoint whose sessions and pool run on `executor`. Opens no connection
  // yet (min_idle connections are opened in the background).
  static absl::StatusOr<std::unique_ptr<Endpoint>> Create(asio::any_io_executor executor,
                                                          EndpointOptions options);
  ~Endpoint() override;

  // Takes a link opened by a Client; its session runs on the Endpoint's executor.
  void Accept(std::unique_ptr<Link> link) override;

  // Stops: closes all links and origin connections. Safe to call from any
  // thread; returns once nothing of the Endpoint runs any more.
  void Stop();

  // A snapshot of the counters (thread-safe).
  EndpointStats Stats() const;

  struct Impl;

 private:
  explicit Endpoint(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace hyperpool
