// Access to the asio::ssl::stream inside a TlsStream, for code that needs
// generic Asio algorithms on it (asio::async_read with a completion
// condition, ...). Separate from tls_stream.h because asio/ssl pulls the TLS
// library's headers and costs compile time: include it only where needed.
#pragma once

#include <string>

#include <asio/ip/tcp.hpp>
#include <asio/ssl/stream.hpp>

#include "tls/tls_stream.h"

namespace hyperpool::tls {

using AsioTlsStream = asio::ssl::stream<asio::ip::tcp::socket>;

struct TlsStream::Impl {
  AsioTlsStream stream;
  bool is_client;
  std::string host;  // Client side: the name the certificate must match, for messages.
};

// The stream inside `stream`; valid as long as `stream` is.
inline AsioTlsStream& AsioStream(TlsStream& stream) { return stream.impl().stream; }

}  // namespace hyperpool::tls
