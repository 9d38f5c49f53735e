// SessionCore (session_core.h), part two: origin frames, the settings
// capture and UNLISTEN * at 'I', releases, notifications and the end of a
// session. Part one, session_core.cc: the transition function and the
// client's frames.
#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "endpoint/listener.h"
#include "endpoint/notification_pid.h"
#include "endpoint/session_core.h"
#include "protocol/codec.h"
#include "protocol/sqlstate.h"

namespace hyperpool::endpoint {

namespace {
constexpr std::string_view kPortalSuspendedFrame("s\0\0\0\4", 5);
}  // namespace

bool SessionCore::wants_origin() const {
  return conn_ != nullptr && (outstanding_ > 0 || in_unit_) && hold_ == HoldStep::kNone && !session_done_ &&
         state() != State::kOwnQuery && state() != State::kPreparing;
}

bool SessionCore::OnOriginFrame(const protocol::Frame& frame) {
  if (conn_ == nullptr) return true;  // released or lost meanwhile: nothing to do with it
  return ProcessOriginFrame(frame, HoldStep::kNone);
}

bool SessionCore::ProcessOriginFrame(const protocol::Frame& frame, HoldStep from) {
  OriginConnection* c = conn_;
  const char tag = frame.tag;
  // `to_client` leaves with each send (the link takes the string itself),
  // so each unit's answers start a fresh one: one allocation of a size most
  // answers fit, not the string's growth from nothing (4 or 5 reallocations).
  if (out_.to_client.capacity() < kClientChunkReserve) out_.to_client.reserve(kClientChunkReserve);
  if (from == HoldStep::kNone && tag == 'Z' && statements_.OwnsReady()) {
    // The ReadyForQuery of a Sync the statements sent on their own (before a
    // read of pg_prepared_statements): not the client's, nobody else's.
    (void)statements_.OnBackend(frame, c->statements(), out_.to_client);
    return true;
  }
  if (from == HoldStep::kNone) {
    const CopyTracker::BackendEffect copy = copy_.OnBackend(tag);
    if (copy.unanswered > 0) outstanding_ -= std::min(outstanding_, copy.unanswered);
    if (copy.unit_reopened) in_unit_ = true;
    if (tag == 'A' && NotificationViaListener(frame.payload)) return true;  // the listener delivers it
    if ((tag == 'Z' || tag == 'E' || tag == 'C') && TracksListens()) {
      std::vector<ListenOp> committed = listens_.OnBackend(tag, frame.payload);
      if (!committed.empty() && endpoint_.listener && !session_done_) {
        // The session's channel set changes; the ReadyForQuery waits until
        // the listener connection has LISTENed, so a NOTIFY the app sends
        // after it cannot be missed (listener.h).
        std::set<std::string> channels = endpoint_.listener->ChannelsOf(id_.listen_id);
        ApplyListenOps(committed, channels);
        SessionCommand command;
        command.kind = SessionCommand::Kind::kListenSet;
        command.channels = std::move(channels);
        Command(std::move(command));
        hold_ = HoldStep::kAfterListenSet;
        held_frame_.assign(frame.raw.data(), frame.raw.size());
        return false;
      }
    }
  }
  if (from != HoldStep::kAfterBarrier && tag == 'Z' && TracksListens() && !frame.payload.empty() &&
      frame.payload[0] == 'I' && outstanding_ <= 1 && !in_unit_ && may_notify_ && endpoint_.listener &&
      !session_done_ && endpoint_.listener->HasChannels()) {
    // Its own NOTIFY on a channel it listens on reaches it before this
    // ReadyForQuery, as on a direct connection (listener.h). And every
    // notification it committed reaches the listener connection before its
    // backend can be lent to another session: the listener's copies are
    // translated by who held the backend last (notification_pid.h), so one
    // read after the next notifying session took the backend carried that
    // session's pid (~10% of them with three notifiers over a pool of 3).
    Command(SessionCommand::Kind::kBarrier);
    hold_ = HoldStep::kAfterBarrier;
    held_frame_.assign(frame.raw.data(), frame.raw.size());
    return false;
  }
  if (tag == 'Z' && TracksListens() && !frame.payload.empty() && frame.payload[0] == 'I' && outstanding_ <= 1 &&
      !in_unit_ && !pending_notifications_.empty()) {
    // As a backend does: after the commit, before ReadyForQuery.
    out_.to_client += pending_notifications_;
    pending_notifications_.clear();
  }
  std::string_view raw = frame.raw;
  std::string rewritten;
  if (tag == 'E') {
    // A FATAL (pg_terminate_backend, a shutdown) goes to the client as it
    // is: the origin closes next, and so does this session, as a direct
    // connection would (docs/architecture.md, "Failure handling").
    auto error = protocol::DecodeErrorResponse(frame.payload);
    if (error.ok() && (error->severity() == "FATAL" || error->severity() == "PANIC")) origin_fatal_sent_ = true;
    if (error.ok() && statement_timeout_pending_ && error->sqlstate() == kSqlStateQueryCanceled) {
      // Our own CancelRequest for query_timeout: say why, as
      // statement_timeout does.
      protocol::EncodeErrorResponse(rewritten, "ERROR", kSqlStateQueryCanceled,
                                    "canceling statement due to statement timeout");
      raw = rewritten;
    }
  }
  // The query cache (capture, invalidate, control messages) sees what the
  // client sees: not the answers to our own hidden messages.
  // A limited Execute the cache read one row further (AdjustExecute): the
  // client gets what its own limit gives.
  if (!statements_.Hides(tag)) {
    switch (cache_.OnOriginFrame(tag, frame.raw, out_.to_client, *c)) {
      case SessionCache::OriginVerdict::kForward:
        break;
      case SessionCache::OriginVerdict::kDrop:
        raw = {};
        break;
      case SessionCache::OriginVerdict::kSuspend:
        raw = kPortalSuspendedFrame;
        break;
    }
  }
  const bool checking = statements_.shape_check_pending();
  // In kShapeChecking with no shape check: the head frame waits for earlier
  // answers (MustWait); it is asked again after each frame.
  const bool awaiting = !checking && state() == State::kShapeChecking;
  if (statements_.OnBackend(frame, c->statements(), out_.to_client) == StatementSession::Verdict::kForward) {
    if (tag == 'A') {
      // The sender pid as the apps know it (notification_pid.h).
      AppendTranslatedNotification(out_.to_client, frame.raw, endpoint_.on_executor.notifier_pids);
    } else if (!raw.empty()) {
      protocol::AppendRawFrame(out_.to_client, raw);
    }
  }
  if (tag == 'E' && statements_.TakeSkipStarted()) {
    // The origin skips to the next Sync: a Query or FunctionCall sent
    // before it gets no ReadyForQuery, so it is not outstanding any more,
    // and without a Sync sent the origin still owes this unit one.
    const CopyTracker::BackendEffect skipped = copy_.OnSkipToSync();
    if (skipped.unanswered > 0) {
      outstanding_ -= std::min(outstanding_, skipped.unanswered);
      cache_.OnSkipped(skipped.unanswered);
      if (TracksListens()) listens_.OnSkipped(skipped.unanswered);
    }
    if (copy_.skipping_to_sync()) in_unit_ = true;
  }
  const bool check_done = (checking && !statements_.shape_check_pending()) || awaiting;
  if (tag == 'Z' && !frame.payload.empty()) {
    last_activity_ = std::chrono::steady_clock::now();
    if (may_notify_) {
      // Its NOTIFYs were this session's, whoever uses the backend next.
      endpoint_.on_executor.notifier_pids.Lend(c->backend_key().process_id, id_.app_pid);
      // Inside a transaction block its NOTIFYs wait for the commit: the
      // ReadyForQuery 'I' that ends it still owes the barrier above.
      may_notify_ = outstanding_ > 1 || frame.payload[0] != 'I';
    }
    if (outstanding_ > 0) --outstanding_;
    if (frame.payload[0] == 'I') settings_.NoteIdleReady();
    statement_timeout_pending_ = false;
    NoteReady(frame.payload[0]);
    endpoint_.queries.fetch_add(1, std::memory_order_relaxed);
    if (outstanding_ == 0 && !in_unit_ && frame.payload[0] == 'I') {
      endpoint_.transactions++;
      EndTransactionTimer();
    }
  }
  if (outstanding_ == 0 && !in_unit_) out_.flush_client = true;  // the unit's answers are complete
  if (check_done && state() == State::kShapeChecking) SetState(State::kActive);
  if (tag == 'Z' || check_done) {
    if (state() == State::kDraining) {
      FinishDraining();
    } else {
      AfterProgress();
    }
  }
  return true;
}

void SessionCore::OnListenApplied() {
  const HoldStep step = hold_;
  if (step == HoldStep::kNone) return;
  hold_ = HoldStep::kNone;
  if (session_done_ && endpoint_.listener) endpoint_.listener->Remove(id_.listen_id);  // ended while waiting
  if (conn_ == nullptr) return;  // lost meanwhile: the loss answered the unit
  std::string held = std::move(held_frame_);
  held_frame_.clear();
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  auto r = reader.Read(held);
  if (!r.is_frame()) return;
  (void)ProcessOriginFrame(r.frame(), step);
}

void SessionCore::OnOriginLost(const absl::Status& reason) {
  if (conn_ == nullptr) return;
  hold_ = HoldStep::kNone;
  held_frame_.clear();
  if (session_done_ || stopping_) {
    ReleaseLease(ReleaseDecision::kClose);  // already accounted for, or nobody to tell
    return;
  }
  // The session ends as a direct connection to PostgreSQL would: the
  // origin's own FATAL (already forwarded, e.g. 57P01 from
  // pg_terminate_backend), or else FATAL 08006. A driver must learn that
  // its transaction is gone with its connection; carrying on over a fresh
  // origin connection could commit half of it.
  listens_.OnConnectionLost();
  if (!origin_fatal_sent_) {
    QueueError("FATAL", kSqlStateConnectionFailure,
               fmt::format("hyperpool: the connection to the origin database was lost: {}",
                           std::string(reason.message())));
  }
  outstanding_ = 0;
  in_unit_ = false;
  txn_started_ = {};  // a lost transaction is not timed
  skip_until_sync_.reset();
  ReleaseLease(ReleaseDecision::kClose);
  EndSession();
}

// ----- Own queries at 'I'

bool SessionCore::CapturePending() const {
  return conn_ != nullptr && (settings_.capture_owed() || conn_->parameter_changes() != parameter_mark_) &&
         endpoint_.options.pool.mode == PoolMode::kTransaction && pins_.empty() && !statements_.pinned() &&
         outstanding_ == 0 && !in_unit_ && conn_->transaction_status() == 'I' && !conn_->broken();
}

bool SessionCore::ListenCleanupPending() const {
  return TracksListens() && conn_ != nullptr && listens_.connection_listened() && outstanding_ == 0 && !in_unit_ &&
         conn_->transaction_status() == 'I' && !conn_->broken();
}

PinReason SessionCore::CurrentPin() const {
  if (PinReason pin = pins_.First(); pin != PinReason::kNone) return pin;
  if (statements_.pinned()) return PinReason::kPreparedSql;
  if (cancels_in_flight_ > 0) return PinReason::kOther;
  if (CapturePending()) return PinReason::kSessionSetting;
  if (ListenCleanupPending()) return PinReason::kOther;  // UNLISTEN * first
  return PinReason::kNone;
}

void SessionCore::OnCaptured(const absl::StatusOr<CaptureOutcome>& outcome) {
  const auto* own = std::get_if<OwnQuery>(&state_);
  if (own == nullptr || own->query != SessionCommand::Kind::kCapture || conn_ == nullptr) return;
  parameter_mark_ = conn_->parameter_changes();
  if (outcome.ok() && outcome->role_changed) {
    // The session is someone else now and must stay so (as after SET
    // ROLE); its connection never reaches another client and is closed
    // when the session ends.
    AddPin(PinReason::kSetRole);
  }
  if (!outcome.ok()) {
    fmt::print(stderr, "hyperpool: reading session settings failed, closing the connection: {}\n",
               std::string(outcome.status().message()));
  }
  SetState(State::kActive);
  if (!outcome.ok() || stopping_) ReleaseLease(ReleaseDecision::kClose);
  AfterProgress();
}

void SessionCore::OnUnlistened(bool ok, const std::vector<std::string>& notifications) {
  const auto* own = std::get_if<OwnQuery>(&state_);
  if (own == nullptr || own->query != SessionCommand::Kind::kUnlisten || conn_ == nullptr) return;
  for (const std::string& raw : notifications) {
    // Read from the lent connection before its UNLISTEN: the session's own,
    // unless the listener connection delivers that channel to it.
    if (raw.size() < 5 || NotificationViaListener(std::string_view(raw).substr(5))) continue;
    AppendTranslatedNotification(pending_notifications_, raw, endpoint_.on_executor.notifier_pids);
  }
  listens_.ClearConnectionListened();
  SetState(State::kActive);
  if (!ok || conn_->transaction_status() != 'I' || stopping_) ReleaseLease(ReleaseDecision::kClose);
  AfterProgress();
}

// ----- Progress, releases

void SessionCore::AfterProgress() {
  if (session_done_ || ending()) return;
  if (conn_ != nullptr && state() == State::kActive && hold_ == HoldStep::kNone && outstanding_ == 0 && !in_unit_) {
    // Settings may have changed in the unit that just ended at 'I': read
    // them before anyone else (this client's next unit included) uses the
    // connection. Then UNLISTEN * if the unit may have LISTENed on it.
    if (CapturePending()) {
      SetState(OwnQuery{SessionCommand::Kind::kCapture});
      Command(SessionCommand::Kind::kCapture);
      return;
    }
    if (ListenCleanupPending()) {
      SetState(OwnQuery{SessionCommand::Kind::kUnlisten});
      Command(SessionCommand::Kind::kUnlisten);
      return;
    }
  }
  DeliverPendingNotifications();
  MaybeRelease();
  Advance();
}

void SessionCore::MaybeRelease() {
  if (conn_ == nullptr || hold_ != HoldStep::kNone) return;
  if (outstanding_ > 0 || in_unit_ || copy_.in_copy_in()) return;
  if (state() != State::kActive) return;  // an own query, a shape check, the replay: not yet
  ReleaseDecision d = ReleaseAtIdle();
  if (discard_after_unit_ && d != ReleaseDecision::kKeep) d = ReleaseDecision::kClose;  // a refused pin ran
  ReleaseLease(d);
}

ReleaseDecision SessionCore::ReleaseAtIdle() const {
  // (The driver closes instead of returning a connection past its lifetime.)
  return DecideRelease({.mode = endpoint_.options.pool.mode,
                        .status = ToPoolStatus(conn_->transaction_status()),
                        .outstanding = outstanding_,
                        .pin = CurrentPin(),
                        .client_gone = false,
                        .broken = conn_->broken() || copy_.uncertain(),
                        .lifetime_exceeded = false});
}

void SessionCore::ReleaseLease(ReleaseDecision decision) {
  if (conn_ == nullptr || decision == ReleaseDecision::kKeep) return;
  if (decision == ReleaseDecision::kClose) {
    conn_->MarkBroken();  // no Terminate: its state is unknown; the origin rolls back
    endpoint_.discarded++;
  }
  if (used_sequences_) {
    // Its work may have called nextval: the next session to borrow this
    // connection gets DISCARD SEQUENCES first (sequence_state.h).
    conn_->sequence_owner().UsedBy(serial_, ++sequence_generation_);
    used_sequences_ = false;
  }
  statements_.Reset();
  copy_.Reset();
  if (timeouts_.enabled()) {
    timeouts_.OnQuiet();
    Command(SessionCommand::Kind::kTimeoutsChanged);
  }
  if (decision == ReleaseDecision::kClose) listens_.OnConnectionLost();
  SessionCommand release;
  release.kind = SessionCommand::Kind::kRelease;
  release.decision = decision;
  Command(std::move(release));
  conn_ = nullptr;
  discard_after_unit_ = false;
  if (lease_out_of_cap_) {
    lease_out_of_cap_ = false;
    endpoint_.pinned_connections--;
  }
  if (pins_.empty() && !statements_.pinned()) GivePinBudget();  // e.g. after DEALLOCATE ALL
  origin_fatal_sent_ = false;
  hold_ = HoldStep::kNone;
  held_frame_.clear();
  switch (state()) {
    case State::kActive:
    case State::kOwnQuery:
    case State::kShapeChecking:
    case State::kPreparing:
      SetState(State::kIdle);
      break;
    default:
      break;
  }
}

void SessionCore::EndTransactionTimer() {
  if (txn_started_ == std::chrono::steady_clock::time_point{}) return;
  endpoint_.transaction_time.Observe(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - txn_started_));
  txn_started_ = {};
}

