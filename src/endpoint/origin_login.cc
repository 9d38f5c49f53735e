// The origin connector: resolve, TCP or Unix socket, TLS as sslmode says,
// the login (password, MD5, SCRAM with channel binding), retries; and
// CancelOriginQuery. One of the few Asio-heavy translation units of
// src/endpoint: keep the Asio templates here and in origin_connection.cc.
#include "endpoint/origin_connection.h"

#include "endpoint/origin_stream.h"

namespace hyperpool::endpoint {

using namespace origin_detail;  // NOLINT(build/namespaces): this file's helpers

// ---------------------------------------------------------------------------
// The connector.
// ---------------------------------------------------------------------------
namespace {

// Bounds a whole connection attempt: when it fires it closes whatever socket
// (or resolver) the attempt is waiting on, so every pending operation fails
// and the attempt unwinds. A callback, not a coroutine: nothing to join.
struct Watchdog {
  explicit Watchdog(asio::any_io_executor ex) : timer(std::move(ex)) {}
  asio::steady_timer timer;
  asio::ip::tcp::resolver* resolver = nullptr;
  asio::ip::tcp::socket* tcp = nullptr;
  asio::local::stream_protocol::socket* local = nullptr;
  OriginConnection* conn = nullptr;
  bool fired = false;
  bool done = false;

