#include "tls/tls_context.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <array>
#include <utility>

#include <fmt/format.h>

#include "tls/tls_internal.h"

namespace hyperpool::tls {
namespace {

using internal::DrainErrors;
using internal::SslCtxPtr;

constexpr std::array<std::pair<SslMode, std::string_view>, 6> kModeNames = {{
    {SslMode::kDisable, "disable"},
    {SslMode::kAllow, "allow"},
    {SslMode::kPrefer, "prefer"},
    {SslMode::kRequire, "require"},
    {SslMode::kVerifyCa, "verify-ca"},
    {SslMode::kVerifyFull, "verify-full"},
}};

absl::Status FileError(std::string_view what, const std::string& file) {
  return absl::InvalidArgumentError(
      fmt::format("cannot load {} from '{}': {}", what, file, DrainErrors()));
}

// Settings both sides share: TLS 1.2 minimum (PostgreSQL's own default since
// 14), no renegotiation (PostgreSQL disables it) and no compression (CRIME).
absl::StatusOr<SslCtxPtr> NewContext(const SSL_METHOD* method) {
  DrainErrors();
  SslCtxPtr ctx(SSL_CTX_new(method));
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new failed: " + DrainErrors());
  if (!SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION)) {
    return absl::InternalError("cannot set TLS 1.2 as minimum: " + DrainErrors());
  }
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  return ctx;
}

absl::Status LoadCertAndKey(SSL_CTX* ctx, const std::string& cert_file,
                            const std::string& key_file) {
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1) {
    return FileError("certificate chain", cert_file);
  }
  // The key is read on its own so that a key for another certificate gets its
  // own message (SSL_CTX_use_PrivateKey_file would fail with a library code).
  BIO* bio = BIO_new_file(key_file.c_str(), "r");
  if (bio == nullptr) return FileError("private key", key_file);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (key == nullptr) return FileError("private key", key_file);
  const bool matches = X509_check_private_key(SSL_CTX_get0_certificate(ctx), key) == 1;
  const bool used = matches && SSL_CTX_use_PrivateKey(ctx, key) == 1;
  EVP_PKEY_free(key);
  if (!matches) {
    return absl::InvalidArgumentError(fmt::format(
        "private key '{}' does not match certificate '{}' ({})", key_file, cert_file, DrainErrors()));
  }
  if (!used) return FileError("private key", key_file);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SslMode> ParseSslMode(std::string_view name) {
  for (const auto& [mode, mode_name] : kModeNames) {
    if (name == mode_name) return mode;
  }
  return absl::InvalidArgumentError(fmt::format(
      "invalid sslmode '{}': expected disable, allow, prefer, require, verify-ca or verify-full",
      name));
}

std::string_view SslModeName(SslMode mode) {
  for (const auto& [m, mode_name] : kModeNames) {
    if (m == mode) return mode_name;
  }
  return "unknown";
}

struct ClientContext::Impl {
  SslMode mode;
  bool verify_chain;
  bool sni;
  SslCtxPtr ctx;  // Null when the mode never does TLS.
};

ClientContext::ClientContext(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<ClientContext> ClientContext::Create(const ClientOptions& options) {
  SslMode mode = options.mode;
  const bool system_roots = options.root_cert_file == "system";
  if (system_roots) mode = SslMode::kVerifyFull;
  const bool has_roots = !options.root_cert_file.empty();
  if ((mode == SslMode::kVerifyCa || mode == SslMode::kVerifyFull) && !has_roots) {
    return absl::InvalidArgumentError(fmt::format(
        "sslmode {} needs a root certificate file (sslrootcert) to verify the server against",
        SslModeName(mode)));
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError("a client certificate (sslcert) needs its key (sslkey), and vice versa");
  }
  auto impl = std::make_shared<Impl>();
  impl->mode = mode;
  impl->sni = options.sni;
  impl->verify_chain = mode == SslMode::kVerifyCa || mode == SslMode::kVerifyFull ||
                       (mode == SslMode::kRequire && has_roots);
  if (mode == SslMode::kDisable || mode == SslMode::kAllow) {
    return ClientContext(std::move(impl));
  }

  auto ctx = NewContext(TLS_client_method());
  if (!ctx.ok()) return ctx.status();
  if (has_roots) {
    if (system_roots) {
      if (SSL_CTX_set_default_verify_paths(ctx->get()) != 1) {
        return absl::InvalidArgumentError("cannot load the system trust store: " + DrainErrors());
      }
    } else if (SSL_CTX_load_verify_locations(ctx->get(), options.root_cert_file.c_str(), nullptr) != 1) {
      return FileError("root certificates", options.root_cert_file);
    }
  }
  // Per connection, tls_stream.cc sets the host to check; an unverified mode
  // still runs the handshake to completion whatever the certificate says.
  SSL_CTX_set_verify(ctx->get(), impl->verify_chain ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
  if (!options.cert_file.empty()) {
    if (auto status = LoadCertAndKey(ctx->get(), options.cert_file, options.key_file); !status.ok()) {
      return status;
    }
  }
  impl->ctx = std::move(*ctx);
  return ClientContext(std::move(impl));
}

SslMode ClientContext::mode() const { return impl_->mode; }
bool ClientContext::verifies_chain() const { return impl_->verify_chain; }
bool ClientContext::verifies_host_name() const { return impl_->mode == SslMode::kVerifyFull; }
bool ClientContext::sends_sni() const { return impl_->sni; }
bool ClientContext::attempts_tls() const { return impl_->ctx != nullptr; }
bool ClientContext::allows_plaintext() const {
  return impl_->mode == SslMode::kDisable || impl_->mode == SslMode::kAllow ||
         impl_->mode == SslMode::kPrefer;
}
ssl_ctx_st* ClientContext::native_handle() const { return impl_->ctx.get(); }

struct ServerContext::Impl {
  bool requests_client_cert;
  SslCtxPtr ctx;
};

ServerContext::ServerContext(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<ServerContext> ServerContext::Create(const ServerOptions& options) {
  if (options.cert_file.empty() || options.key_file.empty()) {
    return absl::InvalidArgumentError("a TLS server needs a certificate file and a key file");
  }
  if (options.require_client_cert && options.client_ca_file.empty()) {
    return absl::InvalidArgumentError("requiring client certificates needs a client CA file");
  }
  auto ctx = NewContext(TLS_server_method());
  if (!ctx.ok()) return ctx.status();
  if (auto status = LoadCertAndKey(ctx->get(), options.cert_file, options.key_file); !status.ok()) {
    return status;
  }
  auto impl = std::make_shared<Impl>();
  impl->requests_client_cert = !options.client_ca_file.empty();
  if (impl->requests_client_cert) {
    if (SSL_CTX_load_verify_locations(ctx->get(), options.client_ca_file.c_str(), nullptr) != 1) {
      return FileError("client CA certificates", options.client_ca_file);
    }
    // Tell clients which CAs we accept, so they can pick a certificate.
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(options.client_ca_file.c_str());
    if (names == nullptr) return FileError("client CA names", options.client_ca_file);
    SSL_CTX_set_client_CA_list(ctx->get(), names);
    int verify = SSL_VERIFY_PEER;
    if (options.require_client_cert) verify |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(ctx->get(), verify, nullptr);
  } else {
    SSL_CTX_set_verify(ctx->get(), SSL_VERIFY_NONE, nullptr);
  }
  impl->ctx = std::move(*ctx);
  return ServerContext(std::move(impl));
}

bool ServerContext::requests_client_cert() const { return impl_->requests_client_cert; }
ssl_ctx_st* ServerContext::native_handle() const { return impl_->ctx.get(); }

}  // namespace hyperpool::tls
