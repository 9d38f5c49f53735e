// SessionTimeouts: the operator's query_timeout and
// idle_in_transaction_timeout as a pure function of time and session events.
#include "endpoint/session_timeouts.h"

#include <catch2/catch_test_macros.hpp>

namespace hyperpool::endpoint {
namespace {

using namespace std::chrono_literals;
using Action = SessionTimeouts::Action;
const SessionTimeouts::Clock::time_point t0{std::chrono::seconds(1000)};

TEST_CASE("both timeouts off: nothing is ever due") {
  SessionTimeouts t(0ms, 0ms);
  CHECK_FALSE(t.enabled());
  t.OnWorkSent(t0);
  CHECK(t.Due(t0 + 1h) == Action::kNone);
  CHECK(t.NextDeadline() == SessionTimeouts::Clock::time_point::max());
}

TEST_CASE("query_timeout: a unit running longer is cancelled once") {
  SessionTimeouts t(100ms, 0ms);
  t.OnWorkSent(t0);
  CHECK(t.NextDeadline() == t0 + 100ms);
  CHECK(t.Due(t0 + 99ms) == Action::kNone);
  CHECK(t.Due(t0 + 100ms) == Action::kCancelQuery);
  CHECK(t.Due(t0 + 200ms) == Action::kNone);
  CHECK(t.NextDeadline() == SessionTimeouts::Clock::time_point::max());
}

TEST_CASE("query_timeout: each pipelined unit gets its own clock from the previous ReadyForQuery") {
  SessionTimeouts t(100ms, 0ms);
  t.OnWorkSent(t0);
  t.OnWorkSent(t0 + 50ms);  // more work while busy does not restart the clock
  CHECK(t.NextDeadline() == t0 + 100ms);
  t.OnReady(t0 + 90ms, /*more_outstanding=*/true, false);
  CHECK(t.Due(t0 + 150ms) == Action::kNone);
  CHECK(t.Due(t0 + 190ms) == Action::kCancelQuery);
}

TEST_CASE("query_timeout: a finished unit is not cancelled") {
  SessionTimeouts t(100ms, 0ms);
  t.OnWorkSent(t0);
  t.OnReady(t0 + 10ms, false, false);
  CHECK(t.Due(t0 + 1s) == Action::kNone);
}

TEST_CASE("idle_in_transaction_timeout: only while idle inside a transaction block") {
  SessionTimeouts t(0ms, 200ms);
  t.OnWorkSent(t0);
  CHECK(t.Due(t0 + 1s) == Action::kNone);  // busy, not idle
  t.OnReady(t0 + 1s, false, /*in_transaction=*/true);
  CHECK(t.NextDeadline() == t0 + 1s + 200ms);
  CHECK(t.Due(t0 + 1s + 199ms) == Action::kNone);
  CHECK(t.Due(t0 + 1s + 200ms) == Action::kEndIdleInTransaction);
  t.OnWorkSent(t0 + 2s);  // a new statement: not idle any more
  CHECK(t.Due(t0 + 3s) == Action::kNone);
  t.OnReady(t0 + 3s, false, /*in_transaction=*/false);  // COMMIT
  CHECK(t.Due(t0 + 1h) == Action::kNone);
  t.OnReady(t0 + 4s, false, true);
  t.OnQuiet();  // the connection went away
  CHECK(t.Due(t0 + 1h) == Action::kNone);
}

}  // namespace
}  // namespace hyperpool::endpoint