  void Fire() {
    fired = true;
    std::error_code ignored;
    if (resolver) resolver->cancel();
    if (tcp) tcp->close(ignored);
    if (local) local->close(ignored);
    if (conn) conn->CloseNow();
  }
};

// What one attempt does about TLS.
enum class TlsPlan {
  kPlain,     // no SSLRequest
  kOptional,  // SSLRequest; plaintext if refused (prefer)
  kRequired,  // SSLRequest; fail if refused
};

struct Attempt {
  TlsPlan plan;
  const tls::ClientContext* context;  // for kOptional / kRequired
};

bool IsHostNotFound(const std::error_code& ec) {
  return ec == asio::error::host_not_found || ec == asio::error::host_not_found_try_again ||
         ec == asio::error::no_data || ec == asio::error::no_recovery ||
         ec == asio::error::service_not_found;
}

// Classifies an ErrorResponse the origin sent while we logged in.
OriginFailure LoginError(std::string_view payload, bool on_tls) {
  auto error = protocol::DecodeErrorResponse(payload);
  if (!error.ok()) {
    return Failure(ValidationFailure::kOther, kSqlStateProtocolViolation, "the origin sent a malformed ErrorResponse during login");
  }
  const std::string sqlstate(error->sqlstate());
  const std::string message = OneLine(error->message());
  const std::string text = fmt::format("the origin refused the login: {} (SQLSTATE {})", message,
                                       sqlstate.empty() ? "none" : sqlstate);
  if (sqlstate == kSqlStateInvalidAuthorization && !on_tls && message.find("no encryption") != std::string::npos) {
    return Failure(ValidationFailure::kTlsUnavailable, sqlstate,
                   fmt::format("the origin requires TLS for this user and database: {} (use sslmode=require "
                               "or stronger)",
                               message));
  }
  if (sqlstate == kSqlStateInvalidPassword || sqlstate == kSqlStateInvalidAuthorization) {
    return Failure(ValidationFailure::kBadCredentials, sqlstate, text);
  }
  if (sqlstate == kSqlStateInvalidCatalog) return Failure(ValidationFailure::kNoSuchDatabase, sqlstate, text);
  return Failure(ValidationFailure::kOther, sqlstate.empty() ? kSqlStateCannotConnect : sqlstate, text);
}

// The login exchange on an established stream, up to ReadyForQuery.
// Returns nullopt on success.
asio::awaitable<std::optional<OriginFailure>> Login(OriginConnection& conn, const OriginConfig& config,
                                                    const ConnectOptions& options, bool on_tls,
                                                    std::string cert_hash) {
  std::string out;
  {
    protocol::StartupMessage startup;
    const std::string& database = config.dbname.empty() ? config.user : config.dbname;
    const std::string& app =
        config.application_name.empty() ? options.default_application_name : config.application_name;
    startup.parameters.emplace_back("user", config.user);
    startup.parameters.emplace_back("database", database);
    if (!app.empty()) startup.parameters.emplace_back("application_name", app);
    for (const auto& [name, value] : config.settings) startup.parameters.emplace_back(name, value);
    protocol::Encode(startup, out);
  }
  if (absl::Status s = co_await conn.Write(out); !s.ok()) {
    co_return Failure(ValidationFailure::kOther, kSqlStateCannotConnect, std::string(s.message()));
  }

  std::optional<auth::ScramClient> scram;
  bool authenticated = false;
  for (;;) {
    auto frame = co_await conn.ReadFrame();
    if (!frame.ok()) {
      co_return Failure(ValidationFailure::kOther, kSqlStateCannotConnect,
                        fmt::format("the origin connection failed during login: {}",
                                    std::string(frame.status().message())));
    }
    const char tag = frame->tag;
    if (tag == 'E') co_return LoginError(frame->payload, on_tls);
    if (tag == 'N' || tag == 'S' || tag == 'K' || tag == 'v') continue;  // S, K recorded by ReadFrame
    if (tag == 'Z') {
      if (!authenticated) {
        co_return Failure(ValidationFailure::kOther, kSqlStateProtocolViolation,
                          "protocol violation by the origin: ReadyForQuery before AuthenticationOk");
      }
      co_return std::nullopt;
    }
    if (tag != 'R' || authenticated) {
      co_return Failure(ValidationFailure::kOther, kSqlStateProtocolViolation,
                        fmt::format("protocol violation by the origin: unexpected message '{}' during login",
                                    std::string(1, tag)));
    }
    auto auth_message = protocol::DecodeAuthentication(frame->payload);
    if (!auth_message.ok()) {
      co_return Failure(ValidationFailure::kOther, kSqlStateProtocolViolation,
                        fmt::format("protocol violation by the origin: {}",
                                    std::string(auth_message.status().message())));
    }
    out.clear();
    std::optional<OriginFailure> failure;
    auto need_password = [&]() -> bool {
      if (!config.password.empty()) return true;
      failure = Failure(ValidationFailure::kBadCredentials, kSqlStateInvalidPassword,
                        "the origin asks for a password but the origin string has none");
      return false;
    };
    auto protocol_violation = [&](std::string_view what) {
      failure = Failure(ValidationFailure::kOther, kSqlStateProtocolViolation, fmt::format("protocol violation by the origin: {}", what));
    };
    std::visit(
        [&](const auto& m) {
          using T = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<T, protocol::AuthenticationOk>) {
            // A server that skips the SCRAM proof could be anyone: insist on
            // the exchange we started being complete (libpq does the same).
            if (scram && scram->state() != auth::ScramClient::State::kDone) {
              protocol_violation("AuthenticationOk before the SCRAM exchange completed");
            } else {
              authenticated = true;
            }
          } else if constexpr (std::is_same_v<T, protocol::AuthenticationCleartextPassword>) {
            // libpq sends a cleartext password on request even without TLS;
            // so do we (the origin string chose the server).
            if (scram) return protocol_violation("cleartext password request during SCRAM");
            if (!need_password()) return;
            protocol::Encode(protocol::PasswordMessage{config.password}, out);
            conn.set_auth_method("password");
          } else if constexpr (std::is_same_v<T, protocol::AuthenticationMd5Password>) {
            if (scram) return protocol_violation("MD5 password request during SCRAM");
            if (!need_password()) return;
            auto response = auth::Md5PasswordResponse(config.user, config.password, m.salt);
            if (!response.ok()) return protocol_violation(std::string(response.status().message()));
            protocol::Encode(protocol::PasswordMessage{*response}, out);
            conn.set_auth_method("md5");
          } else if constexpr (std::is_same_v<T, protocol::AuthenticationSasl>) {
            if (scram) return protocol_violation("a second AuthenticationSASL");
            if (!need_password()) return;
            auto choice = auth::ChooseScramMechanism(absl::MakeConstSpan(m.mechanisms), !cert_hash.empty());
            if (!choice.ok()) {
              failure = Failure(ValidationFailure::kOther, kSqlStateInvalidAuthorization,
                                fmt::format("the origin offers no supported SASL mechanism: {}",
                                            std::string(choice.status().message())));
              return;
            }
            auth::ScramClient::Options scram_options;
            scram_options.password = config.password;
            scram_options.binding = choice->binding;
            if (choice->binding == auth::ChannelBinding::kTlsServerEndPoint) scram_options.cert_hash = cert_hash;
            auto client = auth::ScramClient::Create(std::move(scram_options));
            if (!client.ok()) {
              failure = Failure(ValidationFailure::kOther, kSqlStateInvalidAuthorization,
                                fmt::format("SCRAM: {}", std::string(client.status().message())));
              return;
            }
            scram.emplace(std::move(*client));
            conn.set_auth_method(std::string(scram->mechanism()));
            protocol::Encode(protocol::SaslInitialResponse{scram->mechanism(), scram->ClientFirstMessage()}, out);
          } else if constexpr (std::is_same_v<T, protocol::AuthenticationSaslContinue>) {
            if (!scram) return protocol_violation("AuthenticationSASLContinue without SASL");
            auto client_final = scram->HandleServerFirst(m.data);
            if (!client_final.ok()) {
              return protocol_violation(fmt::format("SCRAM: {}", std::string(client_final.status().message())));
            }
            protocol::Encode(protocol::SaslResponse{*client_final}, out);
          } else if constexpr (std::is_same_v<T, protocol::AuthenticationSaslFinal>) {
            if (!scram) return protocol_violation("AuthenticationSASLFinal without SASL");
            absl::Status st = scram->HandleServerFinal(m.data);
            if (!st.ok()) {
              failure = Failure(ValidationFailure::kOther, kSqlStateInvalidAuthorization,
                                fmt::format("the origin failed to prove it knows the password (SCRAM): {}",
                                            std::string(st.message())));
            }
          } else {
            // Kerberos, GSS, SSPI: not supported (nor are they in Hyperdrive).
            failure = Failure(ValidationFailure::kOther, kSqlStateInvalidAuthorization,
                              "the origin asks for GSSAPI/SSPI/Kerberos authentication, which hyperpool does not "
                              "support; use scram-sha-256, md5 or password in pg_hba.conf");
          }
        },
        *auth_message);
    if (failure) co_return failure;
    if (!out.empty()) {
      if (absl::Status s = co_await conn.Write(out); !s.ok()) {
        co_return Failure(ValidationFailure::kOther, kSqlStateCannotConnect, std::string(s.message()));
      }
    }
  }
}

struct TlsContexts {
  std::optional<tls::ClientContext> primary;  // the sslmode's context (prefer and stricter)
  std::optional<tls::ClientContext> retry;    // allow: TLS after a refused plaintext attempt
};

absl::StatusOr<TlsContexts> MakeTlsContexts(const OriginConfig& config) {
  TlsContexts out;
  tls::ClientOptions options;
  options.mode = config.sslmode;
  options.root_cert_file = config.sslrootcert;
  options.cert_file = config.sslcert;
  options.key_file = config.sslkey;
  options.sni = config.sslsni;
  if (config.sslmode == SslMode::kDisable) return out;
  if (config.sslmode == SslMode::kAllow) {
    options.mode = tls::SslMode::kRequire;
    auto ctx = tls::ClientContext::Create(options);
    if (!ctx.ok()) return ctx.status();
    out.retry.emplace(std::move(*ctx));
    return out;
  }
  auto ctx = tls::ClientContext::Create(options);
  if (!ctx.ok()) return ctx.status();
  out.primary.emplace(std::move(*ctx));
  return out;
}

// Connects the socket and, per `attempt`, negotiates TLS. Sets
// `watchdog` pointers so a timeout can close whatever is pending.
asio::awaitable<ConnectResult> ConnectOnce(asio::any_io_executor executor, const OriginConfig& config,
                                           const ConnectOptions& options, const Attempt& attempt,
                                           std::shared_ptr<Watchdog> watchdog, std::string& phase,
                                           bool& handshake_failed) {
  ConnectResult result;
  std::unique_ptr<OriginConnection::Stream> stream;
  std::string cert_hash;
  bool on_tls = false;
  const std::string where = config.is_unix_socket()
                                ? fmt::format("{}/.s.PGSQL.{}", config.host, config.port)
                                : fmt::format("{}:{}", config.host, config.port);

  if (config.is_unix_socket()) {
    phase = "connecting";
    asio::local::stream_protocol::socket socket(executor);
    watchdog->local = &socket;
    auto [ec] = co_await socket.async_connect(asio::local::stream_protocol::endpoint(where), kAsTuple);
    watchdog->local = nullptr;
    if (ec) {
      result.failure = Failure(ec == asio::error::connection_refused || ec == asio::error::not_found ||
                                       ec == std::errc::no_such_file_or_directory
                                   ? ValidationFailure::kConnectionRefused
                                   : ValidationFailure::kOther,
                               kSqlStateCannotConnect,
                               fmt::format("could not connect to the origin at {}: {}", where, ec.message()));
      co_return result;
    }
    stream = std::make_unique<OriginConnection::Stream>(std::move(socket));
  } else {
    phase = "resolving the host name";
    asio::ip::tcp::resolver resolver(executor);
    watchdog->resolver = &resolver;
    auto [rec, endpoints] = co_await resolver.async_resolve(config.host, std::to_string(config.port), kAsTuple);
    watchdog->resolver = nullptr;
    if (rec) {
      result.failure = Failure(IsHostNotFound(rec) ? ValidationFailure::kUnknownHost : ValidationFailure::kOther,
                               kSqlStateCannotConnect,
                               fmt::format("could not resolve the origin host '{}': {}", config.host, rec.message()));
      co_return result;
    }
    phase = "connecting";
    asio::ip::tcp::socket socket(executor);
    watchdog->tcp = &socket;
    auto [cec, connected] = co_await asio::async_connect(socket, endpoints, kAsTuple);
    if (cec) {
      watchdog->tcp = nullptr;
      ValidationFailure kind = ValidationFailure::kOther;
      if (cec == asio::error::connection_refused) kind = ValidationFailure::kConnectionRefused;
      if (cec == asio::error::timed_out) kind = ValidationFailure::kTimeout;
      if (cec == asio::error::network_unreachable || cec == asio::error::host_unreachable) {
        kind = ValidationFailure::kConnectionRefused;
      }
      result.failure = Failure(kind, kSqlStateCannotConnect,
                               fmt::format("could not connect to the origin at {}: {}", where, cec.message()));
      co_return result;
    }
    std::error_code ignored;
    socket.set_option(asio::ip::tcp::no_delay(true), ignored);
    socket.set_option(asio::socket_base::keep_alive(true), ignored);

    bool use_tls = false;
    if (attempt.plan != TlsPlan::kPlain) {
      phase = "negotiating TLS";
      auto offer = co_await tls::RequestTls(socket);
      if (!offer.ok()) {
        watchdog->tcp = nullptr;
        const bool injected = offer.status().code() == absl::StatusCode::kPermissionDenied;
        result.failure = Failure(ValidationFailure::kOther, injected ? kSqlStateProtocolViolation : kSqlStateCannotConnect,
                                 fmt::format("TLS negotiation with the origin at {} failed: {}", where,
                                             std::string(offer.status().message())));
        co_return result;
      }
      if (*offer == tls::TlsOffer::kAccepted) {
        use_tls = true;
      } else if (attempt.plan == TlsPlan::kRequired) {
        watchdog->tcp = nullptr;
        result.failure = Failure(
            ValidationFailure::kTlsUnavailable, kSqlStateCannotConnect,
            fmt::format("the origin at {} does not support TLS, but sslmode={} requires it", where,
                        SslModeName(config.sslmode)));
        co_return result;
      }
    }
    if (use_tls) {
      auto tls_stream = tls::TlsStream::Client(std::move(socket), *attempt.context, config.host);
      watchdog->tcp = nullptr;
      if (!tls_stream.ok()) {
        result.failure = Failure(ValidationFailure::kOther, kSqlStateCannotConnect,
                                 fmt::format("TLS setup failed: {}", std::string(tls_stream.status().message())));
        co_return result;
      }
      watchdog->tcp = &tls_stream->socket();
      absl::Status hs = co_await tls_stream->Handshake();
      if (!hs.ok()) {
        watchdog->tcp = nullptr;
        handshake_failed = hs.code() != absl::StatusCode::kUnauthenticated;
        result.failure = Failure(hs.code() == absl::StatusCode::kUnauthenticated ? ValidationFailure::kTlsCertificate
                                                                                   : ValidationFailure::kOther,
                                 kSqlStateCannotConnect,
                                 fmt::format("TLS with the origin at {} failed: {}", where, std::string(hs.message())));
        co_return result;
      }
      auto hash = tls_stream->PeerEndPointHash();
      if (hash.ok()) cert_hash = std::move(*hash);
      stream = std::make_unique<OriginConnection::Stream>(std::move(*tls_stream));
      watchdog->tcp = &stream->tls()->socket();
      on_tls = true;
    } else {
      stream = std::make_unique<OriginConnection::Stream>(std::move(socket));
      watchdog->tcp = nullptr;
    }
  }

  auto conn = std::make_unique<OriginConnection>(std::move(stream), options.max_login_message_length);
  // From here the watchdog closes through the connection itself.
  watchdog->tcp = nullptr;
  watchdog->local = nullptr;
  phase = "logging in";
  watchdog->conn = conn.get();
  std::optional<OriginFailure> failure = co_await Login(*conn, config, options, on_tls, std::move(cert_hash));
  watchdog->conn = nullptr;
  if (failure) {
    result.failure = std::move(*failure);
    co_return result;
  }
  conn->SetMaxMessageLength(options.max_message_length);
  result.connection = std::move(conn);
  co_return result;
}

}  // namespace

