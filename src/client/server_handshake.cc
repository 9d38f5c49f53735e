#include "client/server_handshake.h"

#include <algorithm>
#include <utility>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "protocol/codec.h"
#include "protocol/sqlstate.h"

namespace hyperpool::client {
namespace {

namespace pr = protocol;

bool ReplicationRequested(std::string_view value) {
  return !value.empty() && value != "false" && value != "off" && value != "no" && value != "0";
}

}  // namespace

ServerHandshake::ServerHandshake(HandshakeConfig config)
    : config_(std::make_shared<const HandshakeConfig>(std::move(config))) {}

ServerHandshake::ServerHandshake(std::shared_ptr<const HandshakeConfig> config) : config_(std::move(config)) {}

void ServerHandshake::SetState(State next) {
  // Forward only; the terminal states are final.
  if (state_ == State::kAuthenticated || state_ == State::kCancel || state_ == State::kFailed) return;
  if (next == State::kStartup && state_ != State::kStartup) return;
  state_ = next;
}

void ServerHandshake::Fail(Step& step, std::string_view sqlstate, std::string_view message) {
  pr::EncodeErrorResponse(step.output, "FATAL", sqlstate, message);
  step.event = Event::kClose;
  SetState(State::kFailed);
}

void ServerHandshake::FailScram(Step& step, const absl::Status& status) {
  if (absl::IsUnauthenticated(status) || absl::IsPermissionDenied(status)) {
    // The same bytes whether the user exists or not (no user enumeration).
    std::string message = absl::StrCat("password authentication failed for user \"", user_, "\"");
    step.log = message;
    step.auth_failed = true;
    Fail(step, kSqlStateInvalidPassword, message);
  } else {
    Fail(step, kSqlStateProtocolViolation, std::string(status.message()));
  }
}

ServerHandshake::Step ServerHandshake::Advance(std::string_view input) {
  Step step;
  for (;;) {
    std::string_view rest = input.substr(step.consumed);
    switch (state_) {
      case State::kStartup: {
        pr::FrameReader reader(pr::FrameReader::Mode::kStartup);
        pr::FrameReader::Result r = reader.Read(rest);
        if (r.is_need_more()) {
          step.event = Event::kNeedMore;
          step.bytes_needed = r.bytes_needed();
          return step;
        }
        if (r.is_error()) {
          // PostgreSQL logs "invalid length of startup packet" (COMMERROR)
          // and closes without a word; drivers that send Terminate before
          // their startup packet (node-postgres) expect exactly that.
          step.log = std::string(r.status().message());
          step.event = Event::kClose;
          SetState(State::kFailed);
          return step;
        }
        const pr::Frame frame = r.frame();
        step.consumed += frame.size();
        if (!OnStartupPacket(frame.payload, input.substr(step.consumed), step)) return step;
        if (step.event == Event::kEncryptionRefused || step.event == Event::kTlsAccepted) return step;
        continue;  // the StartupMessage was accepted: AuthenticationSASL is in output
      }
      case State::kAwaitingSaslInitial:
      case State::kAwaitingSaslFinal: {
        // Check the tag before the length: a second StartupMessage (tag
        // 0x00) must not be read as a message with a bogus length.
        if (!rest.empty() && rest[0] != 'p') {
          Fail(step, kSqlStateProtocolViolation,
               absl::StrCat("expected SASL response, got message type ", int(static_cast<unsigned char>(rest[0]))));
          return step;
        }
        pr::FrameReader reader(pr::FrameReader::Mode::kTagged,
                               pr::FrameLimits{.max_message_length = kAuthMaxMessageLength});
        pr::FrameReader::Result r = reader.Read(rest);
        if (r.is_need_more()) {
          step.event = Event::kNeedMore;
          step.bytes_needed = r.bytes_needed();
          return step;
        }
        if (r.is_error()) {
          Fail(step, kSqlStateProtocolViolation, std::string(r.status().message()));
          return step;
        }
        step.consumed += r.frame().size();
        if (!OnSaslMessage(r.frame().payload, step)) return step;
        if (state_ == State::kAuthenticated) {
          step.event = Event::kAuthenticated;
          return step;
        }
        continue;
      }
      case State::kAuthenticated:
      case State::kCancel:
      case State::kFailed:
        step.event = Event::kClose;
        return step;
    }
  }
}

bool ServerHandshake::OnStartupPacket(std::string_view payload, std::string_view rest, Step& step) {
  const int32_t code = pr::PeekStartupCode(payload).value_or(0);
  if (code != pr::kSslRequestCode && code != pr::kGssEncRequestCode && code != pr::kCancelRequestCode &&
      pr::ProtocolMajor(code) != 3) {
    Fail(step, kSqlStateFeatureNotSupported,
         absl::StrCat("unsupported frontend protocol ", pr::ProtocolMajor(code), ".", pr::ProtocolMinor(code),
                      ": server supports 3.0 to 3.0"));
    return false;
  }
  absl::StatusOr<pr::StartupPacket> packet = pr::DecodeStartupPacket(payload);
  if (!packet.ok()) {
    Fail(step, kSqlStateProtocolViolation, std::string(packet.status().message()));
    return false;
  }
  if (std::holds_alternative<pr::SslRequest>(*packet) || std::holds_alternative<pr::GssEncRequest>(*packet)) {
    const bool ssl = std::holds_alternative<pr::SslRequest>(*packet);
    bool& answered = ssl ? ssl_answered_ : gss_answered_;
    if (answered) {
      Fail(step, kSqlStateProtocolViolation, ssl ? "duplicate SSLRequest" : "duplicate GSSENCRequest");
      return false;
    }
    answered = true;
    if (ssl && offer_tls() && !encrypted_) {
      if (!rest.empty()) {
        // What PostgreSQL 14.1+ says (CVE-2021-23222): these bytes were not
        // protected by the TLS the client asked for, and may be injected.
        step.log = "received unencrypted data after SSL request";
        pr::AppendError(step.output, "FATAL", pr::ProtocolViolation("received unencrypted data after SSL request"));
        step.event = Event::kClose;
        SetState(State::kFailed);
        return false;
      }
      step.output.append("S");
      step.event = Event::kTlsAccepted;
      return true;
    }
    if (!rest.empty()) {
      // Bytes sent before our answer cannot be meant for the (refused)
      // encrypted channel: the CVE-2021-23222 class of injection.
      step.log = absl::StrCat("data received after ", ssl ? "SSLRequest" : "GSSENCRequest", " before the answer");
      step.event = Event::kClose;
      SetState(State::kFailed);
      return false;
    }
    step.output.append("N");
    step.event = Event::kEncryptionRefused;
    return true;
  }
  if (const auto* cancel = std::get_if<pr::CancelRequest>(&*packet)) {
    cancel_pid_ = cancel->process_id;
    cancel_secret_ = std::string(cancel->secret_key);
    step.event = Event::kCancelRequest;
    SetState(State::kCancel);
    return false;
  }
  const auto& startup = std::get<pr::StartupMessage>(*packet);
  bool has_database = false;
  std::string replication;
  std::vector<std::string_view> unrecognized;
  for (const auto& [name, value] : startup.parameters) {
    if (name == "user") {
      user_ = std::string(value);
    } else if (name == "database") {
      database_ = std::string(value);
      has_database = true;
    } else if (name == "replication") {
      replication = std::string(value);
    } else if (name.substr(0, 5) == "_pq_.") {
      unrecognized.push_back(name);
    } else {
      if (name == "extra_float_digits") extra_float_digits_ = true;
      parameters_.emplace_back(std::string(name), std::string(value));
    }
  }
  if (pr::ProtocolMinor(startup.protocol_version) > 0 || !unrecognized.empty()) {
    // We speak 3.0 and no protocol extensions (PostgreSQL docs, "Protocol
    // versions"; NegotiateProtocolVersion).
    pr::NegotiateProtocolVersion npv;
    npv.newest_minor_version = 0;
    npv.unrecognized_options = std::move(unrecognized);
    pr::Encode(npv, step.output);
  }
  if (user_.empty()) {
    Fail(step, kSqlStateInvalidAuthorization, "no PostgreSQL user name specified in startup packet");
    return false;
  }
  if (!has_database || database_.empty()) database_ = user_;
  if (require_tls() && !encrypted_) {
    // PostgreSQL with only hostssl lines in pg_hba.conf; checked before
    // authentication, so it says nothing about whether the user exists.
    Fail(step, kSqlStateInvalidAuthorization,
         absl::StrCat("no pg_hba.conf entry for host \"", peer_host_, "\", user \"", user_, "\", database \"",
                      database_, "\", no encryption"));
    step.log = "plaintext startup refused (TLS required)";
    return false;
  }
  if (ReplicationRequested(replication)) {
    const bool physical = replication != "database";
    using Replication = ClientOptions::Replication;
    if (config_->replication == Replication::kOff || (physical && config_->replication != Replication::kAll)) {
      // As PostgreSQL without a matching replication line in pg_hba.conf:
      // before authentication, 28000.
      Fail(step, kSqlStateInvalidAuthorization,
           absl::StrCat("no pg_hba.conf entry for replication connection from host \"", peer_host_, "\", user \"",
                        user_, "\", ", encrypted_ ? "SSL encryption" : "no encryption"));
      step.log = physical ? "physical replication login refused (--replication is not all)"
                          : "replication login refused (--replication off)";
      return false;
    }
    // A physical walsender serves the whole cluster and ignores the
    // database (pg_receivewal and pg_basebackup send "replication"): it
    // goes to the database this Client serves. A logical one
    // (replication=database) names its database as any login does.
    if (physical) database_ = config_->database;
    replication_ = std::move(replication);
  }
  BeginAuthentication(step);
  return state_ != State::kFailed;
}

void ServerHandshake::BeginAuthentication(Step& step) {
  // Who is known is not revealed before authentication: an unknown user
  // runs the same exchange against a mock verifier that always fails (the
  // client does the same PBKDF2 work, so the timing matches too); an
  // unknown database is reported only after a successful authentication.
  // The admin console's database takes a listed user with its own
  // verifier and any other name with the Client's password; the session
  // then refuses non-admins with 42501, as PostgreSQL checks CONNECT
  // privilege only after authentication.
  const bool admin = !config_->admin_database.empty() && database_ == config_->admin_database;
  const auth::ScramVerifier* verifier = FindVerifier();
  if (verifier == nullptr && admin) verifier = &config_->verifier;
  known_user_ = verifier != nullptr;
  known_database_ = database_ == config_->database || admin;
  admin_database_ = admin;
  auth::ScramServer::Options options;
  if (known_user_) {
    options.verifier = *verifier;
    quick_eligible_ = verifier == &config_->verifier;
  } else {
    options.verifier = auth::MakeMockScramVerifier(user_, config_->mock_secret);
    // The Client's own count, so that server-first does not tell an
    // unknown user from the Client's user (PostgreSQL's mock uses its
    // scram_iterations the same way). With more users (their own counts)
    // the quick count would tell an unknown name from theirs instead.
    options.verifier.iterations = config_->verifier.iterations;
    quick_eligible_ = config_->other_users.empty();
  }
  options.always_fail = !known_user_;
  options.server_nonce = config_->server_nonce;
  scram_options_ = std::move(options);
  pr::AuthenticationSasl sasl;
  sasl.mechanisms = {auth::kScramSha256};
  pr::Encode(pr::Authentication{sasl}, step.output);
  SetState(State::kAwaitingSaslInitial);
}

bool AcceptsQuickScram(bool startup_has_extra_float_digits, std::string_view client_first) {
  if (startup_has_extra_float_digits) return false;
  // client-first = gs2-header "," "n=" user "," "r=" nonce ["," extensions];
  // the gs2 header is cbind-flag "," [authzid] ",".
  std::string_view rest = client_first;
  for (int commas = 0; commas < 2; ++commas) {
    const std::size_t comma = rest.find(',');
    if (comma == std::string_view::npos) return false;
    rest.remove_prefix(comma + 1);
  }
  const std::size_t at = rest.find(",r=");
  if (at == std::string_view::npos) return false;
  std::string_view nonce = rest.substr(at + 3);
  nonce = nonce.substr(0, nonce.find(','));
  if (nonce.empty()) return false;
  return std::all_of(nonce.begin(), nonce.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '=';
  });
}

