// Session (endpoint_session.h), part one: construction, Run (the link
// reader: hello, probe, watch, the work loop and HandleFrame), and the
// session's settings, pins and cancel routing. Part two is
// endpoint_session_pump.cc.
#include "endpoint/endpoint_session.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <fmt/format.h>

#include "absl/strings/cord.h"
#include "endpoint/notification_pid.h"
#include "endpoint/origin_connection.h"
#include "endpoint/pin_budget.h"
#include "endpoint/settings_replay.h"
#include "placement/probe.h"
#include "protocol/codec.h"
#include "protocol/sqlstate.h"
#include "protocol/link_protocol.h"

namespace hyperpool {

Session::Session(std::shared_ptr<Endpoint::Impl> endpoint, std::unique_ptr<Link> link)
    : endpoint_(std::move(endpoint)),
      link_(std::move(link)),
      pump_wake_(endpoint_->executor),
      changed_(endpoint_->executor),
      reader_(protocol::FrameReader::Mode::kStartup),
      cache_(endpoint_->cache, endpoint_->executor, [this](std::string control) {
        if (watch_ && stopping_) return;
        local_out_ += control;  // a broadcast invalidation for this session's Client
        pump_wake_.Notify();
        if (watch_ && local_out_.size() > kMaxLocalBacklog) Shutdown();  // a Client not reading its watch
      }),
      listen_id_(++endpoint_->next_listen_id) {
  endpoint_->listen_sessions[listen_id_] = this;
}

Session::~Session() {
  // A lease still held here closes its connection (Lease's destructor).
  endpoint_->listen_sessions.erase(listen_id_);
  std::lock_guard<std::mutex> lock(endpoint_->mutex);
  endpoint_->sessions.erase(this);
  (watch_ ? endpoint_->watch_count : endpoint_->session_count).fetch_sub(1);
  endpoint_->sessions_done.notify_all();
}

void Session::Start() {
  asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->Run(); }, asio::detached);
}

void Session::DeliverNotification(std::string_view raw_frame) {
  if (session_done_ || stopping_ || notifications_overflowed_) return;
  if (pending_notifications_.size() + raw_frame.size() > kMaxQueuedNotificationBytes) {
    // A session that never goes idle while notifications pour in: end it
    // rather than buffer without bound (PostgreSQL's own queue is bounded
    // too, and a full one makes NOTIFY fail).
    notifications_overflowed_ = true;
    pending_notifications_.clear();
    QueueError("FATAL", kSqlStateOutOfMemory, "hyperpool: too many notifications queued for this session");
    close_after_send_ = true;
    return;
  }
  // The sender pid as the apps know it (notification_pid.h).
  endpoint::AppendTranslatedNotification(pending_notifications_, raw_frame, endpoint_->notifier_pids);
  endpoint_->notifications_delivered++;
  pump_wake_.Notify();
}

void Session::Shutdown() {
  stopping_ = true;
  link_->Close();
  if (conn_ != nullptr) conn_->CloseNow();
  pump_wake_.Notify();
  changed_.Notify();
}

// ----- Run: the link reader

asio::awaitable<void> Session::Run() {
  endpoint_->NoteThread();
  const bool hello = co_await ReadHello();
  if (hello && probe_) {
    co_await AnswerProbe();
  } else if (hello && watch_) {
    co_await RunWatch();
  } else if (hello && co_await SendLinkReady()) {
    asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->Pump(); }, asio::detached);
    pump_started_ = true;
    if (timeouts_.enabled()) {
      asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->WatchTimeouts(); },
                     asio::detached);
    }
    co_await WorkLoop();
  }
  co_await EndSession();
}

