#pragma once
// When an origin connection may leave its client: a pure function, so every
// combination of inputs can be tested (tests/unit/pool/release_policy_test.cc).
//
// The rule it enforces (as PgBouncer's release_server): a connection goes back
// to the pool only when the origin said ReadyForQuery 'I' and nothing is
// outstanding, no session state is pinned to it, and it is healthy. Anything
// that might carry one client's state to another client closes the connection
// instead: a reconnect costs milliseconds, a leak costs correctness.

#include <cstddef>
#include <string_view>

#include "hyperpool/options.h"

namespace hyperpool {

// The transaction status byte of the last ReadyForQuery ('Z') from the origin
// (protocol section 55.7, "ReadyForQuery").
enum class TransactionStatus : char {
  kNone = 0,               // no ReadyForQuery seen yet on this connection
  kIdle = 'I',             // not in a transaction block
  kInTransaction = 'T',    // in a transaction block
  kFailed = 'E',           // in a failed transaction block (only ROLLBACK works)
};

// Why a connection must stay with its client beyond the current transaction
// (transaction mode), i.e. session state the next client must never see.
enum class PinReason {
  kNone,              // nothing pins it
  kPreparedSql,       // PREPARE (SQL-level prepared statement) outlives the transaction
  kTempTable,         // CREATE TEMP TABLE (ON COMMIT PRESERVE/DELETE ROWS)
  kAdvisoryLock,      // a session-level pg_advisory_lock is held
  kListen,            // LISTEN: notifications arrive between transactions
  kWithHoldCursor,    // DECLARE ... WITH HOLD
  kSetRole,           // SET ROLE / SET SESSION AUTHORIZATION
  kSessionSetting,    // a session-level SET (not SET LOCAL) that is not tracked otherwise
  kCopy,              // COPY in progress: the protocol is mid-stream
  kOther,             // anything else the session decided makes the state unshareable
};

// The last pin reason value, for iterating over all of them in tests.
inline constexpr PinReason kLastPinReason = PinReason::kOther;

std::string_view PinReasonName(PinReason reason);

// What to do with a lent connection.
enum class ReleaseDecision {
  kKeep,              // stay with the client (more of its unit of work follows)
  kReturn,            // back to the idle list for the next client
  kResetThenReturn,   // the pool's reset hook (DISCARD ALL) runs first; on success it returns
  kRollbackThenReturn,  // the pool's rollback hook (ROLLBACK, ending at 'I') runs first; on success it returns
  kClose,             // close it; the pool opens a replacement on demand
};

std::string_view ReleaseDecisionName(ReleaseDecision decision);

struct ReleaseInputs {
  PoolMode mode = PoolMode::kTransaction;
  TransactionStatus status = TransactionStatus::kNone;
  // Syncs and simple Queries sent whose ReadyForQuery has not arrived yet.
  std::size_t outstanding = 0;
  PinReason pin = PinReason::kNone;
  bool client_gone = false;         // the client's session ended (cleanly or not)
  bool broken = false;              // I/O error, protocol error, or terminated by the origin
  bool lifetime_exceeded = false;   // older than PoolOptions::max_lifetime
};

// The decision for `in`. Guarantees (tested over every input):
//  - broken -> kClose;
//  - kReturn / kResetThenReturn only with status 'I', outstanding == 0,
//    no pin, and lifetime not exceeded;
//  - kRollbackThenReturn only for a gone client in transaction mode with
//    status 'T' or 'E', outstanding == 0, no pin, lifetime not exceeded;
//  - a gone client never gets kKeep;
//  - a present client in session mode, or pinned, or mid-transaction gets kKeep.
ReleaseDecision DecideRelease(const ReleaseInputs& in);

}  // namespace hyperpool