// ----- Notifications

bool SessionCore::NotificationViaListener(std::string_view payload) const {
  if (!TracksListens() || !endpoint_.listener) return false;
  auto n = protocol::DecodeNotificationResponse(payload);
  return n.ok() && endpoint_.listener->Listens(id_.listen_id, n->channel);
}

bool SessionCore::IdleForNotifications() const {
  return outstanding_ == 0 && !in_unit_ && !parse_only_unit_ && !skip_until_sync_ && out_.to_origin.empty() &&
         !statements_.shape_check_pending() && hold_ == HoldStep::kNone &&
         (conn_ == nullptr || conn_->transaction_status() == 'I');
}

void SessionCore::DeliverPendingNotifications() {
  if (pending_notifications_.empty() || !IdleForNotifications()) return;
  out_.to_client += pending_notifications_;
  pending_notifications_.clear();
}

void SessionCore::OnNotification(std::string_view raw_frame) {
  if (session_done_ || stopping_ || notifications_overflowed_ || ending()) return;
  if (pending_notifications_.size() + raw_frame.size() > kMaxQueuedNotificationBytes) {
    // A session that never goes idle while notifications pour in: end it
    // rather than buffer without bound (PostgreSQL's own queue is bounded
    // too, and a full one makes NOTIFY fail).
    notifications_overflowed_ = true;
    pending_notifications_.clear();
    QueueError("FATAL", kSqlStateOutOfMemory, "hyperpool: too many notifications queued for this session");
    EndSession();
    return;
  }
  // The sender pid as the apps know it (notification_pid.h).
  AppendTranslatedNotification(pending_notifications_, raw_frame, endpoint_.on_executor.notifier_pids);
  endpoint_.notifications_delivered++;
  DeliverPendingNotifications();
}

