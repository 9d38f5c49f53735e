// The demo's workload (see demo_workload.h).

#include "cli/demo_workload.h"

#include <chrono>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "absl/status/status.h"

namespace hyperpool::cli::demo {
namespace {

using Clock = std::chrono::steady_clock;

// Hot accounts every connection reads by primary key (the same ids and texts
// in every connection, so the reads are cacheable).
constexpr int kHotIds[] = {42, 1337, 4242};
constexpr int kRangeFirst = 100;

// The array-type lookup postgres.js runs once per connection before the
// app's first query (its fetchArrayTypes, text as in postgres.js 3.4).
constexpr const char* kTypeLookup = R"(
      select b.oid, b.typarray
      from pg_catalog.pg_type a
      left join pg_catalog.pg_type b on b.oid = a.typelem
      where a.typcategory = 'A'
      group by b.oid, b.typarray
      order by b.oid
    )";

std::string Tags(const PgResult& r) {
  std::string tags;
  for (const std::string& t : r.command_tags) tags += (tags.empty() ? "" : ", ") + t;
  return tags;
}

}  // namespace

const char* ProtocolName(Protocol protocol) { return protocol == Protocol::kExtended ? "extended" : "simple"; }

std::vector<Statement> Workload::For(int i) const {
  std::vector<Statement> out;
  for (int id : kHotIds) {
    out.push_back({fmt::format("SELECT id, balance, name FROM {}.accounts WHERE id = {}", schema_, id),
                   fmt::format("SELECT id, balance, name FROM {}.accounts WHERE id = $1", schema_),
                   {std::to_string(id)},
                   true,
                   [id](const PgResult& r, Protocol) -> std::string {
                     if (r.rows.size() != 1 || r.rows[0].size() != 3 || r.rows[0][0] != std::to_string(id)) {
                       return fmt::format("expected account {} (1 row), got {} rows", id, r.rows.size());
                     }
                     return "";
                   }});
  }
  out.push_back({fmt::format("SELECT id, balance FROM {}.accounts WHERE id BETWEEN {} AND {} ORDER BY id", schema_,
                             kRangeFirst, kRangeFirst + kRangeRows - 1),
                 fmt::format("SELECT id, balance FROM {}.accounts WHERE id BETWEEN $1 AND $2 ORDER BY id", schema_),
                 {std::to_string(kRangeFirst), std::to_string(kRangeFirst + kRangeRows - 1)},
                 true,
                 [](const PgResult& r, Protocol) -> std::string {
                   if (r.rows.size() != kRangeRows || r.rows.front()[0] != std::to_string(kRangeFirst)) {
                     return fmt::format("expected {} rows from id {}, got {}", kRangeRows, kRangeFirst, r.rows.size());
                   }
                   return "";
                 }});
  // The write updates the branches table, as TPC-B does, so that the cached
  // reads of accounts stay valid under hyperpool's per-table invalidation.
  // Simple: one transaction sent as ONE string (one round trip). Extended: a
  // single statement can be one Parse only, so the UPDATE in its implicit
  // transaction (what postgres.js sends for a lone sql`update ...`).
  out.push_back({fmt::format("BEGIN; UPDATE {}.branches SET balance = balance + 1 WHERE id = {}; COMMIT", schema_,
                             i % kBranches + 1),
                 fmt::format("UPDATE {}.branches SET balance = balance + 1 WHERE id = $1", schema_),
                 {std::to_string(i % kBranches + 1)},
                 false,
                 [](const PgResult& r, Protocol protocol) -> std::string {
                   std::vector<std::string> want = protocol == Protocol::kSimple
                                                       ? std::vector<std::string>{"BEGIN", "UPDATE 1", "COMMIT"}
                                                       : std::vector<std::string>{"UPDATE 1"};
                   if (r.command_tags != want) return fmt::format("unexpected command tags [{}]", Tags(r));
                   return "";
                 }});
  return out;
}

int Workload::Uncacheable() const {
  int n = 0;
  for (const Statement& s : For(0)) n += s.cacheable ? 0 : 1;
  return n;
}

int Workload::ClientRoundTrips(Protocol protocol) const {
  if (protocol == Protocol::kSimple) return Statements();
  int n = 1;  // the type lookup
  for (const Statement& s : For(0)) n += s.parameters.empty() ? 1 : 2;
  return n;
}

absl::Status Workload::LoadTables(PgClient& client, const std::function<void()>& on_schema_created) const {
  for (const std::string& sql : {
           fmt::format("CREATE SCHEMA {}", schema_),
           fmt::format("CREATE TABLE {}.accounts (id int PRIMARY KEY, balance bigint NOT NULL, name text NOT NULL)",
                       schema_),
           fmt::format("INSERT INTO {}.accounts SELECT g, 1000 + g % 97, 'account ' || g FROM generate_series(1, {}) g",
                       schema_, kAccounts),
           fmt::format("CREATE TABLE {}.branches (id int PRIMARY KEY, balance bigint NOT NULL)", schema_),
           fmt::format("INSERT INTO {}.branches SELECT g, 0 FROM generate_series(1, {}) g", schema_, kBranches),
           fmt::format("ANALYZE {}.accounts", schema_),
           fmt::format("ANALYZE {}.branches", schema_),
       }) {
    absl::StatusOr<PgResult> r = client.Query(sql);
    if (!r.ok()) return absl::Status(r.status().code(), fmt::format("{} -> {}", sql, std::string(r.status().message())));
    if (sql.rfind("CREATE SCHEMA", 0) == 0) on_schema_created();
  }
  return absl::OkStatus();
}

absl::StatusOr<IterationResult> RunConnection(const PgLogin& login, const Workload& workload, Protocol protocol,
                                              int index) {
  std::vector<Statement> statements = workload.For(index);
  Clock::time_point start = Clock::now();
  absl::StatusOr<std::unique_ptr<PgClient>> client = PgClient::Connect(login);
  if (!client.ok()) {
    return absl::Status(client.status().code(), fmt::format("login: {}", std::string(client.status().message())));
  }
  int statement_number = 0;
  if (protocol == Protocol::kExtended) {
    absl::StatusOr<PgResult> types = (*client)->PreparedQuery(fmt::format("s{}", ++statement_number), kTypeLookup, {});
    if (!types.ok()) {
      return absl::Status(types.status().code(),
                          fmt::format("type lookup -> {}", std::string(types.status().message())));
    }
    if (types->rows.empty()) return absl::DataLossError("type lookup -> no rows");
  }
  for (const Statement& s : statements) {
    const std::string& sql = protocol == Protocol::kSimple ? s.simple_sql : s.extended_sql;
    absl::StatusOr<PgResult> result = protocol == Protocol::kSimple
                                          ? (*client)->Query(sql)
                                          : (*client)->PreparedQuery(fmt::format("s{}", ++statement_number), sql,
                                                                     s.parameters);
    if (!result.ok()) {
      return absl::Status(result.status().code(), fmt::format("{} -> {}", sql, std::string(result.status().message())));
    }
    std::string wrong = s.check(*result, protocol);
    if (!wrong.empty()) return absl::DataLossError(fmt::format("{} -> wrong result: {}", sql, wrong));
  }
  IterationResult out;
  out.login_round_trips = (*client)->login_round_trips();
  out.round_trips = (*client)->round_trips();
  out.auth_method = (*client)->auth_method();
  (*client)->Close();
  out.ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return out;
}

}  // namespace hyperpool::cli::demo
