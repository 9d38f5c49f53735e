#pragma once
// Pieces of the Endpoint session that need no I/O, kept apart so they can be
// unit-tested directly: recognising the statements that end a transaction
// (for the failed-transaction emulation) and rewriting an origin's FATAL
// error into an ERROR (so a driver does not think its own connection died).

#include <string>
#include <string_view>

namespace hyperpool::endpoint {

// True if `sql` is one statement that ends a transaction block: ROLLBACK,
// ABORT, COMMIT or END (optionally followed by WORK or TRANSACTION, "AND [NO]
// CHAIN", a trailing ';' and whitespace/comments), case-insensitively. In a
// failed transaction PostgreSQL answers all of these with "ROLLBACK".
// "ROLLBACK TO SAVEPOINT" and "ROLLBACK PREPARED" are not.
bool IsTransactionEnd(std::string_view sql);

// Given the payload of an ErrorResponse, appends an ErrorResponse frame to
// `out` with the same fields but severity ERROR if it was FATAL or PANIC.
// Returns false (appending nothing) if the payload does not decode or the
// severity is not FATAL/PANIC.
bool AppendFatalAsError(std::string_view error_payload, std::string& out);

}  // namespace hyperpool::endpoint