asio::awaitable<bool> Session::ReadHello() {
  for (;;) {
    auto r = reader_.Read(in_);
    if (r.is_frame()) {
      auto packet = protocol::DecodeStartupPacket(r.frame().payload);
      if (!packet.ok() || !std::holds_alternative<protocol::StartupMessage>(*packet)) {
        co_await SendFatal(kSqlStateProtocolViolation, "hyperpool: the link did not start with a StartupMessage");
        co_return false;
      }
      for (const auto& [name, value] : std::get<protocol::StartupMessage>(*packet).parameters) {
        hello_parameters_.emplace_back(std::string(name), std::string(value));
      }
      in_.erase(0, r.frame().size());
      reader_.set_mode(protocol::FrameReader::Mode::kTagged);
      if (!OnHello()) co_return false;  // a cancel link: routed, nothing more
      co_return true;
    }
    if (r.is_error()) {
      co_await SendFatal(kSqlStateProtocolViolation,
                         fmt::format("hyperpool: invalid hello on the link: {}", std::string(r.status().message())));
      co_return false;
    }
    auto n = co_await link_->Receive(in_);
    if (!n.ok()) co_return false;
  }
}

asio::awaitable<bool> Session::SendLinkReady() {
  if (endpoint_->origin_parameters.empty()) {
    auto lease = co_await endpoint_->pool->Acquire();
    if (!lease.ok()) {
      if (lease.status().code() == absl::StatusCode::kResourceExhausted) endpoint_->acquire_timeouts++;
      co_await SendFatal(SqlStateOf(lease.status()), AcquireErrorMessage(lease.status()));
      co_return false;
    }
    auto& conn = lease->As<OriginConnection>();
    if (endpoint_->origin_parameters.empty()) endpoint_->origin_parameters = conn.parameters();
    lease->Release(DecideRelease({.mode = endpoint_->options.pool.mode,
                                  .status = ToPoolStatus(conn.transaction_status()),
                                  .client_gone = true,
                                  .broken = conn.broken(),
                                  .lifetime_exceeded = lease->lifetime_exceeded()}));
  }
  std::string out;
  for (const auto& [name, value] : endpoint_->origin_parameters) {
    protocol::Encode(protocol::ParameterStatus{name, value}, out);
  }
  AppendReadyForQuery(out, 'I');
  absl::Status sent = co_await link_->Send(std::move(out));
  co_return sent.ok() && !stopping_;
}

asio::awaitable<void> Session::AnswerProbe() {
  constexpr auto kFresh = std::chrono::seconds(10);
  std::shared_ptr<Endpoint::Impl> ep = endpoint_;
  if (ep->rtt_count == 0) {
    absl::Status measured = co_await MeasureOriginRtt(ep);
    if (!measured.ok()) {
      co_await SendFatal(SqlStateOf(measured), AcquireErrorMessage(measured));
      co_return;
    }
  } else if (std::chrono::steady_clock::now() - ep->rtt_measured_at > kFresh && !ep->rtt_refreshing) {
    // Answer with what is known now (a busy pool must not stall a probe)
    // and refresh in the background for the next one.
    ep->rtt_refreshing = true;
    asio::co_spawn(
        ep->executor,
        [ep]() -> asio::awaitable<void> {
          (void)co_await MeasureOriginRtt(ep);
          ep->rtt_refreshing = false;
        },
        asio::detached);
  }
  std::string out;
  protocol::Encode(protocol::ParameterStatus{placement::kOriginRttParam, std::to_string(ep->origin_rtt_us.load())},
                   out);
  AppendReadyForQuery(out, 'I');
  (void)co_await link_->Send(std::move(out));
}

asio::awaitable<void> Session::RunWatch() {
  local_out_ = cache_.StartWatch(hello_parameters_);
  QueueReadyForQuery('I');
  asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->Pump(); }, asio::detached);
  pump_started_ = true;
  while (!stopping_) {
    auto r = reader_.Read(in_);
    if (r.is_need_more()) {
      auto n = co_await link_->Receive(in_);
      if (!n.ok()) co_return;
      continue;
    }
    if (r.is_error() || (r.frame().tag != 'S' && r.frame().tag != 'X')) {
      QueueError("FATAL", kSqlStateProtocolViolation, "hyperpool: a cache watch link takes only Sync and Terminate");
      end_after_flush_ = true;
      co_return;
    }
    const char tag = r.frame().tag;
    in_.erase(0, r.frame().size());
    if (tag == 'X') {
      terminated_ = true;
      co_return;
    }
    QueueReadyForQuery('I');  // the heartbeat: after every invalidation queued before it
  }
}

asio::awaitable<void> Session::SendFatal(std::string_view sqlstate, std::string_view message) {
  std::string out;
  protocol::EncodeErrorResponse(out, "FATAL", sqlstate, message);
  (void)co_await link_->Send(std::move(out));
}

