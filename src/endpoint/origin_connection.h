#pragma once
// Origin connections: the Endpoint's logged-in connections to the origin
// PostgreSQL, and the connector that opens them.
//
// ConnectOrigin does everything libpq does before the first query
// (PostgreSQL docs, "Frontend/Backend Protocol" > "Message Flow" >
// "Start-up"): resolve, TCP connect, TLS per sslmode through SSLRequest
// ("SSL Session Encryption"), StartupMessage, the authentication exchange the
// origin asks for (SCRAM-SHA-256[-PLUS], MD5, cleartext), then it collects
// ParameterStatus and BackendKeyData until ReadyForQuery. Every failure is a
// value (OriginFailure) classified like ValidateOrigin's result, with a
// one-line message that never contains the password.
//
// An OriginConnection is used by one session at a time, from the executor it
// was opened on: one ReadFrame and one Write may be outstanding at once (a
// reader and a writer coroutine), nothing more.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "endpoint/origin_config.h"
#include "endpoint/sequence_state.h"
#include "endpoint/session_settings.h"
#include "endpoint/statement_registry.h"
#include "hyperpool/validate.h"
#include "pool/pool.h"
#include "protocol/frame_reader.h"
#include "protocol/sqlstate.h"

namespace hyperpool::endpoint {

// Why an origin connection could not be opened (or broke). `failure` uses
// the validation kinds so ValidateOrigin and the Endpoint report alike.
struct OriginFailure {
  ValidationFailure failure = ValidationFailure::kOther;
  // The origin's SQLSTATE when it sent an ErrorResponse, else the one
  // PostgreSQL clients use for the situation (08001, 08006, 57P03...).
  std::string sqlstate;
  // One line, for people; never contains the password.
  std::string message;
};

// How the connector logs in; defaults come from OriginConfig.
struct ConnectOptions {
  // Bounds everything: resolve, connect, TLS and login. Zero: 15 s.
  std::chrono::milliseconds timeout{15000};
  // Limit for any message during the login exchange: a hostile or broken
  // origin cannot make us buffer much before it has proved itself.
  std::uint32_t max_login_message_length = 64 * 1024;
  // Limit for any message once logged in (a DataRow can be large).
  std::uint32_t max_message_length = protocol::kDefaultMaxMessageLength;
  // application_name sent when the origin string names none.
  std::string default_application_name = "hyperpool";
};

class OriginConnection;

// Either a logged-in connection or why not.
struct ConnectResult {
  std::unique_ptr<OriginConnection> connection;
  OriginFailure failure;
  bool ok() const { return connection != nullptr; }
};

// Opens and logs in to an origin connection on `executor`. Never throws.
asio::awaitable<ConnectResult> ConnectOrigin(asio::any_io_executor executor, const OriginConfig& config,
                                             ConnectOptions options = {});

// How an origin reports its backend (BackendKeyData): for cancel routing.
struct BackendKey {
  std::int32_t process_id = 0;
  std::string secret_key;
};

// A logged-in origin connection (PostgreSQL backend). Move-only handle; the
// stream (TCP, Unix socket or TLS) is hidden behind OriginStream.
class OriginConnection final : public PooledConnection {
 public:
  class Stream;  // the transport: plain TCP, Unix socket or TLS
  OriginConnection(std::unique_ptr<Stream> stream, std::uint32_t max_message_length);
  ~OriginConnection() override;
  OriginConnection(const OriginConnection&) = delete;
  OriginConnection& operator=(const OriginConnection&) = delete;

