// The demo's throwaway certificate (see demo_certs.h).

#include "cli/demo_certs.h"

#include <sys/stat.h>

#include <cstdio>
#include <memory>

#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fmt/format.h>

#include "absl/status/statusor.h"

namespace hyperpool::cli::demo {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
};
template <typename T>
using Owned = std::unique_ptr<T, Free>;

absl::Status Failed(const char* what) { return absl::InternalError(fmt::format("demo certificate: {} failed", what)); }

absl::StatusOr<Owned<EVP_PKEY>> NewP256Key() {
  Owned<EVP_PKEY_CTX> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nullptr));
  EVP_PKEY* key = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 ||
      EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx.get(), NID_X9_62_prime256v1) != 1 ||
      EVP_PKEY_keygen(ctx.get(), &key) != 1) {
    return Failed("P-256 key generation");
  }
  return Owned<EVP_PKEY>(key);
}

absl::Status AddExtension(X509* cert, int nid, const char* value) {
  Owned<X509_EXTENSION> ext(X509V3_EXT_nconf_nid(nullptr, nullptr, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) return Failed("adding an extension");
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteSelfSignedCertificate(const std::string& cert_path, const std::string& key_path) {
  absl::StatusOr<Owned<EVP_PKEY>> key = NewP256Key();
  if (!key.ok()) return key.status();
  Owned<X509> cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1 ||  // 2 = X.509 v3
      ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1) != 1 ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600) == nullptr ||
      X509_set_pubkey(cert.get(), key->get()) != 1) {
    return Failed("filling the certificate");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>("hyperpool demo"), -1, -1, 0) != 1 ||
      X509_set_issuer_name(cert.get(), name) != 1) {
    return Failed("naming the certificate");
  }
  // Its own trust anchor (CA) and the Endpoint's leaf at once.
  if (absl::Status s = AddExtension(cert.get(), NID_basic_constraints, "critical,CA:TRUE"); !s.ok()) return s;
  if (absl::Status s = AddExtension(cert.get(), NID_subject_alt_name, "IP:127.0.0.1"); !s.ok()) return s;
  if (X509_sign(cert.get(), key->get(), EVP_sha256()) == 0) return Failed("signing");

  Owned<BIO> cert_out(BIO_new_file(cert_path.c_str(), "w"));
  if (!cert_out || PEM_write_bio_X509(cert_out.get(), cert.get()) != 1) return Failed("writing the certificate");
  // The key file is created private before any byte of the key is written.
  std::FILE* f = std::fopen(key_path.c_str(), "w");
  if (f == nullptr) return Failed("creating the key file");
  ::chmod(key_path.c_str(), 0600);
  Owned<BIO> key_out(BIO_new_fp(f, BIO_CLOSE));
  if (!key_out) {
    std::fclose(f);
    return Failed("opening the key file");
  }
  if (PEM_write_bio_PrivateKey(key_out.get(), key->get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Failed("writing the key");
  }
  return absl::OkStatus();
}

}  // namespace hyperpool::cli::demo