asio::awaitable<void> Session::WorkLoop() {
  for (;;) {
    std::size_t offset = 0;
    bool end = false;
    while (!end && !stopping_) {
      auto r = reader_.Read(std::string_view(in_).substr(offset));
      if (r.is_need_more()) break;
      if (r.is_error()) {
        QueueError("FATAL", kSqlStateProtocolViolation,
                   fmt::format("hyperpool: invalid message on the link: {}", std::string(r.status().message())));
        end = true;
        break;
      }
      const protocol::Frame frame = r.frame();
      offset += frame.size();
      switch (co_await HandleFrame(frame, offset)) {
        case Next::kContinue:
          break;
        case Next::kRestOfInputConsumed:
          offset = in_.size();
          break;
        case Next::kEnd:
          end = true;
          break;
      }
      if (terminated_) end = true;
      if (!to_origin_.empty() && (to_origin_.size() >= kMaxOriginBatch)) {
        if (!co_await FlushToOrigin()) end = end || stopping_;
      }
    }
    if (!to_origin_.empty()) co_await FlushToOrigin();
    in_.erase(0, offset);
    ReleaseIfLarge(in_);
    if (end || stopping_) co_return;
    // Backpressure for locally made answers: let the pump catch up.
    while (local_out_.size() > kMaxLocalBacklog && !stopping_) co_await changed_.Wait();
    auto n = co_await link_->Receive(in_);
    if (!n.ok()) co_return;  // the client vanished (or closed without Terminate)
  }
}

