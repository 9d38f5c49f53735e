// TLS configuration: a client context for connecting to origins (configured
// like libpq's sslmode) and a server context for offering TLS to applications.
//
// A context is immutable once created and cheap to copy (copies share one
// SSL_CTX); it may be shared by all connections and threads. Streams are made
// from contexts in tls/tls_stream.h. This header pulls in neither Asio nor the
// TLS library's headers.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

struct ssl_ctx_st;  // SSL_CTX in both BoringSSL and OpenSSL.

namespace hyperpool::tls {

// How the client side uses TLS; the same six modes as libpq's sslmode
// (PostgreSQL docs, "SSL Support" / "SSL Mode Descriptions").
enum class SslMode {
  kDisable,     // Plaintext only; no SSLRequest is sent.
  kAllow,       // Plaintext first. TLS only if the server refuses plaintext,
                // which the caller detects and retries with kRequire.
  kPrefer,      // TLS if the server offers it, else plaintext. No verification.
  kRequire,     // TLS or fail. The certificate is not verified, unless
                // root_cert_file is set: then as kVerifyCa (libpq does the same).
  kVerifyCa,    // TLS; the certificate chain must verify against root_cert_file.
  kVerifyFull,  // kVerifyCa, and the host name or IP address the caller
                // connected to must match the certificate's subjectAltName.
};

// "disable", "allow", ... as in a libpq connection string.
absl::StatusOr<SslMode> ParseSslMode(std::string_view name);
std::string_view SslModeName(SslMode mode);

// Client-side settings; the names in parentheses are libpq's.
struct ClientOptions {
  SslMode mode = SslMode::kPrefer;
  // (sslrootcert) PEM file of trusted CA certificates. "system" means the TLS
  // library's default trust store and, as in libpq 16, forces kVerifyFull.
  std::string root_cert_file;
  // (sslcert, sslkey) PEM certificate chain and private key presented to the
  // server when it asks for one (mutual TLS). Both or neither.
  std::string cert_file;
  std::string key_file;
  // (sslsni) Send the host name as SNI when it is a DNS name (never for an IP).
  bool sni = true;
};

// The client side of TLS towards origins. TLS 1.2 is the minimum; TLS
// renegotiation and compression are off, as PostgreSQL wants.
class ClientContext {
 public:
  // Loads the files named in `options`. Fails with InvalidArgument when a file
  // cannot be loaded (the message names the file and the library's reason) or
  // when the options contradict each other (e.g. kVerifyCa without a CA file).
  static absl::StatusOr<ClientContext> Create(const ClientOptions& options);

  // The mode in effect (kVerifyFull if root_cert_file was "system").
  SslMode mode() const;
  // Whether the certificate chain is verified (kVerifyCa, kVerifyFull, or
  // kRequire with a CA file).
  bool verifies_chain() const;
  // Whether the host name is checked against the certificate (kVerifyFull).
  bool verifies_host_name() const;
  bool sends_sni() const;
  // Whether an SSLRequest is sent at all: kPrefer and stricter.
  bool attempts_tls() const;
  // Whether plaintext is acceptable when the server refuses TLS: up to kPrefer.
  bool allows_plaintext() const;

  // The library's context, for tls_stream.cc; nullptr for kDisable and kAllow.
  ssl_ctx_st* native_handle() const;

 private:
  struct Impl;
  explicit ClientContext(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

// Server-side settings.
struct ServerOptions {
  std::string cert_file;  // PEM certificate chain, leaf first.
  std::string key_file;   // PEM private key of the leaf.
  // PEM CA certificates for verifying client certificates. Empty: no client
  // certificate is requested.
  std::string client_ca_file;
  // Fail the handshake when the client presents no certificate (needs
  // client_ca_file). Otherwise a presented certificate must still verify.
  bool require_client_cert = false;
};

// The server side of TLS, offered to applications and remote Clients.
class ServerContext {
 public:
  // Loads the files; InvalidArgument names the file and the reason, including
  // a key that does not match the certificate.
  static absl::StatusOr<ServerContext> Create(const ServerOptions& options);

  bool requests_client_cert() const;
  ssl_ctx_st* native_handle() const;

 private:
  struct Impl;
  explicit ServerContext(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace hyperpool::tls
