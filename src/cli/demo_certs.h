// A throwaway TLS identity for `hyperpool demo`'s link between its Client and
// Endpoint halves (the socket transport always uses TLS): a P-256 key and a
// self-signed certificate for IP 127.0.0.1, made with the TLS library the
// binary links (no openssl CLI needed). The Client trusts exactly this
// certificate (it is its own CA file), so nothing else verifies against it.
#ifndef HYPERPOOL_CLI_DEMO_CERTS_H_
#define HYPERPOOL_CLI_DEMO_CERTS_H_

#include <string>

#include "absl/status/status.h"

namespace hyperpool::cli::demo {

// Writes the PEM certificate to `cert_path` and the PEM private key to
// `key_path` (mode 0600). Valid from an hour ago for a day.
absl::Status WriteSelfSignedCertificate(const std::string& cert_path, const std::string& key_path);

}  // namespace hyperpool::cli::demo

#endif  // HYPERPOOL_CLI_DEMO_CERTS_H_
