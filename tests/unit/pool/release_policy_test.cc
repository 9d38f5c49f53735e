#include "pool/release_policy.h"

#include <cstddef>
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/generators/catch_generators_range.hpp>

namespace hyperpool {
namespace {

std::string Describe(const ReleaseInputs& in) {
  std::string s = in.mode == PoolMode::kSession ? "session" : "transaction";
  s += " status=";
  s += in.status == TransactionStatus::kNone ? '-' : static_cast<char>(in.status);
  s += " outstanding=" + std::to_string(in.outstanding);
  s += " pin=" + std::string(PinReasonName(in.pin));
  s += in.client_gone ? " client-gone" : "";
  s += in.broken ? " broken" : "";
  s += in.lifetime_exceeded ? " lifetime-exceeded" : "";
  return s;
}

// Every combination of inputs (outstanding 0, 1 and 2 stand for "none",
// "one", "several").
TEST_CASE("release policy invariants hold over the full input product") {
  ReleaseInputs in;
  in.mode = GENERATE(PoolMode::kTransaction, PoolMode::kSession);
  in.status = GENERATE(TransactionStatus::kNone, TransactionStatus::kIdle, TransactionStatus::kInTransaction,
                       TransactionStatus::kFailed);
  in.outstanding = GENERATE(std::size_t{0}, std::size_t{1}, std::size_t{2});
  in.pin = static_cast<PinReason>(GENERATE(range(0, static_cast<int>(kLastPinReason) + 1)));
  in.client_gone = GENERATE(false, true);
  in.broken = GENERATE(false, true);
  in.lifetime_exceeded = GENERATE(false, true);

  const ReleaseDecision d = DecideRelease(in);
  CAPTURE(Describe(in), ReleaseDecisionName(d));
  const bool at_rest = in.status == TransactionStatus::kIdle && in.outstanding == 0;
  const bool shares = d == ReleaseDecision::kReturn || d == ReleaseDecision::kResetThenReturn;

  // Broken always closes.
  if (in.broken) CHECK(d == ReleaseDecision::kClose);
  // Never back to the pool with something outstanding or outside 'I'.
  if (shares) {
    CHECK(in.outstanding == 0);
    CHECK(in.status == TransactionStatus::kIdle);
  }
  // Rolled back only where ROLLBACK ends everything: a gone client's
  // transaction block with nothing running, in transaction mode, unpinned.
  const bool rollback = d == ReleaseDecision::kRollbackThenReturn;
  if (rollback) {
    CHECK(in.client_gone);
    CHECK(in.mode == PoolMode::kTransaction);
    CHECK(in.outstanding == 0);
    CHECK((in.status == TransactionStatus::kInTransaction || in.status == TransactionStatus::kFailed));
  }
  // Never back to the pool pinned, old, or broken.
  if (in.pin != PinReason::kNone) CHECK_FALSE((shares || rollback));
  if (in.lifetime_exceeded) CHECK_FALSE((shares || rollback));
  // A gone client keeps nothing.
  if (in.client_gone) CHECK(d != ReleaseDecision::kKeep);
  // A gone client leaving a pin, or work outstanding: close.
  if (in.client_gone && (in.pin != PinReason::kNone || in.outstanding > 0)) CHECK(d == ReleaseDecision::kClose);
  // A gone client's healthy, unpinned transaction-mode block: rolled back.
  if (in.client_gone && !in.broken && !in.lifetime_exceeded && in.pin == PinReason::kNone && in.outstanding == 0 &&
      in.mode == PoolMode::kTransaction &&
      (in.status == TransactionStatus::kInTransaction || in.status == TransactionStatus::kFailed)) {
    CHECK(rollback);
  }
  // A present, healthy client keeps its connection in session mode, while
  // pinned, and mid-transaction.
  if (!in.client_gone && !in.broken) {
    if (in.mode == PoolMode::kSession || in.pin != PinReason::kNone || !at_rest) {
      CHECK(d == ReleaseDecision::kKeep);
    }
  }
  // Reset only where untracked session state may exist: a finished session.
  if (d == ReleaseDecision::kResetThenReturn) {
    CHECK(in.mode == PoolMode::kSession);
    CHECK(in.client_gone);
  }
}

struct Row {
  ReleaseInputs in;
  ReleaseDecision want;
};

// The main cases spelled out, so a reader sees the policy at a glance.
TEST_CASE("release policy: the main cases") {
  using enum ReleaseDecision;
  constexpr auto kT = PoolMode::kTransaction;
  constexpr auto kS = PoolMode::kSession;
  constexpr auto kI = TransactionStatus::kIdle;
  constexpr auto kTx = TransactionStatus::kInTransaction;
  constexpr auto kE = TransactionStatus::kFailed;
  auto [in, want] = GENERATE_COPY(values<Row>({
      {{kT, kI, 0, PinReason::kNone, false, false, false}, kReturn},
      {{kT, kI, 1, PinReason::kNone, false, false, false}, kKeep},   // pipelined Sync pending
      {{kT, kTx, 0, PinReason::kNone, false, false, false}, kKeep},  // BEGIN ... in progress
      {{kT, kE, 0, PinReason::kNone, false, false, false}, kKeep},   // the client must ROLLBACK
      {{kT, kI, 0, PinReason::kTempTable, false, false, false}, kKeep},
      {{kT, kI, 0, PinReason::kNone, false, false, true}, kClose},   // old: replaced when free
      {{kT, kI, 0, PinReason::kNone, false, true, false}, kClose},
      {{kT, kI, 0, PinReason::kNone, true, false, false}, kReturn},  // client left between transactions
      {{kT, kTx, 0, PinReason::kNone, true, false, false}, kRollbackThenReturn},  // left in BEGIN, nothing running
      {{kT, kE, 0, PinReason::kNone, true, false, false}, kRollbackThenReturn},   // ... or in a failed block
      {{kT, kTx, 1, PinReason::kNone, true, false, false}, kClose},  // ... with a query running
      {{kT, kI, 1, PinReason::kNone, true, false, false}, kClose},   // a query running outside a block
      {{kT, kTx, 0, PinReason::kTempTable, true, false, false}, kClose},
      {{kS, kTx, 0, PinReason::kNone, true, false, false}, kClose},  // session mode: untracked state
      {{kT, kI, 0, PinReason::kListen, true, false, false}, kClose},
      {{kS, kI, 0, PinReason::kNone, false, false, false}, kKeep},
      {{kS, kI, 0, PinReason::kNone, true, false, false}, kResetThenReturn},
      {{kS, kI, 0, PinReason::kAdvisoryLock, true, false, false}, kClose},
      {{kS, TransactionStatus::kNone, 0, PinReason::kNone, true, false, false}, kClose},
  }));
  CAPTURE(Describe(in));
  CHECK(ReleaseDecisionName(DecideRelease(in)) == ReleaseDecisionName(want));
}

}  // namespace
}  // namespace hyperpool
