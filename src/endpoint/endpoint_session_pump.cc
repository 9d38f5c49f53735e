// Session (endpoint_session.h), part two: LISTEN/NOTIFY without pinning,
// the end of a session, Pump (the link writer), giving the connection back,
// and the operator timeouts. Part one is endpoint_session.cc.
#include "endpoint/endpoint_session.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <fmt/format.h>

#include "endpoint/listen_state.h"
#include "endpoint/listener.h"
#include "endpoint/notification_pid.h"
#include "endpoint/origin_connection.h"
#include "protocol/codec.h"

namespace hyperpool {

// ----- LISTEN/NOTIFY without pinning (listen_state.h, listener.h)

bool Session::ListenCleanupPending() const {
  return TracksListens() && lease_ && conn_ != nullptr && listens_.connection_listened() && outstanding_ == 0 &&
         !in_unit_ && conn_->transaction_status() == 'I' && !conn_->broken();
}

bool Session::IdleForNotifications() const {
  return outstanding_ == 0 && !in_unit_ && !parse_only_unit_ && !skip_until_sync_ &&
         to_origin_.empty() && !statements_.shape_check_pending() &&
         (!lease_ || conn_ == nullptr || conn_->transaction_status() == 'I');
}

bool Session::NotificationViaListener(std::string_view payload) const {
  if (!TracksListens() || !endpoint_->listener) return false;
  auto n = protocol::DecodeNotificationResponse(payload);
  return n.ok() && endpoint_->listener->Listens(listen_id_, n->channel);
}

asio::awaitable<void> Session::ApplyCommittedListens(const std::vector<endpoint::ListenOp>& committed) {
  if (!endpoint_->listener || session_done_) co_return;  // ended: ForgetSession unsubscribed it
  std::set<std::string> channels = endpoint_->listener->ChannelsOf(listen_id_);
  endpoint::ApplyListenOps(committed, channels);
  std::shared_ptr<endpoint::ListenerConnection> listener = endpoint_->listener;
  co_await listener->Set(listen_id_, std::move(channels));
  if (session_done_) listener->Remove(listen_id_);  // ended while waiting
}

asio::awaitable<void> Session::UnlistenBeforeRelease() {
  OriginConnection* c = conn_;
  pump_reading_ = true;
  std::string query;
  protocol::Encode(protocol::Query{"UNLISTEN *"}, query);
  absl::Status status = co_await c->Write(query);
  while (status.ok()) {
    auto frame = co_await c->ReadFrame();
    if (!frame.ok()) {
      status = frame.status();
      break;
    }
    if (frame->tag == 'A' && !NotificationViaListener(frame->payload)) {
      endpoint::AppendTranslatedNotification(pending_notifications_, frame->raw, endpoint_->notifier_pids);
    }
    if (frame->tag == 'E') status = absl::InternalError("UNLISTEN * failed");
    if (frame->tag == 'Z') break;
  }
  pump_reading_ = false;
  listens_.ClearConnectionListened();
  // (c is looked at only while it is still this session's lease.)
  AfterOwnQuery(c, status.ok() && (conn_ != c || c->transaction_status() == 'I'));
}

void Session::ForgetSession() {
  auto it = endpoint_->sessions_by_id.find(session_id_);
  if (it != endpoint_->sessions_by_id.end() && it->second == this) endpoint_->sessions_by_id.erase(it);
  if (app_pid_ != 0) endpoint_->notifier_pids.Forget(app_pid_);
  if (!pins_.empty() && !pin_counted_gone_) endpoint_->pinned_sessions--;
  pin_counted_gone_ = true;
  GivePinBudget();
  if (endpoint_->listener) endpoint_->listener->Remove(listen_id_);
  endpoint_->listen_sessions.erase(listen_id_);
  pending_notifications_.clear();
  if (idle_watch_) idle_watch_->cancel();
}

asio::awaitable<bool> Session::FlushToOrigin() {
  if (to_origin_.empty()) co_return true;
  if (!lease_) {
    to_origin_.clear();
    co_return false;
  }
  OriginConnection* c = conn_;
  writing_ = true;
  absl::Status st = co_await c->Write(to_origin_);
  writing_ = false;
  to_origin_.clear();
  ReleaseIfLarge(to_origin_);
  if (discard_pending_) {
    if (!pump_reading_) ReleaseLease(ReleaseDecision::kClose);
  } else if (!st.ok() && conn_ == c) {
    c->CloseNow();
    if (!pump_reading_) OnOriginLost(c, st);
    // else: the pump's read fails now and it handles the loss.
  } else {
    MaybeRelease();
  }
  pump_wake_.Notify();
  co_return st.ok();
}

void Session::AnswerAcquireFailure(const absl::Status& status, const protocol::Frame& first, std::size_t offset) {
  if (status.code() == absl::StatusCode::kResourceExhausted) endpoint_->acquire_timeouts++;
  QueueError("ERROR", SqlStateOf(status), AcquireErrorMessage(status));
  bool in_unit = false;
  auto answer = [&](char tag) {
    if (tag == 'Q' || tag == 'S' || tag == 'F') {
      QueueReadyForQuery('I');
      in_unit = false;
    } else if (tag != 'd' && tag != 'c' && tag != 'f' && tag != 'X') {
      in_unit = true;
    }
  };
  answer(first.tag);
  std::string_view rest = std::string_view(in_).substr(offset);
  for (;;) {
    auto r = reader_.Read(rest);
    if (!r.is_frame()) break;
    if (r.frame().tag == 'X') {
      terminated_ = true;  // Terminate is still honoured
      break;
    }
    answer(r.frame().tag);
    rest.remove_prefix(r.frame().size());
  }
  if (in_unit) {
    skip_until_sync_ = true;
    skip_status_ = 'I';
  }
}

asio::awaitable<void> Session::EndSession() {
  // A graceful Terminate after pipelined work: let that work finish (its
  // results are forwarded) before deciding about the connection.
  if (terminated_ && !stopping_) {
    if (lease_ && copy_.in_copy_in() && !conn_->broken()) {
      // Terminate inside COPY FROM STDIN: the origin waits for data that
      // will never come. End the COPY for the client (CopyFail, then a
      // Sync for an extended-protocol COPY; the simple protocol answers
      // it with one more ReadyForQuery) so the connection returns to 'I'.
      std::string end_copy;
      protocol::Encode(protocol::CopyFail{"the client ended its session during COPY"}, end_copy);
      protocol::Encode(protocol::Sync{}, end_copy);
      copy_.OnFrontend('f');
      if (copy_.OnFrontend('S')) ++outstanding_;
      in_unit_ = false;
      to_origin_ += end_copy;
    }
    if (!to_origin_.empty()) co_await FlushToOrigin();
    while (lease_ && (outstanding_ > 0) && !conn_->broken() && !stopping_) {
      pump_wake_.Notify();
      co_await changed_.Wait();
    }
  }
  session_done_ = true;
  timeout_timer_.cancel();
  ForgetSession();
  if (lease_) {
    CancelIfBusy();
    if (pump_reading_) {
      // Mid-result or mid-transaction: the pump's read fails and it
      // releases (closes) the connection.
      conn_->CloseNow();
    } else {
      ReleaseAtEnd();
    }
  }
  if (pump_started_) {
    pump_wake_.Notify();
  } else {
    link_->Close();
  }
}

// ----- Pump: the link writer

asio::awaitable<void> Session::Pump() {
  for (;;) {
    if (lease_ && (outstanding_ > 0 || in_unit_) && !session_done_) {
      co_await PumpOrigin();
      continue;
    }
    if (CapturePending() && !writing_ && !session_done_) {
      co_await CaptureSessionSettings();
      continue;
    }
    if (ListenCleanupPending() && !writing_ && !session_done_) {
      co_await UnlistenBeforeRelease();
      continue;
    }
    if (!pending_notifications_.empty() && IdleForNotifications()) {
      local_out_ += pending_notifications_;
      pending_notifications_.clear();
    }
    if (!local_out_.empty()) {
      std::string out = std::move(local_out_);
      local_out_.clear();
      if (link_gone_) continue;  // after Terminate: nobody to tell
      absl::Status sent = co_await link_->Send(std::move(out));
      changed_.Notify();
      if (close_after_send_ && !session_done_) {
        // A FATAL went out (pinned idle timeout): the session ends.
        stopping_ = true;
        link_->Close();
        changed_.Notify();
        continue;
      }
      if (!sent.ok()) {
        link_->Close();
        if (!session_done_) stopping_ = true;
        changed_.Notify();
      }
      continue;
    }
    if (end_after_flush_ && !stopping_) {
      // Everything for the client is out (a FATAL last): close the link.
      stopping_ = true;
      link_->Close();
      changed_.Notify();
      continue;
    }
    if (session_done_) break;
    co_await pump_wake_.Wait();
  }
  link_->Close();
}

asio::awaitable<void> Session::PumpOrigin() {
  OriginConnection* c = conn_;
  std::string batch;
  for (;;) {
    pump_reading_ = true;
    auto frame = co_await c->ReadFrame();
    pump_reading_ = false;
    if (!frame.ok()) {
      if (conn_ != c) co_return;  // released meanwhile (cannot happen while reading, but be safe)
      if (discard_pending_ || session_done_ || stopping_) {
        // Already accounted for, or nobody to tell: just discard it.
        if (writing_) {
          discard_pending_ = true;
        } else {
          ReleaseLease(ReleaseDecision::kClose);
        }
        co_return;
      }
      local_out_ += batch;
      OnOriginLost(c, frame.status());
      co_return;
    }
    const char tag = frame->tag;
    std::string_view raw = frame->raw;
    std::string rewritten;
    if (tag == 'E') {
      // A FATAL (pg_terminate_backend, a shutdown) goes to the client as
      // it is: the origin closes next, and so does this session, as a
      // direct connection would (docs/architecture.md, "Failure handling").
      auto error = protocol::DecodeErrorResponse(frame->payload);
      if (error.ok() && (error->severity() == "FATAL" || error->severity() == "PANIC")) origin_fatal_sent_ = true;
      if (error.ok() && statement_timeout_pending_ && error->sqlstate() == kSqlStateQueryCanceled) {
        // Our own CancelRequest for query_timeout: say why, as
        // statement_timeout does.
        protocol::EncodeErrorResponse(rewritten, "ERROR", kSqlStateQueryCanceled,
                                      "canceling statement due to statement timeout");
        raw = rewritten;
      }
    }
    const endpoint::CopyTracker::BackendEffect copy = copy_.OnBackend(tag);
    if (copy.unanswered > 0) outstanding_ -= std::min(outstanding_, copy.unanswered);
    if (copy.unit_reopened) in_unit_ = true;
    if (tag == 'A' && NotificationViaListener(frame->payload)) continue;  // the listener delivers it
    if ((tag == 'Z' || tag == 'E' || tag == 'C') && TracksListens()) {
      std::vector<endpoint::ListenOp> committed = listens_.OnBackend(tag, frame->payload);
      if (!committed.empty()) co_await ApplyCommittedListens(committed);
      if (tag == 'Z' && frame->payload[0] == 'I' && outstanding_ <= 1 && !in_unit_) {
        if (may_notify_ && endpoint_->listener && !session_done_ &&
            !endpoint_->listener->ChannelsOf(listen_id_).empty()) {
          // Its own NOTIFY on a channel it listens on reaches it before
          // this ReadyForQuery, as on a direct connection (listener.h).
          std::shared_ptr<endpoint::ListenerConnection> listener = endpoint_->listener;
          co_await listener->Barrier();
        }
        if (!pending_notifications_.empty()) {
          batch += pending_notifications_;  // as a backend does: after the commit, before ReadyForQuery
          pending_notifications_.clear();
        }
      }
    }
    // The query cache (capture, invalidate, control messages) sees what
    // the client sees: not the answers to our own hidden messages.
    if (!statements_.Hides(tag)) cache_.OnOriginFrame(tag, frame->raw, batch, *c);
    const bool checking = statements_.shape_check_pending();
    if (statements_.OnBackend(*frame, c->statements(), batch) == endpoint::StatementSession::Verdict::kForward) {
      if (tag == 'A') {
        // The sender pid as the apps know it (notification_pid.h).
        endpoint::AppendTranslatedNotification(batch, frame->raw, endpoint_->notifier_pids);
      } else {
        protocol::AppendRawFrame(batch, raw);
      }
    }
    if (checking && !statements_.shape_check_pending()) changed_.Notify();  // Run waits for it
    if (tag == 'Z' && !frame->payload.empty()) {
      last_activity_ = std::chrono::steady_clock::now();
      if (may_notify_) {
        // Its NOTIFYs were this session's, whoever uses the backend next.
        endpoint_->notifier_pids.Lend(c->backend_key().process_id, app_pid_);
        may_notify_ = outstanding_ > 1;
      }
      if (outstanding_ > 0) --outstanding_;
      statement_timeout_pending_ = false;
      NoteReady(frame->payload[0]);
      endpoint_->queries.fetch_add(1, std::memory_order_relaxed);
      if (outstanding_ == 0 && !in_unit_ && frame->payload[0] == 'I') {
        endpoint_->transactions++;
        EndTransactionTimer();
      }
      changed_.Notify();
      MaybeRelease();
    }
    const bool done_here = conn_ != c || (outstanding_ == 0 && !in_unit_);
    if (done_here || batch.size() >= kMaxLinkBatch || !c->HasBufferedFrame()) {
      absl::Status sent;  // (no co_await inside ?: — GCC mis-handles its temporaries)
      if (!link_gone_) sent = co_await link_->Send(std::move(batch));
      batch = std::string();
      if (!sent.ok() && terminated_ && conn_ == c && !c->broken()) {
        // The client said Terminate and closed its link: nobody reads the
        // rest, but the connection is sound. Drain it to its ReadyForQuery
        // (EndSession waits for that) and give it back.
        link_gone_ = true;
        sent = absl::OkStatus();
      }
      if (!sent.ok()) {
        // The client vanished mid-result: Run() notices too; never hand
        // this connection on.
        stopping_ = true;
        link_->Close();
        if (conn_ == c) {
          CancelIfBusy();
          if (!writing_) {
            ReleaseLease(ReleaseDecision::kClose);
          } else {
            c->CloseNow();
            discard_pending_ = true;
          }
        }
        changed_.Notify();
        co_return;
      }
      if (done_here || conn_ != c || session_done_) co_return;
    }
  }
}

void Session::OnOriginLost(OriginConnection* c, const absl::Status& reason) {
  if (conn_ != c || discard_pending_) return;
  listens_.OnConnectionLost();
  if (!origin_fatal_sent_) {
    QueueError("FATAL", kSqlStateConnectionFailure,
               fmt::format("hyperpool: the connection to the origin database was lost: {}",
                           std::string(reason.message())));
  }
  EndAfterFlush();
  outstanding_ = 0;
  in_unit_ = false;
  txn_started_ = {};  // a lost transaction is not timed
  if (writing_ || pump_reading_) {
    c->CloseNow();
    discard_pending_ = true;
  } else {
    ReleaseLease(ReleaseDecision::kClose);
  }
  pump_wake_.Notify();
  changed_.Notify();
}

void Session::EndAfterFlush() {
  end_after_flush_ = true;
  skip_until_sync_ = false;
  pump_wake_.Notify();
}

void Session::MaybeRelease() {
  if (!lease_ || writing_ || pump_reading_) return;
  if (outstanding_ > 0 || in_unit_ || copy_.in_copy_in()) return;
  ReleaseDecision d = ReleaseAtIdle();
  if (discard_after_unit_ && d != ReleaseDecision::kKeep) d = ReleaseDecision::kClose;  // refused pin ran
  ReleaseLease(d);
}

ReleaseDecision Session::ReleaseAtIdle() const {
  return DecideRelease({.mode = endpoint_->options.pool.mode,
                        .status = ToPoolStatus(conn_->transaction_status()),
                        .outstanding = outstanding_,
                        .pin = CurrentPin(),
                        .client_gone = false,
                        .broken = conn_->broken() || copy_.uncertain(),
                        .lifetime_exceeded = lease_.lifetime_exceeded()});
}

void Session::ReleaseAtEnd() {
  ReleaseDecision d = DecideRelease({.mode = endpoint_->options.pool.mode,
                                     .status = ToPoolStatus(conn_->transaction_status()),
                                     .outstanding = outstanding_ + (in_unit_ ? 1 : 0),
                                     .pin = CurrentPin(),
                                     .client_gone = true,
                                     .broken = conn_->broken() || discard_pending_ || discard_after_unit_ ||
                                               copy_.uncertain(),
                                     .lifetime_exceeded = lease_.lifetime_exceeded()});
  ReleaseLease(d);
}

void Session::EndTransactionTimer() {
  if (txn_started_ == std::chrono::steady_clock::time_point{}) return;
  endpoint_->transaction_time.Observe(std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - txn_started_));
  txn_started_ = {};
}

