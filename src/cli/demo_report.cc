// The demo's tables, CSV files and chart (see demo_report.h).

#include "cli/demo_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <fmt/format.h>

#include "cli/demo_png.h"

namespace hyperpool::cli::demo {
namespace {

std::string Pct(double value) { return fmt::format("{:+.0f}%", value); }

std::string Heading(const ProtocolRun& run) {
  if (run.protocol == Protocol::kExtended) {
    return fmt::format(
        "extended protocol (postgres.js flow): at connect a type lookup (Parse(named)+Describe+Bind+Execute+Sync);\n"
        "per statement Parse(named)+Describe+Flush, wait for the description, then Bind+Execute+Sync\n"
        "(the write is a lone UPDATE in its implicit transaction); {} client round trips after login\n",
        run.statement_round_trips);
  }
  return fmt::format(
      "simple protocol: one Query per statement (the write is one string \"BEGIN; UPDATE ...; COMMIT\");\n"
      "{} client round trips after login\n",
      run.statement_round_trips);
}

}  // namespace

double ModeResult::mean() const {
  return samples.empty() ? 0 : std::accumulate(samples.begin(), samples.end(), 0.0) / samples.size();
}
double ModeResult::median() const {
  if (samples.empty()) return 0;
  std::vector<double> s = samples;
  std::sort(s.begin(), s.end());
  size_t n = s.size();
  return n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}
double ModeResult::min() const { return samples.empty() ? 0 : *std::min_element(samples.begin(), samples.end()); }
double ModeResult::max() const { return samples.empty() ? 0 : *std::max_element(samples.begin(), samples.end()); }

std::string RenderTables(const Report& rep) {
  std::string out = fmt::format(
      "\nhyperpool demo: {} short-lived connections per mode (after 1 warm-up connection per mode, not counted),\n"
      "simulated WAN RTT {:g} ms, origin {}\n"
      "each connection: {} login, {} statements (3 primary-key reads of hot ids, 1 range read of {} rows,\n"
      "1 write), disconnect\n"
      "direct: app --WAN--> PostgreSQL;  pooled: app -> hyperpool Client --WAN (TLS link)--> Endpoint -> PostgreSQL,\n"
      "cache off;  cached: the same with both cache tiers on.  x RTT = mean ms / RTT (WAN round trips spent)\n",
      rep.iterations, rep.rtt_ms, rep.database, rep.auth_method, rep.statements, kRangeRows);
  for (const ProtocolRun& run : rep.runs) {
    const ModeResult& direct = run.modes[0];
    out += "\n" + Heading(run) + "\n";
    out += fmt::format("{:<8} {:>9} {:>10} {:>9} {:>7} {:>8}   {:<50} {:>9} {:>11}\n", "mode", "mean ms", "median ms",
                       "vs direct", "x RTT", "waits", "physical limit", "limit ms", "mean/limit");
    for (const ModeResult& m : run.modes) {
      double limit = m.limit_round_trips * rep.rtt_ms;
      std::string saved = &m == &direct ? std::string("-") : Pct(100.0 * (m.mean() - direct.mean()) / direct.mean());
      std::string ratio = limit > 0 ? fmt::format("{:.3f}", m.mean() / limit) : std::string("-");
      std::string rtts = rep.rtt_ms > 0 ? fmt::format("{:.2f}", m.mean() / rep.rtt_ms) : std::string("-");
      out += fmt::format("{:<8} {:>9.1f} {:>10.1f} {:>9} {:>7} {:>8}   {:<50} {:>9.1f} {:>11}\n", m.name, m.mean(),
                         m.median(), saved, rtts, m.client_round_trips, m.limit_formula, limit, ratio);
    }
    const ModeResult& pooled = run.modes[1];
    const ModeResult& cached = run.modes[2];
    double pooled_limit = pooled.limit_round_trips * rep.rtt_ms;
    if (pooled_limit > 0) {
      double over = 100.0 * (pooled.mean() / pooled_limit - 1);
      out += fmt::format("pooled is {:.1f}% {} its physical limit (goal: within +5%): {}\n", std::abs(over),
                         over >= 0 ? "above" : "below", over <= 5 ? "met" : "NOT met");
    }
    if (pooled.origin_transactions && cached.origin_transactions) {
      out += fmt::format(
          "units of work that reached the origin (Endpoint count, measured connections): pooled {}, cached {}{}\n",
          *pooled.origin_transactions, *cached.origin_transactions,
          *cached.origin_transactions >= *pooled.origin_transactions ? "  (the cache served nothing)" : "");
    }
  }
  out += fmt::format(
      "\nseed (Hyperdrive write-up, RTT ~125 ms, postgres.js, TLS): direct 1200 ms, via Hyperdrive 500 ms (-58%), "
      "with cache 320 ms (-73%)\n");
  return out;
}

absl::Status WriteCsv(const Report& rep, const std::string& dir_name) {
  std::filesystem::path dir(dir_name);
  std::ofstream summary(dir / "demo.csv", std::ios::trunc);
  summary << "protocol,mode,iterations,rtt_ms,mean_ms,median_ms,min_ms,max_ms,mean_rtts,saved_vs_direct_pct,"
             "client_round_trips,limit_round_trips,limit_formula,limit_ms,mean_over_limit,origin_transactions\n";
  for (const ProtocolRun& run : rep.runs) {
    const double direct_mean = run.modes[0].mean();
    for (const ModeResult& m : run.modes) {
      double limit = m.limit_round_trips * rep.rtt_ms;
      summary << fmt::format("{},{},{},{:g},{:.2f},{:.2f},{:.2f},{:.2f},{},{:.1f},{},{},\"{}\",{:.1f},{},{}\n",
                             ProtocolName(run.protocol), m.name, m.samples.size(), rep.rtt_ms, m.mean(), m.median(),
                             m.min(), m.max(), rep.rtt_ms > 0 ? fmt::format("{:.2f}", m.mean() / rep.rtt_ms) : "",
                             100.0 * (direct_mean - m.mean()) / direct_mean, m.client_round_trips,
                             m.limit_round_trips, m.limit_formula, limit,
                             limit > 0 ? fmt::format("{:.3f}", m.mean() / limit) : std::string(),
                             m.origin_transactions ? std::to_string(*m.origin_transactions) : std::string());
    }
  }
  std::ofstream each(dir / "demo_iterations.csv", std::ios::trunc);
  each << "protocol,mode,connection,ms\n";
  for (const ProtocolRun& run : rep.runs) {
    for (const ModeResult& m : run.modes) {
      for (size_t i = 0; i < m.samples.size(); ++i) {
        each << fmt::format("{},{},{},{:.2f}\n", ProtocolName(run.protocol), m.name, i + 1, m.samples[i]);
      }
    }
  }
  summary.close();
  each.close();
  if (!summary || !each) return absl::InternalError(fmt::format("cannot write the CSV files in {}", dir_name));
  return absl::OkStatus();
}

absl::Status WriteChart(const Report& rep, const std::string& dir) {
  const Rgb colors[] = {{217, 83, 79}, {51, 122, 183}, {92, 184, 92}};
  std::vector<ChartGroup> groups;
  for (const ProtocolRun& run : rep.runs) {
    const double direct_mean = run.modes[0].mean();
    for (size_t i = 0; i < run.modes.size(); ++i) {
      const ModeResult& m = run.modes[i];
      double limit = m.limit_round_trips * rep.rtt_ms;
      std::string note = limit > 0 ? fmt::format("{:.2f}X LIMIT", m.mean() / limit) : std::string();
      if (i > 0) note = fmt::format("{} VS DIRECT\n{}", Pct(100.0 * (m.mean() - direct_mean) / direct_mean), note);
      std::string label = fmt::format("{} {}", run.protocol == Protocol::kExtended ? "EXT" : "SIMPLE", m.name);
      for (char& c : label) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      groups.push_back({label, note, m.mean(), limit, colors[i % 3]});
    }
  }
  std::string title = "HYPERPOOL DEMO: MS PER SHORT-LIVED CONNECTION";
  std::string subtitle = fmt::format("RTT {:g} MS, MEAN OF {} CONNECTIONS PER MODE, {} LOGIN + {} STATEMENTS EACH",
                                     rep.rtt_ms, rep.iterations,
                                     rep.auth_method == "SCRAM-SHA-256" ? "SCRAM" : rep.auth_method, rep.statements);
  return WriteBarChartPng((std::filesystem::path(dir) / "demo.png").string(), title, subtitle, groups);
}

}  // namespace hyperpool::cli::demo