  // The next complete backend frame. Its views stay valid until the next
  // ReadFrame() (the read buffer is reused, so steady-state reading does not
  // allocate). Tracks ParameterStatus changes and the transaction status
  // of ReadyForQuery. Any error (EOF, socket, protocol) marks the
  // connection broken.
  asio::awaitable<absl::StatusOr<protocol::Frame>> ReadFrame();
  // True if a complete frame is already buffered: the next ReadFrame() will
  // not wait for the network (callers batch until this is false).
  bool HasBufferedFrame() const;
  // The next frame if it is already buffered, without suspending (what
  // ReadFrame() would return at once); nullopt when it must wait for the
  // network. Errors as ReadFrame()'s. A reader takes the frames of a burst
  // this way and calls ReadFrame() only when it has to wait.
  absl::StatusOr<std::optional<protocol::Frame>> TakeBufferedFrame();
  // For a reader that holds no coroutine (Session::PumpOrigin): reads what
  // the socket has now into the buffer, after the partial frame, without
  // suspending: true if bytes arrived, false if none yet. Errors as
  // ReadFrame()'s (they mark the connection broken). `*full`: the read used
  // all the space it had (more may be waiting). Not over TLS
  // (SupportsTryFill), whose records only ReadFrame() reads.
  std::optional<absl::StatusOr<bool>> TryFill(bool* full);
  bool SupportsTryFill() const;
  // Calls `ready(ec)` once the socket is readable (or the wait fails or is
  // cancelled: CancelWaitReadable, CloseNow). Reads nothing.
  void WaitReadable(absl::AnyInvocable<void(std::error_code)> ready);
  void CancelWaitReadable();

  // Writes all of `bytes` (whole frontend messages). An error marks the
  // connection broken. `bytes` must stay alive until it completes.
  asio::awaitable<absl::Status> Write(std::string_view bytes);
  // Writes what the socket takes at once, without suspending (plain TCP and
  // Unix sockets; TLS takes nothing here): the bytes written. A socket
  // error marks the connection broken. Not while a Write is pending.
  std::size_t TryWrite(std::string_view bytes);

  // Runs an empty query (Query "" -> EmptyQueryResponse, ReadyForQuery 'I'):
  // the pool's health check and ValidateOrigin's test query. Only at 'I'
  // with nothing outstanding. An ErrorResponse is returned as
  // FailedPrecondition with the origin's message; transport errors as
  // Unavailable (and break the connection).
  asio::awaitable<absl::Status> Ping();

  // Closes the socket now (no Terminate, no TLS close_notify): pending
  // operations complete with errors; the origin sees EOF and rolls back.
  void CloseNow();
  // The pool's close: politely ends the session with Terminate ('X') when
  // the connection is healthy (bounded to one second), then CloseNow().
  asio::awaitable<void> Close() override;
  // The pool's idle watch (pool.h): reports readability (a FATAL before the
  // origin closes an idle backend, EOF, or over TLS a post-handshake record
  // such as a session ticket, which the pool's health check then reads
  // through) without reading.
  void WatchIdle(std::function<void()> on_activity) override;
  void StopWatchingIdle() override;
  bool IdleActivity() override;

  // Origin run-time parameters (ParameterStatus), as of the last message read.
  const std::vector<std::pair<std::string, std::string>>& parameters() const { return parameters_; }
  const BackendKey& backend_key() const { return backend_key_; }
  // Close() then logs origin_close with the backend pid (log_disconnections).
  void set_logger(std::shared_ptr<const Logger> logger) { logger_ = std::move(logger); }
  std::int32_t backend_pid() const override { return backend_key_.process_id; }
  // 'I', 'T' or 'E' from the most recent ReadyForQuery.
  char transaction_status() const { return transaction_status_; }
  // True once an I/O or protocol error occurred or CloseNow() was called: the
  // connection must be discarded, never reused.
  bool broken() const { return broken_; }
  void MarkBroken() { broken_ = true; }
  // Whether the stream is TLS, and its protocol version ("TLSv1.3") if so.
  bool is_tls() const;
  std::string tls_version() const;
  // Steady-clock time of the last completed ReadyForQuery, for idle checks.
  std::chrono::steady_clock::time_point last_ready() const { return last_ready_; }
  // How the login authenticated: "SCRAM-SHA-256-PLUS", "SCRAM-SHA-256",
  // "md5", "password" (cleartext) or "trust" (no password asked).
  const std::string& auth_method() const { return auth_method_; }
  void set_auth_method(std::string method) { auth_method_ = std::move(method); }
  // The server-side prepared statements that exist on this backend
  // (statement_registry.h); they live and die with the connection.
  ConnectionStatements& statements() { return statements_; }

