// InBuffer (src/client/in_buffer.h): memory follows what arrived, and a
// buffer grown for one large message does not outlive it.

#include "client/in_buffer.h"

#include <cstring>
#include <string>

#include <catch2/catch_test_macros.hpp>

namespace hyperpool::client {
namespace {

// Appends `bytes` the way the session does: Prepare, copy, Commit.
void Receive(InBuffer& in, std::string_view bytes, size_t ask) {
  auto [space, size] = in.Prepare(ask);
  REQUIRE(size >= std::min(ask, bytes.size()));
  const size_t n = std::min(size, bytes.size());
  std::memcpy(space, bytes.data(), n);
  in.Commit(n);
}

TEST_CASE("a large message grows the buffer only as its bytes arrive") {
  InBuffer in;
  // The session asks for at most kMaxReadChunk even when a header declared 1 GB.
  Receive(in, std::string(100, 'a'), InBuffer::kMaxReadChunk);
  CHECK(in.size() == 100);
  CHECK(in.capacity() <= 2 * InBuffer::kMaxReadChunk);
}

TEST_CASE("a buffer grown for a large message is freed once consumed") {
  InBuffer in;
  const std::string chunk(InBuffer::kMaxReadChunk, 'x');
  for (int i = 0; i < 8; ++i) Receive(in, chunk, chunk.size());
  CHECK(in.size() == 8 * chunk.size());
  CHECK(in.capacity() >= 8 * chunk.size());
  in.Consume(in.size());
  CHECK(in.size() == 0);
  CHECK(in.capacity() <= InBuffer::kKeepCapacity);
}

TEST_CASE("Take moves a large message out without keeping its storage") {
  InBuffer in;
  const std::string chunk(InBuffer::kMaxReadChunk, 'y');
  for (int i = 0; i < 3; ++i) Receive(in, chunk, chunk.size());
  std::string taken = in.Take(in.size());
  CHECK(taken.size() == 3 * chunk.size());
  CHECK(taken.find_first_not_of('y') == std::string::npos);
  CHECK(in.size() == 0);
  CHECK(in.capacity() <= InBuffer::kKeepCapacity);
}

TEST_CASE("small messages reuse the buffer and keep the rest in order") {
  InBuffer in;
  Receive(in, "hello world", 16 << 10);
  const size_t capacity = in.capacity();
  CHECK(in.Take(6) == "hello ");
  CHECK(in.view() == "world");
  in.Consume(5);
  Receive(in, "again", 16 << 10);
  CHECK(in.view() == "again");
  CHECK(in.capacity() == capacity);
}

}  // namespace
}  // namespace hyperpool::client
