#pragma once
// pg_cancel_backend / pg_terminate_backend aimed at a pid hyperpool handed
// out (docs/architecture.md, "Backend pids"), with no I/O (unit-tested in
// tests/unit/endpoint/backend_signal_test.cc).
//
// A driver's BackendKeyData pid is the Client's, not an origin backend's. A
// simple Query that is exactly `SELECT pg_terminate_backend(N)` (optionally
// with a timeout argument) or `SELECT pg_cancel_backend(N)`, N a constant,
// is recognised here; the session acts on the hyperpool session that holds
// pid N and answers as PostgreSQL would, or sends it on unchanged when no
// session holds N (then N is an origin pid the app read from
// pg_backend_pid() or pg_stat_activity). So are the extended-protocol forms
// below: the statement parsed with its Bind in one batch, or bound in a
// later batch.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hyperpool::endpoint {

struct BackendSignal {
  bool terminate = false;  // pg_terminate_backend; else pg_cancel_backend
  std::int32_t pid = 0;
  std::string column;  // the result column's name: an `AS` alias, else the function's
};

// The call in `sql`, if `sql` is exactly one such SELECT (any case and
// spacing, an optional trailing semicolon, an optional `AS name`).
std::optional<BackendSignal> ParseBackendSignal(std::string_view sql);

// The extended-protocol form (psycopg's `select pg_terminate_backend(%s::int)`):
// a Parse (`parse_payload`) of such a SELECT whose argument is a constant,
// or `$1` (with optional `::type` casts) followed in the same batch (`rest`)
// by a Bind of that statement with one parameter, a text or binary integer.
std::optional<BackendSignal> ParseBackendSignalUnit(std::string_view parse_payload, std::string_view rest);

// A Bind in a later batch than the Parse of its statement (asyncpg prepares
// with Parse + Describe + Flush, then sends Bind + Execute + Sync):
// `parse_payload` is the Parse the client made the Bind's statement with
// (the session remembers it by name, forgotten on Close, DEALLOCATE and
// re-Parse), `batch` starts at the Bind. The signal if that Parse is such a
// SELECT with `$1`, the Bind carries one integer pid, and the batch up to
// its Sync is only the Bind (unnamed portal), Describe / Execute of the
// unnamed portal and Flush: what AppendBackendSignalBatchAnswer answers.
std::optional<BackendSignal> ParseBackendSignalBind(std::string_view parse_payload, std::string_view batch);

// Answers such a batch (the Bind and what follows; also the Bind after a
// named Parse of such a statement) as PostgreSQL would, into `out`, up to (not
// including) the Sync's ReadyForQuery: BindComplete; for a Describe of the
// portal the column in the Bind's result format; for an Execute the row `t`
// (binary: the byte 1) and SELECT 1, or PortalSuspended with a row limit of
// 1 (then SELECT 0). Returns the batch's length in bytes (Sync included),
// or 0 with nothing appended if `batch` is not such a batch (whole).
std::size_t AppendBackendSignalBatchAnswer(std::string_view batch, const BackendSignal& signal, std::string& out);

// The Parse that stands in for such a Parse once its session has been
// signalled: the same name and parameter types, its text
// `SELECT ($1...)::int4 IS NOT NULL AS <function>` (for a constant:
// `SELECT true AS <function>`), so the origin answers the
// client's Bind/Describe/Execute with the column and the `t` PostgreSQL
// would. Empty if `parse_payload` is not such a Parse.
std::string BackendSignalStandIn(std::string_view parse_payload);

// The answer to the SELECT up to (not including) ReadyForQuery: one boolean
// column named after the function, one row with `result`.
void AppendBackendSignalAnswer(std::string& out, const BackendSignal& signal, bool result);

}  // namespace hyperpool::endpoint