void Session::ReleaseLease(ReleaseDecision decision) {
  if (!lease_ || decision == ReleaseDecision::kKeep) return;
  if (decision == ReleaseDecision::kClose) {
    conn_->CloseNow();  // no Terminate: its state is unknown; the origin rolls back
    endpoint_->discarded++;
  }
  if (used_sequences_) {
    // Its work may have called nextval: the next session to borrow this
    // connection gets DISCARD SEQUENCES first (sequence_state.h).
    conn_->sequence_owner().UsedBy(serial_, ++sequence_generation_);
    used_sequences_ = false;
  }
  statements_.Reset();
  copy_.Reset();
  timeouts_.OnQuiet();
  if (decision == ReleaseDecision::kClose) listens_.OnConnectionLost();
  lease_.Release(decision);
  conn_ = nullptr;
  discard_after_unit_ = false;
  if (lease_out_of_cap_) {
    lease_out_of_cap_ = false;
    endpoint_->pinned_connections--;
  }
  if (pins_.empty() && !statements_.pinned()) GivePinBudget();  // e.g. after DEALLOCATE ALL
  discard_pending_ = false;
  origin_fatal_sent_ = false;
  changed_.Notify();
}

// ----- Operator timeouts (session_timeouts.h)

void Session::NoteWorkSent() {
  if (!timeouts_.enabled()) return;
  timeouts_.OnWorkSent(std::chrono::steady_clock::now());
  timeout_timer_.cancel();  // WatchTimeouts re-reads the deadline
}

