#pragma once
// The admin console's commands (docs/architecture.md, "Admin console"),
// without I/O: a command string and an AdminBackend in, the frames of the
// answer out (RowDescription, DataRow..., CommandComplete, or an
// ErrorResponse; never ReadyForQuery: admin_session.h adds it). Column
// names follow PgBouncer's SHOW commands where they mean the same thing, so
// dashboards and habits carry over.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "hyperpool/client.h"
#include "hyperpool/endpoint.h"

namespace hyperpool::ops {

// What the SHOW commands read, taken once per command.
struct AdminSnapshot {
  std::string database;   // the app-facing database name (PgBouncer's "database" column)
  std::string user;       // the app user
  std::string pool_mode;  // "transaction" or "session"
  std::optional<EndpointStats> endpoint;  // null when the Endpoint runs elsewhere
  // Several databases (hyperpool serve's [databases]): one each, for the
  // per-database rows of SHOW POOLS and SHOW STATS. Empty: the one of
  // `database` and `endpoint`.
  struct Pool {
    std::string database;
    std::string pool_mode;
    EndpointStats endpoint;
  };
  std::vector<Pool> pools;
  std::optional<ClientStats> client;
  std::vector<ClientSessionInfo> clients;
  // SHOW CONFIG rows: key, value, whether a reload applies it ("yes"/"no").
  struct ConfigRow {
    std::string key;
    std::string value;
    bool reloadable = false;
  };
  std::vector<ConfigRow> config;
  std::string cache_report;  // Endpoint::CacheReport(): per-fingerprint lines
  std::string version;
};

// What the commands do; hyperpool serve implements it over its Connection,
// the unit test with a fake. Thread-safe (any worker's sessions call it).
class AdminBackend {
 public:
  virtual ~AdminBackend() = default;
  virtual AdminSnapshot Snapshot() = 0;
  // The origin connections (SHOW SERVERS only: it may wait for the Endpoint).
  virtual std::vector<OriginServerInfo> Servers() = 0;
  // `database`: one of the snapshot's databases; empty: all of them.
  virtual void Pause(std::string_view database) = 0;
  virtual void Resume(std::string_view database) = 0;
  virtual void Reconnect(std::string_view database) = 0;
  virtual bool KillClient(std::uint64_t id) = 0;
  // Re-reads the config file: an error when it is rejected (the old one stays).
  virtual absl::Status Reload() = 0;
  // Starts a graceful drain and exit; returns at once.
  virtual void Shutdown() = 0;
};

// Every command, for SHOW HELP and the 42601 message.
const std::vector<std::string>& AdminCommands();

// Answers one Query message's text (one or more commands separated by ';').
std::string ExecuteAdminQuery(std::string_view query, AdminBackend& backend);

// The p-th percentile (0..100) of a latency histogram, in microseconds: the
// upper bound of the bucket it falls in (the last bound for +Inf); 0 if empty.
std::uint64_t HistogramPercentileUs(const LatencyHistogramSnapshot& h, double p);

}  // namespace hyperpool::ops
