// ServerHandshake: the Client half's side of the PostgreSQL start-up
// (PostgreSQL docs, "Message Flow" > "Start-up" and "SASL Authentication"),
// without I/O: bytes in, bytes to write and one decision out. The session
// (client.cc) owns the socket, the login timeout and what happens after
// authentication (the origin's parameters, BackendKeyData, ReadyForQuery).
//
//   ServerHandshake hs(config);
//   for (;;) {
//     ServerHandshake::Step s = hs.Advance(buffered);
//     buffered.remove_prefix(s.consumed);
//     switch (s.event) { ... }   // write s.output first (see Event)
//   }
//
// It depends only on src/protocol (codec + auth), so the fuzz tree links it.
//
// Behaviour chosen to match PostgreSQL 15 (checked against a real server):
// - an invalid startup packet length (e.g. node-postgres's Terminate before
//   its startup packet) closes the connection without an answer, as
//   PostgreSQL's COMMERROR "invalid length of startup packet" does;
// - an unknown user runs a full, always-failing SCRAM exchange with a mock
//   verifier and gets the same 28P01 as a wrong password; an unknown
//   database is reported (3D000) only after a successful authentication;
// - during authentication any message whose tag is not 'p' fails at once
//   with 08P01, before its length is even known.
#ifndef HYPERPOOL_CLIENT_SERVER_HANDSHAKE_H_
#define HYPERPOOL_CLIENT_SERVER_HANDSHAKE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/auth/scram.h"

namespace hyperpool::client {

// Largest 'p' message accepted while authenticating (SCRAM payloads are
// bounded at 4 KiB by ScramLimits).
inline constexpr uint32_t kAuthMaxMessageLength = 16 * 1024;

struct HandshakeConfig {
  // The only user and database the Client serves.
  std::string user;
  std::string database;
  // The admin console's database (ClientOptions::admin_database) when a
  // console is configured, else empty.
  std::string admin_database;
  // Of the Client's password, computed once per Client.
  auth::ScramVerifier verifier;
  // Per-Client random secret for the mock verifiers of unknown users
  // (auth::MakeMockScramVerifier): the same salt on every attempt.
  std::string mock_secret;
  // Empty: a fresh random nonce per exchange. Tests and the fuzzer fix it.
  std::string server_nonce;
};

class ServerHandshake {
 public:
  // Change only through SetState().
  enum class State {
    kStartup,              // waiting for a startup-mode packet (again after an 'N' refusal)
    kAwaitingSaslInitial,  // AuthenticationSASL sent; waiting for SASLInitialResponse
    kAwaitingSaslFinal,    // server-first sent; waiting for SASLResponse
    kAuthenticated,        // done: the session takes over
    kCancel,               // a CancelRequest arrived: done
    kFailed,               // done: close
  };

  // What the caller must do after Advance(). It always writes `output`
  // first, except where kEncryptionRefused says otherwise.
  enum class Event {
    kNeedMore,           // read until `bytes_needed` unconsumed bytes are buffered, call again
    kEncryptionRefused,  // output is "N": write it only if the app has sent nothing more
                         // (CVE-2021-23222 class), else close unanswered; then call again
    kAuthenticated,      // output ends with AuthenticationOk; see user()/database()/parameters()
    kCancelRequest,      // see cancel_process_id()/cancel_secret(); close without answering
    kClose,              // output is a FATAL ErrorResponse or empty (close silently)
  };

  struct Step {
    Event event = Event::kNeedMore;
    // Bytes at the start of the input handled; the caller drops them.
    size_t consumed = 0;
    // kNeedMore: unconsumed bytes needed in total before progress is possible
    // (always more than the caller has).
    size_t bytes_needed = 0;
    std::string output;
    // For the log: why the connection is closed (empty when nothing notable).
    std::string log;
  };

  explicit ServerHandshake(HandshakeConfig config);

  // Consumes what it can of `input` (bytes received and not yet consumed)
  // and reports the next thing to do. After a terminal event (kAuthenticated,
  // kCancelRequest, kClose) it keeps returning kClose.
  Step Advance(std::string_view input);

  State state() const { return state_; }
  // After kAuthenticated: the startup packet's user and database (the
  // database defaults to the user) and its other parameters, in order,
  // without user, database, replication and _pq_.* options.
  const std::string& user() const { return user_; }
  const std::string& database() const { return database_; }
  const std::vector<std::pair<std::string, std::string>>& parameters() const { return parameters_; }
  // After kCancelRequest.
  int32_t cancel_process_id() const { return cancel_pid_; }
  const std::string& cancel_secret() const { return cancel_secret_; }

 private:
  void SetState(State next);
  // Handles one startup-mode packet; false when `step` is final.
  bool OnStartupPacket(std::string_view frame, std::string_view rest, Step& step);
  // After StartupMessage: the checks PostgreSQL makes before authenticating,
  // then AuthenticationSASL.
  void BeginAuthentication(Step& step);
  // Handles one 'p' message; false when `step` is final.
  bool OnSaslMessage(std::string_view payload, Step& step);
  // Appends a FATAL ErrorResponse and fails.
  void Fail(Step& step, std::string_view sqlstate, std::string_view message);
  // A SCRAM failure: 28P01 for a bad proof, 08P01 for anything malformed.
  void FailScram(Step& step, const absl::Status& status);

  HandshakeConfig config_;
  State state_ = State::kStartup;
  bool ssl_refused_ = false;
  bool gss_refused_ = false;
  bool known_user_ = false;
  bool known_database_ = false;
  std::optional<auth::ScramServer> scram_;

  std::string user_;
  std::string database_;
  std::vector<std::pair<std::string, std::string>> parameters_;
  int32_t cancel_pid_ = 0;
  std::string cancel_secret_;
};

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_SERVER_HANDSHAKE_H_
