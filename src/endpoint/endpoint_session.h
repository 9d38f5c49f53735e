#pragma once
// The Endpoint's per-link session (docs/architecture.md, "The link
// protocol" and "Failure handling"). Internal to src/endpoint/: made by
// Endpoint::Accept (endpoint.cc); its methods are in endpoint_session.cc
// (the link reader, settings, pins, cancels) and endpoint_session_pump.cc
// (LISTEN/NOTIFY, the link writer, releases, timeouts).
//
// A session runs two coroutines on the Endpoint's executor:
//  - Run() reads the link: the hello, then frontend frames, which it
//    forwards raw to the lent origin connection (acquiring one when a unit
//    of work starts) or answers locally (pool exhausted, failed transaction).
//  - Pump() is the only writer of the link: it forwards origin frames raw,
//    batched into one Send per burst, and the locally made answers, in order.
// The session counts outstanding requests (each Query, Sync and
// FunctionCall sent adds one; each ReadyForQuery removes one) and gives the
// connection back only through DecideRelease (src/pool/release_policy.h).
//
// Lifetime rule that keeps a connection from being destroyed under a
// pending operation: the lease is released only when neither coroutine is
// inside an operation on the connection (`writing_`, `pump_reading_`).
// Whoever finishes last releases it; the other only closes the socket
// (CloseNow), which makes the pending operation fail promptly.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>

#include "absl/status/status.h"
#include "endpoint/copy_tracker.h"
#include "endpoint/endpoint_cache.h"
#include "endpoint/endpoint_impl.h"
#include "endpoint/listen_state.h"
#include "endpoint/session_settings.h"
#include "endpoint/session_timeouts.h"
#include "endpoint/statement_session.h"
#include "hyperpool/transport.h"
#include "pool/pool.h"
#include "pool/release_policy.h"
#include "protocol/codec.h"

