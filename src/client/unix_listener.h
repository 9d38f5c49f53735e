#pragma once
// The Client's Unix-domain listener, laid out as PostgreSQL's: the socket
// DIR/.s.PGSQL.<port>, so `psql -h DIR -p PORT` and any libpq-style driver
// given a directory as host find it.

#include <cstdint>
#include <string>

#include <asio/local/stream_protocol.hpp>

#include "absl/status/statusor.h"

namespace hyperpool::client {

// DIR/.s.PGSQL.<port>.
std::string UnixSocketPath(const std::string& dir, std::uint16_t port);

// Opens, binds and listens `acceptor` on UnixSocketPath(dir, port), mode 0777
// (PostgreSQL's default unix_socket_permissions: access is decided by the
// password, not the file mode), close-on-exec. A leftover socket file that
// nobody accepts on (a crashed process's) is replaced; one that a live
// process accepts on is an error, as is a path longer than sun_path.
// Returns the path, which the caller removes with RemoveUnixSocket at stop.
absl::StatusOr<std::string> ListenUnix(asio::local::stream_protocol::acceptor& acceptor, const std::string& dir,
                                       std::uint16_t port);

// Unlinks the socket file (ignoring a missing one).
void RemoveUnixSocket(const std::string& path);

}  // namespace hyperpool::client