void Session::NoteReady(char status) {
  if (!timeouts_.enabled()) return;
  timeouts_.OnReady(std::chrono::steady_clock::now(), outstanding_ > 0 || in_unit_, status == 'T' || status == 'E');
  timeout_timer_.cancel();
}

asio::awaitable<void> Session::WatchTimeouts() {
  while (!session_done_) {
    timeout_timer_.expires_at(timeouts_.NextDeadline());
    (void)co_await timeout_timer_.async_wait(kAsTuple);
    if (session_done_) break;
    switch (timeouts_.Due(std::chrono::steady_clock::now())) {
      case endpoint::SessionTimeouts::Action::kCancelQuery:
        // The same path as a client's cancel: the connection stays with
        // this session until the origin has processed the CancelRequest.
        if (lease_ && (outstanding_ > 0 || in_unit_) && CancelCurrentWork()) statement_timeout_pending_ = true;
        break;
      case endpoint::SessionTimeouts::Action::kEndIdleInTransaction:
        EndIdleInTransaction();
        break;
      case endpoint::SessionTimeouts::Action::kNone:
        break;
    }
  }
}

void Session::EndIdleInTransaction() {
  if (!lease_ || outstanding_ > 0 || in_unit_ || end_after_flush_) return;
  const char status = conn_->transaction_status();
  if (status != 'T' && status != 'E') return;
  QueueError("FATAL", kSqlStateIdleInTransactionTimeout, "terminating connection due to idle-in-transaction timeout");
  EndAfterFlush();
  if (writing_ || pump_reading_) {
    conn_->CloseNow();
    discard_pending_ = true;
  } else {
    ReleaseLease(ReleaseDecision::kClose);
  }
  changed_.Notify();
}

void Session::CancelIfBusy() {
  if (conn_ == nullptr || cancel_sent_ || (outstanding_ == 0 && !in_unit_)) return;
  cancel_sent_ = true;
  std::shared_ptr<Endpoint::Impl> ep = endpoint_;
  ep->pending_cancels++;
  asio::co_spawn(
      ep->executor,
      [ep, key = conn_->backend_key()]() -> asio::awaitable<void> {
        co_await endpoint::CancelOriginQuery(ep->executor, *ep->config, key);
        std::lock_guard<std::mutex> lock(ep->mutex);
        ep->pending_cancels--;
        ep->sessions_done.notify_all();
      },
      asio::detached);
}

void Session::QueueError(std::string_view severity, std::string_view sqlstate, std::string_view message) {
  protocol::EncodeErrorResponse(local_out_, severity, sqlstate, message);
  pump_wake_.Notify();
}

void Session::QueueReadyForQuery(char status) {
  AppendReadyForQuery(local_out_, status);
  pump_wake_.Notify();
}

}  // namespace hyperpool
