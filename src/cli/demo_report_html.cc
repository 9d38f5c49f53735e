// report.html: the demo's chart as inline SVG and its tables, one file with
// nothing to fetch (see demo_report.h). The browser lays out the text, so
// labels are measured by the same renderer that draws them; the layout below
// only keeps each label inside its own column (tests/integration/
// browser_report_test.mjs checks that no two labels overlap).

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "cli/demo_report.h"

namespace hyperpool::cli::demo {
namespace {

constexpr const char* kModeColors[] = {"#d9534f", "#337ab7", "#5cb85c"};
constexpr const char* kLimitColor = "#b8b8b8";

// The chart's geometry, in SVG user units (1 unit = 1 CSS pixel at 100%).
constexpr double kWidth = 960, kLeft = 70, kRight = 20;
constexpr double kPlotTop = 56, kPlotBottom = 330, kHeight = 420;
constexpr double kBarWidth = 40, kBarGap = 6;

std::string Escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Milliseconds as a bar label: short enough to stay above its own bar.
std::string Ms(double ms) { return ms >= 100 ? fmt::format("{:.0f}", ms) : fmt::format("{:.1f}", ms); }

// A round axis maximum and tick step: 1, 2 or 5 times a power of ten.
std::pair<double, double> AxisScale(double top) {
  if (!(top > 0)) return {1, 0.2};
  const double raw = top / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  return {std::ceil(top / step) * step, step};
}

std::string Text(double x, double y, std::string_view anchor, std::string_view cls, std::string_view text) {
  return fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" class=\"{}\">{}</text>\n", x, y, anchor, cls,
                     Escape(text));
}

std::string Chart(const Report& rep) {
  double top = 0;
  for (const ProtocolRun& run : rep.runs) {
    for (const ModeResult& m : run.modes) top = std::max({top, m.mean(), m.limit_round_trips * rep.rtt_ms});
  }
  const auto [axis_max, step] = AxisScale(top * 1.08);
  const double plot_height = kPlotBottom - kPlotTop;
  auto y_of = [&](double ms) { return kPlotBottom - plot_height * ms / axis_max; };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" role=\"img\" "
      "aria-label=\"ms per connection, measured against the physical limit\">\n",
      kWidth, kHeight);
  // Legend, above the plot.
  for (int i = 0; i < 3; ++i) {
    svg += fmt::format("<rect x=\"{}\" y=\"14\" width=\"6\" height=\"14\" fill=\"{}\"/>\n", kLeft + 6 * i,
                       kModeColors[i]);
  }
  svg += Text(kLeft + 24, 26, "start", "legend", "measured mean (ms per connection)");
  svg += fmt::format("<rect x=\"{}\" y=\"14\" width=\"14\" height=\"14\" fill=\"{}\"/>\n", kLeft + 300, kLimitColor);
  svg += Text(kLeft + 320, 26, "start", "legend", "physical limit (unavoidable round trips x RTT)");
  // Grid and axis labels.
  for (double v = 0; v <= axis_max + step / 2; v += step) {
    const double y = y_of(v);
    svg += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>\n", kLeft,
                       kWidth - kRight, y, y);
    svg += Text(kLeft - 8, y + 4, "end", "tick", fmt::format("{:g}", v));
  }
  const size_t protocols = std::max<size_t>(rep.runs.size(), 1);
  const double block = (kWidth - kLeft - kRight) / static_cast<double>(protocols);
  for (size_t p = 0; p < rep.runs.size(); ++p) {
    const ProtocolRun& run = rep.runs[p];
    const double x0 = kLeft + block * static_cast<double>(p);
    const double column = block / static_cast<double>(std::max<size_t>(run.modes.size(), 1));
    if (p > 0) {
      svg += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" class=\"separator\"/>\n", x0,
                         kPlotTop - 6, kHeight - 8);
    }
    const double direct_mean = run.modes.empty() ? 0 : run.modes[0].mean();
    for (size_t i = 0; i < run.modes.size(); ++i) {
      const ModeResult& m = run.modes[i];
      const double limit = m.limit_round_trips * rep.rtt_ms;
      const double center = x0 + column * (static_cast<double>(i) + 0.5);
      const double bar_x = center - kBarWidth - kBarGap / 2;
      const double limit_x = center + kBarGap / 2;
      svg += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{}\" height=\"{:.1f}\" fill=\"{}\"><title>{} {}: mean {:.1f} ms"
          "</title></rect>\n",
          bar_x, y_of(m.mean()), kBarWidth, kPlotBottom - y_of(m.mean()), kModeColors[i % 3],
          ProtocolName(run.protocol), Escape(m.name), m.mean());
      svg += Text(bar_x + kBarWidth / 2, y_of(m.mean()) - 5, "middle", "value", Ms(m.mean()));
      svg += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{}\" height=\"{:.1f}\" fill=\"{}\"><title>{}: {}</title></rect>\n",
          limit_x, y_of(limit), kBarWidth, kPlotBottom - y_of(limit), kLimitColor, Escape(m.limit_formula),
          Ms(limit));
      svg += Text(limit_x + kBarWidth / 2, y_of(limit) - 5, "middle", "value limit-value", Ms(limit));
      svg += Text(center, kPlotBottom + 20, "middle", "mode", m.name);
      double line_y = kPlotBottom + 37;
      if (i > 0 && direct_mean > 0) {
        svg += Text(center, line_y, "middle", "note",
                    fmt::format("{:+.0f}% vs direct", 100.0 * (m.mean() - direct_mean) / direct_mean));
      }
      line_y += 16;
      if (limit > 0) svg += Text(center, line_y, "middle", "note", fmt::format("{:.2f}x its limit", m.mean() / limit));
    }
    svg += Text(x0 + block / 2, kHeight - 14, "middle", "protocol",
                run.protocol == Protocol::kExtended ? "extended protocol (postgres.js flow)" : "simple protocol");
  }
  svg += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\" class=\"axis\"/>\n", kLeft, kWidth - kRight,
                     kPlotBottom);
  svg += "</svg>\n";
  return svg;
}