namespace hyperpool {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<Endpoint::Impl> endpoint, std::unique_ptr<Link> link);

  ~Session();

  // Starts Run(); Run() starts Pump() once link-ready is sent.
  void Start();

  // The listener connection (listener.h) has a notification for a channel
  // this session listens on: delivered as PostgreSQL does, between the
  // session's units and outside a transaction block (the pump sends it when
  // the session is idle, or just before the ReadyForQuery 'I' that ends the
  // current unit).
  void DeliverNotification(std::string_view raw_frame);

  // Endpoint::Stop(): ends the session as if the client vanished.
  void Shutdown();

 private:
  // ----- Run: the link reader -----------------------------------------------

  asio::awaitable<void> Run();

  // Reads the hello (a StartupMessage); keeps its parameters. Frames after it
  // stay in `in_`.
  asio::awaitable<bool> ReadHello();

  // Link-ready: the origin's ParameterStatus set and ReadyForQuery 'I'. If
  // no origin login has happened yet, one is made first (and returned).
  asio::awaitable<bool> SendLinkReady();

  // A placement probe (docs/architecture.md, "The link protocol"): answers
  // the origin round trip, measured now unless a recent sample exists, as
  // ParameterStatus hyperpool.origin_rtt_us, then ReadyForQuery; or a FATAL
  // error when the origin cannot be reached. The link closes after.
  asio::awaitable<void> AnswerProbe();

  // An invalidation watch (cache/tier.h, kWatchParam): the answer, then
  // every invalidation broadcast to its Client (SessionCache::StartWatch,
  // through local_out_ and the Pump), each Sync answered in order; no origin
  // connection, no unit of work. Ends at Terminate, a closed link, anything
  // else (FATAL 08P01), or a Client that lets more than kMaxLocalBacklog
  // pile up (it then drops its tier and subscribes again).
  asio::awaitable<void> RunWatch();

  // Sends an ErrorResponse with severity FATAL before the pump runs (or after
  // it stopped): the session ends right after.
  asio::awaitable<void> SendFatal(std::string_view sqlstate, std::string_view message);

  asio::awaitable<void> WorkLoop();

  enum class Next { kContinue, kRestOfInputConsumed, kEnd };

  // Handles one frontend frame. `offset` is where the frames after it start
  // in `in_` (for answering the rest of the pending input locally).
  asio::awaitable<Next> HandleFrame(const protocol::Frame& frame, std::size_t offset);

  // Applies the session's settings (hello and captured SETs) to a freshly
  // lent connection before its work is forwarded: one round trip when the
  // connection carries different ones, none otherwise (settings_replay.h).
  asio::awaitable<absl::Status> PrepareConnection();

  // ----- Session settings, pins, cancel routing (session_settings.h) -------

  // Reads the hello's hyperpool.* parameters: a cancel link routes its cancel
  // and ends (false); a session registers for cancels and keeps its settings.
  bool OnHello();

  void RouteCancel(const std::string& id);

  // A cancel link names this session: cancel what it runs now, on the
  // connection it holds now. The connection stays with this session until
  // the origin has processed the CancelRequest, so it never reaches the
  // next borrower. False if nothing is running.
  bool CancelCurrentWork();

  void OnCancelDelivered();

  // Settings may have changed in the unit that just ended at 'I': read them
  // before anyone else (this client's next unit included) uses the connection.
  bool CapturePending() const;
  bool GateClosed() const { return CapturePending() || ListenCleanupPending() || cancels_in_flight_ > 0; }

  // The pin for DecideRelease: session state, or a capture or cancel that
  // must finish before the connection may go to anyone else.
  PinReason CurrentPin() const;

  // False if `frame` would pin the session while the pinned budget is spent
  // (the pins are then not recorded: the frame must not run as it is).
  bool NoteSessionEffects(const protocol::Frame& frame, const cache::SqlText* text);

  // One unit of the Endpoint's pinned budget for this session, held until
  // it is no longer pinned or ends (transaction mode only).
  bool TakePinBudget();

  void GivePinBudget();

  // The budget is spent: the pinning statement is replaced by one that
  // makes the origin raise 53300 (pin_budget.h), so nothing of it runs and
  // the error, abort and skip-until-Sync are PostgreSQL's own. A message
  // that cannot be rewritten (a Bind of a pinning statement parsed before)
  // runs, and its connection is closed after the unit instead of shared.
  asio::awaitable<Next> HandleRefusedPin(const protocol::Frame& frame, std::size_t offset);

  // HandleFrame for a frame whose pins were refused but that must run.
  asio::awaitable<Next> HandleFrameUnpinned(const protocol::Frame& frame, std::size_t offset);

  // Closes a pinned session idle (outside a transaction) for longer than
  // pinned_idle_timeout, as PostgreSQL's idle_session_timeout does.
  asio::awaitable<void> WatchPinnedIdle();

  void AddPin(PinReason reason);

  // Pump: runs the capture (Run waits at the gate meanwhile).
  asio::awaitable<void> CaptureSessionSettings();

  // After a query of our own on the lent connection `c` (settings capture,
  // UNLISTEN *): it goes back by the release policy, or is closed when the
  // query failed or the session is ending.
  void AfterOwnQuery(OriginConnection* c, bool healthy);

  // ----- LISTEN/NOTIFY without pinning (listen_state.h, listener.h) -------

  // Transaction mode: LISTEN is carried by the listener connection. (In
  // session mode the session keeps its connection, which LISTENs itself.)
  bool TracksListens() const { return endpoint_->options.pool.mode == PoolMode::kTransaction; }

  // The lent connection may LISTEN (a unit ran LISTEN, or text that might):
  // it runs UNLISTEN * before it goes back to the pool.
  bool ListenCleanupPending() const;

  // Between units and outside a transaction block: where PostgreSQL sends
  // NotificationResponse.
  bool IdleForNotifications() const;

  // A NotificationResponse read from the lent connection on a channel the
  // listener connection also delivers to this session: dropped here, so the
  // session gets it exactly once.
  bool NotificationViaListener(std::string_view payload) const;

  // Pump, at a ReadyForQuery 'I' that committed LISTEN/UNLISTEN: updates
  // the session's channel set and waits until the listener connection has
  // LISTENed, before that ReadyForQuery is forwarded (a NOTIFY the app
  // sends after it cannot be missed).
  asio::awaitable<void> ApplyCommittedListens(const std::vector<endpoint::ListenOp>& committed);

  // Pump: UNLISTEN * on the lent connection before it is shared (Run waits
  // at the gate meanwhile). Notifications that arrive on it first are
  // kept for the session unless the listener delivers them.
  asio::awaitable<void> UnlistenBeforeRelease();

  void ForgetSession();

  // Writes `to_origin_` to the lent connection. False if the write failed
  // (the connection is then treated as lost).
  asio::awaitable<bool> FlushToOrigin();

  // The pool (or the origin) could not give us a connection: one
  // ErrorResponse, then a ReadyForQuery for each Query/Sync of the pending
  // input, so the session stays usable.
  void AnswerAcquireFailure(const absl::Status& status, const protocol::Frame& first, std::size_t offset);

  asio::awaitable<void> EndSession();

  // ----- Pump: the link writer ---------------------------------------------

  asio::awaitable<void> Pump();

  // Forwards frames from the lent connection until nothing is expected from
  // it any more (released, or idle in a transaction), or it fails.
  asio::awaitable<void> PumpOrigin();

  // The origin connection `c` failed (EOF, socket error, protocol error).
  // The session ends as a direct connection to PostgreSQL would: the
  // origin's own FATAL ErrorResponse (already forwarded, e.g. 57P01 from
  // pg_terminate_backend), or else FATAL 08006, then the link closes. A
  // driver must learn that its transaction is gone with its connection;
  // carrying on over a fresh origin connection could commit half of it.
  void OnOriginLost(OriginConnection* c, const absl::Status& reason);

  // Ends the session once what is queued for the link has been sent: the
  // pump closes the link after its next Send, and Run stops reading.
  void EndAfterFlush();

  // Releases the connection if the policy says so and nobody is using it.
  void MaybeRelease();

  // The release decision for a session with nothing outstanding.
  ReleaseDecision ReleaseAtIdle() const;

  void ReleaseAtEnd();

  void EndTransactionTimer();

  void ReleaseLease(ReleaseDecision decision);

  // ----- Operator timeouts (session_timeouts.h) ------------------------------

  void NoteWorkSent();

  void NoteReady(char status);

  asio::awaitable<void> WatchTimeouts();

  // idle_in_transaction_timeout: as PostgreSQL does, FATAL 25P03 and the
  // session ends; the origin connection is closed (its transaction rolls
  // back there) and its pool slot is free at once.
  void EndIdleInTransaction();

  // The client is gone while the origin may still be executing its work:
  // closing the socket does not stop a query that is not writing, so ask
  // the origin to cancel it (its locks go with it).
  void CancelIfBusy();

  void QueueError(std::string_view severity, std::string_view sqlstate, std::string_view message);
  void QueueReadyForQuery(char status);

  std::shared_ptr<Endpoint::Impl> endpoint_;
  std::unique_ptr<Link> link_;
  Signal pump_wake_;  // Run -> Pump: work or answers to forward
  Signal changed_;    // Pump -> Run: a ReadyForQuery, a release, a send
  protocol::FrameReader reader_;
  endpoint::SessionCache cache_;  // the query cache's hooks (endpoint_cache.h)
  std::vector<std::pair<std::string, std::string>> hello_parameters_;

  std::string in_;          // bytes from the link not yet handled
  std::string to_origin_;   // frames for the lent connection, written in one go
  std::string local_out_;   // answers made here, for the pump to send

  Lease lease_;
  OriginConnection* conn_ = nullptr;  // lease_'s connection, or null
  std::size_t outstanding_ = 0;       // Query/Sync/FunctionCall sent, ReadyForQuery not yet seen
  bool in_unit_ = false;              // extended-query messages sent since the last Sync
  std::chrono::steady_clock::time_point txn_started_{};  // first message of the open transaction, or zero
  bool writing_ = false;              // Run is inside conn_->Write
  bool pump_reading_ = false;         // Pump is inside conn_->ReadFrame
  bool discard_pending_ = false;      // close the lease once nobody is inside it
  bool origin_fatal_sent_ = false;    // the origin's FATAL went to the client: it closes next
  bool end_after_flush_ = false;      // close the link once local_out_ is sent (the session ends)
  endpoint::CopyTracker copy_;        // COPY sub-protocol state of the lent connection
  // query_timeout / idle_in_transaction_timeout, and WatchTimeouts' wake-up.
  endpoint::SessionTimeouts timeouts_{endpoint_->options.query_timeout, endpoint_->options.idle_in_transaction_timeout};
  asio::steady_timer timeout_timer_{endpoint_->executor};
  bool statement_timeout_pending_ = false;  // our CancelRequest for query_timeout is out
  AcquireCancel acquire_cancel_;      // ends a pending Acquire() on a client's cancel
  bool acquiring_ = false;            // inside pool->Acquire()
  bool prepare_cancelled_ = false;    // PrepareConnection failed only because of a cancel
  bool link_gone_ = false;            // the client closed after Terminate: drop what the origin still sends
  bool skip_until_sync_ = false;      // discard until Sync, answer it with skip_status_
  char skip_status_ = 'I';

  bool pump_started_ = false;
  bool probe_ = false;                // a placement probe link
  bool watch_ = false;                // an invalidation watch link (RunWatch)
  bool cancel_sent_ = false;          // a CancelRequest went out for this session's connection
  bool terminated_ = false;           // Terminate received
  bool session_done_ = false;         // Run has finished
  bool stopping_ = false;             // Endpoint::Stop or the link failed

  // The session's name-resolution scope for its prepared statements
  // (StatementSession::set_scope): after SET ROLE its own (never shared),
  // with a search_path of its own that search_path; else empty (shared).
  std::string StatementScope() const;

  // Session settings, pins and cancel routing (session_settings.h).
  std::string session_id_;            // hyperpool.session_id of the hello
  std::int32_t app_pid_ = 0;          // hyperpool.backend_pid of the hello: the pid the app knows (0: none)
  endpoint::SessionSettings settings_;
  endpoint::PinSet pins_;
  const std::uint64_t serial_ = ++endpoint_->last_session_serial;  // this session, for sequence_state.h
  bool used_sequences_ = false;       // a unit since the last release may have called nextval
  bool may_notify_ = false;           // a text since the last ReadyForQuery may NOTIFY (notification_pid.h)
  std::uint64_t sequence_generation_ = 0;  // releases after such units (sequence_state.h)
  bool pin_counted_gone_ = false;     // pinned_sessions already decremented
  bool starting_unit_ = false;        // acquiring/preparing a connection for a new unit
  bool cancel_requested_ = false;     // a cancel arrived while starting_unit_
  std::size_t cancels_in_flight_ = 0; // CancelRequests not yet processed by the origin
  std::uint64_t parameter_mark_ = 0;  // conn_->parameter_changes() after our own replay/capture

  // Protocol-level prepared statements of this client (statement_session.h).
  endpoint::StatementSession statements_{endpoint_->statements};
  bool parse_only_unit_ = false;  // answering a Parse-only unit locally, until its Sync

  // The pinned budget (pin_budget.h).
  bool pin_budget_held_ = false;      // this session holds one unit of it
  bool lease_out_of_cap_ = false;     // lease_ was moved out of the pool's cap
  bool rewritten_pin_ = false;        // HandleFrame runs a refused pin's replacement
  bool discard_after_unit_ = false;   // a refused pin ran: close the connection at release
  bool close_after_send_ = false;     // end the session once local_out_ is sent (a FATAL)
  std::chrono::steady_clock::time_point last_activity_{};  // last frame or ReadyForQuery
  std::unique_ptr<asio::steady_timer> idle_watch_;  // WatchPinnedIdle's timer

  // LISTEN/NOTIFY (listen_state.h, listener.h).
  static constexpr std::size_t kMaxQueuedNotificationBytes = 8 * 1024 * 1024;
  endpoint::ListenRegistry::Subscriber listen_id_;  // this session in the listener's registry
  endpoint::ListenTracker listens_;                 // LISTEN/UNLISTEN awaiting their commit
  std::string pending_notifications_;               // NotificationResponse frames not yet deliverable
  bool notifications_overflowed_ = false;           // the queue hit its bound: the session ends
};

}  // namespace hyperpool
