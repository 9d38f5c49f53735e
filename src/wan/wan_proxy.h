// A WAN simulator: a userspace TCP proxy that delays every byte by half a
// round-trip time in each direction. This machine has no netem (tc qdisc), so
// benchmarks, the demo and tests put a WanProxy between app, pooler and
// database to give them a realistic distance.
//
// Model (one accepted connection):
//   * The SYN cannot be delayed by a userspace proxy, so the client's connect()
//     returns at once; the proxy compensates by holding the new connection for
//     one full RTT (its "open time") before it connects to the target.
//   * Every chunk read in either direction is stamped on arrival and released
//     to the other side at  max(arrival, open time) + RTT/2.  Bytes the client
//     sends before the open time count as sent at the open time (a real client
//     could not have sent them earlier), so a request/response on a new
//     connection costs 2 RTT, and one on an established connection 1 RTT.
//   * Release times are absolute time points, so pipelined data gains no extra
//     delay beyond RTT/2 and timer slop does not accumulate; each direction is
//     a FIFO, so ordering is preserved.
//   * EOF (half-close) is delayed like data and propagated with shutdown(SHUT_WR)
//     after the data before it; read/write errors close the whole connection.
//   * At most `max_queued_bytes` are queued per direction; above that the proxy
//     stops reading (TCP flow control pushes back on the sender).
// Bandwidth and loss are not simulated.
#ifndef HYPERPOOL_WAN_WAN_PROXY_H_
#define HYPERPOOL_WAN_WAN_PROXY_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace asio {
class io_context;
}  // namespace asio

namespace hyperpool::wan {

// What a WanProxy listens on, where it forwards to and how far away that is.
struct WanOptions {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;  // 0: a free port; read it back with WanProxy::port().
  std::string target_host = "127.0.0.1";  // Resolved once, when the proxy starts.
  uint16_t target_port = 0;
  // Simulated round-trip time; zero passes data straight through (no hold either).
  std::chrono::microseconds rtt{0};
  // Per connection and direction: stop reading while more than this is queued.
  std::size_t max_queued_bytes = std::size_t{4} << 20;
};

// Counters for tests and the CLI; read while the proxy runs (relaxed atomics).
struct WanStats {
  uint64_t connections_accepted = 0;
  uint64_t connections_open = 0;
  uint64_t bytes_client_to_target = 0;  // Written to the target.
  uint64_t bytes_target_to_client = 0;  // Written to the client.
  // Largest number of bytes ever queued in one direction of one connection.
  std::size_t peak_queued_bytes = 0;
};

// The delay line. Every method is thread-safe.
class WanProxy {
 public:
  // Binds and listens now (so port() is known on return) and starts accepting
  // on `io`, which the caller runs (on one or more threads: each connection
  // runs on its own strand). `io` must outlive the proxy.
  static absl::StatusOr<std::unique_ptr<WanProxy>> Start(asio::io_context& io, WanOptions options);

  // As Start, but on an io_context and thread of its own; Stop() joins it.
  static absl::StatusOr<std::unique_ptr<WanProxy>> StartThread(WanOptions options);

  // Stops: see Stop().
  ~WanProxy();

  WanProxy(const WanProxy&) = delete;
  WanProxy& operator=(const WanProxy&) = delete;

  // The bound listening port and "host:port" address.
  uint16_t port() const;
  std::string listen_address() const;
  const WanOptions& options() const;

  WanStats stats() const;

  // Closes the listener and every relayed connection at once (queued data is
  // dropped). Idempotent. With StartThread, also waits for the thread to finish
  // (do not call it from a handler on that thread); with Start, connections
  // wind down on the caller's io_context.
  void Stop();

  class Impl;

 private:
  struct OwnThread;
  WanProxy(std::unique_ptr<OwnThread> own, std::shared_ptr<Impl> impl);

  std::unique_ptr<OwnThread> own_;  // Only with StartThread; outlives impl_.
  std::shared_ptr<Impl> impl_;
};

}  // namespace hyperpool::wan

#endif  // HYPERPOOL_WAN_WAN_PROXY_H_