asio::awaitable<Session::Next> Session::HandleFrame(const protocol::Frame& frame, std::size_t offset) {
  const char tag = frame.tag;
  if (tag == 'X') {
    terminated_ = true;
    co_return Next::kEnd;
  }
  if (end_after_flush_) co_return Next::kEnd;  // the origin connection died: the session ends
  if (skip_until_sync_) {
    // After an error in extended-query mode PostgreSQL discards messages
    // until Sync, which it answers with ReadyForQuery.
    if (tag == 'S') {
      skip_until_sync_ = false;
      QueueReadyForQuery(skip_status_);
    }
    co_return Next::kContinue;
  }
  // The settings capture or a cancel still owns the connection.
  while (GateClosed() && !stopping_) {
    pump_wake_.Notify();
    co_await changed_.Wait();
  }
  if (stopping_) co_return Next::kEnd;
  // The statement text, decoded once; every pass below shares its analysis.
  std::optional<cache::SqlText> text;
  if (tag == 'Q') {
    if (auto q = protocol::DecodeQuery(frame.payload); q.ok()) text.emplace(q->query);
  } else if (tag == 'P') {
    if (auto p = protocol::DecodeParse(frame.payload); p.ok()) text.emplace(p->query);
  }
  const cache::SqlText* sql = text ? &*text : nullptr;
  if (!rewritten_pin_ && !NoteSessionEffects(frame, sql)) co_return co_await HandleRefusedPin(frame, offset);
  if (tag == 'P' && TracksListens()) listens_.OnFrontend(tag, frame.payload, sql);  // remembered by name
  if (lease_ && conn_->broken()) {
    // The origin connection died; wait until it has been accounted for
    // (errors queued, lease dropped) before starting new work. Nothing
    // is pending for it here: Run() flushes before every suspension.
    to_origin_.clear();
    while (lease_ && !stopping_) {
      pump_wake_.Notify();
      co_await changed_.Wait();
    }
    if (stopping_) co_return Next::kEnd;
    co_return co_await HandleFrame(frame, offset);
  }
  {
    // The query cache (endpoint_cache.h): a unit of work answered from
    // the Endpoint tier needs no origin connection.
    cache_.Start(hello_parameters_);
    const bool idle = outstanding_ == 0 && !in_unit_ && to_origin_.empty() &&
                      (!lease_ || conn_->transaction_status() == 'I');
    const bool served = co_await cache_.Intercept(frame, sql, std::string_view(in_).substr(offset), idle, local_out_,
                                                  skip_until_sync_, skip_status_);
    if (served) {
      pump_wake_.Notify();
      co_return Next::kContinue;
    }
  }
  if (!lease_ && !rewritten_pin_ && (parse_only_unit_ || (tag == 'P' && endpoint::StatementSession::IsParseOnlyUnit(
                                                        std::string_view(in_).substr(offset - frame.size()))))) {
    // Named Parses up to a Sync (PQprepare) need no connection (statement_session.h).
    if (tag == 'P') statements_.set_scope(StatementScope());
    parse_only_unit_ = statements_.AnswerParseOnly(frame, local_out_);
    pump_wake_.Notify();
    co_return Next::kContinue;
  }
  if (!lease_) {
    // COPY data outside COPY: PostgreSQL ignores it, and it starts no work.
    if (tag == 'd' || tag == 'c' || tag == 'f') co_return Next::kContinue;
    starting_unit_ = true;  // a cancel now ends this unit before it starts
    acquiring_ = true;      // ...and a cancel while waiting leaves the queue at once
    const auto acquire_started = std::chrono::steady_clock::now();
    auto lease = co_await endpoint_->pool->Acquire(&acquire_cancel_);
    acquiring_ = false;
    endpoint_->acquire_wait.Observe(std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - acquire_started));
    if (stopping_) co_return Next::kEnd;
    if (!lease.ok()) {
      starting_unit_ = cancel_requested_ = false;
      if (cache_.ServeStaleOnError(lease.status(), local_out_, skip_until_sync_, skip_status_)) {
        pump_wake_.Notify();  // stale-if-error (endpoint_cache.h): answered like a hit
        co_return Next::kContinue;
      }
      AnswerAcquireFailure(lease.status(), frame, offset);
      co_return Next::kRestOfInputConsumed;
    }
    lease_ = std::move(*lease);
    conn_ = &lease_.As<OriginConnection>();
    absl::Status prepared = co_await PrepareConnection();
    const bool cancelled = prepare_cancelled_;
    if (!prepared.ok()) {
      // A cancel that came as the connection was handed over: nothing of
      // the unit was sent, so the healthy connection goes back as it came.
      // A failed settings replay leaves it in an unknown state: close it.
      ReleaseLease(cancelled && !conn_->broken() && conn_->transaction_status() == 'I' ? ReleaseAtIdle()
                                                                                        : ReleaseDecision::kClose);
      cache_.AbandonUnit();
      AnswerAcquireFailure(prepared, frame, offset);
      co_return Next::kRestOfInputConsumed;
    }
  }
  if (pin_budget_held_ && !lease_out_of_cap_) {
    // Pinned: its connection leaves the pool's cap (pin_budget.h).
    lease_.MoveOutOfCap();
    lease_out_of_cap_ = true;
    endpoint_->pinned_connections++;
  }
  last_activity_ = std::chrono::steady_clock::now();
  // What a ReadyForQuery will answer, COPY included (copy_tracker.h).
  const bool answered = copy_.OnFrontend(tag);
  // Metrics: a transaction starts with the first message sent outside one.
  if (txn_started_ == std::chrono::steady_clock::time_point{}) txn_started_ = std::chrono::steady_clock::now();
  switch (tag) {
    case 'Q':
    case 'S':
    case 'F':
      // One the backend ignores (a Sync inside COPY) or consumes as an
      // error (a Query inside COPY) leaves the unit as it was.
      if (answered) {
        ++outstanding_;
        in_unit_ = false;
      }
      break;
    case 'P':
    case 'B':
    case 'D':
    case 'E':
    case 'C':
    case 'H':
      if (!copy_.in_copy_in()) in_unit_ = true;  // a Flush inside COPY opens nothing
      break;
    default:
      break;  // CopyData/CopyDone/CopyFail ride along with their COPY
  }
  // COPY data and Flush start no work of their own (a stray CopyData must
  // not make a session idle in a transaction look busy).
  if (tag != 'd' && tag != 'c' && tag != 'f' && tag != 'H') NoteWorkSent();
  cache_.OnForward(frame, sql);  // writes and state changes, for the query cache
  if (tag != 'P' && TracksListens()) listens_.OnFrontend(tag, frame.payload, sql);  // LISTEN/UNLISTEN (listen_state.h)
  if (tag == 'P') statements_.set_scope(StatementScope());
  if (statements_.StartShapeCheck(frame, conn_->statements(), to_origin_)) {
    // A statement prepared before DDL is re-Parsed here: its result shape
    // is checked before the client's Bind goes out (statement_session.h).
    co_await FlushToOrigin();
    while (lease_ && statements_.shape_check_pending() && !stopping_) {
      pump_wake_.Notify();
      co_await changed_.Wait();
    }
    if (stopping_) co_return Next::kEnd;
    if (!lease_) co_return Next::kContinue;  // lost meanwhile: the loss answered the unit
  }
  // Prepared statements: renamed, replayed or answered here (statement_session.h).
  statements_.OnFrontend(frame, conn_->statements(), to_origin_);
  pump_wake_.Notify();
  co_return Next::kContinue;
}