const auth::ScramVerifier* ServerHandshake::FindVerifier() const {
  if (user_ == config_->user) return &config_->verifier;
  auto it = config_->other_users.find(user_);
  return it == config_->other_users.end() ? nullptr : &it->second;
}

bool ServerHandshake::OnSaslMessage(std::string_view payload, Step& step) {
  if (state_ == State::kAwaitingSaslInitial) {
    absl::StatusOr<pr::SaslInitialResponse> initial = pr::DecodeSaslInitialResponse(payload);
    if (!initial.ok()) {
      Fail(step, kSqlStateProtocolViolation, std::string(initial.status().message()));
      return false;
    }
    if (initial->mechanism != auth::kScramSha256) {
      Fail(step, kSqlStateProtocolViolation, "client selected an invalid SASL authentication mechanism");
      return false;
    }
    if (!initial->data) {
      Fail(step, kSqlStateProtocolViolation, "SASLInitialResponse carries no client-first message");
      return false;
    }
    if (quick_eligible_ && config_->quick_verifier && AcceptsQuickScram(extra_float_digits_, *initial->data)) {
      if (known_user_) {
        scram_options_->verifier = *config_->quick_verifier;
      } else {
        scram_options_->verifier.iterations = config_->quick_verifier->iterations;
      }
    }
    absl::StatusOr<auth::ScramServer> scram = auth::ScramServer::Create(*std::move(scram_options_));
    scram_options_.reset();
    if (!scram.ok()) {
      Fail(step, kSqlStateConnectionFailure, "could not start SCRAM authentication");
      return false;
    }
    scram_.emplace(*std::move(scram));
    absl::StatusOr<std::string> server_first = scram_->HandleClientFirst(initial->mechanism, *initial->data);
    if (!server_first.ok()) {
      FailScram(step, server_first.status());
      return false;
    }
    pr::Encode(pr::Authentication{pr::AuthenticationSaslContinue{*server_first}}, step.output);
    SetState(State::kAwaitingSaslFinal);
    return true;
  }
  absl::StatusOr<pr::SaslResponse> response = pr::DecodeSaslResponse(payload);
  if (!response.ok()) {
    Fail(step, kSqlStateProtocolViolation, std::string(response.status().message()));
    return false;
  }
  absl::StatusOr<std::string> server_final = scram_->HandleClientFinal(response->data);
  if (!server_final.ok()) {
    FailScram(step, server_final.status());
    return false;
  }
  pr::Encode(pr::Authentication{pr::AuthenticationSaslFinal{*server_final}}, step.output);
  pr::Encode(pr::Authentication{pr::AuthenticationOk{}}, step.output);
  // What PostgreSQL does: the database is looked up, and CONNECT
  // privilege checked, after authentication.
  DatabaseDirectory::Access access =
      known_database_ ? DatabaseDirectory::Access::kAllowed : DatabaseDirectory::Access::kUnknown;
  if (config_->databases && !admin_database_) access = config_->databases->Check(user_, database_);
  if (access == DatabaseDirectory::Access::kUnknown) {
    Fail(step, kSqlStateInvalidCatalog, absl::StrCat("database \"", database_, "\" does not exist"));
    return false;
  }
  if (access == DatabaseDirectory::Access::kDenied) {
    Fail(step, kSqlStateInsufficientPrivilege, absl::StrCat("permission denied for database \"", database_, "\""));
    step.log = absl::StrCat("user \"", user_, "\" may not use database \"", database_, "\"");
    return false;
  }
  SetState(State::kAuthenticated);
  return true;
}

}  // namespace hyperpool::client
