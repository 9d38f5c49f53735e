// What the Client writes to an app, without I/O (the session does the
// writes: ClientSession::FlushApp).
//
// AppOutbox: the bytes queued for the app's socket, in the order they must
// arrive: a local cache hit's answer, the link's bytes, an error. One
// writer takes them (the session's driver, one write in flight); each
// queued string is written where it lies (a gathered write, writev), never
// copied into a combined string.
//
// AppBytes: builds one chunk for the app out of the frames of one received
// buffer (the link's bytes), for consumers that pass most frames on as
// they came (ExtendedSession::OnBackend). While every frame appended is the
// next one of the buffer, nothing is copied: the chunk is a prefix of the
// buffer, which the caller then queues itself (AppOutbox::Push of the
// buffer, moved). The first frame that is left out, changed or added turns
// it into a copy, exactly as an append to a string would have built it.
#ifndef HYPERPOOL_CLIENT_APP_OUTBOX_H_
#define HYPERPOOL_CLIENT_APP_OUTBOX_H_

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include <asio/buffer.hpp>

#include "common/small_fifo.h"

namespace hyperpool::client {

class AppBytes {
 public:
  // Always copies, into `copy` (appended to what it holds).
  explicit AppBytes(std::string& copy) : copy_(copy), copying_(true) {}
  // Counts a verbatim prefix of `base` while it can; `copy` (empty) receives
  // the bytes once they are no longer one.
  AppBytes(std::string_view base, std::string& copy) : base_(base), copy_(copy) {}

  AppBytes(const AppBytes&) = delete;
  AppBytes& operator=(const AppBytes&) = delete;

  void Append(std::string_view s) {
    if (s.empty()) return;
    if (!copying_ && s.data() == base_.data() + verbatim_ && s.size() <= base_.size() - verbatim_) {
      verbatim_ += s.size();
      return;
    }
    owned().append(s);
  }
  AppBytes& operator+=(std::string_view s) {
    Append(s);
    return *this;
  }

  // The chunk as a string, for encoders that append to one (copies the
  // verbatim prefix the first time).
  std::string& owned() {
    if (!copying_) {
      copy_.assign(base_.data(), verbatim_);
      copying_ = true;
    }
    return copy_;
  }

  // True: the chunk is base's first verbatim_size() bytes (nothing copied).
  bool verbatim() const { return !copying_; }
  size_t verbatim_size() const { return verbatim_; }
  bool empty() const { return copying_ ? copy_.empty() : verbatim_ == 0; }

 private:
  std::string_view base_;
  std::string& copy_;
  size_t verbatim_ = 0;
  bool copying_ = false;
};

class AppOutbox {
 public:
  // Most strings gathered into one write.
  static constexpr size_t kMaxGather = 16;
  using Buffers = std::array<asio::const_buffer, kMaxGather>;

  bool empty() const { return queue_.empty(); }

  // Queues `bytes` (moved; nothing when empty) after everything queued.
  void Push(std::string bytes) {
    if (!bytes.empty()) queue_.push_back(std::move(bytes));
  }

  // The next bytes to write, in order: fills `out` and returns how many
  // entries it used (0: nothing queued). Valid until the next Push or
  // Consume.
  size_t Gather(Buffers& out) const {
    size_t n = 0;
    size_t offset = offset_;
    for (const std::string& s : queue_) {
      if (n == kMaxGather) break;
      out[n++] = asio::const_buffer(s.data() + offset, s.size() - offset);
      offset = 0;
    }
    return n;
  }

  // `n` bytes of what Gather gave were written.
  void Consume(size_t n) {
    while (n > 0 && !queue_.empty()) {
      const size_t left = queue_.front().size() - offset_;
      if (n < left) {
        offset_ += n;
        return;
      }
      n -= left;
      offset_ = 0;
      queue_.pop_front();
    }
  }

  // Drops everything queued (the app is gone).
  void Clear() {
    queue_.clear();
    offset_ = 0;
  }

 private:
  SmallFifo<std::string> queue_;
  size_t offset_ = 0;  // bytes of queue_.front() already written
};

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_APP_OUTBOX_H_
