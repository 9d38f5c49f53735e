#pragma once
// The Client's per-app-connection session. Internal to src/client/: made by
// Client::Impl::StartSession (client.cc); its methods are in
// client_session.cc (construction, the handshake, cancels, the admin
// console) and client_session_forward.cc (the link, the Client cache tier,
// the app reader, the link reader and the writer).
//
// The decisions per message are ClientCore's (client_core.h, no I/O); this
// class is its driver.
//
// After the handshake a session is a record driven by callbacks on its
// worker's executor (a strand of it when the executor's io_context may run
// on several threads); a coroutine runs only where something must wait
// (opening the link, a Send the link cannot take at once, a link that
// cannot call back). Two readers feed one writer:
//   the app reader (PumpApp): runs from a readability wait on the app's
//              socket (ParkApp / OnAppReadable): answers local cache hits,
//              turns whole frontend frames into one chunk for the link
//              (one Send per read, many frames per Send) and the answers
//              made at once;
//   the link reader (OnLinkReadable, ForwardLinkBytes): parked on a link
//              callback when the link has one (the direct link of
//              `serve`), else a Receive coroutine; tracks ReadyForQuery
//              for the transaction status;
//   the writer (SendApp / FlushApp): the only one that writes to the app's
//              socket after the login: one outbox (client/app_outbox.h),
//              gathered writes, one wait for writability at a time. What
//              is queued first arrives first, so a local hit queued after
//              the link's bytes of an earlier unit follows them. A reader
//              whose bytes wait in the outbox stops reading until it drains
//              (backpressure), and OnAppDrained resumes it.
// Each reader, when it ends, closes what the other is waiting on, so the
// session unwinds without joins; the Session object lives as long as a
// callback or coroutine holds it.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include "absl/status/statusor.h"
#include "cache/tier.h"
#include "client/app_outbox.h"
#include "client/app_tls.h"
#include "client/client_cache.h"
#include "client/client_core.h"
#include "client/client_impl.h"
#include "client/client_util.h"
#include "client/extended_session.h"
#include "client/in_buffer.h"
#include "client/session_key.h"
#include "common/small_fifo.h"
#include "hyperpool/client.h"
#include "hyperpool/transport.h"
#include "protocol/codec.h"

namespace hyperpool {

class ClientSession : public std::enable_shared_from_this<ClientSession> {
 public:
  // The session's life. Change it only through SetState().
  enum class State : uint8_t {
    kStartup,         // waiting for StartupMessage (SSLRequest: 'S' and TLS when configured, else 'N')
    kAuthenticating,  // SCRAM-SHA-256 exchange in progress
    kAwaitingParams,  // authenticated; waiting for the origin's parameters (first app of a Client)
    kIdle,            // ReadyForQuery sent and nothing outstanding (the link may not exist yet)
    kBusy,            // requests (Query, Sync, FunctionCall) forwarded without their ReadyForQuery
    kClosed,          // socket and link closed; the legs are unwinding
  };

  // Why forwarding ended; decides what the app is told.
  enum class EndReason : uint8_t {
    kNone,              // still running
    kTerminate,         // app sent Terminate: forwarded, then both closed
    kAppGone,           // app socket closed or failed: link closed (a vanished client)
    kAppProtocolError,  // app sent a malformed frame: pending_error_ goes to the app
    kIdleTimeout,       // idle past options.idle_timeout: pending_error_ (57P05) goes to the app
    kKilled,            // Client::Kill (admin KILL_CLIENT): pending_error_ (57P01) goes to the app
    kLinkFailed,        // the link broke: 08006 to the app
    kStopped,           // Client::Stop()
  };

  ClientSession(std::shared_ptr<Client::Impl> impl, tcp::socket socket, const std::optional<tcp::endpoint>& peer);

  ~ClientSession();

  asio::any_io_executor executor() { return socket_.get_executor(); }