std::string Tables(const Report& rep) {
  std::string out;
  for (const ProtocolRun& run : rep.runs) {
    const ModeResult& direct = run.modes[0];
    // The description without its "... protocol: " lead, which the heading says.
    std::string description = ProtocolDescription(run);
    description = description.substr(description.find(": ") + 2);
    out += fmt::format("<h2>{}</h2>\n<p>{}</p>\n", run.protocol == Protocol::kExtended
                                                     ? "Extended protocol (postgres.js flow)"
                                                     : "Simple protocol",
                       Escape(description));
    out +=
        "<table>\n<thead><tr><th>mode</th><th>mean ms</th><th>median ms</th><th>vs direct</th><th>x RTT</th>"
        "<th>waits</th><th>physical limit</th><th>limit ms</th><th>mean/limit</th><th>origin units</th></tr></thead>\n"
        "<tbody>\n";
    for (const ModeResult& m : run.modes) {
      const double limit = m.limit_round_trips * rep.rtt_ms;
      out += fmt::format(
          "<tr><td>{}</td><td>{:.1f}</td><td>{:.1f}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1f}</td>"
          "<td>{}</td><td>{}</td></tr>\n",
          Escape(m.name), m.mean(), m.median(),
          &m == &direct || direct.mean() <= 0
              ? std::string("-")
              : fmt::format("{:+.0f}%", 100.0 * (m.mean() - direct.mean()) / direct.mean()),
          rep.rtt_ms > 0 ? fmt::format("{:.2f}", m.mean() / rep.rtt_ms) : std::string("-"), m.client_round_trips,
          Escape(m.limit_formula), limit, limit > 0 ? fmt::format("{:.3f}", m.mean() / limit) : std::string("-"),
          m.origin_transactions ? std::to_string(*m.origin_transactions) : std::string("-"));
    }
    out += "</tbody>\n</table>\n";
  }
  return out;
}

constexpr const char* kStyle = R"(
body { font-family: "DejaVu Sans", Verdana, Arial, sans-serif; margin: 24px; color: #222; max-width: 1000px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 4px; }
p { margin: 4px 0; line-height: 1.4; }
svg { display: block; margin: 16px 0; max-width: 100%; height: auto; }
svg text { font-family: "DejaVu Sans", Verdana, Arial, sans-serif; fill: #222; }
svg .legend { font-size: 13px; }
svg .tick { font-size: 11px; fill: #555; }
svg .value { font-size: 11px; }
svg .limit-value { fill: #666; }
svg .mode { font-size: 14px; font-weight: bold; }
svg .note { font-size: 12px; fill: #444; }
svg .protocol { font-size: 14px; }
svg .grid { stroke: #e6e6e6; }
svg .axis { stroke: #444; }
svg .separator { stroke: #999; stroke-dasharray: 4 4; }
ul.summary { margin: 8px 0; padding-left: 20px; line-height: 1.4; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; width: 100%; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th { background: #f2f2f2; }
td:first-child, td:nth-child(7), th:first-child, th:nth-child(7) { text-align: left; }
)";

}  // namespace

std::string RenderHtmlReport(const Report& rep) {
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>hyperpool demo: ms per short-lived connection</title>\n<style>{}</style>\n</head>\n<body>\n"
      "<h1>hyperpool demo: ms per short-lived connection</h1>\n",
      kStyle);
  html += fmt::format(
      "<ul class=\"summary\">\n<li>{} short-lived connections per mode (after 1 warm-up connection per mode, not "
      "counted); simulated WAN round trip (RTT) {:g} ms; origin {}.</li>\n"
      "<li>Each connection: {} login, {} statements (3 primary-key reads of hot ids, 1 range read of {} rows, 1 "
      "write), disconnect.</li>\n"
      "<li><b>direct</b>: app &rarr; WAN &rarr; PostgreSQL. <b>pooled</b>: app &rarr; hyperpool Client &rarr; WAN "
      "(TLS link) &rarr; Endpoint &rarr; PostgreSQL, cache off. <b>cached</b>: the same with both cache tiers "
      "on.</li>\n"
      "<li>Grey bars: the physical limit, the WAN round trips no pooler can avoid &times; RTT. x RTT = mean ms / "
      "RTT.</li>\n</ul>\n",
      rep.iterations, rep.rtt_ms, Escape(rep.database), Escape(rep.auth_method), rep.statements, kRangeRows);
  html += Chart(rep);
  html += Tables(rep);
  html += fmt::format("<p class=\"seed\">{}</p>\n</body>\n</html>\n", Escape(kSeedLine));
  return html;
}

absl::Status WriteHtmlReport(const Report& rep, const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / "report.html";
  std::ofstream out(path, std::ios::trunc);
  out << RenderHtmlReport(rep);
  out.close();
  if (!out) return absl::InternalError(fmt::format("cannot write {}", path.string()));
  return absl::OkStatus();
}

}  // namespace hyperpool::cli::demo
