#pragma once
// The Endpoint session as a state machine without I/O (docs/architecture.md,
// "The Endpoint session"). Frames in, frames and commands out:
//
//   link bytes  ──OnClientBytes──▶ ┌─────────────┐ ──to_client──▶ the Client (link)
//   origin frame ─OnOriginFrame──▶ │ SessionCore │ ──to_origin──▶ the lent connection
//   completions ─On<Command>Done─▶ └─────────────┘ ──commands───▶ pool, listener, cache, timers
//
// The driver (Session, endpoint_session.h) owns the link, the lease and the
// timers; it feeds every event in, then executes what the outbox holds, in
// order: it writes `to_origin`, sends `to_client`, and carries out the
// commands (acquire, settings replay, capture, UNLISTEN, release, cancel,
// listener set/barrier, the cache's waits), reporting each completion back.
// Everything the session decides is decided here, through one transition
// function (SetState); collaborators (statements, settings, COPY, LISTEN,
// the cache, timeouts) are called with the frame decoded once and return
// what they decided.
//
// Client frames are consumed in order from an input buffer. A frame that
// needs something asynchronous first (a connection, the settings replay, a
// capture or cancel to finish, a shape check, the cache's wait) stays at the
// head of the input with a note of how far it got (`head_`), a command
// goes out, and processing resumes with the completion. Origin frames are
// handled one at a time; a ReadyForQuery that must wait for the listener
// connection is held (OnOriginFrame returns false) and finished by
// OnListenApplied.
//
// Confined to the Endpoint's executor, like Endpoint::Impl, whose shared
// state (statement catalog, pin budget, notifier pids, counters) it uses.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/sql_analysis.h"
#include "common/small_fifo.h"
#include "endpoint/backend_signal.h"
#include "endpoint/copy_tracker.h"
#include "endpoint/endpoint_cache.h"
#include "endpoint/endpoint_impl.h"
#include "endpoint/listen_state.h"
#include "endpoint/origin_connection.h"
#include "endpoint/session_settings.h"
#include "endpoint/session_timeouts.h"
#include "endpoint/settings_replay.h"
#include "endpoint/statement_session.h"
#include "pool/release_policy.h"
#include "protocol/frame_reader.h"
#include "protocol/pooler_errors.h"

namespace hyperpool::endpoint {

// Something the core needs done outside itself. The driver runs them in
// order and reports each one's completion through the named method.
struct SessionCommand {
  enum class Kind : std::uint8_t {
    kAcquire,        // borrow a connection from the pool: OnAcquired(conn) or OnAcquireFailed(status)
    kCancelAcquire,  // end the pending kAcquire with `status` (it then reports OnAcquireFailed)
    kIntercept,      // finish the query cache's decision (SessionCache::FinishIntercept): OnIntercepted(result)
    kPrepare,        // settings replay on the lent connection (ApplySettings(desired, discard_sequences)): OnPrepared
    kMoveOutOfCap,   // the lease leaves the pool's cap (a pinned session: pin_budget.h)
    kCapture,        // settings capture on the lent connection (CaptureSettings into settings()): OnCaptured
    kUnlisten,       // UNLISTEN * on the lent connection: OnUnlistened
    kRelease,        // give the connection back with `decision`, once no I/O is pending on it
    kCancelOrigin,   // a CancelRequest for backend `key`; then OnCancelDelivered() if `notify`
    kListenSet,      // the listener connection: this session's channels become `channels`: OnListenApplied
    kBarrier,        // the listener connection's barrier (listener.h): OnListenApplied
    kWatchPinnedIdle,  // start pinned_idle_timeout's watch (it calls CheckPinnedIdle)
    kTimeoutsChanged,  // SessionTimeouts' next deadline may have moved: re-arm the timer (OnTimeout)
    kWaitPin,        // wait for a pinned-budget unit (pin_budget.h): OnPinGranted or OnPinWaitFailed(status)
    kCancelPinWait,  // end the pending kWaitPin with `status` (it then reports OnPinWaitFailed)
    kSignalSession,  // pg_cancel/terminate_backend(signal_pid) on the session holding that app pid: OnSignalled
  };
  Kind kind = Kind::kAcquire;
  ReleaseDecision decision = ReleaseDecision::kKeep;  // kRelease
  absl::Status status;                                 // kCancelAcquire, kCancelPinWait
  BackendKey key;                                      // kCancelOrigin
  bool notify = false;                                 // kCancelOrigin
  bool discard_sequences = false;                      // kPrepare
  std::set<std::string> channels;                      // kListenSet
  std::int32_t signal_pid = 0;                         // kSignalSession
  bool signal_terminate = false;                       // kSignalSession
};

// Whether `frames` (link frames from the app) hold a complete Terminate.
// A Client that sends work and Terminate closes the link at once; what came
// before the Terminate still runs, as PostgreSQL runs it (OnClientGone,
// Session::Run).
bool HasTerminate(std::string_view frames);

class SessionCore {
 public:
  // The session's life. Change it only through SetState().
  enum class State : std::uint8_t {
    kIdle,          // no origin connection; input frames are handled as they come
    kIntercepting,  // the query cache waits (shared tier, a leader's result) before deciding the head unit
    kAcquiring,     // the head unit waits for a connection from the pool
    kPreparing,     // a connection is lent; the settings replay runs on it before the unit
    kActive,        // a connection is lent; frames go to it, its answers to the client
    kShapeChecking, // a replayed statement's result shape is checked, or an earlier Sync group's answers
                    // are awaited (StatementSession::MustWait), before the client's frame goes out
    kOwnQuery,      // at 'I', the settings capture or UNLISTEN * runs on the lent connection
    kDraining,      // Terminate received: the units sent before it finish, then the session ends
    kEnding,        // over: what is queued for the client goes out, then the link closes
    kClosed,        // over and flushed; nothing more happens
  };
  static std::string_view StateName(State state);

