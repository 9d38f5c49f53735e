// The demo's tables, CSV files and chart (see demo_report.h).

#include "cli/demo_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

#include "absl/strings/numbers.h"

namespace hyperpool::cli::demo {
namespace {

std::string Pct(double value) { return fmt::format("{:+.0f}%", value); }

// A CSV field, quoted (RFC 4180: a quote inside is doubled).
std::string CsvField(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// The fields of one CSV line (RFC 4180 quoting; no line breaks inside fields).
std::vector<std::string> SplitCsvLine(std::string_view line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      fields.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.emplace_back();
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  return fields;
}

// The lines of `path` as named fields (by the header line's names).
absl::StatusOr<std::vector<std::map<std::string, std::string>>> ReadCsvFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(fmt::format("cannot read {}", path.string()));
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> names = SplitCsvLine(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> fields = SplitCsvLine(line);
    if (fields.size() != names.size()) {
      return absl::InvalidArgumentError(
          fmt::format("{}: a line has {} fields, the header {}", path.string(), fields.size(), names.size()));
    }
    std::map<std::string, std::string>& row = rows.emplace_back();
    for (size_t i = 0; i < names.size(); ++i) row[names[i]] = std::move(fields[i]);
  }
  return rows;
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

std::string ProtocolDescription(const ProtocolRun& run) {
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
    out += "\n" + ProtocolDescription(run) + "\n";
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
  out += fmt::format("\n{}\n", kSeedLine);
  return out;
}

absl::Status WriteCsv(const Report& rep, const std::string& dir_name) {
  std::filesystem::path dir(dir_name);
  std::ofstream summary(dir / "demo.csv", std::ios::trunc);
  summary << "protocol,mode,iterations,rtt_ms,mean_ms,median_ms,min_ms,max_ms,mean_rtts,saved_vs_direct_pct,"
             "client_round_trips,limit_round_trips,limit_formula,limit_ms,mean_over_limit,origin_transactions,"
             "statements,login_round_trips,statement_round_trips,auth_method,database\n";
  for (const ProtocolRun& run : rep.runs) {
    const double direct_mean = run.modes[0].mean();
    for (const ModeResult& m : run.modes) {
      double limit = m.limit_round_trips * rep.rtt_ms;
      summary << fmt::format("{},{},{},{:g},{:.2f},{:.2f},{:.2f},{:.2f},{},{:.1f},{},{},{},{:.1f},{},{},{},{},{},{},{}\n",
                             ProtocolName(run.protocol), m.name, m.samples.size(), rep.rtt_ms, m.mean(), m.median(),
                             m.min(), m.max(), rep.rtt_ms > 0 ? fmt::format("{:.2f}", m.mean() / rep.rtt_ms) : "",
                             100.0 * (direct_mean - m.mean()) / direct_mean, m.client_round_trips,
                             m.limit_round_trips, CsvField(m.limit_formula), limit,
                             limit > 0 ? fmt::format("{:.3f}", m.mean() / limit) : std::string(),
                             m.origin_transactions ? std::to_string(*m.origin_transactions) : std::string(),
                             rep.statements, rep.login_round_trips, run.statement_round_trips,
                             CsvField(rep.auth_method), CsvField(rep.database));
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

absl::StatusOr<Report> ReadResults(const std::string& dir_name) {
  const std::filesystem::path dir(dir_name);
  absl::StatusOr<std::vector<std::map<std::string, std::string>>> summary = ReadCsvFile(dir / "demo.csv");
  if (!summary.ok()) return summary.status();
  absl::StatusOr<std::vector<std::map<std::string, std::string>>> each = ReadCsvFile(dir / "demo_iterations.csv");
  if (!each.ok()) return each.status();
  Report rep;
  bool ok = true;
  auto number = [&ok](const std::map<std::string, std::string>& row, const char* name, auto& out) {
    auto it = row.find(name);
    if (it == row.end()) {
      ok = false;
    } else if constexpr (std::is_same_v<std::decay_t<decltype(out)>, double>) {
      ok = ok && absl::SimpleAtod(it->second, &out);
    } else {
      ok = ok && absl::SimpleAtoi(it->second, &out);
    }
  };
  for (const auto& row : *summary) {
    const std::string& protocol_name = row.count("protocol") ? row.at("protocol") : std::string();
    const Protocol protocol = protocol_name == ProtocolName(Protocol::kExtended) ? Protocol::kExtended
                                                                                 : Protocol::kSimple;
    if (rep.runs.empty() || rep.runs.back().protocol != protocol) rep.runs.push_back({protocol, 0, {}});
    ProtocolRun& run = rep.runs.back();
    ModeResult& m = run.modes.emplace_back();
    m.name = row.count("mode") ? row.at("mode") : std::string();
    m.limit_formula = row.count("limit_formula") ? row.at("limit_formula") : std::string();
    number(row, "rtt_ms", rep.rtt_ms);
    number(row, "iterations", rep.iterations);
    number(row, "client_round_trips", m.client_round_trips);
    number(row, "limit_round_trips", m.limit_round_trips);
    number(row, "statements", rep.statements);
    number(row, "login_round_trips", rep.login_round_trips);
    number(row, "statement_round_trips", run.statement_round_trips);
    size_t origin = 0;
    if (row.count("origin_transactions") && absl::SimpleAtoi(row.at("origin_transactions"), &origin)) {
      m.origin_transactions = origin;
    }
    rep.auth_method = row.count("auth_method") ? row.at("auth_method") : std::string();
    rep.database = row.count("database") ? row.at("database") : std::string();
  }
  for (const auto& row : *each) {
    double ms = 0;
    number(row, "ms", ms);
    for (ProtocolRun& run : rep.runs) {
      if (row.count("protocol") == 0 || row.at("protocol") != ProtocolName(run.protocol)) continue;
      for (ModeResult& m : run.modes) {
        if (row.count("mode") && row.at("mode") == m.name) m.samples.push_back(ms);
      }
    }
  }
  bool complete = !rep.runs.empty();
  for (const ProtocolRun& run : rep.runs) complete = complete && !run.modes.empty() && !run.modes[0].samples.empty();
  if (!ok || !complete) {
    return absl::InvalidArgumentError(fmt::format("{}: demo.csv or demo_iterations.csv lacks a field or a sample "
                                                  "(written by an older hyperpool demo?)",
                                                  dir_name));
  }
  return rep;
}

}  // namespace hyperpool::cli::demo