asio::awaitable<ConnectResult> ConnectOrigin(asio::any_io_executor executor, const OriginConfig& config,
                                             ConnectOptions options) {
  ConnectResult result;
  auto contexts = MakeTlsContexts(config);
  if (!contexts.ok()) {
    result.failure = Failure(ValidationFailure::kOther, kSqlStateCannotConnect,
                             fmt::format("origin TLS configuration: {}", std::string(contexts.status().message())));
    co_return result;
  }
  std::vector<Attempt> attempts;
  const bool unix_socket = config.is_unix_socket();
  switch (config.sslmode) {
    case SslMode::kDisable:
      attempts.push_back({TlsPlan::kPlain, nullptr});
      break;
    case SslMode::kAllow:
      attempts.push_back({TlsPlan::kPlain, nullptr});
      if (!unix_socket) attempts.push_back({TlsPlan::kRequired, &*contexts->retry});
      break;
    case SslMode::kPrefer:
      attempts.push_back({unix_socket ? TlsPlan::kPlain : TlsPlan::kOptional, &*contexts->primary});
      if (!unix_socket) attempts.push_back({TlsPlan::kPlain, nullptr});
      break;
    default:
      // PostgreSQL offers no TLS on Unix sockets; libpq skips it there too.
      attempts.push_back({unix_socket ? TlsPlan::kPlain : TlsPlan::kRequired, &*contexts->primary});
      break;
  }

  auto timeout = options.timeout.count() > 0 ? options.timeout : std::chrono::milliseconds(15000);
  auto watchdog = std::make_shared<Watchdog>(executor);
  watchdog->timer.expires_after(timeout);
  watchdog->timer.async_wait([watchdog](const std::error_code& ec) {
    if (ec || watchdog->done) return;
    watchdog->Fire();
  });

  std::string phase;
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    bool handshake_failed = false;
    result = co_await ConnectOnce(executor, config, options, attempts[i], watchdog, phase, handshake_failed);
    if (result.ok() || watchdog->fired) break;
    const bool last = i + 1 == attempts.size();
    if (last) break;
    // allow: retry with TLS only when the origin refused the plaintext login.
    // prefer: retry in plaintext only when TLS itself failed (not a login error).
    if (config.sslmode == SslMode::kAllow &&
        !(result.failure.sqlstate == kSqlStateInvalidAuthorization || result.failure.failure == ValidationFailure::kTlsUnavailable)) {
      break;
    }
    if (config.sslmode == SslMode::kPrefer && !handshake_failed) break;
  }
  watchdog->done = true;
  watchdog->timer.cancel();
  if (watchdog->fired) {
    if (result.connection) result.connection->CloseNow();
    result.connection.reset();
    result.failure = Failure(ValidationFailure::kTimeout, kSqlStateCannotConnect,
                             fmt::format("timed out after {} ms {} (origin {}:{})", timeout.count(),
                                         phase.empty() ? "connecting" : phase, config.host, config.port));
  }
  co_return result;
}