asio::awaitable<absl::Status> Session::PrepareConnection() {
  // Who sent a notification is who last ran a unit that may NOTIFY on
  // that backend (from its first message to its ReadyForQuery), not who
  // holds it now: the listener's copy of another session's NOTIFY may
  // arrive after this connection was lent again. A backend nobody used
  // yet is this session's from the start.
  if (may_notify_) {
    endpoint_->notifier_pids.Lend(conn_->backend_key().process_id, app_pid_);
  } else {
    endpoint_->notifier_pids.LendIfUnknown(conn_->backend_key().process_id, app_pid_);
  }
  writing_ = true;
  absl::Status status = co_await endpoint::ApplySettings(*conn_, settings_.desired(),
                                                         conn_->sequence_owner().NeedsDiscardFor(serial_, sequence_generation_));
  writing_ = false;
  starting_unit_ = false;
  parameter_mark_ = conn_->parameter_changes();
  prepare_cancelled_ = status.ok() && cancel_requested_;
  if (prepare_cancelled_) {
    status = absl::AbortedError("canceling statement due to user request");
    status.SetPayload(endpoint::kSqlStateStatusPayload, absl::Cord(std::string(kSqlStateQueryCanceled)));
  }
  cancel_requested_ = false;
  co_return status;
}

// ----- Session settings, pins, cancel routing (session_settings.h)

bool Session::OnHello() {
  std::string cancel_id;
  for (const auto& [name, value] : hello_parameters_) {
    if (name == link::kCancelSessionParam) cancel_id = value;
    if (name == link::kSessionIdParam) session_id_ = value;
    if (name == endpoint::kBackendPidParam) app_pid_ = endpoint::ParseBackendPid(value).value_or(0);
    if (name == placement::kProbeParam) probe_ = true;
    if (name == cache::kWatchParam && value == "1") watch_ = true;
  }
  if (watch_ && !probe_) {
    // Not a session: counted as a watch (EndpointStats::cache_watches).
    session_id_.clear();
    endpoint_->session_count.fetch_sub(1);
    endpoint_->watch_count.fetch_add(1);
    return true;  // served by RunWatch
  }
  watch_ = false;
  if (probe_) {
    session_id_.clear();
    return true;  // answered by AnswerProbe
  }
  if (!cancel_id.empty()) {
    session_id_.clear();
    RouteCancel(cancel_id);
    return false;
  }
  settings_ = endpoint::SessionSettings(hello_parameters_);
  if (endpoint_->options.pool.mode == PoolMode::kTransaction) {
    // The query cache keys by the captured settings (endpoint_cache.h);
    // a change made while pinned is not captured, so it bypasses instead.
    cache_.TrackSettings(&settings_, [this] { return pins_.empty() && !statements_.pinned(); });
  }
  if (!session_id_.empty()) endpoint_->sessions_by_id[session_id_] = this;
  return true;
}

void Session::RouteCancel(const std::string& id) {
  auto it = endpoint_->sessions_by_id.find(id);
  if (it != endpoint_->sessions_by_id.end() && it->second->CancelCurrentWork()) {
    endpoint_->cancels_forwarded++;
  } else {
    endpoint_->cancels_ignored++;  // idle or unknown: hits no one
  }
}

