// InBuffer: the bytes an app sent that the Client has not consumed yet. No
// I/O: the session reads into Prepare()'s space and Commit()s what arrived.
//
// Memory follows what has arrived, never what a peer declared: callers ask
// Prepare() for at most kMaxReadChunk more bytes whatever a header says, and
// a buffer that grew past kKeepCapacity for one large message is freed (and
// the allocator asked to return the pages) as soon as it is empty again, so
// an idle session holds no more than kKeepCapacity.
#ifndef HYPERPOOL_CLIENT_IN_BUFFER_H_
#define HYPERPOOL_CLIENT_IN_BUFFER_H_

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "client/client_util.h"

namespace hyperpool::client {

class InBuffer {
 public:
  // Most bytes to ask of Prepare() per read.
  static constexpr size_t kMaxReadChunk = 1 << 20;
  // A buffer this large is kept for reuse; a larger one is released when empty.
  static constexpr size_t kKeepCapacity = 256 << 10;

  // Frames found in it are views that stay valid until Prepare() or Take().
  std::string_view view() const { return {data_.data() + begin_, end_ - begin_}; }
  size_t size() const { return end_ - begin_; }
  size_t capacity() const { return data_.capacity(); }

  void Consume(size_t n) {
    begin_ += n;
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
    return {data_.data() + end_, data_.size() - end_};
  }
  // `n` bytes were written into Prepare()'s space.
  void Commit(size_t n) { end_ += n; }

 private:
  void Reset() {
    begin_ = end_ = 0;
    if (data_.capacity() > kKeepCapacity) {
      // swap, not assignment: moving an empty string into a std::string
      // keeps the target's allocation.
      std::string().swap(data_);
      ReleaseFreedMemory();
    }
  }

  std::string data_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_IN_BUFFER_H_
