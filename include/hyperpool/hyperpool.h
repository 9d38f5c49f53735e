#pragma once
// hyperpool: make a far-away PostgreSQL database feel local.
//
//   hyperpool::ConnectOptions options;
//   options.endpoint.origin = "postgresql://app:secret@db.example.com/app?sslmode=verify-full";
//   auto handle = hyperpool::connect(std::move(options));
//   if (!handle.ok()) ...;
//   std::string url = (*handle)->connection_string();  // hand this to any driver

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <asio/io_context.hpp>

#include "absl/status/statusor.h"
#include "hyperpool/client.h"
#include "hyperpool/endpoint.h"
#include "hyperpool/options.h"
#include "hyperpool/placement.h"

namespace hyperpool {

struct ConnectOptions {
  EndpointOptions endpoint;
  ClientOptions client;
  // When set, everything runs on this io_context, which the host runs, from
  // one thread or several (hyperpool then keeps each session and the
  // Endpoint on a strand); it must outlive the handle. Otherwise hyperpool
  // starts `threads` worker threads, each with its own io_context (0 = one
  // per core), and needs no strands.
  asio::io_context* io_context = nullptr;
  unsigned threads = 0;
  // Several databases in one process (hyperpool serve's [databases]): each
  // gets its own Endpoint with its own options (origin, pool, cache), and
  // the app's StartupMessage database picks one; `endpoint` is then unused.
  // The first is the default (the Client's probe of origin parameters).
  // client.databases decides who may use which (null: every app user, every
  // database listed here). Empty: the one Endpoint of `endpoint`.
  struct Database {
    std::string name;
    EndpointOptions endpoint;
  };
  std::vector<Database> databases;
  // PgBouncer's "*" entry (needs `databases`): a database name not listed
  // is served by an Endpoint with these options whose origin database is
  // replaced by the app's name, started at the first link to it; at most
  // `max_any_databases` such Endpoints at once (an idle one, with no
  // session, is removed to make room; otherwise the link fails with 53400).
  // client.databases still decides who may use which name.
  std::optional<EndpointOptions> any_database;
  std::size_t max_any_databases = 16;
};

// A running Client bound to an Endpoint for one origin.
class Connection {
 public:
  virtual ~Connection() = default;
  // The local connection string to give to the application's driver.
  virtual const std::string& connection_string() const = 0;
  // Stops accepting, closes sessions and origin connections, joins the
  // worker threads hyperpool started. Idempotent; the destructor calls it.
  virtual void Close() = 0;
  virtual EndpointStats endpoint_stats() const = 0;
  // Both cache tiers' counters and the top query fingerprints with their
  // cache decision (text lines; docs/architecture.md, "Query cache").
  virtual std::string cache_report() const { return {}; }
  // The local Client's counters (application connections, its cache tier).
  virtual ClientStats client_stats() const { return {}; }
  // The halves themselves, for operator controls (the admin console);
  // valid until Close(). endpoint() is null when the Endpoint is remote.
  virtual Client* client() { return nullptr; }
  virtual Endpoint* endpoint() { return nullptr; }
  // With ConnectOptions::databases: the names served now, the Endpoint of
  // one (null if not served; valid until Close()), and changes at run time.
  // AddDatabase starts a new Endpoint for new logins to `name`;
  // RemoveDatabase refuses new links to it at once, closes its idle origin
  // connections and the others as they are released; its sessions keep
  // running until they end. Other databases' sessions are not touched.
  virtual std::vector<std::string> databases() const { return {}; }
  virtual Endpoint* endpoint(std::string_view /*database*/) { return nullptr; }
  virtual absl::Status AddDatabase(std::string /*name*/, EndpointOptions /*options*/) {
    return absl::UnimplementedError("this connection serves one database");
  }
  virtual absl::Status RemoveDatabase(std::string_view /*name*/) {
    return absl::UnimplementedError("this connection serves one database");
  }
};

// Starts a Client and an in-process Endpoint for `options.endpoint.origin`.
// Fails if the origin string does not parse or the listener cannot bind;
// the origin itself is reached lazily (use ValidateOrigin to check it first).
absl::StatusOr<std::unique_ptr<Connection>> connect(ConnectOptions options);

// A Client whose Endpoint runs elsewhere (`hyperpool endpoint`, or a
// LinkListener in front of an Endpoint), reached over TLS.
struct RemoteConnectOptions {
  SocketTransportOptions endpoint;
  // Two or more Endpoints for the origin (their host/port here; endpoint's
  // host/port are then ignored): failover and re-placement among them
  // (docs/architecture.md, "Many Endpoints: failover and re-placement").
  FailoverOptions failover;
  ClientOptions client;
  // As in ConnectOptions.
  asio::io_context* io_context = nullptr;
  unsigned threads = 0;
};

// Starts only a Client, whose links go to the remote Endpoint through a
// SocketTransport. Fails on bad options or if the listener cannot bind; the
// Endpoint is reached lazily (in the background, to open links ahead).
// endpoint_stats() of the result is empty: the Endpoint is elsewhere.
absl::StatusOr<std::unique_ptr<Connection>> connect_remote(RemoteConnectOptions options);

}  // namespace hyperpool
