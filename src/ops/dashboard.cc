#include "ops/dashboard.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <type_traits>
#include <cstdint>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "hyperpool/histogram.h"

namespace hyperpool::ops {

namespace {

// A JSON text built front to back; the caller keeps objects and arrays
// balanced. Commas are inserted before every value but a container's first.
class JsonWriter {
 public:
  void Open(char bracket) {
    Separate();
    out_ += bracket;
    first_ = true;
  }
  void Close(char bracket) {
    out_ += bracket;
    first_ = false;
  }
  void Key(std::string_view key) {
    Separate();
    String(key);
    out_ += ':';
    first_ = true;  // the value follows without a comma
  }
  void Str(std::string_view value) {
    Separate();
    String(value);
  }
  void Num(double value) {
    Separate();
    out_ += fmt::format("{}", value);
  }
  void Num(std::uint64_t value) {
    Separate();
    out_ += fmt::format("{}", value);
  }
  void Bool(bool value) {
    Separate();
    out_ += value ? "true" : "false";
  }
  void Null() {
    Separate();
    out_ += "null";
  }
  // "key": value shorthands.
  template <typename T>
  void Field(std::string_view key, T value) {
    Key(key);
    if constexpr (std::is_same_v<T, bool>) {
      Bool(value);
    } else if constexpr (std::is_convertible_v<T, std::string_view>) {
      Str(value);
    } else if constexpr (std::is_floating_point_v<T>) {
      Num(static_cast<double>(value));
    } else {
      Num(static_cast<std::uint64_t>(value));
    }
  }
  const std::string& text() const { return out_; }

 private:
  void Separate() {
    if (!first_) out_ += ',';
    first_ = false;
  }
  void String(std::string_view s) {
    out_ += '"';
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        out_ += '\\';
        out_ += c;
      } else if (u < 0x20) {
        out_ += fmt::format("\\u{:04x}", u);
      } else {
        out_ += c;
      }
    }
    out_ += '"';
  }

  std::string out_;
  bool first_ = true;
};

void Histogram(JsonWriter& w, std::string_view key, const LatencyHistogramSnapshot& h) {
  w.Key(key);
  w.Open('{');
  w.Key("le_seconds");
  w.Open('[');
  for (std::uint64_t bound : kLatencyBucketBoundsUs) w.Num(bound / 1e6);
  w.Close(']');
  // Per bucket, not cumulative; the last one is above every bound (+Inf).
  w.Key("counts");
  w.Open('[');
  std::uint64_t total = 0;
  for (std::uint64_t c : h.counts) {
    w.Num(c);
    total += c;
  }
  w.Close(']');
  // As /metrics shows _count: a snapshot taken mid-update may disagree with
  // the buckets by the observations in flight; both show the larger.
  w.Field("count", std::max(total, h.count));
  w.Field("sum_seconds", h.sum_us / 1e6);
  w.Close('}');
}

// Endpoint::CacheReport's fingerprint lines: "  <16 hex> <reason> <count>  <sample>".
void TopQueries(JsonWriter& w, std::string_view report) {
  w.Key("top_queries");
  w.Open('[');
  while (!report.empty()) {
    const size_t end = report.find('\n');
    std::string_view line = report.substr(0, end);
    report = end == std::string_view::npos ? std::string_view() : report.substr(end + 1);
    if (line.size() < 20 || line.substr(0, 2) != "  ") continue;
    line.remove_prefix(2);
    const std::string_view fingerprint = line.substr(0, 16);
    bool hex = true;
    for (char c : fingerprint) hex = hex && std::isxdigit(static_cast<unsigned char>(c));
    if (!hex) continue;
    line.remove_prefix(16);
    auto next_word = [&line] {
      while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
      const size_t space = line.find(' ');
      std::string_view word = line.substr(0, space);
      line = space == std::string_view::npos ? std::string_view() : line.substr(space);
      return word;
    };
    const std::string_view decision = next_word();
    const std::string_view count = next_word();
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    w.Open('{');
    w.Field("fingerprint", fingerprint);
    w.Field("decision", decision);
    w.Key("count");
    w.Num(static_cast<std::uint64_t>(std::strtoull(std::string(count).c_str(), nullptr, 10)));
    w.Field("sample", line);
    w.Close('}');
  }
  w.Close(']');
}