bool Session::CancelCurrentWork() {
  if (session_done_ || stopping_) return false;
  if (starting_unit_) {
    // Still waiting in the pool's queue: leave it now with 57014; the pool
    // is untouched. Already handed a connection (settings replay): the
    // unit ends with 57014 before any of it is sent.
    absl::Status cancelled = absl::AbortedError("canceling statement due to user request");
    cancelled.SetPayload(kSqlStatePayload, absl::Cord(std::string(kSqlStateQueryCanceled)));
    if (!(acquiring_ && acquire_cancel_.Cancel(cancelled))) cancel_requested_ = true;
    return true;
  }
  if (!lease_ || conn_ == nullptr || (outstanding_ == 0 && !in_unit_)) return false;
  ++cancels_in_flight_;
  std::shared_ptr<Endpoint::Impl> ep = endpoint_;
  ep->pending_cancels++;
  asio::co_spawn(
      ep->executor,
      [self = shared_from_this(), ep, key = conn_->backend_key()]() -> asio::awaitable<void> {
        co_await endpoint::CancelOriginQuery(ep->executor, *ep->config, key);
        {
          std::lock_guard<std::mutex> lock(ep->mutex);
          ep->pending_cancels--;
          ep->sessions_done.notify_all();
        }
        self->OnCancelDelivered();
      },
      asio::detached);
  return true;
}

void Session::OnCancelDelivered() {
  if (cancels_in_flight_ > 0) --cancels_in_flight_;
  MaybeRelease();
  changed_.Notify();
  pump_wake_.Notify();
}

bool Session::CapturePending() const {
  return lease_ && conn_ != nullptr &&
         (settings_.capture_owed() || conn_->parameter_changes() != parameter_mark_) &&
         endpoint_->options.pool.mode == PoolMode::kTransaction && pins_.empty() && !statements_.pinned() &&
         outstanding_ == 0 && !in_unit_ && conn_->transaction_status() == 'I' && !conn_->broken();
}

PinReason Session::CurrentPin() const {
  if (PinReason pin = pins_.First(); pin != PinReason::kNone) return pin;
  if (statements_.pinned()) return PinReason::kPreparedSql;
  if (cancels_in_flight_ > 0) return PinReason::kOther;
  if (CapturePending()) return PinReason::kSessionSetting;
  if (ListenCleanupPending()) return PinReason::kOther;  // UNLISTEN * first
  return PinReason::kNone;
}

bool Session::NoteSessionEffects(const protocol::Frame& frame, const cache::SqlText* text) {
  if (frame.tag != 'Q' && frame.tag != 'P' && frame.tag != 'B' && frame.tag != 'C' && frame.tag != 'F') return true;
  endpoint::SessionEffects effects = settings_.NoteFrontend(frame.tag, frame.payload, text);
  if (effects.sequences) used_sequences_ = true;  // marks the connection it runs on (ReleaseLease)
  if ((frame.tag == 'Q' || frame.tag == 'P') && !(text != nullptr && text->simple_read()) &&
      endpoint::MayNotify(frame.payload)) {
    // From now on this backend's notifications are this session's: the
    // listener's copy may arrive before the unit's ReadyForQuery.
    may_notify_ = true;
    if (lease_) endpoint_->notifier_pids.Lend(conn_->backend_key().process_id, app_pid_);
  }
  if (effects.pins.empty()) return true;
  if (!TakePinBudget()) return false;
  for (PinReason reason : effects.pins) AddPin(reason);
  return true;
}

bool Session::TakePinBudget() {
  if (pin_budget_held_ || endpoint_->options.pool.mode != PoolMode::kTransaction) return true;
  if (!endpoint_->pin_budget.TryTake()) return false;
  pin_budget_held_ = true;
  if (endpoint_->options.pinned_idle_timeout.count() > 0 && !idle_watch_) {
    idle_watch_ = std::make_unique<asio::steady_timer>(endpoint_->executor);
    asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->WatchPinnedIdle(); },
                   asio::detached);
  }
  return true;
}

void Session::GivePinBudget() {
  if (!pin_budget_held_) return;
  pin_budget_held_ = false;
  endpoint_->pin_budget.Give();
}

