#pragma once
// The Endpoint's per-link session driver (docs/architecture.md, "The
// Endpoint session"). Internal to src/endpoint/: made by Endpoint::Accept
// (endpoint.cc); its methods are in endpoint_session.cc (the hello and the
// link kinds that are no session: probes, invalidation watches, cancels)
// and endpoint_session_io.cc (the I/O around SessionCore and its commands).
//
// Every decision is SessionCore's (session_core.h, no I/O); this class only
// moves bytes and runs what the core asks for:
//  - PumpLink: link bytes -> core.OnClientBytes, while the core wants them;
//    between messages it waits with a callback (Link::WhenReadable), so an
//    idle session holds no coroutine for it (ReadLink, a coroutine, serves
//    links that cannot);
//  - PumpOrigin: the lent connection's frames -> core.OnOriginFrame, while
//    the core wants them, waiting for the socket with a callback (ReadOrigin,
//    a coroutine, over TLS, only while the session holds a connection), so
//    an idle session has no reader;
//  - after every event, Execute(): the core's `to_origin` is written to the
//    lent connection (at once when the socket takes it, else by one
//    writer), `to_client` is sent on the link (one sender at a time; the
//    others append), and each command runs (the pool's lend at once when
//    it has a connection to spare; the rest in a coroutine of its own that
//    reports back).
// All on the Endpoint's executor.
//
// Lifetime rule that keeps a connection from being destroyed under a
// pending operation: a lease is given back only when nothing of ours is
// inside an operation on its connection (`reading_`, `writing_`,
// `own_query_`). Until then it waits in `releasing_` (a close closes the
// socket at once, so the pending operation fails promptly), and the core
// may already hold another.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>

#include "endpoint/endpoint_cache.h"
#include "endpoint/endpoint_impl.h"
#include "endpoint/session_core.h"
#include "hyperpool/transport.h"
#include "pool/pool.h"
#include "protocol/codec.h"

