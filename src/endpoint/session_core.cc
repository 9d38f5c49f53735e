// SessionCore (session_core.h), part one: the transition function, client
// frames (the unit of work from the link to the origin), acquires.
// Part two, session_core_origin.cc: origin frames, releases, the end; part
// three, session_core_pins.cc: pins, backend signals, cancels and timeouts.
#include "endpoint/session_core.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include "absl/strings/cord.h"
#include "endpoint/backend_signal.h"
#include "endpoint/notification_pid.h"
#include "endpoint/pin_budget.h"
#include "protocol/codec.h"
#include "protocol/sqlstate.h"

namespace hyperpool::endpoint {
std::string_view SessionCore::StateName(State state) {
  switch (state) {
    case State::kIdle: return "idle";
    case State::kIntercepting: return "intercepting";
    case State::kAcquiring: return "acquiring";
    case State::kPreparing: return "preparing";
    case State::kActive: return "active";
    case State::kShapeChecking: return "shape-checking";
    case State::kOwnQuery: return "own-query";
    case State::kDraining: return "draining";
    case State::kEnding: return "ending";
    case State::kClosed: return "closed";
  }
  return "?";
}

// The variant's index is the State.
template <SessionCore::State S, class Data>
constexpr bool kIndexed =
    std::is_same_v<std::variant_alternative_t<static_cast<std::size_t>(S), SessionCore::StateData>, Data>;
static_assert(kIndexed<SessionCore::State::kIdle, SessionCore::Idle> &&
              kIndexed<SessionCore::State::kIntercepting, SessionCore::Intercepting> &&
              kIndexed<SessionCore::State::kAcquiring, SessionCore::Acquiring> &&
              kIndexed<SessionCore::State::kPreparing, SessionCore::Preparing> &&
              kIndexed<SessionCore::State::kActive, SessionCore::Active> &&
              kIndexed<SessionCore::State::kShapeChecking, SessionCore::ShapeChecking> &&
              kIndexed<SessionCore::State::kOwnQuery, SessionCore::OwnQuery> &&
              kIndexed<SessionCore::State::kDraining, SessionCore::Draining> &&
              kIndexed<SessionCore::State::kEnding, SessionCore::Ending> &&
              kIndexed<SessionCore::State::kClosed, SessionCore::Closed> &&
              std::variant_size_v<SessionCore::StateData> == static_cast<std::size_t>(SessionCore::State::kClosed) + 1);

SessionCore::StateData SessionCore::DataOf(State state) {
  switch (state) {
    case State::kIdle: return Idle{};
    case State::kIntercepting: return Intercepting{};
    case State::kAcquiring: return Acquiring{};
    case State::kPreparing: return Preparing{};
    case State::kActive: return Active{};
    case State::kShapeChecking: return ShapeChecking{};
    case State::kOwnQuery: return OwnQuery{};
    case State::kDraining: return Draining{};
    case State::kEnding: return Ending{};
    case State::kClosed: return Closed{};
  }
  return Idle{};
}

SessionCore::SessionCore(Endpoint::Impl& endpoint, SessionCache& cache, Identity identity)
    : endpoint_(endpoint),
      cache_(cache),
      id_(std::move(identity)),
      timeouts_(endpoint.options.query_timeout, endpoint.options.idle_in_transaction_timeout),
      settings_(id_.hello, &endpoint.on_executor.startup_settings),
      serial_(++endpoint.on_executor.last_session_serial),
      statements_(endpoint.on_executor.statements) {
  Attach(/*woken=*/false);
  cache_.Start(id_.hello);
  // Read by the two above only: an idle session does not keep them (they
  // were ~600 bytes per session with their vector's spare room).
  std::vector<std::pair<std::string, std::string>>().swap(id_.hello);
  last_activity_ = std::chrono::steady_clock::now();
}

SessionCore::SessionCore(Endpoint::Impl& endpoint, SessionCache& cache, Dormant dormant)
    : endpoint_(endpoint),
      cache_(cache),
      id_(std::move(dormant.id)),
      timeouts_(endpoint.options.query_timeout, endpoint.options.idle_in_transaction_timeout),
      settings_(std::move(dormant.settings)),
      serial_(dormant.serial),
      statements_(endpoint.on_executor.statements) {
  Attach(/*woken=*/true);  // (the cache was started by the first core)
  origin_lease_.store(Pack(dormant.origin_lease), std::memory_order_relaxed);
  previous_lease_ = dormant.previous_lease;
  observed_lease_.store(Pack(dormant.observed_lease), std::memory_order_relaxed);
  sequence_generation_ = dormant.sequence_generation;
  statements_.Restore(std::move(dormant.statements));
  last_activity_ = std::chrono::steady_clock::now();
}

void SessionCore::Attach(bool woken) {
  if (endpoint_.options.pool.mode == PoolMode::kTransaction) {
    // The query cache keys by the captured settings (endpoint_cache.h); a
    // change made while pinned is not captured, so it bypasses instead.
    // Woken: the key was built from these settings at some capture count;
    // a capture since (a SET before the sleep) must still re-key.
    cache_.TrackSettings(&settings_, [this] { return pins_.empty() && !statements_.pinned(); }, woken);
  }
  cache_.set_client_statements(&statements_.client());
}

bool SessionCore::CanSleep() const {
  return state() == State::kIdle && conn_ == nullptr && in_.empty() && head_.stand_in.empty() &&
         held_frame_.empty() && head_.step == Step::kStart && !head_.stand_in_noted && !head_.effects_noted &&
         !advancing_ && outstanding_ == 0 && !in_unit_ && !origin_fatal_sent_ && !terminated_ && !client_gone_ &&
         !link_gone_ && !stopping_ && !session_done_ && !skip_until_sync_ &&
         copy_.state() == CopyTracker::State::kNormal && !copy_.in_copy_out() && !copy_.uncertain() &&
         timeouts_.Quiet() && !statement_timeout_pending_ && !cancel_sent_ && cancels_in_flight_ == 0 &&
         hold_ == HoldStep::kNone && !settings_.capture_owed() && pins_.empty() && !used_sequences_ && !may_notify_ &&
         !pin_counted_gone_ && statements_.Quiet() && !parse_only_unit_ && !pin_budget_held_ && !lease_out_of_cap_ &&
         std::holds_alternative<std::monostate>(pin_gate_) && !signal_wait_ &&
         !discard_after_unit_ && !idle_watch_started_ && listens_.Idle() && pending_notifications_.empty() &&
         !notifications_overflowed_ && out_.to_client.empty() && out_.to_origin.empty() && out_.commands.empty() &&
         !out_.flush_client;
}

bool SessionCore::Releasable() const {
  // (A LISTEN's channels are the listener connection's registry's, kept by
  // a sleeping session and dropped with it.)
  return CanSleep() && statements_.Empty() && settings_.AsStarted() && sequence_generation_ == 0 &&
         !observe_at_lend_ &&
         observed_lease_.load(std::memory_order_relaxed) == 0 &&
         (!endpoint_.listener || endpoint_.listener->ChannelsOf(id_.listen_id).empty());
}

SessionCore::Dormant SessionCore::Sleep() {
  return Dormant{std::move(id_),  std::move(settings_), serial_,          sequence_generation_,
                 origin_lease(), previous_lease_,       observed_lease(), statements_.TakeKept()};
}

SessionCore::~SessionCore() {
  cache_.TrackSettings(nullptr, nullptr, /*keep_key=*/true);  // (a core that sleeps wakes with these settings)
  cache_.set_client_statements(nullptr);
}

// ----- The transition function

void SessionCore::SetState(State next) {
  if (next != state()) SetState(DataOf(next));
}

void SessionCore::SetState(StateData data) {
  const State next = static_cast<State>(data.index());
  const State from = state();
  if (next == from) return;
  // Impossible transitions are bugs of ours, never a peer's doing: checked
  // always (a session in a wrong state could hand a connection on dirty).
  const bool lent = conn_ != nullptr;
  bool ok = true;
  switch (next) {
    case State::kIdle:
      ok = !lent && from != State::kClosed && from != State::kEnding;
      break;
    case State::kIntercepting:
      ok = from == State::kIdle || from == State::kActive;
      break;
    case State::kAcquiring:
      ok = !lent && from == State::kIdle;
      break;
    case State::kPreparing:
      ok = lent && from == State::kAcquiring;
      break;
    case State::kActive:
      ok = lent && from != State::kClosed && from != State::kEnding;
      break;
    case State::kShapeChecking:
    case State::kOwnQuery:
      ok = lent && from == State::kActive;
      break;
    case State::kDraining:
      ok = lent && from != State::kEnding && from != State::kClosed;
      break;
    case State::kEnding:
      ok = from != State::kClosed;
      break;
    case State::kClosed:
      ok = from == State::kEnding;
      break;
  }
  if (!ok) {
    fmt::print(stderr, "hyperpool: endpoint session {}: impossible transition {} -> {}\n",
               id_.session_id.empty() ? std::string("-") : id_.session_id, StateName(from), StateName(next));
    std::abort();
  }
  state_ = std::move(data);
}

void SessionCore::NextFrame() {
  head_.step = Step::kStart;
  head_.scan = -1;
  head_.effects_noted = false;
  head_.signal_checked = false;
  head_.stand_in.clear();
  head_.stand_in_noted = false;
  head_.pool_free = false;
}

void SessionCore::Command(SessionCommand::Kind kind) {
  SessionCommand c;
  c.kind = kind;
  out_.commands.push_back(std::move(c));
}

void SessionCore::Command(SessionCommand command) { out_.commands.push_back(std::move(command)); }

// ----- Client frames

bool SessionCore::wants_client() const {
  if (state() != State::kIdle && state() != State::kActive) return false;
  // Waiting for the pinned budget: read on (up to a bound) so that a client
  // that leaves is seen at once and leaves the queue.
  if (pin_waiting()) return in_.size() <= kMaxLocalBacklog;
  if (head_.step != Step::kStart || !head_.stand_in.empty() || GateClosed()) return false;
  return out_.to_client.size() <= kMaxLocalBacklog;
}

void SessionCore::OnClientBytes(std::string_view bytes) {
  if (ending()) return;
  TakeSpareBuffers();
  if (in_.empty()) endpoint_.on_executor.buffers.Take(in_);
  in_.append(bytes.data(), bytes.size());
  Advance();
}

void SessionCore::TakeClientBytes(std::string& bytes) {
  if (ending()) {
    bytes.clear();
    return;
  }
  TakeSpareBuffers();
  if (in_.empty()) {
    in_.swap(bytes);
  } else {
    in_ += bytes;
  }
  bytes.clear();
  Advance();
}

void SessionCore::Advance() {
  if (advancing_) return;
  advancing_ = true;
  std::size_t consumed = 0;
  bool end = false;
  while (!end && (state() == State::kIdle || state() == State::kActive)) {
    const std::string_view input = std::string_view(in_).substr(consumed);
    auto r = reader_.Read(input);
    if (r.is_need_more()) break;
    if (r.is_error()) {
      QueueError("FATAL", protocol::ProtocolViolation(
                              fmt::format("hyperpool: invalid message on the link: {}", std::string(r.status().message()))));
      end = true;
      break;
    }
    const std::size_t head_size = r.frame().size();
    const std::size_t offset = consumed + head_size;  // where the frames after it start in in_
    Next next;
    if (!head_.stand_in.empty()) {
      // A refused pin's error statement or a signal's stand-in.
      protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
      auto rr = reader.Read(head_.stand_in);
      next = rr.is_frame() ? HandleFrame(rr.frame(), offset) : Next::kConsumed;
    } else {
      next = HandleFrame(r.frame(), offset);
    }
    if (next == Next::kWait) break;
    NextFrame();
    switch (next) {
      case Next::kConsumed:
        consumed = offset;
        break;
      case Next::kRestOfInputConsumed:
        consumed = in_.size();
        break;
      case Next::kEnd:
        consumed = offset;
        end = true;
        break;
      case Next::kWait:
        break;
    }
  }
  in_.erase(0, consumed);
  if (in_.empty() && in_.capacity() > kKeepBufferCapacity) std::string().swap(in_);
  advancing_ = false;
  if (end) {
    if (terminated_ && !stopping_) {
      FinishDraining();
    } else {
      EndSession();
    }
  }
}

SessionCore::Next SessionCore::HandleFrame(const protocol::Frame& frame, std::size_t offset) {
  const char tag = frame.tag;
  // The statement text, decoded once; every pass below shares its analysis.
  std::optional<cache::SqlText> text;
  if (tag == 'Q') {
    if (auto q = protocol::DecodeQuery(frame.payload); q.ok()) text.emplace(q->query);
  } else if (tag == 'P') {
    if (auto p = protocol::DecodeParse(frame.payload); p.ok()) text.emplace(p->query);
  }
  const cache::SqlText* sql = text ? &*text : nullptr;
  if (text && head_.step != Step::kStart) text->set_scan_result(head_.scan);

  if (head_.step == Step::kStart) {
    if (tag == 'X') {
      terminated_ = true;
      return Next::kEnd;
    }
    if (skip_until_sync_) {
      // After an error in extended-query mode PostgreSQL discards messages
      // until Sync, which it answers with ReadyForQuery.
      if (tag == 'S') {
        QueueReadyForQuery(*skip_until_sync_);
        skip_until_sync_.reset();
      }
      return Next::kConsumed;
    }
    if (copy_.skipping_to_sync() && tag != 'S') {
      // An extended message failed and no Sync has gone since: the origin
      // ignores this one (CopyTracker::OnSkipToSync), so nothing sees it.
      return Next::kConsumed;
    }
    // The settings capture, UNLISTEN * or a cancel still owns the connection.
    if (GateClosed()) return Next::kWait;
    if (stopping_) return Next::kEnd;
    if (std::holds_alternative<PinRefused>(pin_gate_)) {
      return HandleRefusedPin(frame, offset);  // its wait for the budget failed
    }
    if (std::optional<BackendSignal> signal = HeadSignal(frame, sql, offset)) {
      // pg_cancel/terminate_backend of a pid we may have handed out
      // (backend_signal.h): the driver looks for its session.
      signal_wait_ = SignalWait{*signal, conn_ != nullptr ? conn_->transaction_status() : 'I'};
      SessionCommand c;
      c.kind = SessionCommand::Kind::kSignalSession;
      c.signal_pid = signal->pid;
      c.signal_terminate = signal->terminate;
      Command(std::move(c));
      return Next::kWait;
    }
    if (!head_.stand_in_noted && !head_.effects_noted) {
      head_.effects_noted = true;
      if (!NoteSessionEffects(frame, sql)) {
        // The budget is spent: the frame waits for a unit (pin_budget.h).
        Command(SessionCommand::Kind::kWaitPin);
        return Next::kWait;
      }
    }
    if (tag == 'P' && TracksListens()) listens_.OnFrontend(tag, frame.payload, sql);  // remembered by name
    if (tag == 'P' && conn_ == nullptr && !parse_only_unit_) head_.pool_free = ConnectionFreeNow();
    head_.step = Step::kNoted;
    head_.scan = sql != nullptr ? sql->scan_result() : -1;
  }
  if (head_.step == Step::kNoted) {
    // The lent connection failed: its loss is being reported (OnOriginLost).
    if (conn_ != nullptr && conn_->broken()) return Next::kWait;
    // The query cache (endpoint_cache.h): a unit of work answered from the
    // Endpoint tier needs no origin connection.
    const bool idle = outstanding_ == 0 && !in_unit_ && out_.to_origin.empty() &&
                      (conn_ == nullptr || conn_->transaction_status() == 'I');
    switch (cache_.Intercept(frame, sql, std::string_view(in_).substr(offset), idle, out_.to_client)) {
      case SessionCache::InterceptResult::kServed:
        // A simple Query answered here destroys the unnamed statement as
        // one that reached the origin does (StatementSession::OnQuery).
        if (tag == 'Q') (void)statements_.client().DropUnnamed();
        return Next::kConsumed;
      case SessionCache::InterceptResult::kServedUntilSync:
        skip_until_sync_ = 'I';
        return Next::kConsumed;
      case SessionCache::InterceptResult::kWait:
        SetState(State::kIntercepting);
        Command(SessionCommand::Kind::kIntercept);
        return Next::kWait;
      case SessionCache::InterceptResult::kNotServed:
        break;
    }
    head_.step = Step::kIntercepted;
  }
  if (head_.step == Step::kIntercepted) {
    const Next started = StartUnit(frame, offset);
    if (started != Next::kConsumed || head_.step != Step::kAcquired) return started;
  }
  if (head_.step == Step::kAcquired) Forward(frame, sql);
  if (head_.step == Step::kForwarded) {
    if (conn_ == nullptr) return Next::kConsumed;  // lost meanwhile: the loss answered the unit
    // What a statement name means may depend on an earlier Sync group's
    // answers (statement_session.h, MustWait): asked again at each origin
    // frame (OnOriginFrame) until they are in.
    if (statements_.MustWait(frame, conn_->statements())) {
      SetState(State::kShapeChecking);
      return Next::kWait;
    }
    head_.step = Step::kChecked;
    if (statements_.StartShapeCheck(frame, conn_->statements(), out_.to_origin)) {
      // A statement prepared before DDL is re-Parsed here: its result shape
      // is checked before the client's Bind goes out (statement_session.h).
      SetState(State::kShapeChecking);
      return Next::kWait;
    }
  }
  // kChecked: the shape check (if any) is over.
  if (conn_ == nullptr) return Next::kConsumed;  // lost meanwhile: the loss answered the unit
  // An error meanwhile makes the origin skip to the next Sync: so does this
  // frame (as at kStart).
  if (copy_.skipping_to_sync() && frame.tag != 'S') return Next::kConsumed;
  // Prepared statements: renamed, replayed or answered here (statement_session.h).
  const std::size_t appended_at = out_.to_origin.size();
  statements_.OnFrontend(frame, conn_->statements(), out_.to_origin);
  if (frame.tag == 'E') cache_.AdjustExecute(out_.to_origin, appended_at);  // a cached unit's row limit
  return Next::kConsumed;
}

SessionCore::Next SessionCore::StartUnit(const protocol::Frame& frame, std::size_t offset) {
  const char tag = frame.tag;
  if (conn_ == nullptr && !head_.stand_in_noted && !parse_only_unit_ && tag == 'P') {
    statements_.set_scope(StatementScope());  // (IsParseOnlyUnit keys under it)
  }
  if (conn_ == nullptr && !head_.stand_in_noted &&
      (parse_only_unit_ ||
       (tag == 'P' && statements_.IsParseOnlyUnit(std::string_view(in_).substr(offset - frame.size()),
                                                  /*known_only=*/head_.pool_free)))) {
    // Named Parses up to a Sync (PQprepare) need no connection
    // (statement_session.h).
    parse_only_unit_ = statements_.AnswerParseOnly(frame, out_.to_client);
    return Next::kConsumed;
  }
  if (conn_ == nullptr) {
    // COPY data outside COPY: PostgreSQL ignores it, and it starts no work.
    if (tag == 'd' || tag == 'c' || tag == 'f') return Next::kConsumed;
    // (A cancel now ends this unit before it starts.)
    SetState(Acquiring{.since = std::chrono::steady_clock::now()});
    Command(SessionCommand::Kind::kAcquire);
    return Next::kWait;
  }
  head_.step = Step::kAcquired;
  return Next::kConsumed;
}

void SessionCore::ObserveAcquireWait() const {
  if (const auto* acquiring = std::get_if<Acquiring>(&state_)) {
    endpoint_.acquire_wait.Observe(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - acquiring->since));
  }
}