  // What only one state has, in that state's alternative of StateData (the
  // variant's index is the State; the others carry nothing of their own).
  struct Idle {};
  struct Intercepting {};
  struct Acquiring {
    std::chrono::steady_clock::time_point since;  // for the acquire_wait histogram
    bool cancel_requested = false;                // the app cancelled: the wait ends with 57014
  };
  struct Preparing {
    // The app cancelled while the unit waited for its connection or its
    // settings replay: it ends with 57014 before any of it is sent.
    bool cancel_requested = false;
  };
  struct Active {};
  struct ShapeChecking {};
  struct OwnQuery {
    SessionCommand::Kind query = SessionCommand::Kind::kCapture;  // kCapture or kUnlisten
  };
  struct Draining {};
  struct Ending {};
  struct Closed {};
  using StateData = std::variant<Idle, Intercepting, Acquiring, Preparing, Active, ShapeChecking, OwnQuery, Draining,
                                 Ending, Closed>;

  // Who the session is (from the hello; Session reads it).
  struct Identity {
    std::string session_id;  // hyperpool.session_id (cancel routing)
    std::int32_t app_pid = 0;  // hyperpool.backend_pid: the pid the app knows
    // The hello's parameters: read by the constructor (settings, the query
    // cache's fingerprint), then freed.
    std::vector<std::pair<std::string, std::string>> hello;
    ListenRegistry::Subscriber listen_id = 0;
  };

  // What the driver carries out after each event.
  struct Outbox {
    std::string to_client;   // backend messages for the link, in order
    std::string to_origin;   // frontend messages for the lent connection, in order
    SmallFifo<SessionCommand> commands;
    // The unit's answers are complete (a ReadyForQuery that ends the
    // outstanding work was appended): send `to_client` now, do not batch.
    bool flush_client = false;
  };

  SessionCore(Endpoint::Impl& endpoint, SessionCache& cache, Identity identity);
  ~SessionCore();

  SessionCore(const SessionCore&) = delete;
  SessionCore& operator=(const SessionCore&) = delete;

  // ----- Events --------------------------------------------------------------

  // Frontend messages from the link (any split). Handled as far as
  // possible; the rest waits for the completion of the command issued.
  void OnClientBytes(std::string_view bytes);
  // The same, taking `bytes`' storage when nothing is buffered (no copy);
  // `bytes` is left empty.
  void TakeClientBytes(std::string& bytes);
  // The link ended: after Terminate (`terminated`, the units before it still
  // finish) or without it (a vanished client). The session ends.
  void OnClientGone();
  // Endpoint::Stop(), or sending to the link failed: the session ends now,
  // as if the client had vanished.
  void Shutdown();

