#include "pool/release_policy.h"

namespace hyperpool {

ReleaseDecision DecideRelease(const ReleaseInputs& in) {
  // A broken connection's state is unknown: nothing about it can be trusted.
  if (in.broken) return ReleaseDecision::kClose;

  const bool at_rest = in.status == TransactionStatus::kIdle && in.outstanding == 0;

  if (in.client_gone) {
    // Pinned session state (temp tables, locks, LISTEN, roles, a COPY
    // mid-stream) must never reach another client; closing drops all of it.
    if (in.pin != PinReason::kNone) return ReleaseDecision::kClose;
    if (in.lifetime_exceeded) return ReleaseDecision::kClose;
    // Left inside a transaction block with nothing running (a driver that
    // opens transactions implicitly, psycopg's default, closing without
    // COMMIT): a ROLLBACK ends it and undoes everything the block did to
    // the session (SET, SET LOCAL; what survives a rollback pins), so the
    // connection is as it was lent, without a new origin login (fork and
    // SCRAM, milliseconds) for the next client. In transaction mode only:
    // a session-mode client may have left untracked state behind.
    const bool in_block = in.status == TransactionStatus::kInTransaction || in.status == TransactionStatus::kFailed;
    if (in_block && in.outstanding == 0 && in.mode == PoolMode::kTransaction) {
      return ReleaseDecision::kRollbackThenReturn;
    }
    // With results still coming (or no ReadyForQuery yet): closing is the
    // safe choice. A ROLLBACK would first have to drain (or cancel) whatever
    // is outstanding, possibly a long query, while the connection stays
    // unusable; the origin rolls back by itself when the socket closes, and
    // the pool opens a replacement only if there is demand for it.
    if (!at_rest) return ReleaseDecision::kClose;
    // A session-mode client may have left any session state behind (SET,
    // PREPARE, ...) that we did not track, so reset before sharing. In
    // transaction mode every unit of work ended at 'I' and anything
    // session-scoped pinned it, so there is nothing to reset.
    return in.mode == PoolMode::kSession ? ReleaseDecision::kResetThenReturn : ReleaseDecision::kReturn;
  }

  // The client is still here.
  if (in.mode == PoolMode::kSession) return ReleaseDecision::kKeep;
  if (in.pin != PinReason::kNone) return ReleaseDecision::kKeep;
  if (!at_rest) return ReleaseDecision::kKeep;
  if (in.lifetime_exceeded) return ReleaseDecision::kClose;
  return ReleaseDecision::kReturn;
}

std::string_view PinReasonName(PinReason reason) {
  switch (reason) {
    case PinReason::kNone:
      return "none";
    case PinReason::kPreparedSql:
      return "prepared SQL statement";
    case PinReason::kTempTable:
      return "temporary table";
    case PinReason::kAdvisoryLock:
      return "advisory lock";
    case PinReason::kListen:
      return "LISTEN";
    case PinReason::kWithHoldCursor:
      return "WITH HOLD cursor";
    case PinReason::kSetRole:
      return "SET ROLE / SESSION AUTHORIZATION";
    case PinReason::kSessionSetting:
      return "session-level SET";
    case PinReason::kCopy:
      return "COPY in progress";
    case PinReason::kOther:
      return "other session state";
  }
  return "unknown";
}

std::string_view ReleaseDecisionName(ReleaseDecision decision) {
  switch (decision) {
    case ReleaseDecision::kKeep:
      return "keep";
    case ReleaseDecision::kReturn:
      return "return";
    case ReleaseDecision::kResetThenReturn:
      return "reset-then-return";
    case ReleaseDecision::kRollbackThenReturn:
      return "rollback-then-return";
    case ReleaseDecision::kClose:
      return "close";
  }
  return "unknown";
}

}  // namespace hyperpool
