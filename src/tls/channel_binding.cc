#include "tls/channel_binding.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>

#include <fmt/format.h>

#include "tls/tls_internal.h"

namespace hyperpool::tls {
namespace internal {

std::string DrainErrors() {
  std::string out;
  while (unsigned long code = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

absl::StatusOr<std::string> CertificateDer(X509* cert) {
  int len = i2d_X509(cert, nullptr);
  if (len <= 0) return absl::InternalError("cannot DER-encode certificate: " + DrainErrors());
  std::string der(static_cast<size_t>(len), '\0');
  auto* p = reinterpret_cast<unsigned char*>(der.data());
  if (i2d_X509(cert, &p) != len) {
    return absl::InternalError("cannot DER-encode certificate: " + DrainErrors());
  }
  return der;
}

absl::StatusOr<std::string> EndPointHash(X509* cert) {
  int digest_nid = NID_undef;
#if defined(HYPERPOOL_TLS_OPENSSL)
  // Knows RSA-PSS, whose digest is a parameter rather than part of the OID.
  if (!X509_get_signature_info(cert, &digest_nid, nullptr, nullptr, nullptr)) {
    digest_nid = NID_undef;
  }
#else
  if (!OBJ_find_sigid_algs(X509_get_signature_nid(cert), &digest_nid, nullptr)) {
    digest_nid = NID_undef;
  }
#endif
  DrainErrors();
  // RFC 5929 4.1: "if the certificate's signatureAlgorithm uses a single hash
  // function and that hash function is either MD5 or SHA-1, then use SHA-256".
  if (digest_nid == NID_md5 || digest_nid == NID_sha1) digest_nid = NID_sha256;
  const EVP_MD* md = digest_nid == NID_undef ? nullptr : EVP_get_digestbynid(digest_nid);
  if (md == nullptr) {
    return absl::FailedPreconditionError(fmt::format(
        "tls-server-end-point is undefined for certificates signed with {}",
        OBJ_nid2ln(X509_get_signature_nid(cert)) ? OBJ_nid2ln(X509_get_signature_nid(cert))
                                                 : "an unknown algorithm"));
  }
  auto der = CertificateDer(cert);
  if (!der.ok()) return der.status();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_len = 0;
  if (!EVP_Digest(der->data(), der->size(), digest, &digest_len, md, nullptr)) {
    return absl::InternalError("certificate digest failed: " + DrainErrors());
  }
  return std::string(reinterpret_cast<const char*>(digest), digest_len);
}

}  // namespace internal

absl::StatusOr<std::string> TlsServerEndPointHash(std::string_view certificate_der) {
  const auto* p = reinterpret_cast<const unsigned char*>(certificate_der.data());
  internal::X509Ptr cert(d2i_X509(nullptr, &p, static_cast<long>(certificate_der.size())));
  if (cert == nullptr) {
    return absl::InvalidArgumentError("not a DER certificate: " + internal::DrainErrors());
  }
  return internal::EndPointHash(cert.get());
}

absl::StatusOr<std::string> ReadPemCertificateAsDer(const std::string& pem_file) {
  BIO* bio = BIO_new_file(pem_file.c_str(), "r");
  if (bio == nullptr) {
    return absl::NotFoundError(
        fmt::format("cannot open certificate file {}: {}", pem_file, internal::DrainErrors()));
  }
  internal::X509Ptr cert(PEM_read_bio_X509(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        fmt::format("no PEM certificate in {}: {}", pem_file, internal::DrainErrors()));
  }
  return internal::CertificateDer(cert.get());
}

}  // namespace hyperpool::tls
