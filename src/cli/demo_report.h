// `hyperpool demo`'s results: the tables it prints, its CSV files and report.html.
#ifndef HYPERPOOL_CLI_DEMO_REPORT_H_
#define HYPERPOOL_CLI_DEMO_REPORT_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/demo_workload.h"

namespace hyperpool::cli::demo {

// One mode (direct, pooled, cached) in one protocol.
struct ModeResult {
  std::string name;
  std::vector<double> samples;  // ms per measured connection
  int client_round_trips = 0;   // the driver's own waits per connection (login included)
  int limit_round_trips = 0;    // the WAN crossings that cannot be avoided
  std::string limit_formula;
  std::optional<size_t> origin_transactions;  // at the Endpoint, measured connections only
  double mean() const;
  double median() const;
  double min() const;
  double max() const;
};

// The three modes of one protocol.
struct ProtocolRun {
  Protocol protocol;
  int statement_round_trips = 0;  // client round trips after login (Workload::ClientRoundTrips)
  std::vector<ModeResult> modes;  // direct, pooled, cached
};

struct Report {
  double rtt_ms = 0;
  int iterations = 0;
  int statements = 0;
  int login_round_trips = 0;
  std::string auth_method;
  std::string database;
  std::vector<ProtocolRun> runs;  // extended first, then simple
};

// The tables printed on stdout: per protocol a heading line ("extended
// protocol (postgres.js flow): ..." / "simple protocol: ...") and a table
// whose rows start with the mode's name.
std::string RenderTables(const Report& report);

// demo.csv (one row per protocol and mode) and demo_iterations.csv (one row
// per measured connection) in `dir`.
absl::Status WriteCsv(const Report& report, const std::string& dir);

// The report read back from demo.csv and demo_iterations.csv in `dir` (as
// WriteCsv wrote them): `hyperpool demo --report-from DIR` re-renders it.
absl::StatusOr<Report> ReadResults(const std::string& dir);

// One protocol's heading over its table ("extended protocol (postgres.js
// flow): ..."), and the seed's numbers for comparison.
std::string ProtocolDescription(const ProtocolRun& run);
inline constexpr const char* kSeedLine =
    "seed (Hyperdrive write-up, RTT ~125 ms, postgres.js, TLS): direct 1200 ms, via Hyperdrive 500 ms (-58%), "
    "with cache 320 ms (-73%)";

// report.html: the chart as inline SVG (a measured bar next to its physical
// limit per protocol and mode, with the ratios under each) and the tables;
// a single file that fetches nothing.
std::string RenderHtmlReport(const Report& report);
// report.html in `dir`.
absl::Status WriteHtmlReport(const Report& report, const std::string& dir);

}  // namespace hyperpool::cli::demo

#endif  // HYPERPOOL_CLI_DEMO_REPORT_H_
