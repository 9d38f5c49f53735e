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
// they came (ExtendedSession::OnBackend). While every frame appended lies
// in the buffer after the ones before it, nothing is copied: the chunk is
// up to kMaxSegments ranges of the buffer (frames left out between them:
// the cache's control frames, which the Client consumes), which the caller
// then queues itself (CompactTo on the buffer, moved: the ranges are moved
// together in place). A frame changed or added, one out of order, or a
// range past kMaxSegments turns it into a copy, exactly as an append to a
// string would have built it.
#ifndef HYPERPOOL_CLIENT_APP_OUTBOX_H_
#define HYPERPOOL_CLIENT_APP_OUTBOX_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include <asio/buffer.hpp>

#include "common/small_fifo.h"

namespace hyperpool::client {

class AppBytes {
 public:
  // Ranges of the buffer one chunk may be made of before it is copied.
  static constexpr size_t kMaxSegments = 4;

  // Always copies, into `copy` (appended to what it holds).
  explicit AppBytes(std::string& copy) : copy_(copy), copying_(true) {}
  // Counts ranges of `base` while it can; `copy` (empty) receives the bytes
  // once they are no longer ranges of it.
  AppBytes(std::string_view base, std::string& copy) : base_(base), copy_(copy) {}

  AppBytes(const AppBytes&) = delete;
  AppBytes& operator=(const AppBytes&) = delete;

  void Append(std::string_view s) {
    if (s.empty()) return;
    // (Compared as addresses: `s` may lie in another buffer.)
    const auto from = reinterpret_cast<std::uintptr_t>(s.data());
    const auto base = reinterpret_cast<std::uintptr_t>(base_.data());
    if (!copying_ && from >= base + end_ && from - base <= base_.size() && s.size() <= base_.size() - (from - base)) {
      const size_t at = static_cast<size_t>(from - base);
      if (segments_ > 0 && at == end_) {
        segment_[segments_ - 1].size += s.size();  // the next frame: the range grows
        verbatim_ += s.size();
        end_ += s.size();
        return;
      }
      if (segments_ < kMaxSegments) {
        segment_[segments_++] = Segment{at, s.size()};
        verbatim_ += s.size();
        end_ = at + s.size();
        return;
      }
    }
    owned().append(s);
  }
  AppBytes& operator+=(std::string_view s) {
    Append(s);
    return *this;
  }

  // The chunk as a string, for encoders that append to one (copies the
  // ranges the first time).
  std::string& owned() {
    if (!copying_) {
      copy_.clear();
      AppendRanges(copy_);
      copying_ = true;
    }
    return copy_;
  }

  // True: the chunk is verbatim_size() bytes of base, in its ranges
  // (nothing copied).
  bool verbatim() const { return !copying_; }
  size_t verbatim_size() const { return verbatim_; }
  // Where the last range ends in base (0: none).
  size_t verbatim_end() const { return end_; }
  bool empty() const { return copying_ ? copy_.empty() : verbatim_ == 0; }

  // `chunk` holds base's bytes (base's string, moved: the same offsets):
  // its ranges are moved to the front and the rest cut off, so it is the
  // chunk (verbatim() only).
  void CompactTo(std::string& chunk) const {
    size_t to = 0;
    for (size_t i = 0; i < segments_; ++i) {
      if (segment_[i].at != to) std::memmove(chunk.data() + to, chunk.data() + segment_[i].at, segment_[i].size);
      to += segment_[i].size;
    }
    chunk.resize(to);
  }
  // The chunk, copied out of base (verbatim() only).
  std::string Gathered() const {
    std::string out;
    out.reserve(verbatim_);
    AppendRanges(out);
    return out;
  }

 private:
  struct Segment {
    size_t at = 0;
    size_t size = 0;
  };
  void AppendRanges(std::string& out) const {
    for (size_t i = 0; i < segments_; ++i) out.append(base_.data() + segment_[i].at, segment_[i].size);
  }

  std::string_view base_;
  std::string& copy_;
  std::array<Segment, kMaxSegments> segment_{};
  size_t segments_ = 0;
  size_t verbatim_ = 0;  // bytes in the ranges
  size_t end_ = 0;       // where the last range ends in base
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

  // An empty outbox gives its queue's storage back (the idle sweep: an
  // idle session keeps none).
  void ReleaseIfEmpty() {
    if (queue_.empty()) queue_.release();
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