  // kAcquire's result. The core does not own the connection (the driver's
  // lease does); it reads and updates its state.
  void OnAcquired(OriginConnection* conn);
  void OnAcquireFailed(const absl::Status& status);
  // kWaitPin's result: a unit of the pinned budget is the session's now
  // (given back at once if the session no longer wants it), or the wait
  // ended without one (the acquire timeout, the client's cancel).
  void OnPinGranted();
  void OnPinWaitFailed(const absl::Status& status);
  // kSignalSession's result: `found`: a session held the pid and was
  // signalled (the SELECT is answered 't' here); else the statement goes to
  // the origin unchanged (backend_signal.h).
  void OnSignalled(bool found);

  // The origin backend this session's latest unit was lent, and the
  // Endpoint's lease serial of that lend (newer is larger, modulo 2^32):
  // pg_terminate_backend / pg_cancel_backend of an origin pid read from
  // pg_backend_pid() acts on the session that most recently used that
  // backend (Session::FindSignalTarget). Written at each lend with one
  // relaxed store, read from any thread; {0, 0} before the first lend and
  // once the session is over.
  struct OriginLease {
    std::int32_t pid = 0;
    std::uint32_t serial = 0;
  };
  OriginLease origin_lease() const { return Unpack(origin_lease_.load(std::memory_order_relaxed)); }
  // The lend whose backend counts as this session's when it names an origin
  // pid (executor only): origin_lease(), or the lend before it while the
  // current unit runs on a connection lent for that unit only.
  OriginLease SignalLease() const;
  // The lend on which this session last ran a statement that reads
  // pg_backend_pid(): the origin pid it was shown. A terminate or cancel of
  // an origin pid goes first to the session that was shown it (another
  // session may have been lent that backend since, the caller among them).
  // Same representation and threads as origin_lease().
  OriginLease observed_lease() const { return Unpack(observed_lease_.load(std::memory_order_relaxed)); }
  // Another session's pg_terminate_backend named this session's app pid:
  // FATAL 57P01, as PostgreSQL's administrator command, and the session ends.
  void OnAdminTerminate();
  // The cache's wait ended (SessionCache::FinishIntercept): served with
  // `answers` (kServedUntilSync: the rest of the extended unit is skipped
  // up to its Sync), or not.
  void OnIntercepted(SessionCache::InterceptResult result, std::string_view answers);
  void OnPrepared(const absl::Status& status);
  void OnCaptured(const absl::StatusOr<CaptureOutcome>& outcome);
  // UNLISTEN * finished (`ok`: ended at 'I'); `notifications` are the
  // NotificationResponse frames read meanwhile.
  void OnUnlistened(bool ok, const std::vector<std::string>& notifications);
  void OnListenApplied();
  void OnCancelDelivered();

  // One frame from the lent connection. False: it is held (a ReadyForQuery
  // waiting for the listener connection, kListenSet / kBarrier); the driver
  // reads nothing more until OnListenApplied, which finishes it.
  bool OnOriginFrame(const protocol::Frame& frame);
  // Reading or writing the lent connection failed.
  void OnOriginLost(const absl::Status& reason);

  // A cancel link named this session. False if nothing was running.
  bool OnCancelRequest();
  // query_timeout / idle_in_transaction_timeout: the timer fired.
  void OnTimeout(std::chrono::steady_clock::time_point now);
  // pinned_idle_timeout's watch: true while it should keep watching; sets
  // `*next` to when to look again.
  bool CheckPinnedIdle(std::chrono::steady_clock::time_point now, std::chrono::steady_clock::time_point* next);
  // A notification the listener connection delivers to this session.
  void OnNotification(std::string_view raw_frame);
  // A control frame for this session's Client (a broadcast invalidation).
  void DeliverControl(std::string_view bytes);

