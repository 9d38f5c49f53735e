#pragma once
// The HTTP listener for /metrics (Prometheus text format), /healthz
// (200 "ok" while running, 503 "draining" once SetDraining(true)) and the
// read-only live dashboard (/dashboard, its /dashboard.js and
// /dashboard.css compiled in, and /dashboard.json; ops/dashboard.h). It runs
// on a thread and io_context of its own, so a scrape never waits behind
// pooled traffic and /healthz still answers while the process drains. One
// request per connection; the request head is bounded
// (kMaxRequestHeadBytes) and must arrive within the read timeout.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ops/http_request.h"

namespace hyperpool::ops {

struct MetricsServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: a free port
  std::chrono::milliseconds read_timeout{5000};
  // Connections served at once; more are closed on accept (a scraper makes one).
  std::size_t max_connections = 32;
};

// The whole HTTP/1.1 response to `head` (status line, headers, body, and
// "Connection: close"); `render` is called only for GET/HEAD /metrics,
// `dashboard_json` only for /dashboard.json. Without `dashboard_json` the
// dashboard's paths are 404.
std::string BuildResponse(const HttpRequestHead& head, bool draining, const std::function<std::string()>& render,
                          const std::function<std::string()>& dashboard_json = {});

class MetricsServer {
 public:
  // Binds and starts serving; `render` produces the /metrics body and
  // `dashboard_json` the dashboard's (none: no dashboard); both are called
  // on the server's thread (they must be thread-safe against the rest of
  // the process, as the Stats() snapshots are).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(MetricsServerOptions options,
                                                              std::function<std::string()> render,
                                                              std::function<std::string()> dashboard_json = {});
  ~MetricsServer();  // Stop()

  // The bound address, HOST:PORT (IPv6 bracketed).
  std::string address() const;
  std::uint16_t port() const;

  // From now on /healthz answers 503: load balancers stop sending new work.
  void SetDraining(bool draining);

  // Closes the listener and open connections and joins the thread. Idempotent.
  void Stop();

  struct Impl;

 private:
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hyperpool::ops
