// In-process links: each direction is a bounded asio concurrent_channel of
// byte chunks. A chunk is moved, never copied, from sender to receiver; the
// channel's completion runs on the receiving coroutine's own executor, so the
// two ends may live on different worker threads ("cross-worker work is a
// post to the owner"). The end of a stream is an empty chunk carrying
// asio::error::eof, so bytes sent just before Close() are never lost.

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <asio/async_result.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/concurrent_channel.hpp>
#include <asio/use_awaitable.hpp>

#include "common/small_fifo.h"
#include "hyperpool/transport.h"

namespace hyperpool {
namespace {

// asio's channel traits with a SmallFifo for the buffer: the default
// std::deque allocates ~576 bytes even while empty, and every link holds two
// channels (common/small_fifo.h).
template <typename... Signatures>
struct FifoChannelTraits : asio::experimental::channel_traits<Signatures...> {
  template <typename... NewSignatures>
  struct rebind {
    using other = FifoChannelTraits<NewSignatures...>;
  };
  template <typename Element>
  struct container {
    using type = SmallFifo<Element>;
  };
};
using Channel = asio::experimental::basic_concurrent_channel<asio::any_io_executor, FifoChannelTraits<>,
                                                             void(asio::error_code, std::string)>;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

struct Pipe {
  Pipe(asio::any_io_executor executor, std::size_t capacity)
      : a_to_b(executor, capacity), b_to_a(executor, capacity) {}
  Channel a_to_b;
  Channel b_to_a;
  // Orders a sender's parking on a full channel against Close() (either
  // end, any thread): a Send parks before the closing cancel() (which wakes
  // it) or starts after close() (and fails at once), never in between.
  std::mutex park_mutex;
};

class InProcessLink final : public Link {
 public:
  InProcessLink(std::shared_ptr<Pipe> pipe, Channel& out, Channel& in)
      : pipe_(std::move(pipe)), out_(out), in_(in) {}
  ~InProcessLink() override { Close(); }

  asio::awaitable<absl::Status> Send(std::string bytes) override {
    if (closed_) co_return absl::CancelledError("link closed");
    if (bytes.empty()) co_return absl::OkStatus();
    auto [ec] = co_await asio::async_initiate<decltype(kAsTuple), void(asio::error_code)>(
        [this](auto handler, std::string chunk) {
          // Channel completions are posted (never run inline), so holding
          // the lock here cannot re-enter it.
          std::lock_guard<std::mutex> lock(pipe_->park_mutex);
          out_.async_send(asio::error_code{}, std::move(chunk), std::move(handler));
        },
        kAsTuple, std::move(bytes));
    if (ec) co_return absl::UnavailableError("link closed by peer");
    co_return absl::OkStatus();
  }

  asio::awaitable<absl::StatusOr<std::size_t>> Receive(std::string& buffer) override {
    if (closed_ || peer_done_) co_return absl::UnavailableError("link closed");
    auto [ec, chunk] = co_await in_.async_receive(kAsTuple);
    if (ec) {
      peer_done_ = true;
      co_return absl::UnavailableError(ec == asio::error::eof ? "link closed by peer" : "link closed");
    }
    std::size_t n = chunk.size();
    if (buffer.empty()) {
      buffer.swap(chunk);  // keeps the chunk's allocation instead of copying
    } else {
      buffer.append(chunk);
    }
    co_return n;
  }

  void Close() override {
    if (closed_.exchange(true)) return;
    std::lock_guard<std::mutex> lock(pipe_->park_mutex);
    // Tell the peer the stream ended after everything already queued; if the
    // queue is full the peer is not reading anyway, so close it outright.
    // A channel's close() completes waiting receivers only: a Send of ours
    // parked on the full queue would wait forever (the Endpoint's Pump did,
    // after a client vanished mid-COPY TO without reading: issue 15), so
    // cancel the waiters first. cancel() must come before close(): once
    // closed, asio no longer tells waiting senders from receivers.
    if (!out_.try_send(asio::error::eof, std::string())) {
      out_.cancel();
      out_.close();
    }
    // Our peer's sends towards us must fail from now on, the ones already
    // waiting for room too (and our own pending Receive, as documented).
    in_.cancel();
    in_.close();
  }

 private:
  std::shared_ptr<Pipe> pipe_;
  Channel& out_;
  Channel& in_;
  std::atomic<bool> closed_{false};  // Close() may come from another thread
  bool peer_done_ = false;
};

class InProcessTransport final : public Transport {
 public:
  explicit InProcessTransport(LinkAcceptor& acceptor) : acceptor_(acceptor) {}

  asio::awaitable<absl::StatusOr<std::unique_ptr<Link>>> Open(asio::any_io_executor executor,
                                                               std::string initial_bytes) override {
    LinkPair pair = MakeInProcessLinkPair(executor, executor);
    // The first chunk is queued before the acceptor sees the link, so the
    // Endpoint's first read returns the hello and the buffered queries at once.
    if (!initial_bytes.empty()) {
      absl::Status sent = co_await pair.first->Send(std::move(initial_bytes));
      if (!sent.ok()) co_return sent;
    }
    acceptor_.Accept(std::move(pair.second));
    co_return std::move(pair.first);
  }

 private:
  LinkAcceptor& acceptor_;
};

}  // namespace

LinkPair MakeInProcessLinkPair(asio::any_io_executor first_executor, asio::any_io_executor second_executor,
                               std::size_t capacity) {
  // Channels complete on the awaiting coroutine's executor; the one given to
  // the channel only serves operations that have no executor of their own.
  auto pipe = std::make_shared<Pipe>(first_executor, capacity);
  LinkPair pair;
  pair.first = std::make_unique<InProcessLink>(pipe, pipe->a_to_b, pipe->b_to_a);
  pair.second = std::make_unique<InProcessLink>(pipe, pipe->b_to_a, pipe->a_to_b);
  (void)second_executor;
  return pair;
}

std::unique_ptr<Transport> MakeInProcessTransport(LinkAcceptor& acceptor) {
  return std::make_unique<InProcessTransport>(acceptor);
}

}  // namespace hyperpool