  // SHOW CLIENTS and KILL_CLIENT, with impl_->mu held (the fields it reads
  // are written under it: Client::Impl::StartSession, Handshake); the state
  // is read from an atomic so SetState() takes no lock.
  ClientSessionInfo Info() const;
  uint64_t id() const { return id_; }
  // Client::Impl::StartSession, with impl_->mu held.
  void SetListed(uint64_t id, std::chrono::system_clock::time_point connect_time) {
    id_ = id;
    connect_time_ = connect_time;
  }
  std::string shown_state() const;

  // Client::Kill(): runs on the session's executor. With a link, LinkToApp
  // delivers the FATAL when the link ends; without one (an admin session,
  // a handshake, an idle session with no link yet) EndSession writes it and
  // closing the socket ends the reader.
  void Kill(std::shared_ptr<ClientSession> self);

  // `self` keeps the session alive for the coroutine's whole life (the
  // body starts only after co_spawn returns).
  asio::awaitable<void> Run(std::shared_ptr<ClientSession> self);

  // Client::Stop(): runs on the session's strand.
  void Shutdown();

  // The probe finished: runs on the session's strand.
  void OnParams(std::string error_frame);

 private:
  // The one transition function.
  void SetState(State next);

  void StartWatchdog();

  // client_idle_timeout (ClientOptions::idle_timeout): armed whenever a
  // ReadyForQuery 'I' leaves with nothing outstanding, disarmed by the next
  // message from the app, as PostgreSQL's idle_session_timeout.
  void ArmIdleTimer();
  // Queues the session for its executor's idle sweep (Client::Impl::IdleSweep),
  // which gives back the per-unit state of a session still idle then.
  void NoteIdle();
  friend void SweepIdleClientSession(ClientSession& session);
  void DisarmIdleTimer();

  // The idle timeout fired, or Kill(): FATAL to the app, Terminate to the
  // Endpoint (a clean end, not a vanished client), then close both.
  asio::awaitable<void> EndSession(std::shared_ptr<ClientSession> self, pr::PoolerError error);

