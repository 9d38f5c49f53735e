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
// pg_backend_pid() or pg_stat_activity).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hyperpool::endpoint {

struct BackendSignal {
  bool terminate = false;  // pg_terminate_backend; else pg_cancel_backend
  std::int32_t pid = 0;
};

// The call in `sql`, if `sql` is exactly one such SELECT (any case and
// spacing, an optional trailing semicolon, no column alias).
std::optional<BackendSignal> ParseBackendSignal(std::string_view sql);

// The extended-protocol form (psycopg's `select pg_terminate_backend(%s::int)`):
// a Parse (`parse_payload`) of such a SELECT whose argument is a constant,
// or `$1` (with optional `::type` casts) followed in the same batch (`rest`)
// by a Bind of that statement with one parameter, a text or binary integer.
std::optional<BackendSignal> ParseBackendSignalUnit(std::string_view parse_payload, std::string_view rest);

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
