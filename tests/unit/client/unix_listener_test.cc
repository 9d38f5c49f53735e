// The Client's Unix-domain listener file: PostgreSQL's name and mode, a
// stale socket replaced, a live one or a non-socket refused, long paths refused.

#include "client/unix_listener.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <asio/io_context.hpp>
#include <catch2/catch_test_macros.hpp>

namespace hyperpool::client {
namespace {

using asio::local::stream_protocol;

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/hp-unix-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { std::system(("rm -rf " + path).c_str()); }
  std::string path;
};

TEST_CASE("the socket is DIR/.s.PGSQL.<port>, mode 0777, and accepts; RemoveUnixSocket unlinks it") {
  TempDir dir;
  asio::io_context io;
  stream_protocol::acceptor acceptor(io);
  auto path = ListenUnix(acceptor, dir.path + "/", 6543);
  REQUIRE(path.ok());
  CHECK(*path == dir.path + "/.s.PGSQL.6543");
  struct stat st;
  REQUIRE(::stat(path->c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 07777) == 0777);
  stream_protocol::socket client(io);
  asio::error_code ec;
  client.connect(stream_protocol::endpoint(*path), ec);
  CHECK(!ec);
  RemoveUnixSocket(*path);
  CHECK(::access(path->c_str(), F_OK) != 0);
}

TEST_CASE("a socket file nobody listens on (a crash's) is replaced") {
  TempDir dir;
  asio::io_context io;
  {
    stream_protocol::acceptor old(io);
    REQUIRE(ListenUnix(old, dir.path, 7000).ok());
  }  // closed without unlinking, as by a crash
  stream_protocol::acceptor acceptor(io);
  CHECK(ListenUnix(acceptor, dir.path, 7000).ok());
}

TEST_CASE("a socket another process listens on is refused, and left alone") {
  TempDir dir;
  asio::io_context io;
  stream_protocol::acceptor live(io);
  auto path = ListenUnix(live, dir.path, 7001);
  REQUIRE(path.ok());
  stream_protocol::acceptor second(io);
  auto again = ListenUnix(second, dir.path, 7001);
  REQUIRE(!again.ok());
  CHECK(std::string(again.status().message()).find("another server listens") != std::string::npos);
  CHECK(::access(path->c_str(), F_OK) == 0);
}

TEST_CASE("a regular file in the socket's place is refused, not removed") {
  TempDir dir;
  const std::string path = UnixSocketPath(dir.path, 7002);
  std::ofstream(path) << "data";
  asio::io_context io;
  stream_protocol::acceptor acceptor(io);
  auto result = ListenUnix(acceptor, dir.path, 7002);
  REQUIRE(!result.ok());
  CHECK(::access(path.c_str(), F_OK) == 0);
}

TEST_CASE("a path longer than sun_path is refused") {
  asio::io_context io;
  stream_protocol::acceptor acceptor(io);
  auto result = ListenUnix(acceptor, "/tmp/" + std::string(120, 'd'), 5432);
  REQUIRE(!result.ok());
  CHECK(std::string(result.status().message()).find("longer than") != std::string::npos);
}

TEST_CASE("a directory that does not exist is an error") {
  asio::io_context io;
  stream_protocol::acceptor acceptor(io);
  CHECK(!ListenUnix(acceptor, "/nonexistent-hp-dir", 5432).ok());
}

}  // namespace
}  // namespace hyperpool::client
