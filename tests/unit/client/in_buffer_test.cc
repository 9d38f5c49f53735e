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


// Reads the way ClientSession::Fill does: ReadSize, Prepare, copy, Commit.
size_t Read(InBuffer& in, std::string_view bytes, size_t want = 1) {
  auto [space, size] = in.Prepare(in.ReadSize(want));
  const size_t n = std::min(size, bytes.size());
  std::memcpy(space, bytes.data(), n);
  in.Commit(n);
  return n;
}

TEST_CASE("an idle session's read into an empty buffer holds about 1 KiB, not a 16 KiB read buffer") {
  InBuffer in;
  Read(in, std::string(60, 'q'));
  CHECK(in.capacity() < 2 * InBuffer::kIdleRead);
  in.Consume(60);
  Read(in, std::string(200, 'q'));  // the next message of an idle session
  CHECK(in.capacity() < 2 * InBuffer::kIdleRead);
}

TEST_CASE("a partial frame reads in 16 KiB chunks; once empty and quiet the buffer shrinks back") {
  InBuffer in;
  Read(in, std::string(5, 'h'));                      // a header
  Read(in, std::string(9000, 'b'), 9000);             // the rest of its message
  CHECK(in.capacity() >= InBuffer::kReadChunk);
  in.Consume(in.size());
  Read(in, std::string(50, 's'));                     // the app went quiet: a short read
  in.Consume(in.size());
  Read(in, std::string(50, 's'));
  CHECK(in.capacity() < 2 * InBuffer::kIdleRead);
}

TEST_CASE("a stream that fills every read keeps its buffer between messages") {
  InBuffer in;
  Read(in, std::string(5, 'h'));
  const std::string chunk(InBuffer::kReadChunk, 'c');
  CHECK(Read(in, chunk, 8000) == chunk.size());  // filled all it was given
  in.Consume(in.size());
  const size_t before = in.capacity();
  CHECK(before >= InBuffer::kReadChunk);
  Read(in, chunk);
  CHECK(in.capacity() == before);
}

TEST_CASE("sessions that park hand their read buffer to the executor's spares, and the next read takes it") {
  BufferPool spares;
  InBuffer a;
  InBuffer b;
  Read(a, std::string(100, 'q'));
  const char* storage = a.view().data();
  a.Consume(a.size());
  a.ReleaseIfEmpty(&spares);  // a parks: its buffer is the pool's
  CHECK(a.capacity() <= std::string().capacity());
  CHECK(spares.spares() == 1);
  b.TakeSpare(spares);  // b's next read: no allocation
  CHECK(spares.spares() == 0);
  Read(b, std::string(80, 'r'));
  CHECK(b.view().data() == storage);
  CHECK(b.view() == std::string(80, 'r'));

  // A partial frame keeps its buffer; a buffer with storage takes none.
  b.ReleaseIfEmpty(&spares);
  CHECK(spares.spares() == 0);
  CHECK(b.view() == std::string(80, 'r'));
  InBuffer c;
  Read(c, std::string(10, 'c'));
  c.Consume(c.size());
  c.ReleaseIfEmpty(&spares);
  b.TakeSpare(spares);
  CHECK(spares.spares() == 1);
  // A large buffer (a message of 20 KiB) is freed, not kept.
  InBuffer d;
  Read(d, std::string(5, 'h'));
  Read(d, std::string(20 << 10, 'x'), 20 << 10);
  CHECK(d.capacity() > BufferPool::kMaxSpareCapacity);
  d.Consume(d.size());
  d.ReleaseIfEmpty(&spares);
  CHECK(spares.spares() == 1);
  CHECK(d.capacity() <= std::string().capacity());
}

}  // namespace
}  // namespace hyperpool::client
