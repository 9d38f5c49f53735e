#include "tls/tls_info.h"

#include <openssl/crypto.h>
#if defined(HYPERPOOL_TLS_BORINGSSL)
#include <openssl/is_boringssl.h>  // Fails to compile if OpenSSL's headers won.
#endif

#include "hyperpool/version.h"

namespace hyperpool::tls {

std::string LibraryName() { return kTlsLibrary; }

std::string LibraryVersion() { return OpenSSL_version(OPENSSL_VERSION); }

}  // namespace hyperpool::tls
