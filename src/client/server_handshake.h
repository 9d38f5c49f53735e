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
//   database is reported (3D000) only after a successful authentication,
//   and so is a database the user may not use (42501, PostgreSQL's
//   missing CONNECT privilege);
// - during authentication any message whose tag is not 'p' fails at once
//   with 08P01, before its length is even known;
// - SSLRequest gets 'S' when TLS is offered (the session then runs the TLS
//   handshake), else 'N'; bytes sent together with it get 08P01 "received
//   unencrypted data after SSL request" (CVE-2021-23222); with require_tls a
//   plaintext StartupMessage gets 28000 "... no encryption".
#ifndef HYPERPOOL_CLIENT_SERVER_HANDSHAKE_H_
#define HYPERPOOL_CLIENT_SERVER_HANDSHAKE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hyperpool/options.h"
#include "protocol/auth/scram.h"

namespace hyperpool::client {

// Largest 'p' message accepted while authenticating (SCRAM payloads are
// bounded at 4 KiB by ScramLimits).
inline constexpr uint32_t kAuthMaxMessageLength = 16 * 1024;

struct HandshakeConfig {
  // The Client's own user (the one in its connection string) and the only
  // database it serves.
  std::string user;
  std::string database;
  // The admin console's database (ClientOptions::admin_database) when a
  // console is configured, else empty.
  std::string admin_database;
  // Which replication logins are carried (ClientOptions::replication).
  ClientOptions::Replication replication = ClientOptions::Replication::kLogical;
  // Several databases (ClientOptions::databases): decides instead of
  // `database` which ones exist and who may use them. Null: `database` only.
  std::shared_ptr<const DatabaseDirectory> databases;
  // Of the Client's password, computed once per Client.
  auth::ScramVerifier verifier;
  // Of the same password with kQuickScramIterations, when the password was
  // generated (random and long: key stretching adds nothing) and no count
  // was chosen: offered instead of `verifier` to clients whose SCRAM code
  // accepts a count below 4096 (AcceptsQuickScram), so that their login
  // costs microseconds. Unset: `verifier` for every client.
  std::optional<auth::ScramVerifier> quick_verifier;
  // More app users (ClientOptions::users): name -> verifier. All of them
  // reach the one origin role the Endpoint logs in as. `user` wins a clash.
  std::map<std::string, auth::ScramVerifier, std::less<>> other_users;
  // TLS towards applications: answer SSLRequest with 'S' (the session then
  // runs the TLS handshake and calls OnTlsEstablished()), else 'N'.
  bool offer_tls = false;
  // Refuse a StartupMessage that did not arrive inside TLS (FATAL 28000, as
  // a pg_hba.conf with only hostssl lines). Needs offer_tls.
  bool require_tls = false;
  // Per-Client random secret for the mock verifiers of unknown users
  // (auth::MakeMockScramVerifier): the same salt on every attempt.
  std::string mock_secret;
  // Empty: a fresh random nonce per exchange. Tests and the fuzzer fix it.
  std::string server_nonce;
};

// PBKDF2 count of HandshakeConfig::quick_verifier.
inline constexpr uint32_t kQuickScramIterations = 16;

// Whether a client may be offered fewer than 4096 iterations: PgJDBC (and
// every client on the ongres SCRAM library) refuses them ("iteration must be
// >= 4096"). It always sends extra_float_digits in its startup packet and
// draws its nonce from all printable characters; libpq (psql, psycopg,
// pgbench), node-postgres, postgres.js and asyncpg send neither, their
// nonces being base64. So: no extra_float_digits parameter, and a non-empty
// r= of base64 characters only. `client_first` is the whole client-first
// message (gs2 header included).
bool AcceptsQuickScram(bool startup_has_extra_float_digits, std::string_view client_first);

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
    kTlsAccepted,        // SSLRequest with offer_tls: write output ("S") only if the app has sent
                         // nothing more (else close), run the TLS server handshake, then call
                         // OnTlsEstablished() and Advance() with what arrives inside TLS
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
    // The close is a failed password or an unknown user (28P01): logged as
    // auth_failed, at warn.
    bool auth_failed = false;
  };

  explicit ServerHandshake(HandshakeConfig config);
  // Shares the Client's config (no copy of its users per connection).
  explicit ServerHandshake(std::shared_ptr<const HandshakeConfig> config);

  // Consumes what it can of `input` (bytes received and not yet consumed)
  // and reports the next thing to do. After a terminal event (kAuthenticated,
  // kCancelRequest, kClose) it keeps returning kClose.
  Step Advance(std::string_view input);

  // The TLS handshake after kTlsAccepted succeeded: later bytes are
  // encrypted (require_tls is satisfied).
  void OnTlsEstablished() { encrypted_ = true; }
  // For the 28000 message under require_tls ("host \"127.0.0.1\"").
  void set_peer_host(std::string host) { peer_host_ = std::move(host); }
  // A Unix-domain connection: as PostgreSQL, SSLRequest gets 'N' and
  // plaintext is fine (pg_hba.conf "local" lines know no hostssl).
  void set_unix_socket() { unix_socket_ = true; }
  bool encrypted() const { return encrypted_; }

  State state() const { return state_; }
  // After kAuthenticated: the startup packet's user and database (the
  // database defaults to the user) and its other parameters, in order,
  // without user, database, replication and _pq_.* options.
  const std::string& user() const { return user_; }
  const std::string& database() const { return database_; }
  const std::vector<std::pair<std::string, std::string>>& parameters() const { return parameters_; }
  // After kAuthenticated: the startup packet's `replication` value when it
  // asks for a walsender ("database": logical, "true"/"on"/"yes"/"1":
  // physical), else empty. Such a session is tunnelled to a replication
  // connection of its own (docs/architecture.md, "Replication connections").
  const std::string& replication() const { return replication_; }
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
  // The verifier of `user_`, or null for an unknown user.
  const auth::ScramVerifier* FindVerifier() const;
  // Handles one 'p' message; false when `step` is final.
  bool OnSaslMessage(std::string_view payload, Step& step);
  // Appends a FATAL ErrorResponse and fails.
  void Fail(Step& step, std::string_view sqlstate, std::string_view message);
  // A SCRAM failure: 28P01 for a bad proof, 08P01 for anything malformed.
  void FailScram(Step& step, const absl::Status& status);

  bool offer_tls() const { return config_->offer_tls && !unix_socket_; }
  bool require_tls() const { return config_->require_tls && !unix_socket_; }

  std::shared_ptr<const HandshakeConfig> config_;
  bool unix_socket_ = false;
  State state_ = State::kStartup;
  bool ssl_answered_ = false;
  bool gss_answered_ = false;
  bool encrypted_ = false;
  std::string peer_host_;
  bool known_user_ = false;
  bool known_database_ = false;
  bool admin_database_ = false;
  bool extra_float_digits_ = false;  // the startup packet set it (AcceptsQuickScram)
  // Set by BeginAuthentication, used at client-first: the exchange starts
  // then, once the client's nonce tells which iteration count it accepts.
  std::optional<auth::ScramServer::Options> scram_options_;
  // The verifier offered is the Client's own (main user or admin console),
  // or a mock that must look like it: quick_verifier may replace it.
  bool quick_eligible_ = false;
  std::optional<auth::ScramServer> scram_;

  std::string user_;
  std::string database_;
  std::string replication_;  // (replication())
  std::vector<std::pair<std::string, std::string>> parameters_;
  int32_t cancel_pid_ = 0;
  std::string cancel_secret_;
};

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_SERVER_HANDSHAKE_H_
