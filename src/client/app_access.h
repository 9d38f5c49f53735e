// Who may log in to the Client and how: the app users' verifiers and the
// TLS context offered to applications, built once at Client::Create from
// ClientOptions (kept out of client.cc, which holds the sessions).
#ifndef HYPERPOOL_CLIENT_APP_ACCESS_H_
#define HYPERPOOL_CLIENT_APP_ACCESS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "client/server_handshake.h"
#include "hyperpool/options.h"
#include "tls/tls_context.h"

namespace hyperpool::client {

// Fills config.other_users from options.users (a stored verifier is parsed;
// a password gets a verifier with `iterations` and a fresh salt) and the
// TLS fields from options.ssl_*; loads the certificate into `tls`.
// InvalidArgument names the user or file at fault.
absl::Status ConfigureAppAccess(const ClientOptions& options, uint32_t iterations, HandshakeConfig& config,
                                std::optional<tls::ServerContext>& tls);

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_APP_ACCESS_H_
