// SessionCore (session_core.h), part three: pinned sessions and their
// budget, backend signals answered without the origin (backend_signal.h),
// cancels and timeouts. Part one, session_core.cc: the transition function
// and client frames; part two, session_core_origin.cc: origin frames.
#include "endpoint/session_core.h"

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "endpoint/backend_signal.h"
#include "endpoint/notification_pid.h"
#include "endpoint/pin_budget.h"
#include "protocol/codec.h"
#include "protocol/sqlstate.h"

namespace hyperpool::endpoint {
namespace {

constexpr std::size_t kSyncFrameSize = 5;  // 'S' and its length

}  // namespace

// ----- Pins

void SessionCore::OnPinGranted() {
  if (!pin_waiting() || session_done_ || stopping_ || ending()) {
    endpoint_.on_executor.pin_budget.Give();  // nobody wants it any more: the next waiter's
    return;
  }
  const std::vector<PinReason> pins = std::move(std::get<PinWait>(pin_gate_).pins);
  pin_gate_ = std::monostate{};
  HoldPinBudget();
  for (PinReason reason : pins) AddPin(reason);
  Advance();  // the head frame goes on (its effects are noted already)
}

void SessionCore::OnPinWaitFailed(const absl::Status& status) {
  if (!pin_waiting()) return;
  pin_gate_ = std::monostate{};
  if (session_done_ || stopping_ || ending()) return;
  endpoint_.pins_rejected++;
  if (conn_ == nullptr && state() == State::kIdle) {
    // Nothing is lent: answered like a failed acquire (AnswerAcquireFailure).
    FailHeadUnit(status);
    return;
  }
  // A connection is lent (a transaction block): the origin raises the error
  // in place of the statement, so the block aborts as PostgreSQL's would.
  if (status.code() == absl::StatusCode::kResourceExhausted) endpoint_.acquire_timeouts++;
  pin_gate_ = PinRefused{protocol::ErrorForAcquire(status)};
  Advance();
}

bool SessionCore::TakePinBudget() {
  if (pin_budget_held_ || endpoint_.options.pool.mode != PoolMode::kTransaction) return true;
  if (!endpoint_.on_executor.pin_budget.TryTake()) return false;
  HoldPinBudget();
  return true;
}

void SessionCore::HoldPinBudget() {
  pin_budget_held_ = true;
  if (endpoint_.options.pinned_idle_timeout.count() > 0 && !idle_watch_started_) {
    idle_watch_started_ = true;
    last_activity_ = std::chrono::steady_clock::now();
    Command(SessionCommand::Kind::kWatchPinnedIdle);
  }
}

void SessionCore::GivePinBudget() {
  if (!pin_budget_held_) return;
  pin_budget_held_ = false;
  endpoint_.on_executor.pin_budget.Give();
}

void SessionCore::AddPin(PinReason reason) {
  const bool first = pins_.empty();
  if (!pins_.Add(reason)) return;
  endpoint_.pins[static_cast<std::size_t>(reason)]++;
  if (first) endpoint_.pinned_sessions++;
  fmt::print(stderr, "hyperpool: session {} pinned to its origin connection: {}\n",
             id_.session_id.empty() ? std::string("-") : id_.session_id, PinReasonName(reason));
}

bool SessionCore::CheckPinnedIdle(std::chrono::steady_clock::time_point now,
                                  std::chrono::steady_clock::time_point* next) {
  const auto limit = endpoint_.options.pinned_idle_timeout;
  if (session_done_ || stopping_ || ending()) return false;
  const bool idle = outstanding_ == 0 && !in_unit_ && out_.to_origin.empty() &&
                    (conn_ == nullptr || conn_->transaction_status() == 'I');
  if (pin_budget_held_ && idle && now - last_activity_ >= limit) {
    endpoint_.pinned_idle_timeouts++;
    QueueError("FATAL", protocol::IdleSessionTimeout());
    EndSession();
    return false;
  }
  *next = idle ? last_activity_ + limit : now + limit;
  return true;
}

// ----- Backend signals answered here

void SessionCore::OnSignalled(bool found) {
  if (!signal_wait_) return;
  const SignalWait wait = *signal_wait_;
  signal_wait_.reset();
  head_.signal_checked = true;  // not found: the head frame goes to the origin as it is
  if (session_done_ || stopping_ || ending()) return;
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  auto r = reader.Read(in_);
  if (!found || !r.is_frame()) {
    AfterProgress();
    return;
  }
  const protocol::Frame head = r.frame();
  std::size_t answered = 0;  // bytes of in_ answered here (a batch: up to its Sync)
  if (head.tag == 'B') {
    // A statement prepared in an earlier batch: HeadSignal checked that
    // its batch can be answered here.
    answered = AppendBackendSignalBatchAnswer(in_, wait.signal, out_.to_client);
    if (answered == 0) {  // (cannot happen: in_ only grew meanwhile) to the origin
      AfterProgress();
      return;
    }
    if (in_unit_) {
      // The unit began on the origin (asyncpg's Parse + Describe + Flush):
      // its Sync goes there and ends the implicit transaction; the origin's
      // ReadyForQuery is the client's.
      in_.erase(0, answered - kSyncFrameSize);
      NextFrame();
      AfterProgress();
      return;
    }
  } else if (head.tag == 'P') {
    answered = AnswerSignalParse(head, wait.signal);
    if (answered == 0) {
      // The origin answers the unit with a stand-in that yields the same
      // column and 't' (backend_signal.h).
      head_.stand_in = BackendSignalStandIn(head.payload);
      head_.stand_in_noted = !head_.stand_in.empty();
      AfterProgress();
      return;
    }
  } else {
    AppendBackendSignalAnswer(out_.to_client, wait.signal, true);
    answered = head.size();
  }
  in_.erase(0, answered);
  QueueReadyForQuery(wait.status);
  out_.flush_client = true;
  NextFrame();
  AfterProgress();
}

std::size_t SessionCore::AnswerSignalParse(const protocol::Frame& parse, const BackendSignal& signal) {
  // Unnamed: the stand-in (a later Bind of it is rare). A name the client
  // holds: the origin reports 42P05.
  if (parse.payload.empty() || parse.payload[0] == '\0') return 0;
  if (statements_.client().Find(std::string_view(parse.payload.data())) != nullptr) return 0;
  std::string answers;
  const std::size_t batch =
      AppendBackendSignalBatchAnswer(std::string_view(in_).substr(parse.size()), signal, answers);
  if (batch == 0) return 0;
  // Recorded as a parse-only unit's Parse is: replayed before a Bind that
  // needs it on a connection, recognised by a later Bind (HeadSignal).
  statements_.set_scope(StatementScope());
  (void)statements_.AnswerParseOnly(parse, out_.to_client);  // and its ParseComplete
  out_.to_client += answers;
  return parse.size() + batch;
}

std::optional<BackendSignal> SessionCore::HeadSignal(const protocol::Frame& frame, const cache::SqlText* sql,
                                                     std::size_t offset) const {
  if (head_.signal_checked || outstanding_ != 0 || !out_.to_origin.empty()) return std::nullopt;
  if (conn_ != nullptr && conn_->transaction_status() != 'I' && conn_->transaction_status() != 'T') {
    return std::nullopt;  // PostgreSQL refuses it in a failed block
  }
  std::optional<BackendSignal> signal;
  if (!in_unit_ && frame.tag == 'Q' && sql != nullptr) {
    signal = ParseBackendSignal(sql->sql());
  } else if (!in_unit_ && frame.tag == 'P' && sql != nullptr) {
    signal = ParseBackendSignalUnit(frame.payload, std::string_view(in_).substr(offset));
  } else if (frame.tag == 'B' && head_.stand_in.empty() && (!in_unit_ || MidUnitAnswered())) {
    // (no stand-in: the head frame is in_'s)
    const std::string_view parse = BoundParse(frame.payload);
    if (!parse.empty()) signal = ParseBackendSignalBind(parse, std::string_view(in_).substr(offset - frame.size()));
  }
  // The pid of the backend the caller holds as its own (a transaction
  // block, a pin, session mode): the origin ends the caller's backend, as
  // directly. (A connection lent for the current unit only is the pool's
  // choice: asyncpg's Parse + Describe + Flush may have been lent the very
  // backend another session read.)
  if (signal && conn_ != nullptr && conn_->backend_key().process_id == signal->pid && OwnsConnection()) {
    return std::nullopt;
  }
  return signal;
}

bool SessionCore::OwnsConnection() const {
  return conn_ != nullptr && (conn_->transaction_status() == 'T' || CurrentPin() != PinReason::kNone ||
                              endpoint_.options.pool.mode == PoolMode::kSession);
}

SessionCore::OriginLease SessionCore::SignalLease() const {
  if (conn_ != nullptr && in_unit_ && !OwnsConnection()) return Unpack(previous_lease_);
  return origin_lease();
}

bool SessionCore::MidUnitAnswered() const {
  return conn_ != nullptr && in_unit_ && outstanding_ == 0 && statements_.pending() == 0 &&
         !statements_.skipping() && !statements_.shape_check_pending() && !copy_.in_copy_in() && !skip_until_sync_;
}

std::string_view SessionCore::BoundParse(std::string_view bind_payload) const {
  const std::size_t portal_end = bind_payload.find('\0');
  if (portal_end == std::string_view::npos) return {};
  std::string_view name = bind_payload.substr(portal_end + 1);
  name = name.substr(0, name.find('\0'));
  const ClientStatements& client = statements_.client();
  std::string_view parse_frame;
  if (name.empty()) {
    if (client.unnamed_id() == 0) return {};
    parse_frame = client.unnamed_parse();
  } else {
    const StatementRef* statement = client.Find(name);
    if (statement == nullptr || *statement == nullptr) return {};
    parse_frame = (*statement)->parse_frame;
  }
  constexpr std::size_t kHeader = 5;  // tag and length
  return parse_frame.size() > kHeader ? parse_frame.substr(kHeader) : std::string_view();
}

SessionCore::Next SessionCore::HandleRefusedPin(const protocol::Frame& frame, std::size_t offset) {
  const protocol::PoolerError error = std::move(std::get<PinRefused>(pin_gate_).error);
  pin_gate_ = std::monostate{};
  fmt::print(stderr, "hyperpool: session {}: no pinned slot (max_pinned = {}), statement refused: {}\n",
             id_.session_id.empty() ? std::string("-") : id_.session_id, endpoint_.on_executor.pin_budget.limit(),
             error.message);
  const std::string statement = ErrorStatement(
      error.sqlstate, error.message,
      error.sqlstate == kSqlStateTooManyConnections ? PinBudgetHint(endpoint_.on_executor.pin_budget.limit())
                                                    : std::string());
  std::string replacement;
  head_.stand_in_noted = true;  // its effects are not noted again
  if (!RewritePinningMessage(frame.tag, frame.payload, statement, replacement)) {
    // It cannot be rewritten (a Bind of a pinning statement parsed before):
    // it runs, and its connection is closed after the unit.
    discard_after_unit_ = true;
    return HandleFrame(frame, offset);
  }
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  auto r = reader.Read(replacement);
  if (!r.is_frame()) return Next::kConsumed;  // cannot happen: we encoded it
  // Later Binds of that name run the replacement: they pin nothing.
  if (frame.tag == 'P') (void)settings_.NoteFrontend('P', r.frame().payload);
  head_.stand_in = std::move(replacement);
  auto rr = reader.Read(head_.stand_in);
  return HandleFrame(rr.frame(), offset);
}

// ----- Cancels and timeouts

bool SessionCore::OnCancelRequest() {
  if (session_done_ || stopping_ || ending()) return false;
  if (pin_waiting()) {
    // Waiting for the pinned budget: the wait ends with 57014.
    SessionCommand c;
    c.kind = SessionCommand::Kind::kCancelPinWait;
    c.status = UserCancel();
    Command(std::move(c));
    return true;
  }
  if (auto* preparing = std::get_if<Preparing>(&state_)) {
    // Already handed a connection (settings replay): the unit ends with
    // 57014 before any of it is sent.
    preparing->cancel_requested = true;
    return true;
  }
  if (auto* acquiring = std::get_if<Acquiring>(&state_)) {
    // Still waiting in the pool's queue: leave it now with 57014; the pool
    // is untouched.
    acquiring->cancel_requested = true;
    SessionCommand c;
    c.kind = SessionCommand::Kind::kCancelAcquire;
    c.status = UserCancel();
    Command(std::move(c));
    return true;
  }
  if (conn_ == nullptr || (outstanding_ == 0 && !in_unit_)) return false;
  ++cancels_in_flight_;
  endpoint_.pending_cancels++;
  SessionCommand c;
  c.kind = SessionCommand::Kind::kCancelOrigin;
  c.key = conn_->backend_key();
  c.notify = true;
  Command(std::move(c));
  return true;
}

void SessionCore::OnCancelDelivered() {
  if (cancels_in_flight_ > 0) --cancels_in_flight_;
  AfterProgress();
}

void SessionCore::CancelIfBusy() {
  if (conn_ == nullptr || cancel_sent_ || (outstanding_ == 0 && !in_unit_)) return;
  cancel_sent_ = true;
  endpoint_.pending_cancels++;
  SessionCommand c;
  c.kind = SessionCommand::Kind::kCancelOrigin;
  c.key = conn_->backend_key();
  c.notify = false;
  Command(std::move(c));
}

void SessionCore::NoteWorkSent() {
  if (!timeouts_.enabled()) return;
  timeouts_.OnWorkSent(std::chrono::steady_clock::now());
  Command(SessionCommand::Kind::kTimeoutsChanged);
}

void SessionCore::NoteReady(char status) {
  if (!timeouts_.enabled()) return;
  timeouts_.OnReady(std::chrono::steady_clock::now(), outstanding_ > 0 || in_unit_, status == 'T' || status == 'E');
  Command(SessionCommand::Kind::kTimeoutsChanged);
}

void SessionCore::OnTimeout(std::chrono::steady_clock::time_point now) {
  if (session_done_ || ending()) return;
  switch (timeouts_.Due(now)) {
    case SessionTimeouts::Action::kCancelQuery:
      // The same path as a client's cancel: the connection stays with this
      // session until the origin has processed the CancelRequest.
      if (busy() && OnCancelRequest()) statement_timeout_pending_ = true;
      break;
    case SessionTimeouts::Action::kEndIdleInTransaction: {
      // As PostgreSQL does: FATAL 25P03 and the session ends; the origin
      // connection is closed (its transaction rolls back there) and its
      // pool slot is free at once.
      if (conn_ == nullptr || outstanding_ > 0 || in_unit_) break;
      const char status = conn_->transaction_status();
      if (status != 'T' && status != 'E') break;
      QueueError("FATAL", kSqlStateIdleInTransactionTimeout,
                 "terminating connection due to idle-in-transaction timeout");
      ReleaseLease(ReleaseDecision::kClose);
      EndSession();
      break;
    }
    case SessionTimeouts::Action::kNone:
      break;
  }
  Command(SessionCommand::Kind::kTimeoutsChanged);
}

}  // namespace hyperpool::endpoint