void Database(JsonWriter& w, std::string_view name, const EndpointStats& s, std::size_t pool_max,
              const DashboardExtras& extras) {
  w.Open('{');
  w.Field("name", name);
  w.Key("pool");
  w.Open('{');
  // As hyperpool_pool_connections{state="active"|"idle"}.
  w.Field("active", s.origin_open >= s.origin_idle ? s.origin_open - s.origin_idle : 0);
  w.Field("idle", s.origin_idle);
  w.Field("open", s.origin_open);
  w.Field("lent", s.origin_lent);
  w.Field("max", pool_max);
  w.Field("waiting", s.waiting);
  w.Field("max_wait_seconds", s.max_wait_us / 1e6);
  w.Field("paused", s.pool_paused);
  w.Field("acquire_timeouts", s.acquire_timeouts);
  w.Field("discarded", s.discarded);
  w.Close('}');
  w.Field("sessions", s.sessions);
  w.Field("transactions", s.transactions);
  w.Field("queries", s.queries);
  w.Field("origin_rtt_seconds", s.origin_rtt_us / 1e6);
  w.Key("pins");
  w.Open('{');
  w.Field("pinned_sessions", s.pinned_sessions);
  w.Field("pinned_connections", s.pinned_connections);
  w.Field("rejected", s.pins_rejected);
  w.Field("prepared_sql", s.pins_prepared_sql);
  w.Field("temp_table", s.pins_temp_table);
  w.Field("advisory_lock", s.pins_advisory_lock);
  w.Field("listen", s.pins_listen);
  w.Field("with_hold_cursor", s.pins_with_hold_cursor);
  w.Field("set_role", s.pins_set_role);
  w.Close('}');
  w.Key("cache");
  w.Open('{');
  w.Field("hits", s.cache_hits);
  w.Field("stale_hits", s.cache_stale_hits);
  w.Field("misses", s.cache_misses);
  w.Field("coalesced", s.cache_coalesced);
  w.Field("uncacheable", s.cache_uncacheable);
  w.Field("bypassed", s.cache_bypassed);
  w.Field("stores", s.cache_stores);
  w.Field("evictions", s.cache_evictions);
  w.Field("invalidations", s.cache_invalidations);
  w.Field("writes_seen", s.cache_write_invalidations);
  w.Field("entries", s.cache_entries);
  w.Field("bytes", s.cache_bytes);
  w.Field("watches", s.cache_watches);
  w.Close('}');
  w.Key("histograms");
  w.Open('{');
  Histogram(w, "transaction", s.transaction_time);
  Histogram(w, "acquire_wait", s.acquire_wait);
  w.Close('}');
  auto report = extras.cache_reports.find(std::string(name));
  TopQueries(w, report == extras.cache_reports.end() ? std::string_view() : std::string_view(report->second));
  w.Close('}');
}

}  // namespace

std::string RenderDashboardJson(const ProcessMetrics& m, const DashboardExtras& extras) {
  JsonWriter w;
  w.Open('{');
  w.Field("role", extras.role);
  w.Field("draining", m.draining);
  w.Key("link");
  w.Open('[');
  for (const std::string& line : extras.link) w.Str(line);
  w.Close(']');
  w.Key("client");
  if (m.client) {
    const ClientStats& c = *m.client;
    w.Open('{');
    w.Field("connections", c.sessions);
    w.Field("accepted", c.accepted);
    w.Field("bytes_received", c.bytes_received);
    w.Field("bytes_sent", c.bytes_sent);
    w.Key("states");
    w.Open('{');
    for (const auto& [state, n] : extras.client_states) w.Field(state, n);
    w.Close('}');
    w.Key("histograms");
    w.Open('{');
    Histogram(w, "login", c.login_time);  // as hyperpool_client_login_duration_seconds
    w.Close('}');
    w.Key("cache");
    if (c.cache_enabled) {
      w.Open('{');
      w.Field("hits", c.cache_local_hits);
      w.Field("stores", c.cache_stores);
      w.Field("evictions", c.cache_evictions);
      w.Field("invalidations", c.cache_invalidations);
      w.Field("refused_stale", c.cache_refused_stale);
      w.Field("watch_subscribed", c.cache_watch_subscribed);
      w.Field("entries", c.cache_entries);
      w.Field("bytes", c.cache_bytes);
      w.Close('}');
    } else {
      w.Null();
    }
    w.Close('}');
  } else {
    w.Null();
  }
  w.Key("databases");
  w.Open('[');
  for (const auto& [name, stats] : m.databases) Database(w, name, stats, stats.pool_max_size, extras);
  if (m.databases.empty() && m.endpoint) Database(w, "", *m.endpoint, m.pool_max, extras);
  w.Close(']');
  w.Close('}');
  return w.text();
}

}  // namespace hyperpool::ops
