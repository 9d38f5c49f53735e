#pragma once
// The operator's session timeouts (EndpointOptions::query_timeout and
// idle_in_transaction_timeout) as a pure state machine: the Endpoint session
// reports what it does, asks when to look again, and gets back what is due.
// The timer and the actions (a CancelRequest, a FATAL) stay in the session.
//
// States: no work (kQuiet), a unit of work running on the origin (kBusy),
// idle inside a transaction block holding its connection (kIdleInTransaction).

#include <chrono>

namespace hyperpool::endpoint {

class SessionTimeouts {
 public:
  using Clock = std::chrono::steady_clock;

  enum class Action {
    kNone,                  // nothing is due
    kCancelQuery,           // cancel the running unit: 57014 "... due to statement timeout"
    kEndIdleInTransaction,  // end the session: FATAL 25P03
  };

  // Zero turns a timeout off.
  SessionTimeouts(std::chrono::milliseconds query_timeout, std::chrono::milliseconds idle_in_transaction_timeout)
      : query_timeout_(query_timeout), idle_in_transaction_timeout_(idle_in_transaction_timeout) {}

  // True if any timeout is on (the session runs no timer otherwise).
  bool enabled() const {
    return query_timeout_.count() > 0 || idle_in_transaction_timeout_.count() > 0;
  }

  // A unit of work was sent to the origin. Starts its clock unless one runs.
  void OnWorkSent(Clock::time_point now);
  // A ReadyForQuery arrived; `more_outstanding`: later units are still in
  // flight (their clock starts now); `in_transaction`: status 'T' or 'E'.
  void OnReady(Clock::time_point now, bool more_outstanding, bool in_transaction);
  // The session no longer holds a connection (or its work ended otherwise).
  void OnQuiet();

  // What is due at `now`. kCancelQuery is returned once per unit.
  Action Due(Clock::time_point now);
  // When Due() may next return something (time_point::max() if never).
  Clock::time_point NextDeadline() const;
  // No unit's clock runs (SessionCore::CanSleep).
  bool Quiet() const { return state_ == State::kQuiet && !cancelled_; }

 private:
  enum class State {
    kQuiet,              // see above
    kBusy,               // see above
    kIdleInTransaction,  // see above
  };

  const std::chrono::milliseconds query_timeout_;
  const std::chrono::milliseconds idle_in_transaction_timeout_;
  State state_ = State::kQuiet;
  Clock::time_point since_{};   // entered the current state
  bool cancelled_ = false;      // kCancelQuery already returned for this unit
};

}  // namespace hyperpool::endpoint
