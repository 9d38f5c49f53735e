// The Prometheus text-format writer: HELP/TYPE once per family, counters,
// gauges, label escaping, and cumulative histograms in seconds.

#include "ops/exposition_writer.h"

#include <chrono>
#include <string>

#include <catch2/catch_test_macros.hpp>

#include "ops/latency_histogram.h"

namespace hyperpool::ops {
namespace {

TEST_CASE("a counter family has one HELP and one TYPE line before its samples") {
  ExpositionWriter w;
  w.Counter("hp_pins_total", "Pins by reason.", 3, {{"reason", "listen"}});
  w.Counter("hp_pins_total", "Pins by reason.", 0, {{"reason", "temp_table"}});
  CHECK(w.text() ==
        "# HELP hp_pins_total Pins by reason.\n"
        "# TYPE hp_pins_total counter\n"
        "hp_pins_total{reason=\"listen\"} 3\n"
        "hp_pins_total{reason=\"temp_table\"} 0\n");
}

TEST_CASE("gauges print integers without exponent and fractions exactly") {
  ExpositionWriter w;
  w.Gauge("hp_a", "a", 12345678901.0);
  w.Gauge("hp_b", "b", 0.25);
  CHECK(w.text() == "# HELP hp_a a\n# TYPE hp_a gauge\nhp_a 12345678901\n# HELP hp_b b\n# TYPE hp_b gauge\nhp_b 0.25\n");
}

TEST_CASE("label values and HELP text are escaped") {
  CHECK(EscapeLabelValue("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
  CHECK(EscapeHelp("line\none \\ two") == "line\\none \\\\ two");
  ExpositionWriter w;
  w.Gauge("hp_x", "x", 1, {{"name", "say \"hi\""}});
  CHECK(w.text().find("hp_x{name=\"say \\\"hi\\\"\"} 1\n") != std::string::npos);
}

TEST_CASE("a latency histogram is cumulative, in seconds, ends at +Inf equal to _count") {
  LatencyHistogram h;
  h.Observe(std::chrono::microseconds(50));         // <= 100 us
  h.Observe(std::chrono::microseconds(100));        // <= 100 us (le is inclusive)
  h.Observe(std::chrono::microseconds(101));        // <= 250 us
  h.Observe(std::chrono::seconds(60));              // above every bound
  ExpositionWriter w;
  w.LatencyHistogram("hp_txn_seconds", "t", h.Snapshot());
  const std::string& t = w.text();
  CHECK(t.find("# TYPE hp_txn_seconds histogram\n") != std::string::npos);
  CHECK(t.find("hp_txn_seconds_bucket{le=\"0.0001\"} 2\n") != std::string::npos);
  CHECK(t.find("hp_txn_seconds_bucket{le=\"0.00025\"} 3\n") != std::string::npos);
  CHECK(t.find("hp_txn_seconds_bucket{le=\"30\"} 3\n") != std::string::npos);
  CHECK(t.find("hp_txn_seconds_bucket{le=\"+Inf\"} 4\n") != std::string::npos);
  CHECK(t.find("hp_txn_seconds_count 4\n") != std::string::npos);
  CHECK(t.find("hp_txn_seconds_sum 60.000251\n") != std::string::npos);
}

TEST_CASE("histogram labels come before le") {
  LatencyHistogramSnapshot s;
  ExpositionWriter w;
  w.LatencyHistogram("hp_h", "h", s, {{"tier", "endpoint"}});
  CHECK(w.text().find("hp_h_bucket{tier=\"endpoint\",le=\"+Inf\"} 0\n") != std::string::npos);
  CHECK(w.text().find("hp_h_sum{tier=\"endpoint\"} 0\n") != std::string::npos);
}

TEST_CASE("a negative duration (clock oddity) lands in the first bucket") {
  LatencyHistogram h;
  h.Observe(std::chrono::microseconds(-5));
  const LatencyHistogramSnapshot s = h.Snapshot();
  CHECK(s.counts[0] == 1);
  CHECK(s.sum_us == 0);
  CHECK(s.count == 1);
}

}  // namespace
}  // namespace hyperpool::ops