absl::Status SessionCore::UserCancel() {
  return protocol::WithSqlState(absl::AbortedError("canceling statement due to user request"), kSqlStateQueryCanceled);
}

void SessionCore::OnAcquired(OriginConnection* conn) {
  ObserveAcquireWait();
  conn_ = conn;
  if (stopping_ || ending()) {
    // Nothing of the session reached it: a healthy one goes back as it came.
    ReleaseLease(!conn_->broken() && conn_->transaction_status() == 'I' ? ReleaseDecision::kReturn
                                                                         : ReleaseDecision::kClose);
    return;
  }
  SetState(Preparing{.cancel_requested = std::get<Acquiring>(state_).cancel_requested});
  // Who sent a notification is who last ran a unit that may NOTIFY on that
  // backend (from its first message to its ReadyForQuery), not who holds it
  // now: the listener's copy of another session's NOTIFY may arrive after
  // this connection was lent again. A backend nobody used yet is this
  // session's from the start.
  if (id_.app_pid != 0) {
    // No lock: FindSignalTarget, rare, compares every session's word.
    if (++endpoint_.on_executor.lease_serial == 0) ++endpoint_.on_executor.lease_serial;  // 0 means none
    previous_lease_ = origin_lease_.load(std::memory_order_relaxed);
    origin_lease_.store(Pack(OriginLease{conn_->backend_key().process_id, endpoint_.on_executor.lease_serial}),
                        std::memory_order_relaxed);
    if (observe_at_lend_) observed_lease_.store(origin_lease_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    observe_at_lend_ = false;
  }
  if (may_notify_) {
    endpoint_.on_executor.notifier_pids.Lend(conn_->backend_key().process_id, id_.app_pid);
  } else {
    endpoint_.on_executor.notifier_pids.LendIfUnknown(conn_->backend_key().process_id, id_.app_pid);
  }
  // The settings replay (settings_replay.h): one round trip when the
  // connection carries other settings or another session's sequence state.
  const bool discard = conn_->sequence_owner().NeedsDiscardFor(serial_, sequence_generation_);
  if (discard || conn_->carried_settings() != settings_.desired()) {
    SessionCommand c;
    c.kind = SessionCommand::Kind::kPrepare;
    c.discard_sequences = discard;
    Command(std::move(c));
    return;
  }
  OnPrepared(absl::OkStatus());
}

void SessionCore::OnAcquireFailed(const absl::Status& status) {
  ObserveAcquireWait();
  if (state() != State::kAcquiring) return;  // ended meanwhile
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  auto r = reader.Read(in_);
  if (!r.is_frame()) return;
  SetState(State::kIdle);
  const SessionCache::InterceptResult stale = cache_.ServeStaleOnError(status, out_.to_client);
  if (stale != SessionCache::InterceptResult::kNotServed) {
    // stale-if-error (endpoint_cache.h): answered like a hit.
    if (stale == SessionCache::InterceptResult::kServedUntilSync) skip_until_sync_ = 'I';
    in_.erase(0, r.frame().size());
    NextFrame();
    Advance();
    return;
  }
  FailHeadUnit(status);
}

void SessionCore::FailHeadUnit(const absl::Status& status) {
  // The pool (or the origin) could not give us a connection: one
  // ErrorResponse, then a ReadyForQuery for each Query/Sync of the pending
  // input, so the session stays usable.
  SetState(State::kIdle);
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  auto r = reader.Read(in_);
  if (r.is_frame()) {
    // The head frame's stand-in, when it has one, is what is answered.
    protocol::FrameReader rr(protocol::FrameReader::Mode::kTagged);
    auto first = head_.stand_in.empty() ? r : rr.Read(head_.stand_in);
    in_.erase(0, AnswerAcquireFailure(status, first.is_frame() ? first.frame() : r.frame(), r.frame().size()));
  } else {
    in_.clear();
  }
  NextFrame();
  if (terminated_) {
    FinishDraining();  // a Terminate was among the input answered: the session ends
    return;
  }
  Advance();
}

void SessionCore::OnPrepared(const absl::Status& prepared_status) {
  absl::Status status = prepared_status;
  if (conn_ == nullptr) return;  // lost meanwhile (OnOriginLost answered)
  parameter_mark_ = conn_->parameter_changes();
  const auto* preparing = std::get_if<Preparing>(&state_);
  const bool cancelled = status.ok() && preparing != nullptr && preparing->cancel_requested;
  if (cancelled) status = UserCancel();
  if (!status.ok()) {
    // A cancel that came as the connection was handed over: nothing of the
    // unit was sent, so the healthy connection goes back as it came. A
    // failed settings replay leaves it in an unknown state: close it.
    ReleaseLease(cancelled && !conn_->broken() && conn_->transaction_status() == 'I' ? ReleaseAtIdle()
                                                                                      : ReleaseDecision::kClose);
    cache_.AbandonUnit();
    if (!ending()) FailHeadUnit(status);
    return;
  }
  if (ending()) return;
  SetState(State::kActive);
  head_.step = Step::kAcquired;
  Advance();
}

void SessionCore::Forward(const protocol::Frame& frame, const cache::SqlText* text) {
  const char tag = frame.tag;
  if (pin_budget_held_ && !lease_out_of_cap_) {
    // Pinned: its connection leaves the pool's cap (pin_budget.h).
    Command(SessionCommand::Kind::kMoveOutOfCap);
    lease_out_of_cap_ = true;
    endpoint_.pinned_connections++;
  }
  last_activity_ = std::chrono::steady_clock::now();
  // What a ReadyForQuery will answer, COPY included (copy_tracker.h).
  const bool answered = copy_.OnFrontend(tag);
  // Metrics: a transaction starts with the first message sent outside one.
  if (txn_started_ == std::chrono::steady_clock::time_point{}) txn_started_ = last_activity_;
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
  cache_.OnForward(frame, text);  // writes and state changes, for the query cache
  if (tag != 'P' && TracksListens()) listens_.OnFrontend(tag, frame.payload, text);
  if (tag == 'P') statements_.set_scope(StatementScope());
  head_.step = Step::kForwarded;
}

void SessionCore::OnIntercepted(SessionCache::InterceptResult result, std::string_view answers) {
  if (state() != State::kIntercepting) return;
  SetState(conn_ != nullptr ? State::kActive : State::kIdle);
  if (result == SessionCache::InterceptResult::kServed || result == SessionCache::InterceptResult::kServedUntilSync) {
    out_.to_client.append(answers.data(), answers.size());
    if (result == SessionCache::InterceptResult::kServedUntilSync) skip_until_sync_ = 'I';
    if (!in_.empty() && in_[0] == 'Q') (void)statements_.client().DropUnnamed();  // (as in HandleFrame)
    protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
    auto r = reader.Read(in_);
    if (r.is_frame()) in_.erase(0, r.frame().size());
    NextFrame();
  } else {
    head_.step = Step::kIntercepted;
  }
  AfterProgress();
}

void SessionCore::OnAdminTerminate() {
  if (session_done_ || stopping_ || ending()) return;
  QueueError("FATAL", kSqlStateAdminShutdown, "terminating connection due to administrator command");
  EndSession();
}

bool SessionCore::GateClosed() const {
  return pin_waiting() || signal_wait_ || CapturePending() || ListenCleanupPending() || cancels_in_flight_ > 0;
}

bool SessionCore::TracksListens() const { return endpoint_.options.pool.mode == PoolMode::kTransaction; }

bool SessionCore::NoteSessionEffects(const protocol::Frame& frame, const cache::SqlText* text) {
  if (frame.tag != 'Q' && frame.tag != 'P' && frame.tag != 'B' && frame.tag != 'C' && frame.tag != 'F') return true;
  SessionEffects effects =
      settings_.NoteFrontend(frame.tag, frame.payload, text, &endpoint_.on_executor.session_effects);
  if (effects.sequences) used_sequences_ = true;  // marks the connection it runs on (ReleaseLease)
  // (A Bind of a named statement that may notify says so too: psycopg runs
  // a statement by Bind alone once it has prepared it.)
  if (effects.notifies) {
    // From now on this backend's notifications are this session's: the
    // listener's copy may arrive before the unit's ReadyForQuery.
    may_notify_ = true;
    if (conn_ != nullptr) endpoint_.on_executor.notifier_pids.Lend(conn_->backend_key().process_id, id_.app_pid);
  }
  if (effects.reads_backend_pid && id_.app_pid != 0) {
    // The pid it will be shown is the backend's this frame runs on: the
    // current lend's, or the next one's when none is held yet.
    if (conn_ != nullptr) {
      observed_lease_.store(origin_lease_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    } else {
      observe_at_lend_ = true;
    }
  }
  if (effects.pins.empty()) return true;
  if (!TakePinBudget()) {
    pin_gate_ = PinWait{std::move(effects.pins)};  // added once a unit is granted
    return false;
  }
  for (PinReason reason : effects.pins) AddPin(reason);
  return true;
}

bool SessionCore::ConnectionFreeNow() const {
  if (!endpoint_.pool) return true;  // (tests: the core's own commands are answered by hand)
  const PoolStats s = endpoint_.pool->Stats();
  // (Opening, idle and checked connections are not held by a session.)
  return s.waiting + (s.lent - std::min(s.lent, s.outside_cap)) < s.max_size;
}

std::string SessionCore::StatementScope() const {
  std::string scope;
  if (pins_.Has(PinReason::kSetRole)) scope = "role " + std::to_string(serial_);
  const SettingMap& desired = settings_.desired();
  if (auto it = desired.find("search_path"); it != desired.end()) {
    scope += " search_path ";
    scope += it->second;
  }
  return scope;
}

std::size_t SessionCore::AnswerAcquireFailure(const absl::Status& status, const protocol::Frame& first,
                                              std::size_t offset) {
  if (status.code() == absl::StatusCode::kResourceExhausted) endpoint_.acquire_timeouts++;
  QueueError("ERROR", protocol::ErrorForAcquire(status));
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
      terminated_ = true;  // Terminate is still honoured (nothing after it matters)
      return in_.size();
    }
    answer(r.frame().tag);
    rest.remove_prefix(r.frame().size());
  }
  if (in_unit) skip_until_sync_ = 'I';
  return in_.size() - rest.size();  // a frame cut by the read boundary stays
}

void SessionCore::QueueError(std::string_view severity, std::string_view sqlstate, std::string_view message) {
  protocol::EncodeErrorResponse(out_.to_client, severity, sqlstate, message);
}

void SessionCore::QueueError(std::string_view severity, const protocol::PoolerError& error) {
  protocol::AppendError(out_.to_client, severity, error);
}

void SessionCore::QueueReadyForQuery(char status) { AppendReadyForQuery(out_.to_client, status); }

}  // namespace hyperpool::endpoint
