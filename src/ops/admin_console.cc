#include "ops/admin_console.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <functional>

#include <fmt/format.h>

#include "absl/strings/numbers.h"
#include "protocol/backend_messages.h"
#include "protocol/sqlstate.h"

namespace hyperpool::ops {

namespace pr = protocol;

namespace {

constexpr pr::Oid kTextOid = 25;

// One result set: every column is text (psql and \x print it as-is).
class Result {
 public:
  explicit Result(std::vector<std::string_view> columns) : columns_(std::move(columns)) {}

  void Row(std::vector<std::string> values) { rows_.push_back(std::move(values)); }

  void AppendTo(std::string& out, std::string_view tag = "SHOW") const {
    pr::RowDescription description;
    for (std::string_view name : columns_) {
      pr::FieldDescription field;
      field.name = name;
      field.type_oid = kTextOid;
      field.type_size = -1;
      description.fields.push_back(field);
    }
    pr::Encode(description, out);
    std::vector<pr::NullableValue> values;
    for (const auto& row : rows_) {
      values.clear();
      for (const std::string& v : row) values.emplace_back(std::string_view(v));
      pr::EncodeDataRow(values, out);
    }
    pr::Encode(pr::CommandComplete{tag}, out);
  }

 private:
  std::vector<std::string_view> columns_;
  std::vector<std::vector<std::string>> rows_;
};

std::string N(std::uint64_t v) { return fmt::format("{}", v); }

std::string FormatTime(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

void Complete(std::string& out, std::string_view tag) { pr::Encode(pr::CommandComplete{tag}, out); }

void Error(std::string& out, std::string_view sqlstate, std::string_view message, std::string_view detail = {}) {
  pr::EncodeErrorResponse(out, "ERROR", sqlstate, message, detail);
}

// Sessions of `database` that are applications' (not admin consoles, not mid-login).
std::size_t AppClients(const AdminSnapshot& s, std::string_view database, std::string_view state) {
  return static_cast<std::size_t>(std::count_if(s.clients.begin(), s.clients.end(), [&](const ClientSessionInfo& c) {
    return c.database == database && c.state == state;
  }));
}

// One per database: s.pools, or the one database of s.database.
std::vector<AdminSnapshot::Pool> Pools(const AdminSnapshot& s) {
  if (!s.pools.empty()) return s.pools;
  return {{s.database, s.pool_mode, s.endpoint.value_or(EndpointStats{})}};
}

void ShowPools(const AdminSnapshot& s, std::string& out) {
  Result r({"database", "user", "cl_active", "cl_waiting", "sv_active", "sv_idle", "sv_used", "sv_login", "maxwait",
            "maxwait_us", "pool_mode", "pool_size", "paused"});
  for (const AdminSnapshot::Pool& pool : Pools(s)) {
    const EndpointStats& e = pool.endpoint;
    const std::size_t waiting = e.waiting;
    const std::size_t active = AppClients(s, pool.database, "active") + AppClients(s, pool.database, "idle");
    const std::size_t login =
        e.origin_open >= e.origin_idle + e.origin_lent ? e.origin_open - e.origin_idle - e.origin_lent : 0;
    // maxwait (s) and maxwait_us (the rest, in µs), as PgBouncer splits them:
    // how long the longest-waiting unit of work has waited for a connection.
    r.Row({pool.database, s.user, N(active >= waiting ? active - waiting : 0), N(waiting), N(e.origin_lent),
           N(e.origin_idle), "0", N(login), N(e.max_wait_us / 1000000), N(e.max_wait_us % 1000000), pool.pool_mode,
           N(e.pool_max_size), e.pool_paused ? "yes" : "no"});
  }
  r.AppendTo(out);
}

void ShowClients(const AdminSnapshot& s, std::string& out) {
  Result r({"type", "id", "user", "database", "state", "addr", "port", "connect_time"});
  for (const ClientSessionInfo& c : s.clients) {
    std::string addr = c.address;
    std::string port;
    if (std::size_t colon = addr.rfind(':'); colon != std::string::npos) {
      port = addr.substr(colon + 1);
      addr.resize(colon);
    }
    r.Row({"C", N(c.id), c.user, c.database, c.state, addr, port, FormatTime(c.connect_time)});
  }
  r.AppendTo(out);
}

// PgBouncer's columns where they mean the same; `user` is the app user the
// pool serves (the origin role is in SHOW CONFIG's origin).
void ShowServers(const AdminSnapshot& s, const std::vector<OriginServerInfo>& servers, std::string& out) {
  Result r({"type", "user", "database", "state", "remote_pid", "connect_time", "pinned", "close_needed"});
  for (const OriginServerInfo& server : servers) {
    r.Row({"S", s.user, server.database.empty() ? s.database : server.database, server.state, N(static_cast<std::uint64_t>(server.backend_pid)),
           server.connect_time == std::chrono::system_clock::time_point{} ? "" : FormatTime(server.connect_time),
           server.pinned ? "yes" : "no", server.retired ? "1" : "0"});
  }
  r.AppendTo(out);
}

void ShowStats(const AdminSnapshot& s, std::string& out) {
  Result r({"database", "total_xact_count", "total_query_count", "total_received", "total_sent", "total_xact_time",
            "total_wait_time", "avg_xact_time", "avg_wait_time", "p99_xact_time", "p99_wait_time"});
  const ClientStats c = s.client.value_or(ClientStats{});
  const std::vector<AdminSnapshot::Pool> pools = Pools(s);
  for (const AdminSnapshot::Pool& pool : pools) {
    const EndpointStats& e = pool.endpoint;
    const auto& x = e.transaction_time;
    const auto& w = e.acquire_wait;
    // The Client counts bytes for all its databases together: with several,
    // they are on no database's row (0).
    const bool one = pools.size() == 1;
    r.Row({pool.database, N(e.transactions), N(e.queries), N(one ? c.bytes_received : 0), N(one ? c.bytes_sent : 0),
           N(x.sum_us), N(w.sum_us), N(x.count ? x.sum_us / x.count : 0), N(w.count ? w.sum_us / w.count : 0),
           N(HistogramPercentileUs(x, 99)), N(HistogramPercentileUs(w, 99))});
  }
  r.AppendTo(out);
}

void ShowCache(const AdminSnapshot& s, std::string& out) {
  Result tiers({"tier", "hits", "stale_hits", "misses", "stores", "evictions", "invalidations", "entries", "bytes"});
  if (s.endpoint) {
    const EndpointStats& e = *s.endpoint;
    tiers.Row({"endpoint", N(e.cache_hits), N(e.cache_stale_hits), N(e.cache_misses), N(e.cache_stores),
               N(e.cache_evictions), N(e.cache_invalidations), N(e.cache_entries), N(e.cache_bytes)});
  }
  if (s.client && s.client->cache_enabled) {
    const ClientStats& c = *s.client;
    // The client tier has no miss counter: a local miss goes on to the endpoint tier.
    tiers.Row({"client", N(c.cache_local_hits), "0", "", N(c.cache_stores), N(c.cache_evictions),
               N(c.cache_invalidations), N(c.cache_entries), N(c.cache_bytes)});
  }
  tiers.AppendTo(out);
  // The endpoint tier's top fingerprints ("  %016x reason count sample").
  Result top({"fingerprint", "decision", "count", "query"});
  std::string_view rest = s.cache_report;
  while (!rest.empty()) {
    std::size_t eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    if (line.substr(0, 2) != "  ") continue;
    std::vector<std::string> fields;
    std::size_t pos = 0;
    for (int i = 0; i < 3; ++i) {
      pos = line.find_first_not_of(' ', pos);
      if (pos == std::string_view::npos) break;
      std::size_t end = line.find(' ', pos);
      fields.emplace_back(line.substr(pos, end - pos));
      pos = end;
    }
    if (fields.size() != 3 || pos == std::string_view::npos) continue;
    pos = line.find_first_not_of(' ', pos);
    fields.emplace_back(pos == std::string_view::npos ? "" : std::string(line.substr(pos)));
    top.Row(std::move(fields));
  }
  top.AppendTo(out);
  if (s.endpoint && s.endpoint->wal_state != "off") {
    // The change feed (--wal-invalidation): a third result set, after the
    // fingerprints, so readers of the first two are unaffected.
    const EndpointStats& e = *s.endpoint;
    Result wal({"wal_feed", "serving", "lag_ms", "transactions", "invalidations", "last_message_ms", "reconnects",
                "bytes"});
    wal.Row({e.wal_state, e.wal_serving ? "yes" : "no", N(e.wal_lag_ms), N(e.wal_transactions),
             N(e.wal_invalidations), N(e.wal_last_message_ms), N(e.wal_reconnects), N(e.wal_bytes)});
    wal.AppendTo(out);
  }
}

void ShowPins(const AdminSnapshot& s, std::string& out) {
  Result r({"reason", "total", "current"});
  const EndpointStats e = s.endpoint.value_or(EndpointStats{});
  r.Row({"prepared_sql", N(e.pins_prepared_sql), ""});
  r.Row({"temp_table", N(e.pins_temp_table), ""});
  r.Row({"advisory_lock", N(e.pins_advisory_lock), ""});
  r.Row({"listen", N(e.pins_listen), ""});
  r.Row({"with_hold_cursor", N(e.pins_with_hold_cursor), ""});
  r.Row({"set_role", N(e.pins_set_role), ""});
  r.Row({"all", N(e.pins_total), N(e.pinned_sessions)});
  r.Row({"rejected (53300)", N(e.pins_rejected), ""});
  r.Row({"pinned_idle_timeouts", N(e.pinned_idle_timeouts), ""});
  r.AppendTo(out);
}

void ShowConfig(const AdminSnapshot& s, std::string& out) {
  Result r({"key", "value", "changeable"});
  for (const auto& row : s.config) r.Row({row.key, row.value, row.reloadable ? "yes" : "no"});
  r.AppendTo(out);
}

void ShowHelp(std::string& out) {
  Result r({"command"});
  for (const std::string& c : AdminCommands()) r.Row({c});
  r.AppendTo(out);
}

std::string Upper(std::string_view word) {
  std::string up(word);
  for (char& ch : up) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return up;
}

std::vector<std::string_view> Words(std::string_view text) {
  std::vector<std::string_view> words;
  std::size_t pos = 0;
  while (true) {
    pos = text.find_first_not_of(" \t\r\n", pos);
    if (pos == std::string_view::npos) break;
    std::size_t end = text.find_first_of(" \t\r\n", pos);
    words.push_back(text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
    pos = end;
  }
  return words;
}

void UnknownCommand(std::string_view command, std::string& out) {
  std::string list;
  for (const std::string& c : AdminCommands()) list += (list.empty() ? "" : ", ") + c;
  Error(out, kSqlStateSyntaxError, fmt::format("unknown admin command \"{}\"", std::string(command.substr(0, 200))),
        fmt::format("The admin console understands: {}.", list));
}

// PAUSE/RESUME/RECONNECT take an optional database: one of those served.
bool CheckDatabase(const std::vector<std::string_view>& words, AdminBackend& backend, std::string& out) {
  if (words.size() > 2) {
    Error(out, kSqlStateSyntaxError, fmt::format("{} takes at most one database name", Upper(words[0])));
    return false;
  }
  if (words.size() == 2) {
    const std::vector<AdminSnapshot::Pool> pools = Pools(backend.Snapshot());
    if (std::none_of(pools.begin(), pools.end(), [&](const AdminSnapshot::Pool& p) { return p.database == words[1]; })) {
      Error(out, kSqlStateInvalidCatalog, fmt::format("database \"{}\" does not exist", std::string(words[1].substr(0, 200))));
      return false;
    }
  }
  return true;
}

void ExecuteOne(std::string_view command, AdminBackend& backend, std::string& out) {
  const std::vector<std::string_view> words = Words(command);
  const std::string verb = Upper(words[0]);
  if (verb == "SHOW") {
    const std::string what = words.size() == 2 ? Upper(words[1]) : "";
    using Show = void (*)(const AdminSnapshot&, std::string&);
    static const std::pair<const char*, Show> kShows[] = {
        {"POOLS", ShowPools}, {"CLIENTS", ShowClients}, {"STATS", ShowStats},
        {"CACHE", ShowCache}, {"PINS", ShowPins},       {"CONFIG", ShowConfig},
    };
    for (const auto& [name, show] : kShows) {
      if (what == name) {
        show(backend.Snapshot(), out);
        return;
      }
    }
    if (what == "SERVERS") {
      ShowServers(backend.Snapshot(), backend.Servers(), out);
      return;
    }
    if (what == "VERSION") {
      Result r({"version"});
      r.Row({backend.Snapshot().version});
      r.AppendTo(out);
      return;
    }
    if (what == "HELP") {
      ShowHelp(out);
      return;
    }
    UnknownCommand(command, out);
    return;
  }
  if (verb == "PAUSE" || verb == "RESUME" || verb == "RECONNECT") {
    if (!CheckDatabase(words, backend, out)) return;
    const std::string_view database = words.size() == 2 ? words[1] : std::string_view();
    if (verb == "PAUSE") backend.Pause(database);
    if (verb == "RESUME") backend.Resume(database);
    if (verb == "RECONNECT") backend.Reconnect(database);
    Complete(out, verb);
    return;
  }
  if (verb == "KILL_CLIENT") {
    std::uint64_t id = 0;
    if (words.size() != 2 || !absl::SimpleAtoi(std::string(words[1]), &id)) {
      Error(out, kSqlStateSyntaxError, "KILL_CLIENT takes one client id (the id column of SHOW CLIENTS)");
      return;
    }
    if (!backend.KillClient(id)) {
      Error(out, kSqlStateUndefinedObject, fmt::format("no client with id {}", id));
      return;
    }
    Complete(out, "KILL_CLIENT");
    return;
  }
  if ((verb == "RELOAD" || verb == "SHUTDOWN") && words.size() == 1) {
    if (verb == "SHUTDOWN") {
      backend.Shutdown();
      Complete(out, "SHUTDOWN");
      return;
    }
    absl::Status reloaded = backend.Reload();
    if (!reloaded.ok()) {
      Error(out, "F0000", "the config file was rejected; the running configuration is unchanged",
            std::string(reloaded.message()));
      return;
    }
    Complete(out, "RELOAD");
    return;
  }
  UnknownCommand(command, out);
}

}  // namespace

const std::vector<std::string>& AdminCommands() {
  static const std::vector<std::string> kCommands = {
      "SHOW POOLS", "SHOW CLIENTS", "SHOW SERVERS",    "SHOW STATS",   "SHOW CACHE", "SHOW PINS",
      "SHOW CONFIG", "SHOW VERSION", "SHOW HELP",      "PAUSE [db]",   "RESUME [db]", "RECONNECT [db]",
      "KILL_CLIENT id", "RELOAD",    "SHUTDOWN",
  };
  return kCommands;
}

std::string ExecuteAdminQuery(std::string_view query, AdminBackend& backend) {
  std::string out;
  bool any = false;
  std::size_t pos = 0;
  while (pos <= query.size()) {
    std::size_t semi = query.find(';', pos);
    std::string_view command = query.substr(pos, semi == std::string_view::npos ? std::string_view::npos : semi - pos);
    pos = semi == std::string_view::npos ? query.size() + 1 : semi + 1;
    if (Words(command).empty()) continue;
    any = true;
    const std::size_t before = out.size();
    ExecuteOne(command, backend, out);
    // As PostgreSQL: the first error ends the query string.
    if (out.size() > before && out[before] == 'E') break;
  }
  if (!any) pr::Encode(pr::EmptyQueryResponse{}, out);
  return out;
}

std::uint64_t HistogramPercentileUs(const LatencyHistogramSnapshot& h, double p) {
  if (h.count == 0) return 0;
  const double rank = p / 100.0 * static_cast<double>(h.count);
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < h.counts.size(); ++i) {
    seen += h.counts[i];
    if (static_cast<double>(seen) >= rank) {
      return kLatencyBucketBoundsUs[std::min(i, kLatencyBucketBoundsUs.size() - 1)];
    }
  }
  return kLatencyBucketBoundsUs.back();
}

}  // namespace hyperpool::ops