namespace hyperpool {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<Endpoint::Impl> endpoint, std::unique_ptr<Link> link);
  ~Session();

  // Starts Run().
  void Start();

  // The listener connection (listener.h) has a notification for a channel
  // this session listens on (the core delivers it as PostgreSQL does).
  void DeliverNotification(std::string_view raw_frame);

  // Endpoint::Stop(): ends the session as if the client vanished.
  void Shutdown();

  // The live session of `endpoint` that pid `pid` names: its app pid; or
  // an origin backend's: the session other than the caller (app pid
  // `caller`) shown it by pg_backend_pid() most recently, else the one that
  // used it most recently unless the caller (its lend `caller_lease`:
  // SessionCore::SignalLease) did so later; or null.
  static std::shared_ptr<Session> FindSignalTarget(Endpoint::Impl& endpoint, std::int32_t pid, std::int32_t caller,
                                                   endpoint::SessionCore::OriginLease caller_lease = {});
  // pg_terminate_backend (`terminate`) or pg_cancel_backend aimed at this
  // session (its executor).
  void Signal(bool terminate);

 private:
  // ----- The hello and the link kinds (endpoint_session.cc) ---------------

  asio::awaitable<void> Run();

  // Reads the hello (a StartupMessage); keeps its parameters. Frames after it
  // stay in `in_`.
  asio::awaitable<bool> ReadHello();

  // Reads the hello's hyperpool.* parameters: a cancel link routes its
  // cancel and ends (false); probes and watches are flagged.
  bool OnHello();

  void RouteCancel(const std::string& id);

  // Link-ready: the origin's ParameterStatus set and ReadyForQuery 'I'. If
  // no origin login has happened yet, one is made first (and returned).
  asio::awaitable<bool> SendLinkReady();

  // A placement probe (docs/architecture.md, "The link protocol"): answers
  // the origin round trip, measured now unless a recent sample exists, as
  // ParameterStatus hyperpool.origin_rtt_us, then ReadyForQuery; or a FATAL
  // error when the origin cannot be reached. The link closes after.
  asio::awaitable<void> AnswerProbe();

  // An invalidation watch (cache/tier.h, kWatchParam): the answer, then
  // every invalidation broadcast to its Client, each Sync answered in
  // order; no origin connection, no unit of work. Ends at Terminate, a
  // closed link, anything else (FATAL 08P01), or a Client that lets more
  // than kMaxLocalBacklog pile up (it then drops its tier and subscribes
  // again).
  asio::awaitable<void> RunWatch();
  asio::awaitable<void> FlushWatch();

  // A replication link (hyperpool.replication): logs in to the origin as a
  // walsender of its own (Endpoint::Impl::connect_walsender) and carries
  // the bytes both ways unchanged until either side ends: this coroutine
  // the link's to the origin, TunnelOriginToLink the origin's to the link.
  // No core, no pool, no cache: a FATAL on the link if the login fails.
  asio::awaitable<void> RunTunnel();
  asio::awaitable<void> TunnelOriginToLink(std::shared_ptr<OriginConnection> origin);

  // Sends an ErrorResponse with severity FATAL (the session ends after).
  asio::awaitable<void> SendFatal(const protocol::PoolerError& error);

  // ----- The session: I/O around the core (endpoint_session_io.cc) -------

  // A cancel link names this session.
  bool Cancel();

  asio::awaitable<void> ReadLink();
  // Takes what the link has for the core, as long as the core may take it;
  // then arms a WhenReadable that calls it again (or, while MayReadLink is
  // false, lets LinkRoom call it). Starts ReadLink for a link without
  // WhenReadable.
  void PumpLink();
  // MayReadLink may have become true: wakes the link's reader.
  void LinkRoom();
  asio::awaitable<void> ReadOrigin();
  // ReadOrigin without a coroutine for plain sockets: takes the lent
  // connection's frames while the core wants them, then waits for the socket
  // with a callback (OriginConnection::WaitReadable). Starts ReadOrigin over
  // TLS. Execute posts it when the core wants origin frames.
  void PumpOrigin();
  bool OriginPumpWanted() const;
  // The link may be read: the core wants client bytes and what it made for
  // the origin and is not written yet (the origin is busy) is within
  // EndpointOptions::max_pending_to_origin. Bytes still unparsed do not
  // count: one message larger than the bound must still arrive whole.
  bool MayReadLink() const;

  // Carries out what the core's outbox holds (see the file comment), until
  // it is empty; sends `to_client` when `flush_link` (or the core says the
  // answers are complete, or they are large).
  void Execute(bool flush_link);
  // No connection, nothing in flight, the core idle.
  bool Idle() const;
  // At the end of Execute, once Idle(): queued for the Endpoint's next idle
  // sweep (Endpoint::Impl::on_executor.idle_sweep, common/idle_sweep.h), which gives
  // the buffers of the sessions still idle then back to the pool
  // (SweepIdleSession: ReleaseIdleBuffers, SessionCore::ReleaseIdleBuffers).
  void NoteIdle();
  friend void SweepIdleSession(Session& session);
  void ReleaseIdleBuffers();
  // At the idle sweep, after ReleaseIdleBuffers: a session parked on its
  // link with a core that can sleep (SessionCore::CanSleep) keeps only the
  // core's Dormant parts; Core() wakes it at the next event.
  void MaybeSleep();
  // The core, woken first if it sleeps. Every event for the core goes
  // through it (core_ is null while the session sleeps).
  endpoint::SessionCore& Core();
  // The hello's session id (the core's, awake or asleep).
  const std::string& SessionId() const;
  // Writes origin_out_ at once if the socket takes it, else starts WriteOrigin.
  void StartOriginWrite();
  // Writing to the lent connection `c` failed: drops what was for it, closes
  // it, and reports the loss to the core unless a pending read on it will
  // (true: reported here).
  bool OriginWriteFailed(OriginConnection* c);
  void RunCommand(endpoint::SessionCommand& command);
  // Send `link_out_` / write `origin_out_` when that had to wait (one each
  // at a time; Execute starts them).
  asio::awaitable<void> SendLink();
  asio::awaitable<void> WriteOrigin();
  void ReleaseNow(ReleaseDecision decision);
  // Gives back the released connections nothing of ours is inside any more.
  void MaybeFinishRelease();
  // The session is over: deregisters it, closes the link once what is
  // queued for it is sent.
  void Finish();
  // Out of the listen and session-id maps (registered_), once.
  void Unregister();

  asio::awaitable<void> Acquire();
  // kPrepare, kCapture or kUnlisten on `conn` (null: it went meanwhile).
  asio::awaitable<void> OwnQuery(OriginConnection* conn, endpoint::SessionCommand::Kind kind, bool discard_sequences);
  bool Busy(const OriginConnection* conn) const {
    return origin_io_ && (origin_io_->reading == conn || origin_io_->writing == conn || origin_io_->own_query == conn);
  }
  asio::awaitable<void> CancelOrigin(endpoint::BackendKey key, bool notify);
  asio::awaitable<void> ListenSet(std::set<std::string> channels);
  asio::awaitable<void> Barrier();
  asio::awaitable<void> FinishIntercept();
  asio::awaitable<void> WatchPinnedIdle();
  asio::awaitable<void> WatchTimeouts();
  // kWaitPin: waits in the pinned budget's queue (pin_budget.h) until a
  // unit is handed over, the acquire timeout passes, or kCancelPinWait.
  asio::awaitable<void> WaitPin();
  // Leaves the pinned budget's queue (a unit already handed over goes back).
  void LeavePinWait();
  // kSignalSession: cancels the query of, or terminates, this Endpoint's
  // session whose app pid is `app_pid`; false if there is none.
  bool SignalSession(std::int32_t app_pid, bool terminate);

  std::shared_ptr<Endpoint::Impl> endpoint_;
  std::unique_ptr<Link> link_;
  protocol::FrameReader reader_;  // the hello (startup mode), then the watch's frames
  std::vector<std::pair<std::string, std::string>> hello_parameters_;
  std::string in_;  // link bytes not yet handed to the core (the hello's batch)
  endpoint::SessionCache cache_;  // the query cache's hooks (endpoint_cache.h)
  std::unique_ptr<endpoint::SessionCore> core_;  // null before the hello is read, and while asleep
  std::unique_ptr<endpoint::SessionCore::Dormant> dormant_;  // while asleep (MaybeSleep)

  std::int32_t app_pid_ = 0;    // hyperpool.backend_pid of the hello
  bool probe_ = false;          // a placement probe link
  bool watch_ = false;          // an invalidation watch link (RunWatch)
  bool tunnel_ = false;         // a replication link (RunTunnel)
  bool registered_ = false;     // in sessions_by_id / listen_sessions
  const endpoint::ListenRegistry::Subscriber listen_id_;

  // What the session holds while it works with the origin: the lease, the
  // pumps' and the writer's state, its place in the pinned budget's queue.
  // Made at the first use (O()), given back at the idle sweep once Quiet()
  // (ReleaseIdleBuffers): an idle session holds none of it (docs/
  // architecture.md, "What an idle session holds").
  struct OriginIo {
    Lease lease;  // the connection the core holds (core_->connection())
    // Released by the core while one of our operations was inside it: given
    // back once nothing is (a close has closed the socket, so that operation
    // fails promptly).
    std::vector<std::pair<Lease, ReleaseDecision>> releasing;
    OriginConnection* reading = nullptr;    // ReadOrigin is inside its ReadFrame
    OriginConnection* writing = nullptr;    // WriteOrigin is inside its Write
    OriginConnection* own_query = nullptr;  // a replay, capture or UNLISTEN * runs on it
    OriginConnection* origin_waiting = nullptr;  // PumpOrigin's readability wait is on it
    bool origin_writer = false;   // WriteOrigin runs
    bool origin_reader = false;   // ReadOrigin runs (TLS: while a lease is held, or it is still inside a read)
    bool pumping_origin = false;  // PumpOrigin is on the stack
    bool origin_pump_posted = false;
    bool origin_read_full = false;  // PumpOrigin's last read used all its space: read again before waiting
    bool acquiring = false;
    bool pin_granted = false;      // ...handed a unit, not yet reported to the core
    std::uint64_t pin_ticket = 0;  // in the pinned budget's queue (WaitPin), or 0
    std::string origin_out;       // frontend bytes for the lent connection, not yet written
    std::string origin_writing_buf;  // the bytes WriteOrigin is writing
    AcquireCancel acquire_cancel;
    std::unique_ptr<asio::steady_timer> pin_timer;  // WaitPin's deadline

    // No lease, nothing released, running, queued or buffered: nothing here
    // that a new OriginIo would not hold.
    bool Quiet() const {
      return !lease && releasing.empty() && reading == nullptr && writing == nullptr && own_query == nullptr &&
             origin_waiting == nullptr && !origin_writer && !origin_reader && !pumping_origin && !origin_pump_posted &&
             !acquiring && !pin_granted && pin_ticket == 0 && !pin_timer && origin_out.empty() &&
             origin_writing_buf.empty();
    }
  };
  OriginIo& O() { return origin_io_ ? *origin_io_ : MakeOriginIo(); }
  OriginIo& MakeOriginIo();  // (out of line: O() stays a test and a load)
  std::unique_ptr<OriginIo> origin_io_;

  std::string link_out_;         // backend bytes for the link, not yet sent
  bool link_sending_ = false;    // SendLink is inside Send
  bool link_armed_ = false;      // a WhenReadable of PumpLink is pending
  bool link_blocked_ = false;    // PumpLink stopped because MayReadLink was false
  bool pumping_link_ = false;    // PumpLink is on the stack
  bool link_coroutine_ = false;  // the link cannot WhenReadable: ReadLink reads it
  bool link_closed_ = false;
  bool finished_ = false;        // Finish() ran
  bool executing_ = false;       // Execute() is on the stack
  bool idle_queued_ = false;     // in Endpoint::Impl::on_executor.idle_sweep (NoteIdle)
  endpoint::Signal client_wake_;  // the core may want link bytes again
  endpoint::Signal origin_wake_;  // the core may want origin frames again
  endpoint::Signal sent_;         // a link Send finished

  // Made when the session first has a timeout to watch (WatchTimeouts runs
  // from then on): most sessions never do, and an idle session keeps no
  // timer it does not use.
  std::unique_ptr<asio::steady_timer> timeout_timer_;
  std::unique_ptr<asio::steady_timer> idle_watch_;
};

}  // namespace hyperpool
