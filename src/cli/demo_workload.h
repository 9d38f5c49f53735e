// What one short-lived client of `hyperpool demo` does: connect, a handful of
// OLTP statements, disconnect, in one of two protocols:
//
//   kExtended  as postgres.js (the seed's driver) does it: a type lookup at
//              connect (Parse(named) + Describe + Bind + Execute + Sync), then
//              per statement Parse(named) + Describe + Flush, wait for the
//              description, Bind + Execute + Sync: two client round trips each.
//   kSimple    one Query message per statement (the write is one string
//              "BEGIN; UPDATE ...; COMMIT"): one client round trip each.
#ifndef HYPERPOOL_CLI_DEMO_WORKLOAD_H_
#define HYPERPOOL_CLI_DEMO_WORKLOAD_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/demo_pg_client.h"

namespace hyperpool::cli::demo {

enum class Protocol {
  kExtended,  // postgres.js's flow: named statements, Describe before Bind
  kSimple,    // one Query per statement
};

// "extended" or "simple".
const char* ProtocolName(Protocol protocol);

// Rows in the demo's tables.
inline constexpr int kAccounts = 10000;
inline constexpr int kBranches = 10;
inline constexpr int kRangeRows = 20;

struct Statement {
  std::string simple_sql;              // literal values
  std::string extended_sql;            // $n placeholders
  std::vector<std::string> parameters;  // their values (text)
  bool cacheable = false;              // a read-only statement outside a transaction
  // Checks the result in `protocol`; returns an empty string when it is right.
  std::function<std::string(const PgResult&, Protocol)> check;
};

// The statements, in schema `schema` (see LoadTables).
class Workload {
 public:
  explicit Workload(std::string schema) : schema_(std::move(schema)) {}
  const std::string& schema() const { return schema_; }

  // The statements of the connection with index `i` (the write varies with i).
  std::vector<Statement> For(int i) const;
  int Statements() const { return static_cast<int>(For(0).size()); }
  int Uncacheable() const;
  // Client round trips the statements take in `protocol` (after login; the
  // extended protocol's type lookup included).
  int ClientRoundTrips(Protocol protocol) const;

  // Creates the schema, its tables and rows over `client`; `on_schema_created`
  // runs right after CREATE SCHEMA succeeded.
  absl::Status LoadTables(PgClient& client, const std::function<void()>& on_schema_created) const;

 private:
  std::string schema_;
};

struct IterationResult {
  double ms = 0;
  int login_round_trips = 0;
  int round_trips = 0;  // all of the connection's client round trips, login included
  std::string auth_method;
};

// One short-lived client: connect, the workload, disconnect. Timed from
// before the TCP connect to after Terminate.
absl::StatusOr<IterationResult> RunConnection(const PgLogin& login, const Workload& workload, Protocol protocol,
                                              int index);

}  // namespace hyperpool::cli::demo

#endif  // HYPERPOOL_CLI_DEMO_WORKLOAD_H_
