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
// the statement that would pin one more session waits for a unit, in FIFO
// order, at most the pool's acquire timeout (Wait/Leave below). If the wait
// fails (timeout, the client's cancel) while the session holds a lent
// connection (inside a transaction block), the statement is not run: it is
// replaced by one that makes the origin raise the error (ErrorStatement),
// so the error, the transaction's abort and skip-until-Sync are exactly
// PostgreSQL's, nothing of the statement exists afterwards, and the session
// continues unpinned.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace hyperpool::endpoint {

// max_pinned as configured (0: the default, the pool size: see
// docs/architecture.md, "Pinned budget", for why).
std::size_t EffectivePinnedBudget(std::size_t configured, std::size_t pool_size);

// Counts the sessions that hold a pinned connection (one Endpoint), and
// queues the ones waiting for a unit. Confined to the Endpoint's executor.
class PinBudget {
 public:
  // Called when a waiter is handed a unit. It must not re-enter the
  // session that gives the unit back (the driver posts).
  using Wake = std::function<void()>;

  explicit PinBudget(std::size_t limit) : limit_(limit) {}
  // Takes one unit; false (and nothing taken) if all are in use or others
  // already wait (FIFO: a newcomer does not overtake them).
  bool TryTake() {
    if (in_use_ >= limit_ || !waiters_.empty()) return false;
    ++in_use_;
    return true;
  }
  // Gives a unit back: straight to the first waiter if there is one (its
  // Wake runs; the unit is then its own), else to the budget.
  void Give();
  // Joins the queue; returns the ticket that names this wait (never 0).
  std::uint64_t Wait(Wake wake);
  // Leaves the queue: true if `ticket` was still waiting (nothing taken),
  // false if it is unknown or was already handed a unit.
  bool Leave(std::uint64_t ticket);
  std::size_t in_use() const { return in_use_; }
  std::size_t limit() const { return limit_; }
  std::size_t waiting() const { return waiters_.size(); }

 private:
  std::size_t limit_;
  std::size_t in_use_ = 0;
  std::uint64_t last_ticket_ = 0;
  std::deque<std::pair<std::uint64_t, Wake>> waiters_;
};

// A statement that makes the origin raise `sqlstate` with `message` and
// `hint` (empty: none): a DO block, so it runs in any transaction state a
// statement can run in. Single quotes in the texts are escaped.
std::string ErrorStatement(std::string_view sqlstate, std::string_view message, std::string_view hint);

// The HINT of an error that ends a wait for the budget: what pins, and the
// setting (naming its value, `limit`).
std::string PinBudgetHint(std::size_t limit);

// Replaces a pinning frontend message (tagged frame `tag` with `payload`) by
// one that runs `statement` (ErrorStatement) instead, appended to `out` as a
// complete frame. A Query becomes a Query of `statement`; a
// Parse keeps its name and becomes a Parse of that statement with as many
// parameters as the original referenced (unspecified types become text, so
// the client's Bind still matches and its Execute raises the error). False
// for other messages (or a malformed one): nothing is appended.
bool RewritePinningMessage(char tag, std::string_view payload, std::string_view statement, std::string& out);

}  // namespace hyperpool::endpoint
