#include "client/unix_listener.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <asio/io_context.hpp>
#include <fmt/format.h>

namespace hyperpool::client {

namespace {

using asio::local::stream_protocol;

// True if some process accepts connections on the socket at `path`.
bool SomeoneListens(const std::string& path) {
  asio::io_context io;
  stream_protocol::socket probe(io);
  asio::error_code ec;
  probe.connect(stream_protocol::endpoint(path), ec);
  return !ec;
}

}  // namespace

std::string UnixSocketPath(const std::string& dir, std::uint16_t port) {
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return fmt::format("{}/.s.PGSQL.{}", base, port);
}

absl::StatusOr<std::string> ListenUnix(stream_protocol::acceptor& acceptor, const std::string& dir,
                                       std::uint16_t port) {
  const std::string path = UnixSocketPath(dir, port);
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(
        fmt::format("Client: Unix socket path {} is longer than {} bytes", path, sizeof(sockaddr_un{}.sun_path) - 1));
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::AlreadyExistsError(fmt::format("Client: {} exists and is not a socket", path));
    }
    if (SomeoneListens(path)) {
      return absl::AlreadyExistsError(fmt::format("Client: another server listens on {}", path));
    }
    ::unlink(path.c_str());  // left behind by a process that did not stop cleanly
  }
  asio::error_code ec;
  auto fail = [&](std::string_view what) {
    return absl::UnavailableError(fmt::format("Client: cannot {} {}: {}", what, path, ec.message()));
  };
  acceptor.open(stream_protocol(), ec);
  if (ec) return fail("open a socket for");
  int fd = acceptor.native_handle();
  if (int flags = ::fcntl(fd, F_GETFD); flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  acceptor.bind(stream_protocol::endpoint(path), ec);
  if (ec) return fail("bind");
  if (::chmod(path.c_str(), 0777) != 0) {
    ec = asio::error_code(errno, asio::system_category());
    RemoveUnixSocket(path);
    return fail("set the mode of");
  }
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    RemoveUnixSocket(path);
    return fail("listen on");
  }
  return path;
}

void RemoveUnixSocket(const std::string& path) {
  if (!path.empty()) ::unlink(path.c_str());
}

}  // namespace hyperpool::client