void SessionCore::DeliverControl(std::string_view bytes) {
  if (ending()) return;
  out_.to_client.append(bytes.data(), bytes.size());
}

// ----- The end

void SessionCore::OnClientGone() {
  if (ending()) return;
  client_gone_ = true;
  link_gone_ = true;  // nobody reads the answers any more
  if (state() == State::kDraining) return;  // after Terminate: its units finish, then the session ends
  // A Terminate behind frames not yet handled (an INSERT sent with it while
  // it waits for a connection): PostgreSQL runs what came before a
  // Terminate, so they run, and the Terminate then drains and ends it.
  if (!stopping_ && HasTerminate(in_)) return;
  EndSession();
}

bool HasTerminate(std::string_view frames) {
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  std::string_view rest = frames;
  for (;;) {
    auto r = reader.Read(rest);
    if (!r.is_frame()) return false;
    if (r.frame().tag == 'X') return true;
    rest.remove_prefix(r.frame().size());
  }
}

void SessionCore::Shutdown() {
  if (ending()) return;
  stopping_ = true;
  link_gone_ = true;
  if (conn_ != nullptr) conn_->MarkBroken();  // closed, never returned
  EndSession();
}

void SessionCore::FinishDraining() {
  if (state() != State::kDraining) {
    // A graceful Terminate after pipelined work: let that work finish (its
    // results are forwarded) before deciding about the connection.
    if (conn_ != nullptr && copy_.in_copy_in() && !conn_->broken()) {
      // Terminate inside COPY FROM STDIN: the origin waits for data that
      // will never come. End the COPY for the client (CopyFail, then a
      // Sync for an extended-protocol COPY; the simple protocol answers it
      // with one more ReadyForQuery) so the connection returns to 'I'.
      protocol::Encode(protocol::CopyFail{"the client ended its session during COPY"}, out_.to_origin);
      protocol::Encode(protocol::Sync{}, out_.to_origin);
      copy_.OnFrontend('f');
      if (copy_.OnFrontend('S')) ++outstanding_;
      in_unit_ = false;
    }
    if (conn_ != nullptr && outstanding_ > 0 && !conn_->broken() && !stopping_) {
      SetState(State::kDraining);
      return;
    }
  } else if (conn_ != nullptr && outstanding_ > 0 && !conn_->broken() && !stopping_) {
    return;  // more answers due
  }
  EndSession();
}