  // SHOW STATS' total_sent (one writer: the session's executor).
  void CountSent(size_t n) { sent_.store(sent_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }

  void CloseSocket();

  void CloseLink();

  // Reads until a whole frame is buffered. The frame's views stay valid until
  // the next read. InvalidArgument: protocol error; Unavailable: closed.
  asio::awaitable<absl::StatusOr<pr::Frame>> ReadFrame(const pr::FrameReader& reader);

  // Reads once, so that (when possible) `needed` bytes in total are buffered.
  asio::awaitable<bool> Fill(size_t needed);

  // The login and the admin console's writes (one writer: the coroutine
  // that runs them); after the login every write goes through SendApp.
  asio::awaitable<void> Write(std::string_view bytes);
  // Writes all of `bytes` to the app: at once (no suspension) when the
  // socket takes them, the rest asynchronously. The error and bytes written.
  asio::awaitable<std::tuple<asio::error_code, size_t>> WriteApp(std::string_view bytes);

  // ---- The writer (the outbox to the app, app_outbox.h) ----

  // Queues `bytes` for the app and writes what the socket takes now.
  // A failed write ends the session (AppWriteFailed).
  void SendApp(std::string bytes);
  // Queues `bytes` (may be empty) and closes the session once everything
  // queued is written.
  void SendAppThenClose(std::string bytes);
  // Writes the outbox (gathered) until it is empty or the socket is full;
  // then one wait for writability continues it.
  void FlushApp();
  // The outbox drained after a wait: closes (SendAppThenClose), or resumes
  // the readers that stopped for it.
  void OnAppDrained();

  // Sends a FATAL ErrorResponse and closes the socket.
  asio::awaitable<void> Fatal(std::string_view sqlstate, std::string message);
  asio::awaitable<void> Fatal(const pr::PoolerError& error) { return Fatal(error.sqlstate, error.message); }

  // ---- Handshake (PostgreSQL docs, "Message Flow" > "Start-up") ----

  // Runs the sans-I/O ServerHandshake over the socket, then sends the
  // origin's parameters, BackendKeyData and ReadyForQuery. False: closed.
  asio::awaitable<bool> Handshake();

  // Waits until the Client knows the origin's parameters (only the first app
  // connections of a Client ever wait). Reports failures to the app itself.
  asio::awaitable<std::optional<client::ParamList>> AwaitParams();

  bool RegisterCancelKey();

  // CancelRequest ("Canceling Requests in Progress"): find the session by its
  // key and open a cancel link for it. The app gets no answer either way.
  asio::awaitable<void> ForwardCancel(int32_t pid, const std::string& secret);

  // ---- Forwarding ----

  // Opens the session's link with the hello and the first frames; starts LinkToApp.
  asio::awaitable<bool> OpenLink(std::string first_frames);
  // OpenLink without LinkToApp (`replication`: the hello asks for a
  // replication link). False: the app was told why (or the session stopped).
  asio::awaitable<bool> OpenLinkOnly(std::string first_frames, std::string_view replication);

  // ---- Replication connections (docs/architecture.md) ----

  // A login that asked for a walsender (`replication`): no core, no cache.
  // The link carries the bytes of the Endpoint's walsender connection,
  // unchanged both ways, until either side ends: this coroutine takes the
  // app's bytes to the link, TunnelLinkToApp the link's to the app.
  asio::awaitable<void> RunTunnel(std::shared_ptr<ClientSession> self, std::string replication);
  asio::awaitable<void> TunnelLinkToApp(std::shared_ptr<ClientSession> self);

  // One line per batch for the round-trip trace (link_trace.h).
  void TraceFlight(std::string_view to_link, std::string_view local) const;

  // Answers units at the front of In() from the local tier (ClientCore::
  // ServeLocalHit), as long as they hit; the first one that does not is
  // left in `miss`. False: stop reading (the answers wait in the outbox:
  // OnAppDrained resumes, or the session closed).
  bool ServeLocalHits(client::ClientCore::LocalMiss& miss);

  // The app reader: local hits and batches while whole frames are buffered;
  // then parks (ParkApp), or stops for the outbox or the link (a coroutine
  // that continues it: OpenLinkThen, SendThen).
  void PumpApp();
  // After a batch went to the link (or had nothing for it): the session's
  // state, Terminate, a protocol error. True: read on (PumpApp continues).
  // `sent_local`: the batch's local answers went to the outbox.
  bool AfterBatch(client::ClientCore::AppBatch& batch, bool sent_local);
  asio::awaitable<void> OpenLinkThen(std::shared_ptr<ClientSession> self, client::ClientCore::AppBatch batch,
                                     bool sent_local);
  asio::awaitable<void> SendThen(std::shared_ptr<ClientSession> self, client::ClientCore::AppBatch batch,
                                 bool sent_local);

  // The app reader needs more bytes: instead of a coroutine suspended in a
  // read (its frames and a read buffer held for as long as the app stays
  // idle), a readability wait on the socket whose completion reads and
  // runs PumpApp again (no buffer kept when nothing is buffered). The same syscalls as the read it replaces: Asio
  // re-arms the socket for the wait (epoll_ctl) instead of trying a read
  // that fails (EAGAIN).
  void ParkApp();
  // ParkApp's wait completed: reads what arrived and runs PumpApp, or
  // parks again (nothing there), or ends forwarding (closed, failed).
  void OnAppReadable(asio::error_code ec);

  // The idle sweep found the session idle with its reader parked: the
  // Asio readability wait is cancelled, and at its cancellation
  // (OnAppReadable) the socket is watched by the executor's QuietWatch
  // instead, until the app sends (WakeQuietClientSession: the reader reads
  // and parks on Asio again) or the socket closes (CloseSocket forgets it,
  // and the reader ends as with a cancelled wait). A quiet session holds
  // no Asio operation (~150 bytes).
  void GoQuiet();
  friend void WakeQuietClientSession(std::shared_ptr<ClientSession> session);
  enum Quiet : uint8_t { kNotQuiet, kGoingQuiet, kQuiet };

  // The app's socket ended or failed while PumpApp read it: closes what
  // the session's end needs closed.
  void AppReadEnded();

  // Link-ready, then the link reader.
  asio::awaitable<void> LinkToApp(std::shared_ptr<ClientSession> self);

  // Forwards the whole frames in link_in_ to the outbox (the bytes
  // themselves when they pass unchanged: AppBytes). kMore: read the link
  // again; kWait: they wait in the outbox (OnAppDrained resumes with
  // WaitLink); kEnded: the session is ending.
  enum class LinkStep { kMore, kWait, kEnded };
  LinkStep ForwardLinkBytes();

  // Waits for the link: a WhenReadable callback (ParkLink), else a Receive
  // coroutine (ReceiveLink).
  void WaitLink();

  // The Endpoint offered to let its half of the session go
  // (protocol::ReleaseControl): noted, and confirmed by two idle sweeps of
  // ours with no message from the app in between (SweepIdleClientSession),
  // which then call ReleaseLink.
  void OnReleaseOffer(bool wrote);
  // If the session is still idle, with nothing of the link's in hand
  // either way, a Terminate ends the Endpoint's half and the link is
  // closed; the next unit opens a new one (PumpApp). An idle session then
  // holds no link and no Endpoint session (docs/architecture.md, "What an
  // idle session holds"). `wrote`: the offer's (the session sent a write:
  // its later hellos say so). True: released.
  bool ReleaseLink(bool wrote);

  // Nothing from the link is pending: a WhenReadable callback instead of a
  // coroutine suspended in Receive. False: the link cannot (a socket or
  // channel link): keep receiving.
  bool ParkLink(const std::shared_ptr<ClientSession>& self);

  // ParkLink's callback: forwards what arrived, chunk by chunk, and parks
  // again; stops for the outbox and ends at LinkEnded.
  void OnLinkReadable();

  // The link reader of a link that cannot call back.
  asio::awaitable<void> ReceiveLink(std::shared_ptr<ClientSession> self);

  // Writing to the app failed: the session ends (a vanished client).
  void AppWriteFailed();

  // The link stopped delivering: tell the app why (unless it left or we
  // stopped), after what is queued for it, and close.
  void LinkEnded();

  // A connection refused or closed during the handshake (ServerHandshake's
  // reason); a failed password at warn, as PostgreSQL logs it at FATAL.
  void LogRefused(std::string_view reason, bool auth_failed = false);

  // ---- The admin console (include/hyperpool/admin.h) ----

  // Serves an authenticated login to options.admin_database: 42501 for a
  // user who is not an admin, else the console's frames until it or the
  // app ends the session. Admin messages are bounded at 1 MiB.
  asio::awaitable<void> RunAdmin();

  ClientSession(std::shared_ptr<Client::Impl> impl, tcp::socket socket, client::Peer peer);

  // The fields are ordered by size, so that an idle session (every one of
  // them is held for as long as its app stays connected) carries no padding
  // between them (docs/performance.md, "What an idle client still holds").
  std::shared_ptr<Client::Impl> impl_;
  tcp::socket socket_;
  // The app's address, for the logs and SHOW CLIENTS (the host alone, for
  // the access rules, is the handshake's: HandshakeTimers::peer_host).
  const std::string peer_text_;
  // SHOW CLIENTS' and the admin console's address: "unix" for a Unix-domain
  // peer (the Unix listener adopts its sockets as TCP ones: unix_listener.h).
  std::string ShownAddress() const { return peer_unix_ ? "unix" : peer_text_; }
  const std::chrono::steady_clock::time_point started_;
  // What only the handshake uses, freed when it ends (Run), so that a
  // logged-in session keeps none of it: the login timeout, the wait for the
  // origin's parameters and its answer (OnParams, AwaitParams), the TLS
  // handshake's abort, the startup packet's parameters. Null after the
  // handshake.
  struct HandshakeTimers {
    explicit HandshakeTimers(const asio::any_io_executor& ex) : watchdog(ex), params(ex) {}
    asio::steady_timer watchdog;
    asio::steady_timer params;
    client::TlsAbort tls_abort;  // armed only during the TLS handshake
    bool params_notified = false;
    std::string params_error;
    std::string peer_host;
    std::string replication;  // the handshake's replication(): a walsender login (RunTunnel)
    client::ParamList app_params;  // the startup packet's (Run interns them: hello_params_)
  };
  std::unique_ptr<HandshakeTimers> handshake_timers_;
  // client_idle_timeout's timer, made at its first arming (none when the
  // timeout is off, the default: an idle session keeps no timer).
  std::unique_ptr<asio::steady_timer> idle_timer_;
  Client::Impl::IdleSweep* idle_sweep_ = nullptr;  // null: no sweep on this executor
  uint64_t idle_generation_ = 0;  // bumped by every arm/disarm: a stale expiry is ignored
  // The app reader's and the writer's buffers: made at the first use
  // (In(), Out()), given back when the session goes quiet with both empty
  // (GoQuiet): a quiet session holds neither (~90 bytes).
  struct AppIo {
    client::InBuffer in;       // app bytes not consumed yet
    client::AppOutbox out;     // bytes for the app not written yet (the one writer: FlushApp)
  };
  std::unique_ptr<AppIo> app_io_;
  client::InBuffer& In() {
    if (!app_io_) app_io_ = std::make_unique<AppIo>();
    return app_io_->in;
  }
  client::AppOutbox& Out() {
    if (!app_io_) app_io_ = std::make_unique<AppIo>();
    return app_io_->out;
  }
  size_t InSize() const { return app_io_ ? app_io_->in.size() : 0; }
  bool OutEmpty() const { return !app_io_ || app_io_->out.empty(); }

  std::string user_;      // written under impl_->mu (Info() reads them on other threads)
  std::string database_;
  // The startup packet's parameters, kept for the hellos of the session's
  // links (one per distinct set: Client::Impl::hello_params); null before
  // the login ends.
  std::shared_ptr<const client::ParamList> hello_params_;

  std::string session_id_;
  std::unique_ptr<Link> link_;
  std::string link_in_;  // link bytes not yet forwarded (a partial frame); empty and freed while parked
  // Every per-message decision (the cache tier, statement metadata, the
  // units in flight, the transaction status): client_core.h.
  client::ClientCore core_;
  std::string pending_error_;
  uint64_t id_ = 0;                                     // ClientSessionInfo::id, guarded by impl_->mu
  std::chrono::system_clock::time_point connect_time_;  // guarded by impl_->mu

  uint32_t release_generation_ = 0;
  uint32_t link_epoch_ = 0;  // bumped when the link is let go: its parked callback is stale
  int32_t cancel_pid_ = 0;
  std::array<char, 4> cancel_secret_{};
  uint32_t app_want_ = 1;  // bytes the app reader needs for its partial frame
  State state_ = State::kStartup;
  EndReason reason_ = EndReason::kNone;
  std::atomic<uint8_t> shown_state_{0};  // state_, for SHOW CLIENTS on other threads
  std::atomic<bool> admin_{false};       // an admin console session (RunAdmin); read by SHOW CLIENTS
  // A release offer being confirmed (OnReleaseOffer): 0 none, 1 noted, 2
  // one sweep passed; the idle generation it was made at, and its `wrote`.
  uint8_t release_stage_ = 0;
  bool release_wrote_ = false;
  bool released_wrote_ = false;  // a released link's Endpoint half had seen a write (link::kWroteParam)
  const bool peer_unix_;
  bool logged_in_ = false;           // ReadyForQuery of the login sent
  bool idle_queued_ = false;         // in idle_sweep_->sessions
  bool timed_out_ = false;
  bool app_write_waiting_ = false;   // FlushApp waits for the socket to take more
  bool app_waits_out_ = false;       // the app reader stopped until the outbox drains
  bool link_waits_out_ = false;      // the link reader stopped until the outbox drains
  bool close_when_drained_ = false;  // SendAppThenClose: close once the outbox drains
  bool farewell_sent_ = false;
  bool app_parked_ = false;  // ParkApp's Asio wait is pending
  Quiet quiet_ = kNotQuiet;

 public:
  // Bytes from and to the app; written on the session's executor only.
  std::atomic<uint64_t> received_{0};
  std::atomic<uint64_t> sent_{0};
};

}  // namespace hyperpool
