// BufferPool (common/buffer_pool.h): an idle session's buffers
// go back to the Endpoint's pool and the next unit takes them.

#include "common/buffer_pool.h"

#include <string>

#include <catch2/catch_test_macros.hpp>

namespace hyperpool::endpoint {
namespace {

const std::size_t kInline = std::string().capacity();

std::string Grown(std::size_t capacity) {
  std::string s;
  s.reserve(capacity);
  return s;
}

TEST_CASE("a buffer given back keeps no storage, and the next Take gets it") {
  BufferPool pool;
  std::string idle = Grown(512);
  const char* storage = idle.data();
  pool.Give(idle);
  CHECK(idle.capacity() == kInline);
  CHECK(pool.spares() == 1);
  std::string next;
  pool.Take(next);
  CHECK(next.data() == storage);  // the same storage: no allocation
  CHECK(next.capacity() >= 512);
  CHECK(pool.spares() == 0);
}

TEST_CASE("a buffer with bytes in it is neither given nor replaced") {
  BufferPool pool;
  std::string busy = Grown(512);
  busy = "partial frame";
  pool.Give(busy);
  CHECK(busy == "partial frame");
  CHECK(pool.spares() == 0);
}

TEST_CASE("a large buffer is freed, not pooled, and a full pool frees") {
  BufferPool pool;
  std::string large = Grown(BufferPool::kMaxSpareCapacity + 1);
  pool.Give(large);
  CHECK(large.capacity() == kInline);
  CHECK(pool.spares() == 0);
  for (std::size_t i = 0; i < BufferPool::kMaxSpares + 10; ++i) {
    std::string b = Grown(100);
    pool.Give(b);
    CHECK(b.capacity() == kInline);
  }
  CHECK(pool.spares() == BufferPool::kMaxSpares);
}

TEST_CASE("Take leaves a buffer that has storage or bytes alone") {
  BufferPool pool;
  std::string spare = Grown(300);
  pool.Give(spare);
  std::string own = Grown(100);
  const char* storage = own.data();
  pool.Take(own);
  CHECK(own.data() == storage);
  std::string text = "x";
  pool.Take(text);
  CHECK(text == "x");
  CHECK(pool.spares() == 1);
}

}  // namespace
}  // namespace hyperpool::endpoint
