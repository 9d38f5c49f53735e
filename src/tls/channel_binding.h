// The "tls-server-end-point" channel binding (RFC 5929 section 4) used by
// SCRAM-SHA-256-PLUS (RFC 5802 / PostgreSQL docs "SASL Authentication"): a hash
// of the server's certificate that both ends compute. The client hashes the
// certificate it received; the server hashes its own.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace hyperpool::tls {

// Hash of a DER certificate per RFC 5929 4.1: with the hash function of the
// certificate's signature algorithm, except MD5 and SHA-1 which become
// SHA-256. Returns the raw digest bytes (32 for SHA-256, 48 for SHA-384, ...).
// Fails for unparseable DER and for signature algorithms without a single hash
// function (e.g. Ed25519), for which RFC 5929 defines no binding; PostgreSQL
// refuses those too.
absl::StatusOr<std::string> TlsServerEndPointHash(std::string_view certificate_der);

// The DER of the first certificate in a PEM file (e.g. our own server
// certificate, or a test's expectation).
absl::StatusOr<std::string> ReadPemCertificateAsDer(const std::string& pem_file);

}  // namespace hyperpool::tls
