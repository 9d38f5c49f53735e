#pragma once
// The budget for pinned sessions (docs/architecture.md, "Session state"),
// with no I/O (unit-tested in tests/unit/endpoint/pin_budget_test.cc).
//
// In transaction mode a session whose statements leave session state on its
// origin connection (temporary tables, session advisory locks, WITH HOLD
// cursors, SET ROLE, SQL PREPARE, LISTEN: PinReason) keeps that connection
// until it ends. If those connections counted against the pool's max_size,
// a few such sessions would make every other session wait (or time out), so
// a pinned session's connection leaves the cap (Lease::MoveOutOfCap) and
// counts against a budget of its own, max_pinned. When the budget is spent,
// the statement that would pin one more session is not run: it is replaced
// by one that makes the origin raise 53300 with a message naming the
// setting, so the error, the transaction's abort and skip-until-Sync are
// exactly PostgreSQL's, nothing of the statement exists afterwards, and the
// session continues unpinned.

#include <cstddef>
#include <string>
#include <string_view>

namespace hyperpool::endpoint {

// max_pinned as configured (0: the default, max(1, pool_size / 4)).
std::size_t EffectivePinnedBudget(std::size_t configured, std::size_t pool_size);

// Counts the sessions that hold a pinned connection (one Endpoint).
class PinBudget {
 public:
  explicit PinBudget(std::size_t limit) : limit_(limit) {}
  // Takes one unit; false (and nothing taken) if all are in use.
  bool TryTake() {
    if (in_use_ >= limit_) return false;
    ++in_use_;
    return true;
  }
  void Give() {
    if (in_use_ > 0) --in_use_;
  }
  std::size_t in_use() const { return in_use_; }
  std::size_t limit() const { return limit_; }

 private:
  std::size_t limit_;
  std::size_t in_use_ = 0;
};

// The statement text that makes the origin raise the budget error: SQLSTATE
// 53300, a message naming max_pinned, and a HINT. A DO block, so it runs in
// any transaction state a statement can run in.
std::string PinBudgetErrorStatement(std::size_t limit);

// Replaces a pinning frontend message (tagged frame `tag` with `payload`) by
// one that raises the budget error on the origin, appended to `out` as a
// complete frame. A Query becomes a Query of PinBudgetErrorStatement; a
// Parse keeps its name and becomes a Parse of that statement with as many
// parameters as the original referenced (unspecified types become text, so
// the client's Bind still matches and its Execute raises the error). False
// for other messages (or a malformed one): nothing is appended.
bool RewritePinningMessage(char tag, std::string_view payload, std::size_t limit, std::string& out);

}  // namespace hyperpool::endpoint
