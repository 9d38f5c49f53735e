// Helpers shared by the src/tls implementation files; not for other modules.
#pragma once

#include <openssl/ssl.h>
#include <openssl/x509.h>
#if defined(HYPERPOOL_TLS_BORINGSSL)
#include <openssl/is_boringssl.h>  // Fails to compile if OpenSSL's headers won.
#endif

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace hyperpool::tls::internal {

struct SslCtxFree {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxFree>;

struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

// Drains the library's thread-local error queue into one readable string
// ("" if empty), so that a stale error never leaks into a later message.
std::string DrainErrors();

// RFC 5929 tls-server-end-point hash of `cert` (see channel_binding.h).
absl::StatusOr<std::string> EndPointHash(X509* cert);

// The DER encoding of `cert`.
absl::StatusOr<std::string> CertificateDer(X509* cert);

}  // namespace hyperpool::tls::internal
