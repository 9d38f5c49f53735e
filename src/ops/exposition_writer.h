#pragma once
// A writer of the Prometheus text exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/): one
// "# HELP" and one "# TYPE" line per metric family, then its samples.
// Debian packages no Prometheus C++ client; this is the small part of one
// that a process exposing a few dozen metrics needs. It does no I/O: it
// appends to a string the caller serves.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hyperpool/histogram.h"

namespace hyperpool::ops {

// Label name/value pairs of one sample, in order.
using Labels = std::vector<std::pair<std::string, std::string>>;

class ExpositionWriter {
 public:
  // The content type scrapers expect for this format.
  static constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

  // A counter family; `name` must end in "_total" (the convention the
  // Prometheus text format and OpenMetrics share).
  void Counter(std::string_view name, std::string_view help, std::uint64_t value, const Labels& labels = {});
  void Gauge(std::string_view name, std::string_view help, double value, const Labels& labels = {});
  // A histogram of latencies recorded in microseconds, exposed in seconds
  // (the Prometheus base unit): cumulative name_bucket{le="..."} samples
  // ending with le="+Inf", then name_sum and name_count.
  void LatencyHistogram(std::string_view name, std::string_view help, const LatencyHistogramSnapshot& h,
                        const Labels& labels = {});

  // The document written so far.
  const std::string& text() const { return out_; }

 private:
  // Writes HELP and TYPE the first time `name` is seen; later samples of the
  // same family (other label values) follow their family's lines, so callers
  // write one family's samples together.
  void Family(std::string_view name, std::string_view help, std::string_view type);
  void Sample(std::string_view name, const Labels& labels, std::string_view value,
              const std::pair<std::string, std::string>* extra = nullptr);

  std::string out_;
  std::vector<std::string> families_;
};

// Escapes a label value (backslash, double quote, newline) as the format requires.
std::string EscapeLabelValue(std::string_view value);
// Escapes HELP text (backslash, newline).
std::string EscapeHelp(std::string_view help);
// A sample value: integers without exponent, others as shortest round-trip.
std::string FormatValue(double value);

}  // namespace hyperpool::ops