asio::awaitable<void> CancelOriginQuery(asio::any_io_executor executor, const OriginConfig& config, BackendKey key,
                                        std::chrono::milliseconds timeout) {
  if (key.process_id == 0 && key.secret_key.empty()) co_return;
  std::string packet;
  protocol::Encode(protocol::CancelRequest{key.process_id, key.secret_key}, packet);

  auto watchdog = std::make_shared<Watchdog>(executor);
  watchdog->timer.expires_after(timeout);
  watchdog->timer.async_wait([watchdog](const std::error_code& ec) {
    if (ec || watchdog->done) return;
    watchdog->Fire();
  });
  auto finish = [&] {
    watchdog->done = true;
    watchdog->timer.cancel();
  };
  std::unique_ptr<OriginConnection::Stream> stream;
  if (config.is_unix_socket()) {
    asio::local::stream_protocol::socket socket(executor);
    watchdog->local = &socket;
    auto [ec] = co_await socket.async_connect(
        asio::local::stream_protocol::endpoint(fmt::format("{}/.s.PGSQL.{}", config.host, config.port)), kAsTuple);
    watchdog->local = nullptr;
    if (ec) co_return finish();
    stream = std::make_unique<OriginConnection::Stream>(std::move(socket));
  } else {
    asio::ip::tcp::resolver resolver(executor);
    watchdog->resolver = &resolver;
    auto [rec, endpoints] = co_await resolver.async_resolve(config.host, std::to_string(config.port), kAsTuple);
    watchdog->resolver = nullptr;
    if (rec) co_return finish();
    asio::ip::tcp::socket socket(executor);
    watchdog->tcp = &socket;
    auto [cec, connected] = co_await asio::async_connect(socket, endpoints, kAsTuple);
    if (cec) {
      watchdog->tcp = nullptr;
      co_return finish();
    }
    // The key travels as the sslmode says the rest does (libpq 17 does too).
    auto contexts = MakeTlsContexts(config);
    const tls::ClientContext* context = nullptr;
    if (contexts.ok() && contexts->primary) context = &*contexts->primary;
    bool use_tls = false;
    if (context != nullptr) {
      auto offer = co_await tls::RequestTls(socket);
      if (!offer.ok()) {
        watchdog->tcp = nullptr;
        co_return finish();
      }
      use_tls = *offer == tls::TlsOffer::kAccepted;
      if (!use_tls && !context->allows_plaintext()) {
        watchdog->tcp = nullptr;
        co_return finish();
      }
    }
    if (use_tls) {
      auto tls_stream = tls::TlsStream::Client(std::move(socket), *context, config.host);
      watchdog->tcp = nullptr;
      if (!tls_stream.ok()) co_return finish();
      watchdog->tcp = &tls_stream->socket();
      absl::Status hs = co_await tls_stream->Handshake();
      watchdog->tcp = nullptr;
      if (!hs.ok()) co_return finish();
      stream = std::make_unique<OriginConnection::Stream>(std::move(*tls_stream));
    } else {
      watchdog->tcp = nullptr;
      stream = std::make_unique<OriginConnection::Stream>(std::move(socket));
    }
  }
  OriginConnection conn(std::move(stream), 1024);
  watchdog->conn = &conn;
  if ((co_await conn.Write(packet)).ok()) {
    // The server closes the connection once it has processed the request.
    (void)co_await conn.ReadFrame();
  }
  watchdog->conn = nullptr;
  conn.CloseNow();
  finish();
}

}  // namespace hyperpool::endpoint