  // ----- Dormancy -----------------------------------------------------------
  // An idle session whose core holds nothing a new core would not (CanSleep)
  // gives its core back at the Endpoint's idle sweep and keeps only this
  // (Session::Sleep, docs/architecture.md "What an idle session holds");
  // the first event after wakes a core from it (the constructor below).
  struct Dormant {
    Identity id;                  // (hello: empty)
    SessionSettings settings;     // as they were: startup, or changed and captured
    std::uint64_t serial = 0;
    std::uint64_t sequence_generation = 0;  // (with serial: sequence_state.h)
    OriginLease origin_lease;     // for FindSignalTarget while asleep
    std::uint64_t previous_lease = 0;
    OriginLease observed_lease;   // (likewise)
    std::unique_ptr<StatementSession::Kept> statements;  // the client's prepared statements, if any
  };
  // Idle, no connection, nothing buffered, owed or held, no SQL-level
  // PREPARE, no pin, no LISTEN state, no sequence used, no notification
  // queued, no timeout running: everything but Dormant's parts is as a new
  // core's (the driver's prepared statements are among those parts).
  bool CanSleep() const;
  // CanSleep, and the rest is as a new core's made from the same hello
  // would be: no statement of the client's, the startup settings, no
  // channel listened on, never a
  // sequence or a pid shown (a later pg_terminate_backend of that pid names
  // this session). The session may then be let go (protocol::ReleaseControl).
  bool Releasable() const;
  // What the session keeps (the core is destroyed after: CanSleep first).
  Dormant Sleep();
  explicit SessionCore(Endpoint::Impl& endpoint, SessionCache& cache, Dormant dormant);

  // ----- What the driver reads ---------------------------------------------

  Outbox& outbox() { return out_; }
  State state() const { return static_cast<State>(state_.index()); }
  bool closed() const { return state() == State::kClosed; }
  // The driver should read from the lent connection now.
  bool wants_origin() const;
  // The driver may read more from the link (false: answers made here pile
  // up unsent, or the session is over).
  bool wants_client() const;
  // The link should close once `to_client` is out (the session is over).
  bool ending() const { return state() == State::kEnding || state() == State::kClosed; }
  // Nobody reads `to_client` any more (the link ended): drop it.
  bool discard_output() const { return link_gone_; }
  // Once `to_client` is flushed in kEnding: the session is closed.
  void OnFlushedForEnd();
  // The session is idle (no connection, nothing buffered, the outbox
  // drained): its buffers give their storage back, so an idle session keeps
  // no reserved capacity (the next unit allocates what it needs again).
  void ReleaseIdleBuffers();
  OriginConnection* connection() const { return conn_; }
  SessionSettings& settings() { return settings_; }
  SessionTimeouts& timeouts() { return timeouts_; }
  const std::string& session_id() const { return id_.session_id; }
  bool terminated() const { return terminated_; }
  // Whether a unit is on the lent connection (a cancel would reach it).
  bool busy() const { return conn_ != nullptr && (outstanding_ > 0 || in_unit_); }

 private:
  // How far the frame at the head of the input got before it had to wait.
  enum class Step : std::uint8_t {
    kStart,        // nothing done yet
    kNoted,        // its session effects are noted (pins, settings, LISTEN)
    kIntercepted,  // the query cache did not answer it
    kAcquired,     // a connection is lent and prepared
    kForwarded,    // counted as sent (Forward); it may wait for earlier answers (MustWait)
    kChecked,      // its shape check (if any) is done
  };
  enum class Next : std::uint8_t {
    kConsumed,              // the frame is handled; go on with the next
    kWait,                  // the frame waits for a completion (a command went out)
    kRestOfInputConsumed,   // every frame buffered was answered (acquire failure)
    kEnd,                   // the session ends (Terminate, a lost origin)
  };
  // Where a held origin frame resumes.
  enum class HoldStep : std::uint8_t {
    kNone,
    kAfterListenSet,  // ApplyCommittedListens' Set done
    kAfterBarrier,    // the listener's barrier done
  };

  // The one transition function (checks each transition's invariants).
  // A state with data of its own is entered with it; the others (and
  // those) also by name, with their data's defaults.
  void SetState(StateData next);
  void SetState(State next);
  static StateData DataOf(State state);
  void Command(SessionCommand::Kind kind);
  void Command(SessionCommand command);