  // Largest backend message accepted from now on (small during login).
  void SetMaxMessageLength(std::uint32_t max) { reader_.set_max_message_length(max); }
  // The settings this connection carries beyond its login defaults (what
  // session settings replay set on it; src/endpoint/session_settings.h).
  SettingMap& carried_settings() { return carried_settings_; }
  // Which session may have left currval/lastval state here (sequence_state.h).
  SequenceOwner& sequence_owner() { return sequence_owner_; }
  // How many ParameterStatus messages have been read: a change during a
  // client's work means its settings changed (a safety net for SETs that
  // statement analysis cannot see, e.g. inside functions).
  std::uint64_t parameter_changes() const { return parameter_changes_; }

  // TEST ONLY (tests/unit/endpoint/session_core_test.cc): records `frame` in
  // this connection's bookkeeping (ReadyForQuery's transaction status,
  // BackendKeyData, ParameterStatus, DISCARD ALL) exactly as ReadFrame()
  // does for a frame read from the stream, so that a test can drive
  // SessionCore with a stream-less connection. Production code never calls it.
  void ObserveFrameForTesting(const protocol::Frame& frame) { OnFrame(frame); }

 private:
  // The reader's verdict on the buffered bytes, a frame taken (consumed and
  // recorded by OnFrame) and a malformed one marking the connection broken:
  // the first step of TakeBufferedFrame and of ReadFrame.
  protocol::FrameReader::Result NextBuffered();
  // Makes room to read after the partial frame (which `bytes_needed`, 0
  // if unknown, completes): the bytes to ask for.
  std::size_t PrepareRead(std::size_t bytes_needed);
  static absl::Status ViolationError(const protocol::FrameReader::Result& r);
  void OnFrame(const protocol::Frame& frame);
  void SetParameter(std::string_view name, std::string_view value);

  std::unique_ptr<Stream> stream_;
  protocol::FrameReader reader_;
  std::string buffer_;       // read space; [0, end_) received, [consumed_, end_) not yet handed out
  std::size_t consumed_ = 0;
  std::size_t end_ = 0;
  std::vector<std::pair<std::string, std::string>> parameters_;
  BackendKey backend_key_;
  std::shared_ptr<const Logger> logger_;
  char transaction_status_ = 'I';
  bool broken_ = false;
  bool watching_idle_ = false;  // an idle-watch wait is pending on the socket
  std::string auth_method_ = "trust";
  std::chrono::steady_clock::time_point last_ready_;
  SettingMap carried_settings_;
  SequenceOwner sequence_owner_;
  std::uint64_t parameter_changes_ = 0;
  ConnectionStatements statements_;
};

// Asks the origin to cancel what backend `key` is running (PostgreSQL docs,
// "Canceling Requests in Progress"): a fresh connection (TLS as the sslmode
// says) that carries only a CancelRequest. Used when a connection is
// discarded mid-query: closing the socket alone does not stop a query that
// is not writing (PostgreSQL notices a vanished client only when it next
// reads or writes). Best effort and bounded by `timeout`; the protocol
// reports no result.
asio::awaitable<void> CancelOriginQuery(asio::any_io_executor executor, const OriginConfig& config, BackendKey key,
                                        std::chrono::milliseconds timeout = std::chrono::seconds(5));

// An origin connection lost: kSqlStateConnectionFailure; none could be made:
// kSqlStateCannotConnect (protocol/sqlstate.h).

}  // namespace hyperpool::endpoint
