// InBuffer: the bytes an app sent that the Client has not consumed yet. No
// I/O: the session reads into Prepare()'s space and Commit()s what arrived.
//
// Memory follows what has arrived, never what a peer declared: callers ask
// Prepare() for at most kMaxReadChunk more bytes whatever a header says, and
// a buffer that grew past kKeepCapacity for one large message is freed (and
// the allocator asked to return the pages) as soon as it is empty again, so
// an idle session holds no more than kKeepCapacity. ReadSize() keeps an idle
// session's buffer small: a read into an empty buffer asks for kIdleRead
// only, and an empty buffer above kIdleKeep is given back unless the last
// read filled all the space it had (a stream in progress).
#ifndef HYPERPOOL_CLIENT_IN_BUFFER_H_
#define HYPERPOOL_CLIENT_IN_BUFFER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "client/client_util.h"
#include "common/buffer_pool.h"

namespace hyperpool::client {

class InBuffer {
 public:
  // Most bytes to ask of Prepare() per read.
  static constexpr size_t kMaxReadChunk = 1 << 20;
  // A buffer this large is kept for reuse; a larger one is released when empty.
  static constexpr size_t kKeepCapacity = 256 << 10;
  // Space for a read while data is buffered (a message or stream under way).
  static constexpr size_t kReadChunk = 16 << 10;
  // Space for a read into an empty buffer (the next message of an idle
  // session: most are far smaller), and the most an empty buffer keeps
  // while its app is not streaming.
  static constexpr size_t kIdleRead = 512;
  static constexpr size_t kIdleKeep = 4 << 10;

  // How much space to Prepare() for the next read when `want` more bytes are
  // known to be needed (1 when nothing is known). May give back an empty
  // buffer's storage.
  size_t ReadSize(size_t want) {
    if (size() == 0) {
      if (data_.size() > kIdleKeep && !last_read_filled_) Release();
      return std::clamp(want, kIdleRead, kMaxReadChunk);
    }
    return std::clamp(want, kReadChunk, kMaxReadChunk);
  }

  // Frames found in it are views that stay valid until Prepare() or Take().
  std::string_view view() const { return {data_.data() + begin_, end_ - begin_}; }
  size_t size() const { return end_ - begin_; }
  size_t capacity() const { return data_.capacity(); }

  void Consume(size_t n) {
    begin_ += static_cast<uint32_t>(n);
    if (begin_ == end_) Reset();
  }

  // The first `n` bytes as a string, consumed. A large message that is all
  // there is moves out with its storage (no second copy of it); small ones
  // are copied so the buffer is reused.
  std::string Take(size_t n) {
    if (begin_ == 0 && n == end_ && n > kKeepCapacity) {
      std::string out = std::move(data_);
      out.resize(n);
      std::string().swap(data_);
      begin_ = end_ = 0;
      return out;
    }
    std::string out(data_.data() + begin_, n);
    Consume(n);
    return out;
  }

  // Free space of at least `n` bytes after the data (moving the data to the
  // front or growing when needed): {pointer, size}.
  std::pair<char*, size_t> Prepare(size_t n) {
    if (data_.size() - end_ < n && begin_ > 0) {
      std::memmove(data_.data(), data_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (data_.size() - end_ < n) data_.resize(end_ + n);
    prepared_ = static_cast<uint32_t>(data_.size() - end_);
    return {data_.data() + end_, prepared_};
  }
  // `n` bytes were written into Prepare()'s space.
  void Commit(size_t n) {
    last_read_filled_ = n == prepared_;
    end_ += static_cast<uint32_t>(n);
  }

  // An idle session parks with no buffer at all (ClientSession::ParkApp):
  // when nothing is buffered, the storage goes to `spares` (the executor's
  // pool: the next read of any session there takes it) or, without one,
  // is freed. A partial frame keeps its buffer.
  void ReleaseIfEmpty(BufferPool* spares = nullptr) {
    if (size() != 0) return;
    begin_ = end_ = prepared_ = 0;
    if (spares != nullptr) {
      data_.clear();  // (its capacity stays, for the pool; a large one it frees)
      spares->Give(data_);
    }
    Release();  // (what the pool did not take)
  }
  // Before a read into a buffer without storage: a spare from `spares`, so
  // that a busy executor allocates no read buffer per message.
  void TakeSpare(BufferPool& spares) {
    if (data_.capacity() <= std::string().capacity() && size() == 0) spares.Take(data_);
  }

 private:
  void Reset() {
    begin_ = end_ = 0;
    if (data_.capacity() > kKeepCapacity) {
      Release();
      ReleaseFreedMemory();
    }
  }
  // swap, not assignment: moving an empty string into a std::string keeps
  // the target's allocation.
  void Release() { std::string().swap(data_); }

  std::string data_;
  // Offsets in data_, 32 bits: it holds at most one app message (bounded
  // by ClientCoreConfig::max_message_length, at most
  // kDefaultMaxMessageLength) and a read chunk, and an idle session keeps
  // the InBuffer itself (16 bytes less than with size_t).
  uint32_t begin_ = 0;
  uint32_t end_ = 0;
  uint32_t prepared_ = 0;          // space the last Prepare() gave
  bool last_read_filled_ = false;  // the last Commit() used all of it
};

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_IN_BUFFER_H_
