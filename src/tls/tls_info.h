#pragma once
#include <string>

namespace hyperpool::tls {

// The TLS library this build links ("BoringSSL" or "OpenSSL") and the version
// string it reports at run time.
std::string LibraryName();
std::string LibraryVersion();

}  // namespace hyperpool::tls