void SessionCore::EndSession() {
  if (session_done_) return;
  session_done_ = true;
  ForgetSession();
  if (conn_ != nullptr) {
    CancelIfBusy();
    ReleaseLease(DecideRelease({.mode = endpoint_.options.pool.mode,
                                .status = ToPoolStatus(conn_->transaction_status()),
                                .outstanding = outstanding_ + (in_unit_ ? 1 : 0),
                                .pin = CurrentPin(),
                                .client_gone = true,
                                // A settings change committed and not yet
                                // captured (a SET before a BEGIN in one
                                // flight): a ROLLBACK would not undo it.
                                // (Session mode resets with DISCARD ALL.)
                                .broken = conn_->broken() || discard_after_unit_ || copy_.uncertain() ||
                                          (settings_.committed_uncaptured() && TracksListens()),
                                .lifetime_exceeded = false}));
  }
  if (timeouts_.enabled()) {
    timeouts_.OnQuiet();
    Command(SessionCommand::Kind::kTimeoutsChanged);
  }
  SetState(State::kEnding);
}

void SessionCore::ForgetSession() {
  if (id_.app_pid != 0) {
    endpoint_.on_executor.notifier_pids.Forget(id_.app_pid);
    origin_lease_.store(0, std::memory_order_relaxed);  // no longer a target by origin pid
    observed_lease_.store(0, std::memory_order_relaxed);
  }
  if (!pins_.empty() && !pin_counted_gone_) endpoint_.pinned_sessions--;
  pin_counted_gone_ = true;
  GivePinBudget();
  if (endpoint_.listener && hold_ == HoldStep::kNone) endpoint_.listener->Remove(id_.listen_id);
  pending_notifications_.clear();
}

void SessionCore::TakeSpareBuffers() {
  // An idle session gave its buffers back (ReleaseIdleBuffers): the unit
  // these bytes start takes spares instead of growing fresh ones.
  if (state() != State::kIdle || conn_ != nullptr) return;
  endpoint_.on_executor.buffers.Take(out_.to_origin);
  endpoint_.on_executor.buffers.Take(out_.to_client);
}

void SessionCore::ReleaseIdleBuffers() {
  if (state() != State::kIdle || conn_ != nullptr) return;
  BufferPool& pool = endpoint_.on_executor.buffers;
  pool.Give(in_);
  pool.Give(head_.stand_in);
  pool.Give(held_frame_);
  pool.Give(out_.to_client);
  pool.Give(out_.to_origin);
  out_.commands.release();
  copy_.ReleaseStorage();
  statements_.ReleaseBuffers();
}

void SessionCore::OnFlushedForEnd() {
  if (state() == State::kEnding) SetState(State::kClosed);
}

}  // namespace hyperpool::endpoint
