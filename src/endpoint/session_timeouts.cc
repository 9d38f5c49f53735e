#include "endpoint/session_timeouts.h"

namespace hyperpool::endpoint {

void SessionTimeouts::OnWorkSent(Clock::time_point now) {
  if (state_ == State::kBusy) return;
  state_ = State::kBusy;
  since_ = now;
  cancelled_ = false;
}

void SessionTimeouts::OnReady(Clock::time_point now, bool more_outstanding, bool in_transaction) {
  since_ = now;
  cancelled_ = false;
  if (more_outstanding) {
    state_ = State::kBusy;  // the next pipelined unit runs from now
  } else {
    state_ = in_transaction ? State::kIdleInTransaction : State::kQuiet;
  }
}

void SessionTimeouts::OnQuiet() {
  state_ = State::kQuiet;
  cancelled_ = false;
}

SessionTimeouts::Action SessionTimeouts::Due(Clock::time_point now) {
  if (state_ == State::kBusy && query_timeout_.count() > 0 && !cancelled_ && now >= since_ + query_timeout_) {
    cancelled_ = true;
    return Action::kCancelQuery;
  }
  if (state_ == State::kIdleInTransaction && idle_in_transaction_timeout_.count() > 0 &&
      now >= since_ + idle_in_transaction_timeout_) {
    return Action::kEndIdleInTransaction;
  }
  return Action::kNone;
}

SessionTimeouts::Clock::time_point SessionTimeouts::NextDeadline() const {
  if (state_ == State::kBusy && query_timeout_.count() > 0 && !cancelled_) return since_ + query_timeout_;
  if (state_ == State::kIdleInTransaction && idle_in_transaction_timeout_.count() > 0) {
    return since_ + idle_in_transaction_timeout_;
  }
  return Clock::time_point::max();
}

}  // namespace hyperpool::endpoint