asio::awaitable<Session::Next> Session::HandleRefusedPin(const protocol::Frame& frame, std::size_t offset) {
  endpoint_->pins_rejected++;
  fmt::print(stderr, "hyperpool: session {}: pinned budget spent (max_pinned = {}), statement refused\n",
             session_id_.empty() ? std::string("-") : session_id_, endpoint_->pin_budget.limit());
  std::string rewritten;
  if (!endpoint::RewritePinningMessage(frame.tag, frame.payload, endpoint_->pin_budget.limit(), rewritten)) {
    discard_after_unit_ = true;
    co_return co_await HandleFrameUnpinned(frame, offset);
  }
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  auto r = reader.Read(rewritten);
  if (!r.is_frame()) co_return Next::kContinue;  // cannot happen: we encoded it
  // Later Binds of that name run the replacement: they pin nothing.
  if (frame.tag == 'P') (void)settings_.NoteFrontend('P', r.frame().payload);
  rewritten_pin_ = true;
  Next next = co_await HandleFrame(r.frame(), offset);
  rewritten_pin_ = false;
  co_return next;
}

asio::awaitable<Session::Next> Session::HandleFrameUnpinned(const protocol::Frame& frame, std::size_t offset) {
  rewritten_pin_ = true;  // its effects are not noted again
  Next next = co_await HandleFrame(frame, offset);
  rewritten_pin_ = false;
  co_return next;
}

asio::awaitable<void> Session::WatchPinnedIdle() {
  const auto limit = endpoint_->options.pinned_idle_timeout;
  last_activity_ = std::chrono::steady_clock::now();
  while (!session_done_ && !stopping_) {
    const bool idle = outstanding_ == 0 && !in_unit_ && to_origin_.empty() &&
                      (!lease_ || conn_->transaction_status() == 'I');
    const auto now = std::chrono::steady_clock::now();
    if (pin_budget_held_ && idle && now - last_activity_ >= limit) {
      endpoint_->pinned_idle_timeouts++;
      QueueError("FATAL", kSqlStateIdleSessionTimeout, "terminating connection due to idle-session timeout");
      close_after_send_ = true;
      co_return;
    }
    idle_watch_->expires_at(idle ? last_activity_ + limit : now + limit);
    (void)co_await idle_watch_->async_wait(kAsTuple);
  }
}

void Session::AddPin(PinReason reason) {
  const bool first = pins_.empty();
  if (!pins_.Add(reason)) return;
  endpoint_->pins[static_cast<std::size_t>(reason)]++;
  if (first) endpoint_->pinned_sessions++;
  fmt::print(stderr, "hyperpool: session {} pinned to its origin connection: {}\n",
             session_id_.empty() ? std::string("-") : session_id_, PinReasonName(reason));
}

asio::awaitable<void> Session::CaptureSessionSettings() {
  OriginConnection* c = conn_;
  pump_reading_ = true;
  auto outcome = co_await endpoint::CaptureSettings(*c, settings_, endpoint_->config->user);
  pump_reading_ = false;
  parameter_mark_ = c->parameter_changes();
  absl::Status status = outcome.status();
  if (outcome.ok() && outcome->role_changed && conn_ == c) {
    // The session is someone else now and must stay so (as after SET
    // ROLE); its connection never reaches another client and is closed
    // when the session ends.
    AddPin(PinReason::kSetRole);
  }
  if (conn_ == c && !status.ok()) {
    fmt::print(stderr, "hyperpool: reading session settings failed, closing the connection: {}\n",
               std::string(status.message()));
  }
  AfterOwnQuery(c, status.ok());
}

void Session::AfterOwnQuery(OriginConnection* c, bool healthy) {
  if (conn_ == c) {
    if (!healthy || discard_pending_ || session_done_ || stopping_) {
      if (writing_) {
        c->CloseNow();
        discard_pending_ = true;
      } else {
        ReleaseLease(ReleaseDecision::kClose);
      }
    } else {
      MaybeRelease();
    }
  }
  changed_.Notify();
  pump_wake_.Notify();
}

std::string Session::StatementScope() const {
  std::string scope;
  if (pins_.Has(PinReason::kSetRole)) scope = "role " + std::to_string(serial_);
  const endpoint::SettingMap& desired = settings_.desired();
  if (auto it = desired.find("search_path"); it != desired.end()) {
    scope += " search_path ";
    scope += it->second;
  }
  return scope;
}

}  // namespace hyperpool