  // ----- Client frames (session_core.cc) -----
  void Advance();
  Next HandleFrame(const protocol::Frame& frame, std::size_t offset);
  Next StartUnit(const protocol::Frame& frame, std::size_t offset);
  void ObserveAcquireWait() const;  // in kAcquiring: how long it waited
  // 57014 "canceling statement due to user request": an app's cancel that
  // ends a unit before any of it reached the origin.
  static absl::Status UserCancel();
  // Counts the frame as sent (COPY, outstanding, the cache's and LISTEN's
  // view); step kForwarded.
  void Forward(const protocol::Frame& frame, const cache::SqlText* text);
  Next HandleRefusedPin(const protocol::Frame& frame, std::size_t offset);
  bool GateClosed() const;
  bool NoteSessionEffects(const protocol::Frame& frame, const cache::SqlText* text);
  bool TakePinBudget();
  void HoldPinBudget();
  void GivePinBudget();
  void AddPin(PinReason reason);
  std::string StatementScope() const;
  // The pool could lend a connection soon (not every one it may open is
  // lent, beyond those waited for): a Parse-only unit of a statement the origin never
  // parsed then goes to it, so its error comes at the Parse as directly.
  // Else it is answered here (pgbench prepares synchronously in a thread
  // whose other clients may hold every connection mid-transaction).
  bool ConnectionFreeNow() const;
  // Answers the head unit and the complete frames after it (`offset`: where
  // they start in in_) with the error; returns how many bytes of in_ that
  // covers (a frame cut by the read boundary is left).
  std::size_t AnswerAcquireFailure(const absl::Status& status, const protocol::Frame& first, std::size_t offset);
  // The head unit cannot start (`status`): it and the rest of the input are
  // answered with the error (AnswerAcquireFailure).
  void FailHeadUnit(const absl::Status& status);
  void NoteWorkSent();
  void NoteReady(char status);
  void QueueError(std::string_view severity, std::string_view sqlstate, std::string_view message);
  void QueueError(std::string_view severity, const protocol::PoolerError& error);
  void QueueReadyForQuery(char status);
  bool TracksListens() const;
  // The head frame (at a unit's start) is pg_cancel/terminate_backend of a
  // pid in one of backend_signal.h's forms; `offset`: where the frames after
  // it start in in_.
  std::optional<BackendSignal> HeadSignal(const protocol::Frame& frame, const cache::SqlText* sql,
                                          std::size_t offset) const;
  // The cache's pointers into this core (both constructors).
  void Attach(bool woken);
  static std::uint64_t Pack(OriginLease lease) {
    return static_cast<std::uint64_t>(lease.serial) << 32 | static_cast<std::uint32_t>(lease.pid);
  }
  static OriginLease Unpack(std::uint64_t word) {
    return OriginLease{static_cast<std::int32_t>(static_cast<std::uint32_t>(word)),
                       static_cast<std::uint32_t>(word >> 32)};
  }
  // The lent connection is the session's own beyond the current unit: a
  // transaction block, a pin, session mode.
  bool OwnsConnection() const;
  // Inside a unit (no Sync yet) whose every message sent so far is
  // answered, with no error: a signal Bind's batch can be answered here but
  // its Sync, which goes to the origin.
  bool MidUnitAnswered() const;
  // A named Parse of a signal found (kSignalSession) whose batch after it
  // AppendBackendSignalBatchAnswer answers: the statement is recorded as
  // the client's and the batch answered here (ParseComplete, ...). Returns
  // the bytes of in_ answered, Sync included; 0 (nothing done) otherwise.
  std::size_t AnswerSignalParse(const protocol::Frame& parse, const BackendSignal& signal);
  // The Parse payload the client made the statement that a Bind (`bind_payload`)
  // names with, or "" if it holds no such statement.
  std::string_view BoundParse(std::string_view bind_payload) const;

  // ----- Origin frames, releases, the end (session_core_origin.cc) -----
  void TakeSpareBuffers();  // from endpoint_.on_executor.buffers, for a unit that starts
  bool ProcessOriginFrame(const protocol::Frame& frame, HoldStep from);
  bool NotificationViaListener(std::string_view payload) const;
  bool IdleForNotifications() const;
  void DeliverPendingNotifications();
  bool CapturePending() const;
  bool ListenCleanupPending() const;
  PinReason CurrentPin() const;
  // After a unit ended, a connection came back or an own query finished:
  // runs what is due at 'I' (capture, UNLISTEN *), releases when the policy
  // says so, and lets the input go on.
  void AfterProgress();
  void MaybeRelease();
  ReleaseDecision ReleaseAtIdle() const;
  void ReleaseLease(ReleaseDecision decision);
  void EndTransactionTimer();
  void CancelIfBusy();
  void EndAfterFlush();
  void EndSession();
  void ForgetSession();
  void FinishDraining();

  Endpoint::Impl& endpoint_;
  SessionCache& cache_;
  Identity id_;
  Outbox out_;
  StateData state_;
  protocol::FrameReader reader_{protocol::FrameReader::Mode::kTagged};

