#include "client/app_access.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "protocol/auth/auth_util.h"
#include "protocol/auth/scram.h"

namespace hyperpool::client {

absl::Status ConfigureAppAccess(const ClientOptions& options, uint32_t iterations, HandshakeConfig& config,
                                std::optional<tls::ServerContext>& tls) {
  config.databases = options.databases;
  for (const ClientOptions::AppUser& user : options.users) {
    if (user.name.empty()) return absl::InvalidArgumentError("app user with an empty name");
    if (user.name == options.user || config.other_users.count(user.name) > 0) {
      return absl::InvalidArgumentError(absl::StrCat("app user \"", user.name, "\" is listed twice"));
    }
    absl::StatusOr<auth::ScramVerifier> verifier;
    if (!user.scram_verifier.empty()) {
      verifier = auth::ParseScramVerifier(user.scram_verifier);
    } else if (!user.password.empty()) {
      absl::StatusOr<std::string> salt = auth::RandomBytes(auth::kDefaultScramSaltSize);
      if (!salt.ok()) return salt.status();
      verifier = auth::MakeScramVerifier(user.password, *salt, iterations);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("app user \"", user.name, "\" has no verifier or password"));
    }
    if (!verifier.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("app user \"", user.name, "\": ", std::string(verifier.status().message())));
    }
    config.other_users.emplace(user.name, *std::move(verifier));
  }

  if (options.ssl_cert_file.empty() != options.ssl_key_file.empty()) {
    return absl::InvalidArgumentError("TLS towards applications needs both a certificate and a key file");
  }
  if (options.ssl_cert_file.empty()) {
    if (options.ssl_required) return absl::InvalidArgumentError("ssl mode require needs a certificate and key");
    return absl::OkStatus();
  }
  tls::ServerOptions server;
  server.cert_file = options.ssl_cert_file;
  server.key_file = options.ssl_key_file;
  absl::StatusOr<tls::ServerContext> context = tls::ServerContext::Create(server);
  if (!context.ok()) return context.status();
  tls.emplace(*std::move(context));
  config.offer_tls = true;
  config.require_tls = options.ssl_required;
  return absl::OkStatus();
}

}  // namespace hyperpool::client
