#pragma once
// The Client half: runs beside the application and impersonates a
// PostgreSQL server on a local address. It answers the handshake locally,
// tracks transaction state and forwards work to an Endpoint over a Transport.

#include <memory>
#include <string>
#include <vector>

#include <asio/any_io_executor.hpp>

#include "absl/status/statusor.h"
#include "hyperpool/options.h"
#include "hyperpool/transport.h"

namespace hyperpool {

class Client {
 public:
  // Binds the listening socket (so connection_string() is valid on return)
  // and starts accepting on `executors[0]`; sessions are spread over all
  // `executors` (one per worker thread). `transport` must outlive the Client.
  static absl::StatusOr<std::unique_ptr<Client>> Create(std::vector<asio::any_io_executor> executors,
                                                        Transport& transport, ClientOptions options);
  ~Client();

  // A postgresql:// URI (host, port, user, password, database, sslmode=disable)
  // that libpq, psql and other drivers accept.
  const std::string& connection_string() const;

  // Stops accepting and closes every session. Safe to call from any thread.
  void Stop();

  // The Client cache tier's counters as a text line (thread-safe).
  std::string CacheReport() const;

  struct Impl;

 private:
  explicit Client(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace hyperpool