  std::string in_;             // link bytes not yet handled; the head frame may be waiting
  // The frame at the head of `in_`: how far it got before it had to wait,
  // and what stands in for it. All of it ends with the frame (NextFrame).
  struct HeadFrame {
    Step step = Step::kStart;
    // Its select-scan (cache::SqlText::scan_result), kept while it waits
    // past Step::kStart so handling it again does not rescan.
    signed char scan = -1;
    bool effects_noted = false;   // NoteSessionEffects ran for it (a pin wait resumes past it)
    bool signal_checked = false;  // HeadSignal looked, or kSignalSession found nobody
    // A refused pin's error statement or a backend signal's stand-in,
    // handled instead of the frame; its effects are not noted again.
    std::string stand_in;
    bool stand_in_noted = false;
    // A Parse at a unit's start with no connection lent: ConnectionFreeNow()
    // when it came (StartUnit's parse-only decision reads it).
    bool pool_free = false;
  };
  HeadFrame head_;
  // The head frame is done: the next one starts from nothing.
  void NextFrame();
  bool advancing_ = false;     // Advance() is on the stack (no re-entry)

  OriginConnection* conn_ = nullptr;  // the lent connection (the driver's lease), or null
  std::size_t outstanding_ = 0;       // Query/Sync/FunctionCall sent, ReadyForQuery not yet seen
  bool in_unit_ = false;              // extended-query messages sent since the last Sync
  std::chrono::steady_clock::time_point txn_started_{};
  bool origin_fatal_sent_ = false;    // the origin's FATAL went to the client
  bool terminated_ = false;           // Terminate received
  bool client_gone_ = false;          // the link ended (after Terminate or not)
  bool link_gone_ = false;            // nobody reads the answers any more (drain them)
  bool stopping_ = false;             // Shutdown()
  bool session_done_ = false;         // EndSession ran
  // Set: discard the app's messages until a Sync, answered with
  // ReadyForQuery of this status (an extended unit answered or failed here).
  std::optional<char> skip_until_sync_;
  CopyTracker copy_;
  SessionTimeouts timeouts_;
  bool statement_timeout_pending_ = false;
  bool cancel_sent_ = false;          // CancelIfBusy went out
  std::size_t cancels_in_flight_ = 0;
  std::uint64_t parameter_mark_ = 0;
  HoldStep hold_ = HoldStep::kNone;   // a held origin frame
  std::string held_frame_;            // ...its bytes

  SessionSettings settings_;
  PinSet pins_;
  const std::uint64_t serial_;
  bool used_sequences_ = false;
  bool may_notify_ = false;
  std::uint64_t sequence_generation_ = 0;
  bool pin_counted_gone_ = false;
  StatementSession statements_;
  bool parse_only_unit_ = false;
  bool pin_budget_held_ = false;
  bool lease_out_of_cap_ = false;
  // The head frame's pins and the pinned budget (pin_budget.h): waiting for
  // a unit of it (kWaitPin; the pins are added once one is granted), or the
  // wait failed while a connection is lent and the head frame is replaced
  // by the error (HandleRefusedPin).
  struct PinWait {
    std::vector<PinReason> pins;
  };
  struct PinRefused {
    protocol::PoolerError error;
  };
  std::variant<std::monostate, PinWait, PinRefused> pin_gate_;
  bool pin_waiting() const { return std::holds_alternative<PinWait>(pin_gate_); }
  // The head frame is a pg_cancel/terminate_backend of an app pid: what
  // kSignalSession asked for, and the status its ReadyForQuery answers.
  struct SignalWait {
    BackendSignal signal;
    char status = 'I';
  };
  std::optional<SignalWait> signal_wait_;
  std::atomic<std::uint64_t> origin_lease_{0};  // origin_lease(): serial << 32 | pid
  std::uint64_t previous_lease_ = 0;             // the word before the latest lend
  std::atomic<std::uint64_t> observed_lease_{0};  // observed_lease(), packed alike
  bool observe_at_lend_ = false;  // a statement reading the pid came before its lend
  bool discard_after_unit_ = false;
  bool idle_watch_started_ = false;
  std::chrono::steady_clock::time_point last_activity_{};

  static constexpr std::size_t kMaxQueuedNotificationBytes = 8 * 1024 * 1024;
  // The room `to_client` is given before an origin frame is appended to it.
  static constexpr std::size_t kClientChunkReserve = 512;
  ListenTracker listens_;
  std::string pending_notifications_;
  bool notifications_overflowed_ = false;
};

}  // namespace hyperpool::endpoint
