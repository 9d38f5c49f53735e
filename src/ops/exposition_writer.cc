#include "ops/exposition_writer.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace hyperpool::ops {

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) return fmt::format("{}", static_cast<int64_t>(value));
  return fmt::format("{}", value);
}

void ExpositionWriter::Family(std::string_view name, std::string_view help, std::string_view type) {
  if (std::find(families_.begin(), families_.end(), name) != families_.end()) return;
  families_.emplace_back(name);
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, EscapeHelp(help), name, type);
}

void ExpositionWriter::Sample(std::string_view name, const Labels& labels, std::string_view value,
                              const std::pair<std::string, std::string>* extra) {
  out_ += name;
  if (!labels.empty() || extra != nullptr) {
    out_ += '{';
    bool first = true;
    auto add = [&](const std::pair<std::string, std::string>& label) {
      if (!first) out_ += ',';
      first = false;
      out_ += fmt::format("{}=\"{}\"", label.first, EscapeLabelValue(label.second));
    };
    for (const auto& label : labels) add(label);
    if (extra != nullptr) add(*extra);
    out_ += '}';
  }
  out_ += ' ';
  out_ += value;
  out_ += '\n';
}

void ExpositionWriter::Counter(std::string_view name, std::string_view help, std::uint64_t value,
                               const Labels& labels) {
  Family(name, help, "counter");
  Sample(name, labels, fmt::format("{}", value));
}

void ExpositionWriter::Gauge(std::string_view name, std::string_view help, double value, const Labels& labels) {
  Family(name, help, "gauge");
  Sample(name, labels, FormatValue(value));
}

void ExpositionWriter::LatencyHistogram(std::string_view name, std::string_view help,
                                        const LatencyHistogramSnapshot& h, const Labels& labels) {
  Family(name, help, "histogram");
  const std::string bucket = fmt::format("{}_bucket", name);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < kLatencyBucketBoundsUs.size(); ++i) {
    cumulative += h.counts[i];
    const std::pair<std::string, std::string> le{"le", FormatValue(kLatencyBucketBoundsUs[i] / 1e6)};
    Sample(bucket, labels, fmt::format("{}", cumulative), &le);
  }
  cumulative += h.counts.back();
  const std::pair<std::string, std::string> inf{"le", "+Inf"};
  // +Inf must equal _count; a snapshot taken mid-update may disagree by the
  // observations in flight, so both show the larger.
  const std::uint64_t count = std::max(cumulative, h.count);
  Sample(bucket, labels, fmt::format("{}", count), &inf);
  Sample(fmt::format("{}_sum", name), labels, FormatValue(h.sum_us / 1e6));
  Sample(fmt::format("{}_count", name), labels, fmt::format("{}", count));
}

}  // namespace hyperpool::ops
